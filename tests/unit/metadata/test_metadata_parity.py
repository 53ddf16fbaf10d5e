"""Every process reads the cluster metadata the same way: one recorded WatchMetadata stream (a
snapshot, deltas with the odd cases, a snapshot that replaces everything, a delta after it) is
fed to the controller's image, the storage node's view, the gateway's Kafka view and the group
coordinator's metadata, and after every update each must give the same answers through the
reads its service makes (the controller's image reads; the storage node's view reads and the
partitions its replica manager holds from ``replica_changes``; the gateway's Kafka brokers,
topics by name and id, partitions; the coordinator's leaders, addresses and directory hints),
which at the checkpoints are the reference semantics written out (brook/metadata/image.py):

- a partition record for a topic the image lacks is ignored;
- remove_broker with a stale broker epoch is ignored;
- a topic re-created under its name with a new id drops the old topic, partitions and configs;
- topic configs may be set before their topic and go with it;
- a node's removal takes its endpoints out of coordinator hints;
- a snapshot replaces everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from brook_controller.image import ControllerImage
from brook_gateway.cluster_view import ClusterImage
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_storage_node.metadata_view import MetadataView
from metadata_support import (
    Record,
    broker,
    config,
    coordinator,
    partition,
    remove_broker,
    remove_topic,
    topic,
)

from brook.metadata.cache import MetadataCache
from brook.metadata.delta import MetadataUpdate
from brook.metadata.image import BROKER, TOPIC, MetadataImage
from brook.metadata.info import PartitionInfo
from brook.rpc.addresses import listener_address
from brook.v1 import common_pb2, controller_pb2, metadata_pb2

OFFSETS = "__consumer_offsets"
ORDERS, ORDERS_AGAIN = b"orders".ljust(16, b"-"), b"orders-2".ljust(16, b"-")
LATER, LATER_AGAIN = b"later".ljust(16, b"-"), b"later-2".ljust(16, b"-")
OFFSETS_ID, GHOST, FRESH = b"offsets".ljust(16, b"-"), b"ghost".ljust(16, b"-"), b"f" * 16
# Every topic name the stream mentions, whether or not it exists at a given point.
TOPIC_NAMES = ("orders", "later", "ghost", "fresh", OFFSETS)
GATEWAY, COORDINATOR, OTHER_COORDINATOR = 3001, 2001, 2002


STREAM = (
    MetadataUpdate(
        True,
        10,
        (
            Record(cluster=metadata_pb2.ClusterRecord(cluster_id="c")),
            broker(1, 5),
            broker(2, 6),
            broker(COORDINATOR, 7, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            broker(GATEWAY, 8, common_pb2.NODE_ROLE_GATEWAY),
            topic("orders", ORDERS),
            partition("orders", ORDERS, 0, [1, 2]),
            partition("orders", ORDERS, 1, [2, 1]),
            topic(OFFSETS, OFFSETS_ID, internal=True),
            partition(OFFSETS, OFFSETS_ID, 0, [1]),
            partition(OFFSETS, OFFSETS_ID, 1, [2]),
            config(TOPIC, "orders", "retention.ms", "1000"),
            config(TOPIC, "later", "cleanup.policy", "compact"),  # before its topic
            config(BROKER, "1", "log.retention.ms", "5"),
            coordinator(0, COORDINATOR, 1),
            coordinator(1, COORDINATOR, 1),
        ),
    ),
    MetadataUpdate(
        False,
        19,
        (
            partition("ghost", GHOST, 0, [1]),  # no such topic: ignored
            remove_broker(2, 5),
            broker(1, 9, fenced=True),
            topic("later", LATER),
            partition("later", LATER, 0, [2]),
            config(TOPIC, "later", "retention.ms", "7"),  # after its topic
            partition("orders", ORDERS, 0, [2, 1], epoch=1),
            partition(OFFSETS, OFFSETS_ID, 0, [2], epoch=1),
            broker(OTHER_COORDINATOR, 10, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            coordinator(1, OTHER_COORDINATOR, 2),
        ),
    ),
    MetadataUpdate(
        False,
        27,
        (
            remove_topic("orders", ORDERS),
            topic("orders", ORDERS_AGAIN),
            partition("orders", ORDERS_AGAIN, 0, [1], epoch=0),
            partition("orders", ORDERS, 1, [2, 1], epoch=3),  # of the deleted topic: ignored
            remove_broker(2, 6),
            remove_broker(COORDINATOR, 7),  # still owns offsets partition 0
            topic("later", LATER_AGAIN),  # re-created without a removal
            config(BROKER, "1", "log.retention.ms", None),
            config(BROKER, "", "log.segment.bytes", "1024"),
        ),
    ),
    MetadataUpdate(
        True,
        40,
        (
            Record(cluster=metadata_pb2.ClusterRecord(cluster_id="c")),
            broker(1, 11),
            broker(3, 12),
            broker(OTHER_COORDINATOR, 10, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            broker(GATEWAY, 8, common_pb2.NODE_ROLE_GATEWAY),
            topic("fresh", FRESH),
            partition("fresh", FRESH, 0, [3, 1]),
            topic(OFFSETS, OFFSETS_ID, internal=True),
            partition(OFFSETS, OFFSETS_ID, 0, [3], epoch=2),
            partition(OFFSETS, OFFSETS_ID, 1, [1], epoch=1),
            config(TOPIC, "fresh", "retention.ms", "9"),
            coordinator(0, OTHER_COORDINATOR, 3),
            coordinator(1, OTHER_COORDINATOR, 2),
        ),
    ),
    MetadataUpdate(
        False,
        41,
        (
            partition("fresh", FRESH, 0, [1, 3], epoch=1),
            broker(3, 12, fenced=True),
        ),
    ),
)

Answers = dict[str, Any]


def _address(endpoints: Any) -> str | None:
    return listener_address(endpoints)


def _controller_answers(image: ControllerImage) -> Answers:
    """The reference: the controller's image, through the reads the controller makes."""
    topics = {name: t.topic_id for name in TOPIC_NAMES if (t := image.topic_by_name(name))}
    partitions = {}
    for name, topic_id in topics.items():
        for index in image.topic_partitions(topic_id):
            p = image.partition(topic_id, index)
            assert p is not None
            partitions[(name, index)] = (
                p.topic_id,
                p.leader,
                p.leader_epoch,
                tuple(p.replicas),
                tuple(p.isr),
            )
    brokers = {
        n: (b.broker_epoch, b.role, b.fenced, _address(b.endpoints))
        for n, b in image.brokers.items()
    }
    return {
        "brokers": brokers,
        "topics": topics,
        "partitions": partitions,
        "topic_configs": {n: image.resource_configs(TOPIC, n) for n in TOPIC_NAMES},
        "coordinators": {
            i: (c.coordinator_id, c.coordinator_epoch) for i, c in image.coordinators.items()
        },
        "hints": {
            i: brokers[c.coordinator_id][3] if c.coordinator_id in brokers else None
            for i, c in image.coordinators.items()
        },
        "offsets_leaders": {
            index: (leader, epoch, brokers[leader][3])
            for (name, index), (_, leader, epoch, _, _) in partitions.items()
            if name == OFFSETS and leader in brokers
        },
        "kafka_brokers": image.live_brokers() or image.live_brokers(common_pb2.NODE_ROLE_GATEWAY),
    }


