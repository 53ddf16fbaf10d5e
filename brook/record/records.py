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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, NamedTuple

import crc32c

from brook.record.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CONTROL_MASK,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Buffer,
    Compression,
    TimestampType,
    compression_of,
    read_header,
    verify_crc,
)
from brook.record.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, compress, decompress
from brook.record.errors import CorruptRecordError
from brook.record.varint import (
    INT32_MAX,
    INT64_MAX,
    VARINT_TABLE_SIZE,
    VARINTS,
    encode_varint,
    read_varint,
    read_varlong,
)

__all__ = [
    "RECORD_FRAMING_BYTES_MAX",
    "BatchBuilder",
    "Header",
    "Record",
    "RecordFields",
    "RecordTuple",
    "build_batch",
    "decode_records",
    "encode_batch",
    "encode_record_tail",
    "frame_record",
    "iter_records",
    "records_payload",
]

# The decoder's hot loop compiled (_speedups.c, built by `pip install`): the same records as
# _decode_records, or None for anything malformed, which the Python loop then names. Without a
# compiler the package still installs (the extension is optional) and the Python loop serves;
# tests/unit/record/test_record_speedups.py fails the run if the extension is missing.
_c_decode_records: Callable[..., list[RecordFields] | None] | None
try:
    from brook.record._speedups import decode_records as _c_decode_records
except ImportError:
    _c_decode_records = None

Header = tuple[str, bytes | None]
# (timestamp or None for now, key, value, headers): one record for build_batch.
RecordTuple = tuple[int | None, bytes | None, bytes | None, Sequence[Header]]
# (offset, timestamp, key, value, headers): one decoded record, as decode_records returns it.
RecordFields = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]

INT16_MAX = 2**15 - 1
# recordsCount and lastOffsetDelta are int32, and the batch length must fit in int32 too.
RECORDS_PER_BATCH_MAX = INT32_MAX
BATCH_BYTES_MAX = INT32_MAX + LOG_OVERHEAD
# Largest a record's framing can be besides its key, value and headers: length (varint, 5),
# attributes (1), timestampDelta (varlong, 10), offsetDelta (varint, 5).
RECORD_FRAMING_BYTES_MAX: Final = 21

_NULL: Final = b"\x01"  # zig-zag -1: a null key, value or header value
_NO_HEADERS: Final = b"\x00"
_ATTRIBUTES: Final = b"\x00"  # record attributes: unused by the format
_NO_BYTES: Final = b""

# Everything after the CRC: attributes .. recordsCount (the CRC covers these) ...
_HEADER_TAIL = struct.Struct(">HiqqqhiI")
# ... and everything before it.
_HEADER_HEAD = struct.Struct(">qiibI")
assert _HEADER_HEAD.size == ATTRIBUTES_OFFSET
assert _HEADER_HEAD.size + _HEADER_TAIL.size == BATCH_OVERHEAD


class Record(NamedTuple):
    """One decoded record; ``offset`` is absolute, ``timestamp`` in ms since the epoch.

    A named tuple rather than a frozen dataclass: as immutable, and a fifth of the cost to
    build, which decoding pays once per record.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


# -- decoding ---------------------------------------------------------------------------------


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
    fields = decode_records(
        buf, pos, max_decompressed_bytes=max_decompressed_bytes, check_crc=check_crc
    )
    return map(Record._make, fields)


def decode_records(
    buf: Buffer,
    pos: int = 0,
    *,
    header: BatchHeader | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    check_crc: bool = True,
) -> list[RecordFields]:
    """What ``iter_records`` decodes, as plain ``(offset, timestamp, key, value, headers)``
    tuples: the consumer's hot path, which builds its own record objects from them.
    ``header``: the batch's header when the caller has read it already."""
    if header is None:
        header = read_header(buf, pos)
    data, start, end = records_payload(
        buf, pos, header, max_decompressed_bytes=max_decompressed_bytes, check_crc=check_crc
    )
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    args = (
        data,
        start,
        end,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        log_append_time,
    )
    if _c_decode_records is not None:
        decoded = _c_decode_records(*args)
        if decoded is not None:
            return decoded
    return _decode_records(*args)


def records_payload(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    check_crc: bool = True,
) -> tuple[bytes, int, int]:
    """``(data, start, end)``: the uncompressed records of the batch at ``buf[pos:]`` are
    ``data[start:end]`` (``buf`` itself when it is bytes and the batch uncompressed, so
    record fields are sliced straight out of the caller's bytes). The CRC is checked first
    unless ``check_crc`` is false; CorruptRecordError for a damaged or truncated batch."""
    end = pos + header.size
    if check_crc:
        verify_crc(buf, pos, header)
    elif end > len(buf):
        raise CorruptRecordError(
            f"record batch at byte {pos} is truncated: needs {header.size} bytes, "
            f"{len(buf) - pos} available"
        )
    start = pos + BATCH_OVERHEAD
    if header.attributes & COMPRESSION_MASK:
        decompressed = decompress(
            compression_of(header.attributes),
            memoryview(buf)[start:end],
            max_decompressed_bytes=max_decompressed_bytes,
        )
        # Fields are slices of the data: bytes, so that keys and values are bytes too.
        data = decompressed if type(decompressed) is bytes else bytes(decompressed)
        return data, 0, len(data)
    if isinstance(buf, bytes):
        return buf, start, end
    data = bytes(memoryview(buf)[start:end])
    return data, 0, len(data)


