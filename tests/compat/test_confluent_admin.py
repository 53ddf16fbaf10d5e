"""confluent-kafka's AdminClient (librdkafka) administering topics through the gateway:
create (with a config), describe (partitions, leaders, configs), grow, delete; and Kafka's errors
for the requests that must change nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 20.0
PARTITIONS = 2
GROWN_PARTITIONS = 4
RETENTION_MS = "3600000"


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def _partitions(admin: Any, topic: str) -> int | None:
    """The partition count the cluster's metadata lists for ``topic``, None if not listed."""
    listed = admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    if listed is None or listed.error is not None:
        return None
    return len(listed.partitions)


def _eventually(check: Any, what: str) -> None:
    """Metadata reaches the second gateway a moment after the first answered."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {CLIENT_TIMEOUT_S} s: {what}")
        time.sleep(0.1)


def test_confluent_admin_creates_describes_grows_and_deletes_a_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

    topic = "confluent-admin"
    admin = _admin(bootstrap)
    created = admin.create_topics(
        [NewTopic(topic, PARTITIONS, 1, config={"retention.ms": RETENTION_MS})]
    )
    assert created[topic].result(CLIENT_TIMEOUT_S) is None
    _eventually(lambda: _partitions(admin, topic) == PARTITIONS, f"{topic} listed")

    metadata = admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S)
    broker_ids = set(metadata.brokers)
    for partition in metadata.topics[topic].partitions.values():
        assert partition.leader in broker_ids, "every partition is led by a listed broker"

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(CLIENT_TIMEOUT_S)
    assert configs["retention.ms"].value == RETENTION_MS
    assert not configs["retention.ms"].is_default

    grown = admin.create_partitions([NewPartitions(topic, GROWN_PARTITIONS)])
    assert grown[topic].result(CLIENT_TIMEOUT_S) is None
    _eventually(lambda: _partitions(admin, topic) == GROWN_PARTITIONS, f"{topic} grown")

    deleted = admin.delete_topics([topic], operation_timeout=CLIENT_TIMEOUT_S)
    assert deleted[topic].result(CLIENT_TIMEOUT_S) is None
    _eventually(lambda: _partitions(admin, topic) is None, f"{topic} gone")


def test_confluent_admin_gets_kafkas_errors_and_nothing_changes(bootstrap: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewPartitions, NewTopic

    topic = "confluent-admin-errors"
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(CLIENT_TIMEOUT_S)
    _eventually(lambda: _partitions(admin, topic) == PARTITIONS, f"{topic} listed")

    def error_of(future: Any) -> int:
        with pytest.raises(KafkaException) as raised:
            future.result(CLIENT_TIMEOUT_S)
        code: int = raised.value.args[0].code()
        return code

    again = admin.create_topics([NewTopic(topic, GROWN_PARTITIONS, 1)])[topic]
    assert error_of(again) == KafkaError.TOPIC_ALREADY_EXISTS
    bad_config = "confluent-admin-bad-config"
    invalid = admin.create_topics([NewTopic(bad_config, 1, 1, config={"retention.ms": "soon"})])
    assert error_of(invalid[bad_config]) == KafkaError.INVALID_CONFIG
    shrink = admin.create_partitions([NewPartitions(topic, 1)])[topic]
    assert error_of(shrink) == KafkaError.INVALID_PARTITIONS
    missing = "confluent-admin-missing"
    gone = admin.delete_topics([missing], operation_timeout=CLIENT_TIMEOUT_S)[missing]
    assert error_of(gone) == KafkaError.UNKNOWN_TOPIC_OR_PART

    assert _partitions(admin, topic) == PARTITIONS, "the refused requests changed nothing"
    assert _partitions(admin, bad_config) is None
