"""Rewriting one batch with a subset of its records, as the log cleaner does (Kafka's
MemoryRecords.filterTo).

``record_spans`` locates every record of a batch in its (decompressed) record bytes with just
what a cleaner decides on: offset, timestamp, key and whether the value is null; values and
headers are not decoded. ``rewrite_batch`` builds the batch again from the records kept.

A rewritten batch keeps the batch's identity: base offset, last offset delta (so a producer's
last sequence survives even when its last record goes), producer id and epoch, base
sequence, attributes (a compressed batch is recompressed with its codec), partition leader
epoch and base timestamp. Each kept record is copied byte for byte, so it keeps its offset and
timestamp deltas. Only recordsCount, maxTimestamp (recomputed from the kept records; under
LogAppendTime the batch's own is kept) and the CRC change. With no record kept the batch is
empty (recordsCount 0, no record bytes, codec none as Kafka writes it, maxTimestamp kept):
what the cleaner leaves of a producer's last batch so that its sequence and epoch survive.

Cleaned batches may therefore hold fewer records than offsets (recordsCount <
lastOffsetDelta + 1, even 0). Producers never send such batches (``validate_batches`` rejects
them); every reader of stored batches accepts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from brook.record.batch import (
    COMPRESSION_MASK,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Buffer,
    CorruptRecordError,
)
from brook.record.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from brook.record.records import encode_batch, records_payload
from brook.record.varint import read_varint, read_varlong

__all__ = ["BatchRecords", "RecordSpan", "record_spans", "rewrite_batch"]

# The zig-zag decoding of every varint of one or two bytes, by its 14 payload bits.
_ZIGZAG: Final = tuple((bits >> 1) ^ -(bits & 1) for bits in range(1 << 14))


class RecordSpan(NamedTuple):
    """One record of a batch: ``data[start:end]`` of its BatchRecords are its bytes."""

    offset: int
    timestamp: int
    key: bytes | None
    is_tombstone: bool  # the value is null
    start: int
    end: int


class BatchRecords(NamedTuple):
    header: BatchHeader
    data: bytes  # the uncompressed record bytes the spans point into
    spans: list[RecordSpan]


def record_spans(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    check_crc: bool = True,
) -> BatchRecords:
    """The records of the batch at ``buf[pos:]`` (``header`` already read), located.

    Checks the CRC unless ``check_crc`` is false (the caller did); CorruptRecordError when
    the batch is damaged or a record's framing is impossible (a length running past the
    batch, records not filling it exactly)."""
    data, start, end = records_payload(
        buf, pos, header, max_decompressed_bytes=max_decompressed_bytes, check_crc=check_crc
    )
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"batch has a negative recordsCount {count}")
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    spans: list[RecordSpan] = []
    append = spans.append
    position = start
    index = 0
    # Varints of one or two bytes (nearly every field of a record) are decoded inline from
    # _ZIGZAG; longer ones go to read_varint / read_varlong.
    zigzag = _ZIGZAG
    try:
        for index in range(count):
            record_start = position
            length, p = read_varint(data, position)
            record_end = p + length
            if not p < record_end <= end:
                raise CorruptRecordError(
                    f"record {index} at byte {record_start} of the records has length "
                    f"{length}; the batch's records end at byte {end}"
                )
            # Byte ``p`` is the record's attributes: unused by the format.
            b = data[p + 1]
            if b < 0x80:
                timestamp_delta = zigzag[b]
                p += 2
            else:
                timestamp_delta, p = read_varlong(data, p + 1)
            b = data[p]
            if b < 0x80:
                offset_delta = zigzag[b]
                p += 1
            elif data[p + 1] < 0x80:
                offset_delta = zigzag[(b & 0x7F) | (data[p + 1] << 7)]
                p += 2
            else:
                offset_delta, p = read_varint(data, p)
            b = data[p]
            if b < 0x80:
                key_size = zigzag[b]
                p += 1
            else:
                key_size, p = read_varint(data, p)
            key: bytes | None = None
            if key_size >= 0:
                key = data[p : p + key_size]
                p += key_size
            elif key_size != -1:
                raise CorruptRecordError(f"record {index} key claims {key_size} bytes")
            # Only whether the value is null matters: zig-zag -1 is the single byte 1.
            if p >= record_end:
                raise CorruptRecordError(f"record {index} ends before its value")
            append(
                RecordSpan(
                    base_offset + offset_delta,
                    base_timestamp + timestamp_delta
                    if log_append_time is None
                    else log_append_time,
                    key,
                    data[p] == 1,
                    record_start,
                    record_end,
                )
            )
            position = record_end
    except IndexError:
        raise CorruptRecordError(
            f"record {index} is truncated: its fields run past the end of the batch"
        ) from None
    if position != end:
        raise CorruptRecordError(
            f"{end - position} bytes follow the last of the batch's {count} records"
        )
    return BatchRecords(header, data, spans)


def rewrite_batch(records: BatchRecords, kept: Sequence[RecordSpan]) -> bytes:
    """The batch of ``records`` holding only ``kept`` (some of its spans, in order), with
    the batch's identity (module docstring); an empty batch when ``kept`` is empty."""
    header = records.header
    attributes = header.attributes
    max_timestamp = header.max_timestamp
    data = records.data
    if not kept:
        attributes &= ~COMPRESSION_MASK
        payload = b""
    else:
        payload = b"".join([data[span.start : span.end] for span in kept])
        if not attributes & TIMESTAMP_TYPE_MASK:
            max_timestamp = max(span.timestamp for span in kept)
    return encode_batch(
        payload,
        len(kept),
        header.base_timestamp,
        max_timestamp,
        attributes,
        base_offset=header.base_offset,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
    )
