"""The records the coordinator writes to __consumer_offsets, and their encoding.

Kafka's idea, Brook's bytes. Every record is keyed so that log compaction keeps exactly the
latest state of each thing: an offset commit is keyed by (group, topic, partition), a group's
metadata by the group id; a record with no value (a tombstone) deletes the key.

Key:   u16 kind (1 = offset commit, 2 = group metadata: Kafka's key versions 1 and 2), then
       each field as u16 length + UTF-8 bytes, and for an offset commit the partition as a
       big-endian i32. Kind 3 is the fence a coordinator appends when it takes a partition over
       (the key alone; ``fencing.py``): it carries no state and loading skips it. Brook's own
       kinds for transactions (Kafka writes them as transactional batches and control
       batches instead; docs/decisions.md, "Transactional offsets in the group coordinator"):
       4 = a pending transactional offset (group, producer id as a big-endian i64, topic,
       partition), 5 = the end of a producer's transaction for a group (group, producer id).
       Loading skips a kind it does not know with a warning, as Kafka's loader does ("Unknown
       record type ... Ignoring it. It could be a left over from an aborted upgrade"), so a
       newer coordinator's records never keep an older one from serving the partition.
Value: UTF-8 JSON object with "v": 1 (so a later version can add fields and still read old
       ones). Offsets: offset, leader_epoch, metadata, commit_timestamp_ms, and for an offset
       a committed transaction made the group's, txn_record_offset: where its pending record
       is in the log (which commit is the most recent, Kafka's rule; absent otherwise). Group:
       the protocol type and name, generation, leader, when the state last changed, and every
       member with its timeouts, subscription and assignment (base64). Pending transactional
       offset: producer_epoch and the offset's fields. Transaction end: producer_epoch,
       coordinator_epoch and committed (true: commit, false: abort).
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FENCE_KEY",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "PendingOffsetKey",
    "PendingOffsetValue",
    "RecordFormatError",
    "TxnEndKey",
    "TxnEndValue",
    "UnknownRecordKindError",
    "decode_key",
    "decode_value",
    "encode_fence_value",
    "encode_key",
    "encode_value",
]

KIND_OFFSET_COMMIT = 1
KIND_GROUP_METADATA = 2
KIND_FENCE = 3
KIND_PENDING_OFFSET = 4
KIND_TXN_END = 5
VALUE_VERSION = 1
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A __consumer_offsets record this coordinator cannot read."""


class UnknownRecordKindError(RecordFormatError):
    """A key of a kind this coordinator does not know (a newer version wrote it)."""

    def __init__(self, kind: int) -> None:
        super().__init__(f"unknown key kind {kind}")
        self.kind = kind


FENCE_KEY = _U16.pack(KIND_FENCE)


def encode_fence_value(coordinator_epoch: int) -> bytes:
    """Only for whoever reads the log by hand: which epoch fenced the partition."""
    return json.dumps(
        {"v": VALUE_VERSION, "coordinator_epoch": coordinator_epoch}, separators=(",", ":")
    ).encode("utf-8")


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class PendingOffsetKey:
    group_id: str
    producer_id: int
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnEndKey:
    group_id: str
    producer_id: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    # Set when a committed transaction wrote it: the log offset of its pending record.
    txn_record_offset: int | None = None


@dataclass(frozen=True, slots=True)
class PendingOffsetValue:
    producer_epoch: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class TxnEndValue:
    producer_epoch: int
    coordinator_epoch: int
    committed: bool


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader_id: str
    state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


Key = OffsetCommitKey | GroupMetadataKey | PendingOffsetKey | TxnEndKey
Value = OffsetCommitValue | GroupMetadataValue | PendingOffsetValue | TxnEndValue


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _U16.pack(len(data)) + data


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return (
            _U16.pack(KIND_OFFSET_COMMIT)
            + _string(key.group_id)
            + _string(key.topic)
            + _I32.pack(key.partition)
        )
    if isinstance(key, PendingOffsetKey):
        return (
            _U16.pack(KIND_PENDING_OFFSET)
            + _string(key.group_id)
            + _I64.pack(key.producer_id)
            + _string(key.topic)
            + _I32.pack(key.partition)
        )
    if isinstance(key, TxnEndKey):
        return _U16.pack(KIND_TXN_END) + _string(key.group_id) + _I64.pack(key.producer_id)
    return _U16.pack(KIND_GROUP_METADATA) + _string(key.group_id)


class _KeyReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 2

    def string(self) -> str:
        (length,) = _U16.unpack_from(self.data, self.position)
        self.position += 2
        raw = self.data[self.position : self.position + length]
        if len(raw) != length:
            raise RecordFormatError("key truncated")
        self.position += length
        return raw.decode("utf-8")

    def number(self, layout: struct.Struct) -> int:
        (value,) = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return int(value)


