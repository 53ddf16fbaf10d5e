"""The part of the cluster metadata a coordinator acts on, applied from WatchMetadata: the
storage nodes (where __consumer_offsets is written and read), the leaders of the
__consumer_offsets partitions, and the coordinators with their assignments (handed on to
``CoordinatorDirectory``, which answers FindCoordinator and NOT_COORDINATOR hints).

A ``MetadataCache`` (brook/metadata/cache.py) over the shared image; each update's delta says
which coordinator nodes and assignments to hand on, and a snapshot resets the directory and
hands on everything. ``wait_for_change`` lets a writer that was told NOT_LEADER_OR_FOLLOWER
wait for the next update instead of polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from brook.metadata.cache import MetadataCache
from brook.metadata.delta import MetadataDelta, MetadataUpdate
from brook.metadata.info import PartitionInfo
from brook.v1 import common_pb2, controller_pb2, metadata_pb2
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.ownership import OFFSETS_TOPIC

__all__ = ["ClusterMetadata"]


class ClusterMetadata(MetadataCache):
    def __init__(self, directory: CoordinatorDirectory) -> None:
        super().__init__()
        self.directory = directory
        self._changed = asyncio.Event()

    @property
    def partition_count(self) -> int:
        """Partitions of __consumer_offsets (0 until the controllers have created it)."""
        return self.partition_count_of(OFFSETS_TOPIC)

    def apply(self, message: controller_pb2.WatchMetadataResponse) -> None:
        # A snapshot resets the directory and hands on everything: no comparison needed.
        delta = self.replay(
            MetadataUpdate(message.snapshot, message.offset, tuple(message.records)),
            compare=False,
        )
        self._feed_directory(delta)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _feed_directory(self, delta: MetadataDelta) -> None:
        brokers: Iterable[int] = delta.changed_brokers
        coordinators: Mapping[int, metadata_pb2.CoordinatorRecord] = delta.changed_coordinators
        if delta.snapshot:
            self.directory.reset()
            brokers, coordinators = self.brokers, self.image.coordinators
        for node_id in delta.removed_brokers:
            self.directory.remove_endpoints(node_id)
        for node_id in brokers:
            broker = self.brokers[node_id]
            if broker.role == common_pb2.NODE_ROLE_GROUP_COORDINATOR:
                self.directory.set_endpoints(node_id, broker.endpoints)
        for index, coordinator in coordinators.items():
            self.directory.assign(index, coordinator.coordinator_id, coordinator.coordinator_epoch)

    def partition_count_of(self, topic: str) -> int:
        """Partitions of ``topic`` (0 while it does not exist)."""
        info = self.topic(topic)
        return 0 if info is None else len(info.partitions)

    def leader(
        self, partition: int, topic: str = OFFSETS_TOPIC
    ) -> tuple[PartitionInfo, str] | None:
        """``topic``-``partition`` (its leader and leader epoch) and the leader's address, if
        it has a leader."""
        info = self.partition(topic, partition)
        if info is None or info.leader < 0:
            return None
        address = self.address_of(info.leader)
        return None if address is None else (info, address)

    def address_of(self, node_id: int) -> str | None:
        broker = self.broker(node_id)
        return None if broker is None else broker.address()

    async def wait_for_change(self, timeout_s: float) -> bool:
        """Whether an update was applied within ``timeout_s``."""
        if timeout_s <= 0:
            return False
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
