"""__consumer_offsets on the storage nodes: the service's ``OffsetsLog``; the same writer and
reader, for another ``FencedTopic``, is the transaction coordinators' __transaction_state.

Append: the records become one RecordBatch v2 (``brook.record.build_batch``), produced to the
partition's leader with acks=all, so a commit is acknowledged only once every in-sync replica
has it. The whole append, retries included, is bounded by offsets.commit.timeout.ms. The
group manager merges the writes queued behind a partition's in-flight append into its next
one (group commit); here an append is one batch with one sequence, built once, so a retry
sends the same bytes and nothing joins a batch once it has been sent.

Fencing (``fencing.py``): ``claim`` makes this coordinator the partition's writer for its
coordinator epoch (producer id ``FencedTopic.producer_id(partition)``, producer epoch =
coordinator epoch) before the partition is replayed: it continues the sequence of the
epoch's last batch in the log (this coordinator wrote it before a restart or a reload) or
appends a fence batch at sequence 0, after which the leader rejects every batch of an older
owner. Appends carry the next sequence; a retry sends the same bytes, so the leader's
duplicate detection answers a batch it already has with its original offsets. A batch whose
outcome stays unknown after offsets.commit.timeout.ms is kept and sent again, as is, by the
next ``claim`` before anything else; until then the partition takes no appends.

Read: fetches from the leader in offsets.load.buffer.size chunks, from a start offset up to the
high watermark seen by the first fetch (records above it are not committed, and records
appended while a partition loads are this coordinator's own, applied as they are written).

Routing comes from the coordinator's metadata (``ClusterMetadata``, fed by WatchMetadata).
A leader that moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, a node that does not answer)
is retried after the next metadata update or a back-off, whichever comes first, and only while
the request's time allows. Channels, back-off and the mapping of transport failures to Kafka codes
are every Brook client's (``brook.rpc``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import grpc

from brook.config import Config
from brook.errors import BrookError, ErrorCode, error_code
from brook.metadata.info import PartitionInfo
from brook.record import BatchHeader, CorruptRecordError, iter_records, scan_batches
from brook.record import build_batch as build_record_batch
from brook.record.varint import INT32_MAX
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.rpc.channels import ChannelPool, channel_options
from brook.rpc.errors import rpc_error
from brook.v1 import storage_pb2, storage_pb2_grpc
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.fencing import (
    OFFSETS_LOG,
    FencedTopic,
    OffsetsWriteError,
    producer_epoch_for,
)
from brook_group_coordinator.offsets_log import LogRecord
from brook_group_coordinator.records import FENCE_KEY, encode_fence_value

__all__ = ["OffsetsLogSettings", "StorageOffsetsLog"]

_T = TypeVar("_T")

CLIENT_ID: Final = "group-coordinator"
# Reads retry a leader change this many times in a row before the load fails (and is
# started again by the service while the partition is still assigned here).
READ_ATTEMPTS_MAX: Final = 10
# Answers after which the leader may still have appended the batch (acks=all not met in time).
_APPENDED_MAYBE: Final = frozenset(
    {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
)
# The next sequence is not known: learn it from the log's last batch at the next claim.
_SEQUENCE_UNKNOWN: Final = -1


@dataclass(frozen=True, slots=True)
class OffsetsLogSettings:
    commit_timeout_ms: int
    load_buffer_bytes: int
    request_timeout_ms: int
    retry_backoff: RetryBackoff

    @classmethod
    def from_config(cls, config: Config) -> OffsetsLogSettings:
        return cls(
            commit_timeout_ms=config.get_int("offsets.commit.timeout.ms"),
            load_buffer_bytes=config.get_int("offsets.load.buffer.size"),
            request_timeout_ms=config.get_int("request.timeout.ms"),
            retry_backoff=RetryBackoff(
                config.get_int("retry.backoff.ms"), config.get_int("retry.backoff.max.ms")
            ),
        )


@dataclass(slots=True)
class _Writer:
    """This coordinator as the partition's fenced producer."""

    producer_epoch: int
    next_sequence: int
    fenced: bool = False
    # (batch bytes, record count) of a batch that may or may not be in the log.
    in_doubt: tuple[bytes, int] | None = None


