"""The commands the controller appends to the Raft log, and their byte encoding.

A command is a decision taken on the leader: the metadata records to append, plus
preconditions naming the objects of the image the decision was computed from and a digest of
their state at that time. The state machine applies the records only if every precondition
still holds (compare-and-set), so two decisions computed from the same state cannot both
apply, and a decision never lands on a state it was not made for. Each command also carries a
request id (applying the same command twice is a no-op that reports the first outcome) and the
Raft term of the controller that proposed it (a command from a deposed leader is refused once a
newer leader's command has been applied).

A no-op command carries no records: the leader appends one on becoming leader and before
serving a read, so that what it answers reflects everything committed before the read began.

Encoding (big-endian)::

    u8 format (1) | u8 kind | u64 term | 16 bytes request id
    u32 n | n x (u16 key length, key utf-8, 32 bytes sha-256 of the object's state)
    u32 m | m x (u32 length, MetadataRecord bytes)
"""

from __future__ import annotations

import enum
import hashlib
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from brook.v1 import metadata_pb2

__all__ = ["Command", "CommandKind", "decode_command", "encode_command", "state_digest"]

FORMAT: Final = 1
_HEADER: Final = struct.Struct(">BBQ16s")
_COUNT: Final = struct.Struct(">I")
_KEY_LENGTH: Final = struct.Struct(">H")
_DIGEST_BYTES: Final = 32


class CommandKind(enum.IntEnum):
    RECORDS = 1
    NO_OP = 2


def state_digest(version: bytes) -> bytes:
    """The 32-byte digest of an object's state (``ControllerImage.version``) a precondition
    carries: fixed-size whatever the object, so commands stay small."""
    return hashlib.sha256(version).digest()


@dataclass(frozen=True)
class Command:
    kind: CommandKind
    term: int
    request_id: bytes = field(default_factory=lambda: uuid.uuid4().bytes)
    # Object key -> digest of the state the decision was computed from.
    preconditions: Mapping[str, bytes] = field(default_factory=dict)
    records: Sequence[metadata_pb2.MetadataRecord] = ()


def encode_command(command: Command) -> bytes:
    if len(command.request_id) != 16:
        raise ValueError("a request id is 16 bytes")
    parts = [
        _HEADER.pack(FORMAT, command.kind, command.term, command.request_id),
        _COUNT.pack(len(command.preconditions)),
    ]
    for key in sorted(command.preconditions):
        digest = command.preconditions[key]
        if len(digest) != _DIGEST_BYTES:
            raise ValueError(f"the precondition on {key} is not a {_DIGEST_BYTES}-byte digest")
        encoded_key = key.encode()
        parts += [_KEY_LENGTH.pack(len(encoded_key)), encoded_key, digest]
    parts.append(_COUNT.pack(len(command.records)))
    for record in command.records:
        data = record.SerializeToString(deterministic=True)
        parts += [_COUNT.pack(len(data)), data]
    return b"".join(parts)


def decode_command(data: bytes) -> Command:
    """Raises ValueError for anything that is not a complete, well-formed command."""
    view = memoryview(data)
    position = 0

    def take(size: int) -> memoryview:
        nonlocal position
        if position + size > len(view):
            raise ValueError(f"command truncated at byte {position} (wanted {size} more)")
        chunk = view[position : position + size]
        position += size
        return chunk

    version, kind, term, request_id = _HEADER.unpack(take(_HEADER.size))
    if version != FORMAT:
        raise ValueError(f"command format {version} is not {FORMAT}")
    try:
        command_kind = CommandKind(kind)
    except ValueError:
        raise ValueError(f"unknown command kind {kind}") from None
    preconditions: dict[str, bytes] = {}
    (count,) = _COUNT.unpack(take(_COUNT.size))
    for _ in range(count):
        (key_length,) = _KEY_LENGTH.unpack(take(_KEY_LENGTH.size))
        try:
            key = bytes(take(key_length)).decode()
        except UnicodeDecodeError:
            raise ValueError("a precondition key is not UTF-8") from None
        preconditions[key] = bytes(take(_DIGEST_BYTES))
    records = []
    (count,) = _COUNT.unpack(take(_COUNT.size))
    for _ in range(count):
        (length,) = _COUNT.unpack(take(_COUNT.size))
        record = metadata_pb2.MetadataRecord()
        try:
            record.ParseFromString(bytes(take(length)))
        except Exception as error:  # protobuf's DecodeError, or anything from a corrupt input
            raise ValueError(f"a record does not parse: {error}") from None
        records.append(record)
    if position != len(view):
        raise ValueError(f"{len(view) - position} bytes after the end of the command")
    return Command(command_kind, term, bytes(request_id), preconditions, tuple(records))
