"""Consumer groups and idempotent producers of real Kafka clients, through the gateways.

The cluster of conftest.py (a group coordinator behind two gateways) is shared by the session;
each test has a topic and a group of its own. Every test checks that each produced record is
consumed exactly once with its key, headers and offset, and reads the committed offsets back
with OffsetFetch.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from test_kafka_clients import (
    CLIENT_TIMEOUT_MS,
    CONSUME_TIMEOUT_S,
    PARTITIONS,
    RECORDS,
    Consumed,
    check_round_trip,
    confluent_poll,
    confluent_poll_once,
    confluent_produce,
    create_topic_confluent,
    create_topic_kafka_python,
    expected_records,
    kafka_python_produce,
)

pytestmark = pytest.mark.integration

# Short sessions and frequent heartbeats: a rebalance completes within a heartbeat or two.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
GROUP_SETTLE_TIMEOUT_S = 60.0
# Records the first consumer of the resume test takes before committing and leaving.
FIRST_CONSUMER_RECORDS = 20
PER_PARTITION = RECORDS // PARTITIONS


def _confluent_consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        }
    )


def _confluent_committed(consumer: Any, topic: str) -> dict[int, int]:
    """partition → committed offset, read back with OffsetFetch."""
    from confluent_kafka import TopicPartition

    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=10.0)}


def test_confluent_consumer_resumes_exactly_from_the_offsets_its_group_committed(
    bootstrap: str,
) -> None:
    from confluent_kafka import OFFSET_INVALID

    topic = "groups-confluent-resume"
    group = f"{topic}-group"
    create_topic_confluent(bootstrap, topic)
    confluent_produce(bootstrap, topic, {"acks": "all"})

    first_records: Consumed = []
    first = _confluent_consumer(bootstrap, group)
    try:
        first.subscribe([topic])
        confluent_poll(first, first_records, FIRST_CONSUMER_RECORDS)
        first.commit(asynchronous=False)
        committed = _confluent_committed(first, topic)
    finally:
        first.close()
    # The next offset to read: one past the last record the consumer was given.
    for partition in range(PARTITIONS):
        taken = [o for p, o, *_ in first_records if p == partition]
        assert committed[partition] == (max(taken) + 1 if taken else OFFSET_INVALID)

    second_records: Consumed = []
    second = _confluent_consumer(bootstrap, group)
    try:
        second.subscribe([topic])
        confluent_poll(second, second_records, RECORDS - len(first_records))
        second.commit(asynchronous=False)
        assert _confluent_committed(second, topic) == dict.fromkeys(
            range(PARTITIONS), PER_PARTITION
        )
    finally:
        second.close()
    for partition in range(PARTITIONS):
        resumed_at = min(o for p, o, *_ in second_records if p == partition)
        assert resumed_at == max(committed[partition], 0)
    check_round_trip(topic, first_records + second_records)


def test_two_confluent_consumers_in_a_group_split_the_partitions(bootstrap: str) -> None:
    topic = "groups-confluent-split"
    group = f"{topic}-group"
    create_topic_confluent(bootstrap, topic)
    consumers = [_confluent_consumer(bootstrap, group) for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + GROUP_SETTLE_TIMEOUT_S
        while True:
            assigned = [{tp.partition for tp in c.assignment()} for c in consumers]
            if all(assigned) and assigned[0].isdisjoint(assigned[1]):
                if assigned[0] | assigned[1] == set(range(PARTITIONS)):
                    break
            assert time.monotonic() < deadline, f"the group never settled: {assigned}"
            for consumer in consumers:
                assert consumer.poll(0.2) is None, "a record before any was produced"
        confluent_produce(bootstrap, topic, {"acks": "all"})
        consumed: list[Consumed] = [[], []]
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while sum(map(len, consumed)) < RECORDS:
            assert time.monotonic() < deadline, f"consumed only {sum(map(len, consumed))}"
            for consumer, records in zip(consumers, consumed, strict=True):
                confluent_poll_once(consumer, records, 0.2)
    finally:
        for consumer in consumers:
            consumer.close()
    partitions_read = [{p for p, *_ in records} for records in consumed]
    assert partitions_read[0] == assigned[0] and partitions_read[1] == assigned[1]
    check_round_trip(topic, consumed[0] + consumed[1])


def _kafka_python_read_back(bootstrap: str, topic: str, group: str) -> Consumed:
    """Every record of ``topic``, read by a kafka-python group member that then commits."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
    )
    consumed: Consumed = []
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(consumed) < RECORDS:
            assert time.monotonic() < deadline, f"only {len(consumed)} records consumed"
            for records in consumer.poll(timeout_ms=500).values():
                consumed.extend(
                    (r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records
                )
        consumer.commit()
        for partition in range(PARTITIONS):
            assert consumer.committed(TopicPartition(topic, partition)) == PER_PARTITION
    finally:
        consumer.close()
    return consumed


def test_kafka_python_group_commits_and_its_admin_lists_describes_and_deletes_the_group(
    bootstrap: str,
) -> None:
    from kafka import KafkaAdminClient, TopicPartition

    topic = "groups-kafka-python"
    group = f"{topic}-group"
    create_topic_kafka_python(bootstrap, topic)
    confluent_produce(bootstrap, topic, {"acks": "all"})
    check_round_trip(topic, _kafka_python_read_back(bootstrap, topic, group))

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        assert group in [g["group_id"] for g in admin.list_groups()]
        described = admin.describe_groups([group])[group]
        assert (described["error"], described["group_state"]) == (None, "Empty")
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp: o.offset for tp, o in offsets.items()} == {
            TopicPartition(topic, p): PER_PARTITION for p in range(PARTITIONS)
        }
        assert admin.delete_groups([group]) == {group: "OK"}
        assert group not in [g["group_id"] for g in admin.list_groups()]
    finally:
        admin.close()


