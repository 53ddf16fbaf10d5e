"""isolation.level=read_committed: the consumer hands out only records of committed
transactions (and non-transactional ones), never a control record, nothing at or past the
last stable offset; read from real record batches and transaction markers, as a storage node
sends them with the aborted transactions of its answer."""

from __future__ import annotations

import time
from typing import Any

from storage_double import RunningDouble
from transaction_doubles import COMMITTED_OFFSET, Cluster

from brook.client import Consumer, ConsumerRecord, OffsetAndMetadata, TopicPartition
from brook.client.fetcher import AbortedTransactions, CompletedFetch
from brook.errors import ErrorCode
from brook.record import ControlType, build_batch, build_control_batch
from brook.v1 import common_pb2, storage_pb2

TP = TopicPartition("events", 0)
COMMITTER = 100
ABORTER = 200
PLAIN = -1
POLL_TIMEOUT_S = 10.0


class Log:
    """A partition's log built batch by batch, offsets assigned in order."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.next_offset = 0

    def data(self, producer: int, *values: bytes) -> int:
        """A batch of ``values`` (transactional when ``producer`` >= 0); its first offset."""
        first = self.next_offset
        self.batches.append(
            build_batch(
                [(1_000 + first + i, None, v, ()) for i, v in enumerate(values)],
                base_offset=first,
                producer_id=producer,
                producer_epoch=0 if producer >= 0 else -1,
                base_sequence=0 if producer >= 0 else -1,
                is_transactional=producer >= 0,
            )
        )
        self.next_offset += len(values)
        return first

    def marker(self, producer: int, control_type: ControlType) -> int:
        offset = self.next_offset
        self.batches.append(
            build_control_batch(
                control_type,
                producer_id=producer,
                producer_epoch=0,
                coordinator_epoch=3,
                timestamp_ms=2_000 + offset,
                base_offset=offset,
            )
        )
        self.next_offset += 1
        return offset

    def read(
        self,
        aborted: list[tuple[int, int]] | None,
        position: int = 0,
        stable_end: int | None = None,
    ) -> tuple[list[ConsumerRecord], int]:
        fetch = CompletedFetch(
            TP,
            0,
            b"".join(self.batches),
            None if aborted is None else AbortedTransactions(aborted),
            stable_end,
        )
        out: list[ConsumerRecord] = []
        position = fetch.take(out, position, 1_000, True)
        assert fetch.exhausted and fetch.error is None
        return out, position


def _values(records: list[ConsumerRecord]) -> list[bytes | None]:
    return [record.value for record in records]


def _interleaved() -> tuple[Log, list[tuple[int, int]]]:
    """Committed and aborted transactions of two producers interleaved with plain records;
    the aborted list as a node answers it: (producer id, first offset)."""
    log = Log()
    log.data(PLAIN, b"plain-1")
    log.data(COMMITTER, b"c1", b"c2")
    aborted_first = log.data(ABORTER, b"a1", b"a2")
    log.data(COMMITTER, b"c3")
    log.data(ABORTER, b"a3")
    log.data(PLAIN, b"plain-2")
    log.marker(COMMITTER, ControlType.COMMIT)
    log.marker(ABORTER, ControlType.ABORT)
    # The aborting producer's next transaction commits.
    log.data(ABORTER, b"a-later")
    log.marker(ABORTER, ControlType.COMMIT)
    log.data(PLAIN, b"plain-3")
    return log, [(ABORTER, aborted_first)]


def test_read_committed_drops_aborted_transactions_and_every_marker() -> None:
    log, aborted = _interleaved()
    records, position = log.read(aborted)
    assert _values(records) == [
        b"plain-1",
        b"c1",
        b"c2",
        b"c3",
        b"plain-2",
        b"a-later",
        b"plain-3",
    ]
    assert position == log.next_offset
    # Offsets are the log's: the skipped ones are gaps.
    assert [r.offset for r in records] == [0, 1, 2, 5, 7, 10, 12]


def test_read_uncommitted_returns_aborted_records_but_no_marker() -> None:
    log, _ = _interleaved()
    records, position = log.read(None)
    assert _values(records) == [
        b"plain-1",
        b"c1",
        b"c2",
        b"a1",
        b"a2",
        b"c3",
        b"a3",
        b"plain-2",
        b"a-later",
        b"plain-3",
    ]
    assert position == log.next_offset


def test_an_aborted_transaction_starting_before_the_position_is_still_dropped() -> None:
    log = Log()
    first = log.data(ABORTER, b"a1", b"a2")
    log.data(ABORTER, b"a3")
    log.marker(ABORTER, ControlType.ABORT)
    log.data(PLAIN, b"after")
    # Fetched from the middle of the first batch (the node returns the whole batch).
    records, position = log.read([(ABORTER, first)], position=1)
    assert _values(records) == [b"after"]
    assert position == log.next_offset


def test_two_aborted_transactions_of_one_producer_are_each_dropped() -> None:
    log = Log()
    first = log.data(ABORTER, b"x1")
    log.marker(ABORTER, ControlType.ABORT)
    log.data(ABORTER, b"kept")
    log.marker(ABORTER, ControlType.COMMIT)
    second = log.data(ABORTER, b"x2")
    log.marker(ABORTER, ControlType.ABORT)
    records, _ = log.read([(ABORTER, second), (ABORTER, first)])
    assert _values(records) == [b"kept"]


def test_nothing_at_or_past_the_last_stable_offset_is_handed_out() -> None:
    log = Log()
    log.data(PLAIN, b"p1", b"p2", b"p3")
    open_first = log.data(COMMITTER, b"open")
    log.data(PLAIN, b"p4")
    # A batch straddling the LSO gives only its records below it.
    records, position = log.read([], stable_end=2)
    assert _values(records) == [b"p1", b"p2"]
    assert position == 2
    records, position = log.read([], position=2, stable_end=open_first)
    assert _values(records) == [b"p3"]
    assert position == open_first


def _committed_only_double(double: RunningDouble, log: Log, aborted: list[tuple[int, int]]) -> None:
    """The double serves ``log`` as a read_committed node answers: with its aborted
    transactions and LSO (and refuses any other isolation level)."""

    def install() -> None:
        partition = double.double.partitions[(TP.topic, TP.partition)]
        partition.batches = list(log.batches)
        partition.next_offset = log.next_offset

    double.call(install)

    async def fetch(request: Any, context: Any) -> Any:
        assert request.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED
        answers, _ = double.double._read(request)
        for answer in answers:
            answer.last_stable_offset = answer.high_watermark
            answer.aborted_transactions.extend(
                common_pb2.AbortedTransaction(producer_id=p, first_offset=f) for p, f in aborted
            )
        return storage_pb2.FetchResponse(partitions=answers)

    double.double.faults["Fetch"] = fetch


def test_a_read_committed_consumer_polls_only_committed_records(double: RunningDouble) -> None:
    log, aborted = _interleaved()
    _committed_only_double(double, log, aborted)
    with Consumer(
        bootstrap_servers=double.address,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    ) as consumer:
        consumer.assign([TP])
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while len(records) < 7 and time.monotonic() < deadline:
            records += consumer.poll(timeout=0.5)
        assert _values(records) == [
            b"plain-1",
            b"c1",
            b"c2",
            b"c3",
            b"plain-2",
            b"a-later",
            b"plain-3",
        ]
        assert consumer.position(TP) == log.next_offset


def test_a_read_committed_group_consumer_waits_for_stable_committed_offsets() -> None:
    cluster = Cluster()
    try:
        cluster.coordinator.scripts["FetchOffsets"] = [ErrorCode.UNSTABLE_OFFSET_COMMIT] * 2
        with cluster.consumer(group_id="billing", isolation_level="read_committed") as consumer:
            committed = consumer.committed([TP], timeout=POLL_TIMEOUT_S)
        assert committed == {TP: OffsetAndMetadata(COMMITTED_OFFSET)}
        fetches = cluster.coordinator.calls("FetchOffsets")
        assert len(fetches) == 3
        assert all(request.require_stable for request in fetches)
    finally:
        cluster.running.stop()


def test_a_read_uncommitted_group_consumer_does_not_ask_for_stable_offsets() -> None:
    cluster = Cluster()
    try:
        with cluster.consumer(group_id="billing") as consumer:
            consumer.committed([TP], timeout=POLL_TIMEOUT_S)
        [fetch] = cluster.coordinator.calls("FetchOffsets")
        assert not fetch.require_stable
    finally:
        cluster.running.stop()