def _cache_answers(view: MetadataCache) -> Answers:
    """The typed reads a request handler makes: brokers by id, topics by name and by id,
    partitions by (name, index), topic configs."""
    topics = {}
    partitions = {}
    for name in TOPIC_NAMES:
        info = view.topic(name)
        if info is None:
            continue
        by_id = view.topic_by_id(info.topic_id)
        assert by_id is not None and by_id.name == name
        topics[name] = info.topic_id
        for index in info.partitions:
            p = view.partition(name, index)
            assert p is not None and p.key == (name, index)
            partitions[(name, index)] = (p.topic_id, p.leader, p.leader_epoch, p.replicas, p.isr)
    return {
        "brokers": {
            n: (b.broker_epoch, b.role, b.fenced, b.address()) for n, b in view.brokers.items()
        },
        "topics": topics,
        "partitions": partitions,
        "topic_configs": {n: dict(view.topic_configs(n)) for n in TOPIC_NAMES},
    }


def _gateway_answers(gateway: ClusterImage) -> Answers:
    answers = _cache_answers(gateway)
    answers["kafka_brokers"] = [b.node_id for b in gateway.kafka_brokers()]
    for node_id, node in gateway.nodes.items():
        expected = node.address() if node.role == common_pb2.NODE_ROLE_STORAGE_NODE else None
        assert gateway.storage_address(node_id) == expected
    return answers


