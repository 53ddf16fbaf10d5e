"""One partition replica this node hosts: its log plus leadership state (Kafka's Partition).

The log knows offsets; this knows who leads, in which epoch, with which ISR, and it owns the
two things that turn an append into answers elsewhere:

- the high watermark rule: HW = the smallest log end offset among the ISR members, learnt
  from the followers' replica fetches (``update_follower_end_offset``); followers in the ISR
  whose position is not yet known hold it back, as in Kafka. While an ISR change is pending
  at the controllers, the HW counts the larger of the two sets (Kafka's "maximal ISR"), so a
  replica being added never enters the ISR without what is already committed. acks=all
  produces wait for it (``wait_for_high_watermark``).
- the "data arrived" notifications: when the HW moves, every registered ``PartitionListener``
  (a long-polling fetch, a subscription) hears how many bytes became visible; when the leader
  appends, every replica listener (a follower's parked replica fetch) hears how many bytes
  were appended. Both at once, on the event loop. Nothing polls.
- what ISR membership is decided on: each follower's last caught-up time (Kafka's rule: a
  fetch at the leader's log end offset, or at the end the leader had at the follower's
  previous fetch), read by the ISR manager (isr.py).

Where the disk work runs. A hop to a worker thread and back costs about 90 µs here, measured
by bench/bench_storage_dispatch.py on this 2-core machine (Python 3.11, page cache):

    batch bytes   append inline   append via thread   read inline   read via thread
    1 KiB            16 µs            157 µs             29 µs          250 µs
    16 KiB           39 µs            175 µs             28 µs           64 µs
    256 KiB         143 µs            258 µs             48 µs          174 µs
    1 MiB           587 µs            588 µs            126 µs          219 µs

Up to 1 MiB the hop costs more than the work it would move, and the loop is held for at most
about half a millisecond; so appends and reads of at most ``INLINE_BYTES_MAX`` run inline, and
larger ones (and any append that may fsync, when flush.messages is set) go to a thread, which
keeps the loop responsive while the kernel copies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol

from brook.errors import ErrorCode
from brook.metadata.info import NO_LEADER, PartitionInfo
from brook_storage_node.errors import PartitionError
from brook_storage_node.log import (
    AppendOrigin,
    FetchData,
    InvariantViolationError,
    LogAppendInfo,
    PartitionLog,
    TopicPartition,
)
from brook_storage_node.log.log_config import LONG_MAX
from brook_storage_node.log.producer_state import OutOfOrderSequenceError, VerificationGuard
from brook_storage_node.topic_settings import TopicSettings

__all__ = [
    "INLINE_BYTES_MAX",
    "NO_EPOCH",
    "NO_OFFSET",
    "FollowerState",
    "Partition",
    "PartitionListener",
    "runs_inline",
]

INLINE_BYTES_MAX: Final = 1024 * 1024
# Kafka's sentinels for an unknown leader epoch and offset.
NO_EPOCH: Final = -1
# How long an idempotent batch that arrived ahead of its producer's next sequence waits for
# the batches in between (append_as_leader's gap_wait_s, used by the Produce handler). A
# client's pipelined requests can reach the node out of order — the gRPC server dispatches
# concurrent calls in no fixed order, and the gateway forwards a Kafka connection's requests
# as concurrent calls — where a Kafka broker, serving a connection's requests one at a time,
# never sees a gap the client did not make; librdkafka treats a gap at the batch it expects
# next as fatal (issue #13). Requests sent back to back arrive within milliseconds of each
# other; one that never comes (refused, or lost with its connection) makes the batch fail
# OUT_OF_ORDER_SEQUENCE_NUMBER after this, as it would have at once. The first batch here of
# a producer the partition has no state for waits as well when it starts past sequence 0
# (its batches from 0 may be behind it), and is then appended, as Kafka accepts it.
SEQUENCE_GAP_WAIT_MS: Final = 500
NO_OFFSET: Final = -1


def runs_inline(size_bytes: int) -> bool:
    """Whether disk work on about ``size_bytes`` is cheaper on the loop than via a thread."""
    return size_bytes <= INLINE_BYTES_MAX


class PartitionListener(Protocol):
    """Told about a partition's changes; called on the event loop, must not block."""

    def on_committed(self, partition: Partition, size_bytes: int) -> None:
        """``size_bytes`` of record batches just became visible (the HW moved over them)."""

    def on_state_change(self, partition: Partition) -> None:
        """Leadership, visibility or existence changed: a waiter should look again."""


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its replica fetches (monotonic seconds)."""

    log_end_offset: int
    last_caught_up_s: float
    last_fetch_s: float
    leader_end_offset_at_last_fetch: int


class Partition:
    def __init__(
        self,
        log: PartitionLog,
        local_node_id: int,
        settings: TopicSettings,
        *,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.topic_partition: TopicPartition = log.topic_partition
        self.settings = settings
        self._local_node_id = local_node_id
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        self.replicas: tuple[int, ...] = ()
        # The replicas a reassignment in progress takes away (none when nothing moves).
        self.removing: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.online = True
        self._clock_s = clock_s
        # Followers' positions and caught-up times, learnt from their fetches; reset when
        # the leader epoch changes (a new leader knows nothing of the followers yet).
        self._followers: dict[int, FollowerState] = {}
        # The ISR this leader asked the controllers for and has not seen in the metadata yet.
        self.pending_isr: tuple[int, ...] | None = None
        # (end offset, bytes) of appended batches still above the HW, oldest first: what a
        # HW move makes visible, so listeners learn sizes without reading the log. One small
        # entry per append while followers lag; replication's ISR shrink (issue #6) bounds
        # how long they can.
        self._uncommitted: deque[tuple[int, int]] = deque()
        self._listeners: set[PartitionListener] = set()
        # Told about appends (not commits): followers' parked replica fetches.
        self._replica_listeners: set[PartitionListener] = set()
        self._hw_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # FIFO, so appends that go to a thread keep their arrival order.
        self._append_lock = asyncio.Lock()
        # Appends waiting for a producer's earlier sequences (append_as_leader).
        self._append_waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic_partition}, leader {self.leader_id} epoch "
            f"{self.leader_epoch}, isr {list(self.isr)}, hw {self.high_watermark})"
        )

    # -- state ----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.online and self.leader_id == self._local_node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def visible_end(self, read_committed: bool) -> int:
        """Where a reader's data ends: the last stable offset for READ_COMMITTED, else the HW."""
        return self.log.last_stable_offset if read_committed else self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def followers(self) -> dict[int, FollowerState]:
        return self._followers

    def make_leader(self, info: PartitionInfo, settings: TopicSettings) -> None:
        """Lead in ``info.leader_epoch``: the HW is recomputed from the new ISR."""
        new_term = info.leader_epoch != self.leader_epoch or not self.is_leader
        self._adopt(info, settings)
        self.pending_isr = None
        if new_term:
            # Every follower gets a full lag period from now before it can be dropped.
            now_s = self._clock_s()
            end = self.log.log_end_offset
            self._followers = {
                replica: FollowerState(NO_OFFSET, now_s, now_s, end)
                for replica in info.replicas
                if replica != self._local_node_id
            }
            # Kafka's rule: the new epoch starts at the current end, so a follower that
            # asks where its (older) epoch ends learns where this leader's history departs
            # from it even before anything is appended in the new epoch.
            latest = self.log.latest_epoch
            if info.leader_epoch >= 0 and (latest is None or info.leader_epoch > latest):
                self.log.leader_epoch_cache.assign(info.leader_epoch, end)
        self.online = True
        self.maybe_increment_high_watermark()
        self._state_changed()

    def make_follower(self, info: PartitionInfo, settings: TopicSettings) -> None:
        """Follow ``info.leader``; pending acks=all produces fail with NOT_LEADER_OR_FOLLOWER."""
        self._adopt(info, settings)
        self.online = True
        self._followers.clear()
        self.pending_isr = None
        # Sizes of appends above the HW mean nothing once another node decides the HW.
        self._uncommitted.clear()
        self._fail_hw_waiters(f"this node is no longer the leader of {self.topic_partition}")
        self._wake_append_waiters()  # they find it is no longer the leader
        self._state_changed()

    def make_offline(self, reason: str) -> None:
        """Stop serving: the partition was deleted or moved away from this node."""
        self.online = False
        self._fail_hw_waiters(reason)
        self._wake_append_waiters()
        self._state_changed()

    def update_settings(self, settings: TopicSettings) -> None:
        self.settings = settings
        self.log.update_config(settings.log_config)

    def _adopt(self, info: PartitionInfo, settings: TopicSettings) -> None:
        """Take on the metadata's view of the partition. Leader epochs never go back: the
        controllers bump the epoch on every leadership change and the metadata is applied in
        order (a re-created topic is a new Partition), so a lower epoch is a bug upstream, and
        following it would let a deposed leader's view overwrite the current one."""
        if info.leader_epoch < self.leader_epoch:
            raise InvariantViolationError(
                f"{self.topic_partition}: leader epoch {info.leader_epoch} after "
                f"{self.leader_epoch}; leader epochs never go back"
            )
        self.leader_id = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = info.replicas
        self.removing = info.removing
        self.isr = info.isr
        self.update_settings(settings)

    def check_leader(self, current_leader_epoch: int = NO_EPOCH) -> None:
        """PartitionError unless this node leads and ``current_leader_epoch`` (the client's
        belief, -1 for none) is the current epoch. The caller adds the leader hint."""
        if not self.is_leader:
            raise PartitionError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"this node does not lead {self.topic_partition}",
            )
        if current_leader_epoch == NO_EPOCH or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise PartitionError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"leader epoch {current_leader_epoch} of {self.topic_partition} is stale; the "
                f"current epoch is {self.leader_epoch}",
            )
        raise PartitionError(
            ErrorCode.UNKNOWN_LEADER_EPOCH,
            f"leader epoch {current_leader_epoch} of {self.topic_partition} is newer than this "
            f"node's {self.leader_epoch}; its metadata is behind",
        )

    # -- appends ----------------------------------------------------------------------------

    async def append_as_leader(
        self,
        records: bytes,
        *,
        acks_all: bool,
        gap_wait_s: float | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verify: bool = False,
        guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate and append a producer's batches (``origin`` COORDINATOR: a transaction
        marker); the HW follows. Raises PartitionError, RecordError or LogError with nothing
        appended. ``verify`` and ``guard``: a transactional batch opening a transaction must
        have been verified (``PartitionLog.append``).

        An idempotent batch ahead of its producer's sequence (past the next one in its
        epoch, or past 0 as the first batch here of a producer the partition has no state
        for) may have overtaken the batches before it (see SEQUENCE_GAP_WAIT_MS).
        ``gap_wait_s`` None: it raises OutOfOrderSequenceError with ``ahead`` at once, for the
        caller to set aside. Otherwise it waits up to ``gap_wait_s`` for them, re-checked after
        each append here; then a gap fails OUT_OF_ORDER_SEQUENCE_NUMBER, while a producer with
        still no state here is accepted from that batch on (Kafka's rule)."""
        loop = asyncio.get_running_loop()
        deadline_s = None if gap_wait_s is None else loop.time() + gap_wait_s
        hold_unknown_producers = True
        while True:
            try:
                return await self._append_as_leader(
                    records,
                    acks_all=acks_all,
                    origin=origin,
                    verify=verify,
                    guard=guard,
                    hold_unknown_producers=hold_unknown_producers,
                )
            except OutOfOrderSequenceError as error:
                if not error.ahead or deadline_s is None:
                    raise
                remaining_s = deadline_s - loop.time()
                if remaining_s <= 0:
                    if not error.unknown_producer:
                        raise
                    hold_unknown_producers = False
                    continue
                waiter = loop.create_future()
                self._append_waiters.append(waiter)
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter, remaining_s)
                finally:
                    with contextlib.suppress(ValueError):
                        self._append_waiters.remove(waiter)

    def _wake_append_waiters(self) -> None:
        waiters, self._append_waiters = self._append_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _append_as_leader(
        self,
        records: bytes,
        *,
        acks_all: bool,
        origin: AppendOrigin,
        verify: bool,
        guard: VerificationGuard | None,
        hold_unknown_producers: bool,
    ) -> LogAppendInfo:
        async with self._append_lock:
            self.check_leader()
            if acks_all and len(self.isr) < self.settings.min_insync_replicas:
                raise PartitionError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"{self.topic_partition} has {len(self.isr)} in-sync replicas, fewer than "
                    f"min.insync.replicas={self.settings.min_insync_replicas}",
                )
            epoch = self.leader_epoch
            log = self.log
            append = functools.partial(
                log.append,
                records,
                leader_epoch=epoch,
                origin=origin,
                verify=verify,
                guard=guard,
                hold_unknown_producers=hold_unknown_producers,
            )
            if runs_inline(len(records)) and log.config.flush_messages == LONG_MAX:
                info = append()
            else:
                # A leadership change on the loop meanwhile cannot undo this append; as in
                # Kafka, a new leader's followers truncate what the old epoch wrote past
                # their high watermark.
                info = await asyncio.to_thread(append)
            if info.duplicate:
                # A retry of a batch already in the log: nothing new for anyone to read; an
                # acks=all caller still waits for the original to be committed.
                return info
            self._uncommitted.append((info.last_offset + 1, info.size_bytes))
            if self._append_waiters:
                self._wake_append_waiters()
        for listener in list(self._replica_listeners):
            listener.on_committed(self, info.size_bytes)
        self.maybe_increment_high_watermark()
        return info

    async def append_as_follower(self, records: bytes) -> LogAppendInfo | None:
        """Append the leader's batches as they are; None (nothing appended) if this node has
        become the leader or stopped serving meanwhile."""
        async with self._append_lock:
            if self.is_leader or not self.online:
                return None
            log = self.log
            if runs_inline(len(records)) and log.config.flush_messages == LONG_MAX:
                return log.append_as_follower(records)
            return await asyncio.to_thread(log.append_as_follower, records)

    async def truncate_as_follower(self, offset: int) -> bool:
        """Remove this follower's records from ``offset`` on (where its log departs from the
        leader's); False if nothing was removed or this node leads now."""
        async with self._append_lock:
            if self.is_leader or not self.online:
                return False
            return await asyncio.to_thread(self.log.truncate_to, offset)

    async def restart_as_follower_at(self, offset: int) -> None:
        """Empty this follower's log and start it at ``offset`` (the leader's log start)."""
        async with self._append_lock:
            if self.is_leader or not self.online:
                return
            await asyncio.to_thread(self.log.truncate_fully_and_start_at, offset)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's HW: the leader's, as far as this log reaches."""
        if self.is_leader:
            return
        # The log bounds it by its end, under its lock (a legitimate clamp, with its reason).
        self.log.update_follower_high_watermark(leader_high_watermark)

    # -- high watermark ---------------------------------------------------------------------

    def update_follower_end_offset(self, replica_id: int, log_end_offset: int) -> bool:
        """Record a follower's position (from its fetch) and move the HW if it can. True if
        the follower is outside the ISR and has caught up enough to join it."""
        now_s = self._clock_s()
        leader_end = self.log.log_end_offset
        state = self._followers.get(replica_id)
        if state is None:
            state = FollowerState(NO_OFFSET, now_s, now_s, leader_end)
            # A follower never seen before (a reassignment) starts out of sync.
            state.last_caught_up_s = float("-inf")
            self._followers[replica_id] = state
        if log_end_offset >= leader_end:
            state.last_caught_up_s = now_s
        elif log_end_offset >= state.leader_end_offset_at_last_fetch:
            state.last_caught_up_s = max(state.last_caught_up_s, state.last_fetch_s)
        state.log_end_offset = log_end_offset
        state.last_fetch_s = now_s
        state.leader_end_offset_at_last_fetch = leader_end
        self.maybe_increment_high_watermark()
        return self.may_join_isr(replica_id)

    def may_join_isr(self, replica_id: int) -> bool:
        """Kafka's rule for adding a follower back: it has everything up to the HW and at
        least the start of this leader's epoch."""
        state = self._followers.get(replica_id)
        if not self.is_leader or state is None or replica_id in self.isr:
            return False
        if self.pending_isr is not None or replica_id not in self.replicas:
            return False
        epoch_start = self._current_epoch_start()
        return state.log_end_offset >= max(self.high_watermark, epoch_start)

    def _current_epoch_start(self) -> int:
        entry = self.log.leader_epoch_cache.latest_entry
        if entry is None or entry.epoch != self.leader_epoch:
            return self.log.log_end_offset
        return entry.start_offset

    def out_of_sync_replicas(self, lag_time_max_s: float) -> tuple[int, ...]:
        """ISR members (not this node) that have not caught up within ``lag_time_max_s``."""
        if not self.is_leader:
            return ()
        now_s = self._clock_s()
        lagging = []
        for replica in self.isr:
            if replica == self._local_node_id:
                continue
            state = self._followers.get(replica)
            if state is None or now_s - state.last_caught_up_s > lag_time_max_s:
                lagging.append(replica)
        return tuple(lagging)

    @property
    def under_replicated(self) -> bool:
        """Led, with fewer in-sync replicas than the replication factor: the target's size
        while a reassignment is in progress (Kafka's rule), so a move alone is not an alert."""
        return self.is_leader and len(self.isr) < len(self.replicas) - len(self.removing)

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to the smallest log end offset in the ISR; True if it moved."""
        if not self.is_leader:
            return False
        members = set(self.isr)
        if self.pending_isr is not None:
            members.update(self.pending_isr)
        followers_end: int | None = None
        for replica in members:
            if replica == self._local_node_id:
                continue
            state = self._followers.get(replica)
            if state is None or state.log_end_offset < 0:
                return False
            if followers_end is None or state.log_end_offset < followers_end:
                followers_end = state.log_end_offset
        # The log takes the smaller of that and its own end, under its lock.
        if not self.log.maybe_increment_high_watermark(followers_end):
            return False
        high_watermark = self.log.high_watermark
        committed_bytes = 0
        uncommitted = self._uncommitted
        while uncommitted and uncommitted[0][0] <= high_watermark:
            committed_bytes += uncommitted.popleft()[1]
        for listener in list(self._listeners):
            if committed_bytes:
                listener.on_committed(self, committed_bytes)
            else:
                # The HW moved over data appended before this node took over: sizes unknown.
                listener.on_state_change(self)
        if self._hw_waiters:
            self._release_hw_waiters(high_watermark)
        return True

    async def wait_for_high_watermark(self, offset: int, timeout_s: float) -> None:
        """Return once the HW reaches ``offset``; PartitionError REQUEST_TIMED_OUT after
        ``timeout_s``, NOT_LEADER_OR_FOLLOWER if leadership is lost meanwhile,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR that committed it is smaller than
        min.insync.replicas (it shrank while the produce waited)."""
        if self.high_watermark < offset:
            await self._wait_for_high_watermark(offset, timeout_s)
        if len(self.isr) < self.settings.min_insync_replicas:
            raise PartitionError(
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"{self.topic_partition}: the batch is committed by {len(self.isr)} in-sync "
                f"replicas, fewer than min.insync.replicas={self.settings.min_insync_replicas}",
            )

    async def _wait_for_high_watermark(self, offset: int, timeout_s: float) -> None:
        self.check_leader()
        waiter = (offset, asyncio.get_running_loop().create_future())
        self._hw_waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter[1]
        except TimeoutError:
            raise PartitionError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{self.topic_partition}: the in-sync replicas did not reach offset {offset} "
                f"within {timeout_s * 1000:.0f} ms (high watermark {self.high_watermark})",
            ) from None
        finally:
            with contextlib.suppress(ValueError):
                self._hw_waiters.remove(waiter)

    def _release_hw_waiters(self, high_watermark: int) -> None:
        for offset, future in self._hw_waiters:
            if offset <= high_watermark and not future.done():
                future.set_result(None)

    def _fail_hw_waiters(self, reason: str) -> None:
        for _, future in self._hw_waiters:
            if not future.done():
                future.set_exception(PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, reason))

    # -- reads and listeners ----------------------------------------------------------------

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """(epoch, end offset) where a fetcher's log parts from this one (Kafka's check: its
        last epoch ends here before its position, or is unknown here: (NO_EPOCH, -1)), None if
        it does not or the fetcher names no epoch. Followers truncate to it; consumers (Fetch
        v12+) are told, or get OFFSET_OUT_OF_RANGE for an unknown epoch, as from Kafka."""
        if last_fetched_epoch < 0 or fetch_offset == 0:
            return None
        epoch, end_offset = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch == NO_EPOCH or epoch < last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool, read_committed: bool = False
    ) -> FetchData:
        """Whole batches from ``offset``, below the HW only (what consumers may see), or
        below the last stable offset for ``read_committed``."""
        return self.log.read(
            offset,
            max_bytes,
            max_offset=self.visible_end(read_committed),
            min_one_batch=min_one_batch,
        )

    def add_listener(self, listener: PartitionListener) -> None:
        self._listeners.add(listener)

    def remove_listener(self, listener: PartitionListener) -> None:
        self._listeners.discard(listener)

    def add_replica_listener(self, listener: PartitionListener) -> None:
        """``listener.on_committed`` hears of appends (not commits): followers read past the HW."""
        self._replica_listeners.add(listener)

    def remove_replica_listener(self, listener: PartitionListener) -> None:
        self._replica_listeners.discard(listener)

    @property
    def listeners(self) -> Iterator[PartitionListener]:
        return iter(tuple(self._listeners))

    def wake_listeners(self) -> None:
        """Make every waiter look again (shutdown, records deleted)."""
        self._state_changed()

    def _state_changed(self) -> None:
        for listener in (*self._listeners, *self._replica_listeners):
            listener.on_state_change(self)
