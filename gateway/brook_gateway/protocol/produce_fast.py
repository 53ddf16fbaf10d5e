"""Produce (v3-v10), the gateway's busiest request, read straight off its frame and answered
straight into one: the generic codec (codec.py: a function per field, a dict per struct) cost
about a fifth of the gateway's CPU reading and a tenth writing under librdkafka's load
(bench/README.md, issue #19).

``read_produce_request`` gives exactly what the generic codec gives for the same frame, or None
when the frame has anything it does not take on: tagged fields, a null where none may be, bytes
that run out, text that is not UTF-8. The caller then decodes the frame the generic way, which
reads it or names the fault, so this path never decides what is malformed.

``write_produce_response`` gives exactly the generic codec's frame for the common answer (every
field given, no record errors, no leader hints), or None for anything else, which the generic
codec then writes (or refuses).
"""

from __future__ import annotations

import struct
from typing import Final

from brook_gateway.protocol.codec import Message

__all__ = ["PRODUCE_FAST_VERSIONS", "read_produce_request", "write_produce_response"]

# Produce v3 brought transactional_id (RecordBatch v2); v9 the flexible encoding; v10 only new
# response fields. Older versions go the generic way (they carry MessageSets, converted later).
PRODUCE_FAST_VERSIONS: Final = range(3, 11)
_FLEXIBLE_MIN: Final = 9
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_HEAD = struct.Struct(">hhih").unpack_from  # api key, version, correlation id, client id length
_LIMITS = struct.Struct(">hi").unpack_from  # acks, timeout_ms
_FRAME_HEAD = struct.Struct(">ii").pack  # size, correlation id
# index, error_code, base_offset, log_append_time_ms (v2+)
_PARTITION = struct.Struct(">ihqq").pack
_INT64 = struct.Struct(">q").pack
_INT32 = struct.Struct(">i").pack
_INT16 = struct.Struct(">h").pack
_PARTITION_KEYS: Final = frozenset(
    {"index", "error_code", "base_offset", "log_append_time_ms", "log_start_offset"}
    | {"record_errors", "error_message"}
)
_LOG_START_MIN: Final = 5  # log_start_offset from v5
_ERRORS_MIN: Final = 8  # record_errors and error_message from v8
_RESPONSE_KEYS: Final = frozenset({"responses", "throttle_time_ms", "node_endpoints"})
_TOPIC_KEYS: Final = frozenset({"name", "partition_responses"})


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


def write_produce_response(version: int, correlation_id: int, body: Message) -> bytearray | None:
    """The whole response frame (size prefix included) for Produce v3-v10, or None to write it
    the generic way."""
    if version not in PRODUCE_FAST_VERSIONS:
        return None
    try:
        return _write(version, correlation_id, body)
    except (_Unsupported, struct.error, KeyError, TypeError, AttributeError, UnicodeError):
        return None


def _write(version: int, correlation_id: int, body: Message) -> bytearray:
    flexible = version >= _FLEXIBLE_MIN
    if not _RESPONSE_KEYS.issuperset(body) or body.get("node_endpoints", []) != []:
        raise _Unsupported  # leader hints (v10's tagged field), or keys the schema lacks
    # The fields this version writes (the generic codec ignores the others); all must be given.
    required = {"index", "error_code", "base_offset", "log_append_time_ms"}
    if version >= _LOG_START_MIN:
        required.add("log_start_offset")
    if version >= _ERRORS_MIN:
        required |= {"record_errors", "error_message"}
    out = bytearray(_FRAME_HEAD(0, correlation_id))
    if flexible:
        out.append(0)  # the response header's tagged fields
    topics = body["responses"]
    _length(out, len(topics), flexible)
    for topic in topics:
        if type(topic) is not dict or not _TOPIC_KEYS.issuperset(topic):
            raise _Unsupported
        name = topic["name"].encode("utf-8")
        if not flexible and len(name) > 0x7FFF:
            raise _Unsupported
        _length(out, len(name), flexible, short=True)
        out += name
        partitions = topic["partition_responses"]
        _length(out, len(partitions), flexible)
        for p in partitions:
            if type(p) is not dict or not required <= p.keys() <= _PARTITION_KEYS:
                raise _Unsupported  # a default to fill in, or a leader hint
            index = p["index"]
            error_code = p["error_code"]
            base_offset = p["base_offset"]
            append_time_ms = p["log_append_time_ms"]
            for value in (index, error_code, base_offset, append_time_ms):
                if type(value) is not int:
                    raise _Unsupported
            out += _PARTITION(index, error_code, base_offset, append_time_ms)
            if version >= _LOG_START_MIN:
                start_offset = p["log_start_offset"]
                if type(start_offset) is not int:
                    raise _Unsupported
                out += _INT64(start_offset)
            if version >= _ERRORS_MIN:
                if p["record_errors"] != []:
                    raise _Unsupported
                _length(out, 0, flexible)
                _nullable_text(out, p["error_message"], flexible)
            if flexible:
                out.append(0)  # the partition's tagged fields
        if flexible:
            out.append(0)  # the topic's tagged fields
    throttle_time_ms = body.get("throttle_time_ms", 0)
    if type(throttle_time_ms) is not int:
        raise _Unsupported
    out += _INT32(throttle_time_ms)
    if flexible:
        out.append(0)  # the body's tagged fields
    out[0:4] = _INT32(len(out) - 4)
    return out


def _length(out: bytearray, size: int, flexible: bool, *, short: bool = False) -> None:
    """An array count or a string length (``short``: int16 in the classic encoding)."""
    if flexible:
        _write_uvarint(out, size + 1)
    else:
        out += _INT16(size) if short else _INT32(size)


def _nullable_text(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += _INT16(-1)
        return
    if type(value) is not str:
        raise _Unsupported
    data = value.encode("utf-8")
    if not flexible and len(data) > 0x7FFF:
        raise _Unsupported
    _length(out, len(data), flexible, short=True)
    out += data


def _write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
