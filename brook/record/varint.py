"""Zig-zag varints and varlongs, as the record format uses them (seed 001, section 5.3.2).

Kafka encodes every signed length, delta and count inside a record the way Protobuf encodes
``sint32`` / ``sint64``: zig-zag, then base-128 little-endian groups. A varint must fit in
int32 (at most 5 bytes), a varlong in int64 (at most 10 bytes); anything longer or wider is
corrupt input, never silently truncated.
"""

from __future__ import annotations

from brook.record.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
VARINT_BYTES_MAX = 5
VARLONG_BYTES_MAX = 10


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (int32) to ``out`` as a zig-zag varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in int32")
    _write_unsigned((value << 1) ^ (value >> 31), out)


def write_varlong(value: int, out: bytearray) -> None:
    """Append ``value`` (int64) to ``out`` as a zig-zag varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in int64")
    _write_unsigned((value << 1) ^ (value >> 63), out)


def size_of_varint(value: int) -> int:
    """Bytes that ``write_varint`` / ``write_varlong`` would use for ``value``."""
    unsigned = (value << 1) ^ (value >> 63)
    size = 1
    while unsigned > 0x7F:
        unsigned >>= 7
        size += 1
    return size


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode an int32 zig-zag varint at ``buf[pos]``; return ``(value, next_pos)``."""
    if pos < len(buf):
        first = buf[pos]
        if first < 0x80:
            # Most lengths and deltas in a batch are below 64: one byte, no loop.
            return (first >> 1) ^ -(first & 1), pos + 1
    unsigned, pos = _read_unsigned(buf, pos, VARINT_BYTES_MAX, "varint")
    if unsigned >> 32:
        raise CorruptRecordError(f"varint ending at byte {pos} does not fit in int32")
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode an int64 zig-zag varlong at ``buf[pos]``; return ``(value, next_pos)``."""
    unsigned, pos = _read_unsigned(buf, pos, VARLONG_BYTES_MAX, "varlong")
    if unsigned >> 64:
        raise CorruptRecordError(f"varlong ending at byte {pos} does not fit in int64")
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def _write_unsigned(unsigned: int, out: bytearray) -> None:
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)


def _read_unsigned(buf: Buffer, pos: int, bytes_max: int, kind: str) -> tuple[int, int]:
    end = len(buf)
    result = 0
    shift = 0
    for _ in range(bytes_max):
        if pos >= end:
            raise CorruptRecordError(f"{kind} truncated at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise CorruptRecordError(f"{kind} ending at byte {pos} is longer than {bytes_max} bytes")
