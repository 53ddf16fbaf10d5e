"""Admin's transaction operations and ``brook transactions`` against a scripted transaction
coordinator and a storage double that keeps producer states and writes markers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from transaction_doubles import COORDINATOR_NODE_ID, Cluster

from brook.cli import main
from brook.client.admin import ProducerState, TransactionState
from brook.client.errors import ApiError
from brook.client.types import TopicPartition
from brook.errors import ErrorCode
from brook.record import ControlType, decode_control_record, iter_records, read_header
from brook.v1 import common_pb2, storage_pb2, transaction_pb2

EVENTS_0 = TopicPartition("events", 0)
EVENTS_1 = TopicPartition("events", 1)
MINUTE_MS = 60_000


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    running = Cluster()
    try:
        yield running
    finally:
        running.running.stop()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _transaction(
    name: str,
    producer_id: int,
    state: int,
    partitions: tuple[TopicPartition, ...] = (),
    start_ms: int = -1,
) -> transaction_pb2.TransactionDescription:
    return transaction_pb2.TransactionDescription(
        transactional_id=name,
        state=state,  # type: ignore[arg-type]
        producer_id=producer_id,
        producer_epoch=3,
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=start_ms,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions],
    )


def _producer(
    producer_id: int, start_offset: int, idle_ms: int, coordinator_epoch: int = -1
) -> storage_pb2.ProducerDescription:
    return storage_pb2.ProducerDescription(
        producer_id=producer_id,
        producer_epoch=2,
        last_sequence=9,
        last_timestamp=_now_ms() - idle_ms,
        coordinator_epoch=coordinator_epoch,
        current_txn_start_offset=start_offset,
    )


def _run(cluster: Cluster, *argv: str) -> int:
    return main(["transactions", *argv, "--bootstrap-server", cluster.running.address])


def test_transactions_are_listed_from_every_coordinator_and_described_by_their_owner(
    cluster: Cluster,
) -> None:
    cluster.coordinator.transactions = {
        "t1": _transaction("t1", 5, transaction_pb2.TRANSACTION_STATE_ONGOING, (EVENTS_0,), 1000),
        "t2": _transaction("t2", 6, transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT),
    }
    with cluster.admin() as admin:
        listed = admin.list_transactions()
        assert [(t.transactional_id, t.coordinator, t.producer_id, t.state) for t in listed] == [
            ("t1", COORDINATOR_NODE_ID, 5, TransactionState.ONGOING),
            ("t2", COORDINATOR_NODE_ID, 6, TransactionState.COMPLETE_COMMIT),
        ]
        assert [
            t.transactional_id for t in admin.list_transactions(states=[TransactionState.ONGOING])
        ] == ["t1"]
        described = admin.describe_transactions(["t1"])["t1"]
        assert described.coordinator == COORDINATOR_NODE_ID
        assert (described.state, described.producer_id, described.producer_epoch) == (
            TransactionState.ONGOING,
            5,
            3,
        )
        assert described.topic_partitions == (EVENTS_0,)
        assert described.transaction_start_time_ms == 1000
        assert admin.describe_transactions(["t2"])["t2"].transaction_start_time_ms is None
        with pytest.raises(ApiError) as raised:
            admin.describe_transactions(["nobody"])
        assert raised.value.code is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    finds = cluster.coordinator.calls("FindCoordinator")
    assert {f.key_type for f in finds} == {2}  # COORDINATOR_TYPE_TRANSACTION


def test_producers_are_described_by_the_partition_leader(cluster: Cluster) -> None:
    cluster.storage.producers[("events", 0)] = [
        _producer(5, 3, 0, coordinator_epoch=4),
        _producer(6, -1, 0),
    ]
    with cluster.admin() as admin:
        described = admin.describe_producers([EVENTS_0, EVENTS_1])
        with pytest.raises(ApiError) as raised:
            admin.describe_producers([TopicPartition("nowhere", 0)])
    assert described[EVENTS_1] == []
    first, second = described[EVENTS_0]
    assert first == ProducerState(5, 2, 9, first.last_timestamp_ms, 4, 3)
    assert (second.coordinator_epoch, second.current_transaction_start_offset) == (None, None)
    assert raised.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_abort_transaction_writes_an_abort_marker_at_the_leader(cluster: Cluster) -> None:
    with cluster.admin() as admin:
        admin.abort_transaction(EVENTS_1, 5, 2, 4)
    [request] = cluster.storage.markers
    [marker] = request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (5, 2, 4)
    assert not marker.committed
    assert [(p.topic, p.partition) for p in marker.partitions] == [("events", 1)]
    [batch] = cluster.storage.partitions[("events", 1)].batches
    assert read_header(batch).is_control
    [record] = iter_records(batch)
    assert decode_control_record(record)[0] is ControlType.ABORT


def test_find_hanging_lists_old_open_transactions_no_coordinator_will_finish(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    old = 20 * MINUTE_MS
    cluster.storage.producers[("events", 0)] = [
        _producer(5, 3, old),  # no transactional id lists producer 5: hanging
        _producer(6, 4, old),  # t6 is ongoing on events-0: its coordinator will finish it
        _producer(7, 8, 60_000),  # open for a minute only: not a candidate
        _producer(9, -1, old),  # no open transaction
    ]
    cluster.storage.producers[("events", 1)] = [
        _producer(8, 11, old, coordinator_epoch=2)  # t8 is ongoing, but not on events-1
    ]
    cluster.coordinator.transactions = {
        "t6": _transaction("t6", 6, transaction_pb2.TRANSACTION_STATE_ONGOING, (EVENTS_0,)),
        "t8": _transaction("t8", 8, transaction_pb2.TRANSACTION_STATE_ONGOING, (EVENTS_0,)),
    }
    assert _run(cluster, "find-hanging", "--topic", "events") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "TOPIC",
        "PARTITION",
        "PRODUCER-ID",
        "PRODUCER-EPOCH",
        "COORDINATOR-EPOCH",
        "START-OFFSET",
        "LAST-TIMESTAMP",
        "DURATION(MIN)",
    ]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[2], r[4], r[5], r[7]) for r in rows] == [
        ("events", "0", "5", "-", "3", "20"),
        ("events", "1", "8", "2", "11", "20"),
    ]
    # A larger timeout: nothing is old enough.
    assert _run(cluster, "find-hanging", "--max-transaction-timeout", "30") == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_abort_by_start_offset_finds_the_producer_and_writes_its_marker(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.storage.producers[("events", 0)] = [
        _producer(5, 3, 0, coordinator_epoch=-1),
        _producer(6, 7, 0, coordinator_epoch=4),
    ]
    assert (
        _run(cluster, "abort", "--topic", "events", "--partition", "0", "--start-offset", "7") == 0
    )
    assert "producer 6" in capsys.readouterr().out
    assert (
        _run(cluster, "abort", "--topic", "events", "--partition", "0", "--start-offset", "3") == 0
    )
    markers = [m for request in cluster.storage.markers for m in request.markers]
    # The coordinator epoch of the producer's last marker; 0 when it had none (Kafka's tool).
    assert [(m.producer_id, m.producer_epoch, m.coordinator_epoch) for m in markers] == [
        (6, 2, 4),
        (5, 2, 0),
    ]
    assert (
        _run(cluster, "abort", "--topic", "events", "--partition", "0", "--start-offset", "99") == 1
    )
    assert "no open transaction starts at offset 99" in capsys.readouterr().err
    assert _run(cluster, "abort", "--topic", "events", "--partition", "0") == 2
    assert len(markers) == 2


def test_list_describe_and_describe_producers_print_tables(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.coordinator.transactions = {
        "t1": _transaction("t1", 5, transaction_pb2.TRANSACTION_STATE_ONGOING, (EVENTS_0,), 1000)
    }
    cluster.storage.producers[("events", 0)] = [_producer(5, 3, 0)]
    assert _run(cluster, "list") == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["t1", "2", "5", "Ongoing"]
    assert _run(cluster, "describe", "--transactional-id", "t1") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:6] == ["2", "t1", "5", "3", "Ongoing", "60000"]
    assert row[-1] == "events-0"
    assert _run(cluster, "describe", "--transactional-id", "nobody") == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in capsys.readouterr().err
    assert _run(cluster, "describe-producers", "--topic", "events", "--partition", "0") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:4] == ["5", "2", "-", "9"]
    assert row[-1] == "3"
