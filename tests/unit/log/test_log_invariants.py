"""The log's invariant checks: a value that would corrupt the log or its replication fails
loudly (InvariantViolationError) with nothing changed, where a clamp would have hidden it;
the legitimate cases (a follower's HW going back, a gap in a follower's offsets) pass."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from brook_storage_node.log import (
    EpochEntry,
    InvariantViolationError,
    LogConfig,
    PartitionLog,
    StaleLeaderEpochError,
)
from brook_storage_node.log.leader_epoch import LeaderEpochCheckpointFile, LeaderEpochFileCache
from brook_storage_node.log.log_validator import (
    AppendOrigin,
    check_append_offsets,
    validate_follower_append,
    validate_leader_append,
)
from log_test_support import TOPIC_DIR, batch, iter_record_offsets, open_log, read_batches

from brook.errors import ErrorCode
from brook.record import build_batch

NOW_MS = 1_700_000_000_000


def _log_of(tmp_path: Path, records: int) -> PartitionLog:
    log = open_log(tmp_path)
    log.append(batch(records), leader_epoch=1)
    assert log.log_end_offset == records
    return log


def test_a_follower_high_watermark_past_its_log_end_is_refused(tmp_path: Path) -> None:
    log = _log_of(tmp_path, 10)
    try:
        log.update_high_watermark(6)
        with pytest.raises(InvariantViolationError, match="past the log end offset 10"):
            log.update_high_watermark(11)
        assert log.high_watermark == 6
    finally:
        log.close()


def test_a_leaders_high_watermark_past_the_follower_log_end_is_clamped_to_it(
    tmp_path: Path,
) -> None:
    """The leader's HW counts records the follower has not fetched yet: the follower takes
    the smaller of it and its own end, read under the log's lock."""
    log = _log_of(tmp_path, 10)
    try:
        assert log.update_follower_high_watermark(25) == 10
        assert log.update_follower_high_watermark(6) == 6
        assert log.high_watermark == 6
    finally:
        log.close()


def test_a_follower_high_watermark_may_go_back_but_not_below_the_log_start(
    tmp_path: Path,
) -> None:
    log = _log_of(tmp_path, 10)
    try:
        log.update_high_watermark(10)
        log.delete_records_before(4)
        # A new leader's HW can trail its predecessor's: Kafka's follower takes it.
        assert log.update_high_watermark(7) == 7
        assert log.update_high_watermark(2) == 4
    finally:
        log.close()


def test_a_leader_high_watermark_never_goes_back_nor_past_the_log_end(tmp_path: Path) -> None:
    log = _log_of(tmp_path, 10)
    try:
        assert log.maybe_increment_high_watermark(6)
        assert not log.maybe_increment_high_watermark(3)  # a follower fell behind
        assert log.high_watermark == 6
        # The ISR's other members are ahead (they fetched from a previous leader): the HW is
        # still bounded by this log's own end, read under its lock.
        assert log.maybe_increment_high_watermark(25)
        assert log.high_watermark == 10
        log.append(batch(2), leader_epoch=1)
        assert log.maybe_increment_high_watermark(None)  # leads alone: its own end
        assert log.high_watermark == 12
    finally:
        log.close()


def test_a_leader_append_in_an_epoch_older_than_the_history_is_refused(tmp_path: Path) -> None:
    """An older epoch is a race the client retries (leadership moved while the append was on
    its way); a negative one is a bug. Neither writes anything."""
    log = open_log(tmp_path)
    try:
        log.append(batch(3), leader_epoch=5)
        before = read_batches(log)
        with pytest.raises(StaleLeaderEpochError, match="epoch 4") as stale:
            log.append(batch(2), leader_epoch=4)
        assert stale.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        with pytest.raises(InvariantViolationError, match="epoch -1"):
            log.append(batch(2), leader_epoch=-1)
        assert log.log_end_offset == 3
        assert read_batches(log) == before
        assert log.leader_epoch_cache.entries == (EpochEntry(5, 0),)
        log.append(batch(2), leader_epoch=5)
        log.append(batch(2), leader_epoch=6)
        assert log.leader_epoch_cache.entries == (EpochEntry(5, 0), EpochEntry(6, 5))
    finally:
        log.close()


def test_an_epoch_history_that_does_not_increase_is_never_kept(tmp_path: Path) -> None:
    (tmp_path / TOPIC_DIR).mkdir()
    checkpoint = LeaderEpochCheckpointFile(tmp_path / TOPIC_DIR / "leader-epoch-checkpoint")
    for entries in (
        [EpochEntry(3, 10), EpochEntry(2, 20)],  # epochs go back
        [EpochEntry(2, 10), EpochEntry(3, 10)],  # two epochs start at one offset
    ):
        with pytest.raises(InvariantViolationError, match="not increasing"):
            LeaderEpochFileCache(checkpoint, entries)
    cache = LeaderEpochFileCache.load(tmp_path / TOPIC_DIR)
    for epoch, offset in ((-1, 0), (0, -1)):
        with pytest.raises(InvariantViolationError, match="must be >= 0"):
            cache.assign(epoch, offset)
    assert cache.entries == ()


def test_leader_appends_are_dense_from_the_log_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        for count in (1, 5, 2):
            log.append(batch(count), leader_epoch=0)
        log.append(batch(3) + batch(4), leader_epoch=0)
        assert list(iter_record_offsets(read_batches(log))) == list(range(15))
    finally:
        log.close()


def test_a_leader_append_not_dense_from_the_log_end_is_refused_before_it_is_written() -> None:
    at_end = validate_leader_append(
        batch(3),
        next_offset=10,
        leader_epoch=0,
        config=LogConfig(),
        now_ms=NOW_MS,
        origin=AppendOrigin.CLIENT,
    )
    check_append_offsets(at_end, 10, dense=True)
    with pytest.raises(InvariantViolationError, match="dense"):
        check_append_offsets(at_end, 7, dense=True)  # would leave offsets 7..9 unused
    with pytest.raises(InvariantViolationError, match="at log end offset 12"):
        check_append_offsets(at_end, 12, dense=True)  # would reuse offsets 10 and 11
    miscounted = dataclasses.replace(at_end, record_count=2)
    with pytest.raises(InvariantViolationError, match="2 records"):
        check_append_offsets(miscounted, 10, dense=True)
    backwards = dataclasses.replace(at_end, last_offset=9)
    with pytest.raises(InvariantViolationError):
        check_append_offsets(backwards, 10, dense=False)


def test_a_follower_append_may_leave_a_gap_but_never_go_back() -> None:
    # A compacted leader log skips offsets: the follower copies the gap.
    gapped = validate_follower_append(
        build_batch([(1, b"k", b"v", ())], base_offset=15), log_end_offset=10, config=LogConfig()
    )
    check_append_offsets(gapped, 10, dense=False)
    with pytest.raises(InvariantViolationError):
        check_append_offsets(gapped, 16, dense=False)