def test_kafka_python_default_idempotent_producer_writes_every_record_exactly_once(
    bootstrap: str,
) -> None:
    topic = "groups-kafka-python-idempotent"
    create_topic_kafka_python(bootstrap, topic)
    offsets = kafka_python_produce(bootstrap, topic)
    assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))
    check_round_trip(topic, _kafka_python_read_back(bootstrap, topic, f"{topic}-group"))


def _aiokafka_read_back(bootstrap: str, topic: str, group: str) -> Consumed:
    """Every record of ``topic``, read by an aiokafka group member that then commits."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> Consumed:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        await consumer.start()
        consumed: Consumed = []
        try:
            async with asyncio.timeout(CONSUME_TIMEOUT_S):
                while len(consumed) < RECORDS:
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        consumed.extend(
                            (r.partition, r.offset, r.key, r.value, list(r.headers))
                            for r in records
                        )
            await consumer.commit()
            for partition in range(PARTITIONS):
                committed = await consumer.committed(TopicPartition(topic, partition))
                assert committed == PER_PARTITION
        finally:
            await consumer.stop()
        return consumed

    return asyncio.run(run())


def _aiokafka_produce(bootstrap: str, topic: str, **config: Any) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
        await producer.start()
        try:
            sent = [
                await producer.send(topic, v, key=k, headers=h, partition=p)
                for p, k, v, h in expected_records(topic)
            ]
            return [(await future).offset for future in sent]
        finally:
            await producer.stop()

    return asyncio.run(run())


def test_aiokafka_group_member_reads_every_record_once_and_commits(bootstrap: str) -> None:
    topic = "groups-aiokafka"
    create_topic_kafka_python(bootstrap, topic)
    _aiokafka_produce(bootstrap, topic, acks="all")
    check_round_trip(topic, _aiokafka_read_back(bootstrap, topic, f"{topic}-group"))


def test_aiokafka_idempotent_producer_writes_every_record_exactly_once(bootstrap: str) -> None:
    topic = "groups-aiokafka-idempotent"
    create_topic_kafka_python(bootstrap, topic)
    offsets = _aiokafka_produce(bootstrap, topic, enable_idempotence=True)
    assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))
    check_round_trip(topic, _aiokafka_read_back(bootstrap, topic, f"{topic}-group"))


def test_confluent_idempotent_producer_writes_every_record_exactly_once(bootstrap: str) -> None:
    topic = "groups-confluent-idempotent"
    create_topic_confluent(bootstrap, topic)
    offsets = confluent_produce(bootstrap, topic, {"enable.idempotence": True})
    assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))
    consumed: Consumed = []
    consumer = _confluent_consumer(bootstrap, f"{topic}-group")
    try:
        consumer.subscribe([topic])
        confluent_poll(consumer, consumed, RECORDS)
    finally:
        consumer.close()
    check_round_trip(topic, consumed)
