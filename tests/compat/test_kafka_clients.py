"""Real Kafka clients, written by others, against a real Brook cluster through the gateway.

One cluster (a controller, one storage node, one gateway) is shared by the module; each test
works on a topic of its own, created through the Kafka protocol. Every test reads back from
offset 0 with manual assignment and checks that values, keys, headers and offsets are exactly
what was produced.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_fixture import ClusterFactory

pytestmark = pytest.mark.integration

RECORDS = 50
CLIENT_TIMEOUT_MS = 20_000
CONSUME_TIMEOUT_S = 30.0
PARTITIONS = 2


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Kafka bootstrap address of the shared cluster's gateway."""
    factory = ClusterFactory(Path(tmp_path_factory.mktemp("compat")) / "clusters")
    failed = True
    try:
        cluster = factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=1)
        yield cluster.kafka_bootstrap_servers
        failed = False
    finally:
        factory.close(keep_files=failed)


def _expected(topic: str) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers) of every record a test produces, in order."""
    return [
        (i % PARTITIONS, f"key-{i}".encode(), f"{topic}-value-{i}".encode(), [("h", bytes([i]))])
        for i in range(RECORDS)
    ]


def _check_round_trip(
    topic: str, consumed: list[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]]
) -> None:
    """Every produced record, once, at consecutive offsets from 0 in each partition."""
    expected = _expected(topic)
    for partition in range(PARTITIONS):
        want = [(k, v, h) for p, k, v, h in expected if p == partition]
        got = sorted((o, k, v, h) for p, o, k, v, h in consumed if p == partition)
        assert [o for o, *_ in got] == list(range(len(want)))
        assert [(k, v, h) for _, k, v, h in got] == want


def _create_topic_kafka_python(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_round_trips_records_keys_headers_and_offsets(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "kafka-python"
    _create_topic_kafka_python(bootstrap, topic)
    # Idempotence needs InitProducerId, which the gateway does not serve yet.
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=5
    )
    try:
        futures = [
            producer.send(topic, value=v, key=k, headers=h, partition=p)
            for p, k, v, h in _expected(topic)
        ]
        producer.flush(CLIENT_TIMEOUT_MS / 1000)
        offsets = [f.get(timeout=CLIENT_TIMEOUT_MS / 1000).offset for f in futures]
    finally:
        producer.close()
    assert sorted(offsets) == sorted(
        [i // PARTITIONS for i in range(RECORDS)]
    )  # consecutive offsets from 0 in each partition
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        consumed: list[Any] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(consumed) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                consumed.extend(
                    (r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records
                )
    finally:
        consumer.close()
    _check_round_trip(topic, consumed)


def _wait_until_partitions_answer(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-probe"})
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        pending = set(range(PARTITIONS))
        while pending:
            assert time.monotonic() < deadline, f"partitions {sorted(pending)} never answered"
            for partition in sorted(pending):
                try:
                    consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=1.0)
                except KafkaException:
                    continue
                pending.discard(partition)
    finally:
        consumer.close()


def _confluent_round_trip(bootstrap: str, topic: str, compression: str, acks: str = "all") -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    futures[topic].result(CLIENT_TIMEOUT_MS / 1000)
    if acks == "0":
        # acks=0 gets no answer, so a record sent before a just-created partition's leader has
        # taken up leadership is lost without a word (Kafka's acks=0 contract). Wait until
        # every partition answers a ListOffsets through the gateway, as a leader does.
        _wait_until_partitions_answer(bootstrap, topic)

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression}
    )
    errors: list[Any] = []
    offsets: list[int] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets.append(message.offset())

    for p, k, v, h in _expected(topic):
        producer.produce(topic, value=v, key=k, headers=h, partition=p, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_MS / 1000) == 0
    assert errors == []
    if acks != "0":
        # With acks=0 no response comes back, so the client knows no offsets.
        assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        consumed: list[Any] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(consumed) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            consumed.append(
                (
                    message.partition(),
                    message.offset(),
                    message.key(),
                    message.value(),
                    list(message.headers() or []),
                )
            )
    finally:
        consumer.close()
    _check_round_trip(topic, consumed)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_round_trips_records_with_each_compression(
    bootstrap: str, compression: str
) -> None:
    _confluent_round_trip(bootstrap, f"confluent-{compression}", compression)


@pytest.mark.parametrize("acks", ["0", "1"])
def test_confluent_kafka_records_produced_with_acks_0_and_1_are_all_read_back(
    bootstrap: str, acks: str
) -> None:
    _confluent_round_trip(bootstrap, f"confluent-acks-{acks}", "none", acks)


def test_aiokafka_round_trips_records_keys_headers_and_offsets(bootstrap: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "aiokafka"
    _create_topic_kafka_python(bootstrap, topic)

    async def run() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            offsets = []
            for p, k, v, h in _expected(topic):
                metadata = await producer.send_and_wait(topic, v, key=k, headers=h, partition=p)
                offsets.append(metadata.offset)
        finally:
            await producer.stop()
        assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        consumed: list[Any] = []
        try:
            partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            async with asyncio.timeout(CONSUME_TIMEOUT_S):
                while len(consumed) < RECORDS:
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        consumed.extend(
                            (r.partition, r.offset, r.key, r.value, list(r.headers))
                            for r in records
                        )
        finally:
            await consumer.stop()
        return consumed

    _check_round_trip(topic, asyncio.run(run()))
