"""A Kafka client connected through the gateway keeps producing and consuming while the storage
node leading its partition is killed (issue #9, done-when).

Three controllers, three storage nodes and one gateway as processes; one partition with
replication factor 3 and min.insync.replicas=2. A confluent-kafka producer (acks=all, its own
retries, one request in flight so that a retry cannot overtake the batch after it) sends a
numbered stream while a confluent-kafka consumer reads the partition. Mid-stream the leader
storage node is killed with SIGKILL. The gateway stays the partition's leader in the clients'
eyes and forwards to whichever storage node leads now.

The guarantees checked:
- the producer keeps going: every delivery report succeeds (librdkafka's retries absorb the
  failover) and records sent after the kill are acknowledged;
- every acknowledged record is read back (acks=all: none lost) and none is invented;
- order is kept: the first occurrences of the numbers read are in send order. A retried
  batch whose first attempt was appended may appear twice without idempotence (which needs
  InitProducerId); that is at-least-once, counted and printed, not failed;
- the consumer keeps consuming after the leader change: it reads records sent after the kill.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import pytest
from cluster_fixture import ClusterFactory, wait_until

from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

TOPIC: Final = "failover"
PARTITION: Final = 0
SESSION_TIMEOUT_MS: Final = 2000
HEARTBEAT_INTERVAL_MS: Final = 200
WAIT_TIMEOUT_S: Final = 40.0
POLL_S: Final = 0.05
PAUSE_BETWEEN_SENDS_S: Final = 0.005
ACKED_BEFORE_KILL: Final = 100
ACKED_AFTER_KILL: Final = 200
# librdkafka retries a record until this expires; far longer than a failover takes.
MESSAGE_TIMEOUT_MS: Final = 45_000
FLUSH_TIMEOUT_S: Final = MESSAGE_TIMEOUT_MS / 1000 + 5


def _cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    session = str(SESSION_TIMEOUT_MS)
    heartbeat = str(HEARTBEAT_INTERVAL_MS)
    return cluster_factory(
        controllers=3,
        storage_nodes=3,
        group_coordinators=0,
        gateways=1,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": session,
                # Leadership stays where the failover put it while the test watches.
                "auto.leader.rebalance.enable": "false",
                "offsets.topic.num.partitions": "1",
            },
            "storage-node": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
                "replica.lag.time.max.ms": "2000",
                "replica.fetch.wait.max.ms": "200",
                "replica.fetch.backoff.ms": "100",
            },
            "gateway": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
            },
        },
    )


@contextmanager
def _in_thread(run: Callable[[threading.Event], None], name: str) -> Iterator[None]:
    """Runs ``run(stop)`` in a thread for the duration of the block; stops and joins it."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,), name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(WAIT_TIMEOUT_S)
        assert not thread.is_alive(), f"{name} did not stop"


class _NumberedProducer:
    """Sends 0, 1, 2, ... from a thread; records which numbers were acknowledged, in delivery
    order, and every delivery error."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "max.in.flight.requests.per.connection": 1,
                "retries": 1_000_000,
                "retry.backoff.ms": 100,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                "request.timeout.ms": 5000,
                "linger.ms": 5,
            }
        )
        self.sent = 0
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _delivered(self, error: Any, message: Any) -> None:
        with self._lock:
            if error is not None:
                self.errors.append(f"{int(message.value())}: {error}")
            else:
                self.acked.append(int(message.value()))

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def acked_after(self, number: int) -> int:
        """How many numbers from ``number`` on were acknowledged."""
        with self._lock:
            return sum(n >= number for n in self.acked)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._producer.produce(
                TOPIC, str(self.sent).encode(), partition=PARTITION, on_delivery=self._delivered
            )
            self.sent += 1
            self._producer.poll(0)
            time.sleep(PAUSE_BETWEEN_SENDS_S)

    @contextmanager
    def running(self) -> Iterator[_NumberedProducer]:
        try:
            with _in_thread(self._run, "numbered-producer"):
                yield self
        finally:
            remaining = self._producer.flush(FLUSH_TIMEOUT_S)
            assert remaining == 0, f"{remaining} records neither delivered nor failed"


class _Reader:
    """Reads the partition from offset 0 in a thread: the numbers, in log order."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer

        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{TOPIC}-reader",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 200,
            }
        )
        self.numbers: list[int] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _run(self, stop: threading.Event) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(TOPIC, PARTITION, 0)])
        while not stop.is_set():
            message = self._consumer.poll(0.2)
            if message is None:
                continue
            with self._lock:
                if message.error() is not None:
                    # Transient errors are reported and the client carries on; kept to show.
                    self.errors.append(str(message.error()))
                else:
                    value = message.value()
                    assert value is not None
                    self.numbers.append(int(value))
        self._consumer.close()

    def snapshot(self) -> list[int]:
        with self._lock:
            return list(self.numbers)

    @contextmanager
    def running(self) -> Iterator[_Reader]:
        with _in_thread(self._run, "reader"):
            yield self


