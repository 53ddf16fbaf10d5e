"""Every process reads the cluster metadata the same way: one recorded WatchMetadata stream (a
snapshot, deltas with the odd cases, a snapshot that replaces everything, a delta after it) is
fed to the controller's image, the storage node's view, the gateway's Kafka view and the group
coordinator's metadata, and after every update each must give the same answers, which at the
checkpoints are the reference semantics written out (brook/metadata/image.py):

- a partition record for a topic the image lacks is ignored;
- remove_broker with a stale broker epoch is ignored;
- a topic re-created under its name with a new id drops the old topic, partitions and configs;
- topic configs may be set before their topic and go with it;
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

from brook.metadata.delta import MetadataUpdate
from brook.metadata.image import BROKER, TOPIC, MetadataImage
from brook.rpc.addresses import listener_address
from brook.v1 import common_pb2, controller_pb2, metadata_pb2

OFFSETS = "__consumer_offsets"
ORDERS, ORDERS_AGAIN = b"orders".ljust(16, b"-"), b"orders-2".ljust(16, b"-")
LATER, LATER_AGAIN = b"later".ljust(16, b"-"), b"later-2".ljust(16, b"-")
OFFSETS_ID, GHOST, FRESH = b"offsets".ljust(16, b"-"), b"ghost".ljust(16, b"-"), b"f" * 16
# Every topic name the stream mentions, whether or not it exists at a given point.
TOPIC_NAMES = ("orders", "later", "ghost", "fresh", OFFSETS)
GATEWAY, COORDINATOR, OTHER_COORDINATOR = 3001, 2001, 2002
Record = metadata_pb2.MetadataRecord


def _broker(
    node_id: int,
    epoch: int,
    role: common_pb2.NodeRole = common_pb2.NODE_ROLE_STORAGE_NODE,
    **fields: Any,
) -> Record:
    listener = "PLAINTEXT" if role == common_pb2.NODE_ROLE_GATEWAY else "GRPC"
    endpoint = common_pb2.Endpoint(listener=listener, host="::1", port=9000 + node_id % 1000)
    return Record(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id, broker_epoch=epoch, role=role, endpoints=[endpoint], **fields
        )
    )


def _topic(name: str, topic_id: bytes, internal: bool = False) -> Record:
    return Record(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id, internal=internal))


def _partition(
    name: str, topic_id: bytes, index: int, replicas: list[int], epoch: int = 0
) -> Record:
    return Record(
        partition=metadata_pb2.PartitionRecord(
            topic_id=topic_id,
            topic=name,
            partition=index,
            replicas=replicas,
            isr=replicas,
            leader=replicas[0],
            leader_epoch=epoch,
            partition_epoch=epoch,
        )
    )


def _config(resource_type: int, resource: str, name: str, value: str | None) -> Record:
    config = metadata_pb2.ConfigRecord(resource_name=resource, name=name)
    config.resource_type = resource_type  # type: ignore[assignment]
    if value is not None:
        config.value = value
    return Record(config=config)


def _coordinator(index: int, node_id: int, epoch: int) -> Record:
    return Record(
        coordinator=metadata_pb2.CoordinatorRecord(
            offsets_partition=index, coordinator_id=node_id, coordinator_epoch=epoch
        )
    )


STREAM = (
    MetadataUpdate(
        True,
        10,
        (
            Record(cluster=metadata_pb2.ClusterRecord(cluster_id="c")),
            _broker(1, 5),
            _broker(2, 6),
            _broker(COORDINATOR, 7, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            _broker(GATEWAY, 8, common_pb2.NODE_ROLE_GATEWAY),
            _topic("orders", ORDERS),
            _partition("orders", ORDERS, 0, [1, 2]),
            _partition("orders", ORDERS, 1, [2, 1]),
            _topic(OFFSETS, OFFSETS_ID, internal=True),
            _partition(OFFSETS, OFFSETS_ID, 0, [1]),
            _partition(OFFSETS, OFFSETS_ID, 1, [2]),
            _config(TOPIC, "orders", "retention.ms", "1000"),
            _config(TOPIC, "later", "cleanup.policy", "compact"),  # before its topic
            _config(BROKER, "1", "log.retention.ms", "5"),
            _coordinator(0, COORDINATOR, 1),
            _coordinator(1, COORDINATOR, 1),
        ),
    ),
    MetadataUpdate(
        False,
        19,
        (
            _partition("ghost", GHOST, 0, [1]),  # no such topic: ignored
            Record(remove_broker=metadata_pb2.RemoveBrokerRecord(node_id=2, broker_epoch=5)),
            _broker(1, 9, fenced=True),
            _topic("later", LATER),
            _partition("later", LATER, 0, [2]),
            _config(TOPIC, "later", "retention.ms", "7"),  # after its topic
            _partition("orders", ORDERS, 0, [2, 1], epoch=1),
            _partition(OFFSETS, OFFSETS_ID, 0, [2], epoch=1),
            _broker(OTHER_COORDINATOR, 10, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            _coordinator(1, OTHER_COORDINATOR, 2),
        ),
    ),
    MetadataUpdate(
        False,
        27,
        (
            Record(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=ORDERS, name="orders")),
            _topic("orders", ORDERS_AGAIN),
            _partition("orders", ORDERS_AGAIN, 0, [1], epoch=0),
            _partition("orders", ORDERS, 1, [2, 1], epoch=3),  # of the deleted topic: ignored
            Record(remove_broker=metadata_pb2.RemoveBrokerRecord(node_id=2, broker_epoch=6)),
            _topic("later", LATER_AGAIN),  # re-created without a removal
            _config(BROKER, "1", "log.retention.ms", None),
            _config(BROKER, "", "log.segment.bytes", "1024"),
        ),
    ),
    MetadataUpdate(
        True,
        40,
        (
            Record(cluster=metadata_pb2.ClusterRecord(cluster_id="c")),
            _broker(1, 11),
            _broker(3, 12),
            _broker(OTHER_COORDINATOR, 10, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            _broker(GATEWAY, 8, common_pb2.NODE_ROLE_GATEWAY),
            _topic("fresh", FRESH),
            _partition("fresh", FRESH, 0, [3, 1]),
            _topic(OFFSETS, OFFSETS_ID, internal=True),
            _partition(OFFSETS, OFFSETS_ID, 0, [3], epoch=2),
            _partition(OFFSETS, OFFSETS_ID, 1, [1], epoch=1),
            _config(TOPIC, "fresh", "retention.ms", "9"),
            _coordinator(0, OTHER_COORDINATOR, 3),
            _coordinator(1, OTHER_COORDINATOR, 2),
        ),
    ),
    MetadataUpdate(
        False,
        41,
        (
            _partition("fresh", FRESH, 0, [1, 3], epoch=1),
            _broker(3, 12, fenced=True),
        ),
    ),
)

Answers = dict[str, Any]


def _image_answers(image: MetadataImage) -> Answers:
    """The reference answers, read from the protobuf image."""
    return {
        "brokers": {
            n: (b.broker_epoch, b.role, b.fenced, listener_address(b.endpoints))
            for n, b in image.brokers.items()
        },
        "topics": {name: image.topic_ids[name] for name in image.topic_ids},
        "partitions": {
            (p.topic, p.partition): (
                p.topic_id,
                p.leader,
                p.leader_epoch,
                tuple(p.replicas),
                tuple(p.isr),
            )
            for p in image.all_partitions()
        },
        "topic_configs": {n: image.resource_configs(TOPIC, n) for n in TOPIC_NAMES},
        "coordinators": {
            i: (c.coordinator_id, c.coordinator_epoch) for i, c in image.coordinators.items()
        },
        "offsets_leaders": {
            p.partition: (
                p.leader,
                p.leader_epoch,
                listener_address(image.brokers[p.leader].endpoints),
            )
            for p in image.all_partitions()
            if p.topic == OFFSETS and p.leader in image.brokers
        },
    }


def _view_answers(view: MetadataView | ClusterImage) -> Answers:
    """The answers of a typed view (the storage node's, the gateway's)."""
    brokers = view.nodes if isinstance(view, ClusterImage) else view.brokers
    partitions = {
        (p.topic, p.partition): (p.topic_id, p.leader, p.leader_epoch, p.replicas, p.isr)
        for topic in view.topics.values()
        for p in topic.partitions.values()
    }
    return {
        "brokers": {n: (b.broker_epoch, b.role, b.fenced, b.address()) for n, b in brokers.items()},
        "topics": {name: topic.topic_id for name, topic in view.topics.items()},
        "partitions": partitions,
        "topic_configs": {n: dict(view.topic_configs(n)) for n in TOPIC_NAMES},
        "offsets_leaders": {
            index: (leader, epoch, brokers[leader].address())
            for (topic, index), (_, leader, epoch, _, _) in partitions.items()
            if topic == OFFSETS and leader in brokers
        },
    }


def _coordinator_answers(metadata: ClusterMetadata) -> Answers:
    """What the coordinator acts on: __consumer_offsets leaders and addresses, its directory."""
    leaders = {}
    for index in range(metadata.partition_count):
        route = metadata.leader(index)
        if route is not None:
            info, address = route
            leaders[index] = (info.leader, info.leader_epoch, address)
    directory = metadata.directory
    coordinators = {}
    for index in range(4):
        owner = directory.owner(index)
        if owner is not None:
            coordinators[index] = (owner.node_id, owner.coordinator_epoch)
            hint = directory.hint(index)
            assert listener_address(hint.endpoints) == metadata.address_of(owner.node_id)
    return {"offsets_leaders": leaders, "coordinators": coordinators}


class Consumers:
    def __init__(self) -> None:
        self.controller = ControllerImage()
        self.storage = MetadataView()
        self.gateway = ClusterImage()
        self.coordinator = ClusterMetadata(CoordinatorDirectory())

    def apply(self, update: MetadataUpdate) -> None:
        self.controller.replay(update)
        self.storage.apply(update)
        self.gateway.apply(update.snapshot, update.offset, update.records)
        self.coordinator.apply(
            controller_pb2.WatchMetadataResponse(
                snapshot=update.snapshot, offset=update.offset, records=update.records
            )
        )

    def answers(self) -> Answers:
        """The reference answers, after checking that every consumer gives the same."""
        reference = _image_answers(self.controller)
        for name, answers in (
            ("storage node", _view_answers(self.storage)),
            ("gateway", _view_answers(self.gateway)),
            ("coordinator", _coordinator_answers(self.coordinator)),
        ):
            for section, answer in answers.items():
                assert answer == reference[section], f"{name} differs on {section}"
        # The Kafka view: the live storage nodes, or the gateways themselves while none is.
        live = self.controller.live_brokers() or self.controller.live_brokers(
            common_pb2.NODE_ROLE_GATEWAY
        )
        assert [b.node_id for b in self.gateway.kafka_brokers()] == live
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
        for view in (consumers.storage, consumers.gateway, consumers.coordinator):
            assert view.image.digest() == image.digest()
