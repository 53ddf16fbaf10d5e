"""Who owns which __consumer_offsets partition, as the cluster metadata says
(CoordinatorRecord), with the owner's endpoints: what FindCoordinator answers and what a
NOT_COORDINATOR answer hints at.

``CoordinatorDirectory`` is the one place the coordinator depends on the metadata feed; the
feed (``ClusterMetadata``, applying WatchMetadata) calls ``set_endpoints``/
``remove_endpoints``/``assign`` for what each update changed and ``reset`` when a snapshot
replaces the image.
"""

from __future__ import annotations

from dataclasses import dataclass

from brook.metadata.info import EndpointInfo, endpoint_protos
from brook.v1 import common_pb2

__all__ = ["CoordinatorDirectory", "Owner"]


@dataclass(frozen=True, slots=True)
class Owner:
    node_id: int
    coordinator_epoch: int


class CoordinatorDirectory:
    def __init__(self) -> None:
        self._owners: dict[int, Owner] = {}
        self._endpoints: dict[int, tuple[EndpointInfo, ...]] = {}

    def reset(self) -> None:
        self._owners.clear()
        self._endpoints.clear()

    def set_endpoints(self, node_id: int, endpoints: tuple[EndpointInfo, ...]) -> None:
        self._endpoints[node_id] = endpoints

    def remove_endpoints(self, node_id: int) -> None:
        """``node_id`` is no longer registered: hints name it without endpoints."""
        self._endpoints.pop(node_id, None)

    def assign(self, partition: int, node_id: int, coordinator_epoch: int) -> None:
        current = self._owners.get(partition)
        # An older epoch arriving late must not undo a hand-over.
        if current is None or coordinator_epoch >= current.coordinator_epoch:
            self._owners[partition] = Owner(node_id, coordinator_epoch)

    def owner(self, partition: int) -> Owner | None:
        return self._owners.get(partition)

    def partitions_of(self, node_id: int) -> dict[int, int]:
        """partition → coordinator epoch, for every partition ``node_id`` owns."""
        return {p: o.coordinator_epoch for p, o in self._owners.items() if o.node_id == node_id}

    def hint(self, partition: int) -> common_pb2.NodeHint:
        owner = self._owners.get(partition)
        if owner is None:
            return common_pb2.NodeHint(node_id=-1)
        return common_pb2.NodeHint(
            node_id=owner.node_id, endpoints=endpoint_protos(self._endpoints.get(owner.node_id, ()))
        )
