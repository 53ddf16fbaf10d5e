"""The cleaner's guarantee as a property (issue #18; seed 001, "Log Compaction"): random
streams of keyed records (in batches of every codec), tombstones, idempotent and transactional
batches (committed and aborted), cleaned at random points with random tiny dedupe buffers
(several passes) and a random clock; afterwards a reader from the log start sees offsets
unchanged and increasing, each kept record exactly as written, every key's final value (a
tombstone may go only once older than delete.retention.ms), no aborted record; and after a
close and a reopen that replays the producer state from the log start, every producer's epoch
and last sequence are as before the cleaning and no transaction is open."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from brook_storage_node.log.cleaner import UncleanableLogError
from brook_storage_node.log.producer_state import SNAPSHOT_SUFFIX
from cleaner_test_support import Workload, clean, open_compacted_log, rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_test_support import TOPIC_DIR, FakeClock

from brook.record import Compression

KEYS = [b"k%d" % i for i in range(8)]
TXN_PRODUCERS = [1, 2, 3]
IDEMPOTENT_PRODUCERS = [11, 12]

row = st.tuples(
    st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), st.none()),
    st.one_of(st.binary(min_size=1, max_size=12), st.none()),
)
rows_ = st.lists(row, min_size=1, max_size=3)
operation = st.one_of(
    st.tuples(st.just("plain"), rows_, st.sampled_from(list(Compression))),
    st.tuples(st.just("idempotent"), st.sampled_from(IDEMPOTENT_PRODUCERS), rows_),
    st.tuples(st.just("txn"), st.sampled_from(TXN_PRODUCERS), rows_),
    st.tuples(st.just("end"), st.sampled_from(TXN_PRODUCERS), st.booleans()),
    st.tuples(st.just("clean"), st.integers(min_value=2, max_value=8)),
    st.tuples(st.just("tick"), st.integers(min_value=0, max_value=20_000)),
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    operations=st.lists(operation, min_size=10, max_size=70),
    segment_bytes=st.integers(min_value=200, max_value=800),
    delete_retention_ms=st.sampled_from([0, 10_000, 60_000]),
    final_map_entries=st.integers(min_value=3, max_value=8),
)
def test_cleaning_keeps_the_final_value_of_every_key(
    operations: list[tuple[object, ...]],
    segment_bytes: int,
    delete_retention_ms: int,
    final_map_entries: int,
) -> None:
    directory = Path(tempfile.mkdtemp())
    try:
        _run(directory, operations, segment_bytes, delete_retention_ms, final_map_entries)
    finally:
        shutil.rmtree(directory)


def _run(
    directory: Path,
    operations: list[tuple[object, ...]],
    segment_bytes: int,
    delete_retention_ms: int,
    final_map_entries: int,
) -> None:
    clock = FakeClock()
    config = {"segment_bytes": segment_bytes, "delete_retention_ms": delete_retention_ms}
    log = open_compacted_log(directory, clock, **config)
    work = Workload(log, clock)
    first_dirty = 0
    horizon_ms = -1  # the latest tombstone horizon a pass used

    def clean_pass(map_entries: int) -> None:
        nonlocal first_dirty, horizon_ms
        before = rows(log)
        try:
            result = clean(log, clock.now_ms, first_dirty=first_dirty, map_entries=map_entries)
        except UncleanableLogError as exc:
            # Only for a segment whose keys alone overflow the map; the log is untouched.
            assert "do not fit the dedupe buffer" in str(exc)
            assert rows(log) == before
            return
        horizon_ms = clock.now_ms - delete_retention_ms
        if result is not None:
            first_dirty = result.end_offset
        _check_against_model(work, horizon_ms, first_dirty)

    for op in operations:
        kind = op[0]
        if kind == "plain":
            work.plain(op[1], op[2])  # type: ignore[arg-type]
        elif kind == "idempotent":
            work.idempotent(op[1], op[2])  # type: ignore[arg-type]
        elif kind == "txn":
            work.transactional(op[1], op[2])  # type: ignore[arg-type]
        elif kind == "end":
            if op[1] in work.open_txns:
                work.end_txn(op[1], bool(op[2]))  # type: ignore[arg-type]
        elif kind == "clean":
            clean_pass(op[1])  # type: ignore[arg-type]
        else:
            clock.advance(op[1])  # type: ignore[arg-type]
    work.end_all_txns(commit=False)
    # A roll makes every batch cleanable: the active segment is never cleaned.
    work.plain([(b"roll", b"x" * (segment_bytes - 100))])
    producers_before = {
        p.producer_id: (p.producer_epoch, p.last_sequence) for p in log.describe_producers()
    }
    for _ in range(6):
        clean_pass(final_map_entries)
    _check_against_model(work, horizon_ms, first_dirty)
    expected = rows(log)
    log.close()
    # Replay the producer state from the log start: no snapshot helps it.
    for snapshot in (directory / TOPIC_DIR).glob(f"*{SNAPSHOT_SUFFIX}"):
        snapshot.unlink()
    reopened = open_compacted_log(directory, clock, high_watermark=1 << 40, **config)
    try:
        assert rows(reopened) == expected
        producers_after = {
            p.producer_id: (p.producer_epoch, p.last_sequence)
            for p in reopened.describe_producers()
        }
        assert producers_after == producers_before
        assert reopened.producer_state.ongoing_transactions == {}
        assert reopened.last_stable_offset == reopened.high_watermark == reopened.log_end_offset
    finally:
        reopened.close()


def _check_against_model(work: Workload, horizon_ms: int, cleaned_to: int) -> None:
    """``cleaned_to``: every offset below it went through a pass."""
    seen = rows(work.log)
    offsets = [offset for offset, _, _ in seen]
    assert offsets == sorted(set(offsets)), "offsets must be strictly increasing"
    for offset, key, value in seen:
        assert (offset, key, value) == work.original(offset)
    present = set(offsets)
    # Records of transactions still open: their fate is not decided yet.
    undecided = {offset for txn in work.open_txns.values() for offset in txn}
    last_by_key: dict[bytes, int] = {}
    for offset in sorted(work.records):
        record = work.records[offset]
        if offset in present and offset < cleaned_to:
            assert not record.aborted, f"aborted record at {offset} survived"
            assert record.key is not None, f"keyless record at {offset} survived"
        if record.key is not None and not record.aborted and offset not in undecided:
            last_by_key[record.key] = offset
    for key, offset in last_by_key.items():
        record = work.records[offset]
        if offset in present:
            continue
        assert record.value is None and record.timestamp < horizon_ms, (
            f"the final record of {key!r} at {offset} is gone"
        )
