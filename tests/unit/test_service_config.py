"""Each service's settings: Kafka's names and defaults, its listeners, its cross-setting rules."""

from __future__ import annotations

import pytest
from brook_controller.config import CONFIG_DEF as CONTROLLER
from brook_gateway.config import CONFIG_DEF as GATEWAY
from brook_gateway.config import kafka_listeners
from brook_group_coordinator.config import CONFIG_DEF as GROUP_COORDINATOR
from brook_storage_node.config import CONFIG_DEF as STORAGE_NODE
from brook_storage_node.log.node_config import log_retention_ms, log_roll_jitter_ms, log_roll_ms

from brook.config import METRICS_LISTENER, Config, ConfigDef, ConfigError, RawSetting

ALL_SERVICES = {
    "storage-node": STORAGE_NODE,
    "controller": CONTROLLER,
    "group-coordinator": GROUP_COORDINATOR,
    "gateway": GATEWAY,
}


def _load(definition: ConfigDef, settings: dict[str, str]) -> Config:
    return definition.parse({k: RawSetting(v, "--override") for k, v in settings.items()})


def _problem(definition: ConfigDef, settings: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as raised:
        _load(definition, settings)
    return str(raised.value)


@pytest.mark.parametrize("service", sorted(ALL_SERVICES))
def test_a_node_id_is_all_a_service_needs_to_start(service: str) -> None:
    config = _load(ALL_SERVICES[service], {"node.id": "1"})
    assert config.listener("GRPC").host == "127.0.0.1"
    assert config.unknown_keys == ()


def test_default_grpc_ports_are_distinct_per_service() -> None:
    ports = [
        listener.port
        for definition in ALL_SERVICES.values()
        for listener in _load(definition, {"node.id": "1"}).get_listeners()
    ]
    assert sorted(ports) == [9092, 9101, 9201, 9301, 9401, 9501, 10101, 10201, 10401, 10501]


def test_each_services_default_metrics_port_is_its_grpc_port_plus_1000() -> None:
    for name, definition in ALL_SERVICES.items():
        config = _load(definition, {"node.id": "1"})
        metrics = config.optional_listener(METRICS_LISTENER)
        assert metrics is not None, name
        assert metrics.port == config.listener("GRPC").port + 1000, name


@pytest.mark.parametrize(
    ("definition", "name", "default"),
    [
        (STORAGE_NODE, "log.segment.bytes", 1073741824),
        (STORAGE_NODE, "log.roll.hours", 168),
        (STORAGE_NODE, "log.retention.hours", 168),
        (STORAGE_NODE, "log.retention.bytes", -1),
        (STORAGE_NODE, "log.retention.check.interval.ms", 300000),
        (STORAGE_NODE, "log.index.interval.bytes", 4096),
        (STORAGE_NODE, "log.index.size.max.bytes", 10485760),
        (STORAGE_NODE, "log.flush.interval.messages", 2**63 - 1),
        (STORAGE_NODE, "message.max.bytes", 1048588),
        (STORAGE_NODE, "replica.fetch.max.bytes", 1048576),
        (STORAGE_NODE, "replica.fetch.response.max.bytes", 10485760),
        (STORAGE_NODE, "replica.fetch.wait.max.ms", 500),
        (STORAGE_NODE, "replica.lag.time.max.ms", 30000),
        (STORAGE_NODE, "replica.high.watermark.checkpoint.interval.ms", 5000),
        (STORAGE_NODE, "min.insync.replicas", 1),
        (STORAGE_NODE, "unclean.leader.election.enable", False),
        (STORAGE_NODE, "fetch.max.bytes", 57671680),
        (STORAGE_NODE, "broker.heartbeat.interval.ms", 2000),
        (STORAGE_NODE, "socket.request.max.bytes", 104857600),
        (STORAGE_NODE, "queued.max.requests", 500),
        (CONTROLLER, "num.partitions", 1),
        (CONTROLLER, "default.replication.factor", 1),
        (CONTROLLER, "auto.create.topics.enable", False),
        (CONTROLLER, "broker.session.timeout.ms", 9000),
        (CONTROLLER, "leader.imbalance.check.interval.seconds", 300),
        (CONTROLLER, "leader.imbalance.per.broker.percentage", 10),
        (CONTROLLER, "offsets.topic.num.partitions", 50),
        (CONTROLLER, "offsets.topic.replication.factor", 3),
        (GROUP_COORDINATOR, "group.min.session.timeout.ms", 6000),
        (GROUP_COORDINATOR, "group.max.session.timeout.ms", 1800000),
        (GROUP_COORDINATOR, "group.initial.rebalance.delay.ms", 3000),
        (GROUP_COORDINATOR, "offsets.retention.minutes", 10080),
        (GROUP_COORDINATOR, "offset.metadata.max.bytes", 4096),
        (GATEWAY, "connections.max.idle.ms", 600000),
        (GATEWAY, "max.connections", 1000),
    ],
)
def test_defaults_are_kafkas_unless_documented_otherwise(
    definition: ConfigDef, name: str, default: object
) -> None:
    assert _load(definition, {"node.id": "1"}).get(name) == default


def test_data_directories_default_to_a_per_node_directory_under_dot_brook() -> None:
    assert _load(STORAGE_NODE, {"node.id": "3"}).get_list("log.dirs") == (".brook/storage-3",)
    assert (
        _load(CONTROLLER, {"node.id": "1"}).get_string("metadata.log.dir") == ".brook/controller-1"
    )
    assert (
        _load(GROUP_COORDINATOR, {"node.id": "9"}).get_string("group.coordinator.state.dir")
        == ".brook/group-coordinator-9"
    )


def test_storage_node_retention_follows_kafkas_unit_hierarchy() -> None:
    assert log_retention_ms(_load(STORAGE_NODE, {"node.id": "1"})) == 168 * 3_600_000
    config = _load(
        STORAGE_NODE,
        {"node.id": "1", "log.retention.hours": "2", "log.retention.minutes": "3"},
    )
    assert log_retention_ms(config) == 180_000
    config = _load(STORAGE_NODE, {"node.id": "1", "log.retention.ms": "-1"})
    assert log_retention_ms(config) == -1
    config = _load(STORAGE_NODE, {"node.id": "1", "log.retention.hours": "-1"})
    assert log_retention_ms(config) == -1


def test_storage_node_roll_and_jitter_follow_kafkas_unit_hierarchy() -> None:
    config = _load(STORAGE_NODE, {"node.id": "1", "log.roll.hours": "2"})
    assert log_roll_ms(config) == 7_200_000
    assert log_roll_jitter_ms(config) == 0
    config = _load(
        STORAGE_NODE,
        {
            "node.id": "1",
            "log.roll.hours": "2",
            "log.roll.ms": "5000",
            "log.roll.jitter.hours": "1",
            "log.roll.jitter.ms": "100",
        },
    )
    assert log_roll_ms(config) == 5000
    assert log_roll_jitter_ms(config) == 100


def test_storage_node_fetch_wait_may_not_exceed_lag_time() -> None:
    message = _problem(
        STORAGE_NODE,
        {"node.id": "1", "replica.fetch.wait.max.ms": "40000", "replica.lag.time.max.ms": "30000"},
    )
    assert message.startswith(
        "replica.fetch.wait.max.ms=40000 must not exceed replica.lag.time.max.ms=30000; "
    )


def test_storage_node_largest_message_must_fit_in_a_request() -> None:
    message = _problem(
        STORAGE_NODE,
        {"node.id": "1", "message.max.bytes": "2000", "socket.request.max.bytes": "1000"},
    )
    assert message.startswith("message.max.bytes=2000 must not exceed socket.request.max.bytes")


def test_controller_must_be_one_of_the_voters() -> None:
    message = _problem(CONTROLLER, {"node.id": "2", "controller.quorum.voters": "1@127.0.0.1:9301"})
    assert message == (
        'node.id=2 is not in controller.quorum.voters="1@127.0.0.1:9301"; a controller must be '
        "one of the voters"
    )


def test_controllers_voter_port_must_be_its_raft_port() -> None:
    message = _problem(
        CONTROLLER,
        {
            "node.id": "1",
            "listeners": "GRPC://127.0.0.1:9201,RAFT://127.0.0.1:9999",
            "controller.quorum.voters": "1@127.0.0.1:9301,2@127.0.0.1:9302",
        },
    )
    assert "gives node 1 the address 127.0.0.1:9301 but its RAFT listener is" in message


def test_controller_quorum_of_three_parses() -> None:
    config = _load(
        CONTROLLER,
        {
            "node.id": "2",
            "listeners": "GRPC://127.0.0.1:9202,RAFT://127.0.0.1:9302",
            "controller.quorum.voters": "1@127.0.0.1:9301,2@127.0.0.1:9302,3@127.0.0.1:9303",
            "controller.quorum.password": "shared-secret",
        },
    )
    assert [voter.node_id for voter in config.get_voters()] == [1, 2, 3]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"controller.quorum.heartbeat.interval.ms": "400"},
            "controller.quorum.heartbeat.interval.ms=400 must be below",
        ),
        (
            {"controller.quorum.request.timeout.ms": "700"},
            "controller.quorum.request.timeout.ms=700 must be at least twice",
        ),
    ],
)
def test_controller_quorum_timings_must_be_consistent(
    settings: dict[str, str], expected: str
) -> None:
    assert expected in _problem(CONTROLLER, {"node.id": "1", **settings})


