"""A topic deleted and re-created with fewer partitions while a confluent-kafka producer runs.

librdkafka tells the two incarnations apart by the topic id Metadata v10+ carries: a new id
makes it drop the partitions the new topic lacks (failing their queued messages) and start
the rest afresh. Without ids it sees only "10 partitions, then 3", keeps the 7 extra partitions
forever, and their messages stay queued past any flush. The guarantee checked: after a
generous flush nothing is left undelivered; every message got one report, a success or an
error saying its partition or topic is gone; every success for a message produced once the
new topic was listed is readable in it at the reported offset; the new topic holds nothing
unacknowledged, no duplicate, and each partition's records in the order they were produced.
(A message produced earlier may have been appended to the old topic and deleted with it: as
with Kafka, a delete is committed by the controllers before every storage node has applied
it, and Produce names topics, not topic ids.)
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from cluster_fixture import wait_until

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 60.0
OLD_PARTITIONS = 10
NEW_PARTITIONS = 3
# Messages produced while each phase lasts at least (the producer runs throughout).
MESSAGES_PER_PHASE_MIN = 150
# Paces the producer (a poll that also serves delivery reports), so the phases overlap it.
PRODUCE_POLL_S = 0.002
READ_TIMEOUT_S = 60.0
# The delivery errors that say a message's partition or topic is gone. librdkafka fails the
# messages of partitions the new topic lacks with _UNKNOWN_PARTITION, or _DESTROY when it
# drops such a partition with messages still queued on it.
GONE_ERRORS = frozenset(
    {"_UNKNOWN_PARTITION", "_DESTROY", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC"}
)


def _partitions(admin: Any, topic: str) -> int | None:
    listed = admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    if listed is None or listed.error is not None:
        return None
    return len(listed.partitions)


class _RunningProducer:
    """A confluent-kafka producer producing numbered, keyed messages on a thread of its own
    until stopped; every delivery report is kept by message number."""

    def __init__(self, bootstrap: str, topic: str, config: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
        self.produced = 0
        self.reports: dict[int, list[tuple[Any, int, int]]] = {}
        self.produce_errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recreate-producer")
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return self.produced

    def _report(self, index: int) -> Any:
        def on_delivery(error: Any, message: Any) -> None:
            self.reports.setdefault(index, []).append(
                (error, message.partition(), message.offset())
            )

        return on_delivery

    def _run(self) -> None:
        while not self._stop.is_set():
            index = self.produced
            try:
                self.producer.produce(
                    self.topic,
                    key=f"key-{index}".encode(),
                    value=str(index).encode(),
                    on_delivery=self._report(index),
                )
            except BufferError as error:  # the local queue is full: serve it, then retry
                self.produce_errors.append(str(error))
                self.producer.poll(PRODUCE_POLL_S)
                continue
            with self._lock:
                self.produced += 1
            self.producer.poll(PRODUCE_POLL_S)

    def wait_for(self, count: int) -> None:
        wait_until(lambda: self.count() >= count, f"{count} messages produced", CLIENT_TIMEOUT_S)

    def wait_delivered(self, since: int, count: int) -> None:
        """Waits until ``count`` messages numbered ``since`` or above were acknowledged (some
        produced right after a re-creation still go to partitions the client has not yet
        learnt are gone, and fail)."""

        def delivered() -> int:
            reports = list(self.reports.items())  # the producer thread adds to it
            return sum(1 for n, got in reports if n >= since and got[0][0] is None)

        wait_until(lambda: delivered() >= count, f"{count} messages acknowledged", CLIENT_TIMEOUT_S)

    def stop_and_flush(self) -> int:
        """Stops producing; the number of messages still undelivered after the flush."""
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT_S)
        assert not self._thread.is_alive()
        remaining: int = self.producer.flush(FLUSH_TIMEOUT_S)
        return remaining


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(offset, message number)] of everything in ``topic``, from offset 0 up to
    the high watermark each partition has now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=CLIENT_TIMEOUT_S, cached=False
            )[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        read: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(read[p][-1][0] + 1 < ends[p] if read[p] else ends[p] > 0 for p in read):
            assert time.monotonic() < deadline, f"not read within {READ_TIMEOUT_S} s: {ends}"
            message: Any = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            read[message.partition()].append((message.offset(), int(message.value())))
        return read
    finally:
        consumer.close()


def _delete_and_recreate_while_producing(
    bootstrap: str, topic: str, config: dict[str, Any]
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, OLD_PARTITIONS, 1)])[topic].result(CLIENT_TIMEOUT_S)
    wait_until(
        lambda: _partitions(admin, topic) == OLD_PARTITIONS, f"{topic} listed", CLIENT_TIMEOUT_S
    )

    running = _RunningProducer(bootstrap, topic, config)
    running.start()
    try:
        running.wait_for(MESSAGES_PER_PHASE_MIN)
        deleted = admin.delete_topics([topic], operation_timeout=CLIENT_TIMEOUT_S)
        deleted[topic].result(CLIENT_TIMEOUT_S)
        after_delete = running.count()
        wait_until(lambda: _partitions(admin, topic) is None, f"{topic} gone", CLIENT_TIMEOUT_S)
        running.wait_for(after_delete + MESSAGES_PER_PHASE_MIN)
        created = admin.create_topics([NewTopic(topic, NEW_PARTITIONS, 1)])
        created[topic].result(CLIENT_TIMEOUT_S)
        wait_until(
            lambda: _partitions(admin, topic) == NEW_PARTITIONS,
            f"{topic} re-created",
            CLIENT_TIMEOUT_S,
        )
        recreated = running.count()
        running.wait_delivered(recreated, MESSAGES_PER_PHASE_MIN)
    finally:
        remaining = running.stop_and_flush()

    reports = running.reports
    outcomes: dict[str, int] = {}
    for index in range(running.produced):
        got = reports.get(index, [])
        assert len(got) <= 1, f"message {index} got {len(got)} delivery reports: {got}"
        name = "undelivered" if not got else str(got[0][0].name()) if got[0][0] else "delivered"
        outcomes[name] = outcomes.get(name, 0) + 1
    print(f"{running.produced} produced, outcomes {outcomes}, remaining after flush {remaining}")
    assert remaining == 0, f"{remaining} messages undelivered after the flush: {outcomes}"
    assert outcomes.get("undelivered", 0) == 0

    read = _read_all(bootstrap, topic, NEW_PARTITIONS)
    where = {}
    for partition, records in read.items():
        numbers = [n for _, n in records]
        assert numbers == sorted(numbers), f"partition {partition} out of order: {numbers}"
        for offset, number in records:
            assert number not in where, f"message {number} read twice"
            where[number] = (partition, offset)
            error, reported_partition, reported_offset = reports[number][0]
            assert error is None, f"message {number} was read but reported failed: {error}"
            assert (reported_partition, reported_offset) == (partition, offset)
    for index in range(recreated, running.produced):
        error, partition, offset = reports[index][0]
        if error is None:
            assert where.get(index) == (partition, offset), f"message {index} acknowledged, lost"
    failures = {name for name in outcomes if name not in ("delivered", "undelivered")}
    assert failures <= GONE_ERRORS, f"failures other than a partition or topic gone: {outcomes}"
    delivered_new = sum(1 for n in where if n >= recreated)
    assert delivered_new >= MESSAGES_PER_PHASE_MIN, "the re-created topic got too little"


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_confluent_producer_survives_its_topic_deleted_and_recreated_smaller(
    bootstrap: str, idempotent: bool
) -> None:
    _delete_and_recreate_while_producing(
        bootstrap,
        f"recreated-{'idempotent' if idempotent else 'plain'}",
        {"enable.idempotence": idempotent},
    )
