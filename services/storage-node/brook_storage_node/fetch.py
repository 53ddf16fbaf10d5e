"""Reading partitions for Fetch and Subscribe: byte budgets, the progress rule, decoding.

One read pass takes a list of ``FetchTarget``s (partition, offset, per-partition byte limit)
and a response budget, and answers a ``FetchPartitionResponse`` per target, in order:

- whole RecordBatch v2 batches as stored, below the high watermark only, or below the last
  stable offset for READ_COMMITTED, which also gets the aborted transactions overlapping the
  range returned (Kafka's clients drop their records) and, with ``decode``, has them and the
  control records dropped here;
- each partition gets at most its own limit and what is left of the response budget; once
  the budget is spent the remaining partitions get no data (and no error), as in Kafka;
- progress rule: the first batch of the first partition with data is returned whole even if
  it is larger than both limits, so a consumer is never stuck behind one big batch;
- ``decode``: Records instead of batch bytes (per-record work, only when a client asks), with
  records below the fetch offset and control batches left out.

A pass reads from page cache with ``pread``; it runs inline or on a worker thread by the size
it may read (``partition.runs_inline``, figures in partition.py). It builds its protobuf
messages where it runs: they are new objects that no other code touches until it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from brook.errors import ErrorCode
from brook.record import TimestampType, iter_records, scan_batches
from brook.v1 import common_pb2, storage_pb2
from brook_storage_node.errors import (
    ErrorResult,
    PartitionError,
    error_result,
    leader_hint_proto,
    wire_code,
)
from brook_storage_node.log.transaction_index import AbortedTxn
from brook_storage_node.partition import NO_EPOCH, NO_OFFSET, Partition, runs_inline
from brook_storage_node.replica_manager import ReplicaManager

__all__ = [
    "FetchTarget",
    "ReadPass",
    "apply_error",
    "read_targets",
    "resolve_targets",
]

_TIMESTAMP_TYPES: Final = {
    TimestampType.CREATE_TIME: common_pb2.TIMESTAMP_TYPE_CREATE_TIME,
    TimestampType.LOG_APPEND_TIME: common_pb2.TIMESTAMP_TYPE_LOG_APPEND_TIME,
}


@dataclass(slots=True)
class FetchTarget:
    """One partition of a fetch or subscription and where to read it from."""

    topic: str
    partition_index: int
    fetch_offset: int
    max_bytes: int | None
    """Per-partition limit; None: only the response budget applies."""
    current_leader_epoch: int = NO_EPOCH
    rejected: ErrorResult | None = None
    """Why the request itself is wrong for this partition (never changes)."""
    partition: Partition | None = None
    error: ErrorResult | None = None
    """Why it cannot be served now (re-evaluated by ``resolve_targets``)."""
    last_fetched_epoch: int = NO_EPOCH
    """The epoch of the client's last fetched batch: a log that parts from it there is
    answered with ``diverging_epoch`` and no records."""


@dataclass(frozen=True, slots=True)
class ReadPass:
    responses: list[storage_pb2.FetchPartitionResponse]
    sizes_bytes: list[int]
    """Raw record bytes read per target (what decoded responses were decoded from)."""
    total_bytes: int
    has_error: bool
    visible_ends: dict[Partition, int]
    """Where each partition's visible data ended when it was read (its HW, or its last
    stable offset for READ_COMMITTED)."""


def resolve_targets(targets: Sequence[FetchTarget], replicas: ReplicaManager) -> None:
    """Look each target's partition up again (leadership may have moved since)."""
    for target in targets:
        target.partition = None
        target.error = target.rejected
        if target.rejected is not None:
            continue
        try:
            target.partition = replicas.leader_partition(
                target.topic, target.partition_index, target.current_leader_epoch
            )
        except PartitionError as exc:
            target.error = error_result(exc)


def apply_error(
    response: storage_pb2.FetchPartitionResponse
    | storage_pb2.TxnMarkerPartitionResult
    | storage_pb2.PartitionProducers,
    error: ErrorResult,
) -> None:
    """Set a per-partition answer's error code, message and leader hint."""
    response.error_code = wire_code(error.code)
    response.error_message = error.message
    if error.leader_hint is not None:
        response.current_leader.CopyFrom(leader_hint_proto(error.leader_hint))


