"""The part of the cluster metadata a coordinator acts on, applied from WatchMetadata: the
storage nodes (where __consumer_offsets is written and read), the leaders of the
__consumer_offsets partitions, and the coordinators with their assignments (handed on to
``CoordinatorDirectory``, which answers FindCoordinator and NOT_COORDINATOR hints).

Every record is an upsert of a whole object, so applying one twice changes nothing; a snapshot
replaces everything. ``wait_for_change`` lets a writer that was told NOT_LEADER_OR_FOLLOWER wait
for the next update instead of polling.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from brook.rpc.addresses import listener_address
from brook.v1 import common_pb2, controller_pb2, metadata_pb2
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.ownership import OFFSETS_TOPIC

__all__ = ["ClusterMetadata", "PartitionLeader"]


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    node_id: int  # -1: offline
    leader_epoch: int


class ClusterMetadata:
    def __init__(self, directory: CoordinatorDirectory) -> None:
        self.directory = directory
        self.offset = -1
        self.cluster_id = ""
        self._brokers: dict[int, metadata_pb2.BrokerRecord] = {}
        self._offsets_topic_id: bytes | None = None
        self._leaders: dict[int, PartitionLeader] = {}
        self._changed = asyncio.Event()

    @property
    def partition_count(self) -> int:
        """Partitions of __consumer_offsets (0 until the controllers have created it)."""
        return len(self._leaders)

    def apply(self, message: controller_pb2.WatchMetadataResponse) -> None:
        if message.snapshot:
            self._brokers.clear()
            self._offsets_topic_id = None
            self._leaders.clear()
            self.directory.reset()
        for record in message.records:
            self._apply_record(record)
        self.offset = message.offset
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _apply_record(self, record: metadata_pb2.MetadataRecord) -> None:
        kind = record.WhichOneof("record")
        if kind == "cluster":
            self.cluster_id = record.cluster.cluster_id
        elif kind == "broker":
            broker = record.broker
            self._brokers[broker.node_id] = broker
            if broker.role == common_pb2.NODE_ROLE_GROUP_COORDINATOR:
                self.directory.set_endpoints(broker.node_id, tuple(broker.endpoints))
        elif kind == "remove_broker":
            self._brokers.pop(record.remove_broker.node_id, None)
        elif kind == "topic":
            if record.topic.name == OFFSETS_TOPIC:
                self._offsets_topic_id = record.topic.topic_id
        elif kind == "remove_topic":
            if record.remove_topic.topic_id == self._offsets_topic_id:
                self._offsets_topic_id = None
                self._leaders.clear()
        elif kind == "partition":
            partition = record.partition
            if partition.topic == OFFSETS_TOPIC:
                self._leaders[partition.partition] = PartitionLeader(
                    partition.leader, partition.leader_epoch
                )
        elif kind == "coordinator":
            coordinator = record.coordinator
            self.directory.assign(
                coordinator.offsets_partition,
                coordinator.coordinator_id,
                coordinator.coordinator_epoch,
            )

    def leader(self, partition: int) -> tuple[PartitionLeader, str] | None:
        """The leader of __consumer_offsets-``partition`` and its address, if it has one."""
        leader = self._leaders.get(partition)
        if leader is None or leader.node_id < 0:
            return None
        broker = self._brokers.get(leader.node_id)
        if broker is None:
            return None
        address = listener_address(broker.endpoints)
        return None if address is None else (leader, address)

    def address_of(self, node_id: int) -> str | None:
        broker = self._brokers.get(node_id)
        return None if broker is None else listener_address(broker.endpoints)

    async def wait_for_change(self, timeout_s: float) -> bool:
        """Whether an update was applied within ``timeout_s``."""
        if timeout_s <= 0:
            return False
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