def _decode_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[RecordFields]:
    """The records in ``data[pos:end]``. Varints of one and two bytes (every length, delta
    and count of a typical record) are decoded inline; longer ones go to read_varint. Reads
    may run past a record's end into its neighbour, but never unnoticed: each record must end
    exactly where its length says, and a read past the data raises IndexError, reported as
    truncation."""
    if count < 0:
        raise CorruptRecordError(f"batch has a negative recordsCount {count}")
    records: list[RecordFields] = []
    append = records.append
    index = 0
    try:
        for index in range(count):
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                length = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (length >> 1) ^ -(length & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < 1 or record_end > end:
                raise CorruptRecordError(
                    f"record {index} claims {length} bytes, {end - pos} remain in the batch"
                )
            # Byte pos is the record's attributes: unused by the format.
            byte = data[pos + 1]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                timestamp_delta, pos = read_varlong(data, pos + 1)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                offset_delta = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (offset_delta >> 1) ^ -(offset_delta & 1)
                pos += 2
            else:
                offset_delta, pos = read_varint(data, pos)
            # Key and value: a zig-zag length is even unless negative (byte 1: null). The
            # two blocks are the same on purpose: a helper would cost a call per field, a
            # sixth of this loop's time.
            byte = data[pos]
            if byte == 1:
                key = None
                pos += 1
            else:
                if byte & 1:
                    size, pos = read_varint(data, pos)
                elif byte < 0x80:
                    size = byte >> 1
                    pos += 1
                elif data[pos + 1] < 0x80:
                    size = ((byte & 0x7F) | (data[pos + 1] << 7)) >> 1
                    pos += 2
                else:
                    size, pos = read_varint(data, pos)
                if size < 0 or pos + size > record_end:
                    key, pos = _odd_bytes(size, pos, record_end, index, "key")
                else:
                    key = data[pos : pos + size]
                    pos += size
            byte = data[pos]
            if byte == 1:
                value = None
                pos += 1
            else:
                if byte & 1:
                    size, pos = read_varint(data, pos)
                elif byte < 0x80:
                    size = byte >> 1
                    pos += 1
                elif data[pos + 1] < 0x80:
                    size = ((byte & 0x7F) | (data[pos + 1] << 7)) >> 1
                    pos += 2
                else:
                    size, pos = read_varint(data, pos)
                if size < 0 or pos + size > record_end:
                    value, pos = _odd_bytes(size, pos, record_end, index, "value")
                else:
                    value = data[pos : pos + size]
                    pos += size
            if data[pos] == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, record_end, index)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record {index} declares {length} bytes but its fields use "
                    f"{pos - record_end + length}"
                )
            append(
                (
                    base_offset + offset_delta,
                    base_timestamp + timestamp_delta
                    if log_append_time is None
                    else log_append_time,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError:
        raise CorruptRecordError(
            f"record {index} is truncated: its fields run past the end of the batch"
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes follow the last of the batch's {count} records"
        )
    return records


def _odd_bytes(
    size: int, pos: int, record_end: int, index: int, what: str
) -> tuple[bytes | None, int]:
    """A key or value that is null in a long encoding, or whose length is impossible."""
    if size == -1:
        return None, pos
    raise CorruptRecordError(
        f"record {index} {what} claims {size} bytes, {record_end - pos} remain in it"
    )


def _decode_headers(
    data: bytes, pos: int, record_end: int, index: int
) -> tuple[tuple[Header, ...], int]:
    count, pos = read_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"record {index} has a negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        size, pos = read_varint(data, pos)
        if size < 0 or pos + size > record_end:
            if size == -1:
                raise CorruptRecordError(f"record {index} has a header with a null key")
            raise CorruptRecordError(
                f"record {index} header key claims {size} bytes, {record_end - pos} remain in it"
            )
        try:
            name = data[pos : pos + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(
                f"record {index} has a header key that is not UTF-8: {exc}"
            ) from None
        pos += size
        size, pos = read_varint(data, pos)
        value: bytes | None
        if size < 0 or pos + size > record_end:
            value, pos = _odd_bytes(size, pos, record_end, index, "header value")
        else:
            value = data[pos : pos + size]
            pos += size
        headers.append((name, value))
    return tuple(headers), pos


# -- encoding ---------------------------------------------------------------------------------
#
# The one record encoder: BatchBuilder and the producer's accumulator both build records from
# encode_record_tail (what does not depend on the record's place in its batch: key, value,
# headers; validated here) and frame_record (length, attributes and the two deltas), and
# batches with encode_batch.


def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    hint = " (encode it first, e.g. text.encode())" if isinstance(data, str) else ""
    raise TypeError(f"record {what} must be bytes or None, got {type(data).__name__}{hint}")


def _length_varint(size: int, what: str) -> bytes:
    if size > INT32_MAX:
        raise ValueError(f"record {what} of {size} bytes exceeds int32")
    return encode_varint(size)


def _encode_headers(headers: Iterable[Header]) -> bytes:
    parts: list[bytes] = []
    count = 0
    for header in headers:
        try:
            name, value = header
        except (TypeError, ValueError):
            raise TypeError(
                f"record headers must be (str, bytes | None) pairs, got {header!r}"
            ) from None
        if type(name) is not str:
            raise TypeError(f"record header keys must be str, got {type(name).__name__}")
        name_bytes = name.encode("utf-8")
        size = len(name_bytes)
        parts.append(VARINTS[size] if size < VARINT_TABLE_SIZE else _length_varint(size, "header"))
        parts.append(name_bytes)
        if value is None:
            parts.append(_NULL)
        else:
            if type(value) is not bytes:
                value = _as_bytes(value, f"header {name!r} value")
            size = len(value)
            parts.append(
                VARINTS[size] if size < VARINT_TABLE_SIZE else _length_varint(size, "header")
            )
            parts.append(value)
        count += 1
    if count > INT32_MAX:
        raise ValueError(f"a record holds at most {INT32_MAX} headers")
    parts.insert(0, encode_varint(count))
    return b"".join(parts)


def encode_record_tail(
    key: bytes | None, value: bytes | None, headers: Iterable[Header] | None
) -> bytes:
    """keyLength, key, valueLength, value, headerCount and headers of one record.

    Raises TypeError when the key or value is not bytes-like or None, or a header is not a
    (str, bytes-like | None) pair; ValueError for a length beyond int32.
    """
    if key is None:
        key_head = _NULL
        key_bytes = _NO_BYTES
    else:
        key_bytes = key if type(key) is bytes else _as_bytes(key, "key")
        size = len(key_bytes)
        key_head = VARINTS[size] if size < VARINT_TABLE_SIZE else _length_varint(size, "key")
    if value is None:
        value_head = _NULL
        value_bytes = _NO_BYTES
    else:
        value_bytes = value if type(value) is bytes else _as_bytes(value, "value")
        size = len(value_bytes)
        value_head = VARINTS[size] if size < VARINT_TABLE_SIZE else _length_varint(size, "value")
    headers_part = _encode_headers(headers) if headers else _NO_HEADERS
    return b"".join((key_head, key_bytes, value_head, value_bytes, headers_part))


def frame_record(tail: bytes, timestamp_delta: int, offset_delta: int) -> bytes:
    """The whole record: ``tail`` (from encode_record_tail) behind its length, attributes,
    timestampDelta (int64) and offsetDelta (>= 0, int32)."""
    delta_part = (
        VARINTS[timestamp_delta]
        if 0 <= timestamp_delta < VARINT_TABLE_SIZE
        else encode_varint(timestamp_delta)
    )
    offset_part = (
        VARINTS[offset_delta]
        if offset_delta < VARINT_TABLE_SIZE
        else _length_varint(offset_delta, "offset delta")
    )
    length = 1 + len(delta_part) + len(offset_part) + len(tail)
    length_part = VARINTS[length] if length < VARINT_TABLE_SIZE else _length_varint(length, "")
    return b"".join((length_part, _ATTRIBUTES, delta_part, offset_part, tail))


def encode_batch(
    records: bytes | bytearray,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int,
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
) -> bytes:
    """A v2 batch of ``count`` framed ``records`` (uncompressed; compressed here with the
    codec in ``attributes``): header, CRC-32C, payload. ``last_offset_delta`` defaults to
    ``count - 1`` (one record per offset); a cleaned batch keeps its original one. Raises
    ValueError when the batch would exceed the format's size limit."""
    codec = attributes & COMPRESSION_MASK
    payload = records if codec == 0 else compress(compression_of(codec), records)
    size = BATCH_OVERHEAD + len(payload)
    if size > BATCH_BYTES_MAX:
        raise ValueError(f"batch of {size} bytes exceeds the format's {BATCH_BYTES_MAX}")
    tail = _HEADER_TAIL.pack(
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(tail))
    head = _HEADER_HEAD.pack(base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC, crc)
    return b"".join((head, tail, payload))


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
        base_timestamp = timestamp if self._count == 0 else self._base_timestamp
        # Everything is encoded before the builder changes, so a rejected record leaves it
        # exactly as it was.
        record = frame_record(
            encode_record_tail(key, value, headers), timestamp - base_timestamp, self._count
        )
        self._body += record
        self._base_timestamp = base_timestamp
        self._count += 1
        self._max_timestamp = max(self._max_timestamp, timestamp)

    def build(self, base_offset: int = 0) -> bytes:
        """Encode the batch with ``base_offset``; raises ValueError if it holds no record."""
        if self._count == 0:
            raise ValueError("cannot build a record batch with no records")
        _check_range("base_offset", base_offset, 0, INT64_MAX - (self._count - 1))
        return encode_batch(
            self._body,
            self._count,
            self._base_timestamp,
            self._max_timestamp,
            self._attributes,
            base_offset=base_offset,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            partition_leader_epoch=self._partition_leader_epoch,
        )


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


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