def _storage_answers(storage: MetadataView, replicas: Mapping[tuple[str, int], Any]) -> Answers:
    """The view's reads, and the partitions the replica manager holds after taking up every
    update's ``replica_changes`` (``everything()`` after the first)."""
    answers = _cache_answers(storage)
    answers["replicas"] = {
        key: (p.topic_id, p.leader, p.leader_epoch, p.replicas, p.isr)
        for key, p in replicas.items()
    }
    return answers


def _coordinator_answers(metadata: ClusterMetadata) -> Answers:
    """What the coordinator acts on: __consumer_offsets leaders and addresses, its directory
    (owners, and the endpoints a NOT_COORDINATOR hint carries)."""
    leaders = {}
    for index in range(metadata.partition_count):
        route = metadata.leader(index)
        if route is not None:
            info, address = route
            leaders[index] = (info.leader, info.leader_epoch, address)
    directory = metadata.directory
    coordinators = {}
    hints = {}
    for index in range(4):
        owner = directory.owner(index)
        if owner is not None:
            coordinators[index] = (owner.node_id, owner.coordinator_epoch)
            hint = directory.hint(index)
            hints[index] = _address(hint.endpoints) if hint.endpoints else None
    return {"offsets_leaders": leaders, "coordinators": coordinators, "hints": hints}


class Consumers:
    def __init__(self) -> None:
        self.controller = ControllerImage()
        self.storage = MetadataView()
        self.gateway = ClusterImage()
        self.coordinator = ClusterMetadata(CoordinatorDirectory())
        # What the storage node's replica manager holds, from replica_changes alone.
        self.replicas: dict[tuple[str, int], PartitionInfo] = {}

    def apply(self, update: MetadataUpdate) -> None:
        first = self.storage.offset < 0
        self.controller.replay(update)
        delta = self.storage.apply(update)
        changes = self.storage.everything() if first else self.storage.replica_changes(delta)
        for key in changes.removed_partitions:
            del self.replicas[key]
        for info in changes.changed_partitions:
            self.replicas[info.key] = info
        self.gateway.apply(update.snapshot, update.offset, update.records)
        self.coordinator.apply(
            controller_pb2.WatchMetadataResponse(
                snapshot=update.snapshot, offset=update.offset, records=update.records
            )
        )

    def answers(self) -> Answers:
        """The reference answers, after checking that every consumer gives the same."""
        reference = _controller_answers(self.controller)
        reference["replicas"] = reference["partitions"]
        for name, answers in (
            ("storage node", _storage_answers(self.storage, self.replicas)),
            ("gateway", _gateway_answers(self.gateway)),
            ("coordinator", _coordinator_answers(self.coordinator)),
        ):
            for section, answer in answers.items():
                assert answer == reference[section], f"{name} differs on {section}"
        return reference


def _partitions(answers: Answers) -> Mapping[tuple[str, int], tuple[bytes, int]]:
    return {key: (value[0], value[1]) for key, value in answers["partitions"].items()}


def test_every_consumer_answers_the_same_after_every_update_of_one_stream() -> None:
    consumers = Consumers()
    checkpoints: list[Callable[[Answers], None]] = [
        _after_first_snapshot,
        _after_odd_delta,
        _after_recreations,
        _after_replacing_snapshot,
        _after_delta_on_the_new_snapshot,
    ]
    for update, check in zip(STREAM, checkpoints, strict=True):
        consumers.apply(update)
        check(consumers.answers())
        assert consumers.storage.offset == consumers.gateway.offset == update.offset
        assert consumers.coordinator.offset == consumers.controller.offset == update.offset


