"""``ClusterMembership``: everything a non-controller process needs to be part of the cluster,
built from its configuration and driven through three calls: ``join`` at start-up, ``leave``
when asked to stop, ``close`` last.

The parts (each in its own module): the controller client, the metadata watcher and the
offset the process has applied, the lifecycle (registration, heartbeats, controlled shutdown)
and the lease it keeps, and the data directories' meta.properties.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from brook.config import Config, Listener
from brook.membership.controller_client import ControllerClient, ControllerClientSettings
from brook.membership.lease import BrokerLease
from brook.membership.lifecycle import BrokerLifecycleManager, LifecycleSettings, MembershipError
from brook.membership.meta_properties import MetaPropertiesStore
from brook.membership.metadata_watcher import AppliedMetadataOffset, MetadataWatcher
from brook.server import TaskOwner
from brook.v1 import common_pb2

__all__ = ["CONTROLLED_SHUTDOWN_SHARE", "ClusterMembership"]

# Controlled shutdown may use this share of shutdown.timeout.ms; the rest is for the
# process's own stop (closing logs, flushing telemetry).
CONTROLLED_SHUTDOWN_SHARE: Final = 0.5


class ClusterMembership:
    def __init__(
        self,
        config: Config,
        role: common_pb2.NodeRole,
        data_directories: Sequence[Path] = (),
        extra_endpoints: Sequence[Listener] = (),
    ) -> None:
        """``extra_endpoints`` are registered after the advertised listeners: endpoints other
        processes read from the metadata that the process does not bind as a listener of its
        own (a gateway's PLAINTEXT_NODES)."""
        node_id = config.get_int("node.id")
        self.client = ControllerClient(ControllerClientSettings.from_config(config))
        self.applied = AppliedMetadataOffset()
        self.lease = BrokerLease()
        self.watcher = MetadataWatcher(self.client, node_id)
        meta = MetaPropertiesStore(data_directories, node_id) if data_directories else None
        self.lifecycle = BrokerLifecycleManager(
            self.client,
            LifecycleSettings.from_config(config, role, extra_endpoints),
            applied=self.applied,
            lease=self.lease,
            meta=meta,
        )
        self.join_timeout_s = config.get_int("initial.broker.registration.timeout.ms") / 1000
        self.leave_timeout_s = (
            config.get_int("shutdown.timeout.ms") / 1000 * CONTROLLED_SHUTDOWN_SHARE
        )

    def check_cluster(self, cluster_id: str) -> None:
        """MembershipError if the controllers' image names another cluster than the one the
        data directories belong to (checked before the node touches its data)."""
        stored = self.lifecycle.cluster_id
        if stored is not None and cluster_id and cluster_id != stored:
            raise MembershipError(
                f"INCONSISTENT_CLUSTER_ID: this node's data directories belong to cluster "
                f"{stored}, but the controllers at {','.join(self.client.addresses)} run "
                f"cluster {cluster_id}. Point controller.quorum.bootstrap.servers at cluster "
                f"{stored}'s controllers, or give this node empty data directories to join "
                f"cluster {cluster_id}."
            )

    async def join(self, tasks: TaskOwner, timeout_s: float) -> None:
        """Register, start heartbeating (a task of ``tasks``) and return once the controllers
        have unfenced this node and it has caught up; MembershipError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self.lifecycle.register(timeout_s)
        tasks.spawn(self.lifecycle.run(), name="membership.heartbeats")
        await self.lifecycle.wait_until_active(max(0.0, deadline - loop.time()))

    async def leave(self) -> bool:
        """Controlled shutdown, bounded by part of shutdown.timeout.ms; True if the
        controllers moved every leadership away in time."""
        return await self.lifecycle.controlled_shutdown(self.leave_timeout_s)

    async def close(self) -> None:
        await self.client.close()
