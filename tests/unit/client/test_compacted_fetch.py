"""The consumer on a compacted partition (issue #18): offsets missing between batches and
inside them, batches with no record left, markers and aborted data removed. As Kafka's
consumer, the position after a batch is its last offset + 1 whatever it still holds, so a
fetch of nothing but empty batches still moves the consumer on."""

from __future__ import annotations

from compacted_batches import compacted_batch

from brook.client.fetcher import AbortedTransactions, CompletedFetch
from brook.client.types import ConsumerRecord, TopicPartition
from brook.record import ControlType, build_control_batch

TP = TopicPartition("compacted", 0)
PRODUCER = 300
T0 = 1_700_000_000_000


def _gapped_log() -> bytes:
    """Offsets 0-4 (kept 1 and 3), 5-7 (empty), nothing at 8-9, 10-13 (kept 10 and 13)."""
    return b"".join(
        (
            compacted_batch(
                [(1, T0 + 1, b"a", b"a1"), (3, T0 + 3, b"b", b"b3")],
                base_offset=0,
                last_offset_delta=4,
            ),
            compacted_batch(
                [],
                base_offset=5,
                last_offset_delta=2,
                producer_id=PRODUCER,
                producer_epoch=0,
                base_sequence=5,
            ),
            compacted_batch(
                [(0, T0 + 10, b"c", b"c10"), (3, T0 + 13, b"a", b"a13")],
                base_offset=10,
                last_offset_delta=3,
            ),
        )
    )


def _take_all(
    fetch: CompletedFetch, position: int, limit: int
) -> tuple[list[list[ConsumerRecord]], list[int]]:
    """What successive polls of at most ``limit`` records hand out, and the position after
    each, until the fetch is exhausted."""
    polls: list[list[ConsumerRecord]] = []
    positions: list[int] = []
    while not fetch.exhausted:
        out: list[ConsumerRecord] = []
        position = fetch.take(out, position, limit, check_crcs=True)
        polls.append(out)
        positions.append(position)
        assert len(polls) < 100, "the fetch never ends"
    return polls, positions


def test_position_after_a_batch_is_its_last_offset_plus_one() -> None:
    fetch = CompletedFetch(TP, 0, _gapped_log())

    polls, positions = _take_all(fetch, 0, 500)

    records = [record for poll in polls for record in poll]
    assert [(r.offset, r.key, r.value) for r in records] == [
        (1, b"a", b"a1"),
        (3, b"b", b"b3"),
        (10, b"c", b"c10"),
        (13, b"a", b"a13"),
    ]
    assert [r.timestamp for r in records] == [T0 + 1, T0 + 3, T0 + 10, T0 + 13]
    assert positions[-1] == 14


def test_max_poll_records_splits_a_gapped_batch_without_losing_or_repeating() -> None:
    fetch = CompletedFetch(TP, 0, _gapped_log())

    polls, positions = _take_all(fetch, 0, 1)

    assert [[r.offset for r in poll] for poll in polls if poll] == [[1], [3], [10], [13]]
    # Each position is past what was handed out and never past a record not yet handed out.
    handed: list[int] = []
    for poll, position in zip(polls, positions, strict=True):
        handed += [r.offset for r in poll]
        assert position > max(handed, default=-1)
        assert all(position <= later for later in (1, 3, 10, 13) if later not in handed)
    assert positions[-1] == 14


def test_a_fetch_of_only_empty_batches_moves_the_position_past_them() -> None:
    empty = b"".join(
        compacted_batch(
            [],
            base_offset=base,
            last_offset_delta=2,
            producer_id=PRODUCER,
            producer_epoch=0,
            base_sequence=base,
        )
        for base in (20, 23, 30)
    )
    fetch = CompletedFetch(TP, 0, empty)

    polls, positions = _take_all(fetch, 20, 500)

    assert [r for poll in polls for r in poll] == []
    assert positions[-1] == 33


def test_a_position_inside_a_gap_reads_from_the_next_kept_record() -> None:
    # A committed offset or seek at 2 (removed) or at 8 (between batches): the node answers
    # from the batch holding or following it; nothing before the position is handed out.
    for position, first in ((2, 3), (4, 10), (6, 10), (8, 10), (11, 13)):
        fetch = CompletedFetch(TP, 0, _gapped_log())
        polls, positions = _take_all(fetch, position, 500)
        assert next(r.offset for poll in polls for r in poll) == first, position
        assert positions[-1] == 14


def test_read_committed_with_the_aborted_data_gone_keeps_later_committed_records() -> None:
    # The cleaner removed the aborted transaction's records (offsets 0-2) but kept its ABORT
    # marker at 3 while later batches of the producer remain; the node still lists it. The
    # producer's next transaction (4-6, records 4 and 6 kept) committed at 7.
    log = b"".join(
        (
            build_control_batch(
                ControlType.ABORT,
                producer_id=PRODUCER,
                producer_epoch=0,
                coordinator_epoch=1,
                timestamp_ms=T0,
                base_offset=3,
            ),
            compacted_batch(
                [(0, T0 + 4, b"k", b"v4"), (2, T0 + 6, b"j", b"v6")],
                base_offset=4,
                last_offset_delta=2,
                producer_id=PRODUCER,
                producer_epoch=0,
                base_sequence=3,
                transactional=True,
            ),
            build_control_batch(
                ControlType.COMMIT,
                producer_id=PRODUCER,
                producer_epoch=0,
                coordinator_epoch=1,
                timestamp_ms=T0,
                base_offset=7,
            ),
        )
    )
    fetch = CompletedFetch(TP, 0, log, AbortedTransactions([(PRODUCER, 0)]), stable_end=8)

    polls, positions = _take_all(fetch, 0, 500)

    assert [r.offset for poll in polls for r in poll] == [4, 6]
    assert positions[-1] == 8


def test_read_committed_with_the_markers_removed_reads_the_kept_records() -> None:
    # Long after a transaction, the cleaner removed its marker and (an abort's) data: the
    # node lists no aborted transaction, and a committed transaction's kept records read as
    # plain ones.
    log = compacted_batch(
        [(1, T0 + 1, b"k", b"v")],
        base_offset=0,
        last_offset_delta=3,
        producer_id=PRODUCER,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    fetch = CompletedFetch(TP, 0, log, AbortedTransactions([]), stable_end=10)

    polls, positions = _take_all(fetch, 0, 500)

    assert [r.offset for poll in polls for r in poll] == [1]
    assert positions[-1] == 4
