"""Kafka transactions with confluent-kafka (librdkafka) through the gateway (issue #16).

The compatibility suite's shared cluster serves every test (conftest.py: two storage nodes,
two gateways, so a transaction spans partitions led by different nodes); each test works on
topics of its own. What is checked is what a user relies on:

- a transactional producer's committed records are all visible to a read_committed consumer,
  in order, and its aborted ones are not, although a read_uncommitted consumer sees them (the
  abort really wrote data); an open transaction is invisible to read_committed until it
  commits (the last stable offset);
- a consume-transform-produce loop with ``send_offsets_to_transaction`` copies its input
  exactly once, and the group's committed offsets end at the input's end, though some of its
  transactions were aborted after writing records and sending offsets;
- a second producer with the same ``transactional.id`` fences the first: the first one's
  commit fails fatally, and its records are never visible to read_committed.

Helpers here (topics, transactional producers, records) serve the other test_transactions_*
modules too; reading a topic back per isolation level is txn_copy_job.read_topics.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, Final

import pytest
from cluster_fixture import wait_until
from txn_copy_job import (
    FENCED_CODES,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    CopyJob,
    Record,
    assert_copied_exactly_once,
    copy_in_transactions,
    produce_all,
    read_topics,
    wait_for_records,
)

pytestmark = pytest.mark.integration

PARTITIONS: Final = 3
TIMEOUT_S: Final = 30.0
RECORDS_PER_INPUT_PARTITION: Final = 40
COPY_TIMEOUT_S: Final = 120.0


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = PARTITIONS) -> None:
    """Creates ``topics`` (replication factor 1) and waits until every partition answers a
    ListOffsets, as a leader does once it has taken up leadership."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    names = list(topics)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in names]).values():
        future.result(TIMEOUT_S)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "transactions-probe"})

    def answers(tp: Any) -> bool:
        try:
            probe.get_watermark_offsets(tp, timeout=1.0)
        except KafkaException:
            return False
        return True

    try:
        for topic in names:
            for partition in range(partitions):
                tp = TopicPartition(topic, partition)
                wait_until(
                    lambda tp=tp: answers(tp), f"a leader for {topic}-{partition}", TIMEOUT_S
                )
    finally:
        probe.close()