def _read_sync(
    targets: Sequence[FetchTarget], response_bytes_max: int, decode: bool, read_committed: bool
) -> ReadPass:
    responses = []
    sizes = []
    total = 0
    has_error = False
    visible_ends: dict[Partition, int] = {}
    for target in targets:
        response = storage_pb2.FetchPartitionResponse(
            topic=target.topic,
            partition=target.partition_index,
            high_watermark=NO_OFFSET,
            last_stable_offset=NO_OFFSET,
            log_start_offset=NO_OFFSET,
            next_fetch_offset=target.fetch_offset,
        )
        responses.append(response)
        size = 0
        partition = target.partition
        if target.error is not None or partition is None:
            apply_error(
                response,
                target.error or ErrorResult(ErrorCode.UNKNOWN_SERVER_ERROR, "partition unresolved"),
            )
            has_error = True
            sizes.append(0)
            continue
        remaining = response_bytes_max - total
        limit = remaining if target.max_bytes is None else min(target.max_bytes, remaining)
        try:
            visible_ends[partition] = partition.visible_end(read_committed)
            diverging = partition.diverging_epoch(target.last_fetched_epoch, target.fetch_offset)
            if diverging is not None and diverging[0] == NO_EPOCH:
                # Kafka's answer to a consumer whose epoch the log cannot place.
                raise PartitionError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"the end of last fetched epoch {target.last_fetched_epoch} is unknown here",
                )
            if diverging is not None:
                # Answered at once and without records, as Kafka does: the client truncates.
                response.diverging_epoch.epoch, response.diverging_epoch.end_offset = diverging
                response.high_watermark = partition.high_watermark
                response.last_stable_offset = partition.last_stable_offset
                response.log_start_offset = partition.log_start_offset
                has_error = True
                sizes.append(0)
                continue
            data = partition.read(
                target.fetch_offset,
                max(limit, 0),
                min_one_batch=total == 0,
                read_committed=read_committed,
            )
            response.high_watermark = data.high_watermark
            response.last_stable_offset = data.last_stable_offset
            response.log_start_offset = data.log_start_offset
            response.next_fetch_offset = data.next_offset
            records = data.records
            size = len(records)
            if size:
                aborted: list[AbortedTxn] = []
                if read_committed:
                    aborted = partition.log.collect_aborted_transactions(
                        target.fetch_offset, data.next_offset
                    )
                if decode:
                    response.decoded_records.extend(
                        decode_records(records, target.fetch_offset, aborted)
                    )
                else:
                    response.records = _as_bytes(records)
                    response.aborted_transactions.extend(
                        common_pb2.AbortedTransaction(
                            producer_id=txn.producer_id, first_offset=txn.first_offset
                        )
                        for txn in aborted
                    )
        except Exception as exc:
            response.ClearField("records")
            response.ClearField("decoded_records")
            response.ClearField("aborted_transactions")
            response.high_watermark = response.last_stable_offset = NO_OFFSET
            response.log_start_offset = NO_OFFSET
            response.next_fetch_offset = target.fetch_offset
            apply_error(response, error_result(exc))
            has_error = True
            size = 0
        sizes.append(size)
        total += size
    return ReadPass(responses, sizes, total, has_error, visible_ends)


async def read_targets(
    targets: Sequence[FetchTarget],
    *,
    response_bytes_max: int,
    decode: bool,
    read_committed: bool = False,
) -> ReadPass:
    """One read pass over ``targets`` (resolved first), inline or on a thread by its size;
    ``read_committed``: READ_COMMITTED isolation (module docstring)."""
    may_read = 0
    for target in targets:
        partition = target.partition
        if partition is not None:
            limit = response_bytes_max if target.max_bytes is None else target.max_bytes
            # A log holds at most its size: small logs are read inline whatever the limits.
            may_read += min(limit, partition.log.size_bytes)
    if runs_inline(min(may_read, response_bytes_max)):
        return _read_sync(targets, response_bytes_max, decode, read_committed)
    return await asyncio.to_thread(_read_sync, targets, response_bytes_max, decode, read_committed)


def _as_bytes(records: memoryview) -> bytes:
    # The log's read returns a view of the bytes pread produced; when it spans them all (the
    # usual case) they are passed on as they are instead of copied.
    underlying = records.obj
    if isinstance(underlying, bytes) and len(underlying) == len(records):
        return underlying
    return bytes(records)


def decode_records(
    data: memoryview, fetch_offset: int, aborted: Sequence[AbortedTxn] = ()
) -> list[common_pb2.Record]:
    """The records of whole batches ``data`` at or after ``fetch_offset``, as protobuf
    Records; control batches (transaction markers) are not records a consumer sees, nor are
    the transactional batches of the ``aborted`` transactions (each spans its first offset to
    its marker)."""
    decoded = []
    for position, header in scan_batches(data):
        if header.is_control or header.last_offset < fetch_offset:
            continue
        if header.is_transactional and any(
            txn.producer_id == header.producer_id
            and txn.first_offset <= header.base_offset <= txn.last_offset
            for txn in aborted
        ):
            continue
        timestamp_type = _TIMESTAMP_TYPES[header.timestamp_type]
        for record in iter_records(data, position):
            if record.offset < fetch_offset:
                continue
            message = common_pb2.Record(
                offset=record.offset,
                timestamp_ms=record.timestamp,
                timestamp_type=timestamp_type,
                headers=[
                    common_pb2.RecordHeader(key=key)
                    if value is None
                    else common_pb2.RecordHeader(key=key, value=value)
                    for key, value in record.headers
                ],
            )
            if record.key is not None:
                message.key = record.key
            if record.value is not None:
                message.value = record.value
            decoded.append(message)
    return decoded
