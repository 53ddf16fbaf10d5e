"""Produce requests pipelined on one connection, as librdkafka sends them without idempotence,
through the gateway, which merges them into fewer calls to the storage node (ProduceCoalescer):
small acks=1 ones, and large acks=all ones, whose merged calls go over many HTTP/2 frames.
Every record must land once, in the order it was produced within its partition, at the offset
its delivery report gave it."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS = 3000
CLIENT_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 30.0
# One small batch per request and no lingering: hundreds of requests in flight at once.
PIPELINING_PRODUCER: dict[str, Any] = {
    "acks": "1",
    "linger.ms": 0,
    "batch.num.messages": 10,
    "enable.idempotence": False,
}
# acks=all with batches far over one HTTP/2 frame, many requests per partition in flight.
LARGE_PIPELINING_PRODUCER: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.num.messages": 100_000,
    "batch.size": 256 * 1024,
    "enable.idempotence": False,
}
LARGE_VALUE_BYTES = 2000


def _value(i: int, padding: int) -> bytes:
    return f"v{i}".encode().ljust(padding, b".")


def produce(
    bootstrap: str, topic: str, config: dict[str, Any], padding: int
) -> dict[bytes, tuple[int, int]]:
    """Produces RECORDS values round-robin over the partitions; (partition, offset) of each
    value as its delivery report told."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    delivered: dict[bytes, tuple[int, int]] = {}
    errors: list[Any] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered[message.value()] = (message.partition(), message.offset())

    for i in range(RECORDS):
        producer.produce(
            topic, value=_value(i, padding), partition=i % PARTITIONS, on_delivery=on_delivery
        )
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert errors == []
    return delivered


def consume(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False}
    )
    consumed: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(consumed) < RECORDS:
            assert time.monotonic() < deadline, f"only {len(consumed)} of {RECORDS} consumed"
            message: Any = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            consumed.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    return consumed


@pytest.mark.parametrize(
    ("name", "config", "padding"),
    [
        ("small-acks-1", PIPELINING_PRODUCER, 0),
        ("large-acks-all", LARGE_PIPELINING_PRODUCER, LARGE_VALUE_BYTES),
    ],
)
def test_pipelined_produce_requests_land_in_order_at_their_reported_offsets(
    bootstrap: str, name: str, config: dict[str, Any], padding: int
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"pipelined-produce-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(CLIENT_TIMEOUT_S)

    delivered = produce(bootstrap, topic, config, padding)
    consumed = consume(bootstrap, topic)

    assert len(delivered) == RECORDS
    for partition in range(PARTITIONS):
        produced = [_value(i, padding) for i in range(partition, RECORDS, PARTITIONS)]
        stored = sorted((o, v) for p, o, v in consumed if p == partition)
        # Once each, at consecutive offsets, in the order they were produced.
        assert [o for o, _ in stored] == list(range(len(produced)))
        assert [v for _, v in stored] == produced
        # Each request was answered with its own batch's offsets, not a neighbour's.
        assert [delivered[v] for v in produced] == [(partition, o) for o, _ in stored]
