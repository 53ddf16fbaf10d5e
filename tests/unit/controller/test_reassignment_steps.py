"""Partition reassignment's steps (start, complete, cancel, retarget), on images in memory:
each step keeps an in-sync copy of every committed record and a leader that is in sync."""

from __future__ import annotations

import uuid

import pytest
from brook_controller.changes import ChangeSet
from brook_controller.election import NO_LEADER, unclean_election
from brook_controller.image import ControllerImage, broker_key
from brook_controller.reassignment import (
    cancel_reassignment,
    complete_ready_reassignments,
    complete_reassignment,
    ready_reassignments,
    start_reassignment,
)

from brook.errors import BrookError, ErrorCode
from brook.v1 import common_pb2, metadata_pb2

TOPIC_ID = uuid.UUID(int=9).bytes


def _image(
    replicas: list[int], isr: list[int], leader: int, *, nodes: range = range(1, 6)
) -> ControllerImage:
    image = ControllerImage()
    for node_id in nodes:
        image.apply(
            metadata_pb2.MetadataRecord(
                broker=metadata_pb2.BrokerRecord(
                    node_id=node_id, broker_epoch=1, role=common_pb2.NODE_ROLE_STORAGE_NODE
                )
            )
        )
    image.apply(
        metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="t", topic_id=TOPIC_ID))
    )
    image.apply(
        metadata_pb2.MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                topic_id=TOPIC_ID,
                topic="t",
                partition=0,
                replicas=replicas,
                isr=isr,
                leader=leader,
                leader_epoch=3,
                partition_epoch=5,
            )
        )
    )
    return image


def _commit(image: ControllerImage, changes: ChangeSet) -> metadata_pb2.PartitionRecord:
    for record in changes.records:
        image.apply(record)
    partition = image.partition(TOPIC_ID, 0)
    assert partition is not None
    return partition


def _start(image: ControllerImage, target: list[int]) -> metadata_pb2.PartitionRecord:
    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    start_reassignment(changes, partition, target)
    return _commit(image, changes)


def _isr(image: ControllerImage, isr: list[int]) -> metadata_pb2.PartitionRecord:
    """The leader's AlterPartition: a new ISR, then completion if the target is in sync."""
    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    changed = metadata_pb2.PartitionRecord()
    changed.CopyFrom(partition)
    del changed.isr[:]
    changed.isr.extend(isr)
    changed.partition_epoch += 1
    changes.put_partition(changed)
    complete_reassignment(changes, TOPIC_ID, 0)
    return _commit(image, changes)


def test_a_move_adds_then_completes_once_the_target_is_in_sync_moving_leadership() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)

    moving = _start(image, [2, 3, 4])
    assert list(moving.replicas) == [2, 3, 4, 1]
    assert list(moving.adding_replicas) == [4]
    assert list(moving.removing_replicas) == [1]
    assert list(moving.isr) == [1, 2, 3]
    assert (moving.leader, moving.leader_epoch) == (1, 3), "the leader stays while data moves"
    assert moving.partition_epoch == 6
    assert ready_reassignments(image) == []

    done = _isr(image, [1, 2, 3, 4])
    assert list(done.replicas) == [2, 3, 4]
    assert list(done.isr) == [2, 3, 4]
    assert not done.adding_replicas and not done.removing_replicas
    assert (done.leader, done.leader_epoch) == (2, 4), "the removed leader hands over"


def test_a_move_that_copies_nothing_completes_at_once_keeping_a_leader_in_the_target() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=2)
    done = _start(image, [3, 2])
    assert list(done.replicas) == [3, 2]
    assert list(done.isr) == [2, 3]
    assert (done.leader, done.leader_epoch) == (2, 3)
    assert not done.adding_replicas and not done.removing_replicas


def test_the_maintenance_round_completes_a_move_whose_target_became_in_sync() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)
    _start(image, [2, 3, 4])
    # The ISR change committed, but not the completion (a failover in between).
    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    grown = metadata_pb2.PartitionRecord()
    grown.CopyFrom(partition)
    grown.isr.append(4)
    changes.put_partition(grown)
    _commit(image, changes)

    ready = ready_reassignments(image)
    assert [p.partition for p in ready] == [0]
    changes = ChangeSet(image)
    assert complete_ready_reassignments(changes, ready) == 1
    done = _commit(image, changes)
    assert list(done.replicas) == [2, 3, 4] and done.leader == 2


def test_cancel_returns_to_the_original_replicas_and_a_new_leader_hands_back() -> None:
    image = _image([1, 2], [1, 2], leader=1)
    _start(image, [3, 4])
    moving = _isr(image, [1, 2, 3])
    assert list(moving.replicas) == [3, 4, 1, 2]
    # The old replicas fall out; an added one leads (the leader was fenced, say).
    changes = ChangeSet(image)
    current = changes.partition(TOPIC_ID, 0)
    assert current is not None
    led = metadata_pb2.PartitionRecord()
    led.CopyFrom(current)
    del led.isr[:]
    led.isr.extend([2, 3])
    led.leader = 3
    led.leader_epoch += 1
    changes.put_partition(led)
    _commit(image, changes)

    changes = ChangeSet(image)
    current = changes.partition(TOPIC_ID, 0)
    assert current is not None
    cancel_reassignment(changes, current)
    back = _commit(image, changes)
    assert list(back.replicas) == [1, 2]
    assert list(back.isr) == [2]
    assert back.leader == 2
    assert back.leader_epoch == led.leader_epoch + 1
    assert not back.adding_replicas and not back.removing_replicas


