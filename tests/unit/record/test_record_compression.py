"""Codecs: every form Kafka clients write is read; bombs and damage raise, never eat memory."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from record_test_support import reframe

from brook.record import (
    Compression,
    CorruptRecordError,
    RecordError,
    RecordTooLargeError,
    build_batch,
    iter_records,
    validate_batches,
)
from brook.record.compression import compress, decompress

MAX_BATCH_BYTES = 8 * 1024 * 1024
BOMB_BYTES = 16 * 1024 * 1024
BOMB_LIMIT_BYTES = 1024 * 1024
# The decompressors may hold a block or two beyond the limit while they notice the excess;
# anything near BOMB_BYTES would mean the limit was not applied while inflating.
BOMB_PEAK_BYTES_MAX = 4 * BOMB_LIMIT_BYTES

COMPRESSED = [c for c in Compression if c is not Compression.NONE]
RECORDS = [
    (1_000 + i, b"key-%d" % i, b"value " * 40 + bytes([i]), [("trace", b"%d" % i)])
    for i in range(50)
]


def _plain_batch() -> bytes:
    return build_batch(RECORDS)


def _decoded(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    validate_batches(batch, max_batch_bytes=MAX_BATCH_BYTES)
    return [(r.key, r.value) for r in iter_records(batch)]


EXPECTED = [(key, value) for _, key, value, _ in RECORDS]


@pytest.mark.parametrize("codec", list(Compression))
@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=70_000))
def test_compress_then_decompress_returns_the_input(codec: Compression, data: bytes) -> None:
    assert bytes(decompress(codec, compress(codec, data))) == data


def test_snappy_is_written_in_the_xerial_framing_java_producers_use() -> None:
    data = bytes(range(256)) * 400  # > 32 KiB: several xerial blocks
    out = compress(Compression.SNAPPY, data)
    assert out[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    first_block_len = struct.unpack(">i", out[16:20])[0]
    first_block = out[20 : 20 + first_block_len]
    assert bytes(cramjam.snappy.decompress_raw(first_block)) == data[: 32 * 1024]


def test_raw_snappy_as_librdkafka_and_kafkajs_write_it_is_read() -> None:
    batch = reframe(_plain_batch(), 2, lambda body: bytes(cramjam.snappy.compress_raw(body)))
    assert _decoded(batch) == EXPECTED


def test_xerial_snappy_with_little_endian_version_fields_is_read() -> None:
    def xerial_le(body: bytes) -> bytes:
        block = bytes(cramjam.snappy.compress_raw(body))
        return b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block

    assert _decoded(reframe(_plain_batch(), 2, xerial_le)) == EXPECTED


def test_official_snappy_framing_is_rejected_as_corrupt() -> None:
    batch = reframe(_plain_batch(), 2, lambda body: bytes(cramjam.snappy.compress(body)))
    with pytest.raises(CorruptRecordError, match="snappy"):
        list(iter_records(batch))


def test_xerial_block_running_past_the_data_is_corrupt() -> None:
    data = compress(Compression.SNAPPY, b"x" * 1000)
    with pytest.raises(CorruptRecordError, match="xerial block"):
        decompress(Compression.SNAPPY, data[:-3])


def test_lz4_is_written_with_independent_blocks_and_no_content_size() -> None:
    # Java's Lz4BlockInputStream decompresses each block on its own.
    frame = compress(Compression.LZ4, b"abc" * 100_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags = frame[4]
    assert flags & 0x20, "block independence flag must be set"
    assert not flags & 0x08, "content size must be absent"


@pytest.mark.parametrize(
    "options",
    [
        {"block_linked": False, "store_size": True},  # kafka-python
        {"block_linked": False, "content_checksum": True, "block_checksum": True},
        {"block_linked": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_lz4_frames_other_clients_write_are_read(options: dict[str, object]) -> None:
    batch = reframe(_plain_batch(), 3, lambda body: lz4.frame.compress(body, **options))
    assert _decoded(batch) == EXPECTED


def test_lz4_truncated_frame_and_trailing_garbage_are_corrupt() -> None:
    frame = compress(Compression.LZ4, b"abc" * 1000)
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Compression.LZ4, frame[:-4])
    with pytest.raises(CorruptRecordError, match="follow the frame"):
        decompress(Compression.LZ4, frame + b"junk")


def test_zstd_without_a_declared_size_as_java_writes_it_is_read() -> None:
    # Highly compressible, so the output is far beyond the first buffer guess.
    data = b"a" * (3 * 1024 * 1024)
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert bytes(decompress(Compression.ZSTD, frame)) == data
    batch = reframe(_plain_batch(), 4, zstandard.ZstdCompressor(write_content_size=False).compress)
    assert _decoded(batch) == EXPECTED


def test_zstd_with_a_declared_size_as_librdkafka_writes_it_is_read() -> None:
    batch = reframe(_plain_batch(), 4, zstandard.ZstdCompressor(write_content_size=True).compress)
    assert _decoded(batch) == EXPECTED


def test_zstd_frame_declaring_a_huge_size_is_refused_before_allocating() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"a" * 1000)
    # Frame header descriptor 0xE0: single segment, 8-byte content size.
    lying = frame[:4] + b"\xe0" + struct.pack("<Q", 2**40) + b"\x00" * 16
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            decompress(Compression.ZSTD, lying)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BOMB_LIMIT_BYTES


def test_gzip_multi_member_stream_is_read_like_javas_gzip_input_stream() -> None:
    batch = reframe(
        _plain_batch(), 1, lambda body: gzip.compress(body[:100]) + gzip.compress(body[100:])
    )
    assert _decoded(batch) == EXPECTED


def test_gzip_truncated_or_zlib_wrapped_or_trailed_by_garbage_is_corrupt() -> None:
    member = gzip.compress(b"hello" * 100)
    for bad in (member[:-5], zlib.compress(b"hello"), member + b"garbage!"):
        with pytest.raises(CorruptRecordError, match="gzip"):
            decompress(Compression.GZIP, bad)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_bomb_raises_without_inflating_it(codec: Compression) -> None:
    bomb = compress(codec, bytes(BOMB_BYTES))
    assert len(bomb) < BOMB_BYTES // 10
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError, match="max_decompressed_bytes") as err:
            decompress(codec, bomb, max_decompressed_bytes=BOMB_LIMIT_BYTES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.error_code == 10
    assert peak < BOMB_PEAK_BYTES_MAX


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bombs_raise_too_large_even_without_a_declared_size(codec: Compression) -> None:
    # Java writes zstd frames without a content size: the bound must hold there too.
    if codec is Compression.ZSTD:
        bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(BOMB_BYTES))
    else:
        bomb = compress(codec, bytes(BOMB_BYTES))
    with pytest.raises(RecordTooLargeError):
        decompress(codec, bomb, max_decompressed_bytes=BOMB_LIMIT_BYTES)


def test_lz4_bomb_that_declares_its_size_is_bounded_too() -> None:
    bomb = lz4.frame.compress(bytes(BOMB_BYTES), store_size=True, block_linked=False)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            decompress(Compression.LZ4, bomb, max_decompressed_bytes=BOMB_LIMIT_BYTES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BOMB_PEAK_BYTES_MAX


def test_output_exactly_at_the_limit_is_accepted_for_every_codec() -> None:
    data = bytes(range(256)) * 64
    for codec in Compression:
        assert (
            bytes(decompress(codec, compress(codec, data), max_decompressed_bytes=len(data)))
            == data
        )
        with pytest.raises(RecordTooLargeError):
            decompress(codec, compress(codec, data), max_decompressed_bytes=len(data) - 1)


def test_iter_records_applies_the_decompression_limit() -> None:
    batch = build_batch([(0, None, bytes(200_000), [])], compression=Compression.ZSTD)
    assert len(batch) < 1_000
    with pytest.raises(RecordTooLargeError):
        list(iter_records(batch, max_decompressed_bytes=100_000))
    assert [len(r.value or b"") for r in iter_records(batch)] == [200_000]


@pytest.mark.parametrize("codec", COMPRESSED)
@settings(max_examples=60, deadline=None)
@given(garbage=st.binary(max_size=300))
def test_garbage_compressed_data_raises_a_record_error_and_nothing_else(
    codec: Compression, garbage: bytes
) -> None:
    try:
        decompress(codec, garbage, max_decompressed_bytes=64 * 1024)
    except RecordError:
        pass


@pytest.mark.parametrize("codec", COMPRESSED)
def test_every_truncation_of_compressed_data_is_caught(codec: Compression) -> None:
    data = compress(codec, bytes(range(256)) * 20)
    for cut in range(len(data)):
        try:
            out = decompress(codec, data[:cut])
        except RecordError:
            continue
        # A prefix may itself be a complete stream only if it yields a prefix of the input.
        assert bytes(out) == (bytes(range(256)) * 20)[: len(out)]
