"""Kafka admin clients moving partitions through the gateway (AlterPartitionReassignments and
ListPartitionReassignments): kafka-python's KafkaAdminClient moves each partition of a topic
to the other storage node; the records written before are all still there, read back with
confluent-kafka from the new replica; a cancel of what is not moving and a move of an unknown
partition get Kafka's errors and change nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest
from brook_gateway.protocol.kafka_messages import ApiKey
from test_gateway_fuzz import kafka_gateways, kafka_request

from brook.errors import ErrorCode
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

TOPIC = "reassigned-by-kafka-admin"
PARTITIONS = 2
RECORDS = 200
TIMEOUT_S = 30.0


def _eventually(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {TIMEOUT_S} s: {what}")
        time.sleep(0.1)


def _replicas(bootstrap: str, topic: str) -> dict[int, list[int]]:
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=TIMEOUT_S)
    return {p.id: list(p.replicas) for p in listed.topics[topic].partitions.values()}


def test_kafka_python_moves_partitions_and_every_record_stays(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import NoReassignmentInProgressError, UnknownTopicOrPartitionError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        _eventually(lambda: len(_replicas(bootstrap, TOPIC)) == PARTITIONS, "the topic listed")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(RECORDS):
            producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS)
        assert producer.flush(TIMEOUT_S) == 0

        before = _replicas(bootstrap, TOPIC)
        nodes = sorted({node for replicas in before.values() for node in replicas} | {1, 2})
        target = {
            TopicPartition(TOPIC, p): [next(n for n in nodes if n not in replicas)]
            for p, replicas in before.items()
        }
        results = admin.alter_partition_reassignments(target)
        assert results == dict.fromkeys(target), results

        _eventually(lambda: not admin.list_partition_reassignments(), "every move to complete")
        _eventually(
            lambda: _replicas(bootstrap, TOPIC) == {tp.partition: r for tp, r in target.items()},
            "the metadata to show the new replicas",
        )
        refused = admin.alter_partition_reassignments(
            {TopicPartition(TOPIC, 0): None, TopicPartition("no-such-topic", 0): [1]}
        )
        assert refused[TopicPartition(TOPIC, 0)] is NoReassignmentInProgressError
        assert refused[TopicPartition("no-such-topic", 0)] is UnknownTopicOrPartitionError
    finally:
        admin.close()

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reassigned-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        found: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + TIMEOUT_S
        while sum(map(len, found.values())) < RECORDS:
            assert time.monotonic() < deadline, f"read {found}"
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            found[message.partition()].append(int(message.value()))
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert found[p] == list(range(p, RECORDS, PARTITIONS)), f"partition {p}"


def test_an_empty_replica_list_is_refused_and_null_cancels(compat_cluster: LocalCluster) -> None:
    """kafka-python refuses an empty list before sending it; other clients may not."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "reassignment-empty-list"
    gateways = kafka_gateways(compat_cluster)
    admin = AdminClient({"bootstrap.servers": gateways.bootstrap})
    created = admin.create_topics([NewTopic(topic, 2, 1)])
    assert created[topic].result(TIMEOUT_S) is None
    address = gateways.address
    body = {
        "timeout_ms": 10_000,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "replicas": []},
                    {"partition_index": 1, "replicas": None},
                ],
            }
        ],
    }
    response = kafka_request(address, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body, TIMEOUT_S)
    codes = {
        p["partition_index"]: p["error_code"]
        for t in response["responses"]
        for p in t["partitions"]
    }
    assert codes == {
        0: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        1: ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
    }
