"""The follower's side of replication (Kafka's ReplicaFetcherManager and fetcher threads).

``ReplicaFetchers`` implements the replica manager's ``FollowerFetchers``: told which
partitions to follow from which leader, it keeps one ``LeaderFetcher`` (one task, one
long-lived ReplicaFetch stream) per leader node, carrying every partition followed there.
Each request is the whole fetch state: for every partition its log end offset, its last
epoch, the leader epoch it follows in. Each response is applied in order:

- records: appended as they are (``Partition.append_as_follower``; offsets and epochs as the
  leader assigned them); the follower's HW becomes the leader's, as far as its log reaches;
- ``diverging_epoch``: the logs part at the end of that epoch. The log is truncated to the
  end offset of that epoch on both sides (the smaller), then fetching resumes; repeated
  until the logs agree (Kafka's KIP-320 truncation). So a follower that starts following a
  new leader keeps nothing the new leader lacks before it appends anything; committed records
  are never removed, because the new leader (elected from the ISR) has all of them;
- OFFSET_OUT_OF_RANGE: behind the leader's log start (its old data was deleted) the log
  restarts empty at the leader's start; past the leader's end (an unclean election) it is
  truncated to the leader's end;
- a leadership error (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, ...):
  the partition pauses for replica.fetch.backoff.ms while the metadata catches up; a new
  ``follow`` call resumes it at once.

A broken stream (the leader died, restarted, or answered STALE_BROKER_EPOCH) is reopened
after replica.fetch.backoff.ms, doubling up to ten times that while it keeps failing. A
fetcher whose last partition is unfollowed stops; ``close`` stops them all.

Partitions this node fetches under a replication throttle (replication_quota.py: listed in
their topic's follower.replication.throttled.replicas for this node, and this node not in
their ISR) share ``follower.replication.throttled.rate``: while the quota is spent they are
left out of requests, and each carries at most a tenth of a second of the rate.

A failure that repeats — a partition's error, a leader's broken stream — is logged when it
starts, then at most once a minute per partition (per leader) with a count, and once when it
clears; ``brook.replication.failed_partitions`` counts the partitions followed here whose
last fetch failed (Kafka's FailedPartitionsCount), so an error that does not resolve by
itself shows on a dashboard instead of as a line per back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from opentelemetry.metrics import CallbackOptions, Observation

from brook.config import Config
from brook.errors import ErrorCode, error_code
from brook.logs import RepeatLimiter
from brook.metadata.info import NO_LEADER
from brook.rpc.addresses import listener_address
from brook.rpc.channels import ChannelPool, channel_options
from brook.telemetry import meter
from brook.topic_config import FOLLOWER_THROTTLED_RATE
from brook.v1 import common_pb2, replica_pb2, replica_pb2_grpc
from brook_storage_node.log import TopicPartition
from brook_storage_node.metadata_view import MetadataView
from brook_storage_node.partition import NO_EPOCH, Partition
from brook_storage_node.replication_quota import ReplicationQuota, is_throttled, node_throttle_rate

__all__ = ["FetcherSettings", "LeaderFetcher", "ReplicaFetchers", "truncation_offset"]

_log = logging.getLogger(__name__)

# Back-off after repeated stream failures grows to this multiple of replica.fetch.backoff.ms.
BACKOFF_GROWTH_MAX: Final = 10
# A response may take max_wait_ms; beyond this margin on top the stream counts as dead.
RESPONSE_MARGIN_MS: Final = 5000
# What a broken stream raises: the leader died, restarted, refused us or ended the call.
_STREAM_ERRORS: Final = (
    grpc.aio.AioRpcError,
    ConnectionError,
    TimeoutError,
    OSError,
    asyncio.InvalidStateError,
)
# A failure that keeps repeating is logged again at most this often (per partition or leader).
REPEAT_LOG_INTERVAL_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    node_id: int
    max_wait_ms: int
    min_bytes: int
    response_bytes_max: int
    partition_bytes_max: int
    backoff_ms: int
    request_timeout_ms: int

    @classmethod
    def from_config(cls, config: Config) -> FetcherSettings:
        return cls(
            node_id=config.get_int("node.id"),
            max_wait_ms=config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=config.get_int("replica.fetch.min.bytes"),
            response_bytes_max=config.get_int("replica.fetch.response.max.bytes"),
            partition_bytes_max=config.get_int("replica.fetch.max.bytes"),
            backoff_ms=config.get_int("replica.fetch.backoff.ms"),
            request_timeout_ms=config.get_int("request.timeout.ms"),
        )


@dataclass(slots=True)
class _FetchState:
    partition: Partition
    leader_epoch: int
    paused_until_s: float = 0.0


@dataclass(slots=True)
class _Stream:
    call: Any
    channel: grpc.aio.Channel
    address: str


@dataclass(slots=True)
class LeaderFetcher:
    """One leader node: the partitions followed there and the task that fetches them."""

    leader_id: int
    states: dict[TopicPartition, _FetchState] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # The throttled partitions the request out now carries, and which of them leads the next.
    throttled: set[TopicPartition] = field(default_factory=set)
    throttled_turn: int = 0
    # When the first partition the last request left out (paused, or throttled) may go again;
    # None when it left none out.
    resume_s: float | None = None


class ReplicaFetchers:
    """``FollowerFetchers`` for the replica manager; create and use on the event loop."""

    def __init__(
        self,
        settings: FetcherSettings,
        view: MetadataView,
        broker_epoch: Callable[[], int] = lambda: -1,
    ) -> None:
        self._settings = settings
        self._view = view
        self._broker_epoch = broker_epoch
        self._fetchers: dict[int, LeaderFetcher] = {}
        self._closed = False
        self._partition_errors = RepeatLimiter(_log, REPEAT_LOG_INTERVAL_S)
        self._stream_errors = RepeatLimiter(_log, REPEAT_LOG_INTERVAL_S, level=logging.INFO)
        self._quota = ReplicationQuota()
        meter(__name__).create_observable_gauge(
            "brook.replication.failed_partitions",
            callbacks=[self._observe_failed],
            unit="{partition}",
            description="Partitions followed here whose last replica fetch failed",
        )

    def failed_partitions(self) -> int:
        """Partitions followed here whose last fetch failed (their error not yet cleared)."""
        return self._partition_errors.failing()

    def failures(self, tp: TopicPartition) -> int:
        """Fetches of ``tp`` that failed in a row until now (0 once one succeeds)."""
        return self._partition_errors.count(tp)

    def _observe_failed(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self.failed_partitions())]

    @property
    def fetchers(self) -> dict[int, LeaderFetcher]:
        return self._fetchers

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        tp = partition.topic_partition
        self.unfollow(tp)
        if leader_id == NO_LEADER or self._closed:
            return
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = LeaderFetcher(leader_id)
            self._fetchers[leader_id] = fetcher
        fetcher.states[tp] = _FetchState(partition, leader_epoch)
        fetcher.changed.set()
        if fetcher.task is None or fetcher.task.done():
            fetcher.task = asyncio.get_running_loop().create_task(
                self._run(fetcher), name=f"replica-fetcher-{leader_id}"
            )

    def unfollow(self, tp: TopicPartition) -> None:
        self._partition_errors.forget(tp)
        for fetcher in self._fetchers.values():
            if fetcher.states.pop(tp, None) is not None:
                fetcher.changed.set()

    async def close(self) -> None:
        self._closed = True
        tasks = [f.task for f in self._fetchers.values() if f.task is not None]
        self._fetchers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- the fetch loop -----------------------------------------------------------------------

    async def _run(self, fetcher: LeaderFetcher) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        stream: _Stream | None = None
        try:
            while fetcher.states and self._fetchers.get(fetcher.leader_id) is fetcher:
                try:
                    if stream is None:
                        stream = self._open(fetcher.leader_id)
                    request = self._request(fetcher, loop.time())
                    if not request.partitions:
                        fetcher.changed.clear()
                        await self._wait_for_change(fetcher, loop.time())
                        continue
                    await stream.call.write(request)
                    timeout_s = (request.max_wait_ms + RESPONSE_MARGIN_MS) / 1000
                    response = await asyncio.wait_for(stream.call.read(), timeout_s)
                    if response is grpc.aio.EOF:
                        raise ConnectionError(f"node {fetcher.leader_id} ended the stream")
                    code = error_code(int(response.error_code))
                    if code is not ErrorCode.NONE:
                        raise ConnectionError(f"{code.name}: {response.error_message}")
                    await self._apply(fetcher, response, loop.time())
                    if failures:
                        failures = 0
                        self._stream_errors.cleared(
                            fetcher.leader_id,
                            "replica fetch from node %d works again",
                            fetcher.leader_id,
                        )
                except Exception as exc:
                    # InvalidStateError: the leader ended the call between our read and write.
                    # Anything else is a bug, but this task must not die of it: the partitions
                    # it carries would stop replicating until their next leadership change.
                    failures += 1
                    wait_s = self._backoff_s(failures)
                    logged = self._stream_errors.failed(
                        fetcher.leader_id,
                        "replica fetch from node %d failed (%s); retrying in %.2f s",
                        fetcher.leader_id,
                        _short(exc),
                        wait_s,
                    )
                    if logged and not isinstance(exc, _STREAM_ERRORS):
                        _log.error(
                            "unexpected error fetching from node %d",
                            fetcher.leader_id,
                            exc_info=exc,
                        )
                    if stream is not None:
                        await self._close_stream(stream)
                        stream = None
                    await asyncio.sleep(wait_s)
        finally:
            self._stream_errors.forget(fetcher.leader_id)
            if stream is not None:
                await self._close_stream(stream)
            if self._fetchers.get(fetcher.leader_id) is fetcher:
                if not fetcher.states:
                    del self._fetchers[fetcher.leader_id]
                elif not self._closed:
                    # follow() added a partition while the stream was closing, saw this task
                    # still running and started none: carry on in a new one.
                    fetcher.task = asyncio.get_running_loop().create_task(
                        self._run(fetcher), name=f"replica-fetcher-{fetcher.leader_id}"
                    )

    def _backoff_s(self, failures: int) -> float:
        base_ms = max(self._settings.backoff_ms, 1)
        growth: int = 2 ** min(failures - 1, 8)
        return min(base_ms * growth, base_ms * BACKOFF_GROWTH_MAX) / 1000

    async def _wait_for_change(self, fetcher: LeaderFetcher, now_s: float) -> None:
        """Every partition is paused or throttled: wait until one may go again or the state
        changes."""
        wait_s = None if fetcher.resume_s is None else fetcher.resume_s - now_s
        if wait_s is not None and wait_s <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fetcher.changed.wait(), wait_s)

    def _open(self, leader_id: int) -> _Stream:
        broker = self._view.broker(leader_id)
        address = listener_address(broker.endpoints) if broker is not None else None
        if address is None:
            raise ConnectionError(f"the metadata gives no address for node {leader_id}")
        # A dedicated connection per leader, not a pooled one: replication must not queue
        # behind client traffic on a shared HTTP/2 connection, and a stream is torn down with
        # its channel when the fetcher restarts. A restarted leader is reachable again within
        # the back-off; a fetch response has no size limit (the leader bounds it).
        channel = ChannelPool.dedicated(
            address,
            channel_options(
                client_id=f"replica-{self._settings.node_id}",
                receive_bytes_max=-1,
                reconnect_backoff_ms=self._settings.backoff_ms,
                reconnect_backoff_max_ms=max(self._settings.backoff_ms, 1) * 10,
            ),
        )
        stub = replica_pb2_grpc.ReplicaServiceStub(channel)  # type: ignore[no-untyped-call]
        return _Stream(stub.ReplicaFetch(), channel, address)

    @staticmethod
    async def _close_stream(stream: _Stream) -> None:
        stream.call.cancel()
        await stream.channel.close(grace=None)

    def _request(self, fetcher: LeaderFetcher, now_s: float) -> replica_pb2.ReplicaFetchRequest:
        settings = self._settings
        request = replica_pb2.ReplicaFetchRequest(
            replica_id=settings.node_id,
            broker_epoch=self._broker_epoch(),
            max_wait_ms=settings.max_wait_ms,
            min_bytes=settings.min_bytes,
            max_bytes=settings.response_bytes_max,
        )
        rate = node_throttle_rate(self._view, settings.node_id, FOLLOWER_THROTTLED_RATE)
        throttle_delay_s = self._quota.delay_s(rate)
        fetcher.throttled.clear()
        resume = []
        throttled: list[tuple[TopicPartition, _FetchState, int]] = []
        others: list[tuple[TopicPartition, _FetchState, int]] = []
        for tp, state in fetcher.states.items():
            if state.paused_until_s > now_s:
                resume.append(state.paused_until_s)
                continue
            if rate is not None and self._throttled(tp, state):
                if throttle_delay_s > 0:
                    resume.append(now_s + throttle_delay_s)
                    continue
                fetcher.throttled.add(tp)
                chunk = ReplicationQuota.chunk_bytes(rate, settings.partition_bytes_max)
                throttled.append((tp, state, chunk))
            else:
                others.append((tp, state, settings.partition_bytes_max))
        if throttled:
            # Throttled partitions go first, a different one leading each time: the leader
            # sends the first partition with data at least one batch, however small its
            # chunk, so each gets its turn even when its batches are larger than the chunk.
            turn = fetcher.throttled_turn % len(throttled)
            fetcher.throttled_turn += 1
            throttled = throttled[turn:] + throttled[:turn]
        for tp, state, max_bytes in [*throttled, *others]:
            log = state.partition.log
            latest = log.latest_epoch
            request.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                fetch_offset=log.log_end_offset,
                current_leader_epoch=state.leader_epoch,
                last_fetched_epoch=NO_EPOCH if latest is None else latest,
                log_start_offset=log.log_start_offset,
                partition_max_bytes=max_bytes,
            )
        fetcher.resume_s = min(resume, default=None)
        if fetcher.resume_s is not None:
            # The leader must not hold the others' request past the moment a left-out
            # partition may go again.
            wait_ms = math.ceil((fetcher.resume_s - now_s) * 1000)
            request.max_wait_ms = max(0, min(request.max_wait_ms, wait_ms))
        return request

    def _throttled(self, tp: TopicPartition, state: _FetchState) -> bool:
        node_id = self._settings.node_id
        return node_id not in state.partition.isr and is_throttled(
            self._view.topic_configs(tp.topic),
            "follower.replication.throttled.replicas",
            tp.partition,
            node_id,
        )

    async def _apply(
        self, fetcher: LeaderFetcher, response: replica_pb2.ReplicaFetchResponse, now_s: float
    ) -> None:
        throttled_bytes = sum(
            len(entry.records)
            for entry in response.partitions
            if TopicPartition(entry.topic, entry.partition) in fetcher.throttled
        )
        self._quota.record(
            throttled_bytes,
            node_throttle_rate(self._view, self._settings.node_id, FOLLOWER_THROTTLED_RATE),
        )
        for entry in response.partitions:
            tp = TopicPartition(entry.topic, entry.partition)
            state = fetcher.states.get(tp)
            if state is None:
                continue  # unfollowed while the request was out
            try:
                await self._apply_partition(state, entry)
            except Exception as exc:
                # One partition's trouble (a bad batch, a disk error) must not stop the others.
                self._partition_errors.failed(
                    tp, "replicating %s from node %d: %s", tp, fetcher.leader_id, exc
                )
                state.paused_until_s = now_s + self._settings.backoff_ms / 1000
            else:
                if self._partition_errors.is_failing(tp):
                    self._partition_errors.cleared(
                        tp, "replicating %s from node %d works again", tp, fetcher.leader_id
                    )

    async def _apply_partition(
        self, state: _FetchState, entry: replica_pb2.ReplicaFetchPartitionResponse
    ) -> None:
        partition = state.partition
        log = partition.log
        code = error_code(int(entry.error_code))
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            if entry.log_start_offset > log.log_end_offset:
                _log.info("%s: behind the leader's log start %d", log, entry.log_start_offset)
                await partition.restart_as_follower_at(entry.log_start_offset)
                return
            # Past the leader's end: it lacks records this log has (its epochs told nothing).
            if not await partition.truncate_as_follower(max(entry.high_watermark, 0)):
                raise RuntimeError(f"{code.name}: {entry.error_message}")
            return
        if code is not ErrorCode.NONE:
            raise RuntimeError(f"{code.name}: {entry.error_message}")
        if entry.HasField("diverging_epoch"):
            offset = truncation_offset(partition, entry.diverging_epoch)
            if not await partition.truncate_as_follower(offset):
                # Nothing to cut, yet the leader still disagrees: wait, do not spin.
                raise RuntimeError(
                    f"the leader reports a divergence at epoch {entry.diverging_epoch.epoch} "
                    f"offset {entry.diverging_epoch.end_offset} that truncating to {offset} "
                    "does not resolve"
                )
            _log.info("%s: truncated to %d to agree with its leader", log, offset)
            return
        if entry.records:
            await partition.append_as_follower(entry.records)
        partition.update_follower_high_watermark(entry.high_watermark)


def truncation_offset(partition: Partition, diverging: common_pb2.EpochEndOffset) -> int:
    """Where this log agrees with its leader's, given the leader's ``diverging`` epoch and
    that epoch's end offset there (Kafka's rule)."""
    log = partition.log
    if diverging.epoch < 0:
        # The leader knows no epoch this old: keep only what is committed.
        return log.high_watermark
    epoch, own_end = log.end_offset_for_epoch(diverging.epoch)
    if epoch == diverging.epoch:
        return min(diverging.end_offset, own_end)
    # This log lacks that epoch: cut at the end of its own older one; the next fetch
    # compares the epoch before.
    return own_end if own_end >= 0 else log.high_watermark


def _short(exc: BaseException) -> str:
    """A gRPC error's code and details, not its multi-line debug string."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__
