"""IncrementalAlterConfigs (KIP-339) through the gateway with confluent-kafka's AdminClient:
SET, DELETE, APPEND and SUBTRACT on a topic, validate_only, a node-level default, the errors
that change nothing; and the deprecated topic configs Kafka 3.x still accepts
(message.format.version, message.downconversion.enable), accepted and ignored."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 20.0


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def _create(admin: Any, topic: str, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    created = admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])
    created[topic].result(CLIENT_TIMEOUT_S)


def _configs(admin: Any, name: str, resource_type: Any = None) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(resource_type or ConfigResource.Type.TOPIC, name)
    described: dict[str, Any] = admin.describe_configs([resource])[resource].result(
        CLIENT_TIMEOUT_S
    )
    return described


def _alter(admin: Any, resource_type: Any, name: str, *ops: Any, **options: Any) -> None:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(resource_type, name, incremental_configs=list(ops))
    [future] = admin.incremental_alter_configs([resource], **options).values()
    future.result(CLIENT_TIMEOUT_S)


def test_incremental_alter_configs_sets_deletes_appends_and_subtracts(bootstrap: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic_type = ConfigResource.Type.TOPIC
    topic = "incremental-configs"
    admin = _admin(bootstrap)
    _create(admin, topic, {"retention.ms": "3600000"})

    def op(name: str, value: str | None, kind: Any) -> Any:
        return ConfigEntry(name, value, incremental_operation=kind)

    # SET leaves the other overrides alone (legacy AlterConfigs would reset retention.ms).
    _alter(admin, topic_type, topic, op("segment.ms", "600000", AlterConfigOpType.SET))
    configs = _configs(admin, topic)
    assert configs["segment.ms"].value == "600000"
    assert configs["retention.ms"].value == "3600000"

    _alter(admin, topic_type, topic, op("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert _configs(admin, topic)["cleanup.policy"].value == "delete,compact"
    _alter(admin, topic_type, topic, op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert _configs(admin, topic)["cleanup.policy"].value == "compact"

    _alter(admin, topic_type, topic, op("retention.ms", None, AlterConfigOpType.DELETE))
    configs = _configs(admin, topic)
    assert configs["retention.ms"].is_default
    assert configs["segment.ms"].value == "600000"

    # validate_only changes nothing.
    _alter(
        admin,
        topic_type,
        topic,
        op("segment.ms", "1200000", AlterConfigOpType.SET),
        validate_only=True,
    )
    assert _configs(admin, topic)["segment.ms"].value == "600000"

    # Errors change nothing: an unknown name, APPEND on a non-list, an invalid value.
    for bad in (
        op("retention.msx", "1", AlterConfigOpType.SET),
        op("segment.ms", "1", AlterConfigOpType.APPEND),
        op("segment.ms", "-5", AlterConfigOpType.SET),
    ):
        with pytest.raises(KafkaException) as refused:
            _alter(admin, topic_type, topic, bad, op("retention.ms", "7", AlterConfigOpType.SET))
        assert refused.value.args[0].name() in ("INVALID_CONFIG", "INVALID_REQUEST"), bad
    configs = _configs(admin, topic)
    assert configs["segment.ms"].value == "600000"
    assert configs["retention.ms"].is_default

    # A node's dynamic setting (librdkafka sends a BROKER resource to that broker), then
    # removed again.
    broker_type = ConfigResource.Type.BROKER
    broker = str(next(iter(admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers)))
    _alter(admin, broker_type, broker, op("log.retention.ms", "86400000", AlterConfigOpType.SET))
    try:
        assert _configs(admin, broker, broker_type)["log.retention.ms"].value == "86400000"
    finally:
        _alter(admin, broker_type, broker, op("log.retention.ms", None, AlterConfigOpType.DELETE))
    assert _configs(admin, broker, broker_type)["log.retention.ms"].is_default

    # A node-only dynamic config (kafka-configs --entity-type brokers --alter
    # --add-config follower.replication.throttled.rate=...), validated like any other.
    rate = "follower.replication.throttled.rate"
    _alter(admin, broker_type, broker, op(rate, "1048576", AlterConfigOpType.SET))
    try:
        assert _configs(admin, broker, broker_type)[rate].value == "1048576"
        with pytest.raises(KafkaException) as refused:
            _alter(admin, broker_type, broker, op(rate, "-1", AlterConfigOpType.SET))
        assert refused.value.args[0].name() == "INVALID_CONFIG"
    finally:
        _alter(admin, broker_type, broker, op(rate, None, AlterConfigOpType.DELETE))
    assert _configs(admin, broker, broker_type)[rate].is_default


def test_deprecated_topic_configs_are_accepted_and_ignored(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = "deprecated-configs"
    admin = _admin(bootstrap)
    # What a Kafka 2.x-era script sets at creation.
    _create(admin, topic, {"message.format.version": "0.10.2", "retention.ms": "3600000"})
    _alter(
        admin,
        ConfigResource.Type.TOPIC,
        topic,
        ConfigEntry(
            "message.downconversion.enable",
            "false",
            incremental_operation=AlterConfigOpType.SET,
        ),
    )
    configs = _configs(admin, topic)
    assert configs["message.format.version"].value == "0.10.2"
    assert configs["message.downconversion.enable"].value == "false"

    # Ignored: records are still stored and served as RecordBatch v2 with their timestamps.
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"v", timestamp=1_700_000_000_000)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "deprecated-configs"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(CLIENT_TIMEOUT_S)
        assert message is not None and message.error() is None
        assert message.value() == b"v"
        assert message.timestamp()[1] == 1_700_000_000_000
    finally:
        consumer.close()
