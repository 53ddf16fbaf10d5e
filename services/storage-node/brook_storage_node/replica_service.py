"""brook.v1.ReplicaService, the leader's side of replication (Kafka's follower fetch handling).

A follower node keeps one ReplicaFetch stream to this node and sends, in every request, the
whole fetch state of the partitions it follows here (proto/brook/v1/replica.proto). Each
request gets exactly one response, in order:

- per partition, checks first: this node leads it in the follower's ``current_leader_epoch``
  (else NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH), the follower is
  one of its replicas, and the follower's log agrees with this one: if the follower's last
  epoch ends here before its ``fetch_offset`` (or is not in this history), the answer is
  ``diverging_epoch`` and no records, and the position is not recorded;
- otherwise ``fetch_offset`` is the follower's log end offset: recorded (the HW may move,
  which releases acks=all produces and consumers' long polls), and a follower outside the
  ISR that has caught up is proposed back to the ISR manager;
- records past the HW are returned (followers copy everything, committed or not), bounded by
  ``partition_max_bytes`` and the response's ``max_bytes``; the first partition with data
  gets at least one batch, so replication always progresses;
- nothing to send: the request parks on a ``DataWaiter`` that counts appended bytes, until
  ``min_bytes`` arrive or ``max_wait_ms`` (bounded by request.timeout.ms) passes.

Partitions served under a replication throttle (replication_quota.py: listed in their topic's
leader.replication.throttled.replicas for this node, to a follower outside the ISR) share
``leader.replication.throttled.rate``: while it is spent they get no records, and each gets at
most a tenth of a second of the rate.

A request from a stale incarnation of the follower (broker epoch older than the one this
node's metadata knows) is answered STALE_BROKER_EPOCH as a whole. A follower without a broker
epoch (-1: static metadata, no controllers) is not checked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from brook.config import Config
from brook.errors import ErrorCode
from brook.topic_config import LEADER_THROTTLED_RATE
from brook.v1 import common_pb2, replica_pb2, replica_pb2_grpc
from brook_storage_node.delayed_fetch import DataWaiter
from brook_storage_node.errors import PartitionError, error_result, wire_code
from brook_storage_node.log import LogError
from brook_storage_node.partition import NO_EPOCH, NO_OFFSET, Partition, runs_inline
from brook_storage_node.replica_manager import ReplicaManager
from brook_storage_node.replication_quota import ReplicationQuota, is_throttled, node_throttle_rate

__all__ = ["CaughtUpListener", "ReplicaServiceLimits", "ReplicaServicer"]

_log = logging.getLogger(__name__)

# How long after a throttled partition's turn comes a parked fetch wakes to serve it.
THROTTLE_WAKE_MARGIN_S = 0.005


@dataclass(frozen=True, slots=True)
class ReplicaServiceLimits:
    wait_ms_max: int
    """request.timeout.ms: the longest a replica fetch is parked."""
    response_bytes_max: int
    """replica.fetch.response.max.bytes: the leader's own bound on one response."""

    @classmethod
    def from_config(cls, config: Config) -> ReplicaServiceLimits:
        return cls(
            wait_ms_max=config.get_int("request.timeout.ms"),
            response_bytes_max=config.get_int("replica.fetch.response.max.bytes"),
        )


CaughtUpListener = Callable[[Partition, int], None]
"""Told (partition, follower id) when a follower outside the ISR has caught up."""


def _no_listener(partition: Partition, replica_id: int) -> None:
    pass


@dataclass(slots=True)
class _Target:
    request: replica_pb2.ReplicaFetchPartition
    response: replica_pb2.ReplicaFetchPartitionResponse
    partition: Partition | None = None
    size_bytes: int = 0


