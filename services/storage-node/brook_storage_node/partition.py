"""One partition replica this node hosts: its log plus leadership state (Kafka's Partition).

The log knows offsets; this knows who leads, in which epoch, with which ISR, and it owns the
two things that turn an append into answers elsewhere:

- the high watermark rule: HW = the smallest log end offset among the ISR members. With the
  ISR just this node (no replication until issue #6) that is this node's log end offset after
  every append; followers in the ISR whose position is not yet known hold it back, as in
  Kafka. acks=all produces wait for it (``wait_for_high_watermark``).
- the "data arrived" notification: when the HW moves, every registered ``PartitionListener``
  (a long-polling fetch, a subscription) hears how many bytes became visible, at once, on the
  event loop. Nothing polls.

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
from collections import deque
from collections.abc import Iterator
from typing import Final, Protocol

from brook.errors import ErrorCode
from brook_storage_node.errors import PartitionError
from brook_storage_node.log import FetchData, LogAppendInfo, PartitionLog, TopicPartition
from brook_storage_node.log.log_config import LONG_MAX
from brook_storage_node.metadata_view import NO_LEADER, PartitionInfo
from brook_storage_node.topic_settings import TopicSettings

__all__ = [
    "INLINE_BYTES_MAX",
    "NO_EPOCH",
    "NO_OFFSET",
    "Partition",
    "PartitionListener",
    "runs_inline",
]

INLINE_BYTES_MAX: Final = 1024 * 1024
# Kafka's sentinels for an unknown leader epoch and offset.
NO_EPOCH: Final = -1
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


class Partition:
    def __init__(self, log: PartitionLog, local_node_id: int, settings: TopicSettings) -> None:
        self.log = log
        self.topic_partition: TopicPartition = log.topic_partition
        self.settings = settings
        self._local_node_id = local_node_id
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.online = True
        # Log end offsets of followers, learnt from their fetches (issue #6).
        self._follower_end_offsets: dict[int, int] = {}
        # (end offset, bytes) of appended batches still above the HW, oldest first: what a
        # HW move makes visible, so listeners learn sizes without reading the log. One small
        # entry per append while followers lag; replication's ISR shrink (issue #6) bounds
        # how long they can.
        self._uncommitted: deque[tuple[int, int]] = deque()
        self._listeners: set[PartitionListener] = set()
        self._hw_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # FIFO, so appends that go to a thread keep their arrival order.
        self._append_lock = asyncio.Lock()

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
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def make_leader(self, info: PartitionInfo, settings: TopicSettings) -> None:
        """Lead in ``info.leader_epoch``: the HW is recomputed from the new ISR."""
        if info.leader_epoch != self.leader_epoch:
            self._follower_end_offsets.clear()
        self._adopt(info, settings)
        self.online = True
        self.maybe_increment_high_watermark()
        self._state_changed()

    def make_follower(self, info: PartitionInfo, settings: TopicSettings) -> None:
        """Follow ``info.leader``; pending acks=all produces fail with NOT_LEADER_OR_FOLLOWER."""
        self._adopt(info, settings)
        self.online = True
        self._follower_end_offsets.clear()
        self._fail_hw_waiters(f"this node is no longer the leader of {self.topic_partition}")
        self._state_changed()

    def make_offline(self, reason: str) -> None:
        """Stop serving: the partition was deleted or moved away from this node."""
        self.online = False
        self._fail_hw_waiters(reason)
        self._state_changed()

    def update_settings(self, settings: TopicSettings) -> None:
        self.settings = settings
        self.log.update_config(settings.log_config)

    def _adopt(self, info: PartitionInfo, settings: TopicSettings) -> None:
        self.leader_id = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = info.replicas
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

    async def append_as_leader(self, records: bytes, *, acks_all: bool) -> LogAppendInfo:
        """Validate and append a producer's batches; the HW follows. Raises PartitionError,
        RecordError or LogError with nothing appended."""
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
            if runs_inline(len(records)) and log.config.flush_messages == LONG_MAX:
                info = log.append(records, leader_epoch=epoch)
            else:
                # A leadership change on the loop meanwhile cannot undo this append; as in
                # Kafka, a new leader's followers truncate what the old epoch wrote past
                # their high watermark.
                info = await asyncio.to_thread(log.append, records, leader_epoch=epoch)
            self._uncommitted.append((info.last_offset + 1, info.size_bytes))
        self.maybe_increment_high_watermark()
        return info

    # -- high watermark ---------------------------------------------------------------------

    def update_follower_end_offset(self, replica_id: int, log_end_offset: int) -> None:
        """Record a follower's position (from its fetch) and move the HW if it can."""
        self._follower_end_offsets[replica_id] = log_end_offset
        self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to the smallest log end offset in the ISR; True if it moved."""
        if not self.is_leader:
            return False
        candidate = self.log.log_end_offset
        for replica in self.isr:
            if replica == self._local_node_id:
                continue
            follower_end = self._follower_end_offsets.get(replica)
            if follower_end is None:
                return False
            candidate = min(candidate, follower_end)
        if not self.log.maybe_increment_high_watermark(candidate):
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
        ``timeout_s``, NOT_LEADER_OR_FOLLOWER if leadership is lost meanwhile."""
        if self.high_watermark >= offset:
            return
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

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool) -> FetchData:
        """Whole batches from ``offset``, below the HW only (what consumers may see)."""
        return self.log.read(
            offset, max_bytes, max_offset=self.log.high_watermark, min_one_batch=min_one_batch
        )

    def add_listener(self, listener: PartitionListener) -> None:
        self._listeners.add(listener)

    def remove_listener(self, listener: PartitionListener) -> None:
        self._listeners.discard(listener)

    @property
    def listeners(self) -> Iterator[PartitionListener]:
        return iter(tuple(self._listeners))

    def wake_listeners(self) -> None:
        """Make every waiter look again (shutdown, records deleted)."""
        self._state_changed()

    def _state_changed(self) -> None:
        for listener in list(self._listeners):
            listener.on_state_change(self)
