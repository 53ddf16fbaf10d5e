"""Long-poll waits: a fetch (or subscription) parked until data arrives (Kafka's DelayedFetch).

A ``DataWaiter`` registers with the partitions it reads as a ``PartitionListener``. Each
append that moves a high watermark tells it how many bytes became visible; it counts them
(each partition at most up to that partition's byte limit, as a read would) and wakes its
owner once the fetch's ``min_bytes`` are there. A change of leadership, a deletion or
shutdown wakes it at once, so the owner re-reads and reports what changed. The wake-up is a
future resolved on the event loop in the append's own call: nothing sleeps and polls.

A follower's replica fetch reads past the HW, so its waiter (``replica=True``) counts bytes
appended rather than bytes committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType

from brook_storage_node.partition import Partition

__all__ = ["DataWaiter"]


class DataWaiter:
    """Use as a context manager (it unregisters on exit, cancellation included)."""

    def __init__(
        self,
        partitions: Iterable[tuple[Partition, int | None]],
        needed_bytes: int,
        *,
        replica: bool = False,
    ) -> None:
        """``partitions``: each with the most bytes a read of it would return (None: no
        limit of its own); ``needed_bytes``: how many newly visible bytes wake the waiter;
        ``replica``: count appended bytes instead of committed ones."""
        self._replica = replica
        self._limits: dict[Partition, int | None] = dict(partitions)
        self._counted: dict[Partition, int] = {}
        self._needed_bytes = needed_bytes
        self._accumulated_bytes = 0
        self._woken = False
        self._future: asyncio.Future[None] | None = None

    def __enter__(self) -> DataWaiter:
        for partition in self._limits:
            self._add(partition)
        return self

    def _add(self, partition: Partition) -> None:
        if self._replica:
            partition.add_replica_listener(self)
        else:
            partition.add_listener(self)

    def _remove(self, partition: Partition) -> None:
        if self._replica:
            partition.remove_replica_listener(self)
        else:
            partition.remove_listener(self)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for partition in self._limits:
            self._remove(partition)

    def rearm(self, needed_bytes: int) -> None:
        """Start counting afresh (a subscription after it has read what woke it)."""
        self._needed_bytes = needed_bytes
        self._accumulated_bytes = 0
        self._counted.clear()
        self._woken = False

    def watch(self, partition: Partition, limit_bytes: int | None) -> None:
        """Also listen to ``partition`` (a subscription's partition re-created meanwhile)."""
        if partition not in self._limits:
            self._limits[partition] = limit_bytes
            self._add(partition)

    def forget(self, partition: Partition) -> None:
        """Stop listening to one partition (a subscription dropped it)."""
        self._limits.pop(partition, None)
        self._counted.pop(partition, None)
        self._remove(partition)

    @property
    def woken(self) -> bool:
        return self._woken

    # -- PartitionListener ------------------------------------------------------------------

    def on_committed(self, partition: Partition, size_bytes: int) -> None:
        if self._woken:
            return
        limit = self._limits.get(partition)
        if limit is not None:
            already = self._counted.get(partition, 0)
            size_bytes = min(size_bytes, limit - already)
            if size_bytes <= 0:
                return
            self._counted[partition] = already + size_bytes
        self._accumulated_bytes += size_bytes
        if self._accumulated_bytes >= self._needed_bytes:
            self._wake()

    def on_state_change(self, partition: Partition) -> None:
        self._wake()

    def _wake(self) -> None:
        self._woken = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    # -- waiting ----------------------------------------------------------------------------

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait until woken (True) or ``timeout_s`` passes (False; None waits unbounded)."""
        if self._woken:
            return True
        future = asyncio.get_running_loop().create_future()
        self._future = future
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            return False
        finally:
            self._future = None
        return True
