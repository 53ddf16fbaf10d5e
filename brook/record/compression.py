"""The five batch codecs, with decompression bounded by ``max_decompressed_bytes``.

What the Kafka clients write, and therefore what decoding must accept (read from each
client's source):

- gzip: a gzip stream (RFC 1952) everywhere: Java's GZIPOutputStream, librdkafka's zlib with
  window bits 15+16, kafka-python's gzip module. Java's reader also takes several gzip members
  back to back, so we do too.
- snappy: Java wraps snappy-java's SnappyOutputStream, the "xerial" framing: magic
  ``\\x82SNAPPY\\x00``, two int32 version fields, then blocks of [int32 big-endian length,
  raw snappy block] over 32 KiB of input each; kafka-python writes the same. librdkafka and
  kafkajs-snappy write one raw snappy block with no framing. Every client reads both by
  checking for the magic, so we do the same; the version fields are ignored because at least
  one broker implementation writes them little-endian. The official snappy *framing* format
  (``\\xff\\x06\\x00\\x00sNaPpY``) is written by no Kafka client and is rejected as corrupt.
  We write the xerial framing, since it is what Java producers put in real logs and every
  consumer reads it.
- lz4: the LZ4 *frame* format. Java's reader decompresses each block on its own (no linked
  blocks) and skips a content-size field; librdkafka and kafka-python write independent
  blocks, kafka-python with the content size. We write independent 64 KiB blocks without
  content size or checksums, as Java does.
- zstd: one zstd frame; librdkafka declares the content size, Java's streaming writer does
  not, so decoding must cope with both.

Every decompressor is driven so that it produces at most ``max_decompressed_bytes`` (plus
one byte, to notice the excess): a few kilobytes that inflate to gigabytes raise
RecordTooLargeError instead of exhausting memory.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame

from brook.record.batch import Buffer, Compression
from brook.record.errors import CorruptRecordError, RecordTooLargeError

__all__ = ["DEFAULT_MAX_DECOMPRESSED_BYTES", "compress", "decompress"]

# Kafka's default max message size is 1 MiB; even at a 50x compression ratio a legitimate
# batch stays below this, while one bomb cannot take more than this much memory.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

GZIP_LEVEL = 6  # zlib's default, and what Java's GZIPOutputStream uses
GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip wrapper only: no zlib header, no raw deflate

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_BYTES = 16  # magic (8) + version (4) + minimum compatible version (4)
XERIAL_VERSION = 1
XERIAL_BLOCK_BYTES = 32 * 1024  # snappy-java's default block size
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", XERIAL_VERSION, XERIAL_VERSION)
_XERIAL_LENGTH = struct.Struct(">i")

ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_LEVEL = 3  # zstd's own default, the same as Kafka's compression.zstd.level
# When a zstd frame does not declare its size, the first output buffer is a guess: this many
# times the input, at least ZSTD_FIRST_GUESS_BYTES_MIN; each miss quadruples it.
ZSTD_FIRST_GUESS_RATIO = 4
ZSTD_FIRST_GUESS_BYTES_MIN = 64 * 1024
ZSTD_GROWTH_FACTOR = 4
_ZSTD_BUFFER_FULL = "whole buffer"


def compress(codec: Compression, data: Buffer) -> bytes:
    """Compress a batch's record bytes with ``codec`` in the form Java producers write."""
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec is Compression.SNAPPY:
        return _xerial_compress(data)
    if codec is Compression.LZ4:
        compressed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return compressed
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"unknown compression codec {codec!r}")


