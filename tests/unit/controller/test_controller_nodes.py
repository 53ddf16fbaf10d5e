"""Node life cycle, leadership and ISR changes, producer ids and WatchMetadata, against a real
(single-voter) controller with short leases. The storage nodes are fakes: plain clients that
register and heartbeat."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from brook_controller.changes import ChangeSet
from brook_controller.image import ControllerImage
from brook_controller.quorum_controller import ensure_cluster_id
from controller_support import InProcessController, watch

from brook.client.admin import Admin, NewTopic
from brook.errors import ErrorCode
from brook.v1 import common_pb2, controller_pb2, metadata_pb2

SESSION_MS = 1500
WAIT_S = 10
HEARTBEAT_EVERY_S = 0.1


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[InProcessController]:
    settings = {
        "broker.session.timeout.ms": str(SESSION_MS),
        "offsets.topic.replication.factor": "4",
        "transaction.state.log.replication.factor": "4",
        "leader.imbalance.check.interval.seconds": "1",
    }
    with InProcessController(tmp_path, settings) as running:
        yield running


def _admin(controller: InProcessController) -> Admin:
    return Admin(controller.address, default_api_timeout_ms=10_000)


def _create(controller: InProcessController, topic: NewTopic) -> None:
    with _admin(controller) as admin:
        assert admin.create_topics([topic]) == {topic.name: None}


def _partitions(image: ControllerImage, topic: str) -> list[metadata_pb2.PartitionRecord]:
    found = image.topic_by_name(topic)
    assert found is not None
    return [p for _, p in sorted(image.topic_partitions(found.topic_id).items())]


def _keep_alive_until(
    controller: InProcessController,
    epochs: dict[int, int],
    done: Callable[[ControllerImage], bool],
) -> ControllerImage:
    """Heartbeats for the nodes in ``epochs`` until ``done`` holds for the image."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for node_id, epoch in epochs.items():
            controller.heartbeat(node_id, epoch)
        image = controller.image()
        if done(image):
            return image
        assert time.monotonic() < deadline, "the controller did not get there in time"
        time.sleep(HEARTBEAT_EVERY_S)


def _alter_isr(
    controller: InProcessController,
    node_id: int,
    epoch: int,
    partition: metadata_pb2.PartitionRecord,
    isr: Iterable[int],
    partition_epoch: int | None = None,
) -> controller_pb2.AlterPartitionResult:
    response = controller.controller.AlterPartition(
        controller_pb2.AlterPartitionRequest(
            node_id=node_id,
            broker_epoch=epoch,
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic_id=partition.topic_id,
                    partition=partition.partition,
                    leader_epoch=partition.leader_epoch,
                    partition_epoch=(
                        partition.partition_epoch if partition_epoch is None else partition_epoch
                    ),
                    new_isr=list(isr),
                )
            ],
        ),
        timeout=10,
    )
    assert response.error_code == 0, response
    result: controller_pb2.AlterPartitionResult = response.partitions[0]
    return result


def test_a_registered_node_stays_fenced_until_it_has_applied_its_own_registration(
    controller: InProcessController,
) -> None:
    registration = controller.register(1)

    behind = controller.heartbeat(1, registration.broker_epoch, offset=0)
    caught_up = controller.heartbeat(1, registration.broker_epoch)

    assert registration.error_code == 0 and registration.broker_epoch > 0
    assert len(registration.cluster_id) == 22
    assert (behind.is_fenced, behind.is_caught_up) == (True, False)
    assert (caught_up.is_fenced, caught_up.is_caught_up) == (False, True)
    assert caught_up.lease_ms == SESSION_MS and caught_up.controller_epoch >= 1


def test_the_cluster_id_is_written_once_and_a_retried_write_does_not_replace_it() -> None:
    """RegisterBroker and the maintenance task both write the id at bootstrap; the one whose
    commit fails on the other's is decided again, on the image with the committed id. It
    used to write a second id, and a node that stored the first could not restart
    (INCONSISTENT_CLUSTER_ID; seen in CI)."""
    first = ChangeSet(ControllerImage())
    ensure_cluster_id(first)
    [record] = first.records
    assert len(record.cluster.cluster_id) == 22

    committed = ControllerImage()
    committed.apply(record)
    retried = ChangeSet(committed)
    ensure_cluster_id(retried)

    assert not retried, "the retried write changes nothing"
    assert committed.cluster_id == record.cluster.cluster_id


