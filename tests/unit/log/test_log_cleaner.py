"""One cleaning pass (log/cleaner.py) on real logs: what it may touch, what it keeps, merged
segments and rebuilt indexes, passes bounded by the dedupe buffer, transaction markers and
their index, idempotent producers across cleaning, stopping early, a log changed under the
swap, concurrent appends, damaged segments, and the throttler."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from brook_storage_node.log import AppendOrigin, LogConfig, PartitionLog
from brook_storage_node.log.cleaner import Throttler, UncleanableLogError
from brook_storage_node.log.log_segment import CLEANED_SUFFIX, SWAP_SUFFIX
from brook_storage_node.log.offset_map import OffsetMap, key_digest
from brook_storage_node.log.producer_state import SNAPSHOT_SUFFIX, InvalidProducerEpochError
from cleaner_test_support import Workload, clean, markers, open_compacted_log, rows
from log_test_support import TOPIC_DIR, FakeClock, read_batches, segment_files, split_batches

from brook.record import ControlType, build_batch, build_control_batch, iter_records, read_header

DAY_MS = 86_400_000


def _keyed_log(tmp_path: Path, clock: FakeClock, count: int = 60, **config: object) -> Workload:
    """``count`` records over keys k0..k4, one per batch, in segments of about 10 batches."""
    config.setdefault("segment_bytes", 900)
    log = open_compacted_log(tmp_path, clock, **config)  # type: ignore[arg-type]
    work = Workload(log, clock)
    for i in range(count):
        work.plain([(b"k%d" % (i % 5), b"v%d" % i)])
    return work


def _more_writes(work: Workload, count: int = 12) -> None:
    """Records of a key of their own, enough to fill a sealed segment or more: a dirty section
    for the next pass (the cleaner passes over a log only when it is dirty)."""
    for i in range(count):
        work.plain([(b"more", b"%d" % i)])


def _no_swap_leftovers(tmp_path: Path) -> None:
    names = os.listdir(tmp_path / TOPIC_DIR)
    assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))], names


def test_a_pass_keeps_the_last_value_of_each_key_and_never_the_active_segment(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock)
    log = work.log
    active = log.segments.active
    active_rows = [r for r in rows(log) if r[0] >= active.base_offset]
    result = clean(log, clock.now_ms)
    assert result is not None and result.end_offset == active.base_offset
    assert log.segments.active is active
    kept = rows(log)
    assert [r for r in kept if r[0] >= active.base_offset] == active_rows
    cleaned = [r for r in kept if r[0] < active.base_offset]
    # Below the active segment, each key appears once: its last record there.
    assert sorted(k for _, k, _ in cleaned) == sorted({k for _, k, _ in cleaned})
    for offset, key, value in kept:
        assert (offset, key, value) == work.original(offset)
    assert result.records_retained == len(cleaned)
    assert result.segments_replaced >= 2
    _no_swap_leftovers(tmp_path)


@pytest.mark.parametrize("delete_too", [False, True])
def test_compact_delete_adds_retention_and_compact_alone_never_deletes(
    tmp_path: Path, delete_too: bool
) -> None:
    clock = FakeClock()
    policy = frozenset({"compact", "delete"} if delete_too else {"compact"})
    work = _keyed_log(tmp_path, clock, cleanup_policy=policy, retention_ms=10_000)
    log = work.log
    old_end = log.segments.active.base_offset
    clock.advance(60_000)
    for i in range(30):
        work.plain([(b"k%d" % (i % 5), b"late%d" % i)])
    # Everything written before the clock moved is past retention.ms.
    deleted = log.delete_old_segments()
    assert (deleted > 0) is delete_too
    assert (log.log_start_offset >= old_end) is delete_too
    assert clean(log, clock.now_ms) is not None
    kept = rows(log)
    assert all((offset, key, value) == work.original(offset) for offset, key, value in kept)
    final = {work.original(offset)[1]: offset for offset in sorted(work.records)}
    assert {key: offset for offset, key, _ in kept} == final
    log.close()


def test_nothing_at_or_past_the_high_watermark_or_the_bound_is_touched(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=900)
    for i in range(60):
        log.append(build_batch([(clock.now_ms, b"k%d" % (i % 5), b"v%d" % i, ())]), leader_epoch=0)
        if i == 25:
            log.maybe_increment_high_watermark()
    hw = log.high_watermark
    limit = log.segments[log.segments.floor_index(hw)].base_offset
    before = rows(log)
    result = clean(log, clock.now_ms)
    assert result is not None and result.end_offset == limit
    assert [r for r in rows(log) if r[0] >= limit] == [r for r in before if r[0] >= limit]
    # The caller's bound is obeyed too.
    log.maybe_increment_high_watermark()
    bound = log.segments[3].base_offset
    before = rows(log)
    result = clean(log, clock.now_ms, first_dirty=result.end_offset, bound=bound)
    assert result is not None and result.end_offset == bound
    assert [r for r in rows(log) if r[0] >= bound] == [r for r in before if r[0] >= bound]
    assert len([r for r in rows(log) if r[0] < bound]) == 5
    log.close()


def test_an_open_transaction_bounds_the_pass(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock, count=15)
    log = work.log
    work.transactional(1, [(b"k0", b"in-txn")])
    txn_start = log.last_stable_offset
    for i in range(40):
        work.plain([(b"k%d" % (i % 5), b"late%d" % i)])
    before = rows(log)
    result = clean(log, clock.now_ms)
    assert result is not None and result.end_offset <= txn_start
    assert [r for r in rows(log) if r[0] >= txn_start] == [r for r in before if r[0] >= txn_start]
    log.close()


def test_tombstones_go_only_after_delete_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=400, delete_retention_ms=DAY_MS)
    work = Workload(log, clock)
    work.plain([(b"a", b"1"), (b"b", b"1")])
    work.plain([(b"a", None)])
    for i in range(10):
        work.plain([(b"c", b"%d" % i)])
    # Old on the clock, but dirty: a tombstone never goes in the pass that removes the value
    # it deletes, and its delete.retention.ms counts from that pass.
    result = clean(log, clock.now_ms + 2 * DAY_MS)
    assert result is not None
    first_pass_ms = clock.now_ms + 2 * DAY_MS
    assert (2, b"a", None) in rows(log)
    assert not [r for r in rows(log) if r[1] == b"a" and r[2] is not None]
    # Later passes go over the now clean tombstone when new writes make the log dirty.
    _more_writes(work)
    result = clean(log, first_pass_ms + DAY_MS - 1, first_dirty=result.end_offset)
    assert result is not None
    assert (2, b"a", None) in rows(log)
    _more_writes(work)
    clean(log, first_pass_ms + DAY_MS + 1, first_dirty=result.end_offset)
    assert not [r for r in rows(log) if r[1] == b"a"]
    assert (1, b"b", b"1") in rows(log)
    log.close()


def test_a_tombstones_age_is_the_nodes_not_its_create_time(tmp_path: Path) -> None:
    # Written just now with a CreateTime two days old (a mirror, a skewed producer clock): a
    # consumer must still see the delete for delete.retention.ms.
    clock = FakeClock()
    log = open_compacted_log(
        tmp_path,
        clock,
        segment_bytes=400,
        delete_retention_ms=DAY_MS,
        message_timestamp_difference_max_ms=7 * DAY_MS,
    )
    work = Workload(log, clock)
    work.plain([(b"a", b"1")])
    log.append(build_batch([(clock.now_ms - 2 * DAY_MS, b"a", None, ())]), leader_epoch=0)
    work.stamp_active_segment()
    for i in range(10):
        work.plain([(b"c", b"%d" % i)])
    result = clean(log, clock.now_ms)
    assert result is not None
    assert [r for r in rows(log) if r[1] == b"a"] == [(1, b"a", None)]
    _more_writes(work)
    clean(log, clock.now_ms + DAY_MS + 1, first_dirty=result.end_offset)
    assert not [r for r in rows(log) if r[1] == b"a"]
    log.close()


def test_keyless_records_are_dropped_and_counted(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=300)
    work = Workload(log, clock)
    work.plain([(None, b"x"), (b"k", b"v"), (None, b"y")])
    for i in range(6):
        work.plain([(b"z", b"%d" % i)])
    result = clean(log, clock.now_ms)
    assert result is not None and result.records_without_key == 2
    assert (1, b"k", b"v") in rows(log)
    assert not [r for r in rows(log) if r[1] is None]
    log.close()


def test_small_segments_are_merged_and_their_indexes_rebuilt(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock, count=200, segment_bytes=1000, index_interval_bytes=100)
    log = work.log
    segments_before = log.segment_count
    first = clean(log, clock.now_ms)
    assert first is not None
    # Each old segment alone was near segment.bytes; cleaned, they are small and merge now.
    second = clean(log, clock.now_ms)
    assert second is not None
    assert log.segment_count < segments_before - 5
    expected = rows(log)
    for offset, _, _ in expected:
        fetched = log.read(offset, 1 << 16)
        header = read_header(fetched.records)
        assert header.base_offset <= offset <= header.last_offset
    lookup = log.offset_for_timestamp(0)
    assert lookup is not None and lookup.offset == expected[0][0]
    log.close()
    # A reopen that checks every index against its segment (no clean-shutdown marker) agrees.
    reopened = open_compacted_log(tmp_path, clock, segment_bytes=1000)
    assert rows(reopened) == expected
    reopened.close()


def test_a_small_dedupe_buffer_cleans_in_passes(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=300)
    work = Workload(log, clock)
    for i in range(60):
        work.plain([(b"k%d" % (i // 2), b"v%d" % i)])  # 2 records per key: 3 keys a segment
    end = log.segments.active.base_offset
    first_dirty = 0
    passes = 0
    while first_dirty < end:
        result = clean(log, clock.now_ms, first_dirty=first_dirty, map_entries=8)
        assert result is not None and result.end_offset > first_dirty
        first_dirty = result.end_offset
        passes += 1
    assert passes >= 3
    kept = rows(log)
    # Every key below the active segment appears once, in order.
    keys = [k for offset, k, _ in kept if offset < end]
    assert keys == sorted(set(keys), key=lambda k: int(k[1:]))
    for offset, key, value in kept:
        assert (offset, key, value) == work.original(offset)
    with pytest.raises(UncleanableLogError, match="do not fit the dedupe buffer"):
        clean(log, clock.now_ms, first_dirty=0, map_entries=1)
    log.close()


def test_markers_and_aborted_index_follow_the_kept_transactions(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=600, delete_retention_ms=DAY_MS)
    work = Workload(log, clock)
    work.transactional(1, [(b"a", b"aborted")])
    work.end_txn(1, commit=False)
    work.transactional(1, [(b"a", b"committed")])
    work.end_txn(1, commit=True)
    work.transactional(2, [(b"b", b"aborted")])
    work.end_txn(2, commit=False)
    for i in range(12):
        work.plain([(b"c", b"%d" % i)])
    abort_markers = [1, 5]
    result = clean(log, clock.now_ms)
    assert result is not None
    # Young markers stay; aborted records go; the ABORT entries follow their markers.
    assert markers(log) == [1, 3, 5]
    assert (2, b"a", b"committed") in rows(log)
    assert not [r for r in rows(log) if r[2] == b"aborted"]
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert sorted(t.last_offset for t in aborted) == abort_markers
    # Old now: the markers of transactions with no batch kept go; producer 1's last batch
    # (offset 2, committed) keeps its COMMIT marker, producer 2's last (aborted, kept empty)
    # its ABORT marker.
    _more_writes(work)
    clean(log, clock.now_ms + 2 * DAY_MS, first_dirty=result.end_offset)
    assert markers(log) == [3, 5]
    assert [t.last_offset for t in log.collect_aborted_transactions(0, log.log_end_offset)] == [5]
    log.close()


def test_idempotent_producer_survives_cleaning_and_replay(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=300)
    work = Workload(log, clock)
    work.idempotent(7, [(b"a", b"1"), (b"b", b"1")])
    last = build_batch(
        [(clock.now_ms, b"a", b"2", ())], producer_id=7, producer_epoch=0, base_sequence=2
    )
    log.append(last, leader_epoch=0)
    work.sequences[7] = 3
    for i in range(10):
        work.plain([(b"a", b"%d" % (10 + i))])
    log.maybe_increment_high_watermark()
    clean(log, clock.now_ms)
    # Producer 7's records are all superseded, its last batch stays, empty.
    assert not [r for r in rows(log) if r[0] < 3 and r[1] == b"a"]
    log.close()
    for snapshot in (tmp_path / TOPIC_DIR).glob(f"*{SNAPSHOT_SUFFIX}"):
        snapshot.unlink()
    reopened = open_compacted_log(tmp_path, clock, segment_bytes=300, high_watermark=1 << 40)
    try:
        retry = reopened.append(last, leader_epoch=0)
        assert retry.duplicate and retry.first_offset == 2
        nxt = build_batch(
            [(clock.now_ms, b"a", b"3", ())], producer_id=7, producer_epoch=0, base_sequence=3
        )
        assert not reopened.append(nxt, leader_epoch=0).duplicate
    finally:
        reopened.close()


def test_a_marker_that_alone_carries_a_fenced_producers_epoch_is_kept(tmp_path: Path) -> None:
    # A transaction aborted by a fencing marker in a bumped epoch: no batch of epoch 1
    # exists, so only the marker tells a replay that epoch 0 is fenced. Past
    # delete.retention.ms, with none of its data kept, it would otherwise go.
    clock = FakeClock()
    log = open_compacted_log(tmp_path, clock, segment_bytes=300, delete_retention_ms=1_000)
    work = Workload(log, clock)
    work.transactional(7, [(b"a", b"1")])
    fence = build_control_batch(
        ControlType.ABORT,
        producer_id=7,
        producer_epoch=1,
        coordinator_epoch=0,
        timestamp_ms=clock.now_ms,
    )
    log.append(fence, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    for i in range(10):
        work.plain([(b"a", b"%d" % i)])
    log.maybe_increment_high_watermark()
    clock.advance(10_000)
    clean(log, clock.now_ms)
    assert markers(log) == [1]
    log.close()
    for snapshot in (tmp_path / TOPIC_DIR).glob(f"*{SNAPSHOT_SUFFIX}"):
        snapshot.unlink()
    reopened = open_compacted_log(tmp_path, clock, segment_bytes=300, high_watermark=1 << 40)
    try:
        assert {p.producer_id: p.producer_epoch for p in reopened.describe_producers()} == {7: 1}
        zombie = build_batch(
            [(clock.now_ms, b"a", b"z", ())],
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
        with pytest.raises(InvalidProducerEpochError):
            reopened.append(zombie, leader_epoch=0)
    finally:
        reopened.close()


def test_a_pass_told_to_stop_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock)
    log = work.log
    before = rows(log)
    bases = log.segment_base_offsets
    polls = iter(range(1_000_000))
    assert clean(log, clock.now_ms, aborted=lambda: next(polls) >= 15) is None
    assert rows(log) == before and log.segment_base_offsets[: len(bases)] == bases
    _no_swap_leftovers(tmp_path)
    log.close()


def test_a_log_changed_under_the_pass_is_not_swapped(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock)
    log = work.log
    second = log.segments[1].base_offset
    moved = []

    def retention_meanwhile() -> bool:
        if not moved:
            moved.append(log.delete_records_before(second))
        return False

    before = rows(log)
    assert clean(log, clock.now_ms, aborted=retention_meanwhile) is None
    assert rows(log) == [r for r in before if r[0] >= second]
    _no_swap_leftovers(tmp_path)
    log.close()


def test_appends_and_reads_go_on_during_a_pass(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock, count=400)
    log = work.log
    stop = threading.Event()
    appended: list[int] = []
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            i = 0
            while not stop.is_set() or i < 50:
                info = log.append(
                    build_batch([(clock.now_ms, b"new%d" % (i % 3), b"n%d" % i, ())]),
                    leader_epoch=0,
                )
                appended.append(info.first_offset)
                rows(log)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    # How many appends had landed at each poll of the pass: it must see some land.
    seen_by_pass: list[int] = []

    def poll() -> bool:
        seen_by_pass.append(len(appended))
        return False

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        result = clean(log, clock.now_ms, aborted=poll)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive() and not errors
    assert result is not None and result.segments_replaced > 10
    assert seen_by_pass[-1] > seen_by_pass[0], "no append ran during the pass"
    log.maybe_increment_high_watermark()
    seen = {offset: (key, value) for offset, key, value in rows(log)}
    for i, offset in enumerate(appended):
        assert seen[offset] == (b"new%d" % (i % 3), b"n%d" % i)
    log.close()


def test_a_damaged_segment_is_uncleanable_and_still_served(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock)
    log = work.log
    damaged = segment_files(tmp_path)[1]
    damaged_base = int(damaged.name.split(".")[0])
    with open(damaged, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = rows_below(log, damaged_base)
    with pytest.raises(UncleanableLogError, match=rf"{damaged.name}: the batch at position \d+ "):
        clean(log, clock.now_ms)
    _no_swap_leftovers(tmp_path)
    assert rows_below(log, damaged_base) == before
    info = log.append(build_batch([(clock.now_ms, b"k", b"after", ())]), leader_epoch=0)
    assert log.read(info.first_offset, 1 << 16).records
    log.close()


def rows_below(log: PartitionLog, offset: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """The records below ``offset``, read without touching the segment at ``offset``."""
    out = []
    position = log.log_start_offset
    while position < offset:
        fetched = log.read(position, 1 << 16)
        for data in split_batches(fetched.records):
            out.extend((r.offset, r.key, r.value) for r in iter_records(data))
        position = fetched.next_offset
    return out


def test_throttler_holds_the_rate_to_its_limit() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000.0, clock_s=lambda: now[0], sleep_s=sleep)
    for _ in range(1000):
        throttler.maybe_throttle(10)  # 10 kB at the caller's pace of 5 kB/s
        now[0] += 0.002
    # At 1 kB/s it takes 10 s, less the last period (under 0.1 s of the caller's pace: at
    # most 500 bytes) that no check closed.
    assert 9.4 <= now[0] <= 10.1
    assert slept
    unlimited = Throttler(float("inf"), clock_s=lambda: now[0], sleep_s=sleep)
    count = len(slept)
    unlimited.maybe_throttle(10**12)
    assert len(slept) == count
    with pytest.raises(ValueError):
        Throttler(0)


def test_the_swap_leaves_offsets_lso_and_producers_as_they_were(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock, count=20)
    log = work.log
    _producers_then_plain(work, commit=True, plain=30)
    work.transactional(2, [(b"k3", b"open")])  # stays open: bounds the pass
    state = _visible_state(log)
    assert clean(log, clock.now_ms) is not None
    assert _visible_state(log) == state
    log.close()


def test_a_follower_copies_a_cleaned_leader(tmp_path: Path) -> None:
    clock = FakeClock()
    (tmp_path / "leader").mkdir()
    (tmp_path / "follower").mkdir()
    work = _keyed_log(tmp_path / "leader", clock, count=40)
    leader = work.log
    _producers_then_plain(work, commit=False, plain=20)
    clean(leader, clock.now_ms)
    # Producers 9 and 1 keep their last batches, emptied.
    empty = [h for h in map(read_header, read_batches(leader)) if h.records_count == 0]
    assert sorted(h.producer_id for h in empty) == [1, 9]
    follower = open_compacted_log(tmp_path / "follower", clock, segment_bytes=900)
    offset = leader.log_start_offset
    while offset < leader.log_end_offset:
        fetched = leader.read(offset, 1 << 16)
        follower.append_as_follower(fetched.records)
        offset = fetched.next_offset
    follower.update_follower_high_watermark(leader.high_watermark)
    assert rows(follower) == rows(leader)
    assert follower.log_end_offset == leader.log_end_offset
    assert _producers(follower) == _producers(leader)
    leader.close()
    follower.close()


def _producers(log: PartitionLog) -> dict[int, tuple[int, int]]:
    return {p.producer_id: (p.producer_epoch, p.last_sequence) for p in log.describe_producers()}


def _visible_state(log: PartitionLog) -> tuple[object, ...]:
    return (
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        log.last_stable_offset,
        sorted(log.describe_producers(), key=lambda p: p.producer_id),
        log.producer_state.ongoing_transactions,
        log.producer_state.snapshot_offsets(),
    )


def _producers_then_plain(work: Workload, *, commit: bool, plain: int) -> None:
    """An idempotent batch of producer 9 and a transaction of producer 1, then ``plain``
    records that supersede both."""
    work.idempotent(9, [(b"k1", b"idem")])
    work.transactional(1, [(b"k2", b"txn")])
    work.end_txn(1, commit=commit)
    for i in range(plain):
        work.plain([(b"k%d" % (i % 5), b"w%d" % i)])


def test_a_truncation_under_the_pass_stops_it_without_blaming_the_data(tmp_path: Path) -> None:
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock)
    log = work.log
    cut = log.segments[1].base_offset + 2
    first_segment_batches = len(list(log.segments[0].iter_batches(1 << 16)))
    polls = []

    def truncate_while_reading_the_second_segment() -> bool:
        polls.append(1)
        if len(polls) == first_segment_batches + 2:
            log.truncate_to(cut)
        return False

    assert clean(log, clock.now_ms, aborted=truncate_while_reading_the_second_segment) is None
    assert len(polls) > first_segment_batches + 2
    assert rows(log) == [work.original(offset) for offset in range(cut)]
    _no_swap_leftovers(tmp_path)
    log.close()


def test_a_segment_cut_and_sealed_again_under_the_pass_is_not_swapped(tmp_path: Path) -> None:
    # The same segment object, sealed again with other bytes at the same size: only the
    # truncation count tells the swap that what the pass read is stale.
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock)
    log = work.log
    first = log.segments[0]
    map_polls = sum(len(list(s.iter_batches(1 << 16))) for s in log.segments[:-1])
    first_batches = [header for _, header, _, _ in first.iter_batches(1 << 16)]
    cut = first_batches[-1].base_offset
    polls = []

    def rewrite_the_first_segments_tail() -> bool:
        polls.append(1)
        if len(polls) == map_polls + len(first_batches):
            log.truncate_to(cut)
            work.plain([(b"k%d" % (cut % 5), b"w%d" % cut)])
            work.plain([(b"roll", b"x" * 800)])
        return False

    assert clean(log, clock.now_ms, aborted=rewrite_the_first_segments_tail) is None
    assert log.segments[0] is first and log.segments.active is not first
    assert first.size_bytes == sum(header.size for header in first_batches)
    assert rows(log) == [work.original(offset) for offset in range(log.log_end_offset)]
    _no_swap_leftovers(tmp_path)
    log.close()


def test_a_segment_purged_under_the_pass_stops_it_without_blaming_the_disk(
    tmp_path: Path,
) -> None:
    # A follower behind its leader's start empties its log and the files go at once, while a
    # pass is over the clean section (whose file times it reads): the pass stops (None), as
    # for a truncation, instead of failing (the manager would mark the log uncleanable).
    clock = FakeClock()
    work = _keyed_log(tmp_path, clock, count=8, segment_bytes=200)
    log = work.log
    first = clean(log, clock.now_ms)
    assert first is not None
    _more_writes(work)
    map_polls = sum(
        len(list(segment.iter_batches(1 << 16)))
        for segment in log.segments[:-1]
        if segment.base_offset >= first.end_offset
    )
    polls = []

    def empty_and_purge_at_the_first_rewrite() -> bool:
        polls.append(1)
        if len(polls) == map_polls + 1:
            log.truncate_fully_and_start_at(0)
            log.purge_deleted_segments(everything=True)
        return False

    result = clean(
        log,
        clock.now_ms,
        first_dirty=first.end_offset,
        aborted=empty_and_purge_at_the_first_rewrite,
    )
    assert result is None and len(polls) > map_polls
    log.close()


def test_a_truncation_in_a_gap_tells_its_listener_no_more_than_the_end_it_leaves(
    tmp_path: Path,
) -> None:
    # The cleaner checkpoint is lowered to what the listener is told: above the real end,
    # records written again there would never be mapped.
    clock = FakeClock()
    told: list[int] = []
    log = PartitionLog.open(
        tmp_path / TOPIC_DIR,
        LogConfig(cleanup_policy=frozenset({"compact"}), segment_bytes=300),
        clock_ms=clock,
        on_truncate=lambda _log, end: told.append(end),
    )
    work = Workload(log, clock)
    for key in (b"x", b"a", b"b", b"a", b"c", b"d", b"e", b"f", b"g", b"h", b"i", b"j"):
        work.plain([(key, b"v")])
    assert clean(log, clock.now_ms) is not None
    offsets = [offset for offset, _, _ in rows(log)]
    assert 1 not in offsets and {0, 2} <= set(offsets)  # a gap at 1
    assert log.truncate_to(1)
    assert told and told[0] <= log.log_end_offset
    log.close()


def test_the_offset_map_counts_entries_as_kafka_and_takes_whole_segments() -> None:
    offset_map = OffsetMap(10 * 24, 0.9)
    assert offset_map.capacity == 9
    first = {key_digest(b"k%d" % i): i for i in range(6)}
    assert offset_map.merge(first) and len(offset_map) == 6
    # Known keys cost nothing; a segment with too many new ones is refused whole.
    assert offset_map.merge({key_digest(b"k0"): 100, key_digest(b"n1"): 101})
    assert offset_map.get(key_digest(b"k0")) == 100
    assert not offset_map.merge({key_digest(b"x%d" % i): 200 + i for i in range(3)})
    assert len(offset_map) == 7 and offset_map.get(key_digest(b"x0")) == -1
    assert len(key_digest(b"any key")) == 16
    with pytest.raises(ValueError, match="holds no entry"):
        OffsetMap(23, 1.0)