def transactional_producer(bootstrap: str, transactional_id: str, **settings: Any) -> Any:
    """A confluent-kafka Producer with ``transactional_id``, its transactions initialized."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **settings,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def records_for(topics: Sequence[str], tag: str, per_partition: int) -> list[Record]:
    """``per_partition`` keyed records for every partition of ``topics``, values naming
    ``tag`` (a transaction) so that a record read back says where it came from."""
    return [
        (
            topic,
            partition,
            f"key-{partition}-{i}".encode(),
            f"{tag}:{topic}:{partition}:{i}".encode(),
        )
        for topic in topics
        for partition in range(PARTITIONS)
        for i in range(per_partition)
    ]


def test_committed_records_are_read_committed_and_aborted_ones_only_read_uncommitted(
    bootstrap: str,
) -> None:
    topics = ["txn-commit-abort-a", "txn-commit-abort-b"]
    create_topics(bootstrap, topics)
    producer = transactional_producer(bootstrap, "txn-commit-abort")
    first = records_for(topics, "first", 3)
    aborted = records_for(topics, "aborted", 2)
    last = records_for(topics, "last", 2)
    for records, commit in ((first, True), (aborted, False), (last, True)):
        producer.begin_transaction()
        produce_all(producer, records)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    committed = partial(read_topics, bootstrap, topics, READ_COMMITTED, PARTITIONS)
    uncommitted = partial(read_topics, bootstrap, topics, READ_UNCOMMITTED, PARTITIONS)
    wait_for_records(committed, first + last)
    wait_for_records(uncommitted, first + aborted + last)

    # An open transaction: written (read_uncommitted sees it), not visible to read_committed
    # until its commit; the last stable offset holds read_committed consumers before it.
    pending = records_for(topics, "pending", 2)
    producer.begin_transaction()
    produce_all(producer, pending)
    wait_for_records(uncommitted, first + aborted + last + pending)
    wait_for_records(committed, first + last)
    producer.commit_transaction(TIMEOUT_S)
    wait_for_records(committed, first + last + pending)


def test_consume_transform_produce_copies_exactly_once_and_commits_the_input_end(
    bootstrap: str,
) -> None:
    from confluent_kafka import Producer

    source, destination, group = "txn-ctp-in", "txn-ctp-out", "txn-ctp-group"
    create_topics(bootstrap, [source, destination])
    input_records = records_for([source], "input", RECORDS_PER_INPUT_PARTITION)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    produce_all(plain, input_records)
    events: list[dict[str, Any]] = []
    job = CopyJob(bootstrap, source, destination, group, "txn-ctp", 7, abort_every=3)
    copy_bounded(job, events)
    assert any(e["event"] == "aborted" for e in events), "no transaction was aborted"

    assert_copied_exactly_once(job, input_records, PARTITIONS)


def test_a_copy_job_started_at_the_end_of_its_input_is_done_without_a_transaction(
    bootstrap: str,
) -> None:
    """The job's end is the group's committed offsets reaching the input's end, although
    its consumer, starting there, never reads a record (librdkafka has no position for a
    partition it has read nothing from, nor for one it has just been rewound in)."""
    from confluent_kafka import Producer

    source, destination, group = "txn-ctp-again-in", "txn-ctp-again-out", "txn-ctp-again"
    create_topics(bootstrap, [source, destination])
    produce_all(
        Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True}),
        records_for([source], "input", 3),
    )
    job = CopyJob(bootstrap, source, destination, group, "txn-ctp-again", 5)
    copy_bounded(job, [])

    again: list[dict[str, Any]] = []
    copy_bounded(job, again)
    assert again == [{"event": "ready"}, {"event": "done"}]


def copy_bounded(job: CopyJob, events: list[dict[str, Any]]) -> None:
    """Runs ``job`` to the end of its input, its events appended to ``events``; fails if
    it has not reported "done" within COPY_TIMEOUT_S."""
    deadline = time.monotonic() + COPY_TIMEOUT_S
    copy_in_transactions(job, report=events.append, stop=lambda: time.monotonic() > deadline)
    assert events[-1] == {"event": "done"}, f"not done within {COPY_TIMEOUT_S} s: {events[-3:]}"


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    bootstrap: str,
) -> None:
    from confluent_kafka import KafkaError, KafkaException

    topics = ["txn-fencing"]
    create_topics(bootstrap, topics)
    zombie = transactional_producer(bootstrap, "txn-fencing")
    zombie.begin_transaction()
    zombie_records = records_for(topics, "zombie", 2)
    produce_all(zombie, zombie_records)

    # The successor's init_transactions bumps the epoch and aborts the zombie's transaction.
    successor = transactional_producer(bootstrap, "txn-fencing")
    late = records_for(topics, "zombie-late", 1)
    with pytest.raises(KafkaException) as refused:
        for topic, partition, key, value in late:
            zombie.produce(topic, value, key, partition=partition)
        zombie.commit_transaction(TIMEOUT_S)
    error = refused.value.args[0]
    assert error.fatal(), error
    assert error.code() in FENCED_CODES | {KafkaError._FATAL}, error

    successor.begin_transaction()
    successor_records = records_for(topics, "successor", 2)
    produce_all(successor, successor_records)
    successor.commit_transaction(TIMEOUT_S)
    wait_for_records(
        partial(read_topics, bootstrap, topics, READ_COMMITTED, PARTITIONS), successor_records
    )
    # The zombie's first records were written before it was fenced, then aborted; its late
    # ones were refused at the storage nodes (old epoch) and never written.
    wait_for_records(
        partial(read_topics, bootstrap, topics, READ_UNCOMMITTED, PARTITIONS),
        zombie_records + successor_records,
    )
