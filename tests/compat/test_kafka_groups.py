"""Consumer groups and idempotent producers of real Kafka clients, through the gateways.

The cluster of conftest.py (a group coordinator behind two gateways) is shared by the session;
each test has a topic and a group of its own. Every test checks that each produced record is
consumed exactly once with its key, headers and offset, and reads the committed offsets back
with OffsetFetch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pytest
from cluster_fixture import wait_until
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

from brook.client import Consumer
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

# Short sessions and frequent heartbeats: a rebalance completes within a heartbeat or two.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
GROUP_SETTLE_TIMEOUT_S = 60.0
# Records the first consumer of the resume test takes before committing and leaving.
FIRST_CONSUMER_RECORDS = 20
PER_PARTITION = RECORDS // PARTITIONS


def _confluent_consumer(bootstrap: str, group: str, **config: Any) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            **config,
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


def test_a_second_confluent_consumer_with_the_same_instance_id_fences_the_first(
    bootstrap: str,
) -> None:
    """Static membership (KIP-345): consumer B joining with consumer A's group.instance.id takes
    A's place; A learns it was fenced (a fatal FENCED_INSTANCE_ID, not a silent timeout or a
    rejoin that fences B back), and B takes A's partitions from the offsets A committed, so
    every record is read once over the two of them."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    topic = "groups-confluent-static-fence"
    group = f"{topic}-group"
    static = {"group.instance.id": f"{topic}-instance"}
    create_topic_confluent(bootstrap, topic)
    confluent_produce(bootstrap, topic, {"acks": "all"})

    first_errors: list[Any] = []
    first = _confluent_consumer(bootstrap, group, error_cb=first_errors.append, **static)
    second = None
    try:
        first.subscribe([topic])
        first_records: Consumed = []
        confluent_poll(first, first_records, FIRST_CONSUMER_RECORDS)
        first.commit(asynchronous=False)
        committed = _confluent_committed(first, topic)
        # A reads nothing more: every record past its commit is B's to read, once.
        first.pause(first.assignment())

        second = _confluent_consumer(bootstrap, group, **static)
        second.subscribe([topic])
        second_records: Consumed = []
        fenced: Any = None
        deadline = time.monotonic() + GROUP_SETTLE_TIMEOUT_S
        while fenced is None or len(second_records) < RECORDS - len(first_records):
            assert time.monotonic() < deadline, (
                f"A fenced: {fenced}, A's errors: {first_errors}, "
                f"B read {len(second_records)} records"
            )
            if fenced is None:
                message = first.poll(0.1)
                if message is not None:
                    assert message.error() is not None, "A read a record after its commit"
                    fenced = message.error()
            confluent_poll_once(second, second_records, 0.1)
        # librdkafka makes the fence a fatal error of the consumer: poll delivers an error
        # _FATAL whose text is FENCED_INSTANCE_ID's, and every later commit raises _FATAL.
        fenced_instance = KafkaError(KafkaError.FENCED_INSTANCE_ID).str()
        assert fenced.code() == KafkaError._FATAL and fenced_instance in fenced.str(), fenced
        with pytest.raises(KafkaException) as commit_failure:
            first.commit(
                offsets=[TopicPartition(topic, p, max(committed[p], 0)) for p in range(PARTITIONS)],
                asynchronous=False,
            )
        assert commit_failure.value.args[0].code() == KafkaError._FATAL, commit_failure.value
        assert {tp.partition for tp in second.assignment()} == set(range(PARTITIONS))
    finally:
        first.close()
        if second is not None:
            second.close()
    for partition in range(PARTITIONS):
        resumed_at = min(o for p, o, *_ in second_records if p == partition)
        assert resumed_at == max(committed[partition], 0)
    check_round_trip(topic, first_records + second_records)


def _kafka_python_consumer(bootstrap: str, topic: str, group: str, **config: Any) -> Any:
    """A kafka-python member of ``group`` subscribed to ``topic``, committing only when told."""
    from kafka import KafkaConsumer

    return KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        **config,
    )


def _kafka_python_read_back(bootstrap: str, topic: str, group: str) -> Consumed:
    """Every record of ``topic``, read by a kafka-python group member that then commits."""
    from kafka import TopicPartition

    consumer = _kafka_python_consumer(bootstrap, topic, group)
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


# -- kafka-python leading a group that another member joins -------------------------------------

LEADER_ROUNDS = 3
# kafka-python's poll blocks up to this long on a join in flight: long enough that a rebalance
# completes inside one poll call (see _KafkaPythonMember).
KAFKA_PYTHON_POLL_MS = 1000
BROOK_POLL_S = 0.1
MEMBER_STOP_TIMEOUT_S = 30.0


