"""The consumer's I/O: fetch positions, prefetched record batches, offset look-ups.

``SubscriptionState`` is what the application thread and the client's loop share (under one
lock): each assigned partition's position, whether it awaits an offset reset, has a fetch in
flight or unconsumed data buffered, and the buffered fetches themselves (raw batches,
``CompletedFetch``).

``Fetcher`` runs on the loop. It keeps one Fetch long-poll in flight per leader node for the
partitions that have a position and nothing buffered: as soon as ``poll`` hands out the last
buffered records of a partition the next fetch for it goes out, while the application is
still busy with those records (Kafka's fetch pipelining). Buffered data is bounded by one
fetch per node (``fetch.max.bytes``, ``max.partition.fetch.bytes``). Records are decoded only
when ``poll`` takes them, in the application's thread, so the loop stays free for I/O.

With ``isolation.level=read_committed`` the node answers up to the partition's last stable
offset (LSO) and lists the aborted transactions overlapping the answer; ``CompletedFetch``
drops their records as Kafka's consumer does (``AbortedTransactions``), never hands out a
record at or past the LSO, and never hands out a control record (a transaction marker).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

import grpc

from brook.client.config import ConsumerConfig, OffsetResetStrategy
from brook.client.errors import ApiError, ClientTimeoutError, OffsetOutOfRangeError, api_error
from brook.client.metadata import Metadata
from brook.client.requests import fetch_request, list_offsets_request
from brook.client.runtime import Notifier, Wakeup
from brook.client.sender import METADATA_REFRESH_CODES
from brook.client.types import ConsumerRecord, TopicPartition
from brook.errors import ErrorCode, error_code
from brook.record import (
    BATCH_OVERHEAD,
    BatchHeader,
    ControlType,
    RecordError,
    RecordFields,
    TimestampType,
    decode_records,
    read_header,
)
from brook.record.control import control_type_of
from brook.rpc.backoff import backoff_s
from brook.rpc.channels import ChannelPool, client_id_metadata
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, storage_pb2

__all__ = [
    "AbortedTransactions",
    "CompletedFetch",
    "Fetcher",
    "PartitionState",
    "SubscriptionState",
]

_log = logging.getLogger(__name__)

_SPEC = {
    OffsetResetStrategy.EARLIEST: storage_pb2.OFFSET_SPEC_EARLIEST,
    OffsetResetStrategy.LATEST: storage_pb2.OFFSET_SPEC_LATEST,
}


class PartitionState:
    """One assigned partition, as the consumer sees it. Guarded by SubscriptionState.lock."""

    __slots__ = (
        "buffered",
        "error",
        "failures",
        "fetching",
        "generation",
        "high_watermark",
        "position",
        "reset",
        "resetting",
        "retry_at",
        "tp",
    )

    def __init__(self, tp: TopicPartition, reset: OffsetResetStrategy | None) -> None:
        self.tp = tp
        # The offset of the next record to hand out; None until known.
        self.position: int | None = None
        # Pending offset reset (seek_to_beginning/end, auto.offset.reset), and whether its
        # ListOffsets is in flight.
        self.reset = reset
        self.resetting = False
        self.fetching = False
        # Unconsumed records of this partition wait in SubscriptionState.completed.
        self.buffered = False
        # Bumped by every seek: answers to requests made before it are ignored.
        self.generation = 0
        self.retry_at = 0.0
        self.failures = 0
        # Raised by poll until the application seeks (auto.offset.reset=none, fatal errors).
        self.error: BaseException | None = None
        self.high_watermark = -1

    def seek(self, offset: int | None, reset: OffsetResetStrategy | None) -> None:
        self.position = offset
        self.reset = reset
        self.generation += 1
        self.buffered = False
        self.error = None
        self.retry_at = 0.0
        self.failures = 0

    def back_off(self, config: ConsumerConfig, now: float) -> None:
        self.failures += 1
        self.retry_at = now + backoff_s(config.retry_backoff, self.failures)


class AbortedTransactions:
    """Kafka's read_committed filter over one fetch answer: the aborted transactions it lists,
    ordered by first offset, and the producers whose records are being skipped.

    For each batch of a producer, in log order: every aborted transaction whose first offset
    is at or below the batch's last offset makes its producer aborted from then on; a
    transactional batch of an aborted producer is skipped; that producer's ABORT marker (a
    control batch) ends it. A committed transaction's batches, and non-transactional ones,
    pass. (A producer has one transaction open at a time per partition, so a producer id
    names the aborted transaction until its marker.)"""

    __slots__ = ("_aborted", "_next", "_producers")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        # (first offset, producer id), oldest first.
        self._aborted = sorted((first, producer) for producer, first in aborted)
        self._next = 0
        self._producers: set[int] = set()

    def skips(self, header: BatchHeader, buffer: bytes, position: int, check_crc: bool) -> bool:
        """Whether the batch at ``position`` of ``buffer`` (whose header is ``header``) holds
        records of an aborted transaction; an ABORT marker ends its producer's."""
        producer = header.producer_id
        if producer < 0:
            return False
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next][0] <= header.last_offset:
            self._producers.add(aborted[self._next][1])
            self._next += 1
        if header.is_control:
            if producer in self._producers:
                records = decode_records(buffer, position, header=header, check_crc=check_crc)
                if records and control_type_of(records[0][2]) is ControlType.ABORT:
                    self._producers.discard(producer)
            return False
        return header.is_transactional and producer in self._producers


