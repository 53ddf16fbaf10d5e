"""A Fetch response through the gateway keeps the request's max_bytes across the storage nodes
it is read from (issue #14, point 1).

One gateway in front of three storage nodes, so that every partition is shown on that gateway
and one Fetch request fans out to all three nodes. librdkafka refuses a response larger than
``receive.message.max.bytes`` ("Invalid response size") and reconnects, so with that set to
``fetch.max.bytes`` + 512 (the least it accepts) a response over max_bytes stops the consumer:
reading every record back proves every response kept the cap. A kafka-python consumer whose
limits are smaller than every batch checks the other half of Kafka's rule: the first batch of
a response goes whole, so it still reads to the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import pytest
from cluster_fixture import shared_cluster, wait_until

from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

STORAGE_NODES: Final = 3
PARTITIONS_PER_NODE: Final = 2
RECORDS_PER_PARTITION: Final = 40
VALUE_BYTES: Final = 50_000
# Batches of several records, each a sizeable part of the fetch cap.
PRODUCER: Final[dict[str, Any]] = {
    "linger.ms": 200,
    "batch.size": 400_000,
    "enable.idempotence": False,
}
FETCH_MAX_BYTES: Final = 1_000_000
CLIENT_TIMEOUT_S: Final = 60.0
WAIT_TIMEOUT_S: Final = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with shared_cluster(
        tmp_path_factory,
        "fetch-limits",
        controllers=1,
        storage_nodes=STORAGE_NODES,
        group_coordinators=1,
        gateways=1,
        config_overrides={"controller": {"offsets.topic.num.partitions": "1"}},
    ) as cluster:
        yield cluster


def _value(partition: int, i: int) -> bytes:
    return f"{partition}:{i}:".encode().ljust(VALUE_BYTES, b".")


def _create_spread_topic(cluster: LocalCluster, topic: str) -> int:
    """A topic with PARTITIONS_PER_NODE partitions led by each storage node; its partitions."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        storage_ids = sorted(
            n.node_id for n in admin.describe_cluster().nodes if "storage" in n.role.lower()
        )
        assert len(storage_ids) == STORAGE_NODES, storage_ids
        assignment = {
            p: [storage_ids[p % STORAGE_NODES]] for p in range(STORAGE_NODES * PARTITIONS_PER_NODE)
        }
        created = admin.create_topics([NewTopic(topic, replica_assignment=assignment)])
        assert created == {topic: None}

        def led_as_assigned() -> bool:
            [described] = admin.describe_topics([topic]).values()
            return {p.partition: p.leader for p in described.partitions} == {
                p: nodes[0] for p, nodes in assignment.items()
            }

        wait_until(led_as_assigned, "every partition led by its node", WAIT_TIMEOUT_S)
    return len(assignment)


def _produce(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    errors: list[Any] = []
    for partition in range(partitions):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(
                topic,
                value=_value(partition, i),
                partition=partition,
                on_delivery=lambda error, _: errors.append(error) if error else None,
            )
            producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert errors == []


def _topic_with_records(cluster: LocalCluster, topic: str) -> int:
    """A topic spread over the storage nodes, every partition filled; its partitions."""
    partitions = _create_spread_topic(cluster, topic)
    _produce(cluster.kafka_bootstrap_servers, topic, partitions)
    return partitions


def _read_all(
    poll: Callable[[], list[tuple[int, int, bytes]]], partitions: int, problems: list[str]
) -> None:
    """Polls until every record is read, then checks each was read once, in order, at
    consecutive offsets; ``problems`` (the client's errors) are shown if it never gets there."""
    expected = partitions * RECORDS_PER_PARTITION
    consumed: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(consumed) < expected:
        assert time.monotonic() < deadline, (
            f"only {len(consumed)} of {expected} consumed; client errors: {problems[:5]}"
        )
        consumed.extend(poll())
    for partition in range(partitions):
        read = [(o, v) for p, o, v in consumed if p == partition]
        assert [o for o, _ in read] == list(range(RECORDS_PER_PARTITION)), partition
        assert [v for _, v in read] == [_value(partition, i) for i in range(RECORDS_PER_PARTITION)]


def test_a_consumer_with_small_fetch_max_bytes_reads_every_node_to_the_end(
    cluster: LocalCluster,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = "fetch-max-bytes"
    partitions = _topic_with_records(cluster, topic)
    client_errors: list[str] = []
    consumer: Any = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_MAX_BYTES,
            "receive.message.max.bytes": FETCH_MAX_BYTES + 512,
            "error_cb": lambda error: client_errors.append(str(error)),
        }
    )

    def poll() -> list[tuple[int, int, bytes]]:
        message: Any = consumer.poll(0.5)
        if message is None:
            return []
        if message.error() is not None:
            client_errors.append(str(message.error()))
            return []
        return [(message.partition(), message.offset(), message.value())]

    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        _read_all(poll, partitions, client_errors)
    finally:
        consumer.close()
    assert not [e for e in client_errors if "response size" in e], client_errors


def test_batches_larger_than_both_fetch_limits_are_read_one_per_response(
    cluster: LocalCluster,
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = "fetch-oversized-batches"
    partitions = _topic_with_records(cluster, topic)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap_servers,
        enable_auto_commit=False,
        # Smaller than any batch (a single record is VALUE_BYTES).
        fetch_max_bytes=VALUE_BYTES // 2,
        max_partition_fetch_bytes=VALUE_BYTES // 4,
    )

    def poll() -> list[tuple[int, int, bytes]]:
        polled = consumer.poll(timeout_ms=500).values()
        return [(r.partition, r.offset, r.value) for records in polled for r in records]

    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        _read_all(poll, partitions, [])
    finally:
        consumer.close()
