"""What an append must satisfy before the log writes a byte of it (Kafka's LogValidator).

Two entry points: a leader's append of a producer's batches (checked, then offsets, leader
epoch and, for LogAppendTime topics, the timestamp patched into a private copy) and a
follower's append of batches copied from the leader (checked, written as they are). Both work
on batch headers and CRCs only; records are never decoded (the brief's hot-path rule), so
checks that Kafka makes per record are made here on the batch's first and largest timestamp.
The one exception is a leader's append to a cleanup.policy=compact log: its records are
decoded to refuse a record without a key, as Kafka does (the cleaner could not keep it).
Nothing here touches the disk: a rejected append has changed nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from brook.record import (
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    TimestampType,
    assign_offsets,
    iter_records,
    scan_batches,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
    verify_crc,
)
from brook_storage_node.log.errors import (
    InvalidTimestampError,
    InvariantViolationError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
)
from brook_storage_node.log.files import Buffer
from brook_storage_node.log.log_config import LONG_MAX, LogConfig
from brook_storage_node.log.log_segment import AppendedBatch
from brook_storage_node.log.time_index import NO_TIMESTAMP


class AppendOrigin(enum.Enum):
    """Who is appending as leader: a producer, or a coordinator writing control batches."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class ValidatedAppend:
    """Batches ready to be written: final bytes and what the segment and log must record."""

    data: Buffer
    batches: tuple[AppendedBatch, ...]
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    log_append_time_ms: int
    # (epoch, start offset) for each leader epoch the batches begin, in order.
    epoch_starts: tuple[tuple[int, int], ...]
    # Each batch's header as received (a leader's still has the client's base offset) and
    # its first assigned offset: what the producer state records.
    headers: tuple[tuple[BatchHeader, int], ...] = ()

    @property
    def size_bytes(self) -> int:
        return len(self.data)


def validate_leader_append(
    records: Buffer,
    *,
    next_offset: int,
    leader_epoch: int,
    config: LogConfig,
    now_ms: int,
    origin: AppendOrigin,
) -> ValidatedAppend:
    """Check a producer's batches and assign them offsets from ``next_offset``.

    Raises a RecordError (bad batch, with its Kafka code) or a LogError; ``records`` itself is
    never modified.
    """
    headers = validate_batches(records, max_batch_bytes=config.max_message_bytes)
    _check_fits_segment(len(records), config)
    log_append_time = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    for header in headers:
        if header.is_control and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError("clients may not write control batches (transaction markers)")
        if header.is_control:
            _check_marker_fields(header, len(headers))
        if not log_append_time:
            _check_create_time(header, now_ms, config.message_timestamp_difference_max_ms)
        if header.has_producer_id and not header.is_control:
            _check_producer_fields(header, len(headers))
    if config.compact:
        _check_keys(records, headers)
    # One copy, because offsets are patched into the bytes and the caller's must stay intact.
    data = bytearray(records)
    batches = []
    firsts = []
    position = 0
    offset = next_offset
    max_timestamp = NO_TIMESTAMP
    record_count = 0
    for header in headers:
        assign_offsets(data, position, offset)
        set_partition_leader_epoch(data, position, leader_epoch)
        batch_max_timestamp = header.max_timestamp
        if log_append_time:
            set_log_append_time(data, position, now_ms)
            batch_max_timestamp = now_ms
        last_offset = offset + header.last_offset_delta
        batches.append(AppendedBatch(position, header.size, last_offset, batch_max_timestamp))
        firsts.append((header, offset))
        max_timestamp = max(max_timestamp, batch_max_timestamp)
        record_count += header.records_count
        offset = last_offset + 1
        position += header.size
    return ValidatedAppend(
        data=data,
        batches=tuple(batches),
        first_offset=next_offset,
        last_offset=offset - 1,
        max_timestamp=max_timestamp,
        record_count=record_count,
        log_append_time_ms=now_ms if log_append_time else -1,
        epoch_starts=((leader_epoch, next_offset),),
        headers=tuple(firsts),
    )