class CompletedFetch:
    """One partition's fetched bytes, handed out record by record as poll asks.

    ``aborted`` (read_committed): the answer's aborted transactions, as (producer id, first
    offset); ``stable_end``: its last stable offset, below which every record handed out
    lies."""

    __slots__ = (
        "_aborted",
        "_batch_end",
        "_epoch",
        "_index",
        "_pos",
        "_records",
        "_stable_end",
        "_timestamp_type",
        "buffer",
        "error",
        "exhausted",
        "generation",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        generation: int,
        buffer: bytes,
        aborted: AbortedTransactions | None = None,
        stable_end: int | None = None,
    ) -> None:
        self.tp = tp
        self._aborted = aborted
        self._stable_end = stable_end
        self.generation = generation
        self.buffer = buffer
        self.exhausted = False
        # Set when a batch cannot be decoded: poll raises it (and keeps raising until a
        # seek), after returning the records taken before it.
        self.error: ApiError | None = None
        self._pos = 0
        self._records: list[RecordFields] = []
        self._index = 0
        self._batch_end = -1
        self._epoch: int | None = None
        self._timestamp_type = TimestampType.CREATE_TIME

    def take(self, out: list[ConsumerRecord], position: int, limit: int, check_crcs: bool) -> int:
        """Append up to ``limit`` records at or after ``position`` to ``out``; returns the new
        position (past skipped control batches and compaction gaps too)."""
        topic, partition = self.tp
        buffer = self.buffer
        while limit > 0:
            records = self._records
            index = self._index
            count = len(records)
            if index < count:
                stop = min(count, index + limit)
                epoch = self._epoch
                timestamp_type = self._timestamp_type
                # One comprehension per batch rather than a loop step per record: this is
                # the consumer's per-record cost, next to decoding.
                taken = [
                    ConsumerRecord(
                        topic,
                        partition,
                        offset,
                        timestamp,
                        timestamp_type,
                        key,
                        value,
                        headers,
                        epoch,
                    )
                    for offset, timestamp, key, value, headers in records[index:stop]
                    if offset >= position
                ]
                if taken:
                    out += taken
                    position = max(position, taken[-1].offset + 1)
                    limit -= len(taken)
                self._index = stop
                continue
            position = max(position, self._batch_end)
            pos = self._pos
            if len(buffer) - pos < BATCH_OVERHEAD:
                self.exhausted = True
                break
            try:
                header = read_header(buffer, pos)
            except RecordError as error:
                self.error = self._corrupt(error, f"byte {pos} of the fetched data")
                break
            end = pos + header.size
            if end > len(buffer):
                # A fetch cut mid-batch: the next fetch starts at this batch again.
                self.exhausted = True
                break
            stable_end = self._stable_end
            if stable_end is not None and header.base_offset >= stable_end:
                # Past the last stable offset: not readable yet (the node should not send it).
                self._pos = len(buffer)
                self.exhausted = True
                break
            try:
                # Aborted transactions are tracked over every batch, also those before the
                # position (their markers may end a transaction).
                skipped = self._aborted is not None and self._aborted.skips(
                    header, buffer, pos, check_crcs
                )
            except RecordError as error:
                self.error = self._corrupt(error, f"offset {header.base_offset}")
                break
            if header.next_offset <= position:
                self._pos = end
                continue
            if header.is_control or skipped:
                self._pos = end
                position = header.next_offset
                continue
            try:
                decoded = decode_records(buffer, pos, header=header, check_crc=check_crcs)
            except RecordError as error:
                self.error = self._corrupt(error, f"offset {header.base_offset}")
                break
            batch_end = header.next_offset
            if stable_end is not None and batch_end > stable_end:
                decoded = [record for record in decoded if record[0] < stable_end]
                batch_end = stable_end
            self._pos = end
            self._records = decoded
            self._index = 0
            self._batch_end = batch_end
            epoch_value = header.partition_leader_epoch
            self._epoch = epoch_value if epoch_value >= 0 else None
            self._timestamp_type = header.timestamp_type
        if self._index >= len(self._records):
            position = max(position, self._batch_end)
            if len(buffer) - self._pos < BATCH_OVERHEAD:
                self.exhausted = True
        return position

    def _corrupt(self, error: RecordError, where: str) -> ApiError:
        return api_error(
            error_code(error.error_code),
            f"record batch of {self.tp.topic}-{self.tp.partition} at {where} is invalid: "
            f"{error}; seek past it to continue",
        )


