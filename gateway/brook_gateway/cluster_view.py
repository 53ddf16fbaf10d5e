"""The gateway's metadata cache and the cluster it shows to Kafka clients.

``ClusterImage`` is a ``MetadataCache`` (brook/metadata/cache.py) over the shared image, fed
the controllers' WatchMetadata updates (a snapshot replaces the image, a delta is applied on
top): nodes (``BrokerInfo``, any role) with their endpoints, topics (``TopicInfo``) with their
partitions (``PartitionInfo``), the cluster id. ``wait_until`` lets a request wait for an
update.

The Kafka view: the brokers are the live (unfenced) storage nodes, by their own node ids, each
presented by gateway ``gateways[node_id % len(gateways)]`` over the live gateways in id order,
so every gateway gives every client the same answer and every id a client reads (a leader, a
replica, a broker to configure) is one it can write back. A presenting gateway that registered
a PLAINTEXT_NODES endpoint (``kafka.node.port.base``) shows storage node ``n`` at that
endpoint's host and port ``base + n``, where it listens for broker ``n`` alone; one without it
(or a port past 65535) shows ``n`` at its PLAINTEXT listener, shared by every id it presents.
Whichever gateway receives a request forwards it to the real leader storage node, so a client
that routes by a stale view still succeeds. While no storage node is live the gateways
themselves are the brokers, so a client can bootstrap and gets retriable errors until the
cluster can serve it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from brook.metadata.cache import MetadataCache
from brook.metadata.delta import MetadataUpdate
from brook.metadata.info import BrokerInfo
from brook.rpc.addresses import GRPC_LISTENER
from brook.v1 import common_pb2, metadata_pb2

__all__ = [
    "KAFKA_NODES_LISTENER",
    "NO_NODE",
    "ClusterImage",
    "KafkaBroker",
    "node_port",
]

NO_NODE: Final = -1
KAFKA_LISTENER: Final = "PLAINTEXT"
# The endpoint a gateway with per-broker ports registers: its advertised PLAINTEXT host and
# port kafka.node.port.base; broker n is at base + n.
KAFKA_NODES_LISTENER: Final = "PLAINTEXT_NODES"
PORT_MAX: Final = 65535


def node_port(base: int, node_id: int) -> int | None:
    """The port broker ``node_id`` has on a gateway whose per-broker ports start at ``base``;
    None when that is off (base 0) or the port would pass 65535."""
    if base <= 0 or node_id < 0 or base + node_id > PORT_MAX:
        return None
    return base + node_id


@dataclass(frozen=True, slots=True)
class KafkaBroker:
    node_id: int
    host: str
    port: int
    rack: str | None
    gateway_id: int
    """The gateway that presents this broker id (at the broker's own port or its Kafka
    listener)."""


class ClusterImage(MetadataCache):
    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    @property
    def nodes(self) -> Mapping[int, BrokerInfo]:
        """Every registered node, of any role, by id."""
        return self.brokers

    def apply(
        self, snapshot: bool, offset: int, records: Iterable[metadata_pb2.MetadataRecord]
    ) -> None:
        # Nothing here acts on what a snapshot changed: the reads are rebuilt.
        self.replay(MetadataUpdate(snapshot, offset, tuple(records)), compare=False)
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

    # -- reading ------------------------------------------------------------------------------

    def live_nodes(self, role: int) -> list[BrokerInfo]:
        """Unfenced nodes of ``role``, by id."""
        return sorted(
            (n for n in self.nodes.values() if n.role == role and not n.fenced),
            key=lambda n: n.node_id,
        )

    def _kafka_gateways(self) -> list[tuple[BrokerInfo, str, int]]:
        """(node, PLAINTEXT host, PLAINTEXT port) of the live gateways with a Kafka
        listener, by id: the gateways that present brokers."""
        gateways = []
        for node in self.live_nodes(common_pb2.NODE_ROLE_GATEWAY):
            for name, host, port in node.endpoints:
                if name == KAFKA_LISTENER:
                    gateways.append((node, host, port))
                    break
        return gateways

    def kafka_brokers(self) -> list[KafkaBroker]:
        """The brokers Kafka clients see, by id: each live storage node at its own port of
        the gateway it maps onto (PLAINTEXT_NODES), or at that gateway's Kafka listener
        when it has none; the live gateways themselves while no storage node is live; none
        while no gateway is."""
        gateways = self._kafka_gateways()
        storage_nodes = self.live_nodes(common_pb2.NODE_ROLE_STORAGE_NODE)
        if not gateways or not storage_nodes:
            return [
                KafkaBroker(node.node_id, host, port, node.rack or None, node.node_id)
                for node, host, port in gateways
            ]
        brokers = []
        for node in storage_nodes:
            gateway, host, port = gateways[node.node_id % len(gateways)]
            for name, nodes_host, base in gateway.endpoints:
                own_port = node_port(base, node.node_id) if name == KAFKA_NODES_LISTENER else None
                if own_port is not None:
                    host, port = nodes_host, own_port
                    break
            brokers.append(
                KafkaBroker(node.node_id, host, port, node.rack or None, gateway.node_id)
            )
        return brokers

    def presented_storage_nodes(self, gateway_id: int) -> list[int]:
        """The live storage node ids gateway ``gateway_id`` presents as brokers (the mapping
        of ``kafka_brokers``), by id; none while that gateway is not live."""
        gateways = [node.node_id for node, _, _ in self._kafka_gateways()]
        if gateway_id not in gateways:
            return []
        return [
            node.node_id
            for node in self.live_nodes(common_pb2.NODE_ROLE_STORAGE_NODE)
            if gateways[node.node_id % len(gateways)] == gateway_id
        ]

    @staticmethod
    def coordinator_broker(brokers: list[KafkaBroker], coordinator_id: int) -> KafkaBroker | None:
        """The broker presented as the coordinator of the groups ``coordinator_id`` owns:
        ``brokers[coordinator_id % len(brokers)]`` (from ``kafka_brokers()``), a function of the
        metadata alone, so every gateway names the same one; None when there is no broker."""
        if coordinator_id < 0 or not brokers:
            return None
        return brokers[coordinator_id % len(brokers)]

    def storage_address(self, node_id: int) -> str | None:
        """The GRPC address of a live storage node."""
        node = self.nodes.get(node_id)
        if node is None or node.role != common_pb2.NODE_ROLE_STORAGE_NODE:
            return None
        return node.address(GRPC_LISTENER)
