"""The gateway's metadata cache and the cluster it shows to Kafka clients.

``ClusterImage`` applies the controllers' WatchMetadata records (a snapshot replaces the image,
a delta is applied on top; every record is a whole-object upsert). It keeps only what the
gateway needs: nodes with their role and endpoints, topics with their partitions, the
cluster id.

The Kafka view: the registered, unfenced gateways are the brokers (each at its PLAINTEXT
listener). A partition's leadership is mapped onto a gateway by a stable function of the
leader storage node's id over the gateway ids in order, so every gateway gives every client
the same answer and a storage node's partitions stay together. Whichever gateway receives a
request forwards it to the real leader storage node, so a client that routes by a stale view
still succeeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from brook.v1 import common_pb2, metadata_pb2

__all__ = ["NO_NODE", "ClusterImage", "KafkaBroker", "NodeInfo", "PartitionState", "TopicState"]

NO_NODE: Final = -1
GRPC_LISTENER: Final = "GRPC"
KAFKA_LISTENER: Final = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    role: int
    endpoints: tuple[tuple[str, str, int], ...]
    """(listener, host, port)."""
    rack: str
    fenced: bool

    def address(self, listener: str) -> str | None:
        for name, host, port in self.endpoints:
            if name == listener:
                return f"{host}:{port}"
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: bytes
    internal: bool
    partitions: dict[int, PartitionState] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KafkaBroker:
    node_id: int
    host: str
    port: int
    rack: str | None


class ClusterImage:
    def __init__(self) -> None:
        self.cluster_id = ""
        self.offset = -1
        self.nodes: dict[int, NodeInfo] = {}
        self.topics: dict[str, TopicState] = {}
        self._changed = asyncio.Event()

    def apply(
        self, snapshot: bool, offset: int, records: Iterable[metadata_pb2.MetadataRecord]
    ) -> None:
        if snapshot:
            self.nodes.clear()
            self.topics.clear()
        for record in records:
            self._apply(record)
        self.offset = offset
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_until(self, check: Callable[[], bool], timeout_s: float) -> bool:
        """Whether ``check`` holds within ``timeout_s``, looking again after each update."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not check():
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining_s)
            except TimeoutError:
                return check()
        return True

    def _apply(self, record: metadata_pb2.MetadataRecord) -> None:
        kind = record.WhichOneof("record")
        if kind == "cluster":
            self.cluster_id = record.cluster.cluster_id
        elif kind == "broker":
            b = record.broker
            self.nodes[b.node_id] = NodeInfo(
                b.node_id,
                b.role,
                tuple((e.listener, e.host, e.port) for e in b.endpoints),
                b.rack,
                b.fenced,
            )
        elif kind == "remove_broker":
            self.nodes.pop(record.remove_broker.node_id, None)
        elif kind == "topic":
            t = record.topic
            existing = self.topics.get(t.name)
            if existing is not None and existing.topic_id == t.topic_id:
                existing.internal = t.internal
            else:
                self.topics[t.name] = TopicState(t.name, t.topic_id, t.internal)
        elif kind == "remove_topic":
            r = record.remove_topic
            name = r.name or next(
                (t.name for t in self.topics.values() if t.topic_id == r.topic_id), ""
            )
            topic = self.topics.get(name)
            if topic is not None and (not r.topic_id or topic.topic_id == r.topic_id):
                del self.topics[name]
        elif kind == "partition":
            p = record.partition
            topic = self.topics.get(p.topic)
            if topic is None:
                topic = self.topics[p.topic] = TopicState(p.topic, p.topic_id, internal=False)
            topic.partitions[p.partition] = PartitionState(
                p.partition, tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch
            )

    # -- reading ------------------------------------------------------------------------------

    def live_nodes(self, role: int) -> list[NodeInfo]:
        """Unfenced nodes of ``role``, by id."""
        return sorted(
            (n for n in self.nodes.values() if n.role == role and not n.fenced),
            key=lambda n: n.node_id,
        )

    def kafka_brokers(self) -> list[KafkaBroker]:
        """The gateways with a Kafka listener, by id: the brokers Kafka clients see."""
        brokers = []
        for node in self.live_nodes(common_pb2.NODE_ROLE_GATEWAY):
            for name, host, port in node.endpoints:
                if name == KAFKA_LISTENER:
                    brokers.append(KafkaBroker(node.node_id, host, port, node.rack or None))
                    break
        return brokers

    def gateway_for(self, storage_node_id: int) -> int:
        """The gateway presented as leader of a partition led by ``storage_node_id``;
        NO_NODE when the partition has no leader or no gateway is known."""
        if storage_node_id < 0:
            return NO_NODE
        gateways = [b.node_id for b in self.kafka_brokers()]
        if not gateways:
            return NO_NODE
        return gateways[storage_node_id % len(gateways)]

    def controller_gateway(self) -> int:
        """The broker admin clients send to: the lowest gateway id (any gateway forwards
        admin requests to the active controller)."""
        brokers = self.kafka_brokers()
        return brokers[0].node_id if brokers else NO_NODE

    def storage_live(self, node_id: int) -> bool:
        """Whether ``node_id`` is a registered, unfenced storage node: Kafka lists a replica
        on any other node as offline."""
        node = self.nodes.get(node_id)
        return (
            node is not None and node.role == common_pb2.NODE_ROLE_STORAGE_NODE and not node.fenced
        )

    def topic_by_id(self, topic_id: bytes) -> TopicState | None:
        """The topic with Kafka id ``topic_id``; None for an unknown id (or the zero id, which
        names no topic)."""
        if not any(topic_id):
            return None
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def storage_address(self, node_id: int) -> str | None:
        """The GRPC address of a live storage node."""
        node = self.nodes.get(node_id)
        if node is None or node.role != common_pb2.NODE_ROLE_STORAGE_NODE:
            return None
        return node.address(GRPC_LISTENER)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        state = self.topics.get(topic)
        return None if state is None else state.partitions.get(partition)