def test_heartbeats_with_a_stale_epoch_or_from_unknown_nodes_are_refused(
    controller: InProcessController,
) -> None:
    epoch = controller.live_node(1)

    stale = controller.heartbeat(1, epoch - 1)
    unknown = controller.heartbeat(7, 1)

    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert unknown.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_a_second_process_with_the_same_id_is_refused_until_the_first_ones_lease_expires(
    controller: InProcessController,
) -> None:
    first = controller.live_node(1)

    duplicate = controller.register(1, incarnation_id=str(uuid.uuid4()))
    time.sleep(SESSION_MS / 1000 + 0.3)
    replacement = controller.register(1, incarnation_id=str(uuid.uuid4()))

    assert duplicate.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert replacement.error_code == 0 and replacement.broker_epoch > first


def test_invalid_registrations_are_refused(controller: InProcessController) -> None:
    no_endpoint = controller.controller.RegisterBroker(
        controller_pb2.RegisterBrokerRequest(
            node_id=5, incarnation_id="x", role=common_pb2.NODE_ROLE_STORAGE_NODE
        ),
        timeout=10,
    )
    controller.register(1)
    other_cluster = controller.controller.RegisterBroker(
        controller_pb2.RegisterBrokerRequest(
            node_id=6,
            incarnation_id="y",
            role=common_pb2.NODE_ROLE_STORAGE_NODE,
            endpoints=[common_pb2.Endpoint(listener="GRPC", host="h", port=1)],
            cluster_id="some-other-cluster",
        ),
        timeout=10,
    )

    assert no_endpoint.error_code == ErrorCode.INVALID_REGISTRATION
    assert other_cluster.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert set(controller.image().brokers) == {1}


def test_an_expired_lease_fences_the_node_and_moves_all_its_leaderships_in_one_change(
    controller: InProcessController,
) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2, 3)}
    _create(controller, NewTopic("moving", num_partitions=6, replication_factor=3))
    before = controller.image()
    led_by_1 = [p for p in _partitions(before, "moving") if p.leader == 1]
    stream = watch(controller, before.offset)

    survivors = {2: epochs[2], 3: epochs[3]}
    after = _keep_alive_until(controller, survivors, lambda image: image.brokers[1].fenced)

    stream.cancel()
    assert led_by_1
    for old, new in zip(_partitions(before, "moving"), _partitions(after, "moving"), strict=True):
        assert 1 not in new.isr
        if old.leader == 1:
            assert new.leader in (2, 3) and new.leader_epoch == old.leader_epoch + 1
        else:
            assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch)
    fencing = next(
        message
        for message in _deltas(controller, before.offset)
        if any(r.WhichOneof("record") == "broker" and r.broker.fenced for r in message.records)
    )
    changed = [
        r.partition.partition for r in fencing.records if r.WhichOneof("record") == "partition"
    ]
    assert sorted(changed) == list(range(6)), "every ISR and leadership change in one message"


def _deltas(
    controller: InProcessController, after_offset: int
) -> Iterator[controller_pb2.WatchMetadataResponse]:
    stream = watch(controller, after_offset)
    try:
        for message in stream:
            if message.offset >= controller.snapshot().offset:
                yield message
                return
            yield message
    finally:
        stream.cancel()


def test_a_partition_whose_last_in_sync_replica_is_fenced_stays_offline_until_it_returns(
    controller: InProcessController,
) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2)}
    _create(controller, NewTopic("single", replica_assignment={0: [1]}))

    offline = _keep_alive_until(controller, {2: epochs[2]}, lambda image: image.brokers[1].fenced)
    back = _keep_alive_until(controller, epochs, lambda image: not image.brokers[1].fenced)

    (partition,) = _partitions(offline, "single")
    assert (partition.leader, list(partition.isr)) == (-1, [1])
    (partition,) = _partitions(back, "single")
    assert (partition.leader, list(partition.isr), partition.leader_epoch) == (1, [1], 2)


