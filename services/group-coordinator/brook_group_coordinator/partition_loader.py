"""Keeping the partitions a coordinator serves equal to the ones assigned to it: the loads and
drops of one internal topic (__consumer_offsets for the group manager, __transaction_state for
the transaction coordinator).

``reconcile(wanted)`` (partition → coordinator epoch) drops every partition owned or loading
at another epoch, and starts a load task for every wanted one not owned or loading yet. A load
that fails (a storage node down, a leader moving) is tried again with back-off while the
partition is still wanted; one that finds a newer epoch has written (``OffsetsWriteError``
fenced) marks the partition fenced at that epoch: it is not loaded again until the controllers
assign it at another epoch. ``lost`` records the same for an append that found it fenced;
``drop_lost_partition`` is what a host does after such an append. ``claim_and_replay`` is how
a host's load begins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from brook.rpc.backoff import RetryBackoff, backoff_s
from brook_group_coordinator.fencing import OffsetsWriteError
from brook_group_coordinator.offsets_log import OffsetsLog, PartitionClaims
from brook_group_coordinator.ownership import OwnedPartition

__all__ = [
    "LostPartition",
    "PartitionHost",
    "PartitionLoader",
    "Spawn",
    "claim_and_replay",
    "drop_lost_partition",
]

_log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class PartitionHost(Protocol):
    """What serves the partitions: the group manager or the transaction coordinator."""

    @property
    def owned(self) -> Mapping[int, OwnedPartition]: ...

    async def load_partition(self, partition: int, coordinator_epoch: int) -> None: ...

    def unload_partition(self, partition: int) -> None: ...


async def claim_and_replay(
    owned_partitions: dict[int, OwnedPartition],
    partition: int,
    coordinator_epoch: int,
    log: OffsetsLog,
    claims: PartitionClaims | None,
    lock: asyncio.Lock,
) -> tuple[OwnedPartition, dict[bytes, tuple[int, bytes | None]]] | None:
    """The start of a host's ``load_partition``: registers the ownership in
    ``owned_partitions`` (LOADING), claims the partition (``claims`` None: not fenced) under
    ``lock`` (its appends' lock) and reads it from the start. Returns the ownership and the
    latest record of every key (its offset, and its value or None for a tombstone), or None
    when there is nothing to load: the partition is owned at this epoch or a newer one
    already, or the ownership ended meanwhile. Claiming before the replay: whatever an older
    owner appends after the fence is rejected, and whatever it appended before is replayed. On
    a failure the ownership is removed (not loading forever: the caller may start the load
    again) and the error raised."""
    current = owned_partitions.get(partition)
    if current is not None and current.coordinator_epoch >= coordinator_epoch:
        return None
    owned = OwnedPartition(partition, coordinator_epoch)
    owned_partitions[partition] = owned
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    try:
        if claims is not None:
            async with lock:
                if owned_partitions.get(partition) is not owned:
                    return None
                await claims.claim(partition, coordinator_epoch)
        async for record in log.read(partition, 0):
            latest[record.key] = (record.offset, record.value)
    except BaseException:
        if owned_partitions.get(partition) is owned:
            del owned_partitions[partition]
        raise
    if owned_partitions.get(partition) is not owned:
        return None  # lost (or re-assigned) while loading
    return owned, latest


# on_partition_lost(partition, coordinator_epoch, fenced), as the hosts take it.
LostPartition = Callable[[int, int, bool], None]


def drop_lost_partition(
    host: PartitionHost,
    topic: str,
    owned: OwnedPartition,
    error: OffsetsWriteError,
    on_lost: LostPartition | None,
) -> None:
    """After an append under the ownership ``owned`` failed in a way that costs the partition
    (``error``): unloads it, if it is still that ownership, and tells ``on_lost``."""
    if host.owned.get(owned.partition) is not owned:
        return
    _log.warning(
        f"dropping a {topic} partition after a failed append",
        extra={
            "partition": owned.partition,
            "coordinator_epoch": owned.coordinator_epoch,
            "fenced": error.fenced,
            "error": error.message,
        },
    )
    host.unload_partition(owned.partition)
    if on_lost is not None:
        on_lost(owned.partition, owned.coordinator_epoch, error.fenced)


class PartitionLoader:
    def __init__(
        self,
        host: PartitionHost,
        topic: str,
        spawn: Spawn,
        backoff: RetryBackoff,
        load_details: Callable[[int], Mapping[str, object]] = lambda partition: {},
    ) -> None:
        """``spawn(coroutine, name)`` runs a load task; ``load_details(partition)``: what the
        log line of a finished load adds."""
        self._host = host
        self._topic = topic
        self._spawn = spawn
        self._backoff = backoff
        self._load_details = load_details
        self._loads: dict[int, tuple[int, asyncio.Task[None]]] = {}
        # partition → the coordinator epoch at which a newer owner's write was seen.
        self._fenced: dict[int, int] = {}

    def reconcile(self, wanted: Mapping[int, int]) -> None:
        host = self._host
        for partition in set(host.owned) | set(self._loads):
            owned = host.owned.get(partition)
            load = self._loads.get(partition)
            epoch = owned.coordinator_epoch if owned is not None else load[0] if load else -1
            if wanted.get(partition) != epoch:
                self.drop(partition)
        for partition, epoch in list(self._fenced.items()):
            if wanted.get(partition) != epoch:
                del self._fenced[partition]
        for partition, epoch in wanted.items():
            if self._fenced.get(partition) == epoch:
                continue
            if partition not in host.owned and partition not in self._loads:
                task = self._spawn(self._load(partition, epoch), f"load-{self._topic}-{partition}")
                self._loads[partition] = (epoch, task)

    def lost(self, partition: int, coordinator_epoch: int, fenced: bool) -> None:
        """An append dropped the partition (the caller reconciles next)."""
        if fenced:
            self._fenced[partition] = coordinator_epoch

    def drop(self, partition: int) -> None:
        load = self._loads.pop(partition, None)
        if load is not None:
            load[1].cancel()
        self._host.unload_partition(partition)

    def drop_all(self) -> None:
        for partition in set(self._host.owned) | set(self._loads):
            self.drop(partition)

    def cancel_loads(self) -> None:
        for _, task in list(self._loads.values()):
            task.cancel()

    async def _load(self, partition: int, epoch: int) -> None:
        failures = 0
        started = asyncio.get_running_loop().time()
        try:
            while True:
                try:
                    await self._host.load_partition(partition, epoch)
                    break
                except Exception as error:
                    if isinstance(error, OffsetsWriteError) and error.fenced:
                        # A newer owner has written: this epoch would be refused anyway; the
                        # metadata assigning the partition elsewhere is on its way.
                        self._fenced[partition] = epoch
                        _log.warning(
                            f"not loading a {self._topic} partition: a newer coordinator "
                            "epoch has written to it",
                            extra={"partition": partition, "coordinator_epoch": epoch},
                        )
                        return
                    # Whatever failed (a storage node down, a leader moving, the local view),
                    # the partition stays assigned here: try again rather than stop serving it
                    # (or the whole process) for good.
                    failures += 1
                    wait_s = backoff_s(self._backoff, failures)
                    _log.warning(
                        f"loading a {self._topic} partition failed; trying again",
                        extra={
                            "partition": partition,
                            "error": str(error),
                            "wait_ms": round(wait_s * 1000),
                        },
                    )
                    await asyncio.sleep(wait_s)
        finally:
            current = self._loads.get(partition)
            if current is not None and current[0] == epoch:
                del self._loads[partition]
        _log.info(
            f"loaded a {self._topic} partition",
            extra={
                "partition": partition,
                "coordinator_epoch": epoch,
                **self._load_details(partition),
                "load_ms": round((asyncio.get_running_loop().time() - started) * 1000),
            },
        )
