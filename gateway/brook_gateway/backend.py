"""What every handler reaches Brook through: the metadata cache and the gRPC upstreams."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from brook.errors import ErrorCode
from brook.rpc.addresses import GRPC_LISTENER
from brook.v1 import common_pb2
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.upstream import Upstreams

__all__ = ["Backend", "Routed"]

_P = TypeVar("_P")


@dataclass(slots=True)
class Routed(Generic[_P]):
    """Partitions grouped by the storage node that leads them, and those that cannot be
    routed with the error to answer."""

    by_address: dict[str, list[_P]] = field(default_factory=dict)
    errors: list[tuple[_P, ErrorCode]] = field(default_factory=list)


@dataclass(slots=True)
class Backend:
    node_id: int
    image: ClusterImage
    upstreams: Upstreams
    controllers: tuple[str, ...]
    """GRPC addresses of the controllers (controller.quorum.bootstrap.servers)."""

    def route(self, items: Iterable[tuple[str, int, _P]]) -> Routed[_P]:
        """Groups (topic, partition, item) by leader address. An unknown partition is
        UNKNOWN_TOPIC_OR_PARTITION; one without a reachable leader LEADER_NOT_AVAILABLE (both
        retriable: the client refreshes its metadata and tries again)."""
        routed: Routed[_P] = Routed()
        for topic, partition, item in items:
            state = self.image.partition(topic, partition)
            if state is None:
                routed.errors.append((item, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            address = self.image.storage_address(state.leader)
            if address is None:
                routed.errors.append((item, ErrorCode.LEADER_NOT_AVAILABLE))
                continue
            routed.by_address.setdefault(address, []).append(item)
        return routed

    def group_coordinators(self) -> list[str]:
        """GRPC addresses of the live group coordinators, by node id."""
        return [address for _, address in self.group_coordinator_nodes()]

    def group_coordinator_nodes(self) -> list[tuple[int, str]]:
        """(node id, GRPC address) of the live group coordinators, by node id."""
        nodes = self.image.live_nodes(common_pb2.NODE_ROLE_GROUP_COORDINATOR)
        return [(n.node_id, a) for n in nodes if (a := n.address(GRPC_LISTENER)) is not None]

    def storage_addresses(self) -> list[str]:
        """GRPC addresses of the live storage nodes, by node id."""
        nodes = self.image.live_nodes(common_pb2.NODE_ROLE_STORAGE_NODE)
        return [a for n in nodes if (a := n.address(GRPC_LISTENER)) is not None]
