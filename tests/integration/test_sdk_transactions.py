"""The SDK's transactional producer and read_committed consumer against a real cluster (a
controller, a storage node and two coordinators as processes; one cluster shared by the tests
of this module, each on topics and ids of its own).

- a transaction committed and one aborted, each across two partitions: a read_committed
  consumer reads exactly the committed records, a read_uncommitted one reads both;
- send_offsets_to_transaction with an SDK consumer group: the group's committed offsets are
  visible only once the transaction commits, and a read_committed member of the group that
  joins while they are pending keeps its assignment (no rebalance) and starts from them;
- KIP-588: a transaction the coordinator aborted because it outlived transaction.timeout.ms
  is refused by its partition (INVALID_PRODUCER_EPOCH), which makes it abortable; the abort
  recovers the producer, whose next transaction commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Final

import pytest
from cluster_fixture import one_node_transactions_cluster, wait_until

from brook.client import (
    Admin,
    Consumer,
    ConsumerRecord,
    Producer,
    TopicPartition,
    TransactionState,
)
from brook.client.admin import NewTopic
from brook.client.errors import TransactionAbortableError
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

PARTITIONS: Final = 2
TRANSACTION_PARTITIONS: Final = 2
WAIT_TIMEOUT_S: Final = 60.0
CLIENT_TIMEOUT_S: Final = 30.0
# The coordinators look for timed-out transactions this often.
ABORT_CHECK_MS: Final = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with one_node_transactions_cluster(
        tmp_path_factory,
        "sdk-txn",
        controller={
            "offsets.topic.num.partitions": str(TRANSACTION_PARTITIONS),
            "transaction.state.log.num.partitions": str(TRANSACTION_PARTITIONS),
        },
        group_coordinator={
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS),
        },
    ) as started:
        yield started


def _bootstrap(cluster: LocalCluster) -> str:
    return cluster.bootstrap_servers(Role.STORAGE_NODE)


def _create_topics(cluster: LocalCluster, *topics: str) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics([NewTopic(topic, PARTITIONS, 1) for topic in topics])
        assert created == dict.fromkeys(topics)


def _producer(cluster: LocalCluster, transactional_id: str, **extra: object) -> Producer:
    settings: dict[str, object] = {
        "bootstrap.servers": _bootstrap(cluster),
        "transactional.id": transactional_id,
        "max.block.ms": int(CLIENT_TIMEOUT_S * 1000),
        "linger.ms": 0,
    }
    settings.update({k.replace("_", "."): v for k, v in extra.items()})
    return Producer(settings)


def _fill(cluster: LocalCluster, topic: str) -> None:
    """Four records, two a partition, without a transaction."""
    with Producer(bootstrap_servers=_bootstrap(cluster)) as producer:
        for n in range(4):
            producer.send(topic, str(n).encode(), partition=n % PARTITIONS)
        producer.flush(CLIENT_TIMEOUT_S)


def _consumer(cluster: LocalCluster, **extra: object) -> Consumer:
    settings: dict[str, object] = {
        "bootstrap.servers": _bootstrap(cluster),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "retry.backoff.max.ms": 500,
    }
    settings.update({k.replace("_", "."): v for k, v in extra.items()})
    return Consumer(settings)


def _read_all(consumer: Consumer, topic: str, count: int) -> list[ConsumerRecord]:
    """``count`` records of ``topic``'s partitions (assigned from the start), then a second
    more to show there are no others."""
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(0.5)
    records += consumer.poll(1.0)
    return records


def _poll_until(consumer: Consumer, count: int, what: str) -> list[ConsumerRecord]:
    """The records of ``consumer``'s polls until it has ``count`` of them (bounded)."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        records += consumer.poll(0.5)
    return records


def _joined(member: Consumer) -> int:
    """The generation ``member`` joined with (polling it until it has one; bounded)."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while (generation := member.group_metadata().generation_id) < 0:
        assert time.monotonic() < deadline, "timed out waiting for the member to join"
        assert member.poll(0.2) == []
    return generation


def _offsets(
    consumer: Consumer, partitions: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The committed offsets of ``consumer``'s group (None: none committed)."""
    committed = consumer.committed(partitions, timeout=CLIENT_TIMEOUT_S)
    return {tp: found.offset if found else None for tp, found in committed.items()}


def _values(records: list[ConsumerRecord]) -> set[bytes]:
    return {record.value for record in records if record.value is not None}


