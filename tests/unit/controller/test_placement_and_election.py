"""Replica placement and the partition leadership rules, on images built in memory."""

from __future__ import annotations

import collections
import uuid

from brook_controller.changes import ChangeSet
from brook_controller.election import (
    NO_LEADER,
    elect_offline_partitions,
    imbalanced_partitions,
    preferred_election,
    remove_node,
    unclean_election,
)
from brook_controller.image import ControllerImage
from brook_controller.placement import Load, Node, place_replicas

from brook.errors import ErrorCode
from brook.v1 import common_pb2, metadata_pb2

TOPIC_ID = uuid.UUID(int=7).bytes


def _partition(
    index: int, replicas: list[int], isr: list[int], leader: int
) -> metadata_pb2.PartitionRecord:
    return metadata_pb2.PartitionRecord(
        topic_id=TOPIC_ID, topic="t", partition=index, replicas=replicas, isr=isr, leader=leader
    )


def _image(
    partitions: list[metadata_pb2.PartitionRecord], fenced: tuple[int, ...] = ()
) -> ControllerImage:
    image = ControllerImage()
    for node_id in (1, 2, 3):
        image.apply(
            metadata_pb2.MetadataRecord(
                broker=metadata_pb2.BrokerRecord(
                    node_id=node_id,
                    broker_epoch=1,
                    role=common_pb2.NODE_ROLE_STORAGE_NODE,
                    fenced=node_id in fenced,
                )
            )
        )
    image.apply(
        metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="t", topic_id=TOPIC_ID))
    )
    for partition in partitions:
        image.apply(metadata_pb2.MetadataRecord(partition=partition))
    return image


def _fence(changes: ChangeSet, node_id: int) -> None:
    broker = changes.broker(node_id)
    assert broker is not None
    fenced = metadata_pb2.BrokerRecord()
    fenced.CopyFrom(broker)
    fenced.fenced = True
    changes.put_broker(fenced)


def _no_unclean(topic: str) -> bool:
    return False


def test_placement_balances_leaders_and_replicas_across_topics() -> None:
    nodes = [Node(node_id, "") for node_id in (1, 2, 3, 4)]
    existing: list[metadata_pb2.PartitionRecord] = []
    for count in (3, 5, 2):
        for replicas in place_replicas(nodes, Load.of(existing), count, 2):
            existing.append(_partition(len(existing), replicas, replicas, replicas[0]))

    leaders = collections.Counter(p.replicas[0] for p in existing)
    replicas = collections.Counter(r for p in existing for r in p.replicas)
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert max(replicas.values()) - min(replicas.values()) <= 1
    assert all(len(set(p.replicas)) == 2 for p in existing)


def test_rack_aware_placement_puts_each_partitions_replicas_in_different_racks() -> None:
    nodes = [Node(1, "a"), Node(2, "a"), Node(3, "b"), Node(4, "b"), Node(5, "c"), Node(6, "c")]
    racks = {node.node_id: node.rack for node in nodes}

    assignment = place_replicas(nodes, Load(), 12, 3)

    assert all(len({racks[r] for r in replicas}) == 3 for replicas in assignment)
    assert collections.Counter(replicas[0] for replicas in assignment) == {n: 2 for n in racks}


def test_fencing_a_leader_elects_the_next_in_sync_replica_and_bumps_both_epochs() -> None:
    image = _image([_partition(0, [1, 2, 3], [1, 2, 3], 1), _partition(1, [2, 1, 3], [2, 3], 2)])
    changes = ChangeSet(image)
    _fence(changes, 1)

    assert remove_node(changes, 1, _no_unclean) == 1

    moved = changes.partition(TOPIC_ID, 0)
    assert moved is not None
    assert (moved.leader, list(moved.isr), moved.leader_epoch, moved.partition_epoch) == (
        2,
        [2, 3],
        1,
        1,
    )
    untouched = changes.partition(TOPIC_ID, 1)
    assert untouched is not None and untouched.partition_epoch == 0


def test_the_last_in_sync_replica_stays_in_the_isr_and_the_partition_goes_offline() -> None:
    image = _image([_partition(0, [1, 2], [1], 1)])
    changes = ChangeSet(image)
    _fence(changes, 1)

    remove_node(changes, 1, _no_unclean)

    offline = changes.partition(TOPIC_ID, 0)
    assert offline is not None
    assert (offline.leader, list(offline.isr)) == (NO_LEADER, [1])


def test_unclean_election_takes_a_live_replica_outside_the_isr() -> None:
    image = _image([_partition(0, [1, 2], [1], NO_LEADER)], fenced=(1,))
    changes = ChangeSet(image)

    assert elect_offline_partitions(changes, _no_unclean) == 0
    code, _ = unclean_election(changes, image.partitions[TOPIC_ID][0])

    elected = changes.partition(TOPIC_ID, 0)
    assert code is ErrorCode.NONE
    assert elected is not None and (elected.leader, list(elected.isr)) == (2, [2])


def test_preferred_election_needs_the_preferred_replica_in_sync() -> None:
    image = _image([_partition(0, [1, 2], [2], 2), _partition(1, [3, 2], [2, 3], 2)])
    changes = ChangeSet(image)

    out_of_sync, _ = preferred_election(changes, image.partitions[TOPIC_ID][0])
    moved, _ = preferred_election(changes, image.partitions[TOPIC_ID][1])
    again, _ = preferred_election(changes, image.partitions[TOPIC_ID][1])

    assert out_of_sync is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert moved is ErrorCode.NONE and again is ErrorCode.ELECTION_NOT_NEEDED
    partition = changes.partition(TOPIC_ID, 1)
    assert partition is not None and partition.leader == 3


def test_imbalance_counts_partitions_whose_preferred_replica_does_not_lead() -> None:
    partitions = [
        _partition(0, [1, 2], [1, 2], 2),
        _partition(1, [1, 2], [1, 2], 1),
        _partition(2, [2, 1], [1, 2], 2),
    ]

    assert [p.partition for p in imbalanced_partitions(partitions, 10)] == [0]
    assert imbalanced_partitions(partitions, 50) == []
