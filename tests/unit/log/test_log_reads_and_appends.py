"""The rules of a read (whole batches, bounds, errors) and of a valid append."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from brook_storage_node.log import (
    AppendOrigin,
    InvalidTimestampError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordListTooLargeError,
)
from log_test_support import (
    TOPIC_DIR,
    FakeClock,
    batch,
    open_log,
    open_log_append_time_log,
    read_batches,
    read_records,
    segment_files,
)

from brook.record import (
    Compression,
    ControlType,
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_records,
    read_header,
    verify_crc,
)


def test_a_first_batch_larger_than_max_bytes_is_still_returned_whole(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        big = batch(20, value_bytes=100)
        log.append(big, leader_epoch=0)
        log.append(batch(), leader_epoch=0)
        fetched = log.read(0, 10)
        assert fetched.records.nbytes == len(big)
        assert fetched.next_offset == 20
        assert log.read(0, 10, min_one_batch=False).records.nbytes == 0
    finally:
        log.close()


def test_reads_return_only_whole_batches_within_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        sizes = [len(batch(n)) for n in (1, 2, 3, 4)]
        for n in (1, 2, 3, 4):
            log.append(batch(n), leader_epoch=0)
        fetched = log.read(0, sizes[0] + sizes[1] + sizes[2] - 1)
        assert fetched.records.nbytes == sizes[0] + sizes[1]
        assert fetched.next_offset == 3
        assert [r.offset for r in read_records(log, max_bytes=sizes[3])] == list(range(10))
    finally:
        log.close()


def test_a_read_from_inside_a_batch_returns_that_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        log.append(batch(5, compression=Compression.ZSTD), leader_epoch=0)
        fetched = log.read(3, 1 << 20)
        assert read_header(fetched.records).base_offset == 0
        assert fetched.next_offset == 5
    finally:
        log.close()


def test_reads_stop_at_max_offset_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        for _ in range(4):
            log.append(batch(2), leader_epoch=0)
        log.update_high_watermark(4)
        fetched = log.read(0, 1 << 20, max_offset=log.high_watermark)
        assert [r.offset for r in iter_records(fetched.records)] + [
            r.offset for r in iter_records(fetched.records, len(batch(2)))
        ] == [0, 1, 2, 3]
        assert fetched.next_offset == 4
        assert fetched.high_watermark == 4
        at_hw = log.read(4, 1 << 20, max_offset=4)
        assert (at_hw.records.nbytes, at_hw.next_offset) == (0, 4)
    finally:
        log.close()


def test_offsets_outside_the_log_are_out_of_range_and_the_end_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        log.append(batch(3), leader_epoch=0)
        with pytest.raises(OffsetOutOfRangeError) as raised:
            log.read(4, 100)
        assert raised.value.error_code == 1
        log.update_high_watermark(3)
        log.delete_records_before(1)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 100)
        at_end = log.read(3, 100)
        assert (at_end.records.nbytes, at_end.next_offset, at_end.log_end_offset) == (0, 3, 3)
        with pytest.raises(ValueError, match="max_bytes"):
            log.read(0, -1)
    finally:
        log.close()


def _assert_unchanged(tmp_path: Path, log: PartitionLog, batches: list[bytes]) -> None:
    assert log.log_end_offset == 1
    assert read_batches(log) == batches
    assert sum(p.stat().st_size for p in segment_files(tmp_path)) == len(batches[0])


def test_rejected_appends_carry_kafka_error_codes_and_change_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    log = PartitionLog.open(
        tmp_path / TOPIC_DIR,
        LogConfig(max_message_bytes=500, segment_bytes=1000).with_overrides(
            {"message.timestamp.difference.max.ms": "60000"}
        ),
        clock_ms=clock,
    )
    try:
        log.append(batch(timestamp=clock.now_ms), leader_epoch=0)
        batches = read_batches(log)
        good = batch(timestamp=clock.now_ms)
        corrupt = bytearray(good)
        corrupt[-1] ^= 1
        old_format = bytearray(good)
        old_format[16] = 1
        near_max = batch(4, value_bytes=90, timestamp=clock.now_ms)
        assert len(near_max) <= 500 and 2 * len(near_max) + len(good) > 1000
        cases: list[tuple[bytes, type[Exception], int]] = [
            (bytes(corrupt), CorruptRecordError, 2),
            (batch(10, value_bytes=60, timestamp=clock.now_ms), RecordTooLargeError, 10),
            (near_max + near_max + good, RecordListTooLargeError, 18),
            (batch(timestamp=clock.now_ms - 60_001), InvalidTimestampError, 32),
            (bytes(old_format), InvalidRecordError, 87),
            (good + b"\x00\x01", CorruptRecordError, 2),
            (b"", InvalidRecordError, 87),
            (
                build_control_batch(
                    ControlType.COMMIT,
                    producer_id=1,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp_ms=clock.now_ms,
                ),
                InvalidRecordError,
                87,
            ),
        ]
        for data, error, code in cases:
            with pytest.raises(error) as raised:
                log.append(data, leader_epoch=0)
            assert raised.value.error_code == code  # type: ignore[attr-defined]
            _assert_unchanged(tmp_path, log, batches)
    finally:
        log.close()


def test_a_coordinator_may_append_control_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        marker = build_control_batch(
            ControlType.ABORT, producer_id=5, producer_epoch=1, coordinator_epoch=3, timestamp_ms=1
        )
        info = log.append(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
        assert info.first_offset == 0
        assert read_header(log.read(0, 1000).records).is_control
    finally:
        log.close()


def test_append_assigns_offsets_and_epoch_without_touching_the_callers_bytes(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    try:
        log.append(batch(4), leader_epoch=3)
        data = batch(2) + batch(3)
        original = bytes(data)
        info = log.append(data, leader_epoch=3)
        assert data == original
        assert (info.first_offset, info.last_offset, info.record_count) == (4, 8, 5)
        assert info.log_append_time_ms == -1
        stored = read_batches(log)
        assert [read_header(b).base_offset for b in stored] == [0, 4, 6]
        assert all(read_header(b).partition_leader_epoch == 3 for b in stored)
        for stored_batch in stored:
            verify_crc(stored_batch, 0, read_header(stored_batch))
    finally:
        log.close()


def test_log_append_time_topics_stamp_the_brokers_clock_on_every_record(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log_append_time_log(tmp_path, clock)
    try:
        info = log.append(batch(3, timestamp=42, compression=Compression.SNAPPY), leader_epoch=0)
        assert info.log_append_time_ms == clock.now_ms
        stored = read_batches(log)[0]
        header = read_header(stored)
        assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert header.max_timestamp == clock.now_ms
        assert {r.timestamp for r in iter_records(stored)} == {clock.now_ms}
    finally:
        log.close()


def test_flush_messages_fsyncs_and_advances_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=5)
    try:
        log.append(batch(3), leader_epoch=0)
        assert log.recovery_point == 0
        log.append(batch(3), leader_epoch=0)
        assert log.recovery_point == 6
    finally:
        log.close()


def test_flush_ms_flushes_once_the_interval_has_passed(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, flush_ms=1_000)
    try:
        log.append(batch(2), leader_epoch=0)
        assert not log.flush_if_due()
        clock.advance(1_000)
        assert log.flush_if_due()
        assert log.recovery_point == 2
        clock.advance(5_000)
        assert not log.flush_if_due()  # nothing new to flush
    finally:
        log.close()


def test_a_closed_log_refuses_work_and_holds_no_descriptors(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    log = open_log(tmp_path, segment_bytes=500)
    for _ in range(20):
        log.append(batch(), leader_epoch=0)
    log.read(0, 1 << 20)
    log.offset_for_timestamp(0)
    log.close()
    assert len(os.listdir("/proc/self/fd")) == before
    with pytest.raises(Exception, match="closed"):
        log.append(batch(), leader_epoch=0)
    with pytest.raises(Exception, match="closed"):
        log.read(0, 100)


def test_a_compacted_log_refuses_a_batch_with_a_keyless_record_and_appends_nothing(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, cleanup_policy=frozenset({"compact", "delete"}))
    try:
        log.append(batch(2), leader_epoch=0)
        keyless = build_batch(
            [(1_700_000_000_000, b"k", b"v", ()), (1_700_000_000_001, None, b"v", ())],
            compression=Compression.GZIP,
        )
        with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message "):
            log.append(keyless, leader_epoch=0)
        assert log.log_end_offset == 2 and len(read_batches(log)) == 1
        log.append(batch(1, key=b"other"), leader_epoch=0)
        assert log.log_end_offset == 3
    finally:
        log.close()


def test_a_log_without_compaction_takes_keyless_records(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        log.append(batch(2, key=None), leader_epoch=0)
        assert [record.key for record in read_records(log)] == [None, None]
    finally:
        log.close()
