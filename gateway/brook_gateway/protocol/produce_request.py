"""A Produce request (v3-v10) read straight off the frame: the gateway's busiest request, whose
generic decoding (codec.py: a reader function per field, a dict per struct) cost about a fifth
of its CPU under librdkafka's load (bench/README.md, issue #19).

``read_produce_request`` gives exactly what the generic codec gives for the same frame, or None
when the frame has anything it does not take on: tagged fields, a null where none may be, bytes
that run out, text that is not UTF-8. The caller then decodes the frame the generic way, which
reads it or names the fault, so this path never decides what is malformed.
"""

from __future__ import annotations

import struct
from typing import Final

from brook_gateway.protocol.codec import Message

__all__ = ["PRODUCE_FAST_VERSIONS", "read_produce_request"]

# Produce v3 brought transactional_id (RecordBatch v2); v9 the flexible encoding; v10 only new
# response fields. Older versions go the generic way (they carry MessageSets, converted later).
PRODUCE_FAST_VERSIONS: Final = range(3, 11)
_FLEXIBLE_MIN: Final = 9
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_HEAD = struct.Struct(">hhih").unpack_from  # api key, version, correlation id, client id length
_LIMITS = struct.Struct(">hi").unpack_from  # acks, timeout_ms


class _Unsupported(Exception):
    """Something the generic decoder must look at."""


def read_produce_request(frame: bytes) -> tuple[int, str | None, Message] | None:
    """(correlation id, client id, body) of a Produce v3-v10 request frame (no size prefix);
    None to decode it the generic way."""
    try:
        return _read(frame)
    except (_Unsupported, struct.error, IndexError, UnicodeDecodeError):
        return None


def _read(frame: bytes) -> tuple[int, str | None, Message]:
    _, version, correlation_id, size = _HEAD(frame, 0)
    if version not in PRODUCE_FAST_VERSIONS:
        raise _Unsupported
    pos = 10
    client_id = None
    if size >= 0:
        client_id = _text(frame, pos, size)
        pos += size
    elif size != -1:
        raise _Unsupported
    if version >= _FLEXIBLE_MIN:
        return correlation_id, client_id, _read_flexible(frame, _no_tags(frame, pos))
    return correlation_id, client_id, _read_classic(frame, pos)


def _read_classic(frame: bytes, pos: int) -> Message:
    (size,) = _I16(frame, pos)
    pos += 2
    transactional_id = None
    if size >= 0:
        transactional_id = _text(frame, pos, size)
        pos += size
    elif size != -1:
        raise _Unsupported
    acks, timeout_ms = _LIMITS(frame, pos)
    pos += 6
    (topics,) = _I32(frame, pos)
    pos += 4
    _check_count(frame, pos, topics)
    topic_data = []
    for _ in range(topics):
        (size,) = _I16(frame, pos)
        pos += 2
        if size < 0:
            raise _Unsupported
        name = _text(frame, pos, size)
        pos += size
        (partitions,) = _I32(frame, pos)
        pos += 4
        _check_count(frame, pos, partitions)
        partition_data = []
        for _ in range(partitions):
            index, size = struct.unpack_from(">ii", frame, pos)
            pos += 8
            records = None
            if size >= 0:
                records = _bytes(frame, pos, size)
                pos += size
            elif size != -1:
                raise _Unsupported
            partition_data.append({"index": index, "records": records})
        topic_data.append({"name": name, "partition_data": partition_data})
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": topic_data,
    }


def _read_flexible(frame: bytes, pos: int) -> Message:
    size, pos = _uvarint(frame, pos)
    transactional_id = None
    if size > 0:
        transactional_id = _text(frame, pos, size - 1)
        pos += size - 1
    acks, timeout_ms = _LIMITS(frame, pos)
    pos += 6
    topics, pos = _uvarint(frame, pos)
    topics -= 1
    _check_count(frame, pos, topics)
    topic_data = []
    for _ in range(topics):
        size, pos = _uvarint(frame, pos)
        if size == 0:
            raise _Unsupported
        name = _text(frame, pos, size - 1)
        pos += size - 1
        partitions, pos = _uvarint(frame, pos)
        partitions -= 1
        _check_count(frame, pos, partitions)
        partition_data = []
        for _ in range(partitions):
            (index,) = _I32(frame, pos)
            size, pos = _uvarint(frame, pos + 4)
            records = None
            if size > 0:
                records = _bytes(frame, pos, size - 1)
                pos += size - 1
            partition_data.append({"index": index, "records": records})
            pos = _no_tags(frame, pos)
        topic_data.append({"name": name, "partition_data": partition_data})
        pos = _no_tags(frame, pos)
    _no_tags(frame, pos)
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": topic_data,
    }


def _check_count(frame: bytes, pos: int, count: int) -> None:
    # A null array (or a count the bytes cannot hold): the generic decoder says which.
    if count < 0 or count > len(frame) - pos:
        raise _Unsupported


def _text(frame: bytes, pos: int, size: int) -> str:
    if pos + size > len(frame):
        raise _Unsupported
    return frame[pos : pos + size].decode("utf-8")


def _bytes(frame: bytes, pos: int, size: int) -> bytes:
    if pos + size > len(frame):
        raise _Unsupported
    return frame[pos : pos + size]


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it); lengths under 128 take the first branch."""
    byte = frame[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    shift = 7
    for i in range(1, 5):
        byte = frame[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value > 0xFFFFFFFF:
                raise _Unsupported
            return value, pos + i + 1
        shift += 7
    raise _Unsupported


def _no_tags(frame: bytes, pos: int) -> int:
    """The position after an empty tagged-field section; tagged fields go the generic way."""
    if frame[pos] != 0:
        raise _Unsupported
    return pos + 1
