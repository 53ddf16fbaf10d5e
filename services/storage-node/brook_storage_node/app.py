"""The storage node service: partition replicas on local disk, served over gRPC.

Start-up: read the first metadata snapshot, open every log in log.dirs with the topics'
settings (recovering after a crash), take up the partitions the metadata gives this node, then
register brook.v1.StorageService. Further metadata updates are applied by a background task.

The metadata comes from the controllers unless static.topics lists topics (see
metadata_source.py). With the controllers, start-up also joins the cluster
(brook.membership): the data directories' meta.properties must name this node and the
controllers' cluster; the node registers, heartbeats, and is SERVING only once the controllers
have unfenced it and it has caught up with the metadata, all within
initial.broker.registration.timeout.ms. It leads partitions only while it holds its lease.
Having caught up, a node that rejoins its cluster deletes the logs the metadata no longer
gives it (topics deleted while it was down).

Shutdown (after the runtime has stopped the gRPC server): long polls and subscriptions are
woken the moment shutdown begins, so they answer instead of holding the grace period. At the
same moment a node in a cluster starts its controlled shutdown: it asks the controllers to
move its leaderships to other replicas and waits (up to half of shutdown.timeout.ms) until
they have, so clients find new leaders before this node is gone. Then the metadata task and
queued acks=0 appends are cancelled, and the log manager flushes and closes every log and
writes its checkpoints and clean-shutdown marker.

Replication: the node serves brook.v1.ReplicaService to its followers (replica_service.py),
runs one replica fetcher per leader node it follows (replica_fetcher.py), and, as leader,
keeps the ISR in line with its followers' progress through the controllers (isr.py). On
shutdown the fetchers stop before the logs close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from brook.config import Config
from brook.membership import AppliedMetadataOffset, ClusterMembership
from brook.metadata.delta import MetadataUpdate
from brook.producer_ids import ProducerIdManager, controller_blocks
from brook.rpc.backoff import RetryBackoff
from brook.security.quota_engine import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_SECONDS
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook.v1 import common_pb2, replica_pb2_grpc, storage_pb2_grpc
from brook_storage_node.client_quotas import StorageQuotas
from brook_storage_node.config import CONFIG_DEF
from brook_storage_node.isr import IsrManager
from brook_storage_node.limits import StorageLimits
from brook_storage_node.log import LogManager, node_log_manager_config
from brook_storage_node.metadata_source import (
    ControllerMetadataSource,
    MetadataSource,
    StaticMetadataSource,
)
from brook_storage_node.metadata_view import MetadataView
from brook_storage_node.replica_fetcher import FetcherSettings, ReplicaFetchers
from brook_storage_node.replica_manager import ReplicaManager, topic_log_configs
from brook_storage_node.replica_service import ReplicaServiceLimits, ReplicaServicer
from brook_storage_node.storage_service import StorageServicer
from brook_storage_node.topic_settings import TopicDefaults
from brook_storage_node.txn_verification import TransactionVerifier

__all__ = ["SPEC", "StorageNode"]

_log = logging.getLogger(__name__)


class StorageNode:
    def __init__(self, config: Config, source: MetadataSource | None = None) -> None:
        """``source`` replaces where metadata comes from (tests); without one, static.topics
        decides between the static source and joining the cluster through the controllers."""
        self._config = config
        self._membership: ClusterMembership | None = None
        if source is None:
            if config.get_list("static.topics"):
                source = StaticMetadataSource.from_config(config)
            else:
                self._membership = ClusterMembership(
                    config,
                    common_pb2.NODE_ROLE_STORAGE_NODE,
                    [Path(d) for d in config.get_list("log.dirs")],
                )
                source = ControllerMetadataSource(self._membership.watcher)
        self._source = source
        self.applied = (
            self._membership.applied if self._membership is not None else AppliedMetadataOffset()
        )
        self._log_manager: LogManager | None = None
        self._servicer: StorageServicer | None = None
        self._replicas: ReplicaManager | None = None
        self._fetchers: ReplicaFetchers | None = None
        self._isr: IsrManager | None = None
        self._follower: asyncio.Task[None] | None = None
        self._leaving: asyncio.Task[None] | None = None
        self._producer_ids: ProducerIdManager | None = None
        self._verifier: TransactionVerifier | None = None

    @property
    def replicas(self) -> ReplicaManager | None:
        return self._replicas

    @property
    def membership(self) -> ClusterMembership | None:
        return self._membership

    @property
    def isr(self) -> IsrManager | None:
        return self._isr

    @property
    def fetchers(self) -> ReplicaFetchers | None:
        return self._fetchers

    def broker_epoch(self) -> int:
        """This incarnation's broker epoch; -1 without controllers."""
        membership = self._membership
        return membership.lifecycle.broker_epoch if membership is not None else -1

    async def start(self, context: ServiceContext) -> None:
        config = self._config
        membership = self._membership
        loop = asyncio.get_running_loop()
        join_deadline = loop.time() + (
            membership.join_timeout_s
            if membership is not None
            else config.get_int("request.timeout.ms") / 1000
        )
        await make_directories(config.get_list("log.dirs"))
        rejoining = False
        if membership is not None:
            rejoining = await membership.lifecycle.load_cluster_id() is not None
        updates = self._source.updates()
        # A source must open with a snapshot; the bound keeps a silent one from hanging
        # start-up forever (the static source answers at once).
        try:
            first = await asyncio.wait_for(anext(updates), max(0.0, join_deadline - loop.time()))
        except StopAsyncIteration:
            raise RuntimeError("the metadata source ended before its first snapshot") from None
        except TimeoutError:
            raise RuntimeError("no metadata snapshot arrived in time") from None
        if not first.snapshot:
            raise RuntimeError("the metadata source did not start with a snapshot")
        view = MetadataView()
        view.feed(context.authorizer)
        view.apply(first)
        if membership is not None:
            membership.check_cluster(view.cluster_id)
        defaults = TopicDefaults.from_config(config)
        self._log_manager = await LogManager.open(
            node_log_manager_config(config),
            default_log_config=defaults.settings.log_config,
            topic_configs=topic_log_configs(view, defaults),
        )
        self._fetchers = ReplicaFetchers(
            FetcherSettings.from_config(config), view, self.broker_epoch
        )
        replicas = ReplicaManager(
            config.get_int("node.id"),
            self._log_manager,
            defaults,
            view,
            lease=membership.lease if membership is not None else None,
            fetchers=self._fetchers,
        )
        self._replicas = replicas
        self._isr = IsrManager(
            replicas,
            membership.client if membership is not None else None,
            self.broker_epoch,
            lag_time_max_ms=config.get_int("replica.lag.time.max.ms"),
        )
        await replicas.initialize()
        self.applied.advance(first.offset)
        self._log_manager.start()
        if membership is not None:
            self._producer_ids = ProducerIdManager(
                controller_blocks(membership, config.get_int("node.id")),
                RetryBackoff(
                    config.get_int("retry.backoff.ms"), config.get_int("retry.backoff.max.ms")
                ),
            )
        if config.get_bool("transaction.partition.verification.enable"):
            self._verifier = TransactionVerifier(
                view, client_id=f"storage-node-{config.get_int('node.id')}"
            )
        self._servicer = StorageServicer(
            replicas,
            StorageLimits.from_config(config),
            context.shutdown_requested,
            self._producer_ids,
            self._verifier,
            log_manager=self._log_manager,
            controller_addresses=tuple
            if membership is None
            else lambda: membership.client.addresses,
            quotas=StorageQuotas(
                lambda: view.image.client_quotas,
                context.identity,
                context.authorizer.super_users,
                config.get_int(QUOTA_WINDOW_NUM),
                config.get_int(QUOTA_WINDOW_SIZE_SECONDS),
            ),
        )
        storage_pb2_grpc.add_StorageServiceServicer_to_server(  # type: ignore[no-untyped-call]
            self._servicer, context.server
        )
        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(  # type: ignore[no-untyped-call]
            ReplicaServicer(
                replicas,
                ReplicaServiceLimits.from_config(config),
                context.shutdown_requested,
                self._isr.on_caught_up,
            ),
            context.server,
        )
        context.tasks.spawn(self._isr.run(), name="isr-lag-check")
        self._follower = context.tasks.spawn(self._follow(updates), name="metadata-follower")
        context.tasks.spawn(
            self._wake_waiters_on_shutdown(context.shutdown_requested), name="shutdown-waker"
        )
        if membership is not None:
            membership.lifecycle.set_listener(replicas)
            self._leaving = context.tasks.spawn(
                self._leave_on_shutdown(membership, context.shutdown_requested),
                name="controlled-shutdown",
            )
            await membership.join(context.tasks, max(0.0, join_deadline - loop.time()))
            if rejoining:
                await replicas.delete_stray_logs()
        _log.info(
            "storage node started",
            extra={
                "partitions_led": sum(p.is_leader for p in replicas.hosted()),
                "metadata_offset": view.offset,
                "cluster_id": view.cluster_id or None,
            },
        )

    async def _follow(self, updates: AsyncIterator[MetadataUpdate]) -> None:
        assert self._replicas is not None
        async for update in updates:
            await self._replicas.apply(update)
            self.applied.advance(update.offset)

    async def _wake_waiters_on_shutdown(self, shutdown: asyncio.Event) -> None:
        await shutdown.wait()
        if self._replicas is not None:
            self._replicas.wake_all()

    @staticmethod
    async def _leave_on_shutdown(membership: ClusterMembership, shutdown: asyncio.Event) -> None:
        await shutdown.wait()
        await membership.leave()

    async def stop(self) -> None:
        if self._leaving is not None:
            # Bounded by the membership's own timeout; the metadata task keeps applying the
            # leadership moves meanwhile.
            with contextlib.suppress(asyncio.CancelledError):
                await self._leaving
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        if self._fetchers is not None:
            await self._fetchers.close()
        if self._isr is not None:
            await self._isr.close()
        if self._replicas is not None:
            self._replicas.wake_all()
        if self._servicer is not None:
            await self._servicer.close()
        if self._verifier is not None:
            await self._verifier.close()
        if self._producer_ids is not None:
            await self._producer_ids.close()
        if self._log_manager is not None:
            await self._log_manager.close()
        if self._membership is not None:
            await self._membership.close()


SPEC = ServiceSpec(
    name="storage-node",
    config_def=CONFIG_DEF,
    health_names=("brook.v1.StorageService", "brook.v1.ReplicaService"),
    create=StorageNode,
)
