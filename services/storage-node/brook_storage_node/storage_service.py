"""brook.v1.StorageService: produce, fetch, subscribe and offset look-ups over gRPC (grpc.aio).

The servicer translates between the contract (proto/brook/v1/storage.proto) and the node's
paths: Produce and ProduceRecords go to produce.py (``ProducePath``: gates, checks, appends;
the acks=all wait in delayed_produce.py), Fetch and Subscribe read through fetch.py and park
in delayed_fetch.py, the other calls go to the replica manager's partitions. The rules, in
Kafka's terms:

- Errors go in the response body, per partition, with Kafka's codes: a request naming ten
  partitions can succeed for nine. A malformed address (empty topic, negative partition, the
  same partition twice in one request, except in Produce and ProduceRecords, whose entries for
  one partition are appended in order) is INVALID_REQUEST for that entry; a request-wide bad
  parameter (negative max_bytes, max_wait_ms, timeout_ms, unknown isolation level) is
  INVALID_REQUEST for every entry; an unknown acks value is INVALID_REQUIRED_ACKS for every
  entry, as Kafka answers it. The gRPC status is reserved for the whole request failing:
  RESOURCE_EXHAUSTED over a limit (limits.py), UNIMPLEMENTED for InitProducerId on a node
  running without controllers (static.topics: no cluster-unique ids to hand out).
- InitProducerId hands out ids from the controllers' blocks (brook/producer_ids.py) for
  idempotent, non-transactional producers; with an id and epoch it bumps the epoch (KIP-360), which
  fences the older instance at every partition it writes to next.
- A retried idempotent batch is answered with its original offsets and not appended again
  (log/producer_state.py).
- Only a produce marked PRODUCE_ORIGIN_COORDINATOR may write an internal topic (else
  INVALID_TOPIC_EXCEPTION, as Kafka answers clients) or a batch with a producer id reserved
  for the group coordinators (else INVALID_RECORD): either would break their fencing
  (brook/reserved.py). ProduceRecords is always a client's.
- Produce appends the client's RecordBatch v2 bytes as they are (the log validates headers
  and CRCs and assigns offsets; records are decoded only on a compacted topic, which refuses
  a record without a key with INVALID_RECORD, as Kafka does). acks=0 answers once the request
  is checked and its appends are queued, and never reports append errors (Kafka's client gets
  no answer at all); acks=1 after the local append; acks=all once the high watermark passes
  the batch (at once while the ISR is just this node) or REQUEST_TIMED_OUT.
- Fetch answers at once when min_bytes are there, a partition has an error, or max_wait_ms
  is 0; otherwise it parks on a ``DataWaiter`` that the append path wakes, bounded by
  max_wait_ms, request.timeout.ms and the client's own deadline.
- Subscribe pushes committed data as it arrives, awaiting each write (gRPC flow control
  paces it), and ends on shutdown, on cancellation, or when every partition has dropped out
  with an error.
- READ_COMMITTED (Fetch, Subscribe, ListOffsets) reads up to the last stable offset instead of
  the high watermark (fetch.py); a long poll then waits for the LSO to move.
- WriteTxnMarkers appends a COMMIT or ABORT control batch per marker and partition through the
  produce path (gates, FIFO append lock, the log's checks), acks=all, with a client's limits:
  no internal topic (INVALID_TOPIC_EXCEPTION) and no producer id reserved for the coordinators
  (INVALID_RECORD), whoever sends it (the gateway forwards any Kafka client's);
  DescribeProducers reports the leader's producer state (log/producer_state.py). Transactional
  producers get their ids from the transaction coordinator: InitProducerId with a
  transactional id is refused here and says so.
- DescribeLogDirs reports every log the node holds, with the log cleaner's view (log_dirs.py).
- Client quotas (client_quotas.py), when the image has any: Produce and ProduceRecords are
  measured by their request size, Fetch by its response size and Subscribe by each message's;
  a throttled Produce or Fetch answers with ``throttle_time_ms``, late by that much.

Every request gets a span and its latency recorded; bytes in/out and records in are counted
per topic from batch headers (no per-record work).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Protocol, TypeVar

import grpc
from opentelemetry import propagate, trace

from brook.errors import ErrorCode
from brook.producer_ids import (
    ProducerIdManager,
    ProducerIdUnavailableError,
    bumped,
)
from brook.record import ControlType, build_control_batch
from brook.security.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from brook.telemetry import meter, tracer
from brook.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from brook_storage_node.client_quotas import StorageQuotas
from brook_storage_node.delayed_fetch import DataWaiter
from brook_storage_node.errors import (
    ErrorResult,
    PartitionError,
    error_result,
    leader_hint_proto,
    wire_code,
)
from brook_storage_node.fetch import FetchTarget, apply_error, read_targets, resolve_targets
from brook_storage_node.limits import StorageLimits
from brook_storage_node.log import AppendOrigin, LogAppendInfo, LogManager, TopicPartition
from brook_storage_node.log.time_index import NO_TIMESTAMP
from brook_storage_node.log.topic_partition import check_topic_name
from brook_storage_node.log_dirs import describe_log_dirs
from brook_storage_node.metadata_view import NO_LEADER, endpoint_protos
from brook_storage_node.partition import NO_EPOCH, NO_OFFSET, Partition
from brook_storage_node.produce import (
    PlainRecords,
    ProduceEntry,
    ProduceLimitError,
    ProducePartitionResult,
    ProducePath,
    address_errors,
)
from brook_storage_node.replica_manager import ReplicaManager
from brook_storage_node.txn_verification import TransactionVerifier

__all__ = ["StorageServicer"]

SERVICE_NAME: Final = "brook.v1.StorageService"
# A long poll answers this long before the client's own gRPC deadline, so the answer arrives
# instead of a DEADLINE_EXCEEDED.
DEADLINE_MARGIN_MS: Final = 20
# A producer epoch is an int16 on the wire (RecordBatch v2).
PRODUCER_EPOCH_LIMIT: Final = 32767

_VALID_ISOLATION: Final = frozenset(
    (
        common_pb2.ISOLATION_LEVEL_UNSPECIFIED,
        common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED,
        common_pb2.ISOLATION_LEVEL_READ_COMMITTED,
    )
)


class _Instruments:
    """The service's span and metrics; one instance per servicer."""

    def __init__(self) -> None:
        self.tracer = tracer(__name__)
        instruments = meter(__name__)
        self.bytes_in = instruments.create_counter(
            "brook.storage.bytes_in", unit="By", description="Record batch bytes appended"
        )
        self.bytes_out = instruments.create_counter(
            "brook.storage.bytes_out", unit="By", description="Record bytes sent to consumers"
        )
        self.messages_in = instruments.create_counter(
            "brook.storage.messages_in",
            unit="{record}",
            description="Records appended (counted from batch headers)",
        )
        self.duration = instruments.create_histogram(
            "brook.storage.request.duration", unit="ms", description="Request latency"
        )
        self.rejected = instruments.create_counter(
            "brook.storage.requests.rejected",
            unit="{request}",
            description="Requests refused whole (RESOURCE_EXHAUSTED)",
        )

    @contextlib.contextmanager
    def request(self, method: str, context: Any) -> Iterator[trace.Span]:
        """A server span for one RPC (continuing the caller's trace, if it sent one) and its
        latency. The duration of a Subscribe is the life of its stream."""
        carrier = {key: value for key, value in context.invocation_metadata() or ()}
        started = time.perf_counter()
        try:
            with self.tracer.start_as_current_span(
                f"{SERVICE_NAME}/{method}",
                context=propagate.extract(carrier),
                kind=trace.SpanKind.SERVER,
                attributes={
                    "rpc.system": "grpc",
                    "rpc.service": SERVICE_NAME,
                    "rpc.method": method,
                },
            ) as span:
                yield span
        finally:
            self.duration.record((time.perf_counter() - started) * 1000, {"rpc.method": method})

    def count_in(self, appended: Sequence[tuple[str, LogAppendInfo]]) -> None:
        """bytes_in and messages_in, added once per topic of a request rather than once per
        partition: a gateway's merged call holds several partitions of one topic, and each
        metric update with attributes costs microseconds of the node's loop."""
        by_topic: dict[str, list[int]] = {}
        for topic, info in appended:
            counts = by_topic.setdefault(topic, [0, 0])
            counts[0] += info.size_bytes
            counts[1] += info.record_count
        for topic, (size_bytes, record_count) in by_topic.items():
            attributes = {"topic": topic}
            self.bytes_in.add(size_bytes, attributes)
            self.messages_in.add(record_count, attributes)

    def count_out(self, topics: Sequence[str], sizes: Sequence[int]) -> None:
        by_topic: Counter[str] = Counter()
        for topic, size in zip(topics, sizes, strict=True):
            if size:
                by_topic[topic] += size
        for topic, size in by_topic.items():
            self.bytes_out.add(size, {"topic": topic})