def validate_follower_append(
    records: Buffer, *, log_end_offset: int, config: LogConfig
) -> ValidatedAppend:
    """Check batches copied from the leader, offsets already assigned.

    Every batch must be whole and pass its CRC, and offsets must move forward from
    ``log_end_offset``. Gaps between batches are allowed: a compacted leader log has them.
    The leader already applied max.message.bytes when it accepted the batches, and a later
    change of that setting must not stop replication of what it accepted.
    """
    if not records:
        raise InvalidRecordError("a follower append holds no record batch")
    _check_fits_segment(len(records), config)
    batches = []
    firsts = []
    epoch_starts: list[tuple[int, int]] = []
    expected_offset = log_end_offset
    end = 0
    max_timestamp = NO_TIMESTAMP
    record_count = 0
    first_offset = -1
    for position, header in scan_batches(records):
        verify_crc(records, position, header)
        if header.base_offset < expected_offset or header.last_offset_delta < 0:
            raise UnexpectedAppendOffsetError(
                f"replicated batch at byte {position} has offsets {header.base_offset}.."
                f"{header.last_offset}; the log expects offsets from {expected_offset}"
            )
        if first_offset < 0:
            first_offset = header.base_offset
        epoch = header.partition_leader_epoch
        if epoch >= 0 and (not epoch_starts or epoch_starts[-1][0] != epoch):
            epoch_starts.append((epoch, header.base_offset))
        batches.append(
            AppendedBatch(position, header.size, header.last_offset, header.max_timestamp)
        )
        firsts.append((header, header.base_offset))
        max_timestamp = max(max_timestamp, header.max_timestamp)
        record_count += header.records_count
        expected_offset = header.next_offset
        end = position + header.size
    if end != len(records):
        raise CorruptRecordError(
            f"replicated data has {len(records) - end} bytes after its last complete batch"
        )
    return ValidatedAppend(
        data=records,
        batches=tuple(batches),
        first_offset=first_offset,
        last_offset=expected_offset - 1,
        max_timestamp=max_timestamp,
        record_count=record_count,
        log_append_time_ms=-1,
        epoch_starts=tuple(epoch_starts),
        headers=tuple(firsts),
    )


def check_append_offsets(validated: ValidatedAppend, log_end_offset: int, *, dense: bool) -> None:
    """InvariantViolationError unless ``validated`` may be written at ``log_end_offset``: its
    offsets go forward from there and, when ``dense`` (a leader's, offsets assigned here),
    start exactly there and number each record once (last = first + count - 1). The
    validators make this so for any input; a violation is a bug in them, caught before a
    byte is written. Three comparisons per append."""
    first, last = validated.first_offset, validated.last_offset
    if first < log_end_offset or last < first:
        raise InvariantViolationError(
            f"an append of offsets {first}..{last} at log end offset {log_end_offset}"
        )
    if dense and (first != log_end_offset or last - first + 1 != validated.record_count):
        raise InvariantViolationError(
            f"a leader append of offsets {first}..{last} with {validated.record_count} "
            f"records at log end offset {log_end_offset}: offsets must be dense from there"
        )


def _check_fits_segment(size: int, config: LogConfig) -> None:
    if size > config.segment_bytes:
        raise RecordListTooLargeError(
            f"an append of {size} bytes cannot fit in a segment "
            f"(segment.bytes={config.segment_bytes})"
        )


def _check_keys(records: Buffer, headers: Sequence[BatchHeader]) -> None:
    """A compacted log's records all need a key: Kafka refuses a keyless one with
    INVALID_RECORD. Control batches (transaction markers) are exempt. The CRCs were checked
    already."""
    position = 0
    for header in headers:
        if not header.is_control:
            for record in iter_records(records, position, check_crc=False):
                if record.key is None:
                    raise InvalidRecordError(
                        "Compacted topic cannot accept message without key: the record at "
                        f"offset delta {record.offset - header.base_offset} of the batch at "
                        f"byte {position} has a null key"
                    )
        position += header.size


def _check_producer_fields(header: BatchHeader, batch_count: int) -> None:
    """An idempotent batch must say who sent it, in which epoch, from which sequence, and
    travel alone: as in Kafka (one batch per partition per Produce), a retry is then
    recognised or rejected as a whole, never half appended."""
    if header.producer_epoch < 0 or header.base_sequence < 0:
        raise InvalidRecordError(
            f"batch of producer {header.producer_id} has producer epoch "
            f"{header.producer_epoch} and base sequence {header.base_sequence}; an idempotent "
            f"batch needs both >= 0"
        )
    if batch_count != 1:
        raise InvalidRecordError(
            f"an append of producer {header.producer_id} holds {batch_count} batches; an "
            f"idempotent producer sends one batch per partition per request"
        )


def _check_marker_fields(header: BatchHeader, batch_count: int) -> None:
    """A coordinator's control batch is one transaction marker of one producer, alone in its
    append: the log checks it against that producer's state before writing it."""
    if header.producer_id < 0 or header.producer_epoch < 0 or not header.is_transactional:
        raise InvalidRecordError(
            f"control batch of producer {header.producer_id} epoch {header.producer_epoch}: a "
            "transaction marker is transactional and names a producer id and epoch >= 0"
        )
    if batch_count != 1 or header.records_count != 1:
        raise InvalidRecordError(
            f"an append of {batch_count} batches with a control batch of "
            f"{header.records_count} records; a marker is one record, alone in its append"
        )


def _check_create_time(header: BatchHeader, now_ms: int, difference_max_ms: int) -> None:
    if difference_max_ms >= LONG_MAX:
        return
    for timestamp in (header.base_timestamp, header.max_timestamp):
        if timestamp != NO_TIMESTAMP and abs(timestamp - now_ms) > difference_max_ms:
            raise InvalidTimestampError(
                f"batch timestamp {timestamp} is more than message.timestamp.difference.max.ms="
                f"{difference_max_ms} from the broker's clock ({now_ms})"
            )
