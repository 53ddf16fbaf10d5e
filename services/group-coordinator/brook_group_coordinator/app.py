"""The group coordinator service: consumer groups and committed offsets, and the transaction
coordinator (``transactions/``, brook.v1.TransactionCoordinatorService) beside them.

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

The __transaction_state partitions follow the __consumer_offsets ones: partition p is loaded
here (claimed, replayed, its decided transactions resumed) while __consumer_offsets partition
``p % offsets partitions`` is assigned here, at that coordinator epoch, and dropped with it
(``partition_loader.py`` does both topics' loads and drops).

Offsets retention runs every offsets.retention.check.interval.ms; timed-out transactions are
aborted every transaction.abort.timed.out.transaction.cleanup.interval.ms, and expired
transactional ids removed every transaction.remove.expired.transaction.cleanup.interval.ms.

Shutdown: the moment it begins, every partition is dropped (members waiting in JoinGroup or
SyncGroup are answered NOT_COORDINATOR and go looking for the new owner) and the controlled
shutdown asks the controllers to hand the partitions to other coordinators; then queued group
metadata writes finish (each bounded by offsets.commit.timeout.ms) and everything is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, Final

from brook.config import Config
from brook.membership import ClusterMembership
from brook.producer_ids import ProducerIdManager, controller_blocks
from brook.rpc.backoff import RetryBackoff
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook.v1 import common_pb2, controller_pb2, group_pb2_grpc, transaction_pb2_grpc
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.config import CONFIG_DEF
from brook_group_coordinator.coordinator_service import GroupCoordinatorServicer
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.fencing import TRANSACTION_STATE_LOG
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_lag import GroupLag
from brook_group_coordinator.group_manager import GroupManager
from brook_group_coordinator.local_view import LocalViewOffsetsLog
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.ownership import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    offsets_partition_owning,
)
from brook_group_coordinator.partition_loader import PartitionLoader
from brook_group_coordinator.storage_offsets_log import OffsetsLogSettings, StorageOffsetsLog
from brook_group_coordinator.timers import LoopTimers
from brook_group_coordinator.transactions.coordinator import (
    TransactionCoordinator,
    TransactionSettings,
)
from brook_group_coordinator.transactions.markers import GrpcMarkerWriter, MarkerSettings
from brook_group_coordinator.transactions.service import TransactionCoordinatorServicer

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
        self._group_loader: PartitionLoader | None = None
        self._txn_storage_log: StorageOffsetsLog | None = None
        self._producer_ids: ProducerIdManager | None = None
        self._markers: GrpcMarkerWriter | None = None
        self._transactions: TransactionCoordinator | None = None
        self._txn_loader: PartitionLoader | None = None
        # (__transaction_state partitions, __consumer_offsets partitions) the txn loader uses.
        self._txn_layout = (0, 0)
        self._follower: asyncio.Task[None] | None = None
        self._leaving: asyncio.Task[None] | None = None
        self._stopping = False
        self._lag: GroupLag | None = None
        self._lag_refresher: asyncio.Task[None] | None = None

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
        self.metadata.feed(context.authorizer)
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
        log = self._log
        self._group_loader = PartitionLoader(
            self._manager,
            OFFSETS_TOPIC,
            self._spawn,
            self._backoff,
            lambda partition: {"replayed_from_offset": log.replayed_from.get(partition)},
        )
        transactions = self._start_transactions(config, loop)
        membership.applied.advance(first.offset)
        group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
            GroupCoordinatorServicer(self._manager, self.directory, transactions),
            context.server,
        )
        transaction_pb2_grpc.add_TransactionCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
            TransactionCoordinatorServicer(transactions, self.directory, self.metadata),
            context.server,
        )
        self._follower = context.tasks.spawn(self._follow(updates), name="metadata-follower")
        context.tasks.spawn(self._expire_offsets(), name="offsets-retention")
        self._lag = GroupLag(
            self._manager.committed_offsets,
            self.metadata,
            config.get_int("offsets.commit.timeout.ms") / 1000,
        )
        self._lag_refresher = context.tasks.spawn(self._lag.run(), name="group-lag")
        context.tasks.spawn(self._abort_timed_out(transactions), name="transaction-timeouts")
        context.tasks.spawn(
            self._expire_transactional_ids(transactions), name="transactional-id-expiry"
        )
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

    def _start_transactions(
        self, config: Config, loop: asyncio.AbstractEventLoop
    ) -> TransactionCoordinator:
        """The transaction coordinator, its __transaction_state log, producer ids and
        markers (serving nothing until the reconciliation loads its partitions)."""
        settings = OffsetsLogSettings.from_config(config)
        self._txn_storage_log = StorageOffsetsLog(self.metadata, settings, TRANSACTION_STATE_LOG)
        self._producer_ids = ProducerIdManager(
            controller_blocks(self._membership, self._node_id), self._backoff
        )
        self._markers = GrpcMarkerWriter(
            self.metadata,
            self.directory,
            MarkerSettings(config.get_int("request.timeout.ms"), self._backoff),
        )
        self._transactions = TransactionCoordinator(
            settings=TransactionSettings(
                max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
                id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
                producer_id_wait_ms=config.get_int("request.timeout.ms"),
                retry_backoff=self._backoff,
            ),
            timers=LoopTimers(loop),
            log=self._txn_storage_log,
            claims=self._txn_storage_log,
            producer_ids=self._producer_ids,
            markers=self._markers,
            partition_count=0,
            on_partition_lost=self._txn_partition_lost,
        )
        self._txn_loader = PartitionLoader(
            self._transactions, TRANSACTION_STATE_TOPIC, self._spawn, self._backoff
        )
        return self._transactions

    # -- ownership ----------------------------------------------------------------------------

    def on_lease_acquired(self) -> None:
        self.reconcile()

    def on_lease_lost(self, reason: str) -> None:
        self.reconcile()

    def reconcile(self) -> None:
        """Loads the partitions assigned here and drops the others (on the event loop): the
        __consumer_offsets partitions the metadata assigns to this node, and the
        __transaction_state partitions that go with them (``offsets_partition_owning``)."""
        manager, transactions = self._manager, self._transactions
        group_loader, txn_loader = self._group_loader, self._txn_loader
        if manager is None or transactions is None or group_loader is None or txn_loader is None:
            return
        count = self.metadata.partition_count
        txn_count = self.metadata.partition_count_of(TRANSACTION_STATE_TOPIC)
        if count != manager.partition_count:
            # A group's partition is a function of the count: every ownership is void.
            group_loader.drop_all()
            manager.partition_count = count
        if (txn_count, count) != self._txn_layout:
            # A transactional id's partition, and its owner, are functions of both counts.
            txn_loader.drop_all()
            transactions.partition_count = txn_count
            self._txn_layout = (txn_count, count)
        wanted: dict[int, int] = {}
        if self._membership.lease.active and not self._stopping:
            wanted = self.directory.partitions_of(self._node_id)
        group_loader.reconcile(wanted)
        txn_wanted: dict[int, int] = {}
        if count > 0:
            for partition in range(txn_count):
                epoch = wanted.get(offsets_partition_owning(partition, count))
                if epoch is not None:
                    txn_wanted[partition] = epoch
        txn_loader.reconcile(txn_wanted)

    def _partition_lost(self, partition: int, coordinator_epoch: int, fenced: bool) -> None:
        assert self._group_loader is not None
        self._group_loader.lost(partition, coordinator_epoch, fenced)
        self.reconcile()

    def _txn_partition_lost(self, partition: int, coordinator_epoch: int, fenced: bool) -> None:
        assert self._txn_loader is not None
        self._txn_loader.lost(partition, coordinator_epoch, fenced)
        self.reconcile()

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        assert self._context is not None
        return self._context.tasks.spawn(coroutine, name=name)

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

    async def _abort_timed_out(self, transactions: TransactionCoordinator) -> None:
        interval_ms = self._config.get_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        )
        while True:
            await asyncio.sleep(interval_ms / 1000)
            transactions.abort_timed_out()

    async def _expire_transactional_ids(self, transactions: TransactionCoordinator) -> None:
        interval_ms = self._config.get_int(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        )
        while True:
            await asyncio.sleep(interval_ms / 1000)
            removed = await transactions.expire_ids()
            if removed:
                _log.info("expired transactional ids", extra={"removed": removed})

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
        for task in (self._follower, self._lag_refresher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for loader in (self._group_loader, self._txn_loader):
            if loader is not None:
                loader.cancel_loads()
        if self._transactions is not None:
            await self._transactions.close()
        if self._manager is not None:
            await self._manager.close()
        if self._log is not None:
            await self._log.close()
        for closing in (
            self._lag,
            self._storage_log,
            self._txn_storage_log,
            self._producer_ids,
            self._markers,
        ):
            if closing is not None:
                await closing.close()
        await self._membership.close()


GRPC_SERVICES: Final = (
    "brook.v1.GroupCoordinatorService",
    "brook.v1.TransactionCoordinatorService",
)

SPEC = ServiceSpec(
    name="group-coordinator",
    config_def=CONFIG_DEF,
    health_names=GRPC_SERVICES,
    traced_services=GRPC_SERVICES,
    create=GroupCoordinator,
)
