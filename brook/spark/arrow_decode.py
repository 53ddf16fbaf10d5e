"""Fetched Kafka RecordBatch v2 bytes as one Arrow record batch in the Kafka source's schema,
decoded in bulk.

One pass of Python over the records notes where each record's key and value lie and its
offset and timestamp deltas (plain ints appended to lists: no per-record objects); everything
else is done once per fetch by numpy and Arrow: the keys' and values' bytes are cut out of
the (decompressed) batch data with a mask, their offsets are cumulative sums, offsets and
timestamps are the batches' bases repeated plus the deltas. Only headers, when asked for, are
built per record.

Control batches (transaction markers) are never rows. ``aborted`` (read_committed) drops the
records of aborted transactions, as the SDK's consumer does (``AbortedTransactions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from brook.client.fetcher import AbortedTransactions
from brook.record import BATCH_OVERHEAD, BatchHeader, RecordError, TimestampType, read_header
from brook.record.batch import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, compression_of, verify_crc
from brook.record.compression import decompress
from brook.record.errors import CorruptRecordError
from brook.record.varint import read_varint, read_varlong
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
    """What the Python pass collects: per batch, then per record."""

    chunks: list[bytes] = field(default_factory=list)
    chunk_bytes: int = 0
    base_offsets: list[int] = field(default_factory=list)
    base_timestamps: list[int] = field(default_factory=list)
    # The batch's max timestamp when its timestamps are the log's append time, else -1.
    append_times: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    offset_deltas: list[int] = field(default_factory=list)
    timestamp_deltas: list[int] = field(default_factory=list)
    key_starts: list[int] = field(default_factory=list)
    key_lengths: list[int] = field(default_factory=list)
    value_starts: list[int] = field(default_factory=list)
    value_lengths: list[int] = field(default_factory=list)
    headers: list[list[dict[str, object]]] = field(default_factory=list)


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
    while size - pos >= BATCH_OVERHEAD and next_offset < end:
        header = read_header(buffer, pos)
        batch_end = pos + header.size
        if batch_end > size:
            break
        try:
            skipped = aborted is not None and aborted.skips(header, buffer, pos, check_crc)
            if header.next_offset > start and not (header.is_control or skipped):
                if check_crc:
                    verify_crc(buffer, pos, header)
                _collect(buffer, pos, batch_end, header, columns, include_headers)
        except RecordError as error:
            raise CorruptRecordError(
                f"record batch of {topic}-{partition} at offset {header.base_offset} is "
                f"invalid: {error}"
            ) from error
        next_offset = max(next_offset, header.next_offset)
        pos = batch_end
    return DecodedFetch(
        _record_batch(columns, topic, partition, start, end, include_headers),
        min(next_offset, end),
    )


def _collect(
    buffer: bytes,
    pos: int,
    batch_end: int,
    header: BatchHeader,
    columns: _Columns,
    include_headers: bool,
) -> None:
    """Notes where the records of the batch at ``pos`` lie in the concatenated chunks."""
    data: bytes
    if header.attributes & COMPRESSION_MASK:
        decompressed = decompress(
            compression_of(header.attributes), memoryview(buffer)[pos + BATCH_OVERHEAD : batch_end]
        )
        data = decompressed if type(decompressed) is bytes else bytes(decompressed)
    else:
        data = buffer[pos + BATCH_OVERHEAD : batch_end]
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
    delta_fields = (
        (columns.timestamp_deltas.append, read_varlong),
        (columns.offset_deltas.append, read_varint),
    )
    slices = (
        (columns.key_starts.append, columns.key_lengths.append),
        (columns.value_starts.append, columns.value_lengths.append),
    )
    headers = columns.headers.append
    end = len(data)
    p = 0
    try:
        for _ in range(count):
            # length varint (one or two bytes inline, as every field below)
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
            record_end = p + length
            if length < 1 or record_end > end:
                raise CorruptRecordError(f"a record claims {length} bytes, {end - p} remain")
            p += 1  # attributes: unused
            for deltas, read_long in delta_fields:  # the timestamp's, then the offset's
                b = data[p]
                if b < 0x80:
                    deltas((b >> 1) ^ -(b & 1))
                    p += 1
                elif data[p + 1] < 0x80:
                    delta = (b & 0x7F) | (data[p + 1] << 7)
                    deltas((delta >> 1) ^ -(delta & 1))
                    p += 2
                else:
                    delta, p = read_long(data, p)
                    deltas(delta)
            for starts, lengths in slices:  # the key, then the value
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
                starts(base + p)
                lengths(length)
                if length > 0:
                    p += length
            if include_headers:
                headers(_headers(data, p))
            p = record_end
    except IndexError as error:
        raise CorruptRecordError("the batch's records run past its end") from error


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


def _binary(data: pa.Buffer, starts: _Ints, lengths: _Ints) -> pa.Array:
    """The byte strings ``data[start:start+length]`` (null where length is -1) as one Arrow
    binary array. The slices are in order and never overlap, so their ends are one rising
    sequence of offsets into ``data``: an array whose even elements are the slices (and odd
    ones the gaps between them), from which Arrow takes the even ones in one copy."""
    rows = len(starts)
    valid = lengths >= 0
    if rows == 0:
        return pa.array([], pa.binary())
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
    schema = arrow_schema(include_headers=include_headers)
    counts = np.asarray(columns.counts, dtype=np.int64)
    offsets = np.repeat(np.asarray(columns.base_offsets, dtype=np.int64), counts)
    offsets += np.asarray(columns.offset_deltas, dtype=np.int64)
    append_times = np.repeat(np.asarray(columns.append_times, dtype=np.int64), counts)
    timestamps = np.repeat(np.asarray(columns.base_timestamps, dtype=np.int64), counts)
    timestamps += np.asarray(columns.timestamp_deltas, dtype=np.int64)
    log_append = append_times >= 0
    timestamps = np.where(log_append, append_times, timestamps)
    wanted = (offsets >= start) & (offsets < end)
    every = bool(wanted.all())
    data = pa.py_buffer(b"".join(columns.chunks))
    key_starts = np.asarray(columns.key_starts, dtype=np.int64)
    key_lengths = np.asarray(columns.key_lengths, dtype=np.int64)
    value_starts = np.asarray(columns.value_starts, dtype=np.int64)
    value_lengths = np.asarray(columns.value_lengths, dtype=np.int64)
    if not every:
        offsets, timestamps, log_append = offsets[wanted], timestamps[wanted], log_append[wanted]
        key_starts, key_lengths = key_starts[wanted], key_lengths[wanted]
        value_starts, value_lengths = value_starts[wanted], value_lengths[wanted]
    rows = len(offsets)
    arrays = [
        _binary(data, key_starts, key_lengths),
        _binary(data, value_starts, value_lengths),
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
        headers = columns.headers
        if not every:
            headers = [h for h, keep in zip(headers, wanted.tolist(), strict=True) if keep]
        arrays.append(pa.array(headers, ARROW_HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