def decode_key(data: bytes) -> Key:
    try:
        (kind,) = _U16.unpack_from(data, 0)
        reader = _KeyReader(data)
        key: Key
        if kind == KIND_OFFSET_COMMIT:
            key = OffsetCommitKey(reader.string(), reader.string(), reader.number(_I32))
        elif kind == KIND_GROUP_METADATA:
            key = GroupMetadataKey(reader.string())
        elif kind == KIND_PENDING_OFFSET:
            key = PendingOffsetKey(
                reader.string(), reader.number(_I64), reader.string(), reader.number(_I32)
            )
        elif kind == KIND_TXN_END:
            key = TxnEndKey(reader.string(), reader.number(_I64))
        else:
            raise UnknownRecordKindError(kind)
    except (struct.error, UnicodeDecodeError) as e:
        raise RecordFormatError(f"malformed key: {e}") from e
    if reader.position != len(data):
        raise RecordFormatError("trailing bytes after the key")
    return key


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _offset_body(value: OffsetCommitValue | PendingOffsetValue) -> dict[str, Any]:
    return {
        "v": VALUE_VERSION,
        "offset": value.offset,
        "leader_epoch": value.leader_epoch,
        "metadata": value.metadata,
        "commit_timestamp_ms": value.commit_timestamp_ms,
    }


def _offset_fields(body: dict[str, Any]) -> tuple[int, int, str, int]:
    """offset, leader_epoch, metadata, commit_timestamp_ms."""
    return (
        int(body["offset"]),
        int(body["leader_epoch"]),
        str(body["metadata"]),
        int(body["commit_timestamp_ms"]),
    )


def encode_value(value: Value) -> bytes:
    body: dict[str, Any]
    if isinstance(value, OffsetCommitValue):
        body = _offset_body(value)
        if value.txn_record_offset is not None:
            body["txn_record_offset"] = value.txn_record_offset
    elif isinstance(value, PendingOffsetValue):
        body = {**_offset_body(value), "producer_epoch": value.producer_epoch}
    elif isinstance(value, TxnEndValue):
        body = {
            "v": VALUE_VERSION,
            "producer_epoch": value.producer_epoch,
            "coordinator_epoch": value.coordinator_epoch,
            "committed": value.committed,
        }
    else:
        body = {
            "v": VALUE_VERSION,
            "protocol_type": value.protocol_type,
            "protocol_name": value.protocol_name,
            "generation_id": value.generation_id,
            "leader_id": value.leader_id,
            "state_timestamp_ms": value.state_timestamp_ms,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_timeout_ms": m.session_timeout_ms,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "subscription": _b64(m.subscription),
                    "assignment": _b64(m.assignment),
                }
                for m in value.members
            ],
        }
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_value(key: Key, data: bytes) -> Value:
    try:
        body = json.loads(data.decode("utf-8"))
        if not isinstance(body, dict) or body.get("v") != VALUE_VERSION:
            raise RecordFormatError("unknown value version")
        if isinstance(key, OffsetCommitKey):
            txn_record_offset = body.get("txn_record_offset")
            return OffsetCommitValue(
                *_offset_fields(body),
                txn_record_offset=None if txn_record_offset is None else int(txn_record_offset),
            )
        if isinstance(key, PendingOffsetKey):
            return PendingOffsetValue(int(body["producer_epoch"]), *_offset_fields(body))
        if isinstance(key, TxnEndKey):
            committed = body["committed"]
            if not isinstance(committed, bool):
                raise RecordFormatError("committed is not a boolean")
            return TxnEndValue(
                producer_epoch=int(body["producer_epoch"]),
                coordinator_epoch=int(body["coordinator_epoch"]),
                committed=committed,
            )
        return GroupMetadataValue(
            protocol_type=str(body["protocol_type"]),
            protocol_name=str(body["protocol_name"]),
            generation_id=int(body["generation_id"]),
            leader_id=str(body["leader_id"]),
            state_timestamp_ms=int(body["state_timestamp_ms"]),
            members=tuple(
                MemberMetadata(
                    member_id=str(m["member_id"]),
                    group_instance_id=(
                        None if m["group_instance_id"] is None else str(m["group_instance_id"])
                    ),
                    client_id=str(m["client_id"]),
                    client_host=str(m["client_host"]),
                    session_timeout_ms=int(m["session_timeout_ms"]),
                    rebalance_timeout_ms=int(m["rebalance_timeout_ms"]),
                    subscription=base64.b64decode(m["subscription"], validate=True),
                    assignment=base64.b64decode(m["assignment"], validate=True),
                )
                for m in body["members"]
            ),
        )
    except RecordFormatError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise RecordFormatError(f"malformed value: {e}") from e
