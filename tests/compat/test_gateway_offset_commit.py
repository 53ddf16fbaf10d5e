"""OffsetCommit through the gateway answers UNKNOWN_TOPIC_OR_PARTITION for a topic that does not
exist, and for a partition number an existing topic does not have, as a Kafka broker does, while
the request's other partitions are committed (issue #14, point 4).

librdkafka reports one error for a whole commit (the first partition error, set on every
partition of the callback's list), so the per-partition outcome is read back with
OffsetFetch: the known partitions of a mixed commit hold their new offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 30.0
PARTITIONS = 2


def _commit(consumer: Any, results: list[Any], offsets: list[Any]) -> Any:
    """Commits ``offsets``; the error the client reports for the commit (None: success)."""
    results.clear()
    consumer.commit(offsets=offsets, asynchronous=True)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not results:
        assert time.monotonic() < deadline, "the commit was never answered"
        consumer.poll(0.1)
    [error] = results
    return None if error is None else error.code()


def test_commit_to_unknown_topics_and_partitions_fails_them_and_commits_the_rest(
    bootstrap: str,
) -> None:
    from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = "offset-commit-known"
    missing = "offset-commit-missing"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(CLIENT_TIMEOUT_S)

    results: list[Any] = []
    consumer: Any = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "offset-commit-unknown",
            "enable.auto.commit": False,
            "on_commit": lambda error, partitions: results.append(error),
        }
    )
    unknown = KafkaError.UNKNOWN_TOPIC_OR_PART
    try:
        assert _commit(consumer, results, [TopicPartition(missing, 0, 5)]) == unknown
        assert _commit(consumer, results, [TopicPartition(topic, PARTITIONS, 5)]) == unknown
        mixed = [
            TopicPartition(topic, 0, 7),
            TopicPartition(missing, 0, 5),
            TopicPartition(topic, PARTITIONS + 3, 9),
            TopicPartition(topic, 1, 11),
        ]
        assert _commit(consumer, results, mixed) == unknown
        committed = consumer.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(missing, 0)],
            timeout=CLIENT_TIMEOUT_S,
        )
        assert [(c.topic, c.partition, c.offset) for c in committed] == [
            (topic, 0, 7),
            (topic, 1, 11),
            (missing, 0, OFFSET_INVALID),
        ]
        # Known partitions alone commit cleanly.
        known = [TopicPartition(topic, 0, 8), TopicPartition(topic, 1, 12)]
        assert _commit(consumer, results, known) is None
    finally:
        consumer.close()
