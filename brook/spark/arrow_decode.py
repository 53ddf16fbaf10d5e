"""Fetched Kafka RecordBatch v2 bytes as one Arrow record batch in the Kafka source's schema,
decoded in bulk.

The only per-record Python is a scan of each batch's record lengths, which notes where each
record starts (an int appended to a list). Everything else is done once per fetch over
all its records at once, with numpy: the varints of every record (timestamp delta, offset
delta, key length, value length) are decoded together, one vectorised step per varint byte;
keys and values are cut out of the batches' (decompressed) data by Arrow in one copy each;
offsets and timestamps are the batches' bases repeated plus the deltas. Only headers, when
asked for, are built record by record.

Control batches (transaction markers) are never rows. ``aborted`` (read_committed) drops the
records of aborted transactions, as the SDK's consumer does (``AbortedTransactions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from brook.client.fetcher import AbortedTransactions
from brook.record import BATCH_OVERHEAD, BatchHeader, RecordError, TimestampType, read_header
from brook.record.batch import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, compression_of, verify_crc
from brook.record.compression import decompress
from brook.record.errors import CorruptRecordError
from brook.record.varint import read_varint
from brook.spark.schema import ARROW_HEADERS_TYPE, arrow_schema

__all__ = ["DecodedFetch", "decode_fetch"]

_Ints = npt.NDArray[np.int64]
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


@dataclass
class DecodedFetch:
    """The rows of one fetch answer in ``[start, end)`` and the offset to fetch next (past
    skipped control batches, aborted batches and compaction gaps too)."""

    batch: pa.RecordBatch
    next_offset: int


@dataclass
class _Columns:
    """What the scan collects: per batch, then per record (positions in the concatenation of
    the batches' record data, ``chunks``)."""

    chunks: list[bytes | memoryview] = field(default_factory=list)
    chunk_bytes: int = 0
    base_offsets: list[int] = field(default_factory=list)
    base_timestamps: list[int] = field(default_factory=list)
    # The batch's max timestamp when its timestamps are the log's append time, else -1.
    append_times: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    # Where each record begins (its length varint).
    records: list[int] = field(default_factory=list)


def decode_fetch(
    buffer: bytes,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    aborted: AbortedTransactions | None,
    include_headers: bool,
    check_crc: bool = True,
) -> DecodedFetch:
    """The records of ``buffer`` (whole batches as a Fetch answers them) whose offsets lie in
    ``[start, end)``, as one record batch of ``arrow_schema(include_headers=...)``.

    A batch cut short at the end of ``buffer`` is left for the next fetch; ``next_offset``
    never passes ``end``. Raises CorruptRecordError (a RecordError) naming the partition and
    offset when a batch cannot be decoded."""
    columns = _Columns()
    next_offset = start
    pos = 0
    size = len(buffer)
    try:
        while size - pos >= BATCH_OVERHEAD and next_offset < end:
            header = read_header(buffer, pos)
            batch_end = pos + header.size
            if batch_end > size:
                break
            skipped = aborted is not None and aborted.skips(header, buffer, pos, check_crc)
            if header.next_offset > start and not (header.is_control or skipped):
                if check_crc:
                    verify_crc(buffer, pos, header)
                _collect(buffer, pos, batch_end, header, columns)
            next_offset = max(next_offset, header.next_offset)
            pos = batch_end
        batch = _record_batch(columns, topic, partition, start, end, include_headers)
    except RecordError as error:
        raise CorruptRecordError(
            f"record batches of {topic}-{partition} fetched from offset {start} are invalid "
            f"(at byte {pos} of the answer, offset {next_offset}): {error}"
        ) from error
    return DecodedFetch(batch, min(next_offset, end))


def _collect(
    buffer: bytes,
    pos: int,
    batch_end: int,
    header: BatchHeader,
    columns: _Columns,
) -> None:
    """Notes where the records of the batch at ``pos`` lie in the concatenated chunks."""
    data: bytes | memoryview
    if header.attributes & COMPRESSION_MASK:
        decompressed = decompress(
            compression_of(header.attributes), memoryview(buffer)[pos + BATCH_OVERHEAD : batch_end]
        )
        data = decompressed if type(decompressed) is bytes else bytes(decompressed)
    else:
        data = memoryview(buffer)[pos + BATCH_OVERHEAD : batch_end]
    base = columns.chunk_bytes
    columns.chunks.append(data)
    columns.chunk_bytes += len(data)
    columns.base_offsets.append(header.base_offset)
    columns.base_timestamps.append(header.base_timestamp)
    columns.append_times.append(
        header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else -1
    )
    count = header.records_count
    columns.counts.append(count)
    records = columns.records.append
    end = len(data)
    p = 0
    try:
        for _ in range(count):
            records(base + p)
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                length = (b & 0x7F) | (data[p + 1] << 7)
                length = (length >> 1) ^ -(length & 1)
                p += 2
            else:
                length, p = read_varint(data, p)
            if length < 1 or p + length > end:
                raise CorruptRecordError(f"a record claims {length} bytes, {end - p} remain")
            p += length
    except IndexError as error:
        raise CorruptRecordError("the batch's records run past its end") from error


def _varints(data: npt.NDArray[np.uint8], positions: _Ints) -> tuple[_Ints, _Ints]:
    """The zig-zag varints (up to 64 bits) at ``positions`` of ``data``, all at once, and the
    positions after them. ``data`` must end with ten zero bytes (a varint never reads past
    them); CorruptRecordError for a varint longer than ten bytes."""
    value = np.zeros(len(positions), dtype=np.uint64)
    position = positions.copy()
    reading = np.ones(len(positions), dtype=np.bool_)
    for shift in range(0, 70, 7):
        byte = data[position].astype(np.uint64)
        value |= np.where(reading, (byte & 0x7F) << np.uint64(shift), 0).astype(np.uint64)
        position += reading
        reading &= byte >= 0x80
        if not reading.any():
            break
    else:
        raise CorruptRecordError("a record has a varint longer than ten bytes")
    decoded = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return decoded, position


def _headers(data: bytes, p: int) -> list[dict[str, object]]:
    """The headers of the record whose header count is at ``p``."""
    count, p = read_varint(data, p)
    headers: list[dict[str, object]] = []
    for _ in range(count):
        length, p = read_varint(data, p)
        key = data[p : p + length].decode()
        p += length
        length, p = read_varint(data, p)
        value = None if length < 0 else data[p : p + length]
        p += max(length, 0)
        headers.append({"key": key, "value": value})
    return headers


_BINARY_OFFSET_MAX: Final = 2**31 - 1


def _binary(data: pa.Buffer, starts: _Ints, lengths: _Ints) -> pa.Array:
    """The byte strings ``data[start:start+length]`` (null where length is -1) as one Arrow
    binary array. The slices are in order and never overlap, so their ends are one rising
    sequence of offsets into ``data``: an array whose even elements are the slices (and odd
    ones the gaps between them), from which Arrow takes the even ones in one copy."""
    rows = len(starts)
    valid = lengths >= 0
    if rows == 0:
        return pa.array([], pa.binary())
    if data.size > _BINARY_OFFSET_MAX:
        # int32 offsets (Spark's BinaryType is Arrow's binary, not large_binary) would wrap.
        raise ValueError(
            f"{data.size} bytes of records in one fetch are more than an Arrow binary column "
            f"holds ({_BINARY_OFFSET_MAX}); lower kafka.max.partition.fetch.bytes"
        )
    bounds = np.empty(2 * rows, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.where(valid, lengths, 0)
    spans = pa.Array.from_buffers(pa.binary(), 2 * rows - 1, [None, pa.py_buffer(bounds), data])
    taken = spans.take(pa.array(np.arange(0, 2 * rows, 2, dtype=np.int32)))
    nulls = rows - int(np.count_nonzero(valid))
    if nulls == 0:
        return taken
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), rows, [validity, *taken.buffers()[1:]], null_count=nulls
    )


