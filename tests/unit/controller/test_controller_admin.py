"""Topic administration through AdminService, against a real (single-voter) controller."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from brook_controller.image import TOPIC
from controller_support import InProcessController, watch

from brook.client.admin import Admin, AlterConfigOp, ConfigResource, NewTopic
from brook.client.types import TopicPartition
from brook.errors import ErrorCode
from brook.v1 import admin_pb2, admin_pb2_grpc


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessController]:
    """One controller for the module (each test uses topic names of its own). Leases outlast
    the module, and the internal topics need more storage nodes than there are, so nothing
    changes in the background while a test compares states."""
    settings = {
        "offsets.topic.replication.factor": "4",
        "transaction.state.log.replication.factor": "4",
        "broker.session.timeout.ms": "600000",
    }
    with InProcessController(tmp_path_factory.mktemp("controller"), settings) as running:
        for node_id, rack in ((1, "a"), (2, "b"), (3, "c")):
            running.live_node(node_id, rack=rack)
        yield running


@pytest.fixture
def admin(controller: InProcessController) -> Iterator[Admin]:
    with Admin(controller.address, default_api_timeout_ms=10_000) as client:
        yield client


def _code(error: Exception | None) -> ErrorCode | None:
    return getattr(error, "code", None)


def test_created_topics_are_described_with_balanced_leaders_and_full_isrs(
    controller: InProcessController, admin: Admin
) -> None:
    assert admin.create_topics(
        [NewTopic("orders", num_partitions=6, replication_factor=3), NewTopic("audit", 3, 3)]
    ) == {"orders": None, "audit": None}

    topic = admin.describe_topics(["orders"])["orders"]

    assert [p.partition for p in topic.partitions] == list(range(6))
    led: dict[int, int] = {}
    for partition in controller.image().all_partitions():
        led[partition.leader] = led.get(partition.leader, 0) + 1
    assert max(led.values()) - min(led.values()) <= 1, led
    for partition in topic.partitions:
        assert len(set(partition.replicas)) == 3
        assert partition.leader == partition.replicas[0]
        assert set(partition.isr) == set(partition.replicas)
        assert partition.leader_epoch == 0


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (NewTopic("bad name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (NewTopic("..", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (NewTopic("x" * 250, 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (NewTopic("", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (NewTopic("ok", 1, 4), ErrorCode.INVALID_REPLICATION_FACTOR),
        (NewTopic("ok", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (NewTopic("ok", 0, 1), ErrorCode.INVALID_PARTITIONS),
        (NewTopic("ok", 1, 1, configs={"retention.mss": "1"}), ErrorCode.INVALID_CONFIG),
        (NewTopic("ok", 1, 1, configs={"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
        (NewTopic("ok", replica_assignment={0: [1, 1]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (NewTopic("ok", replica_assignment={0: [1], 2: [2]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (NewTopic("ok", replica_assignment={0: [9]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (NewTopic("__consumer_offsets", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    ],
    ids=lambda value: value.name if isinstance(value, ErrorCode) else None,
)
def test_invalid_topic_is_refused_with_kafkas_code_and_changes_nothing(
    controller: InProcessController, admin: Admin, topic: NewTopic, code: ErrorCode
) -> None:
    before = controller.snapshot()

    errors = admin.create_topics([topic])

    assert _code(errors[topic.name]) is code, errors
    after = controller.snapshot()
    assert after.offset == before.offset
    assert list(after.records) == list(before.records)


def test_existing_and_colliding_names_are_refused_while_valid_topics_of_the_request_commit(
    controller: InProcessController, admin: Admin
) -> None:
    assert admin.create_topics([NewTopic("metrics.cpu", 1, 1)]) == {"metrics.cpu": None}

    errors = admin.create_topics(
        [NewTopic("metrics.cpu", 1, 1), NewTopic("metrics_cpu", 1, 1), NewTopic("fresh", 2, 2)]
    )

    assert _code(errors["metrics.cpu"]) is ErrorCode.TOPIC_ALREADY_EXISTS
    assert _code(errors["metrics_cpu"]) is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert errors["fresh"] is None
    assert {"fresh", "metrics.cpu"} <= set(admin.list_topics())
    assert "metrics_cpu" not in admin.list_topics()


def test_validate_only_reports_without_creating(admin: Admin) -> None:
    assert admin.create_topics([NewTopic("dry", 3, 3)], validate_only=True) == {"dry": None}

    assert "dry" not in admin.list_topics()


def test_explicit_assignment_places_replicas_as_given(admin: Admin) -> None:
    errors = admin.create_topics([NewTopic("placed", replica_assignment={0: [3, 1], 1: [2, 3]})])

    assert errors == {"placed": None}
    partitions = admin.describe_topics(["placed"])["placed"].partitions
    assert [(p.replicas, p.leader) for p in partitions] == [((3, 1), 3), ((2, 3), 2)]


def test_deleted_topic_is_gone_with_its_configs_and_unknown_topics_are_reported(
    controller: InProcessController, admin: Admin
) -> None:
    admin.create_topics([NewTopic("doomed", 2, 2, configs={"retention.ms": "1000"})])

    errors = admin.delete_topics(["doomed", "never-was"])

    assert errors["doomed"] is None
    assert _code(errors["never-was"]) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    image = controller.image()
    assert image.topic_by_name("doomed") is None
    assert all(p.topic != "doomed" for p in image.all_partitions())
    assert (TOPIC, "doomed") not in image.configs


def test_added_partitions_are_placed_and_a_smaller_count_is_refused(admin: Admin) -> None:
    admin.create_topics([NewTopic("growing", 2, 3)])

    assert admin.create_partitions({"growing": 5}) == {"growing": None}
    errors = admin.create_partitions({"growing": 4, "absent": 2})

    partitions = admin.describe_topics(["growing"])["growing"].partitions
    assert len(partitions) == 5 and all(len(p.replicas) == 3 for p in partitions)
    assert _code(errors["growing"]) is ErrorCode.INVALID_PARTITIONS
    assert _code(errors["absent"]) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_topic_overrides_win_over_node_defaults_and_invalid_changes_apply_nothing(
    admin: Admin,
) -> None:
    admin.create_topics([NewTopic("tuned", 1, 1, configs={"retention.ms": "60000"})])
    topic = ConfigResource.topic("tuned")
    defaults = ConfigResource.node()

    assert admin.alter_configs({defaults: [("log.retention.ms", AlterConfigOp.SET, "5000")]}) == {
        defaults: None
    }
    rejected = admin.alter_configs(
        {
            topic: [
                ("segment.bytes", AlterConfigOp.SET, "1048576"),
                ("retention.ms", AlterConfigOp.SET, "never"),
            ]
        }
    )
    admin.alter_configs({topic: [("cleanup.policy", AlterConfigOp.APPEND, "compact")]})

    assert _code(rejected[topic]) is ErrorCode.INVALID_CONFIG
    configs = admin.describe_configs([topic], include_synonyms=True)[topic]
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "60000",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert [s[0] for s in configs["retention.ms"].synonyms] == [
        "retention.ms",
        "log.retention.ms",
        "retention.ms",
    ]
    assert configs["segment.bytes"].source == "DEFAULT_CONFIG"
    assert configs["cleanup.policy"].value == "delete,compact"

    admin.alter_configs({topic: [("retention.ms", AlterConfigOp.DELETE, None)]})

    inherited = admin.describe_configs([topic])[topic]["retention.ms"]
    assert (inherited.value, inherited.source) == ("5000", "DYNAMIC_DEFAULT_BROKER_CONFIG")


def test_many_resources_are_described_in_one_request(admin: Admin) -> None:
    names = [f"many-{i}" for i in range(5)]
    admin.create_topics([NewTopic(name, 1, 1) for name in names])
    resources = [ConfigResource.topic(name) for name in names]

    described = admin.describe_configs(resources)

    assert set(described) == set(resources)
    assert all(entries["retention.ms"].value for entries in described.values())


def test_node_replication_throttles_are_dynamic_node_configs_with_validated_values(
    admin: Admin,
) -> None:
    node = ConfigResource.node()
    rate = "follower.replication.throttled.rate"
    assert admin.alter_configs({node: [(rate, AlterConfigOp.SET, "1048576")]}) == {node: None}
    refused = admin.alter_configs({node: [(rate, AlterConfigOp.SET, "0")]})
    assert _code(refused[node]) is ErrorCode.INVALID_CONFIG

    entries = admin.describe_configs([node])[node]
    assert (entries[rate].value, entries[rate].source) == (
        "1048576",
        "DYNAMIC_DEFAULT_BROKER_CONFIG",
    )
    other = "leader.replication.throttled.rate"
    assert (entries[other].value, entries[other].source) == (str(2**63 - 1), "DEFAULT_CONFIG")

    admin.create_topics([NewTopic("throttled", 1, 1)])
    topic = ConfigResource.topic("throttled")
    listed = "leader.replication.throttled.replicas"
    assert admin.alter_configs({topic: [(listed, AlterConfigOp.SET, "0:1,0:2")]}) == {topic: None}
    assert admin.alter_configs({topic: [(listed, AlterConfigOp.SET, "*")]}) == {topic: None}
    bad = admin.alter_configs({topic: [(listed, AlterConfigOp.SET, "0-1")]})
    assert _code(bad[topic]) is ErrorCode.INVALID_CONFIG
    assert admin.describe_configs([topic])[topic][listed].value == "*"


def test_preferred_election_reports_when_it_is_not_needed(admin: Admin) -> None:
    admin.create_topics([NewTopic("led", 2, 2)])

    results = admin.elect_leaders([TopicPartition("led", 0), TopicPartition("led", 7)])

    assert _code(results[TopicPartition("led", 0)]) is ErrorCode.ELECTION_NOT_NEEDED
    assert _code(results[TopicPartition("led", 7)]) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_cluster_lists_nodes_and_the_active_controller(admin: Admin) -> None:
    cluster = admin.describe_cluster()

    assert len(cluster.cluster_id) == 22
    assert cluster.controller_id == 1 and cluster.controller_epoch >= 1
    assert [(n.node_id, n.rack, n.fenced) for n in cluster.nodes] == [
        (1, "a", False),
        (2, "b", False),
        (3, "c", False),
    ]
    assert [n.node_id for n in cluster.controllers] == [1]


def test_watch_refuses_an_offset_below_minus_one(controller: InProcessController) -> None:
    stream = watch(controller, -2)

    with pytest.raises(grpc.RpcError) as error:
        next(iter(stream))

    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_auto_creation_while_disabled_is_refused_per_topic_and_creates_nothing(
    controller: InProcessController, admin: Admin
) -> None:
    # What a gateway sends for a Metadata request naming unknown topics; auto.create.topics.enable
    # is false (the default) here.
    request = admin_pb2.CreateTopicsRequest(
        topics=[
            admin_pb2.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1)
            for name in ("auto-typo", "bad name!")
        ],
        timeout_ms=5000,
        auto_create=True,
    )
    with grpc.insecure_channel(controller.address) as channel:
        response = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(request, timeout=10)
    assert [(t.name, ErrorCode(t.error_code)) for t in response.topics] == [
        ("auto-typo", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ]
    assert "auto-typo" not in admin.list_topics()
