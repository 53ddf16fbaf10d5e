"""Segments roll by size, age and full indexes; retention deletes whole old segments only."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from brook_storage_node.log import OffsetOutOfRangeError, PartitionLog
from log_test_support import (
    TOPIC_DIR,
    FakeClock,
    batch,
    open_log,
    open_log_append_time_log,
    read_batches,
    segment_files,
)

from brook.record import read_header


def test_segment_rolls_before_an_append_would_pass_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    try:
        sizes = []
        for i in range(40):
            data = batch(1 + i % 3)
            sizes.append(len(data))
            log.append(data, leader_epoch=0)
        files = segment_files(tmp_path)
        assert len(files) > 3
        for path in files:
            assert path.stat().st_size <= 1000
        # Each sealed segment was rolled because the next batch would not have fit.
        for path, next_path in itertools.pairwise(files):
            next_first = read_header(next_path.read_bytes())
            assert path.stat().st_size + next_first.size > 1000
            assert int(next_path.name[:20]) == next_first.base_offset
        assert log.segment_base_offsets == tuple(int(p.name[:20]) for p in files)
    finally:
        log.close()


def test_segment_rolls_when_its_first_batch_is_older_than_segment_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=60_000)
    try:
        start = 1_700_000_000_000
        log.append(batch(timestamp=start), leader_epoch=0)
        log.append(batch(timestamp=start + 60_000), leader_epoch=0)  # exactly segment.ms: stays
        assert log.segment_count == 1
        log.append(batch(timestamp=start + 60_001), leader_epoch=0)
        assert log.segment_base_offsets == (0, 2)
    finally:
        log.close()


def test_log_append_time_topic_rolls_by_the_broker_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log_append_time_log(tmp_path, clock, segment_ms=1_000)
    try:
        log.append(batch(timestamp=5), leader_epoch=0)
        clock.advance(1_000)
        log.append(batch(timestamp=5), leader_epoch=0)
        assert log.segment_count == 1
        clock.advance(1)
        log.append(batch(timestamp=5), leader_epoch=0)
        assert log.segment_base_offsets == (0, 2)
    finally:
        log.close()


def test_an_empty_segment_never_rolls_by_age(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, segment_ms=1)
    try:
        clock.advance(10_000)
        log.append(batch(timestamp=clock.now_ms), leader_epoch=0)
        assert log.segment_base_offsets == (0,)
    finally:
        log.close()


def test_a_full_offset_index_rolls_the_segment(tmp_path: Path) -> None:
    # 24 bytes: three offset index entries; with index.interval.bytes 0 every batch but the
    # first of a segment is indexed.
    log = open_log(tmp_path, segment_index_bytes=24, index_interval_bytes=0)
    try:
        for _ in range(12):
            log.append(batch(), leader_epoch=0)
        assert log.segment_count >= 4
        assert len(read_batches(log)) == 12
        for path in segment_files(tmp_path, ".index")[:-1]:
            assert path.stat().st_size <= 24
    finally:
        log.close()


def _log_with_old_segments(tmp_path: Path, clock: FakeClock, **config: int) -> PartitionLog:
    """Four full segments of 3 batches, each batch one minute newer than the last."""
    log = open_log(tmp_path, clock, segment_bytes=3 * len(batch()), **config)
    start = clock.now_ms - 20 * 60_000
    for i in range(13):
        log.append(batch(timestamp=start + i * 60_000), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.segment_base_offsets == (0, 3, 6, 9, 12)
    return log


def test_retention_ms_deletes_segments_whose_newest_record_expired(tmp_path: Path) -> None:
    clock = FakeClock()
    # Newest records of the segments are 18, 15, 12, 9 and 8 minutes old.
    log = _log_with_old_segments(tmp_path, clock, retention_ms=13 * 60_000)
    try:
        assert log.delete_old_segments() == 2
        assert log.segment_base_offsets == (6, 9, 12)
        assert log.log_start_offset == 6
        with pytest.raises(OffsetOutOfRangeError):
            log.read(5, 1000)
        assert read_header(log.read(6, 1000).records).base_offset == 6
        assert log.delete_old_segments() == 0
    finally:
        log.close()


def test_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log_with_old_segments(tmp_path, clock, retention_ms=1)
    try:
        assert log.delete_old_segments() == 4
        assert log.segment_base_offsets == (12,)
        assert log.delete_old_segments() == 0
        assert log.log_start_offset == 12
        assert len(read_batches(log)) == 1
    finally:
        log.close()


def test_retention_keeps_segments_above_the_high_watermark(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log_with_old_segments(tmp_path, clock, retention_ms=1)
    try:
        log.update_high_watermark(5)  # offsets from 5 on are not replicated yet
        assert log.delete_old_segments() == 1
        assert log.segment_base_offsets == (3, 6, 9, 12)
    finally:
        log.close()


def test_retention_bytes_deletes_oldest_segments_until_the_log_fits(tmp_path: Path) -> None:
    clock = FakeClock()
    segment_bytes = 3 * len(batch())
    log = _log_with_old_segments(tmp_path, clock, retention_bytes=2 * segment_bytes + 1)
    try:
        before = log.size_bytes
        deleted = log.delete_old_segments()
        assert deleted == 2
        assert log.size_bytes == before - 2 * segment_bytes
        assert log.size_bytes <= 2 * segment_bytes + 1 + len(batch())
    finally:
        log.close()


def test_compacted_topics_are_not_deleted_by_time_or_size(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log_with_old_segments(tmp_path, clock, retention_ms=1, retention_bytes=0)
    try:
        log.update_config(log.config.with_overrides({"cleanup.policy": "compact"}))
        assert log.delete_old_segments() == 0
        assert log.segment_count == 5
    finally:
        log.close()


def test_deleted_segment_files_stay_until_file_delete_delay_passes(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log_with_old_segments(tmp_path, clock, retention_ms=1, file_delete_delay_ms=30_000)
    try:
        # A reader that picked the segment before the deletion can still read it.
        picked = log._segments  # the snapshot a concurrent read holds
        log.delete_old_segments()
        directory = tmp_path / TOPIC_DIR
        assert len(list(directory.glob("*.log.deleted"))) == 4
        still_readable = picked[0].read(0, 100, max_offset=3, min_one_batch=True)
        assert still_readable is not None
        assert read_header(still_readable[0]).base_offset == 0
        clock.advance(29_999)
        assert log.purge_deleted_segments() == 0
        clock.advance(1)
        assert log.purge_deleted_segments() == 4
        assert list(directory.glob("*.deleted")) == []
    finally:
        log.close()


def test_delete_records_moves_the_log_start_and_drops_segments_wholly_below_it(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    log = _log_with_old_segments(tmp_path, clock)
    try:
        assert log.delete_records_before(7) == 7
        assert log.log_start_offset == 7
        assert log.segment_base_offsets == (6, 9, 12)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(6, 1000)
        assert read_header(log.read(7, 1000).records).base_offset == 7
        assert log.delete_records_before(3) == 7  # never backwards
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records_before(log.high_watermark + 1)
    finally:
        log.close()


def test_log_start_offset_survives_reopen_through_its_checkpointed_value(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log_with_old_segments(tmp_path, clock)
    log.delete_records_before(7)
    log.close()
    reopened = PartitionLog.open(
        tmp_path / TOPIC_DIR,
        log.config,
        log_start_offset=7,
        high_watermark=13,
        had_clean_shutdown=True,
        clock_ms=clock,
    )
    try:
        assert reopened.log_start_offset == 7
        assert reopened.high_watermark == 13
        assert read_header(read_batches(reopened)[0]).base_offset == 7
    finally:
        reopened.close()
