"""Look-up of the first offset whose record timestamp is at or after a given time (ListOffsets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from brook_storage_node.log import PartitionLog
from log_test_support import TOPIC_DIR, FakeClock, open_log, open_log_append_time_log

from brook.record import Compression, build_batch


def _append(
    log: PartitionLog, timestamps: list[int], compression: Compression = Compression.NONE
) -> None:
    log.append(
        build_batch([(t, None, b"v", ()) for t in timestamps], compression=compression),
        leader_epoch=0,
    )


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(
    tmp_path: Path, compression: Compression
) -> None:
    # Many small segments and index entries, so the search crosses both.
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=60)
    try:
        timestamps = [1_000 + 10 * i for i in range(60)]
        for start in range(0, 60, 3):
            _append(log, timestamps[start : start + 3], compression)
        assert log.segment_count > 3
        for offset, timestamp in enumerate(timestamps):
            assert log.offset_for_timestamp(timestamp) == (timestamp, offset)
            assert log.offset_for_timestamp(timestamp - 9) == (timestamp, offset)
        assert log.offset_for_timestamp(0) == (1_000, 0)
        assert log.offset_for_timestamp(timestamps[-1] + 1) is None
        assert log.offset_for_timestamp(timestamps[30], max_offset=30) is None
        assert log.offset_for_timestamp(timestamps[30], max_offset=31) == (timestamps[30], 30)
    finally:
        log.close()


def test_timestamps_out_of_order_answer_with_the_first_qualifying_offset(tmp_path: Path) -> None:
    # CreateTime timestamps come from producers and may go backwards.
    log = open_log(tmp_path, index_interval_bytes=0)
    try:
        _append(log, [500, 505])  # offsets 0-1
        _append(log, [100, 150])  # 2-3
        _append(log, [200, 700])  # 4-5
        _append(log, [300, 300])  # 6-7
        assert log.offset_for_timestamp(120) == (500, 0)
        assert log.offset_for_timestamp(506) == (700, 5)
        log.update_high_watermark(8)
        log.delete_records_before(2)
        assert log.offset_for_timestamp(120) == (150, 3)
        assert log.offset_for_timestamp(250) == (700, 5)
    finally:
        log.close()


def test_equal_timestamps_resolve_to_the_earliest_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0)
    try:
        for _ in range(10):
            _append(log, [7_000, 7_000])
        assert log.offset_for_timestamp(7_000) == (7_000, 0)
    finally:
        log.close()


def test_log_append_time_lookups_use_the_brokers_stamp(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log_append_time_log(tmp_path, clock)
    try:
        stamps = []
        for _ in range(5):
            stamps.append(clock.now_ms)
            _append(log, [1, 2, 3])
            clock.advance(100)
        assert log.offset_for_timestamp(stamps[2]) == (stamps[2], 6)
        assert log.offset_for_timestamp(stamps[2] - 50) == (stamps[2], 6)
    finally:
        log.close()


def test_time_lookups_survive_reopen_on_sealed_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, index_interval_bytes=50)
    for i in range(30):
        _append(log, [10_000 + i])
    log.close()
    reopened = PartitionLog.open(
        tmp_path / TOPIC_DIR, log.config, had_clean_shutdown=True, clock_ms=FakeClock()
    )
    try:
        assert reopened.segment_count > 3
        assert all(reopened.offset_for_timestamp(10_000 + i) == (10_000 + i, i) for i in range(30))
    finally:
        reopened.close()


def test_offset_of_max_timestamp_is_the_first_visible_record_carrying_it(tmp_path: Path) -> None:
    # KIP-734 (ListOffsets' MAX_TIMESTAMP): the record's own offset, not its batch's last one;
    # ties go to the earliest; records above the high watermark or below the log start are
    # not visible to it. Small segments, so segments wholly inside the range and segments
    # straddling either end are both crossed.
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=60)
    try:
        assert log.offset_of_max_timestamp(max_offset=0) is None
        _append(log, [100, 900, 300])  # offsets 0-2: 900 is the record at 1
        for start in range(3, 30, 3):
            _append(log, [200 + start, 210 + start, 220 + start])
        _append(log, [50, 900, 900])  # 30-32: the same maximum again, later
        _append(log, [950, 10, 20])  # 33-35: a new maximum
        assert log.segment_count >= 3
        assert log.offset_of_max_timestamp(max_offset=36) == (950, 33)
        # The high watermark hides the batch holding 950, and cuts into a batch.
        assert log.offset_of_max_timestamp(max_offset=33) == (900, 1)
        assert log.offset_of_max_timestamp(max_offset=1) == (100, 0)
        log.update_high_watermark(36)
        log.delete_records_before(2)
        assert log.offset_of_max_timestamp(max_offset=33) == (900, 31)
        log.delete_records_before(34)
        assert log.offset_of_max_timestamp(max_offset=36) == (20, 35)
    finally:
        log.close()


def test_offset_of_max_timestamp_with_log_append_time_is_the_first_of_the_newest_batch(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    log = open_log_append_time_log(tmp_path, clock)
    try:
        for _ in range(3):
            _append(log, [1, 2, 3])
            clock.advance(10)
        newest = log.offset_of_max_timestamp(max_offset=9)
        assert newest is not None and newest.offset == 6
    finally:
        log.close()