def test_controller_requires_its_raft_listener() -> None:
    message = _problem(CONTROLLER, {"node.id": "1", "listeners": "GRPC://127.0.0.1:9201"})
    assert "lacks the RAFT listener" in message


def test_gateway_requires_a_kafka_listener() -> None:
    message = _problem(GATEWAY, {"node.id": "1", "listeners": "GRPC://127.0.0.1:9501"})
    assert "listeners has no Kafka listener" in message


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"listeners": "GRPC://127.0.0.1:1,SSL://127.0.0.1:2"}, "set ssl.keystore.location"),
        (
            {
                "listeners": "GRPC://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",
                "sasl.enabled.mechanisms": "",
            },
            "sasl.enabled.mechanisms must not be empty",
        ),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "is not one of PLAIN"),
        ({"listeners": "GRPC://127.0.0.1:1,INTERNAL://127.0.0.1:2"}, "unknown listener"),
        (
            {
                "listeners": "GRPC://127.0.0.1:1,PLAINTEXT://127.0.0.1:2",
                "listener.security.protocol.map": "PLAINTEXT:SSL",
            },
            "the PLAINTEXT listener uses TLS",
        ),
    ],
)
def test_gateway_security_settings_must_be_usable(settings: dict[str, str], expected: str) -> None:
    assert expected in _problem(GATEWAY, {"node.id": "1", **settings})


def test_gateway_takes_any_of_kafkas_listener_names() -> None:
    config = _load(
        GATEWAY,
        {
            "node.id": "1",
            "listeners": "GRPC://127.0.0.1:1,SASL_SSL://127.0.0.1:2,SSL://127.0.0.1:3",
            "ssl.keystore.location": "/etc/brook/keystore.pem",
        },
    )
    assert [listener.name for listener in kafka_listeners(config)] == ["SASL_SSL", "SSL"]


def test_group_coordinator_session_timeout_bounds_must_be_ordered() -> None:
    message = _problem(
        GROUP_COORDINATOR,
        {"node.id": "1", "group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"},
    )
    assert (
        message == "group.min.session.timeout.ms=10 must not exceed group.max.session.timeout.ms=5"
    )


@pytest.mark.parametrize("service", sorted(ALL_SERVICES))
def test_every_setting_is_documented(service: str) -> None:
    definition = ALL_SERVICES[service]
    table = definition.to_markdown()
    for key in definition.keys:
        assert key.doc, f"{key.name} has no doc"
        assert f"| `{key.name}` |" in table