class SubscriptionState:
    """The consumer's assignment and buffered fetches, shared by its thread and its loop."""

    def __init__(self, default_reset: OffsetResetStrategy) -> None:
        self.lock = threading.Lock()
        self.default_reset = default_reset
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.completed: collections.deque[CompletedFetch] = collections.deque()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        initial = None if self.default_reset is OffsetResetStrategy.NONE else self.default_reset
        with self.lock:
            wanted = list(dict.fromkeys(partitions))
            kept = {tp: self.partitions[tp] for tp in wanted if tp in self.partitions}
            self.partitions = {tp: kept.get(tp) or PartitionState(tp, initial) for tp in wanted}
            self.completed = collections.deque(
                fetch for fetch in self.completed if fetch.tp in self.partitions
            )

    def state(self, tp: TopicPartition) -> PartitionState:
        """The state of an assigned partition (lock held); ValueError names the mistake."""
        state = self.partitions.get(tp)
        if state is None:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return state


class Fetcher:
    """Fetches and offset resets for a consumer; ``run()`` is its task on the loop."""

    def __init__(
        self,
        config: ConsumerConfig,
        subscriptions: SubscriptionState,
        metadata: Metadata,
        network: ChannelPool,
        wakeup: Wakeup,
        notifier: Notifier,
    ) -> None:
        self._config = config
        self._subscriptions = subscriptions
        self._metadata = metadata
        self._network = network
        self._wakeup = wakeup
        self._notifier = notifier
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._call_metadata = client_id_metadata(config.client_id)
        self._fetching_nodes: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            while True:
                next_due = self._send_requests(time.monotonic())
                timeout_s = None if next_due is None else max(next_due - time.monotonic(), 0.0)
                await self._wakeup.wait(timeout_s)
        finally:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)

    def _start(
        self,
        coro: Coroutine[Any, Any, None],
        node_id: int,
        items: Iterable[tuple[PartitionState, int, object]],
    ) -> None:
        task = asyncio.create_task(self._guarded(coro, node_id, items))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(
        self,
        coro: Coroutine[Any, Any, None],
        node_id: int,
        items: Iterable[tuple[PartitionState, int, object]],
    ) -> None:
        try:
            await coro
        except Exception as error:
            # A defect, not an answer: its partitions stop with an error poll raises (until a
            # seek), instead of waiting forever for an answer that will not come.
            _log.exception("a consumer request to node %d failed unexpectedly", node_id)
            self._fetching_nodes.discard(node_id)
            self._failed_request(
                items, ErrorCode.UNKNOWN_SERVER_ERROR, f"request failed unexpectedly: {error!r}"
            )

    def _send_requests(self, now: float) -> float | None:
        """Start every fetch and reset that can go out now; returns when to look again."""
        cluster = self._metadata.cluster
        fetches: dict[int, tuple[str, list[tuple[PartitionState, int, int]]]] = {}
        resets: dict[int, tuple[str, list[tuple[PartitionState, int, OffsetResetStrategy]]]] = {}
        next_due: float | None = None
        unknown_leader = False
        with self._subscriptions.lock:
            for tp, state in self._subscriptions.partitions.items():
                if state.error is not None or state.fetching or state.resetting:
                    continue
                if state.reset is None and (state.position is None or state.buffered):
                    continue
                if state.retry_at > now:
                    next_due = state.retry_at if next_due is None else min(next_due, state.retry_at)
                    continue
                leader = cluster.leader(tp.topic, tp.partition)
                if leader is None:
                    unknown_leader = True
                    continue
                node_id, address = leader
                if state.reset is not None:
                    state.resetting = True
                    resets.setdefault(node_id, (address, []))[1].append(
                        (state, state.generation, state.reset)
                    )
                elif node_id not in self._fetching_nodes:
                    assert state.position is not None
                    fetches.setdefault(node_id, (address, []))[1].append(
                        (state, state.generation, state.position)
                    )
            for node_id, (_, items) in fetches.items():
                self._fetching_nodes.add(node_id)
                for state, _, _ in items:
                    state.fetching = True
        if unknown_leader:
            self._metadata.request_update()
        for node_id, (address, fetch_items) in fetches.items():
            self._start(self._fetch(node_id, address, fetch_items), node_id, fetch_items)
        for node_id, (address, reset_items) in resets.items():
            self._start(self._reset(node_id, address, reset_items), node_id, reset_items)
        return next_due

    async def _fetch(
        self, node_id: int, address: str, items: list[tuple[PartitionState, int, int]]
    ) -> None:
        config = self._config
        cluster = self._metadata.cluster
        request = fetch_request(
            config,
            [
                (state.tp, position, cluster.leader_epoch(state.tp.topic, state.tp.partition))
                for state, _, position in items
            ],
        )
        try:
            response = await self._network.storage(address).Fetch(
                request, timeout=self._request_timeout_s, metadata=self._call_metadata
            )
        except grpc.aio.AioRpcError as error:
            code, text = rpc_error(error)
            _log.debug("fetch from node %d (%s) failed: %s", node_id, address, text)
            self._failed_request(items, code, text)
            return
        finally:
            self._fetching_nodes.discard(node_id)
            self._wakeup.set()
        answers = {(p.topic, p.partition): p for p in response.partitions}
        now = time.monotonic()
        refresh = False
        with self._subscriptions.lock:
            for state, generation, position in items:
                state.fetching = False
                if not self._current(state, generation) or state.position != position:
                    continue
                answer = answers.get(state.tp)
                if answer is None:
                    continue
                code = error_code(answer.error_code)
                if code is ErrorCode.NONE:
                    state.failures = 0
                    state.high_watermark = answer.high_watermark
                    if answer.records:
                        completed = self._completed(state, generation, answer)
                        self._subscriptions.completed.append(completed)
                        state.buffered = True
                elif code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(state, position)
                else:
                    refresh |= self._partition_error(state, code, answer.error_message, now)
        if refresh:
            self._metadata.request_update()
        self._notifier.notify()

    def _completed(
        self, state: PartitionState, generation: int, answer: storage_pb2.FetchPartitionResponse
    ) -> CompletedFetch:
        if self._config.isolation_level != common_pb2.ISOLATION_LEVEL_READ_COMMITTED:
            return CompletedFetch(state.tp, generation, answer.records)
        return CompletedFetch(
            state.tp,
            generation,
            answer.records,
            AbortedTransactions(
                (aborted.producer_id, aborted.first_offset)
                for aborted in answer.aborted_transactions
            ),
            answer.last_stable_offset,
        )

    def _current(self, state: PartitionState, generation: int) -> bool:
        """Whether an answer for ``state`` made at ``generation`` still applies (lock held)."""
        return (
            self._subscriptions.partitions.get(state.tp) is state and state.generation == generation
        )

    def _out_of_range(self, state: PartitionState, position: int) -> None:
        strategy = self._subscriptions.default_reset
        if strategy is OffsetResetStrategy.NONE:
            state.error = OffsetOutOfRangeError({state.tp: position})
        else:
            _log.info(
                "fetch position %d of %s-%d is out of range; resetting to %s",
                position,
                state.tp.topic,
                state.tp.partition,
                strategy.value,
            )
            state.reset = strategy

    def _partition_error(
        self, state: PartitionState, code: ErrorCode, text: str, now: float
    ) -> bool:
        """Apply a per-partition error (lock held); True when metadata should be refreshed."""
        message = f"{state.tp.topic}-{state.tp.partition}: {text or code.name}"
        if code.retriable:
            _log.debug("retrying %s after %s", message, code.name)
            state.back_off(self._config, now)
            return code in METADATA_REFRESH_CODES
        state.error = api_error(code, message)
        return False

    def _failed_request(
        self,
        items: Iterable[tuple[PartitionState, int, object]],
        code: ErrorCode,
        text: str,
    ) -> None:
        now = time.monotonic()
        with self._subscriptions.lock:
            for state, generation, _ in items:
                state.fetching = False
                state.resetting = False
                if self._current(state, generation):
                    self._partition_error(state, code, text, now)
        self._metadata.request_update()
        self._notifier.notify()

    async def _reset(
        self,
        node_id: int,
        address: str,
        items: list[tuple[PartitionState, int, OffsetResetStrategy]],
    ) -> None:
        request = storage_pb2.ListOffsetsRequest(
            isolation_level=self._config.isolation_level,  # type: ignore[arg-type]
            partitions=[
                storage_pb2.ListOffsetsPartition(
                    topic=state.tp.topic,
                    partition=state.tp.partition,
                    spec=_SPEC[strategy],
                    current_leader_epoch=-1,
                )
                for state, _, strategy in items
            ],
        )
        try:
            response = await self._network.storage(address).ListOffsets(
                request, timeout=self._request_timeout_s
            )
        except grpc.aio.AioRpcError as error:
            code, text = rpc_error(error)
            self._failed_request(items, code, f"offset reset via node {node_id}: {text}")
            return
        finally:
            self._wakeup.set()
        answers = {(p.topic, p.partition): p for p in response.partitions}
        now = time.monotonic()
        refresh = False
        with self._subscriptions.lock:
            for state, generation, strategy in items:
                state.resetting = False
                if not self._current(state, generation) or state.reset is not strategy:
                    continue
                answer = answers.get(state.tp)
                if answer is None:
                    continue
                code = error_code(answer.error_code)
                if code is ErrorCode.NONE and answer.offset >= 0:
                    state.position = answer.offset
                    state.reset = None
                    state.failures = 0
                elif code is ErrorCode.NONE:
                    state.error = api_error(
                        ErrorCode.UNKNOWN_SERVER_ERROR,
                        f"{state.tp.topic}-{state.tp.partition}: the node answered an offset "
                        f"reset ({strategy.value}) with offset {answer.offset}",
                    )
                else:
                    refresh |= self._partition_error(state, code, answer.error_message, now)
        if refresh:
            self._metadata.request_update()
        self._notifier.notify()

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, tuple[int, int]],
        deadline: float,
    ) -> dict[TopicPartition, storage_pb2.ListOffsetsPartitionResponse]:
        """Look up offsets for ``specs`` (partition -> (OffsetSpec, timestamp ms)), retrying
        retriable errors until ``deadline`` (monotonic); raises ClientTimeoutError then."""
        self._metadata.add_topics({tp.topic for tp in specs})
        pending = dict(specs)
        results: dict[TopicPartition, storage_pb2.ListOffsetsPartitionResponse] = {}
        failures = 0
        last_problem = "no leader known yet"
        while True:
            cluster = self._metadata.cluster
            by_node: dict[str, list[TopicPartition]] = {}
            for tp in pending:
                leader = cluster.leader(tp.topic, tp.partition)
                if leader is not None:
                    by_node.setdefault(leader[1], []).append(tp)
            answers = await asyncio.gather(
                *(self._list_offsets_on(address, tps, pending) for address, tps in by_node.items())
            )
            for answer in answers:
                for tp, result in answer.items():
                    if isinstance(result, ApiError):
                        if not result.retriable:
                            raise result
                        last_problem = result.message
                    else:
                        results[tp] = result
                        del pending[tp]
            if not pending:
                return results
            self._metadata.request_update()
            failures += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                described = ", ".join(f"{tp.topic}-{tp.partition}" for tp in pending)
                raise ClientTimeoutError(
                    f"offsets of {described} not found in time; last problem: {last_problem}"
                )
            await asyncio.sleep(min(backoff_s(self._config.retry_backoff, failures), remaining))

    async def _list_offsets_on(
        self,
        address: str,
        tps: list[TopicPartition],
        specs: Mapping[TopicPartition, tuple[int, int]],
    ) -> dict[TopicPartition, storage_pb2.ListOffsetsPartitionResponse | ApiError]:
        request = list_offsets_request(self._config.isolation_level, tps, specs)
        try:
            response = await self._network.storage(address).ListOffsets(
                request, timeout=self._request_timeout_s
            )
        except grpc.aio.AioRpcError as error:
            code, text = rpc_error(error)
            return {tp: api_error(code, f"ListOffsets via {address}: {text}") for tp in tps}
        answers = {(p.topic, p.partition): p for p in response.partitions}
        results: dict[TopicPartition, storage_pb2.ListOffsetsPartitionResponse | ApiError] = {}
        for tp in tps:
            answer = answers.get(tp)
            if answer is None:
                results[tp] = api_error(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"{address} answered without {tp}"
                )
                continue
            code = error_code(answer.error_code)
            if code is ErrorCode.NONE:
                results[tp] = answer
            else:
                results[tp] = api_error(
                    code, f"{tp.topic}-{tp.partition}: {answer.error_message or code.name}"
                )
        return results