def test_unclean_election_elects_a_live_replica_outside_the_isr_when_the_topic_allows_it(
    controller: InProcessController,
) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2)}
    _create(
        controller,
        NewTopic(
            "lossy",
            replica_assignment={0: [1, 2]},
            configs={"unclean.leader.election.enable": "true"},
        ),
    )
    (partition,) = _partitions(controller.image(), "lossy")
    _alter_isr(controller, 1, epochs[1], partition, [1])

    after = _keep_alive_until(controller, {2: epochs[2]}, lambda image: image.brokers[1].fenced)

    (partition,) = _partitions(after, "lossy")
    assert (partition.leader, list(partition.isr)) == (2, [2])


def test_controlled_shutdown_moves_leadership_away_before_the_node_may_stop(
    controller: InProcessController,
) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2, 3)}
    _create(controller, NewTopic("handover", num_partitions=3, replication_factor=3))

    response = controller.heartbeat(1, epochs[1], shut_down=True)

    image = controller.image()
    assert response.should_shut_down and not response.error_code
    assert image.brokers[1].in_controlled_shutdown
    for partition in _partitions(image, "handover"):
        assert partition.leader in (2, 3) and 1 not in partition.isr


def test_alter_partition_applies_only_against_the_current_epochs(
    controller: InProcessController,
) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2, 3)}
    _create(controller, NewTopic("isr", replica_assignment={0: [1, 2, 3]}))
    (partition,) = _partitions(controller.image(), "isr")

    shrunk = _alter_isr(controller, 1, epochs[1], partition, [1, 2])
    stale = _alter_isr(controller, 1, epochs[1], partition, [1, 3])
    not_leader = _alter_isr(controller, 2, epochs[2], shrunk.state, [2])

    assert shrunk.error_code == 0
    assert (list(shrunk.state.isr), shrunk.state.partition_epoch) == ([1, 2], 1)
    assert stale.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert list(stale.state.isr) == [1, 2]
    assert not_leader.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    (partition,) = _partitions(controller.image(), "isr")
    assert (list(partition.isr), partition.partition_epoch) == ([1, 2], 1)


def test_a_fenced_node_cannot_be_added_back_to_an_isr(controller: InProcessController) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2)}
    _create(controller, NewTopic("guarded", replica_assignment={0: [1, 2]}))
    _keep_alive_until(controller, {1: epochs[1]}, lambda image: image.brokers[2].fenced)
    (partition,) = _partitions(controller.image(), "guarded")

    result = _alter_isr(controller, 1, epochs[1], partition, [1, 2])

    assert result.error_code == ErrorCode.INELIGIBLE_REPLICA
    assert list(result.state.isr) == [1]


def test_leadership_returns_to_the_preferred_replica_once_it_is_back_in_sync(
    controller: InProcessController,
) -> None:
    epochs = {node_id: controller.live_node(node_id) for node_id in (1, 2)}
    _create(controller, NewTopic("preferred", replica_assignment={0: [1, 2]}))
    _keep_alive_until(controller, {2: epochs[2]}, lambda image: image.brokers[1].fenced)
    _keep_alive_until(controller, epochs, lambda image: not image.brokers[1].fenced)
    (partition,) = _partitions(controller.image(), "preferred")
    assert (partition.leader, list(partition.isr)) == (2, [2])
    _alter_isr(controller, 2, epochs[2], partition, [2, 1])

    rebalanced = _keep_alive_until(
        controller, epochs, lambda image: _partitions(image, "preferred")[0].leader == 1
    )

    assert _partitions(rebalanced, "preferred")[0].leader_epoch == partition.leader_epoch + 1


