"""The storage node service: partition replicas on local disk, served over gRPC.

Start-up: read the first metadata snapshot (from static.topics until the controller's
WatchMetadata replaces it, see metadata_source.py), open every log in log.dirs with the
topics' settings (recovering after a crash), take up leadership of the partitions the
metadata gives this node, then register brook.v1.StorageService. Only then does the runtime
report SERVING. Further metadata updates are applied by a background task.

Shutdown (after the runtime has stopped the gRPC server): long polls and subscriptions are
woken the moment shutdown begins, so they answer instead of holding the grace period; then
the metadata task and queued acks=0 appends are cancelled, and the log manager flushes and
closes every log and writes its checkpoints and clean-shutdown marker.

ReplicaService (follower fetches) arrives with issue #6 and answers UNIMPLEMENTED until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook.v1 import storage_pb2_grpc
from brook_storage_node.config import CONFIG_DEF
from brook_storage_node.limits import StorageLimits
from brook_storage_node.log import LogManager, node_log_manager_config
from brook_storage_node.metadata_source import MetadataSource, StaticMetadataSource
from brook_storage_node.metadata_view import MetadataUpdate, MetadataView
from brook_storage_node.replica_manager import ReplicaManager, topic_log_configs
from brook_storage_node.storage_service import StorageServicer
from brook_storage_node.topic_settings import TopicDefaults

__all__ = ["SPEC", "StorageNode"]

_log = logging.getLogger(__name__)


class StorageNode:
    def __init__(self, config: Config, source: MetadataSource | None = None) -> None:
        self._config = config
        self._source = source or StaticMetadataSource.from_config(config)
        self._log_manager: LogManager | None = None
        self._servicer: StorageServicer | None = None
        self._replicas: ReplicaManager | None = None
        self._follower: asyncio.Task[None] | None = None

    @property
    def replicas(self) -> ReplicaManager | None:
        return self._replicas

    async def start(self, context: ServiceContext) -> None:
        config = self._config
        await make_directories(config.get_list("log.dirs"))
        updates = self._source.updates()
        # A source must open with a snapshot; the bound keeps a silent one from hanging
        # start-up forever (the static source answers at once).
        try:
            first = await asyncio.wait_for(
                anext(updates), timeout=config.get_int("request.timeout.ms") / 1000
            )
        except StopAsyncIteration:
            raise RuntimeError("the metadata source ended before its first snapshot") from None
        if not first.snapshot:
            raise RuntimeError("the metadata source did not start with a snapshot")
        view = MetadataView()
        view.apply(first)
        defaults = TopicDefaults.from_config(config)
        self._log_manager = await LogManager.open(
            node_log_manager_config(config),
            default_log_config=defaults.settings.log_config,
            topic_configs=topic_log_configs(view, defaults),
        )
        replicas = ReplicaManager(config.get_int("node.id"), self._log_manager, defaults, view)
        self._replicas = replicas
        await replicas.initialize()
        self._log_manager.start()
        self._servicer = StorageServicer(
            replicas, StorageLimits.from_config(config), context.shutdown_requested
        )
        storage_pb2_grpc.add_StorageServiceServicer_to_server(  # type: ignore[no-untyped-call]
            self._servicer, context.server
        )
        self._follower = context.tasks.spawn(self._follow(updates), name="metadata-follower")
        context.tasks.spawn(
            self._wake_waiters_on_shutdown(context.shutdown_requested), name="shutdown-waker"
        )
        _log.info(
            "storage node started",
            extra={
                "partitions_led": sum(p.is_leader for p in replicas.hosted()),
                "metadata_offset": view.offset,
            },
        )

    async def _follow(self, updates: AsyncIterator[MetadataUpdate]) -> None:
        assert self._replicas is not None
        async for update in updates:
            await self._replicas.apply(update)

    async def _wake_waiters_on_shutdown(self, shutdown: asyncio.Event) -> None:
        await shutdown.wait()
        if self._replicas is not None:
            self._replicas.wake_all()

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        if self._replicas is not None:
            self._replicas.wake_all()
        if self._servicer is not None:
            await self._servicer.close()
        if self._log_manager is not None:
            await self._log_manager.close()


SPEC = ServiceSpec(
    name="storage-node",
    config_def=CONFIG_DEF,
    health_names=("brook.v1.StorageService", "brook.v1.ReplicaService"),
    create=StorageNode,
)