class _Addressed(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


_Entry = TypeVar("_Entry", bound=_Addressed)


def _with_address_errors(entries: Sequence[_Entry]) -> list[tuple[_Entry, ErrorResult | None]]:
    """Each request entry with its address error (None if well formed)."""
    errors = address_errors([(entry.topic, entry.partition) for entry in entries])
    return list(zip(entries, errors, strict=True))


def _raise_if(error: ErrorResult | None) -> None:
    if error is not None:
        raise PartitionError(error.code, error.message)


class StorageServicer(storage_pb2_grpc.StorageServiceServicer):
    def __init__(
        self,
        replicas: ReplicaManager,
        limits: StorageLimits,
        shutdown: asyncio.Event,
        producer_ids: ProducerIdManager | None = None,
        verifier: TransactionVerifier | None = None,
        *,
        log_manager: LogManager,
        controller_addresses: Callable[[], Sequence[str]] = tuple,
        quotas: StorageQuotas | None = None,
    ) -> None:
        """``verifier``: transactional batches are verified with their coordinator
        (produce.py, point 5); None: transaction.partition.verification.enable is false.
        ``log_manager``: the node's logs, which DescribeLogDirs reports.
        ``controller_addresses``: the controllers the node knows now, which GetMetadata
        names (none without controllers). ``quotas``: the client quotas produce and fetch
        calls are held to (None: none)."""
        self._replicas = replicas
        self._quotas = quotas
        self._controller_addresses = controller_addresses
        self._log_manager = log_manager
        self._producer_ids = producer_ids
        self._limits = limits
        self._shutdown = shutdown
        self._instruments = _Instruments()
        self._produce = ProducePath(replicas, limits, self._instruments.count_in, verifier)

    async def close(self) -> None:
        """Cancel and await the acks=0 appends still queued (the server has stopped)."""
        await self._produce.close()

    @property
    def produce_bytes_in_flight(self) -> int:
        return self._produce.bytes_in_flight

    # -- Produce ----------------------------------------------------------------------------

    async def Produce(
        self, request: storage_pb2.ProduceRequest, context: Any
    ) -> storage_pb2.ProduceResponse:
        with self._instruments.request("Produce", context):
            throttle_ms = await self._produce_quota(context, request)
            entries = [ProduceEntry(p.topic, p.partition, p.records) for p in request.partitions]
            results = await self._append_records(
                "Produce",
                context,
                entries,
                acks=request.acks,
                timeout_ms=request.timeout_ms,
                size_bytes=sum(len(entry.records) for entry in entries),
                coordinator=request.origin == storage_pb2.PRODUCE_ORIGIN_COORDINATOR,
                transactional_id=request.transactional_id,
            )
            await StorageQuotas.delay(context, throttle_ms)
            return storage_pb2.ProduceResponse(partitions=results, throttle_time_ms=throttle_ms)

    async def ProduceRecords(
        self, request: storage_pb2.ProduceRecordsRequest, context: Any
    ) -> storage_pb2.ProduceRecordsResponse:
        with self._instruments.request("ProduceRecords", context):
            throttle_ms = await self._produce_quota(context, request)
            entries = [
                ProduceEntry(p.topic, p.partition, plain=PlainRecords(p.records, p.compression))
                for p in request.partitions
            ]
            results = await self._append_records(
                "ProduceRecords",
                context,
                entries,
                acks=request.acks,
                timeout_ms=request.timeout_ms,
                size_bytes=request.ByteSize(),
            )
            await StorageQuotas.delay(context, throttle_ms)
            return storage_pb2.ProduceRecordsResponse(
                partitions=results, throttle_time_ms=throttle_ms
            )

    async def _produce_quota(
        self,
        context: Any,
        request: storage_pb2.ProduceRequest | storage_pb2.ProduceRecordsRequest,
    ) -> int:
        """Holds a produce call while its quota group is throttled, then records its request
        size: the throttle its answer carries (0: none)."""
        if self._quotas is None or not self._quotas.configured:
            return 0
        call = await self._quotas.admit(context, PRODUCER_BYTE_RATE, "produce")
        return 0 if call is None else self._quotas.record(call, request.ByteSize())

    async def _append_records(
        self,
        method: str,
        context: Any,
        entries: list[ProduceEntry],
        *,
        acks: int,
        timeout_ms: int,
        size_bytes: int,
        coordinator: bool = False,
        transactional_id: str = "",
    ) -> list[storage_pb2.PartitionProduceResponse]:
        """The produce path's results as responses; RESOURCE_EXHAUSTED over the in-flight
        bytes limit."""
        try:
            results = await self._produce.append_records(
                entries,
                acks=acks,
                timeout_ms=timeout_ms,
                size_bytes=size_bytes,
                coordinator=coordinator,
                transactional_id=transactional_id,
            )
        except ProduceLimitError as exc:
            self._instruments.rejected.add(1, {"rpc.method": method})
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            raise AssertionError("context.abort returned") from exc
        return [_produce_response(result) for result in results]

    # -- Fetch ------------------------------------------------------------------------------

    async def Fetch(
        self, request: storage_pb2.FetchRequest, context: Any
    ) -> storage_pb2.FetchResponse:
        with self._instruments.request("Fetch", context):
            if self._quotas is None or not self._quotas.configured:
                return await self._fetch(request, context)
            call = await self._quotas.admit(context, CONSUMER_BYTE_RATE, "fetch")
            response = await self._fetch(request, context)
            if call is not None:
                response.throttle_time_ms = self._quotas.record(call, response.ByteSize())
                await StorageQuotas.delay(context, response.throttle_time_ms)
            return response

    async def _fetch(
        self, request: storage_pb2.FetchRequest, context: Any
    ) -> storage_pb2.FetchResponse:
        request_error = _fetch_request_error(request)
        targets = []
        for entry, address_error in _with_address_errors(request.partitions):
            rejected = request_error or address_error
            if rejected is None and entry.partition_max_bytes < 0:
                rejected = ErrorResult(
                    ErrorCode.INVALID_REQUEST,
                    f"partition_max_bytes {entry.partition_max_bytes} is negative",
                )
            targets.append(
                FetchTarget(
                    entry.topic,
                    entry.partition,
                    entry.fetch_offset,
                    entry.partition_max_bytes or None,
                    _client_leader_epoch(entry),
                    rejected,
                    last_fetched_epoch=(
                        entry.last_fetched_epoch
                        if entry.HasField("last_fetched_epoch")
                        else NO_EPOCH
                    ),
                )
            )
        budget = self._response_budget(request.max_bytes)
        read_committed = request.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_ms(request.max_wait_ms, context) / 1000
        while True:
            resolve_targets(targets, self._replicas)
            passed = await read_targets(
                targets,
                response_bytes_max=budget,
                decode=request.decode_records,
                read_committed=read_committed,
            )
            remaining_s = deadline - loop.time()
            if (
                request_error is not None
                or not targets
                or passed.has_error
                or passed.total_bytes >= request.min_bytes
                or remaining_s <= 0
                or self._shutdown.is_set()
            ):
                break
            watched = [(t.partition, t.max_bytes) for t in targets if t.partition is not None]
            with DataWaiter(watched, request.min_bytes - passed.total_bytes) as waiter:
                # A threaded read let appends run meanwhile: if a visible end (HW, or LSO for
                # READ_COMMITTED) moved since the read, read again at once instead of sleeping
                # through data already there. The waiter wakes on HW moves; a READ_COMMITTED
                # read that finds the LSO still behind them waits again.
                moved = any(
                    partition.visible_end(read_committed) != seen
                    for partition, seen in passed.visible_ends.items()
                )
                if not moved:
                    await waiter.wait(remaining_s)
        self._instruments.count_out([t.topic for t in targets], passed.sizes_bytes)
        return storage_pb2.FetchResponse(partitions=passed.responses)

    def _response_budget(self, requested_bytes: int) -> int:
        """max_bytes bounded by fetch.max.bytes (0: the node's bound)."""
        cap = self._limits.fetch_bytes_max
        return cap if requested_bytes <= 0 else min(requested_bytes, cap)

    def _wait_ms(self, max_wait_ms: int, context: Any) -> float:
        wait_ms = float(min(max_wait_ms, self._limits.wait_ms_max))
        remaining_s = context.time_remaining()
        if remaining_s is not None:
            wait_ms = min(wait_ms, remaining_s * 1000 - DEADLINE_MARGIN_MS)
        return wait_ms

    # -- Subscribe --------------------------------------------------------------------------

    async def Subscribe(self, request: storage_pb2.SubscribeRequest, context: Any) -> None:
        with self._instruments.request("Subscribe", context):
            await self._subscribe(request, context)

    async def _subscribe(self, request: storage_pb2.SubscribeRequest, context: Any) -> None:
        quotas = self._quotas
        call = None
        if quotas is not None:
            call = await quotas.admit(context, CONSUMER_BYTE_RATE, "fetch")
        request_error = None
        if request.max_bytes < 0 or request.partition_max_bytes < 0:
            request_error = ErrorResult(
                ErrorCode.INVALID_REQUEST, "max_bytes and partition_max_bytes must be >= 0"
            )
        elif request.isolation_level not in _VALID_ISOLATION:
            request_error = ErrorResult(
                ErrorCode.INVALID_REQUEST, f"unknown isolation level {request.isolation_level}"
            )
        budget = self._response_budget(request.max_bytes)
        partition_max = request.partition_max_bytes or None
        read_committed = request.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED
        active: list[FetchTarget] = []
        first = storage_pb2.SubscribeResponse()
        for entry, address_error in _with_address_errors(request.partitions):
            target = FetchTarget(
                entry.topic,
                entry.partition,
                NO_OFFSET,
                partition_max,
                _client_leader_epoch(entry),
                request_error or address_error,
            )
            resolve_targets([target], self._replicas)
            if target.error is None and target.partition is not None:
                try:
                    target.fetch_offset = await self._start_offset(
                        target.partition, entry, read_committed
                    )
                except PartitionError as exc:
                    target.error = error_result(exc)
            if target.error is not None:
                response = storage_pb2.FetchPartitionResponse(
                    topic=entry.topic,
                    partition=entry.partition,
                    high_watermark=NO_OFFSET,
                    last_stable_offset=NO_OFFSET,
                    log_start_offset=NO_OFFSET,
                    next_fetch_offset=NO_OFFSET,
                )
                apply_error(response, target.error)
                first.partitions.append(response)
            else:
                active.append(target)
        if first.partitions:
            await context.write(first)
        watched = [(t.partition, t.max_bytes) for t in active if t.partition is not None]
        with DataWaiter(watched, 1) as waiter:
            turn = 0
            while active and not self._shutdown.is_set():
                # Rotated each round, so a busy partition cannot starve the others of budget.
                turn %= len(active)
                ordered = active[turn:] + active[:turn]
                turn += 1
                resolve_targets(ordered, self._replicas)
                for target in ordered:
                    if target.partition is not None:
                        waiter.watch(target.partition, target.max_bytes)
                # Re-armed before reading: what commits during a threaded read wakes the next
                # wait at once.
                waiter.rearm(1)
                passed = await read_targets(
                    ordered,
                    response_bytes_max=budget,
                    decode=request.decode_records,
                    read_committed=read_committed,
                )
                message = storage_pb2.SubscribeResponse()
                for target, response, size in zip(
                    ordered, passed.responses, passed.sizes_bytes, strict=True
                ):
                    if response.error_code != wire_code(ErrorCode.NONE):
                        message.partitions.append(response)
                        active.remove(target)
                        if target.partition is not None:
                            waiter.forget(target.partition)
                    elif size:
                        message.partitions.append(response)
                        target.fetch_offset = response.next_fetch_offset
                if message.partitions:
                    self._instruments.count_out([t.topic for t in ordered], passed.sizes_bytes)
                    await context.write(message)
                    if quotas is not None and call is not None:
                        quotas.record(call, message.ByteSize())
                        await quotas.hold(context, call)
                    continue
                await waiter.wait(self._limits.wait_ms_max / 1000)

    async def _start_offset(
        self, partition: Partition, entry: storage_pb2.SubscribePartition, read_committed: bool
    ) -> int:
        spec = entry.start
        end = partition.visible_end(read_committed)
        if spec in (storage_pb2.OFFSET_SPEC_UNSPECIFIED, storage_pb2.OFFSET_SPEC_LATEST):
            return end
        if spec == storage_pb2.OFFSET_SPEC_EARLIEST:
            return partition.log_start_offset
        if spec == storage_pb2.OFFSET_SPEC_OFFSET:
            return entry.offset
        if spec == storage_pb2.OFFSET_SPEC_TIMESTAMP:
            found = await self._offset_for_timestamp(partition, entry.offset, end)
            return end if found is None else found[0]
        raise PartitionError(
            ErrorCode.INVALID_REQUEST, f"start {spec} is not a start position for Subscribe"
        )

    # -- ListOffsets ------------------------------------------------------------------------

    async def ListOffsets(
        self, request: storage_pb2.ListOffsetsRequest, context: Any
    ) -> storage_pb2.ListOffsetsResponse:
        with self._instruments.request("ListOffsets", context):
            responses = []
            for entry, address_error in _with_address_errors(request.partitions):
                response = storage_pb2.ListOffsetsPartitionResponse(
                    topic=entry.topic,
                    partition=entry.partition,
                    offset=NO_OFFSET,
                    timestamp_ms=NO_TIMESTAMP,
                    leader_epoch=NO_EPOCH,
                )
                try:
                    _raise_if(address_error)
                    if request.isolation_level not in _VALID_ISOLATION:
                        raise PartitionError(
                            ErrorCode.INVALID_REQUEST,
                            f"unknown isolation level {request.isolation_level}",
                        )
                    partition = self._replicas.leader_partition(
                        entry.topic, entry.partition, _client_leader_epoch(entry)
                    )
                    found = await self._list_offset(
                        partition,
                        entry,
                        request.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED,
                    )
                    if found is not None:
                        response.offset, response.timestamp_ms = found
                        response.leader_epoch = _epoch_at(partition, found[0])
                except Exception as exc:
                    result = error_result(exc)
                    response.error_code = wire_code(result.code)
                    response.error_message = result.message
                    if result.leader_hint is not None:
                        response.current_leader.CopyFrom(leader_hint_proto(result.leader_hint))
                responses.append(response)
            return storage_pb2.ListOffsetsResponse(partitions=responses)

    async def _list_offset(
        self, partition: Partition, entry: storage_pb2.ListOffsetsPartition, read_committed: bool
    ) -> tuple[int, int] | None:
        """(offset, timestamp) for the spec, or None when no record matches; only records
        below the visible end count (the LSO for READ_COMMITTED, else the HW: Kafka's
        lastFetchableOffset)."""
        spec = entry.spec
        end = partition.visible_end(read_committed)
        if spec == storage_pb2.OFFSET_SPEC_EARLIEST:
            return partition.log_start_offset, NO_TIMESTAMP
        if spec == storage_pb2.OFFSET_SPEC_LATEST:
            return end, NO_TIMESTAMP
        if spec == storage_pb2.OFFSET_SPEC_TIMESTAMP:
            if entry.timestamp_ms < 0:
                raise PartitionError(
                    ErrorCode.INVALID_REQUEST, f"timestamp_ms {entry.timestamp_ms} is negative"
                )
            return await self._offset_for_timestamp(partition, entry.timestamp_ms, end)
        if spec == storage_pb2.OFFSET_SPEC_MAX_TIMESTAMP:
            # Reads index files and batch headers: off the loop (a rare request).
            found = await asyncio.to_thread(partition.log.offset_of_max_timestamp, max_offset=end)
            return None if found is None else (found.offset, found.timestamp)
        raise PartitionError(
            ErrorCode.INVALID_REQUEST,
            f"spec {spec} is not one of EARLIEST, LATEST, TIMESTAMP, MAX_TIMESTAMP",
        )

    @staticmethod
    async def _offset_for_timestamp(
        partition: Partition, timestamp_ms: int, max_offset: int
    ) -> tuple[int, int] | None:
        # Reads index files and may decode one batch: off the loop (a rare request).
        found = await asyncio.to_thread(
            partition.log.offset_for_timestamp, timestamp_ms, max_offset=max_offset
        )
        return None if found is None else (found.offset, found.timestamp)

    # -- GetMetadata ------------------------------------------------------------------------

    async def GetMetadata(
        self, request: storage_pb2.GetMetadataRequest, context: Any
    ) -> storage_pb2.GetMetadataResponse:
        with self._instruments.request("GetMetadata", context):
            view = self._replicas.view
            response = storage_pb2.GetMetadataResponse(
                cluster_id=view.cluster_id,
                controller_id=view.controller_id,
                metadata_offset=view.offset,
                controller_addresses=self._controller_addresses(),
            )
            for broker in view.brokers.values():
                response.brokers.add(
                    node_id=broker.node_id,
                    role=broker.role,
                    endpoints=endpoint_protos(broker.endpoints),
                    rack=broker.rack,
                    fenced=broker.fenced,
                )
            names = list(dict.fromkeys(request.topics)) or [
                name
                for name, topic in sorted(view.topics.items())
                if request.include_internal or not topic.internal
            ]
            for name in names:
                response.topics.append(self._topic_metadata(name))
            return response

    def _topic_metadata(self, name: str) -> storage_pb2.TopicMetadata:
        view = self._replicas.view
        topic = view.topic(name)
        if topic is None:
            try:
                check_topic_name(name)
            except ValueError as exc:
                return storage_pb2.TopicMetadata(
                    name=name,
                    error_code=wire_code(ErrorCode.INVALID_TOPIC_EXCEPTION),
                    error_message=str(exc),
                )
            return storage_pb2.TopicMetadata(
                name=name,
                error_code=wire_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                error_message=f"topic {name} does not exist",
            )
        metadata = storage_pb2.TopicMetadata(
            name=name, topic_id=topic.topic_id, internal=topic.internal
        )
        for index in sorted(topic.partitions):
            info = topic.partitions[index]
            offline = [
                replica
                for replica in info.replicas
                if (broker := view.broker(replica)) is None or broker.fenced
            ]
            metadata.partitions.add(
                partition=index,
                error_code=wire_code(
                    ErrorCode.LEADER_NOT_AVAILABLE if info.leader == NO_LEADER else ErrorCode.NONE
                ),
                leader_id=info.leader,
                leader_epoch=info.leader_epoch,
                replicas=info.replicas,
                isr=info.isr,
                offline_replicas=offline,
            )
        return metadata

    # -- DeleteRecords ----------------------------------------------------------------------

    async def DeleteRecords(
        self, request: storage_pb2.DeleteRecordsRequest, context: Any
    ) -> storage_pb2.DeleteRecordsResponse:
        with self._instruments.request("DeleteRecords", context):
            responses = []
            for entry, address_error in _with_address_errors(request.partitions):
                response = storage_pb2.DeleteRecordsPartitionResponse(
                    topic=entry.topic, partition=entry.partition, low_watermark=NO_OFFSET
                )
                try:
                    _raise_if(address_error)
                    partition = self._replicas.leader_partition(entry.topic, entry.partition)
                    offset = partition.high_watermark if entry.offset == NO_OFFSET else entry.offset
                    if offset < 0:
                        raise PartitionError(
                            ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {entry.offset} is negative"
                        )
                    # Renames and deletes segment files: off the loop.
                    response.low_watermark = await asyncio.to_thread(
                        partition.log.delete_records_before, offset
                    )
                    partition.wake_listeners()
                except Exception as exc:
                    result = error_result(exc)
                    response.error_code = wire_code(result.code)
                    response.error_message = result.message
                responses.append(response)
            return storage_pb2.DeleteRecordsResponse(partitions=responses)

    # -- InitProducerId ---------------------------------------------------------------------

    async def InitProducerId(
        self, request: storage_pb2.InitProducerIdRequest, context: Any
    ) -> storage_pb2.InitProducerIdResponse:
        with self._instruments.request("InitProducerId", context):
            manager = self._producer_ids
            if manager is None:
                # gRPC's UNIMPLEMENTED covers "not enabled in this service".
                await context.abort(
                    grpc.StatusCode.UNIMPLEMENTED,
                    "InitProducerId needs the controllers (issue #8: producer ids come from "
                    "the blocks they allocate, unique across the cluster); this storage node "
                    "runs without them (static.topics)",
                )
                raise AssertionError("context.abort returned")
            error = _init_producer_id_error(request)
            if error is not None:
                return _init_producer_id_answer(error.code, error.message)
            if request.producer_id >= 0:
                bump = bumped(request.producer_id, request.producer_epoch)
                if bump is not None:
                    return storage_pb2.InitProducerIdResponse(
                        producer_id=bump[0], producer_epoch=bump[1]
                    )
            wait_ms = float(self._limits.wait_ms_max)
            remaining_s = context.time_remaining()
            if remaining_s is not None:
                wait_ms = min(wait_ms, remaining_s * 1000 - DEADLINE_MARGIN_MS)
            try:
                producer_id = await manager.generate(wait_ms / 1000)
            except ProducerIdUnavailableError as exc:
                return _init_producer_id_answer(exc.code, str(exc))
            return storage_pb2.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    # -- WriteTxnMarkers -------------------------------------------------------------------

    async def WriteTxnMarkers(
        self, request: storage_pb2.WriteTxnMarkersRequest, context: Any
    ) -> storage_pb2.WriteTxnMarkersResponse:
        with self._instruments.request("WriteTxnMarkers", context):
            timeout_ms = request.timeout_ms or self._limits.wait_ms_max
            now_ms = time.time_ns() // 1_000_000
            # Each marker's appends take their places at the gates before the next marker's
            # (a task runs to its first await in creation order): FIFO per partition.
            try:
                results = await asyncio.gather(
                    *(
                        self._write_marker(marker, request.timeout_ms, timeout_ms, now_ms)
                        for marker in request.markers
                    )
                )
            except ProduceLimitError as exc:
                self._instruments.rejected.add(1, {"rpc.method": "WriteTxnMarkers"})
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
                raise AssertionError("context.abort returned") from exc
            return storage_pb2.WriteTxnMarkersResponse(markers=results)

    async def _write_marker(
        self, marker: storage_pb2.TxnMarker, requested_timeout_ms: int, timeout_ms: int, now_ms: int
    ) -> storage_pb2.TxnMarkerResult:
        """Append one marker's control batch to each of its partitions, acks=all."""
        result = storage_pb2.TxnMarkerResult(producer_id=marker.producer_id)
        error = _marker_error(marker, requested_timeout_ms)
        if error is not None:
            for tp in marker.partitions:
                apply_error(result.partitions.add(topic=tp.topic, partition=tp.partition), error)
            return result
        records = build_control_batch(
            ControlType.COMMIT if marker.committed else ControlType.ABORT,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp_ms=now_ms,
        )
        entries = [ProduceEntry(tp.topic, tp.partition, records) for tp in marker.partitions]
        appended = await self._produce.append_records(
            entries,
            acks=storage_pb2.ACKS_ALL,
            timeout_ms=timeout_ms,
            size_bytes=len(records) * len(entries),
            # Not a coordinator's Produce: a marker may not go to an internal topic (groups end
            # transactions with CompleteTransaction) nor carry a coordinator's producer id (it
            # would raise that fencing producer's epoch): refused as a client's batch would be.
            origin=AppendOrigin.COORDINATOR,
        )
        for produced in appended:
            partition_result = result.partitions.add(
                topic=produced.topic, partition=produced.partition_index
            )
            if produced.error is not None:
                apply_error(partition_result, produced.error)
        return result

    # -- DescribeProducers -----------------------------------------------------------------

    async def DescribeProducers(
        self, request: storage_pb2.DescribeProducersRequest, context: Any
    ) -> storage_pb2.DescribeProducersResponse:
        with self._instruments.request("DescribeProducers", context):
            responses = []
            for entry, address_error in _with_address_errors(request.partitions):
                response = storage_pb2.PartitionProducers(
                    topic=entry.topic, partition=entry.partition
                )
                try:
                    _raise_if(address_error)
                    partition = self._replicas.leader_partition(entry.topic, entry.partition)
                    for producer in partition.log.describe_producers():
                        response.producers.add(
                            producer_id=producer.producer_id,
                            producer_epoch=producer.producer_epoch,
                            last_sequence=producer.last_sequence,
                            last_timestamp=producer.last_append_time_ms,
                            coordinator_epoch=producer.coordinator_epoch,
                            current_txn_start_offset=producer.current_txn_first_offset,
                        )
                except Exception as exc:
                    apply_error(response, error_result(exc))
                responses.append(response)
            return storage_pb2.DescribeProducersResponse(partitions=responses)

    # -- DescribeLogDirs --------------------------------------------------------------------

    async def DescribeLogDirs(
        self, request: storage_pb2.DescribeLogDirsRequest, context: Any
    ) -> storage_pb2.DescribeLogDirsResponse:
        with self._instruments.request("DescribeLogDirs", context):
            partitions = {TopicPartition(p.topic, p.partition) for p in request.partitions}
            return await asyncio.to_thread(describe_log_dirs, self._log_manager, partitions)


def _marker_error(marker: storage_pb2.TxnMarker, timeout_ms: int) -> ErrorResult | None:
    """INVALID_REQUEST for a marker no control batch can carry, or a negative timeout."""
    if timeout_ms < 0:
        return ErrorResult(ErrorCode.INVALID_REQUEST, f"timeout_ms {timeout_ms} is negative")
    if marker.producer_id < 0 or not 0 <= marker.producer_epoch <= PRODUCER_EPOCH_LIMIT:
        return ErrorResult(
            ErrorCode.INVALID_REQUEST,
            f"marker for producer {marker.producer_id} epoch {marker.producer_epoch}: a "
            f"producer id >= 0 and an epoch in 0..{PRODUCER_EPOCH_LIMIT} are needed",
        )
    return None


def _produce_response(result: ProducePartitionResult) -> storage_pb2.PartitionProduceResponse:
    response = storage_pb2.PartitionProduceResponse(
        topic=result.topic,
        partition=result.partition_index,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time_ms,
        log_start_offset=result.log_start_offset,
    )
    error = result.error
    if error is not None:
        response.error_code = wire_code(error.code)
        response.error_message = error.message
        if error.batch_index is not None:
            response.batch_errors.add(index=error.batch_index, message=error.message)
        if error.leader_hint is not None:
            response.current_leader.CopyFrom(leader_hint_proto(error.leader_hint))
    return response


def _init_producer_id_answer(code: ErrorCode, message: str) -> storage_pb2.InitProducerIdResponse:
    return storage_pb2.InitProducerIdResponse(
        error_code=wire_code(code),
        error_message=message,
        producer_id=NO_OFFSET,
        producer_epoch=NO_EPOCH,
    )


def _init_producer_id_error(request: storage_pb2.InitProducerIdRequest) -> ErrorResult | None:
    if request.transactional_id:
        # Transactional producers get their ids (and epoch bumps, which must fence the open
        # transaction) from the transaction coordinator owning their transactional id.
        return ErrorResult(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"transactional id {request.transactional_id!r}: a storage node does not hand out "
            "transactional producer ids; send InitProducerId to the transaction coordinator "
            "(find it with FindCoordinator, key_type TRANSACTION)",
        )
    has_id = request.producer_id >= 0
    has_epoch = request.producer_epoch >= 0
    if request.producer_id < NO_OFFSET or request.producer_epoch < NO_EPOCH:
        return ErrorResult(
            ErrorCode.INVALID_REQUEST,
            f"producer id {request.producer_id} / epoch {request.producer_epoch}: use -1 for none",
        )
    if has_id != has_epoch:
        return ErrorResult(
            ErrorCode.INVALID_REQUEST,
            f"producer id {request.producer_id} with epoch {request.producer_epoch}: give "
            "both (to bump the epoch) or neither (-1, -1, for a new id)",
        )
    if request.producer_epoch > PRODUCER_EPOCH_LIMIT:
        return ErrorResult(
            ErrorCode.INVALID_REQUEST,
            f"producer epoch {request.producer_epoch} is above int16's {PRODUCER_EPOCH_LIMIT}",
        )
    return None


def _fetch_request_error(request: storage_pb2.FetchRequest) -> ErrorResult | None:
    for name in ("max_wait_ms", "min_bytes", "max_bytes"):
        value = getattr(request, name)
        if value < 0:
            return ErrorResult(ErrorCode.INVALID_REQUEST, f"{name} {value} is negative")
    if request.isolation_level not in _VALID_ISOLATION:
        return ErrorResult(
            ErrorCode.INVALID_REQUEST, f"unknown isolation level {request.isolation_level}"
        )
    return None


def _epoch_at(partition: Partition, offset: int) -> int:
    """The leader epoch of the record at ``offset`` (for a consumer's offset validation)."""
    epoch = NO_EPOCH
    for entry in partition.log.leader_epoch_cache.entries:
        if entry.start_offset > offset:
            break
        epoch = entry.epoch
    return epoch


def _client_leader_epoch(
    entry: storage_pb2.FetchPartition
    | storage_pb2.SubscribePartition
    | storage_pb2.ListOffsetsPartition,
) -> int:
    """The leader epoch a client sent, or NO_EPOCH when it sent none (the field is optional:
    proto3's default 0 must not read as "epoch 0")."""
    if entry.HasField("current_leader_epoch"):
        return entry.current_leader_epoch
    return NO_EPOCH