def _record_batch(
    columns: _Columns, topic: str, partition: int, start: int, end: int, include_headers: bool
) -> pa.RecordBatch:
    joined = b"".join(columns.chunks)
    data = np.frombuffer(joined + bytes(10), dtype=np.uint8)
    counts = np.asarray(columns.counts, dtype=np.int64)
    try:
        # Each record: length, attributes (unused), timestamp delta, offset delta, key, value.
        record_lengths, record_starts = _varints(data, np.asarray(columns.records, np.int64))
        record_ends = record_starts + record_lengths
        timestamp_deltas, position = _varints(data, record_starts + 1)
        offset_deltas, position = _varints(data, position)
        key_lengths, key_starts = _varints(data, position)
        value_lengths, value_starts = _varints(data, key_starts + np.maximum(key_lengths, 0))
    except IndexError as error:
        raise CorruptRecordError("a record runs past its batch's end") from error
    value_ends = value_starts + np.maximum(value_lengths, 0)
    if np.any(value_ends >= record_ends) or np.any(np.minimum(key_lengths, value_lengths) < -1):
        raise CorruptRecordError("a record's key or value runs past the record's end")
    offsets = np.repeat(np.asarray(columns.base_offsets, dtype=np.int64), counts) + offset_deltas
    append_times = np.repeat(np.asarray(columns.append_times, dtype=np.int64), counts)
    log_append = append_times >= 0
    timestamps = np.where(
        log_append,
        append_times,
        np.repeat(np.asarray(columns.base_timestamps, dtype=np.int64), counts) + timestamp_deltas,
    )
    wanted = (offsets >= start) & (offsets < end)
    every = bool(wanted.all())
    if not every:
        offsets, timestamps, log_append = offsets[wanted], timestamps[wanted], log_append[wanted]
        key_starts, key_lengths = key_starts[wanted], key_lengths[wanted]
        value_starts, value_lengths = value_starts[wanted], value_lengths[wanted]
        value_ends = value_ends[wanted]
    rows = len(offsets)
    buffer = pa.py_buffer(joined)
    arrays = [
        _binary(buffer, key_starts, key_lengths),
        _binary(buffer, value_starts, value_lengths),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.array(offsets, pa.int64()),
        pa.array(timestamps * 1000, pa.int64()).cast(_TIMESTAMP_TYPE),
        pa.array(
            np.where(
                log_append, int(TimestampType.LOG_APPEND_TIME), int(TimestampType.CREATE_TIME)
            ).astype(np.int32),
            pa.int32(),
        ),
    ]
    if include_headers:
        headers = [_headers(joined, p) for p in value_ends.tolist()]
        arrays.append(pa.array(headers, ARROW_HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers=include_headers))