class _KafkaPythonMember:
    """A kafka-python group member polled by a thread of its own, as an application would poll
    it, while the test drives the other member; it records its assignment, its records, and
    every assignment it computed as the group's leader.

    kafka-python (3.0.12, and its main branch) loses a completed join in two ways when poll()
    returns while its JoinGroup/SyncGroup round is still in flight, and the round then completes
    between two polls: if the member still wants to rejoin, the next poll discards the finished
    round and joins again (the leader's new join starts another rebalance, so a loop shorter than
    a rebalance can repeat this for tens of seconds); if it no longer does (a rejoin asked for
    only because the topic's metadata arrived after the first assignment, which the leader's
    assignment of the in-flight round then records), the round is never finished: heartbeats
    stay disabled and no assignment is taken, forever. Hence a thread of its own with a poll
    longer than a rebalance, and the topic's metadata read before the first join."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._owned: set[int] = set()
        self._records: Consumed = []
        self._error: BaseException | None = None
        self._led_members: list[int] = []
        record_leadership: Callable[[int], None] = self._led

        class RecordingRangeAssignor(RangePartitionAssignor):  # type: ignore[misc]
            @classmethod
            def assign(cls, cluster: Any, members: Any) -> Any:
                record_leadership(len(members))
                return super().assign(cluster, members)

        self._consumer = _kafka_python_consumer(
            bootstrap, topic, group, partition_assignment_strategy=[RecordingRangeAssignor]
        )
        try:
            assert topic in self._consumer.topics()
        except BaseException:
            self._consumer.close()
            raise
        self._thread = threading.Thread(target=self._run, name="kafka-python-member")

    def _led(self, members: int) -> None:
        with self._lock:
            self._led_members.append(members)

    def led(self) -> list[int]:
        """The number of members of each group assignment it computed as the leader."""
        with self._lock:
            return list(self._led_members)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batches = self._consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
                owned = {tp.partition for tp in self._consumer.assignment()}
                with self._lock:
                    self._owned = owned
                    for records in batches.values():
                        self._records.extend(
                            (r.partition, r.offset, r.key, r.value, list(r.headers))
                            for r in records
                        )
        except BaseException as error:
            self._error = error
        finally:
            self._consumer.close()

    def owned(self) -> set[int]:
        """The partitions it owns, as of its last poll; fails the test if its thread died."""
        assert self._error is None, f"the kafka-python member failed: {self._error!r}"
        with self._lock:
            return set(self._owned)

    def records(self) -> Consumed:
        with self._lock:
            return list(self._records)

    def __enter__(self) -> _KafkaPythonMember:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(MEMBER_STOP_TIMEOUT_S)
        assert not self._thread.is_alive(), "the kafka-python member did not stop"


def _poll_until(
    brook: Consumer,
    consumed: Consumed,
    condition: Callable[[], bool],
    what: str,
    state: Callable[[], str],
) -> None:
    """Polls the Brook member into ``consumed`` until ``condition()`` holds."""
    deadline = time.monotonic() + GROUP_SETTLE_TIMEOUT_S
    while True:
        consumed.extend(
            (r.partition, r.offset, r.key, r.value, list(r.headers))
            for r in brook.poll(BROOK_POLL_S)
        )
        if condition():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {GROUP_SETTLE_TIMEOUT_S} s waiting for {what}; {state()}")


def _brook_member_joins_a_kafka_python_leader(
    cluster: LocalCluster, bootstrap: str, topic: str
) -> None:
    everything = set(range(PARTITIONS))
    group = f"{topic}-group"
    create_topic_kafka_python(bootstrap, topic)
    with _KafkaPythonMember(bootstrap, topic, group) as leader:
        wait_until(
            lambda: leader.owned() == everything,
            "kafka-python to lead the group alone",
            GROUP_SETTLE_TIMEOUT_S,
        )
        assert leader.led() and set(leader.led()) == {1}
        settings = {
            "bootstrap.servers": cluster.bootstrap_servers(Role.STORAGE_NODE),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        }
        with Consumer(settings) as brook:
            brook.subscribe([topic])
            consumed: Consumed = []

            def ours() -> set[int]:
                return {tp.partition for tp in brook.assignment()}

            def shared() -> bool:
                theirs, mine = leader.owned(), ours()
                split = bool(theirs and mine) and theirs.isdisjoint(mine)
                return split and theirs | mine == everything

            def state() -> str:
                return (
                    f"{topic}: kafka-python owns {sorted(leader.owned())} (led {leader.led()}), "
                    f"Brook owns {sorted(ours())}"
                )

            _poll_until(brook, consumed, shared, "the two to share the partitions", state)
            split = (leader.owned(), ours())
            assert leader.led()[-1] == 2, "kafka-python did not assign both members"

            kafka_python_produce(bootstrap, topic)
            _poll_until(
                brook,
                consumed,
                lambda: len(leader.records()) + len(consumed) >= RECORDS,
                "both members to consume what was produced",
                state,
            )
            assert (leader.owned(), ours()) == split, "the group rebalanced again"
            theirs = leader.records()
            assert {p for p, *_ in theirs} == split[0]
            assert {p for p, *_ in consumed} == split[1]
            check_round_trip(topic, theirs + consumed)


def test_kafka_python_leader_and_a_brook_member_joining_it_share_partitions_and_consume(
    compat_cluster: LocalCluster, bootstrap: str
) -> None:
    """kafka-python leads a group alone; a Brook consumer joins, which makes kafka-python rejoin
    and assign both. Each round ends with every partition owned by exactly one of them,
    kafka-python's last assignment computed for both, and each consuming exactly the records of
    its own partitions, once."""
    for round_number in range(LEADER_ROUNDS):
        _brook_member_joins_a_kafka_python_leader(
            compat_cluster, bootstrap, f"groups-kafka-python-leader-{round_number}"
        )
