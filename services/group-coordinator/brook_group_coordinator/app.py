"""The group coordinator service: consumer groups and committed offsets.

Start-up: join the cluster through the controllers (brook.membership, role GROUP_COORDINATOR,
meta.properties in group.coordinator.state.dir), read the first metadata snapshot, open the
local view of __consumer_offsets, register brook.v1.GroupCoordinatorService, and report
SERVING once the controllers have unfenced this node, all within
initial.broker.registration.timeout.ms.

Ownership follows the metadata: the controllers assign __consumer_offsets partitions to live
coordinators (CoordinatorRecord). After every metadata update, and whenever the lease changes,
the partitions assigned here are loaded (replayed; COORDINATOR_LOAD_IN_PROGRESS meanwhile) and
the ones assigned elsewhere are dropped. A coordinator that loses its lease drops every
partition at once: the controllers are about to give them to another coordinator, and two
coordinators must not serve one group. A load that fails (a storage node down, a leader
moving) is tried again with back-off while the partition is still assigned here.

Loading a partition first claims it (fencing.py): later appends of an older owner are rejected
by the storage nodes. An append that finds this coordinator fenced drops the partition until
the controllers assign it here at a newer epoch; one that leaves its outcome unknown drops it
and loads it again at once if it is still assigned here.

Offsets retention runs every offsets.retention.check.interval.ms.

Shutdown: the moment it begins, every partition is dropped (members waiting in JoinGroup or
SyncGroup are answered NOT_COORDINATOR and go looking for the new owner) and the controlled
shutdown asks the controllers to hand the partitions to other coordinators; then queued group
metadata writes finish (each bounded by offsets.commit.timeout.ms) and everything is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from brook.config import Config
from brook.membership import ClusterMembership
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook.v1 import common_pb2, controller_pb2, group_pb2_grpc
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.config import CONFIG_DEF
from brook_group_coordinator.coordinator_service import GroupCoordinatorServicer
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.fencing import OffsetsWriteError
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import GroupManager
from brook_group_coordinator.local_view import LocalViewOffsetsLog
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.storage_offsets_log import OffsetsLogSettings, StorageOffsetsLog
from brook_group_coordinator.timers import LoopTimers

__all__ = ["SPEC", "GroupCoordinator"]

_log = logging.getLogger(__name__)
MS_PER_MINUTE: Final = 60_000


class GroupCoordinator:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._node_id = config.get_int("node.id")
        self._state_dir = Path(config.get_string("group.coordinator.state.dir"))
        self._membership = ClusterMembership(
            config, common_pb2.NODE_ROLE_GROUP_COORDINATOR, [self._state_dir]
        )
        self._backoff = RetryBackoff(
            config.get_int("retry.backoff.ms"), config.get_int("retry.backoff.max.ms")
        )
        self.directory = CoordinatorDirectory()
        self.metadata = ClusterMetadata(self.directory)
        self._storage_log: StorageOffsetsLog | None = None
        self._log: LocalViewOffsetsLog | None = None
        self._manager: GroupManager | None = None
        self._context: ServiceContext | None = None
        self._loads: dict[int, tuple[int, asyncio.Task[None]]] = {}
        # partition → the coordinator epoch at which a newer owner's write was seen.
        self._fenced: dict[int, int] = {}
        self._follower: asyncio.Task[None] | None = None
        self._leaving: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def manager(self) -> GroupManager | None:
        return self._manager

    async def start(self, context: ServiceContext) -> None:
        config = self._config
        membership = self._membership
        loop = asyncio.get_running_loop()
        join_deadline = loop.time() + membership.join_timeout_s
        await make_directories((str(self._state_dir),))
        await membership.lifecycle.load_cluster_id()
        updates = membership.watcher.updates()
        try:
            first = await asyncio.wait_for(anext(updates), max(0.0, join_deadline - loop.time()))
        except TimeoutError:
            raise RuntimeError(
                "no metadata snapshot arrived from the controllers in time"
            ) from None
        self.metadata.apply(first)
        membership.check_cluster(self.metadata.cluster_id)
        self._storage_log = StorageOffsetsLog(self.metadata, OffsetsLogSettings.from_config(config))
        self._log = await LocalViewOffsetsLog.open(self._storage_log, self._state_dir)
        self._manager = GroupManager(
            limits=GroupLimits(
                session_timeout_ms_min=config.get_int("group.min.session.timeout.ms"),
                session_timeout_ms_max=config.get_int("group.max.session.timeout.ms"),
                initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
                members_max=config.get_int("group.max.size"),
            ),
            offset_limits=OffsetLimits(
                metadata_bytes_max=config.get_int("offset.metadata.max.bytes"),
                retention_ms=config.get_int("offsets.retention.minutes") * MS_PER_MINUTE,
            ),
            timers=LoopTimers(loop),
            log=self._log,
            partition_count=self.metadata.partition_count,
            claims=self._log,
            on_partition_lost=self._partition_lost,
        )
        self._context = context
        membership.applied.advance(first.offset)
        group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
            GroupCoordinatorServicer(self._manager, self.directory), context.server
        )
        self._follower = context.tasks.spawn(self._follow(updates), name="metadata-follower")
        context.tasks.spawn(self._expire_offsets(), name="offsets-retention")
        self._leaving = context.tasks.spawn(
            self._leave_on_shutdown(context.shutdown_requested), name="controlled-shutdown"
        )
        membership.lifecycle.set_listener(self)
        await membership.join(context.tasks, max(0.0, join_deadline - loop.time()))
        self.reconcile()
        _log.info(
            "group coordinator started",
            extra={
                "offsets_partitions": self.metadata.partition_count,
                "assigned": sorted(self.directory.partitions_of(self._node_id)),
                "metadata_offset": self.metadata.offset,
            },
        )

    # -- ownership ----------------------------------------------------------------------------

    def on_lease_acquired(self) -> None:
        self.reconcile()

    def on_lease_lost(self, reason: str) -> None:
        self.reconcile()

    def reconcile(self) -> None:
        """Loads the partitions assigned here and drops the others (on the event loop)."""
        manager = self._manager
        if manager is None:
            return
        count = self.metadata.partition_count
        if count != manager.partition_count:
            # A group's partition is a function of the count: every ownership is void.
            for partition in list(manager.owned):
                self._drop(partition)
            manager.partition_count = count
        wanted: dict[int, int] = {}
        if self._membership.lease.active and not self._stopping:
            wanted = self.directory.partitions_of(self._node_id)
        for partition in set(manager.owned) | set(self._loads):
            owned = manager.owned.get(partition)
            load = self._loads.get(partition)
            epoch = owned.coordinator_epoch if owned is not None else load[0] if load else -1
            if wanted.get(partition) != epoch:
                self._drop(partition)
        for partition, epoch in list(self._fenced.items()):
            if wanted.get(partition) != epoch:
                del self._fenced[partition]
        for partition, epoch in wanted.items():
            if self._fenced.get(partition) == epoch:
                continue
            if partition not in manager.owned and partition not in self._loads:
                assert self._context is not None
                task = self._context.tasks.spawn(
                    self._load(partition, epoch), name=f"load-offsets-{partition}"
                )
                self._loads[partition] = (epoch, task)

    def _partition_lost(self, partition: int, coordinator_epoch: int, fenced: bool) -> None:
        if fenced:
            self._fenced[partition] = coordinator_epoch
        self.reconcile()

    def _drop(self, partition: int) -> None:
        assert self._manager is not None
        load = self._loads.pop(partition, None)
        if load is not None:
            load[1].cancel()
        self._manager.unload_partition(partition)

    async def _load(self, partition: int, epoch: int) -> None:
        assert self._manager is not None and self._log is not None
        failures = 0
        started = asyncio.get_running_loop().time()
        try:
            while True:
                try:
                    await self._manager.load_partition(partition, epoch)
                    break
                except Exception as error:
                    if isinstance(error, OffsetsWriteError) and error.fenced:
                        # A newer owner has written: this epoch would be refused anyway; the
                        # metadata assigning the partition elsewhere is on its way.
                        self._fenced[partition] = epoch
                        _log.warning(
                            "not loading a __consumer_offsets partition: a newer coordinator "
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
                        "loading a __consumer_offsets partition failed; trying again",
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
            "loaded a __consumer_offsets partition",
            extra={
                "partition": partition,
                "coordinator_epoch": epoch,
                "replayed_from_offset": self._log.replayed_from.get(partition),
                "load_ms": round((asyncio.get_running_loop().time() - started) * 1000),
            },
        )

    # -- background tasks ---------------------------------------------------------------------

    async def _follow(self, updates: AsyncIterator[controller_pb2.WatchMetadataResponse]) -> None:
        async for update in updates:
            self._apply(update)

    def _apply(self, update: controller_pb2.WatchMetadataResponse) -> None:
        self.metadata.apply(update)
        self._membership.applied.advance(update.offset)
        self.reconcile()

    async def _expire_offsets(self) -> None:
        assert self._manager is not None
        interval_s = self._config.get_int("offsets.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval_s)
            removed = await self._manager.expire_offsets()
            if removed:
                _log.info("expired committed offsets", extra={"removed": removed})

    async def _leave_on_shutdown(self, shutdown: asyncio.Event) -> None:
        await shutdown.wait()
        self._stopping = True
        self.reconcile()
        await self._membership.leave()

    async def stop(self) -> None:
        self._stopping = True
        if self._leaving is not None:
            # Bounded by the membership's own timeout.
            with contextlib.suppress(asyncio.CancelledError):
                await self._leaving
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        for _, task in list(self._loads.values()):
            task.cancel()
        if self._manager is not None:
            await self._manager.close()
        if self._log is not None:
            await self._log.close()
        if self._storage_log is not None:
            await self._storage_log.close()
        await self._membership.close()


SPEC = ServiceSpec(
    name="group-coordinator",
    config_def=CONFIG_DEF,
    health_names=("brook.v1.GroupCoordinatorService",),
    create=GroupCoordinator,
)