def decompress(
    codec: Compression,
    data: Buffer,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes | bytearray:
    """Decompress a batch's record bytes; never produces more than ``max_decompressed_bytes``.

    Raises CorruptRecordError for data the codec cannot decode (truncated, damaged, trailing
    garbage) and RecordTooLargeError when the output would exceed the limit.
    """
    if max_decompressed_bytes < 0:
        raise ValueError(f"max_decompressed_bytes must be >= 0, got {max_decompressed_bytes}")
    if codec is Compression.NONE:
        if len(data) > max_decompressed_bytes:
            raise _too_large(codec, max_decompressed_bytes)
        return bytes(data)
    if codec is Compression.GZIP:
        return _gzip_decompress(data, max_decompressed_bytes)
    if codec is Compression.SNAPPY:
        return _snappy_decompress(data, max_decompressed_bytes)
    if codec is Compression.LZ4:
        return _lz4_decompress(data, max_decompressed_bytes)
    if codec is Compression.ZSTD:
        return _zstd_decompress(data, max_decompressed_bytes)
    raise ValueError(f"unknown compression codec {codec!r}")


def _too_large(codec: Compression, limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"{codec.name.lower()} records decompress to more than max_decompressed_bytes={limit}"
    )


def _corrupt(codec: Compression, reason: object) -> CorruptRecordError:
    return CorruptRecordError(f"{codec.name.lower()} records cannot be decompressed: {reason}")


def _gzip_decompress(data: Buffer, limit: int) -> bytearray:
    out = bytearray()
    remaining: Buffer = data
    while True:
        inflater = zlib.decompressobj(GZIP_WBITS)
        try:
            # max_length is budget + 1 so an over-limit stream is noticed without inflating
            # more than one byte past the limit; it is always >= 1 (0 would mean unbounded).
            out += inflater.decompress(remaining, limit - len(out) + 1)
        except zlib.error as exc:
            raise _corrupt(Compression.GZIP, exc) from None
        if len(out) > limit:
            raise _too_large(Compression.GZIP, limit)
        if not inflater.eof:
            raise _corrupt(Compression.GZIP, "stream is truncated")
        remaining = inflater.unused_data
        if not remaining:
            return out


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    blocks = [
        view[start : start + XERIAL_BLOCK_BYTES]
        for start in range(0, len(view), XERIAL_BLOCK_BYTES)
    ]
    out = bytearray(
        len(_XERIAL_HEADER)
        + sum(_XERIAL_LENGTH.size + cramjam.snappy.compress_raw_max_len(block) for block in blocks)
    )
    out[: len(_XERIAL_HEADER)] = _XERIAL_HEADER
    pos = len(_XERIAL_HEADER)
    out_view = memoryview(out)
    for block in blocks:
        written = cramjam.snappy.compress_raw_into(block, out_view[pos + _XERIAL_LENGTH.size :])
        _XERIAL_LENGTH.pack_into(out, pos, written)
        pos += _XERIAL_LENGTH.size + written
    out_view.release()
    del out[pos:]
    return bytes(out)


def _snappy_decompress(data: Buffer, limit: int) -> bytearray:
    view = memoryview(data)
    if len(view) >= XERIAL_HEADER_BYTES and view[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        blocks = _xerial_blocks(view)
    else:
        blocks = [view]
    # Snappy states each block's output length up front, so the whole output is sized and
    # checked against the limit before a single byte is decompressed.
    sizes = []
    total = 0
    for block in blocks:
        try:
            size = cramjam.snappy.decompress_raw_len(block)
        except cramjam.DecompressionError as exc:
            raise _corrupt(Compression.SNAPPY, exc) from None
        total += size
        if total > limit:
            raise _too_large(Compression.SNAPPY, limit)
        sizes.append(size)
    out = bytearray(total)
    out_view = memoryview(out)
    pos = 0
    for block, size in zip(blocks, sizes, strict=True):
        try:
            written = cramjam.snappy.decompress_raw_into(block, out_view[pos : pos + size])
        except cramjam.DecompressionError as exc:
            raise _corrupt(Compression.SNAPPY, exc) from None
        if written != size:
            raise _corrupt(Compression.SNAPPY, f"block declared {size} bytes, produced {written}")
        pos += size
    out_view.release()
    return out


def _xerial_blocks(view: memoryview) -> list[memoryview]:
    blocks = []
    pos = XERIAL_HEADER_BYTES
    while pos < len(view):
        if pos + _XERIAL_LENGTH.size > len(view):
            raise _corrupt(Compression.SNAPPY, f"xerial block length truncated at byte {pos}")
        (length,) = _XERIAL_LENGTH.unpack_from(view, pos)
        pos += _XERIAL_LENGTH.size
        if length < 0 or pos + length > len(view):
            raise _corrupt(
                Compression.SNAPPY,
                f"xerial block at byte {pos} claims {length} bytes, {len(view) - pos} remain",
            )
        blocks.append(view[pos : pos + length])
        pos += length
    return blocks


def _lz4_decompress(data: Buffer, limit: int) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    try:
        out: bytes = decompressor.decompress(data, max_length=limit + 1)
    except RuntimeError as exc:
        raise _corrupt(Compression.LZ4, exc) from None
    if len(out) > limit:
        raise _too_large(Compression.LZ4, limit)
    if not decompressor.eof:
        raise _corrupt(Compression.LZ4, "frame is truncated")
    if decompressor.unused_data:
        raise _corrupt(Compression.LZ4, f"{len(decompressor.unused_data)} bytes follow the frame")
    return out


def _zstd_decompress(data: Buffer, limit: int) -> bytearray:
    declared = _zstd_declared_size(data)
    if declared is not None and declared > limit:
        raise _too_large(Compression.ZSTD, limit)
    if declared is not None:
        size = declared
    else:
        size = min(limit, max(ZSTD_FIRST_GUESS_BYTES_MIN, ZSTD_FIRST_GUESS_RATIO * len(data)))
    # cramjam's one-shot decompressor has no output cap, but decompress_into stops at the end
    # of the buffer it is given; a buffer that proves too small is grown, never past the limit.
    while True:
        out = bytearray(size)
        try:
            written = cramjam.zstd.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            # cramjam tells a full output buffer from damaged input only by its message.
            # The tests pin that message: if it changed, valid frames would be reported corrupt.
            if _ZSTD_BUFFER_FULL not in str(exc):
                raise _corrupt(Compression.ZSTD, exc) from None
            if size >= limit:
                raise _too_large(Compression.ZSTD, limit) from None
            size = min(limit, max(ZSTD_FIRST_GUESS_BYTES_MIN, size * ZSTD_GROWTH_FACTOR))
            continue
        del out[written:]
        return out


def _zstd_declared_size(data: Buffer) -> int | None:
    """Frame content size from a zstd frame header, or None when the frame omits it."""
    if len(data) < 6 or bytes(data[:4]) != ZSTD_FRAME_MAGIC:
        return None
    descriptor = data[4]
    size_flag = descriptor >> 6
    single_segment = (descriptor >> 5) & 1
    dictionary_id_bytes = (0, 1, 2, 4)[descriptor & 0x03]
    content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if content_size_bytes == 0:
        return None
    start = 5 + (0 if single_segment else 1) + dictionary_id_bytes
    if start + content_size_bytes > len(data):
        return None
    size = int.from_bytes(data[start : start + content_size_bytes], "little")
    # The two-byte form is stored minus 256 (zstd format, Frame_Content_Size).
    return size + 256 if content_size_bytes == 2 else size
