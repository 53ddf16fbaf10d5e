"""The MessageSet formats before RecordBatch (message format v0 and v1, seed 001 section 5.3's
"old message format"), read only to be converted: Brook stores RecordBatch v2 alone.

A producer that believes the broker is older than 0.11 (librdkafka with
``broker.version.fallback`` below 0.11 and ``api.version.request=false``) sends Produce v0-2
with a MessageSet; the gateway converts it to one v2 batch per partition, as Kafka 3.x's broker
converts such appends. Each message is checked against its CRC-32; a compressed wrapper's inner
messages (one level deep, as the format allows) become the batch's records, and the batch is
compressed with the wrapper's codec. Magic 0 messages have no timestamp: they get the time of
conversion (RecordBatch v2 timestamps are never negative here), as does a magic 1 message
without one.

    message set := (offset: int64, size: int32, message)*
    message     := crc: uint32, magic: int8, attributes: int8, [timestamp: int64 (magic 1)],
                   key: int32-length bytes (-1: null), value: int32-length bytes (-1: null)
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Final

from brook.record.batch import Buffer, Compression, TimestampType
from brook.record.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompress
from brook.record.errors import CorruptRecordError, InvalidRecordError
from brook.record.records import BatchBuilder

__all__ = ["message_set_to_batch"]

_ENTRY_HEAD: Final = struct.Struct(">qi")  # offset, message size
_MESSAGE_HEAD: Final = struct.Struct(">Ibb")  # crc, magic, attributes
_TIMESTAMP: Final = struct.Struct(">q")
_LENGTH: Final = struct.Struct(">i")
_CODEC_MASK: Final = 0x07
_LOG_APPEND_TIME_MASK: Final = 0x08
# The smallest message: crc, magic, attributes, null key, null value.
_MESSAGE_BYTES_MIN: Final = _MESSAGE_HEAD.size + 2 * _LENGTH.size


def message_set_to_batch(
    data: Buffer,
    *,
    now_ms: int | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """One uncompressed-or-wrapper-codec v2 batch with the records of the MessageSet
    ``data``. Raises CorruptRecordError for a damaged set (bad CRC, truncated message, a
    compressed message inside a compressed one) and InvalidRecordError for an empty one or
    one with more records than a batch holds; RecordTooLargeError when the wrappers together
    decompress to more than ``max_decompressed_bytes`` (the limit is the whole set's, not each
    wrapper's: a small request of many wrappers must not expand without bound)."""
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    codec = Compression.NONE
    records: list[tuple[int, bytes | None, bytes | None]] = []
    decompressed_left = max_decompressed_bytes
    for magic, attributes, timestamp, key, value in _messages(memoryview(data)):
        message_codec = attributes & _CODEC_MASK
        if message_codec == 0:
            records.append((timestamp if timestamp >= 0 else now_ms, key, value))
            continue
        codec = _codec(message_codec)
        if value is None:
            raise CorruptRecordError("a compressed message has no value")
        if magic == 0 and codec is Compression.LZ4:
            value = _lz4_header_checksum_fixed(value)
        inner = decompress(codec, value, max_decompressed_bytes=decompressed_left)
        decompressed_left -= len(inner)
        # A v1 wrapper with LogAppendTime sets the time of all its messages.
        wrapper_time = timestamp if magic == 1 and attributes & _LOG_APPEND_TIME_MASK else -1
        for _, inner_attributes, inner_timestamp, inner_key, inner_value in _messages(
            memoryview(inner)
        ):
            if inner_attributes & _CODEC_MASK:
                raise CorruptRecordError("a compressed message inside a compressed message")
            chosen = wrapper_time if wrapper_time >= 0 else inner_timestamp
            records.append((chosen if chosen >= 0 else now_ms, inner_key, inner_value))
    if not records:
        raise InvalidRecordError("the message set holds no message")
    builder = BatchBuilder(codec, timestamp_type=TimestampType.CREATE_TIME)
    try:
        for timestamp, key, value in records:
            builder.append(timestamp, key, value)
    except ValueError as e:
        raise InvalidRecordError(f"the message set cannot be one record batch: {e}") from None
    return builder.build()


_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_LZ4_CONTENT_SIZE_FLAG: Final = 0x08
_LZ4_DICT_ID_FLAG: Final = 0x01


def _lz4_header_checksum_fixed(frame: bytes) -> bytes:
    """An LZ4 frame of a magic 0 message with its header checksum made right. Kafka's first
    LZ4 writer hashed the frame's magic number into it (KAFKA-3160), and clients keep doing so
    for magic 0 so that old brokers read them; Kafka's broker ignores that checksum for magic
    0. The checksum is the second byte of XXH32 over the frame descriptor."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame  # not a frame this can fix: decompression says what is wrong
    flags = frame[4]
    end = 6 + (8 if flags & _LZ4_CONTENT_SIZE_FLAG else 0) + (4 if flags & _LZ4_DICT_ID_FLAG else 0)
    if len(frame) <= end:
        return frame
    checksum = (_xxh32(frame[4:end]) >> 8) & 0xFF
    return frame[:end] + bytes([checksum]) + frame[end + 1 :]


_XXH_PRIME_1: Final = 2654435761
_XXH_PRIME_2: Final = 2246822519
_XXH_PRIME_3: Final = 3266489917
_XXH_PRIME_4: Final = 668265263
_XXH_PRIME_5: Final = 374761393
_U32: Final = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _U32


def _xxh32(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes (an LZ4 frame descriptor is at most 14)."""
    assert len(data) < 16
    h = (_XXH_PRIME_5 + len(data)) & _U32
    pos = 0
    while pos + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl32((h + word * _XXH_PRIME_3) & _U32, 17) * _XXH_PRIME_4) & _U32
        pos += 4
    for byte in data[pos:]:
        h = (_rotl32((h + byte * _XXH_PRIME_5) & _U32, 11) * _XXH_PRIME_1) & _U32
    h ^= h >> 15
    h = (h * _XXH_PRIME_2) & _U32
    h ^= h >> 13
    h = (h * _XXH_PRIME_3) & _U32
    h ^= h >> 16
    return h