def test_producer_id_blocks_never_overlap(controller: InProcessController) -> None:
    epoch = controller.live_node(1)
    request = controller_pb2.AllocateProducerIdsRequest(node_id=1, broker_epoch=epoch)

    blocks = [controller.controller.AllocateProducerIds(request, timeout=10) for _ in range(3)]
    stale = controller.controller.AllocateProducerIds(
        controller_pb2.AllocateProducerIdsRequest(node_id=1, broker_epoch=epoch + 5), timeout=10
    )

    assert [(b.first_producer_id, b.size) for b in blocks] == [
        (0, 1000),
        (1000, 1000),
        (2000, 1000),
    ]
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_offsets_partitions_are_spread_over_coordinators_and_move_when_one_is_fenced(
    tmp_path: Path,
) -> None:
    settings = {
        "broker.session.timeout.ms": str(SESSION_MS),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
    }
    with InProcessController(tmp_path, settings) as controller:
        storage = controller.live_node(1)
        coordinators = {}
        for node_id in (2001, 2002):
            registration = controller.register(node_id, role=common_pb2.NODE_ROLE_GROUP_COORDINATOR)
            coordinators[node_id] = registration.broker_epoch
            controller.heartbeat(node_id, registration.broker_epoch)

        spread = _keep_alive_until(
            controller,
            {1: storage, **coordinators},
            lambda image: (
                image.topic_by_name("__consumer_offsets") is not None
                and sorted(c.coordinator_id for c in image.coordinators.values())
                == [2001, 2001, 2002, 2002]
            ),
        )
        moved = _keep_alive_until(
            controller,
            {1: storage, 2001: coordinators[2001]},
            lambda image: {c.coordinator_id for c in image.coordinators.values()} == {2001},
        )

    topic = spread.topic_by_name("__consumer_offsets")
    assert topic is not None and topic.internal
    assert spread.resource_configs(2, "__consumer_offsets")["cleanup.policy"] == "compact"
    for index, record in moved.coordinators.items():
        before = spread.coordinators[index]
        expected = before.coordinator_epoch + (1 if before.coordinator_id == 2002 else 0)
        assert record.coordinator_epoch == expected


def test_watch_resumes_after_an_offset_and_sends_a_snapshot_when_the_offset_is_too_old(
    tmp_path: Path,
) -> None:
    with InProcessController(tmp_path, {"metadata.watch.retained.records": "4"}) as controller:
        controller.live_node(1)
        start = controller.snapshot().offset
        _create(controller, NewTopic("w1", 1, 1))
        _create(controller, NewTopic("w2", 1, 1))
        end = controller.snapshot().offset

        resumed = watch(controller, start)
        first = next(iter(resumed))
        resumed.cancel()
        too_old = watch(controller, 0)
        fallback = next(iter(too_old))
        too_old.cancel()

    assert (start, end) == (2, 6), "cluster, registration, unfencing; then two topics"
    assert not first.snapshot and first.offset == end
    assert [r.WhichOneof("record") for r in first.records] == ["topic", "partition"] * 2
    assert fallback.snapshot and fallback.offset == end
    assert {r.topic.name for r in fallback.records if r.WhichOneof("record") == "topic"} == {
        "w1",
        "w2",
    }


def test_transaction_state_is_created_like_the_offsets_topic_once_enough_nodes_live(
    tmp_path: Path,
) -> None:
    settings = {
        "broker.session.timeout.ms": str(SESSION_MS),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "2",
        "transaction.state.log.replication.factor": "2",
        "transaction.state.log.num.partitions": "3",
        "transaction.state.log.min.isr": "3",
        "transaction.state.log.segment.bytes": "1048576",
    }
    with InProcessController(tmp_path, settings) as controller:
        first = controller.live_node(1)
        # The same maintenance pass decides both topics: once the offsets topic exists, the
        # transaction state was refused for want of a second storage node.
        alone = _keep_alive_until(
            controller,
            {1: first},
            lambda image: image.topic_by_name("__consumer_offsets") is not None,
        )
        second = controller.live_node(2)
        both = _keep_alive_until(
            controller,
            {1: first, 2: second},
            lambda image: image.topic_by_name("__transaction_state") is not None,
        )

    assert alone.topic_by_name("__transaction_state") is None
    topic = both.topic_by_name("__transaction_state")
    assert topic is not None and topic.internal
    partitions = both.topic_partitions(topic.topic_id)
    assert len(partitions) == 3
    assert all(len(p.replicas) == 2 for p in partitions.values())
    configs = both.resource_configs(2, "__transaction_state")
    assert configs["cleanup.policy"] == "compact"
    assert configs["segment.bytes"] == "1048576"
    # Capped at the replication factor: 3 of 2 replicas could never be in sync.
    assert configs["min.insync.replicas"] == "2"
