"""Records inside a v2 batch: decode them, and build batches from them (seed 001, 5.3.2).

This is the convenience side of the codec, for the SDK, tests, the plain-protobuf Produce path
and Fetch's decoded-records option. Servers never call it per append: they validate and patch
headers with ``brook.record.batch``.

Record layout (varint = zig-zag int32, varlong = zig-zag int64)::

    length varint            bytes that follow, up to the end of the record
    attributes int8          unused, written as 0
    timestampDelta varlong   from the batch's baseTimestamp
    offsetDelta varint       from the batch's baseOffset
    keyLength varint, key    -1 means a null key
    valueLength varint, value
    headerCount varint
    per header: keyLength varint, key (UTF-8, never null), valueLength varint, value (-1: null)
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from brook.record.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_OVERHEAD,
    CONTROL_MASK,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Buffer,
    Compression,
    TimestampType,
    read_header,
    verify_crc,
)
from brook.record.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, compress, decompress
from brook.record.errors import CorruptRecordError
from brook.record.varint import (
    INT32_MAX,
    INT64_MAX,
    read_varint,
    read_varlong,
    write_varint,
    write_varlong,
)

__all__ = ["BatchBuilder", "Header", "Record", "RecordTuple", "build_batch", "iter_records"]

Header = tuple[str, bytes | None]
# (timestamp or None for now, key, value, headers): one record for build_batch.
RecordTuple = tuple[int | None, bytes | None, bytes | None, Sequence[Header]]

INT16_MAX = 2**15 - 1
# recordsCount and lastOffsetDelta are int32, and the batch length must fit in int32 too.
RECORDS_PER_BATCH_MAX = INT32_MAX
BATCH_BYTES_MAX = INT32_MAX + LOG_OVERHEAD

# Everything after the CRC: attributes .. recordsCount (the CRC covers these) ...
_HEADER_TAIL = struct.Struct(">HiqqqhiI")
# ... and everything before it.
_HEADER_HEAD = struct.Struct(">qiibI")
assert _HEADER_HEAD.size == ATTRIBUTES_OFFSET
assert _HEADER_HEAD.size + _HEADER_TAIL.size == BATCH_OVERHEAD


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record; ``offset`` is absolute, ``timestamp`` in ms since the epoch."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def iter_records(
    buf: Buffer,
    pos: int = 0,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    check_crc: bool = True,
) -> Iterator[Record]:
    """Decode every record of the one batch at ``buf[pos:]`` (decompressing as needed).

    Only that batch is read: to walk a buffer of several batches, pair it with
    ``scan_batches``. The whole batch is decoded before the first record is returned, so a
    damaged record anywhere raises CorruptRecordError up front and never after some records
    were handed out. Offsets are absolute; under LOG_APPEND_TIME every record carries the
    batch's max timestamp, as Kafka consumers see it.
    """
    header = read_header(buf, pos)
    if check_crc:
        verify_crc(buf, pos, header)
    elif pos + header.size > len(buf):
        raise CorruptRecordError(
            f"record batch at byte {pos} is truncated: needs {header.size} bytes, "
            f"{len(buf) - pos} available"
        )
    body = memoryview(buf)[pos + BATCH_OVERHEAD : pos + header.size]
    if header.compression is not Compression.NONE:
        body = memoryview(
            decompress(header.compression, body, max_decompressed_bytes=max_decompressed_bytes)
        )
    log_append_time = (
        header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    )
    records = _decode_records(
        body, header.records_count, header.base_offset, header.base_timestamp, log_append_time
    )
    return iter(records)


def _decode_records(
    body: memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[Record]:
    if count < 0:
        raise CorruptRecordError(f"batch has a negative recordsCount {count}")
    records: list[Record] = []
    pos = 0
    end = len(body)
    for index in range(count):
        length, pos = read_varint(body, pos)
        if length < 1 or pos + length > end:
            raise CorruptRecordError(
                f"record {index} claims {length} bytes, {end - pos} remain in the batch"
            )
        record_end = pos + length
        # Decoding inside a view that ends with the record means no field can spill into
        # the next record unnoticed.
        record = body[pos:record_end]
        records.append(_decode_record(record, index, base_offset, base_timestamp, log_append_time))
        pos = record_end
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes follow the last of the batch's {count} records"
        )
    return records


def _decode_record(
    record: memoryview,
    index: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> Record:
    pos = 1  # attributes: unused by the format
    timestamp_delta, pos = read_varlong(record, pos)
    offset_delta, pos = read_varint(record, pos)
    key, pos = _read_bytes(record, pos, index, "key")
    value, pos = _read_bytes(record, pos, index, "value")
    header_count, pos = read_varint(record, pos)
    if header_count < 0:
        raise CorruptRecordError(f"record {index} has a negative header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        raw_key, pos = _read_bytes(record, pos, index, "header key")
        if raw_key is None:
            raise CorruptRecordError(f"record {index} has a header with a null key")
        try:
            header_key = raw_key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(
                f"record {index} has a header key that is not UTF-8: {exc}"
            ) from None
        header_value, pos = _read_bytes(record, pos, index, "header value")
        headers.append((header_key, header_value))
    if pos != len(record):
        raise CorruptRecordError(
            f"record {index} declares {len(record)} bytes but its fields use {pos}"
        )
    timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, tuple(headers))


def _read_bytes(record: memoryview, pos: int, index: int, what: str) -> tuple[bytes | None, int]:
    length, pos = read_varint(record, pos)
    if length == -1:
        return None, pos
    if length < 0 or pos + length > len(record):
        raise CorruptRecordError(
            f"record {index} {what} claims {length} bytes, {len(record) - pos} remain in it"
        )
    return bytes(record[pos : pos + length]), pos + length


class BatchBuilder:
    """Accumulates records and encodes them as one v2 batch, compressed with ``compression``.

    Offsets deltas count from 0 in append order; the base timestamp is the first record's.
    ``size_estimate`` is the uncompressed size, an upper bound in practice, for callers that
    cut batches by size. ``build`` may be called more than once.
    """

    def __init__(
        self,
        compression: Compression = Compression.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        partition_leader_epoch: int = -1,
        *,
        is_control: bool = False,
    ) -> None:
        _check_range("producer_id", producer_id, -1, INT64_MAX)
        _check_range("producer_epoch", producer_epoch, -1, INT16_MAX)
        _check_range("base_sequence", base_sequence, -1, INT32_MAX)
        _check_range("partition_leader_epoch", partition_leader_epoch, -1, INT32_MAX)
        if is_transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id >= 0")
        self._compression = Compression(compression)
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._attributes = (
            self._compression
            | (TIMESTAMP_TYPE_MASK if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
            | (TRANSACTIONAL_MASK if is_transactional else 0)
            | (CONTROL_MASK if is_control else 0)
        )
        self._body = bytearray()
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = -1

    @property
    def records_count(self) -> int:
        return self._count

    @property
    def size_estimate(self) -> int:
        """Bytes of the batch if it were built uncompressed now."""
        return BATCH_OVERHEAD + len(self._body)

    def append(
        self,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> None:
        """Add one record; ``timestamp`` in ms since the epoch, None for the current time."""
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        _check_range("timestamp", timestamp, 0, INT64_MAX)
        if self._count >= RECORDS_PER_BATCH_MAX:
            raise ValueError(f"a batch holds at most {RECORDS_PER_BATCH_MAX} records")
        if self._count == 0:
            self._base_timestamp = timestamp
        record = bytearray(b"\x00")  # attributes
        write_varlong(timestamp - self._base_timestamp, record)
        write_varint(self._count, record)
        _write_bytes(key, record, "key")
        _write_bytes(value, record, "value")
        write_varint(len(headers), record)
        for header_key, header_value in headers:
            if not isinstance(header_key, str):
                raise TypeError(f"header keys are str, got {type(header_key).__name__}")
            _write_bytes(header_key.encode("utf-8"), record, "header key")
            _write_bytes(header_value, record, "header value")
        # Everything is encoded before the builder changes, so a rejected record leaves it
        # exactly as it was.
        write_varint(len(record), self._body)
        self._body += record
        self._count += 1
        self._max_timestamp = max(self._max_timestamp, timestamp)

    def build(self, base_offset: int = 0) -> bytes:
        """Encode the batch with ``base_offset``; raises ValueError if it holds no record."""
        if self._count == 0:
            raise ValueError("cannot build a record batch with no records")
        _check_range("base_offset", base_offset, 0, INT64_MAX - (self._count - 1))
        payload = compress(self._compression, self._body)
        size = BATCH_OVERHEAD + len(payload)
        if size > BATCH_BYTES_MAX:
            raise ValueError(f"batch of {size} bytes exceeds the format's {BATCH_BYTES_MAX}")
        tail = _HEADER_TAIL.pack(
            self._attributes,
            self._count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._count,
        )
        crc = crc32c.crc32c(payload, crc32c.crc32c(tail))
        head = _HEADER_HEAD.pack(
            base_offset, size - LOG_OVERHEAD, self._partition_leader_epoch, MAGIC, crc
        )
        return b"".join((head, tail, payload))


def build_batch(
    records: Sequence[RecordTuple],
    *,
    compression: Compression = Compression.NONE,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``records`` ((timestamp, key, value, headers) tuples) as one batch."""
    builder = BatchBuilder(
        compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    return builder.build(base_offset)


def _write_bytes(data: bytes | None, out: bytearray, what: str) -> None:
    if data is None:
        write_varint(-1, out)
        return
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"record {what} must be bytes or None, got {type(data).__name__}")
    if len(data) > INT32_MAX:
        raise ValueError(f"record {what} of {len(data)} bytes exceeds int32")
    write_varint(len(data), out)
    out += data


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