def _codec(code: int) -> Compression:
    if code not in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
        raise CorruptRecordError(f"unknown compression codec {code} in a v0/v1 message")
    return Compression(code)


def _messages(
    view: memoryview,
) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, attributes, timestamp or -1, key, value) of every message in the set."""
    messages = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < _ENTRY_HEAD.size:
            raise CorruptRecordError(f"a truncated message set entry at byte {pos}")
        _, size = _ENTRY_HEAD.unpack_from(view, pos)
        start = pos + _ENTRY_HEAD.size
        end = start + size
        if size < _MESSAGE_BYTES_MIN or end > len(view):
            raise CorruptRecordError(f"a message of {size} bytes at byte {pos} does not fit")
        crc, magic, attributes = _MESSAGE_HEAD.unpack_from(view, start)
        if magic not in (0, 1):
            raise CorruptRecordError(f"magic {magic} in a v0/v1 message set at byte {pos}")
        if zlib.crc32(view[start + 4 : end]) != crc:
            raise CorruptRecordError(f"the message at byte {pos} fails its CRC check")
        at = start + _MESSAGE_HEAD.size
        timestamp = -1
        if magic == 1:
            if end - at < _TIMESTAMP.size + 2 * _LENGTH.size:
                raise CorruptRecordError(f"the message at byte {pos} is truncated")
            (timestamp,) = _TIMESTAMP.unpack_from(view, at)
            at += _TIMESTAMP.size
        key, at = _bytes(view, at, end, pos)
        value, at = _bytes(view, at, end, pos)
        if at != end:
            raise CorruptRecordError(f"the message at byte {pos} has {end - at} stray bytes")
        messages.append((magic, attributes, timestamp, key, value))
        pos = end
    return messages


def _bytes(view: memoryview, at: int, end: int, pos: int) -> tuple[bytes | None, int]:
    if end - at < _LENGTH.size:
        raise CorruptRecordError(f"the message at byte {pos} is truncated")
    (length,) = _LENGTH.unpack_from(view, at)
    at += _LENGTH.size
    if length < 0:
        return None, at
    if length > end - at:
        raise CorruptRecordError(f"the message at byte {pos} is truncated")
    return bytes(view[at : at + length]), at + length