class _Retry(Exception):
    """An attempt failed in a way another attempt (after fresh metadata) may fix."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Attempt = Callable[[storage_pb2_grpc.StorageServiceStub, PartitionInfo, float], Awaitable[_T]]


class StorageOffsetsLog:
    def __init__(
        self,
        metadata: ClusterMetadata,
        settings: OffsetsLogSettings,
        topic: FencedTopic = OFFSETS_LOG,
    ) -> None:
        """``topic``: which internal topic this log is, and its writers' producer ids."""
        self._metadata = metadata
        self._settings = settings
        self._fenced_topic = topic
        self._topic = topic.name
        self._network = ChannelPool(
            channel_options(
                client_id=CLIENT_ID,
                send_bytes_max=settings.load_buffer_bytes,
                receive_bytes_max=settings.load_buffer_bytes,
                reconnect_backoff_ms=settings.retry_backoff.base_ms,
                reconnect_backoff_max_ms=settings.retry_backoff.max_ms,
            )
        )
        self._writers: dict[int, _Writer] = {}

    async def close(self) -> None:
        await self._network.close()

    async def _on_leader(
        self, partition: int, timeout_s: float, attempts_max: int, attempt: Attempt[_T]
    ) -> _T:
        """``attempt`` against the partition's leader, retried after fresh metadata while it
        raises ``_Retry``, at most ``attempts_max`` times and within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        problem = (ErrorCode.REQUEST_TIMED_OUT, "no attempt was made")
        for failures in range(attempts_max):
            seen = self._metadata.offset
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                break
            route = self._metadata.leader(partition, self._topic)
            if route is None:
                problem = (
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"{self._topic}-{partition} has no leader in this coordinator's metadata",
                )
            else:
                info, address = route
                try:
                    return await attempt(self._network.storage(address), info, remaining_s)
                except _Retry as retry:
                    problem = (retry.code, f"node {info.leader}: {retry.message}")
                except grpc.aio.AioRpcError as error:
                    code, message = rpc_error(error)
                    if not code.retriable:
                        raise BrookError(code, message) from None
                    problem = (code, f"node {info.leader}: {message}")
            if self._metadata.offset == seen:
                wait_s = min(
                    backoff_s(self._settings.retry_backoff, failures + 1),
                    deadline - loop.time(),
                )
                await self._metadata.wait_for_change(wait_s)
        code, message = problem
        if code is not ErrorCode.REQUEST_TIMED_OUT and loop.time() >= deadline:
            message = f"timed out after {timeout_s * 1000:.0f} ms; last: {code.name}: {message}"
            code = ErrorCode.REQUEST_TIMED_OUT
        raise BrookError(code, message)

    # -- append ---------------------------------------------------------------------------------

    async def claim(self, partition: int, coordinator_epoch: int) -> int | None:
        """Makes this coordinator the partition's writer at ``coordinator_epoch`` (see the
        module docstring); returns the offset of the fence record it appended, if it did.
        Raises OffsetsWriteError (``fenced``: a newer epoch has written) or BrookError; the
        caller serializes it with the partition's appends."""
        epoch = producer_epoch_for(partition, coordinator_epoch, self._topic)
        writer = self._writers.get(partition)
        if writer is None or writer.producer_epoch < epoch:
            writer = _Writer(epoch, _SEQUENCE_UNKNOWN)
            self._writers[partition] = writer
        if writer.producer_epoch > epoch or writer.fenced:
            raise OffsetsWriteError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"{self._topic}-{partition}: coordinator epoch {coordinator_epoch} is fenced",
                fenced=True,
            )
        if writer.in_doubt is not None:
            batch, count = writer.in_doubt
            await self._send(partition, writer, batch, count)
            return None
        if writer.next_sequence == _SEQUENCE_UNKNOWN:
            writer.next_sequence = await self._sequence_from_log(partition, writer)
            if writer.next_sequence != 0:
                return None
        _, high_watermark = await self.bounds(partition)
        fence = self._batch(partition, writer, [(FENCE_KEY, encode_fence_value(coordinator_epoch))])
        offset = await self._send(partition, writer, fence, 1)
        if offset < high_watermark:
            # The leader took the fence for a retry of an older sequence-0 batch of this epoch:
            # the log has batches of the epoch the tail read did not show. Writing on from
            # sequence 1 could be answered as duplicates of them, so learn the sequence again.
            writer.next_sequence = _SEQUENCE_UNKNOWN
            raise OffsetsWriteError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"{self._topic}-{partition}: the fence was a duplicate at offset {offset}, "
                f"below the high watermark {high_watermark}",
                fenced=False,
            )
        return offset

    async def _sequence_from_log(self, partition: int, writer: _Writer) -> int:
        """The sequence after the last batch of this producer and epoch in the log, or 0 when
        it has none (a fence is due). Only the owner at this epoch writes it, so its batches,
        if any, end the log (above a fence of this epoch nothing older is accepted), control
        batches aside (``_last_batch``)."""
        tail = await self._last_batch(partition)
        if tail is None or tail.producer_id != self._fenced_topic.producer_id(partition):
            return 0
        if tail.producer_epoch > writer.producer_epoch:
            writer.fenced = True
            raise OffsetsWriteError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"{self._topic}-{partition}: producer epoch {tail.producer_epoch} wrote at "
                f"offset {tail.base_offset}, after coordinator epoch {writer.producer_epoch}",
                fenced=True,
            )
        if tail.producer_epoch < writer.producer_epoch:
            return 0
        return (tail.last_sequence + 1) % (INT32_MAX + 1)

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        if not records:
            raise ValueError("an append needs at least one record")
        writer = self._writers.get(partition)
        if writer is None:
            raise BrookError(
                ErrorCode.NOT_COORDINATOR, f"{self._topic}-{partition} is not claimed here"
            )
        if writer.fenced or writer.in_doubt is not None or writer.next_sequence < 0:
            raise OffsetsWriteError(
                ErrorCode.NOT_COORDINATOR,
                f"{self._topic}-{partition} must be loaded again before it takes writes",
                fenced=writer.fenced,
            )
        batch = self._batch(partition, writer, records)
        return await self._send(partition, writer, batch, len(records))

    def _batch(
        self, partition: int, writer: _Writer, records: Sequence[tuple[bytes, bytes | None]]
    ) -> bytes:
        now_ms = time.time_ns() // 1_000_000
        return build_record_batch(
            [(now_ms, key, value, ()) for key, value in records],
            producer_id=self._fenced_topic.producer_id(partition),
            producer_epoch=writer.producer_epoch,
            base_sequence=writer.next_sequence,
        )

    async def _send(self, partition: int, writer: _Writer, batch: bytes, count: int) -> int:
        """Produces ``batch`` (the same bytes on every retry) within offsets.commit.timeout.ms
        and moves the writer's sequence on; returns the offset of its last record."""
        # Whether some attempt ended without the leader saying it did not append the batch.
        appended_maybe = False

        async def produce(
            stub: storage_pb2_grpc.StorageServiceStub, info: PartitionInfo, remaining_s: float
        ) -> int:
            nonlocal appended_maybe
            request = storage_pb2.ProduceRequest(
                acks=storage_pb2.ACKS_ALL,
                timeout_ms=max(1, int(remaining_s * 1000)),
                # Storage nodes refuse internal topics and the reserved producer ids to any
                # other origin.
                origin=storage_pb2.PRODUCE_ORIGIN_COORDINATOR,
                partitions=[
                    storage_pb2.PartitionProduceData(
                        topic=self._topic, partition=partition, records=batch
                    )
                ],
            )
            try:
                response = await stub.Produce(request, timeout=remaining_s)
            except BaseException:
                appended_maybe = True
                raise
            answer = _only(response.partitions, self._topic, partition)
            code = error_code(answer.error_code)
            if code is ErrorCode.NONE:
                return int(answer.base_offset) + count - 1
            if code in _APPENDED_MAYBE:
                appended_maybe = True
            if code.retriable:
                raise _Retry(code, answer.error_message or code.name)
            raise BrookError(code, answer.error_message or None)

        timeout_s = self._settings.commit_timeout_ms / 1000
        try:
            # The deadline bounds the attempts; the count only guards against a tight loop.
            last = await self._on_leader(partition, timeout_s, 1_000, produce)
        except BrookError as error:
            raise self._failed(partition, writer, batch, count, error, appended_maybe) from None
        except BaseException:
            # Cancelled (the partition dropped) or broken with the batch possibly in the log.
            if appended_maybe:
                writer.in_doubt = (batch, count)
            raise
        writer.in_doubt = None
        writer.next_sequence = (writer.next_sequence + count) % (INT32_MAX + 1)
        return last

    def _failed(
        self,
        partition: int,
        writer: _Writer,
        batch: bytes,
        count: int,
        error: BrookError,
        appended_maybe: bool,
    ) -> BrookError:
        where = f"{self._topic}-{partition}"
        if error.code is ErrorCode.INVALID_PRODUCER_EPOCH:
            writer.fenced = True
            writer.in_doubt = None
            return OffsetsWriteError(
                error.code,
                f"{where}: a newer coordinator has written: {error.message}",
                fenced=True,
            )
        if error.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            writer.in_doubt = None
            # The leader's state is not what this writer believes: typically the leader forgot
            # this producer (producer.id.expiration.ms) and then took a deposed owner's batch
            # as an unknown producer's first, at its older epoch (docs/decisions.md, "Fencing
            # coordinator writes"). The next claim reads the log's last batch: a newer epoch
            # there fences this writer, an older one is fenced again at sequence 0.
            writer.next_sequence = _SEQUENCE_UNKNOWN
            return OffsetsWriteError(error.code, f"{where}: {error.message}", fenced=False)
        if appended_maybe:
            writer.in_doubt = (batch, count)
            return OffsetsWriteError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{where}: the append's outcome is unknown: {error.code.name}: {error.message}",
                fenced=False,
            )
        return error

    # -- read -----------------------------------------------------------------------------------

    async def bounds(self, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of the partition now."""

        async def list_offsets(
            stub: storage_pb2_grpc.StorageServiceStub, info: PartitionInfo, remaining_s: float
        ) -> tuple[int, int]:
            # One spec per request: a request names each partition once.
            found: list[int] = []
            for spec in (storage_pb2.OFFSET_SPEC_EARLIEST, storage_pb2.OFFSET_SPEC_LATEST):
                request = storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic=self._topic, partition=partition, spec=spec
                        )
                    ]
                )
                response = await stub.ListOffsets(request, timeout=remaining_s)
                for answer in response.partitions:
                    code = error_code(answer.error_code)
                    if code is not ErrorCode.NONE:
                        if code.retriable:
                            raise _Retry(code, answer.error_message or code.name)
                        raise BrookError(code, answer.error_message or None)
                    found.append(int(answer.offset))
            if len(found) != 2:
                raise BrookError(ErrorCode.UNKNOWN_SERVER_ERROR, "ListOffsets answered partly")
            return found[0], found[1]

        return await self._on_leader(
            partition, self._settings.request_timeout_ms / 1000, READ_ATTEMPTS_MAX, list_offsets
        )

    async def _last_batch(self, partition: int) -> BatchHeader | None:
        """The header of the partition's last data batch below its high watermark (None:
        there is none). Control batches are stepped over: no writer of the topic writes one,
        but a transaction marker could be written into it before the storage nodes refused
        that, and taking it for the tail would fence at sequence 0 for ever."""
        log_start, end = await self.bounds(partition)
        stalls = 0
        while end > log_start:
            response = await self._fetch(partition, end - 1)
            records = bytes(response.records)
            last: BatchHeader | None = None
            first_below_end: int | None = None
            try:
                for _, header in scan_batches(records):
                    if header.next_offset > end:
                        continue
                    if first_below_end is None:
                        first_below_end = header.base_offset
                    if not header.is_control:
                        last = header
            except CorruptRecordError as error:
                raise BrookError(
                    ErrorCode.CORRUPT_MESSAGE, f"{self._topic}-{partition}: {error}"
                ) from None
            if last is not None:
                return last
            if first_below_end is not None:
                end = first_below_end  # only control batches there: look before them
                stalls = 0
                continue
            if response.log_start_offset >= end:
                return None  # everything was deleted meanwhile
            if response.high_watermark >= end:
                # The leader has everything below ``end`` and no batch there: the cleaner
                # removed the tail. It keeps the last batch of every producer the log still
                # knows, and every batch here is this topic's one writer's, so the writer's
                # producer has expired and a fence at sequence 0 is what the log accepts.
                return None
            # A new leader whose own high watermark has not caught up yet.
            stalls += 1
            if stalls >= READ_ATTEMPTS_MAX:
                raise BrookError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"{self._topic}-{partition} returned no batch below offset {end} "
                    f"{READ_ATTEMPTS_MAX} times",
                )
            await asyncio.sleep(backoff_s(self._settings.retry_backoff, stalls))
        return None

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        offset = max(0, from_offset)
        end: int | None = None
        stalls = 0
        while end is None or offset < end:
            response = await self._fetch(partition, offset)
            if offset < response.log_start_offset:
                # Removed by retention or DeleteRecords: nothing of it can be replayed.
                offset = int(response.log_start_offset)
                continue
            if end is None:
                end = int(response.high_watermark)
            records = bytes(response.records)
            if not records and response.high_watermark >= end:
                # No batch left in [offset, end) on a leader that has all of it: compaction
                # removed the log's tail (a gap before an empty active segment).
                return
            before = offset
            try:
                for position, header in scan_batches(records):
                    if header.is_control or header.next_offset <= offset:
                        continue
                    for record in iter_records(records, position):
                        if record.offset < offset or record.offset >= end:
                            continue
                        if record.key is not None:
                            yield LogRecord(record.offset, record.key, record.value)
                    offset = max(offset, header.next_offset)
            except CorruptRecordError as error:
                raise BrookError(
                    ErrorCode.CORRUPT_MESSAGE, f"{self._topic}-{partition}: {error}"
                ) from None
            offset = max(offset, int(response.next_fetch_offset))
            if offset > before:
                stalls = 0
                continue
            # Below the first fetch's high watermark but nothing returned: a new leader whose
            # own high watermark has not caught up yet.
            stalls += 1
            if stalls >= READ_ATTEMPTS_MAX:
                raise BrookError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"{self._topic}-{partition} returned nothing at offset {offset}, below its "
                    f"high watermark {end}, {stalls} times",
                )
            await asyncio.sleep(backoff_s(self._settings.retry_backoff, stalls))

    async def _fetch(self, partition: int, offset: int) -> storage_pb2.FetchPartitionResponse:
        buffer_bytes = self._settings.load_buffer_bytes

        async def fetch(
            stub: storage_pb2_grpc.StorageServiceStub, info: PartitionInfo, remaining_s: float
        ) -> storage_pb2.FetchPartitionResponse:
            request = storage_pb2.FetchRequest(
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=buffer_bytes,
                partitions=[
                    storage_pb2.FetchPartition(
                        topic=self._topic,
                        partition=partition,
                        fetch_offset=offset,
                        partition_max_bytes=buffer_bytes,
                    )
                ],
            )
            response = await stub.Fetch(request, timeout=remaining_s)
            answer: storage_pb2.FetchPartitionResponse = _only(
                response.partitions, self._topic, partition
            )
            code = error_code(answer.error_code)
            if code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                return answer
            if code.retriable:
                raise _Retry(code, answer.error_message or code.name)
            raise BrookError(code, answer.error_message or None)

        answer = await self._on_leader(
            partition, self._settings.request_timeout_ms / 1000, READ_ATTEMPTS_MAX, fetch
        )
        if error_code(answer.error_code) is ErrorCode.OFFSET_OUT_OF_RANGE:
            # An error answer carries no log start offset: ask for it. Below it, the records
            # were removed (retention, DeleteRecords, compact,delete) and the answer says
            # where the log starts now; anything else out of range is an error.
            log_start, _ = await self.bounds(partition)
            if offset >= log_start:
                raise BrookError(ErrorCode.OFFSET_OUT_OF_RANGE, answer.error_message or None)
            answer.log_start_offset = log_start
        return answer


_Answer = TypeVar(
    "_Answer", storage_pb2.PartitionProduceResponse, storage_pb2.FetchPartitionResponse
)


def _only(answers: Sequence[_Answer], topic: str, partition: int) -> _Answer:
    for answer in answers:
        if answer.topic == topic and answer.partition == partition:
            return answer
    raise BrookError(
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"the storage node's answer did not include {topic}-{partition}",
    )
