"""Where the replicas of new partitions go: balanced over nodes and racks.

Each new partition's leader (its first, preferred replica) is the live node that leads the
fewest partitions so far, and its followers are the nodes holding the fewest replicas, taken
from racks the partition does not use yet while there are any. The counts include every
existing partition and every partition placed earlier in the same request, so leaders and
replicas stay balanced across topics, not only within one. With equal counts the lower node
id wins, which keeps placement deterministic (and testable).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from brook.v1 import metadata_pb2

__all__ = ["Load", "Node", "place_replicas"]


@dataclass(frozen=True)
class Node:
    node_id: int
    rack: str


@dataclass
class Load:
    """How many partitions each node leads (is the first replica of) and holds a replica of."""

    leaders: collections.Counter[int] = field(default_factory=collections.Counter)
    replicas: collections.Counter[int] = field(default_factory=collections.Counter)

    def add(self, replicas: Sequence[int], sign: int = 1) -> None:
        for position, node_id in enumerate(replicas):
            self.replicas[node_id] += sign
            if position == 0:
                self.leaders[node_id] += sign

    def copy(self) -> Load:
        return Load(collections.Counter(self.leaders), collections.Counter(self.replicas))

    @classmethod
    def of(cls, partitions: Iterable[metadata_pb2.PartitionRecord]) -> Load:
        load = cls()
        for partition in partitions:
            load.add(partition.replicas)
        return load


def place_replicas(
    nodes: Sequence[Node], load: Load, partitions: int, replication_factor: int
) -> list[list[int]]:
    """Replica lists (preferred leader first) for ``partitions`` new partitions on ``nodes``,
    given the ``load`` of what exists already. The caller has checked that
    ``1 <= replication_factor <= len(nodes)``."""
    if not 1 <= replication_factor <= len(nodes):
        raise ValueError(f"replication factor {replication_factor} on {len(nodes)} nodes")
    leaders = {node.node_id: load.leaders[node.node_id] for node in nodes}
    replicas = {node.node_id: load.replicas[node.node_id] for node in nodes}
    racks = {node.node_id: node.rack for node in nodes}
    assignments = []
    for _ in range(partitions):
        chosen = [min(leaders, key=lambda n: (leaders[n], replicas[n], n))]
        while len(chosen) < replication_factor:
            chosen.append(_next_follower(chosen, racks, replicas))
        leaders[chosen[0]] += 1
        for node_id in chosen:
            replicas[node_id] += 1
        assignments.append(chosen)
    return assignments


def _next_follower(chosen: list[int], racks: Mapping[int, str], replicas: Mapping[int, int]) -> int:
    used_racks = {racks[node_id] for node_id in chosen}
    candidates = [n for n in replicas if n not in chosen]
    fresh_rack = [n for n in candidates if racks[n] not in used_racks]
    pool = fresh_rack or candidates
    return min(pool, key=lambda n: (replicas[n], n))
