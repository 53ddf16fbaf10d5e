"""Truncation (a follower diverged), the leader-epoch history and its end-offset look-ups."""

from __future__ import annotations

from pathlib import Path

import pytest
from brook_storage_node.log import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    UnexpectedAppendOffsetError,
)
from brook_storage_node.log.leader_epoch import LeaderEpochFileCache
from log_test_support import (
    TOPIC_DIR,
    FakeClock,
    batch,
    iter_record_offsets,
    open_log,
    read_batches,
)

from brook.record import build_batch, read_header


def _log_with_epochs(tmp_path: Path) -> PartitionLog:
    """Epoch 1 wrote offsets 0-9, epoch 3 wrote 10-19, epoch 5 wrote 20-24 (5 per batch)."""
    log = open_log(tmp_path, segment_bytes=3 * len(batch(5)))
    for epoch, batches in ((1, 2), (3, 2), (5, 1)):
        for _ in range(batches):
            log.append(batch(5), leader_epoch=epoch)
    assert log.log_end_offset == 25
    return log


def test_end_offset_for_epoch_answers_what_a_follower_of_each_epoch_needs(tmp_path: Path) -> None:
    log = _log_with_epochs(tmp_path)
    try:
        assert log.leader_epoch_cache.entries == (
            EpochEntry(1, 0),
            EpochEntry(3, 10),
            EpochEntry(5, 20),
        )
        assert log.end_offset_for_epoch(1) == (1, 10)
        assert log.end_offset_for_epoch(2) == (1, 10)  # unknown epoch: the one before it ends at 10
        assert log.end_offset_for_epoch(3) == (3, 20)
        assert log.end_offset_for_epoch(4) == (3, 20)
        assert log.end_offset_for_epoch(5) == (5, 25)  # the latest epoch ends at the log end
        assert log.end_offset_for_epoch(0) == (0, 0)  # older than the history
        assert log.end_offset_for_epoch(6) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        assert log.end_offset_for_epoch(UNDEFINED_EPOCH) == (
            UNDEFINED_EPOCH,
            UNDEFINED_EPOCH_OFFSET,
        )
    finally:
        log.close()


def test_truncate_to_removes_later_batches_and_segments_and_their_epochs(tmp_path: Path) -> None:
    log = _log_with_epochs(tmp_path)
    try:
        before = read_batches(log)
        assert log.segment_base_offsets == (0, 15)
        assert log.truncate_to(10)
        assert log.log_end_offset == 10
        assert log.segment_base_offsets == (0,)
        assert read_batches(log) == before[:2]
        assert log.leader_epoch_cache.entries == (EpochEntry(1, 0),)
        assert log.end_offset_for_epoch(1) == (1, 10)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(11, 100)
        # The next leader's data continues exactly where the log now ends.
        assert log.append(batch(2), leader_epoch=7).first_offset == 10
        assert log.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(7, 10))
        assert not log.truncate_to(100)
    finally:
        log.close()


def test_truncate_to_at_the_log_end_forgets_an_epoch_that_starts_there(tmp_path: Path) -> None:
    """A leader records its epoch at its log end before appending; if it appends nothing, a
    truncation that removes no record must still drop that entry (issue #13)."""
    log = _log_with_epochs(tmp_path)
    try:
        log.leader_epoch_cache.assign(6, 25)
        assert log.truncate_to(25)
        assert log.log_end_offset == 25
        assert log.leader_epoch_cache.entries[-1] == EpochEntry(5, 20)
        assert log.end_offset_for_epoch(5) == (5, 25)
        assert not log.truncate_to(25)  # nothing left to remove
    finally:
        log.close()
    reopened = open_log(tmp_path, segment_bytes=3 * len(batch(5)))
    try:
        assert reopened.leader_epoch_cache.entries[-1] == EpochEntry(5, 20)
    finally:
        reopened.close()


def test_truncate_to_an_offset_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    log = _log_with_epochs(tmp_path)
    try:
        log.update_high_watermark(25)
        assert log.truncate_to(12)  # batch 10..14 holds it
        assert log.log_end_offset == 10
        assert log.high_watermark == 10
        assert list(iter_record_offsets(read_batches(log))) == list(range(10))
    finally:
        log.close()


