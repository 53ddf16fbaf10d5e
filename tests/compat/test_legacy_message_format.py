"""Producers that fall back to the MessageSet formats (v0/v1): librdkafka told the broker is
0.9.0 (``broker.version.fallback=0.9.0.0``, ``api.version.request=false``) sends Produce v1
with magic 0 messages (and, with compression, a gzip wrapper message). The gateway converts
them to RecordBatch v2, as Kafka 3.x does; the client sees its records delivered, and a current
client reads them back with keys, values and the conversion time as timestamp."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 20.0
RECORDS = 20


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)


def _read(bootstrap: str, topic: str, count: int) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader"})
    messages: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(messages) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_message_format_v0_produce_is_converted_to_record_batch_v2(
    bootstrap: str, compression: str
) -> None:
    from confluent_kafka import Producer

    topic = f"legacy-format-{compression}"
    _create(bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "broker.version.fallback": "0.9.0.0",
            "api.version.request": False,
            "compression.codec": compression,
            "message.timeout.ms": 30_000,
        }
    )
    reports: list[Any] = []
    before_ms = int(time.time() * 1000)
    for i in range(RECORDS):
        producer.produce(
            topic,
            f"value-{i}".encode(),
            key=f"key-{i}".encode(),
            on_delivery=lambda e, m: reports.append(e),
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    # What the old-format client sees: every record delivered, no error.
    assert len(reports) == RECORDS
    errors = [str(e) for e in reports if e is not None]
    assert not errors, f"the old-format producer was refused: {errors[:1]}"

    messages = _read(bootstrap, topic, RECORDS)
    assert [(m.key(), m.value()) for m in messages] == [
        (f"key-{i}".encode(), f"value-{i}".encode()) for i in range(RECORDS)
    ]
    after_ms = int(time.time() * 1000)
    for message in messages:
        # Magic 0 has no timestamps: the gateway's time of conversion.
        assert before_ms - 1000 <= message.timestamp()[1] <= after_ms + 1000