def _after_first_snapshot(answers: Answers) -> None:
    assert set(answers["brokers"]) == {1, 2, COORDINATOR, GATEWAY}
    assert answers["brokers"][1] == (5, common_pb2.NODE_ROLE_STORAGE_NODE, False, "[::1]:9001")
    assert _partitions(answers) == {
        ("orders", 0): (ORDERS, 1),
        ("orders", 1): (ORDERS, 2),
        (OFFSETS, 0): (OFFSETS_ID, 1),
        (OFFSETS, 1): (OFFSETS_ID, 2),
    }
    assert answers["topic_configs"]["later"] == {"cleanup.policy": "compact"}
    assert answers["coordinators"] == {0: (COORDINATOR, 1), 1: (COORDINATOR, 1)}


def _after_odd_delta(answers: Answers) -> None:
    brokers = answers["brokers"]
    assert set(brokers) == {1, 2, COORDINATOR, OTHER_COORDINATOR, GATEWAY}  # 2 stays: stale
    assert brokers[1][:3] == (9, common_pb2.NODE_ROLE_STORAGE_NODE, True)
    assert "ghost" not in answers["topics"]
    assert ("ghost", 0) not in answers["partitions"]
    assert answers["partitions"][("orders", 0)] == (ORDERS, 2, 1, (2, 1), (2, 1))
    assert answers["topic_configs"]["later"] == {"cleanup.policy": "compact", "retention.ms": "7"}
    assert answers["offsets_leaders"] == {0: (2, 1, "[::1]:9002"), 1: (2, 0, "[::1]:9002")}
    assert answers["coordinators"] == {0: (COORDINATOR, 1), 1: (OTHER_COORDINATOR, 2)}


def _after_recreations(answers: Answers) -> None:
    assert 2 not in answers["brokers"]
    assert answers["offsets_leaders"] == {}  # led by the removed node 2: no route
    assert answers["topics"] == {"orders": ORDERS_AGAIN, "later": LATER_AGAIN, OFFSETS: OFFSETS_ID}
    assert _partitions(answers) == {
        ("orders", 0): (ORDERS_AGAIN, 1),
        (OFFSETS, 0): (OFFSETS_ID, 2),
        (OFFSETS, 1): (OFFSETS_ID, 2),
    }
    assert answers["topic_configs"]["orders"] == {}
    assert answers["topic_configs"]["later"] == {}
    assert answers["coordinators"][0] == (COORDINATOR, 1)
    assert answers["hints"] == {0: None, 1: "[::1]:9002"}  # no endpoints for a removed node


def _after_replacing_snapshot(answers: Answers) -> None:
    assert set(answers["brokers"]) == {1, 3, OTHER_COORDINATOR, GATEWAY}
    assert answers["topics"] == {"fresh": FRESH, OFFSETS: OFFSETS_ID}
    assert answers["offsets_leaders"] == {0: (3, 2, "[::1]:9003"), 1: (1, 1, "[::1]:9001")}
    assert answers["topic_configs"]["fresh"] == {"retention.ms": "9"}
    assert answers["coordinators"] == {0: (OTHER_COORDINATOR, 3), 1: (OTHER_COORDINATOR, 2)}


def _after_delta_on_the_new_snapshot(answers: Answers) -> None:
    assert answers["partitions"][("fresh", 0)] == (FRESH, 1, 1, (1, 3), (1, 3))
    assert answers["brokers"][3][2] is True


def test_the_storage_node_is_told_the_replicas_a_topic_recreation_removes_and_adds() -> None:
    view = MetadataView()
    view.apply(STREAM[0])
    view.apply(STREAM[1])

    changes = view.replica_changes(view.apply(STREAM[2]))

    assert sorted(changes.removed_partitions) == [("later", 0), ("orders", 0), ("orders", 1)]
    assert [(p.key, p.topic_id) for p in changes.changed_partitions] == [
        (("orders", 0), ORDERS_AGAIN)
    ]
    assert changes.changed_topic_configs == frozenset({"orders", "later"})


def test_the_image_round_trips_through_its_records_at_every_step() -> None:
    consumers = Consumers()
    for update in STREAM:
        consumers.apply(update)
        image = consumers.controller
        rebuilt = MetadataImage.from_records(image.records(), image.offset)
        assert rebuilt.digest() == image.digest()
        assert list(rebuilt.records()) == list(image.records())