def test_truncation_is_durable_across_reopen(tmp_path: Path) -> None:
    log = _log_with_epochs(tmp_path)
    log.truncate_to(15)
    expected = read_batches(log)
    log.close()
    reopened = open_log(tmp_path, segment_bytes=3 * len(batch(5)))
    try:
        assert read_batches(reopened) == expected
        assert reopened.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    finally:
        reopened.close()


def test_truncate_fully_and_start_at_empties_the_log_at_the_new_offset(tmp_path: Path) -> None:
    log = _log_with_epochs(tmp_path)
    try:
        log.truncate_fully_and_start_at(1_000)
        assert (log.log_start_offset, log.log_end_offset) == (1_000, 1_000)
        assert log.leader_epoch_cache.entries == ()
        assert log.read(1_000, 100).records.nbytes == 0
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 100)
        assert log.append(batch(), leader_epoch=9).first_offset == 1_000
        assert log.segment_base_offsets == (1_000,)
    finally:
        log.close()
    reopened = open_log(tmp_path)
    try:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (1_000, 1_001)
    finally:
        reopened.close()


def test_follower_append_records_the_leaders_epochs_and_allows_offset_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        first = build_batch([(1, b"k", b"v", ())] * 3, base_offset=0, partition_leader_epoch=2)
        # A compacted leader log skips offsets 3..9.
        second = build_batch([(2, b"k", b"v", ())], base_offset=10, partition_leader_epoch=4)
        info = log.append_as_follower(first + second)
        assert (info.first_offset, info.last_offset) == (0, 10)
        assert log.log_end_offset == 11
        assert log.leader_epoch_cache.entries == (EpochEntry(2, 0), EpochEntry(4, 10))
        assert read_batches(log) == [first, second]
        assert read_header(log.read(5, 100).records).base_offset == 10
    finally:
        log.close()


@pytest.mark.parametrize(
    "offsets",
    [
        pytest.param((2,), id="starts-below-log-end"),
        pytest.param((5, 4), id="goes-backwards"),
        pytest.param((5, 5), id="overlaps"),
    ],
)
def test_follower_append_with_offsets_that_do_not_move_forward_changes_nothing(
    tmp_path: Path, offsets: tuple[int, ...]
) -> None:
    log = open_log(tmp_path)
    try:
        log.append_as_follower(build_batch([(1, b"k", b"v", ())] * 3, partition_leader_epoch=1))
        before = read_batches(log)
        data = b"".join(build_batch([(1, b"k", b"v", ())], base_offset=o) for o in offsets)
        with pytest.raises(UnexpectedAppendOffsetError):
            log.append_as_follower(data)
        assert log.log_end_offset == 3
        assert read_batches(log) == before
    finally:
        log.close()


def test_epoch_cache_assign_drops_entries_the_new_epoch_contradicts(tmp_path: Path) -> None:
    (tmp_path / TOPIC_DIR).mkdir()
    cache = LeaderEpochFileCache.load(tmp_path / TOPIC_DIR)
    assert cache.assign(1, 0)
    assert cache.assign(3, 10)
    assert not cache.assign(3, 12)  # same epoch, later offset: nothing new
    assert cache.assign(2, 5)  # the log was truncated below epoch 3's start
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(2, 5))
    cache.truncate_from_start(7)
    assert cache.entries == (EpochEntry(2, 7),)
    cache.truncate_from_end(7)
    assert cache.entries == ()
    assert LeaderEpochFileCache.load(tmp_path / TOPIC_DIR).entries == ()


def test_log_start_beyond_the_data_after_reopen_starts_an_empty_log_there(tmp_path: Path) -> None:
    log = _log_with_epochs(tmp_path)
    log.close()
    reopened = PartitionLog.open(
        tmp_path / TOPIC_DIR,
        LogConfig(),
        log_start_offset=40,
        had_clean_shutdown=True,
        clock_ms=FakeClock(),
    )
    try:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (40, 40)
        assert reopened.append(batch(), leader_epoch=9).first_offset == 40
    finally:
        reopened.close()
