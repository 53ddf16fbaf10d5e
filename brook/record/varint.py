"""Zig-zag varints and varlongs, as the record format uses them (seed 001, section 5.3.2).

Kafka encodes every signed length, delta and count inside a record the way Protobuf encodes
``sint32`` / ``sint64``: zig-zag, then base-128 little-endian groups. A varint must fit in
int32 (at most 5 bytes), a varlong in int64 (at most 10 bytes); anything longer or wider is
corrupt input, never silently truncated.

Both directions have a fast path for what a record is made of: lengths, deltas and counts
below ``VARINT_TABLE_SIZE`` are encoded by a table look-up, and one- and two-byte values are
decoded without a loop (``records`` inlines the same fast paths in its per-record loops).
"""

from __future__ import annotations

from typing import Final

from brook.record.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
VARINT_BYTES_MAX: Final = 5
VARLONG_BYTES_MAX: Final = 10
# Encodings of 0 .. VARINT_TABLE_SIZE-1 are precomputed: every length, delta and count of a
# typical record is below it, and a tuple look-up is ~10x cheaper than encoding.
VARINT_TABLE_SIZE: Final = 4096


def _zigzag_bytes(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


VARINTS: Final[tuple[bytes, ...]] = tuple(_zigzag_bytes(n) for n in range(VARINT_TABLE_SIZE))


def encode_varint(value: int) -> bytes:
    """``value`` (int64 range) as a zig-zag varint/varlong, the record format's encoding."""
    if 0 <= value < VARINT_TABLE_SIZE:
        return VARINTS[value]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit in int64")
    return _zigzag_bytes(value)


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (int32) to ``out`` as a zig-zag varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in int32")
    out += encode_varint(value)


def write_varlong(value: int, out: bytearray) -> None:
    """Append ``value`` (int64) to ``out`` as a zig-zag varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in int64")
    out += encode_varint(value)


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
    return _read_zigzag(buf, pos, VARINT_BYTES_MAX, 32, "varint")


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode an int64 zig-zag varlong at ``buf[pos]``; return ``(value, next_pos)``."""
    return _read_zigzag(buf, pos, VARLONG_BYTES_MAX, 64, "varlong")


def _read_zigzag(buf: Buffer, pos: int, bytes_max: int, bits: int, kind: str) -> tuple[int, int]:
    end = len(buf)
    if pos < end:
        first = buf[pos]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), pos + 1
        if pos + 1 < end:
            second = buf[pos + 1]
            if second < 0x80:
                unsigned = (first & 0x7F) | (second << 7)
                return (unsigned >> 1) ^ -(unsigned & 1), pos + 2
    unsigned, pos = _read_unsigned(buf, pos, bytes_max, kind)
    if unsigned >> bits:
        raise CorruptRecordError(f"{kind} ending at byte {pos} does not fit in int{bits}")
    return (unsigned >> 1) ^ -(unsigned & 1), pos


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
