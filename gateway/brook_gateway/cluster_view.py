"""The gateway's metadata cache and the cluster it shows to Kafka clients.

``ClusterImage`` is a ``MetadataCache`` (brook/metadata/cache.py) over the shared image, fed
the controllers' WatchMetadata updates (a snapshot replaces the image, a delta is applied on
top): nodes (``BrokerInfo``, any role) with their endpoints, topics (``TopicInfo``) with their
partitions (``PartitionInfo``), the cluster id. ``wait_until`` lets a request wait for an
update.

The Kafka view: the brokers are the live (unfenced) storage nodes, by their own node ids, each
presented by gateway ``gateways[node_id % len(gateways)]`` over the live gateways in id order,
so every gateway gives every client the same answer and every id a client reads (a leader, a
replica, a broker to configure) is one it can write back. Each Kafka listener (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) has its own view: a client is shown the brokers at the addresses of
the listener it connected to, among the gateways that have that listener. A presenting gateway
that registered a ``<listener>_NODES`` endpoint (``kafka.node.port.base``) shows storage node
``n`` at that endpoint's host and port ``base + n``, where it listens for broker ``n`` alone
on that listener; one without it (or a port at or past the next listener's base, or past
65535) shows ``n`` at the listener's own address, shared by every id it presents.
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
    "KAFKA_LISTENER",
    "KAFKA_LISTENERS",
    "KAFKA_NODES_LISTENER",
    "NO_NODE",
    "ClusterImage",
    "KafkaBroker",
    "node_port",
    "node_port_ceiling",
    "nodes_listener",
]

NO_NODE: Final = -1
KAFKA_LISTENER: Final = "PLAINTEXT"
"""The Kafka listener of a gateway without security settings."""
KAFKA_LISTENERS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""The names a gateway's Kafka listeners may have (Kafka's; the security protocol of each
comes from listener.security.protocol.map)."""
_NODES_SUFFIX: Final = "_NODES"
PORT_MAX: Final = 65535


def nodes_listener(listener: str) -> str:
    """The endpoint a gateway with per-broker ports registers for Kafka listener
    ``listener``: its advertised host and that listener's base port; broker n is at
    base + n."""
    return listener + _NODES_SUFFIX


KAFKA_NODES_LISTENER: Final = nodes_listener(KAFKA_LISTENER)


def node_port(base: int, node_id: int, ceiling: int = PORT_MAX + 1) -> int | None:
    """The port broker ``node_id`` has on a gateway whose per-broker ports (of one listener)
    start at ``base``; None when that is off (base 0) or the port would reach ``ceiling``
    (the next listener's base, or past 65535)."""
    if base <= 0 or node_id < 0 or base + node_id >= min(ceiling, PORT_MAX + 1):
        return None
    return base + node_id


def node_port_ceiling(bases: Iterable[int], base: int) -> int:
    """Where the per-broker ports starting at ``base`` end: the lowest of the other
    listeners' ``bases`` above it, else past 65535."""
    return min((b for b in bases if b > base), default=PORT_MAX + 1)


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

    def _kafka_gateways(self, listener: str) -> list[tuple[BrokerInfo, str, int]]:
        """(node, host, port of its ``listener``) of the live gateways with that Kafka
        listener, by id: the gateways that present brokers on it."""
        gateways = []
        for node in self.live_nodes(common_pb2.NODE_ROLE_GATEWAY):
            for name, host, port in node.endpoints:
                if name == listener:
                    gateways.append((node, host, port))
                    break
        return gateways

    def kafka_brokers(self, listener: str = KAFKA_LISTENER) -> list[KafkaBroker]:
        """The brokers Kafka clients of ``listener`` see, by id: each live storage node at
        its own port of the gateway it maps onto (``<listener>_NODES``), or at that gateway's
        ``listener`` address when it has none; the live gateways themselves while no storage
        node is live; none while no gateway has the listener."""
        gateways = self._kafka_gateways(listener)
        storage_nodes = self.live_nodes(common_pb2.NODE_ROLE_STORAGE_NODE)
        if not gateways or not storage_nodes:
            return [
                KafkaBroker(node.node_id, host, port, node.rack or None, node.node_id)
                for node, host, port in gateways
            ]
        nodes_name = nodes_listener(listener)
        brokers = []
        for node in storage_nodes:
            gateway, host, port = gateways[node.node_id % len(gateways)]
            bases = [p for name, _, p in gateway.endpoints if name.endswith(_NODES_SUFFIX)]
            for name, nodes_host, base in gateway.endpoints:
                own_port = (
                    node_port(base, node.node_id, node_port_ceiling(bases, base))
                    if name == nodes_name
                    else None
                )
                if own_port is not None:
                    host, port = nodes_host, own_port
                    break
            brokers.append(
                KafkaBroker(node.node_id, host, port, node.rack or None, gateway.node_id)
            )
        return brokers

    def presented_storage_nodes(self, gateway_id: int, listener: str = KAFKA_LISTENER) -> list[int]:
        """The live storage node ids gateway ``gateway_id`` presents as brokers on
        ``listener`` (the mapping of ``kafka_brokers``), by id; none while that gateway is not
        live or has no such listener."""
        gateways = [node.node_id for node, _, _ in self._kafka_gateways(listener)]
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

    def scram_credential(
        self, name: str, mechanism: int
    ) -> metadata_pb2.UserScramCredentialRecord | None:
        """User ``name``'s SCRAM credential for ``mechanism`` (a ScramMechanism code), None if
        it has none (brook_gateway.sasl.CredentialLookup)."""
        return self.image.scram_credentials.get((name, mechanism))

    def storage_address(self, node_id: int) -> str | None:
        """The GRPC address of a live storage node."""
        node = self.nodes.get(node_id)
        if node is None or node.role != common_pb2.NODE_ROLE_STORAGE_NODE:
            return None
        return node.address(GRPC_LISTENER)
