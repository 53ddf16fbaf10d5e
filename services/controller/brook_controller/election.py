"""Partition leadership and ISR changes decided by the controller (Kafka's PartitionChangeBuilder
and the election rules of its ReplicationControlManager).

Every change of a partition bumps its partition epoch; a change of leader also bumps its
leader epoch. A node that is fenced or shutting down is not *live*: it may not lead and may
not join an ISR. When a node leaves, it is removed from every ISR except where it is the last
member, which is kept so that it can lead again when it returns (the partition is offline
until then) without losing committed records. ``unclean`` election instead picks any live
replica and makes it the whole ISR: available again, at the price of what only the old ISR had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from brook.errors import ErrorCode
from brook.v1 import metadata_pb2
from brook_controller.changes import ChangeSet

__all__ = [
    "NO_LEADER",
    "choose_leader",
    "elect_offline_partitions",
    "imbalanced_partitions",
    "preferred_election",
    "remove_node",
    "unclean_election",
    "with_changes",
]

NO_LEADER = -1

UncleanPolicy = Callable[[str], bool]
"""Whether unclean election is enabled for a topic (by name)."""


def with_changes(
    partition: metadata_pb2.PartitionRecord,
    *,
    leader: int | None = None,
    isr: Iterable[int] | None = None,
) -> metadata_pb2.PartitionRecord:
    """The partition with a new leader and/or ISR and its epochs bumped; the same object if
    nothing changes."""
    new_leader = partition.leader if leader is None else leader
    new_isr = list(partition.isr) if isr is None else list(isr)
    if new_leader == partition.leader and new_isr == list(partition.isr):
        return partition
    changed = metadata_pb2.PartitionRecord()
    changed.CopyFrom(partition)
    del changed.isr[:]
    changed.isr.extend(new_isr)
    changed.leader = new_leader
    changed.partition_epoch = partition.partition_epoch + 1
    if new_leader != partition.leader:
        changed.leader_epoch = partition.leader_epoch + 1
    return changed


def choose_leader(
    partition: metadata_pb2.PartitionRecord, isr: list[int], changes: ChangeSet, unclean: bool
) -> tuple[int, list[int]]:
    """(leader, isr): the current leader if still eligible, else the first live ISR member in
    replica order, else (unclean) the first live replica as the only ISR member, else none."""
    if partition.leader in isr and changes.is_live(partition.leader):
        return partition.leader, isr
    for replica in partition.replicas:
        if replica in isr and changes.is_live(replica):
            return replica, isr
    if unclean:
        # A replica being added by a reassignment may hold nothing yet: the others first.
        adding = set(partition.adding_replicas)
        ordered = sorted(partition.replicas, key=lambda replica: replica in adding)
        for replica in ordered:
            if changes.is_live(replica):
                return replica, [replica]
    return NO_LEADER, isr


def remove_node(changes: ChangeSet, node_id: int, unclean: UncleanPolicy) -> int:
    """Takes a node that stopped being live (fenced, or shutting down; the caller has already
    put its new broker record in ``changes``) out of every ISR and leadership. Returns how many
    partitions changed."""
    changed = 0
    for latest in list(changes.partitions()):
        if node_id not in latest.isr and latest.leader != node_id:
            continue
        partition = changes.partition(latest.topic_id, latest.partition)
        assert partition is not None
        isr = [replica for replica in partition.isr if replica != node_id]
        if not isr:
            # The last in-sync copy: kept, so the node can lead again when it returns.
            isr = [node_id]
        leader, isr = choose_leader(partition, isr, changes, unclean(partition.topic))
        updated = with_changes(partition, leader=leader, isr=isr)
        if updated is not partition:
            changes.put_partition(updated)
            changed += 1
    return changed


def elect_offline_partitions(
    changes: ChangeSet, unclean: UncleanPolicy, node_id: int | None = None
) -> int:
    """Elects a leader for partitions that have none (all of them, or those ``node_id`` is a
    replica of, when it has just become live). Returns how many got one."""
    elected = 0
    for latest in list(changes.partitions()):
        if latest.leader != NO_LEADER or (node_id is not None and node_id not in latest.replicas):
            continue
        partition = changes.partition(latest.topic_id, latest.partition)
        assert partition is not None
        leader, isr = choose_leader(
            partition, list(partition.isr), changes, unclean(partition.topic)
        )
        if leader != NO_LEADER:
            changes.put_partition(with_changes(partition, leader=leader, isr=isr))
            elected += 1
    return elected


def preferred_election(
    changes: ChangeSet, partition: metadata_pb2.PartitionRecord
) -> tuple[ErrorCode, str]:
    """Moves leadership to the preferred (first) replica if it is live and in sync."""
    current = changes.partition(partition.topic_id, partition.partition)
    assert current is not None
    preferred = current.replicas[0] if current.replicas else NO_LEADER
    if current.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED, "the preferred replica already leads"
    if preferred not in current.isr or not changes.is_live(preferred):
        return (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"the preferred replica {preferred} is not live and in sync",
        )
    changes.put_partition(with_changes(current, leader=preferred))
    return ErrorCode.NONE, ""


def unclean_election(
    changes: ChangeSet, partition: metadata_pb2.PartitionRecord
) -> tuple[ErrorCode, str]:
    """Gives an offline partition a leader, from outside the ISR if it must."""
    current = changes.partition(partition.topic_id, partition.partition)
    assert current is not None
    if current.leader != NO_LEADER:
        return ErrorCode.ELECTION_NOT_NEEDED, "the partition has a leader"
    leader, isr = choose_leader(current, list(current.isr), changes, unclean=True)
    if leader == NO_LEADER:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica of the partition is live"
    changes.put_partition(with_changes(current, leader=leader, isr=isr))
    return ErrorCode.NONE, ""


def imbalanced_partitions(
    partitions: Iterable[metadata_pb2.PartitionRecord], percentage: int
) -> list[metadata_pb2.PartitionRecord]:
    """Partitions not led by their preferred replica, on every node whose share of such
    partitions (among those it is preferred for) exceeds ``percentage`` (Kafka's
    leader.imbalance.per.broker.percentage)."""
    preferred_for: dict[int, list[metadata_pb2.PartitionRecord]] = {}
    for partition in partitions:
        if partition.replicas:
            preferred_for.setdefault(partition.replicas[0], []).append(partition)
    result = []
    for node_id in sorted(preferred_for):
        owned = preferred_for[node_id]
        not_led = [p for p in owned if p.leader != node_id]
        if not_led and len(not_led) * 100 > percentage * len(owned):
            result.extend(not_led)
    return result