class ReplicaServicer(replica_pb2_grpc.ReplicaServiceServicer):
    def __init__(
        self,
        replicas: ReplicaManager,
        limits: ReplicaServiceLimits,
        shutdown: asyncio.Event,
        on_caught_up: CaughtUpListener = _no_listener,
    ) -> None:
        self._replicas = replicas
        self._limits = limits
        self._shutdown = shutdown
        self._on_caught_up = on_caught_up
        self._quota = ReplicationQuota()
        # Follower id -> the throttled partition last served to it (see answer).
        self._last_throttled: dict[int, tuple[str, int]] = {}

    async def ReplicaFetch(
        self, request_iterator: AsyncIterator[replica_pb2.ReplicaFetchRequest], context: Any
    ) -> AsyncIterator[replica_pb2.ReplicaFetchResponse]:
        async for request in request_iterator:
            yield await self.answer(request)
            if self._shutdown.is_set():
                return

    async def answer(
        self, request: replica_pb2.ReplicaFetchRequest
    ) -> replica_pb2.ReplicaFetchResponse:
        """The response to one request of the stream (long-polls when there is no data)."""
        stale = self._stale_broker_epoch(request)
        if stale is not None:
            return replica_pb2.ReplicaFetchResponse(
                error_code=wire_code(ErrorCode.STALE_BROKER_EPOCH), error_message=stale
            )
        for name in ("max_wait_ms", "min_bytes", "max_bytes"):
            if getattr(request, name) < 0:
                return replica_pb2.ReplicaFetchResponse(
                    error_code=wire_code(ErrorCode.INVALID_REQUEST),
                    error_message=f"{name} {getattr(request, name)} is negative",
                )
        wait_s = min(request.max_wait_ms, self._limits.wait_ms_max) / 1000
        targets = [self._target(request.replica_id, entry) for entry in request.partitions]
        # A follower lists its partitions in the same order every time: reading starts after
        # the throttled partition served last, so one with a backlog does not take every chunk
        # of the quota from the ones after it. The response keeps the request's order.
        last = self._last_throttled.get(request.replica_id)
        served = [
            i for i, t in enumerate(targets) if (t.request.topic, t.request.partition) == last
        ]
        start = served[0] + 1 if served else 0
        reading = targets[start:] + targets[:start]
        watched = [
            (t.partition, t.request.partition_max_bytes or None)
            for t in targets
            if t.partition is not None
        ]
        with DataWaiter(watched, max(request.min_bytes, 1), replica=True) as waiter:
            throttled_s = await self._read(request, reading)
            if throttled_s > 0:
                # A throttled partition was left out: wait no longer than until it may go
                # (and a moment more: the loop may wake a timer a little early).
                wait_s = min(wait_s, throttled_s + THROTTLE_WAKE_MARGIN_S)
            if self._should_wait(targets, request.min_bytes) and wait_s > 0:
                arrived = not self._shutdown.is_set() and await waiter.wait(wait_s)
                if arrived or (throttled_s > 0 and not self._shutdown.is_set()):
                    # Positions were recorded by the first pass; only the data is re-read.
                    for target in targets:
                        target.response.records = b""
                        target.size_bytes = 0
                        self._refresh(request.replica_id, target)
                    await self._read(request, reading)
        return replica_pb2.ReplicaFetchResponse(partitions=[t.response for t in targets])

    def _stale_broker_epoch(self, request: replica_pb2.ReplicaFetchRequest) -> str | None:
        broker = self._replicas.view.broker(request.replica_id)
        if request.broker_epoch < 0 or broker is None:
            return None
        if request.broker_epoch < broker.broker_epoch:
            return (
                f"node {request.replica_id}'s broker epoch {request.broker_epoch} is older "
                f"than its current registration's {broker.broker_epoch}"
            )
        return None

    def _target(self, replica_id: int, entry: replica_pb2.ReplicaFetchPartition) -> _Target:
        target = _Target(
            entry,
            replica_pb2.ReplicaFetchPartitionResponse(
                topic=entry.topic,
                partition=entry.partition,
                high_watermark=NO_OFFSET,
                log_start_offset=NO_OFFSET,
            ),
        )
        self._refresh(replica_id, target)
        return target

    def _refresh(self, replica_id: int, target: _Target) -> None:
        """Check the partition and record the follower's position (again after a wait:
        leadership may have moved meanwhile)."""
        entry, response = target.request, target.response
        try:
            if entry.fetch_offset < 0 or entry.partition_max_bytes < 0:
                raise PartitionError(
                    ErrorCode.INVALID_REQUEST,
                    f"fetch_offset {entry.fetch_offset} and partition_max_bytes "
                    f"{entry.partition_max_bytes} must not be negative",
                )
            partition = self._replicas.leader_partition(
                entry.topic, entry.partition, entry.current_leader_epoch
            )
            if replica_id not in partition.replicas:
                raise PartitionError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"node {replica_id} is not a replica of {partition.topic_partition}",
                )
            response.high_watermark = partition.high_watermark
            response.log_start_offset = partition.log_start_offset
            if target.partition is None:
                diverging = partition.diverging_epoch(entry.last_fetched_epoch, entry.fetch_offset)
                if diverging is not None:
                    epoch, end_offset = diverging
                    response.diverging_epoch.CopyFrom(
                        common_pb2.EpochEndOffset(epoch=epoch, end_offset=end_offset)
                    )
                    return
            log_end = partition.log_end_offset
            if entry.fetch_offset > log_end or entry.fetch_offset < partition.log_start_offset:
                raise PartitionError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"fetch offset {entry.fetch_offset} is outside "
                    f"{partition.topic_partition}'s range [{partition.log_start_offset}, "
                    f"{log_end}]",
                )
            if target.partition is None and partition.update_follower_end_offset(
                replica_id, entry.fetch_offset
            ):
                self._on_caught_up(partition, replica_id)
            response.high_watermark = partition.high_watermark
            target.partition = partition
        except Exception as exc:
            result = error_result(exc)
            response.error_code = wire_code(result.code)
            response.error_message = result.message
            target.partition = None

    async def _read(
        self, request: replica_pb2.ReplicaFetchRequest, targets: list[_Target]
    ) -> float:
        """Reads each target's records into its response. Returns how long until a throttled
        partition left out (its quota spent) may go, 0 when none was."""
        budget = request.max_bytes or self._limits.response_bytes_max
        budget = min(budget, self._limits.response_bytes_max)
        first = not any(t.size_bytes for t in targets)
        node_id = self._replicas.node_id
        rate = node_throttle_rate(self._replicas.view, node_id, LEADER_THROTTLED_RATE)
        throttled_s = 0.0
        for target in targets:
            partition = target.partition
            if partition is None:
                continue
            limit = target.request.partition_max_bytes or budget
            throttled = (
                rate is not None
                and request.replica_id not in partition.isr
                and is_throttled(
                    self._replicas.view.topic_configs(partition.topic_partition.topic),
                    "leader.replication.throttled.replicas",
                    partition.topic_partition.partition,
                    node_id,
                )
            )
            if throttled:
                delay_s = self._quota.delay_s(rate)
                if delay_s > 0:
                    throttled_s = max(throttled_s, delay_s)
                    continue
                limit = ReplicationQuota.chunk_bytes(rate, limit)
            max_bytes = max(0, min(limit, budget))
            # A throttled partition the quota admits gets at least its next batch, however
            # large: its chunk may be smaller than a batch, and it is not always read first.
            whole_batch = first or (throttled and budget > 0)
            try:
                if runs_inline(max_bytes):
                    data = partition.log.read(
                        target.request.fetch_offset, max_bytes, min_one_batch=whole_batch
                    )
                else:
                    data = await asyncio.to_thread(
                        partition.log.read,
                        target.request.fetch_offset,
                        max_bytes,
                        min_one_batch=whole_batch,
                    )
            except LogError as exc:
                result = error_result(exc)
                target.response.error_code = wire_code(result.code)
                target.response.error_message = result.message
                target.partition = None
                continue
            size = len(data.records)
            if throttled:
                self._quota.record(size, rate)
                if size:
                    self._last_throttled[request.replica_id] = (
                        target.request.topic,
                        target.request.partition,
                    )
            if size:
                target.response.records = bytes(data.records)
                target.size_bytes = size
                budget -= size
                first = False
            target.response.high_watermark = partition.high_watermark
            target.response.log_start_offset = partition.log_start_offset
        return throttled_s

    @staticmethod
    def _should_wait(targets: list[_Target], min_bytes: int) -> bool:
        if any(t.partition is None for t in targets):
            # An error or a divergence is news the follower must act on at once.
            return False
        return sum(t.size_bytes for t in targets) < max(min_bytes, 1)

    # -- OffsetForLeaderEpoch ---------------------------------------------------------------

    async def OffsetForLeaderEpoch(
        self, request: replica_pb2.OffsetForLeaderEpochRequest, context: Any
    ) -> replica_pb2.OffsetForLeaderEpochResponse:
        responses = []
        for entry in request.partitions:
            response = replica_pb2.OffsetForLeaderEpochPartitionResponse(
                topic=entry.topic,
                partition=entry.partition,
                end_offset=common_pb2.EpochEndOffset(epoch=NO_EPOCH, end_offset=NO_OFFSET),
            )
            try:
                partition = self._replicas.leader_partition(
                    entry.topic, entry.partition, entry.current_leader_epoch
                )
                epoch, end_offset = partition.log.end_offset_for_epoch(entry.leader_epoch)
                response.end_offset.epoch = epoch
                response.end_offset.end_offset = end_offset
            except Exception as exc:
                result = error_result(exc)
                response.error_code = wire_code(result.code)
                response.error_message = result.message
            responses.append(response)
        return replica_pb2.OffsetForLeaderEpochResponse(partitions=responses)