def test_read_committed_reads_exactly_the_committed_transactions(cluster: LocalCluster) -> None:
    topic = "txn-out"
    _create_topics(cluster, topic)
    with _producer(cluster, "sdk-writer") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.send(topic, f"committed-{p}".encode(), partition=p)
        producer.commit_transaction()
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.send(topic, f"aborted-{p}".encode(), partition=p).result(CLIENT_TIMEOUT_S)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed-last", partition=0)
        producer.commit_transaction()

    committed = {b"committed-0", b"committed-1", b"committed-last"}
    with _consumer(cluster, isolation_level="read_committed") as consumer:
        assert _values(_read_all(consumer, topic, 3)) == committed
    with _consumer(cluster) as consumer:
        assert _values(_read_all(consumer, topic, 5)) == committed | {b"aborted-0", b"aborted-1"}


def test_offsets_sent_to_a_transaction_become_the_groups_when_it_commits(
    cluster: LocalCluster,
) -> None:
    source, destination, group = "copy-in", "copy-out", "copier"
    _create_topics(cluster, source, destination)
    _fill(cluster, source)
    partitions = [TopicPartition(source, p) for p in range(PARTITIONS)]

    with (
        _consumer(cluster, group_id=group, isolation_level="read_committed") as reader,
        _producer(cluster, "sdk-copier") as copier,
    ):
        reader.subscribe([source])
        records = _poll_until(reader, 4, "the copier's consumer to read the source")
        copier.init_transactions()
        copier.begin_transaction()
        for record in records:
            copier.send(destination, record.value, partition=record.partition)
        copier.send_offsets_to_transaction(
            {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records},
            reader.group_metadata(),
        )
        with _consumer(cluster, group_id=group) as observer:
            # Pending in the open transaction: not the group's offsets yet.
            assert _offsets(observer, partitions) == dict.fromkeys(partitions)
            copier.commit_transaction()
            # The markers (and the group's offsets) are written once the commit is decided.
            expected = dict.fromkeys(partitions, 2)
            wait_until(
                lambda: _offsets(observer, partitions) == expected,
                "the group's offsets to be those of the committed transaction",
                WAIT_TIMEOUT_S,
            )


def test_a_group_member_joining_while_its_offsets_are_pending_keeps_its_assignment(
    cluster: LocalCluster,
) -> None:
    """UNSTABLE_OFFSET_COMMIT for longer than the member's own bounds: it asks again, without
    rejoining the group, and starts from the offsets once the transaction commits."""
    source, group = "pending-in", "pending-group"
    _create_topics(cluster, source)
    _fill(cluster, source)
    partitions = [TopicPartition(source, p) for p in range(PARTITIONS)]
    with _producer(cluster, "sdk-pending") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(dict.fromkeys(partitions, 1), group)
        with _consumer(
            cluster,
            group_id=group,
            isolation_level="read_committed",
            max_poll_interval_ms=2000,
            default_api_timeout_ms=1000,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        ) as member:
            member.subscribe([source])
            generation = _joined(member)
            ends = time.monotonic() + 5.0  # past max.poll.interval.ms and the API timeout
            while time.monotonic() < ends:
                assert member.poll(0.5) == []
            assert member.group_metadata().generation_id == generation
            producer.commit_transaction()
            records = _poll_until(member, 1, "the member to read once the offsets are committed")
            assert {r.offset for r in records} == {1}
            assert member.group_metadata().generation_id == generation


def test_a_transaction_the_coordinator_timed_out_is_aborted_and_the_producer_goes_on(
    cluster: LocalCluster,
) -> None:
    """KIP-588 end to end: the partition refuses the producer's old epoch, the transaction is
    abortable, the abort recovers the producer (no ProducerFencedError)."""
    topic = "timed-out"
    _create_topics(cluster, topic)
    with _producer(cluster, "sdk-slow", transaction_timeout_ms=1000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"before-timeout", partition=0).result(CLIENT_TIMEOUT_S)
        with Admin(cluster.controller_bootstrap_servers) as admin:
            wait_until(
                lambda: (
                    admin.describe_transactions(["sdk-slow"])["sdk-slow"].state
                    is TransactionState.COMPLETE_ABORT
                ),
                "the coordinator to abort the timed-out transaction",
                WAIT_TIMEOUT_S,
            )
        late = producer.send(topic, b"after-timeout", partition=0)
        assert late.exception(CLIENT_TIMEOUT_S) is not None
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"recovered", partition=1)
        producer.commit_transaction()
    with _consumer(cluster, isolation_level="read_committed") as consumer:
        assert _values(_read_all(consumer, topic, 1)) == {b"recovered"}