def test_a_new_target_is_taken_relative_to_the_original_replicas() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)
    _start(image, [2, 3, 4])
    _isr(image, [1, 2, 3])  # 4 not yet in sync
    retargeted = _start(image, [2, 3, 5])
    assert list(retargeted.replicas) == [2, 3, 5, 1]
    assert list(retargeted.adding_replicas) == [5]
    assert list(retargeted.removing_replicas) == [1]


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ([2, 2, 3], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # a node twice
        ([2, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # not a registered node
    ],
)
def test_an_invalid_target_is_refused_and_changes_nothing(
    target: list[int], code: ErrorCode
) -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)
    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    with pytest.raises(BrookError) as raised:
        start_reassignment(changes, partition, target)
    assert raised.value.code is code
    assert not changes


def test_cancelling_what_is_not_moving_is_refused() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)
    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    with pytest.raises(BrookError) as raised:
        cancel_reassignment(changes, partition)
    assert raised.value.code is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert not changes


def test_a_new_target_dropping_every_in_sync_replica_is_refused() -> None:
    image = _image([1], [1], leader=1)
    _start(image, [2, 3])
    # 2 caught up and then 1 fell out (fenced): 2 is the only in-sync copy mid-move.
    changes = ChangeSet(image)
    current = changes.partition(TOPIC_ID, 0)
    assert current is not None
    only_added = metadata_pb2.PartitionRecord()
    only_added.CopyFrom(current)
    del only_added.isr[:]
    only_added.isr.append(2)
    only_added.leader = 2
    changes.put_partition(only_added)
    _commit(image, changes)

    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    # Relative to the original [1], target [3] drops 2, the only in-sync copy.
    with pytest.raises(BrookError) as raised:
        start_reassignment(changes, partition, [3])
    assert raised.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert not changes
    with pytest.raises(BrookError) as raised:
        cancel_reassignment(changes, partition)
    assert raised.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert not changes


def test_raising_and_lowering_the_replication_factor_are_moves_too() -> None:
    image = _image([1, 2], [1, 2], leader=1)
    growing = _start(image, [1, 2, 3])
    assert (list(growing.adding_replicas), list(growing.removing_replicas)) == ([3], [])
    grown = _isr(image, [1, 2, 3])
    assert list(grown.replicas) == [1, 2, 3] and not grown.adding_replicas

    shrunk = _start(image, [2])
    assert list(shrunk.replicas) == [2] and list(shrunk.isr) == [2]
    assert shrunk.leader == 2 and shrunk.leader_epoch == grown.leader_epoch + 1


def test_a_move_depends_on_its_target_nodes_registrations() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)
    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    start_reassignment(changes, partition, [2, 3, 4])
    # An UnregisterBroker of node 4 committed first changes this key: the move is then void.
    assert broker_key(4) in changes.preconditions


def test_sending_a_moving_partitions_target_again_changes_nothing() -> None:
    image = _image([1, 2, 3], [1, 2, 3], leader=1)
    moving = _start(image, [2, 3, 4])
    changes = ChangeSet(image)
    current = changes.partition(TOPIC_ID, 0)
    assert current is not None
    start_reassignment(changes, current, [2, 3, 4])
    assert not changes, "a retried request would fail the leader's AlterPartition in flight"
    assert image.partition(TOPIC_ID, 0) == moving


def test_unclean_election_prefers_a_replica_that_is_not_being_added() -> None:
    image = _image([1, 2], [1, 2], leader=1)
    _start(image, [3, 2])
    changes = ChangeSet(image)
    current = changes.partition(TOPIC_ID, 0)
    assert current is not None
    offline = metadata_pb2.PartitionRecord()
    offline.CopyFrom(current)
    del offline.isr[:]
    offline.isr.append(1)
    offline.leader = NO_LEADER
    changes.put_partition(offline)
    _commit(image, changes)
    # Node 1 (the last in-sync replica) is gone; 3 (being added, maybe empty) and 2 are live.
    changes = ChangeSet(image)
    broker = changes.broker(1)
    assert broker is not None
    fenced = metadata_pb2.BrokerRecord()
    fenced.CopyFrom(broker)
    fenced.fenced = True
    changes.put_broker(fenced)
    _commit(image, changes)

    changes = ChangeSet(image)
    partition = changes.partition(TOPIC_ID, 0)
    assert partition is not None
    assert unclean_election(changes, partition)[0] is ErrorCode.NONE
    elected = _commit(image, changes)
    assert (elected.leader, list(elected.isr)) == (2, [2])
