"""Real Kafka clients, written by others, against a real Brook cluster through the gateway.

The cluster of conftest.py is shared by the session; each test works on a topic of its own,
created through the Kafka protocol. Every test reads back from offset 0 with manual assignment
and checks that values, keys, headers and offsets are exactly what was produced.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from cluster_fixture import wait_until

pytestmark = pytest.mark.integration

RECORDS = 50
CLIENT_TIMEOUT_MS = 20_000
CONSUME_TIMEOUT_S = 30.0
PARTITIONS = 2

Consumed = list[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]]
"""(partition, offset, key, value, headers) of each record a consumer was given."""


def expected_records(topic: str) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers) of every record a test produces, in order."""
    return [
        (i % PARTITIONS, f"key-{i}".encode(), f"{topic}-value-{i}".encode(), [("h", bytes([i]))])
        for i in range(RECORDS)
    ]


def check_round_trip(topic: str, consumed: Consumed) -> None:
    """Every produced record, once, at consecutive offsets from 0 in each partition."""
    expected = expected_records(topic)
    for partition in range(PARTITIONS):
        want = [(k, v, h) for p, k, v, h in expected if p == partition]
        got = sorted((o, k, v, h) for p, o, k, v, h in consumed if p == partition)
        assert [o for o, *_ in got] == list(range(len(want)))
        assert [(k, v, h) for _, k, v, h in got] == want


def create_topic_kafka_python(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        # The gateway that created the topic shows it at once; another may trail it briefly.
        wait_until(lambda: topic in admin.list_topics(), f"{topic} listed", CONSUME_TIMEOUT_S)
    finally:
        admin.close()


def kafka_python_produce(bootstrap: str, topic: str) -> list[int]:
    """Produces the expected records of ``topic`` with kafka-python's default producer, which
    is idempotent with acks=all (checked: it got a producer id); their offsets."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [
            producer.send(topic, value=v, key=k, headers=h, partition=p)
            for p, k, v, h in expected_records(topic)
        ]
        producer.flush(CLIENT_TIMEOUT_MS / 1000)
        offsets = [f.get(timeout=CLIENT_TIMEOUT_MS / 1000).offset for f in futures]
        assert producer._transaction_manager is not None, "the producer is not idempotent"
        assert producer._transaction_manager.has_producer_id()
    finally:
        producer.close()
    return offsets


def test_kafka_python_round_trips_records_keys_headers_and_offsets(bootstrap: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = "kafka-python"
    create_topic_kafka_python(bootstrap, topic)
    offsets = kafka_python_produce(bootstrap, topic)
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
    check_round_trip(topic, consumed)


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


def create_topic_confluent(
    bootstrap: str, topic: str, config: dict[str, Any] | None = None
) -> None:
    """Creates ``topic`` (PARTITIONS partitions) with a confluent-kafka AdminClient configured
    with ``config`` besides the bootstrap servers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    futures[topic].result(CLIENT_TIMEOUT_MS / 1000)


def confluent_produce(
    bootstrap: str, topic: str, config: dict[str, Any], **client_args: Any
) -> list[int]:
    """Produces the expected records of ``topic`` with a confluent-kafka Producer configured
    with ``config`` (and ``client_args``, such as ``logger``); the offsets it was told
    (meaningless with acks=0).

    Kafka keeps a partition's records in the order sent across retries only for an idempotent
    producer or one with a single request in flight; librdkafka's non-idempotent default is a
    million in flight, and a batch refused while a just-created partition's leader takes up
    leadership is retried behind the next one (seen: key-0 stored after key-2). The callers
    check order, so a producer that is not idempotent gets one request in flight."""
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": bootstrap, **config}
    if not settings.get("enable.idempotence"):
        settings.setdefault("max.in.flight.requests.per.connection", 1)
    producer = Producer(settings, **client_args)
    errors: list[Any] = []
    offsets: list[int] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets.append(message.offset())

    for p, k, v, h in expected_records(topic):
        producer.produce(topic, value=v, key=k, headers=h, partition=p, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_MS / 1000) == 0
    assert errors == []
    return offsets


def confluent_poll_once(consumer: Any, consumed: Consumed, timeout_s: float) -> None:
    """One poll of a confluent-kafka Consumer, its record (if any) added to ``consumed``."""
    message = consumer.poll(timeout_s)
    if message is None:
        return
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


def confluent_poll(consumer: Any, consumed: Consumed, until: int) -> None:
    """Polls ``consumer`` into ``consumed`` until it holds ``until`` records."""
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while len(consumed) < until:
        assert time.monotonic() < deadline, f"only {len(consumed)} of {until} records consumed"
        confluent_poll_once(consumer, consumed, 0.5)


def _confluent_round_trip(bootstrap: str, topic: str, compression: str, acks: str = "all") -> None:
    create_topic_confluent(bootstrap, topic)
    if acks == "0":
        # acks=0 gets no answer, so a record sent before a just-created partition's leader has
        # taken up leadership is lost without a word (Kafka's acks=0 contract). Wait until
        # every partition answers a ListOffsets through the gateway, as a leader does.
        _wait_until_partitions_answer(bootstrap, topic)
    offsets = confluent_produce(bootstrap, topic, {"acks": acks, "compression.type": compression})
    if acks != "0":
        # With acks=0 no response comes back, so the client knows no offsets.
        assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))

    check_round_trip(topic, confluent_read_back(bootstrap, topic))


def confluent_read_back(
    bootstrap: str, topic: str, config: dict[str, Any] | None = None
) -> Consumed:
    """The RECORDS records of ``topic``'s PARTITIONS partitions, read from offset 0 by a
    confluent-kafka Consumer with manual assignment (configured with ``config`` too)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            **(config or {}),
        }
    )
    consumed: Consumed = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        confluent_poll(consumer, consumed, RECORDS)
    finally:
        consumer.close()
    return consumed


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
    create_topic_kafka_python(bootstrap, topic)

    async def run() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            offsets = []
            for p, k, v, h in expected_records(topic):
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

    check_round_trip(topic, asyncio.run(run()))