def _leader(admin: Admin) -> int | None:
    return admin.describe_topics([TOPIC])[TOPIC].partitions[PARTITION].leader


def _fully_replicated(admin: Admin) -> bool:
    partition = admin.describe_topics([TOPIC])[TOPIC].partitions[PARTITION]
    return partition.leader is not None and len(partition.isr) == len(partition.replicas)


def _first_occurrences(numbers: list[int]) -> list[int]:
    return list(dict.fromkeys(numbers))


def test_kafka_clients_through_the_gateway_keep_going_when_the_partition_leader_is_killed(
    cluster_factory: ClusterFactory,
) -> None:
    started = time.monotonic()
    cluster = _cluster(cluster_factory)
    nodes = {cluster.spec(n).node_id: n for n in cluster.names(Role.STORAGE_NODE)}
    bootstrap = cluster.kafka_bootstrap_servers
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics([NewTopic(TOPIC, 1, 3, configs={"min.insync.replicas": "2"})])
        assert created == {TOPIC: None}
        wait_until(lambda: _fully_replicated(admin), "a leader and a full ISR", WAIT_TIMEOUT_S)
        producer = _NumberedProducer(bootstrap)
        reader = _Reader(bootstrap)
        with reader.running():
            with producer.running():
                wait_until(
                    lambda: producer.acked_count() >= ACKED_BEFORE_KILL,
                    f"{ACKED_BEFORE_KILL} acknowledgements before the kill",
                    WAIT_TIMEOUT_S,
                    POLL_S,
                )
                victim = _leader(admin)
                assert victim is not None
                sent_before_kill = producer.sent
                cluster.kill(nodes[victim], signal.SIGKILL)
                killed_at = time.monotonic()
                wait_until(
                    lambda: _leader(admin) not in (None, victim),
                    "a new leader",
                    WAIT_TIMEOUT_S,
                    POLL_S,
                )
                new_leader_s = time.monotonic() - killed_at
                wait_until(
                    lambda: producer.acked_after(sent_before_kill) >= ACKED_AFTER_KILL,
                    f"{ACKED_AFTER_KILL} acknowledgements of records sent after the kill",
                    WAIT_TIMEOUT_S,
                    POLL_S,
                )
                resumed_s = time.monotonic() - killed_at
            # Sending has stopped and every record is delivered or failed: the reader must
            # reach the last acknowledged number.
            assert producer.errors == [], producer.errors[:10]
            last_acked = max(producer.acked)
            wait_until(
                lambda: last_acked in reader.snapshot(),
                "the reader to reach the last acknowledged record",
                WAIT_TIMEOUT_S,
                POLL_S,
            )
    numbers = reader.snapshot()
    first = _first_occurrences(numbers)
    print(
        f"\nleader {victim} killed after {sent_before_kill} sends; new leader in "
        f"{new_leader_s:.1f} s, {ACKED_AFTER_KILL} post-kill acks by {resumed_s:.1f} s; "
        f"{len(producer.acked)} acked of {producer.sent} sent; {len(numbers)} read, "
        f"{len(numbers) - len(first)} duplicates from retries; reader errors: "
        f"{reader.errors[:5]}; {time.monotonic() - started:.1f} s in all"
    )
    missing = sorted(set(producer.acked) - set(numbers))
    assert not missing, f"acknowledged records lost: {missing[:20]}"
    assert first == sorted(first), "records read out of send order"
    assert all(0 <= n < producer.sent for n in numbers), "records read that were never sent"
    assert any(n >= sent_before_kill for n in numbers), "the reader stopped at the kill"
