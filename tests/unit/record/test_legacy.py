"""MessageSet v0/v1 → RecordBatch v2 (brook.record.legacy), on hand-built message sets."""

from __future__ import annotations

import struct
import zlib

import pytest

from brook.record import (
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    iter_records,
    read_header,
)
from brook.record.compression import compress
from brook.record.legacy import _xxh32, message_set_to_batch

NOW_MS = 1_700_000_000_000


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def _message(
    key: bytes | None, value: bytes | None, *, magic: int = 0, attributes: int = 0, ts: int = -1
) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    body += _bytes(key) + _bytes(value)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def _converted(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    batch = message_set_to_batch(data, now_ms=NOW_MS)
    return [(r.timestamp, r.key, r.value) for r in iter_records(batch)]


def test_magic_0_and_1_messages_keep_keys_values_and_v1_timestamps() -> None:
    data = _message(b"k", b"v") + _message(None, b"w", magic=1, ts=123) + _message(b"x", None)
    assert _converted(data) == [(NOW_MS, b"k", b"v"), (123, None, b"w"), (NOW_MS, b"x", None)]


def test_a_gzip_wrapper_becomes_a_gzip_batch_of_its_inner_messages() -> None:
    inner = _message(b"a", b"1") + _message(b"b", b"2")
    wrapper = _message(None, compress(Compression.GZIP, inner), attributes=Compression.GZIP)
    batch = message_set_to_batch(wrapper, now_ms=NOW_MS)
    assert read_header(batch).compression is Compression.GZIP
    assert _converted(wrapper) == [(NOW_MS, b"a", b"1"), (NOW_MS, b"b", b"2")]


@pytest.mark.parametrize(
    "data",
    [
        _message(b"k", b"v")[:-1],  # truncated
        _message(b"k", b"v")[:-1] + b"w",  # CRC mismatch
        _message(
            None,
            compress(
                Compression.GZIP,
                _message(None, compress(Compression.GZIP, _message(b"a", b"1")), attributes=1),
            ),
            attributes=1,
        ),  # nested compression
        _message(b"k", b"v", attributes=5),  # unknown codec
    ],
)
def test_damaged_message_sets_are_refused_as_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        message_set_to_batch(data, now_ms=NOW_MS)


def test_an_empty_message_set_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        message_set_to_batch(b"", now_ms=NOW_MS)


def test_the_decompression_limit_holds_for_all_wrappers_together() -> None:
    # Each wrapper alone is within the limit; together they are not (a small request of many
    # highly compressed wrappers must not expand without bound).
    inner = b"".join(_message(None, b"x" * 100) for _ in range(10))  # 1,260 bytes
    wrapper = _message(None, compress(Compression.GZIP, inner), attributes=Compression.GZIP)
    assert len(message_set_to_batch(wrapper * 3, now_ms=NOW_MS, max_decompressed_bytes=4000)) > 0
    with pytest.raises(RecordTooLargeError):
        message_set_to_batch(wrapper * 4, now_ms=NOW_MS, max_decompressed_bytes=4000)


def test_a_magic_0_lz4_wrapper_with_kafkas_old_header_checksum_is_read() -> None:
    # Kafka's first LZ4 writer hashed the frame's magic number into the header checksum
    # (KAFKA-3160); clients still write magic 0 that way, and lz4 refuses such a frame.
    inner = _message(b"a", b"1") + _message(b"b", b"2")
    frame = compress(Compression.LZ4, inner)
    assert frame[4] & 0x09 == 0  # no content size, no dictionary id: the checksum is byte 6
    broken = frame[:6] + bytes([(_xxh32(frame[:6]) >> 8) & 0xFF]) + frame[7:]
    assert broken != frame
    wrapper = _message(None, broken, attributes=Compression.LZ4)
    assert _converted(wrapper) == [(NOW_MS, b"a", b"1"), (NOW_MS, b"b", b"2")]
