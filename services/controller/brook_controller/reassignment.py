"""Partition reassignment (Kafka's KIP-455, as its ReplicationControlManager runs it).

A reassignment moves a partition from its current replicas to a target list. Every step is
one committed PartitionRecord, so a controller that takes over mid-move carries on from the
metadata alone:

1. **start**: the replicas become the target followed by the replicas being removed;
   ``adding_replicas`` are the target's new nodes, ``removing_replicas`` the old nodes not in
   the target. The new nodes see themselves among the replicas and start following the
   leader; the leader adds each to the ISR once it has caught up (AlterPartition).
2. **complete**, as soon as every target replica is in the ISR: the replicas become the
   target, the ISR keeps only target nodes, and if the leader is being removed leadership
   moves to the first live in-sync target replica (a new leader epoch). The removed nodes
   see they hold no replica any more and delete theirs.
3. **cancel** (an empty target, or Kafka's null): back to the replicas the move started from;
   the ISR keeps only those, and a leader that was being added hands over to one of them.

A new target for a partition already moving is taken relative to the replicas it started
from, as Kafka does: nodes added by the first move and not in the new target are dropped.

Completion is checked after every ISR change of a moving partition and on the controller's
maintenance round, so a move whose last ISR change was committed just before a failover
still completes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from brook.errors import BrookError, ErrorCode
from brook.v1 import common_pb2, metadata_pb2
from brook_controller.changes import ChangeSet
from brook_controller.election import NO_LEADER, choose_leader
from brook_controller.image import ControllerImage

__all__ = [
    "cancel_reassignment",
    "complete_ready_reassignments",
    "complete_reassignment",
    "is_reassigning",
    "original_replicas",
    "ready_reassignments",
    "reassigning_partitions",
    "start_reassignment",
]


def is_reassigning(partition: metadata_pb2.PartitionRecord) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def original_replicas(partition: metadata_pb2.PartitionRecord) -> list[int]:
    """The replicas a move started from (all of them when nothing moves)."""
    adding = set(partition.adding_replicas)
    return [replica for replica in partition.replicas if replica not in adding]


def _check_target(changes: ChangeSet, target: Sequence[int]) -> None:
    """Distinct registered storage nodes. Read through ``changes``, so each node's
    registration is a precondition: a move decided while the node is unregistered does not
    commit onto a node that no longer exists."""
    error = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if len(set(target)) != len(target):
        raise BrookError(error, "the target names a node twice")
    for node_id in target:
        broker = changes.broker(node_id)
        if broker is None or broker.role != common_pb2.NODE_ROLE_STORAGE_NODE:
            raise BrookError(error, f"node {node_id} is not a registered storage node")


def _changed(
    partition: metadata_pb2.PartitionRecord,
    replicas: Sequence[int],
    isr: Sequence[int],
    adding: Sequence[int],
    removing: Sequence[int],
) -> metadata_pb2.PartitionRecord:
    """The partition with these replica sets, its partition epoch bumped (no leader yet)."""
    changed = metadata_pb2.PartitionRecord()
    changed.CopyFrom(partition)
    for field, values in (
        (changed.replicas, replicas),
        (changed.isr, isr),
        (changed.adding_replicas, adding),
        (changed.removing_replicas, removing),
    ):
        del field[:]
        field.extend(values)
    changed.partition_epoch = partition.partition_epoch + 1
    return changed


def _with_leader(
    changes: ChangeSet,
    previous: metadata_pb2.PartitionRecord,
    changed: metadata_pb2.PartitionRecord,
) -> metadata_pb2.PartitionRecord | None:
    """``changed`` with a leader from its own replicas and ISR (the current one if still
    eligible; a new leader epoch otherwise); None if no replica of it can lead."""
    leader, isr = choose_leader(changed, list(changed.isr), changes, unclean=False)
    if leader == NO_LEADER:
        return None
    del changed.isr[:]
    changed.isr.extend(isr)
    changed.leader = leader
    if leader != previous.leader:
        changed.leader_epoch = previous.leader_epoch + 1
    return changed


def start_reassignment(
    changes: ChangeSet, partition: metadata_pb2.PartitionRecord, target: Sequence[int]
) -> None:
    """Moves ``partition`` towards ``target`` (step 1; step 2 at once if nothing to copy)."""
    _check_target(changes, target)
    original = original_replicas(partition)
    target_set = set(target)
    adding = [replica for replica in target if replica not in original]
    removing = [replica for replica in original if replica not in target_set]
    replicas = list(target) + removing
    isr = [replica for replica in partition.isr if replica in set(replicas)]
    if not isr:
        raise BrookError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "no in-sync replica would remain (the new target drops every one)",
        )
    if (replicas, adding, removing) == (
        list(partition.replicas),
        list(partition.adding_replicas),
        list(partition.removing_replicas),
    ):
        # Already there, or already on the way there (a retried request): a new record would
        # only bump the partition epoch and fail the leader's AlterPartition in flight.
        return
    changed = _changed(partition, replicas, isr, adding, removing)
    if partition.leader not in replicas and partition.leader != NO_LEADER:
        elected = _with_leader(changes, partition, changed)
        if elected is None:
            raise BrookError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "no live in-sync replica of the new assignment could lead",
            )
        changed = elected
    # Otherwise the leader stays (it is in the ISR, which keeps every replica it had); an
    # offline partition stays offline until one of its in-sync replicas returns.
    changes.put_partition(changed)
    complete_reassignment(changes, changed.topic_id, changed.partition)


def complete_reassignment(changes: ChangeSet, topic_id: bytes, index: int) -> bool:
    """Step 2 if the partition is moving and every target replica is in the ISR (and one of
    them can lead). Returns whether it completed."""
    partition = changes.partition(topic_id, index)
    if partition is None or not is_reassigning(partition):
        return False
    if not _target_in_sync(partition):
        return False
    removing = set(partition.removing_replicas)
    target = [replica for replica in partition.replicas if replica not in removing]
    isr = [replica for replica in partition.isr if replica in set(target)]
    updated = _with_leader(changes, partition, _changed(partition, target, isr, [], []))
    if updated is None:
        return False
    changes.put_partition(updated)
    return True


def cancel_reassignment(changes: ChangeSet, partition: metadata_pb2.PartitionRecord) -> None:
    """Step 3: back to the replicas the move started from."""
    if not is_reassigning(partition):
        raise BrookError(
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "the partition is not being reassigned"
        )
    original = original_replicas(partition)
    isr = [replica for replica in partition.isr if replica in set(original)]
    if not isr:
        raise BrookError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "none of the original replicas is in sync any more: cancelling would lose "
            "committed records; move to another target instead",
        )
    updated = _with_leader(changes, partition, _changed(partition, original, isr, [], []))
    if updated is None:
        raise BrookError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "no live in-sync original replica could lead",
        )
    changes.put_partition(updated)


def reassigning_partitions(image: ControllerImage) -> Iterator[metadata_pb2.PartitionRecord]:
    """Every partition being moved, in the committed image."""
    return (p for p in image.all_partitions() if is_reassigning(p))


def _target_in_sync(partition: metadata_pb2.PartitionRecord) -> bool:
    removing = set(partition.removing_replicas)
    return all(r in partition.isr for r in partition.replicas if r not in removing)


def ready_reassignments(image: ControllerImage) -> list[metadata_pb2.PartitionRecord]:
    """Moves whose target is all in sync: what the maintenance round completes."""
    return [p for p in reassigning_partitions(image) if _target_in_sync(p)]


def complete_ready_reassignments(
    changes: ChangeSet, partitions: Sequence[metadata_pb2.PartitionRecord]
) -> int:
    """Completes those of ``partitions`` still ready when the change is decided."""
    return sum(
        complete_reassignment(changes, partition.topic_id, partition.partition)
        for partition in partitions
    )
