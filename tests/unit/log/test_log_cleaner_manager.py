"""The log cleaner manager (log/log_cleaner_manager.py): the cleanable bounds of a log, its clean
and dirty sizes, which log is cleaned next, the cleaner-offset-checkpoint, the cleaner's
settings, metrics, threads and aborts.

The tests marked "needs clean_log" run a real pass (log/cleaner.py) and pass once the cleaner
is implemented; the others use the manager's selection and bookkeeping alone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from brook_storage_node.config import CONFIG_DEF
from brook_storage_node.log import (
    LogConfig,
    LogManager,
    LogManagerConfig,
    PartitionLog,
)
from brook_storage_node.log.checkpoints import OffsetCheckpointFile
from brook_storage_node.log.cleaner import CleanResult
from brook_storage_node.log.errors import LogStorageError
from brook_storage_node.log.log_cleaner_manager import (
    CLEANER_OFFSET_CHECKPOINT,
    LogCleanerManager,
    LogCleanerManagerConfig,
    LogCleanSizes,
    clean_sizes,
    cleanable_offsets,
)
from brook_storage_node.log.node_config import node_log_config, node_log_manager_config
from brook_storage_node.log.topic_partition import TopicPartition
from log_test_support import FakeClock, read_records
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from brook.config import ConfigError, RawSetting
from brook.record import build_batch

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
WAIT_S = 10.0
# How soon closing or deleting a log stops a pass polling ``aborted`` between batches.
ABORT_PROMPT_S = 5.0
# Two one-record batches (80 bytes each) per segment.
SEGMENT_BYTES = 200
COMPACT = frozenset({"compact"})


def _keyed(key: int, timestamp: int = NOW_MS, *, txn_producer: int | None = None) -> bytes:
    return build_batch(
        [(timestamp, b"key-%d" % key, b"value-%d" % key, ())],
        producer_id=-1 if txn_producer is None else txn_producer,
        producer_epoch=-1 if txn_producer is None else 0,
        base_sequence=-1 if txn_producer is None else 0,
        is_transactional=txn_producer is not None,
    )


def _log(
    directory: Path,
    name: str = "events",
    *,
    clock: FakeClock | None = None,
    batches: int = 8,
    timestamps: Callable[[int], int] = lambda i: NOW_MS,
    keys: int = 2,
    high_watermark: bool = True,
    **config: Any,
) -> PartitionLog:
    """A compacted log of ``batches`` one-record batches over ``keys`` keys, two a segment."""
    directory.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {"cleanup_policy": COMPACT, "segment_bytes": SEGMENT_BYTES}
    settings.update(config)
    log = PartitionLog.open(
        directory / f"{name}-0", LogConfig(**settings), clock_ms=clock or FakeClock(NOW_MS)
    )
    for i in range(batches):
        log.append(_keyed(i % keys, timestamps(i)), leader_epoch=0)
    if high_watermark:
        log.update_high_watermark(log.log_end_offset)
    return log


def _segment_bytes(log: PartitionLog, base_offset: int) -> int:
    return (log.directory / f"{base_offset:020d}.log").stat().st_size


# -- cleanable_offsets --------------------------------------------------------------------


def test_the_dirty_section_starts_at_the_checkpoint_clamped_and_ends_at_the_active_segment(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path)
    try:
        bases = log.segment_base_offsets
        assert bases == (0, 2, 4, 6), "two batches a segment"
        active = bases[-1]
        offsets = cleanable_offsets(log, None, NOW_MS)
        assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, active)
        assert not offsets.forced
        assert cleanable_offsets(log, 3, NOW_MS).first_dirty_offset == 3
        # Past the log end (a truncation since): clamped, and never past the section's end.
        past = cleanable_offsets(log, 1_000, NOW_MS)
        assert past.first_dirty_offset == past.first_uncleanable_offset == active
        # Below the log start (DeleteRecords since): the log start.
        log.delete_records_before(3)
        below = cleanable_offsets(log, 1, NOW_MS)
        assert (below.first_dirty_offset, below.first_uncleanable_offset) == (3, active)
    finally:
        log.close()


def test_the_high_watermark_bounds_the_dirty_section_at_the_segment_holding_it(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, high_watermark=False)
    try:
        assert log.high_watermark == 0
        assert cleanable_offsets(log, None, NOW_MS).first_uncleanable_offset == 0
        log.update_high_watermark(4)
        offsets = cleanable_offsets(log, None, NOW_MS)
        assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, 4)
        # Inside segment 2: a pass takes whole segments only, so that one is not dirty.
        log.update_high_watermark(5)
        assert cleanable_offsets(log, None, NOW_MS).first_uncleanable_offset == 4
        # A checkpoint above the bound (a follower whose HW trails) is lowered to it.
        assert cleanable_offsets(log, 5, NOW_MS).first_dirty_offset == 4
    finally:
        log.close()


def test_an_open_transaction_bounds_the_dirty_section_at_its_first_offset(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, batches=3)
    try:
        txn_first = log.log_end_offset
        log.append(_keyed(7, txn_producer=42), leader_epoch=0)
        for i in range(4):
            log.append(_keyed(i), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == txn_first
        assert log.segment_base_offsets[-1] > txn_first
        # The bound rounds down to the base of the segment holding the transaction's start.
        holding = max(base for base in log.segment_base_offsets if base <= txn_first)
        assert holding < txn_first, "the transaction starts inside a segment"
        assert cleanable_offsets(log, None, NOW_MS).first_uncleanable_offset == holding
    finally:
        log.close()


def test_min_compaction_lag_keeps_segments_with_young_records_dirty(tmp_path: Path) -> None:
    # Segments 0 and 1 hold records ten hours old, segment 2 one a minute old.
    log = _log(
        tmp_path,
        timestamps=lambda i: NOW_MS - 10 * HOUR_MS if i < 4 else NOW_MS - 60_000,
        min_compaction_lag_ms=HOUR_MS,
    )
    try:
        assert log.segment_base_offsets == (0, 2, 4, 6)
        assert cleanable_offsets(log, None, NOW_MS).first_uncleanable_offset == 4
        # An hour later the young segment is old enough; the active segment bounds again.
        assert cleanable_offsets(log, None, NOW_MS + HOUR_MS).first_uncleanable_offset == 6
        # With the checkpoint past the young segment, it is not in the dirty section.
        log.update_config(log.config.with_overrides({"min.compaction.lag.ms": str(20 * HOUR_MS)}))
        assert cleanable_offsets(log, 2, NOW_MS).first_uncleanable_offset == 2
    finally:
        log.close()


def test_max_compaction_lag_forces_a_clean_of_an_old_dirty_section(tmp_path: Path) -> None:
    log = _log(tmp_path, timestamps=lambda i: NOW_MS - 2 * HOUR_MS)
    try:
        assert not cleanable_offsets(log, None, NOW_MS).forced  # Kafka's default: never
        log.update_config(log.config.with_overrides({"max.compaction.lag.ms": str(HOUR_MS)}))
        assert cleanable_offsets(log, None, NOW_MS).forced
        log.update_config(log.config.with_overrides({"max.compaction.lag.ms": str(3 * HOUR_MS)}))
        assert not cleanable_offsets(log, None, NOW_MS).forced
        # Nothing dirty outside the active segment: nothing to force.
        log.update_config(log.config.with_overrides({"max.compaction.lag.ms": str(HOUR_MS)}))
        assert not cleanable_offsets(log, 6, NOW_MS).forced
    finally:
        log.close()


def test_clean_sizes_count_whole_segments_on_each_side_of_the_first_dirty_offset(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path)
    try:
        size = {base: _segment_bytes(log, base) for base in log.segment_base_offsets}
        at_segment = clean_sizes(log, cleanable_offsets(log, 4, NOW_MS))
        assert at_segment == LogCleanSizes(clean_bytes=size[0] + size[2], dirty_bytes=size[4])
        assert at_segment.dirty_ratio == pytest.approx(size[4] / (size[0] + size[2] + size[4]))
        # A first dirty offset inside a segment counts that segment on both sides (Kafka's).
        inside = clean_sizes(log, cleanable_offsets(log, 3, NOW_MS))
        assert inside == LogCleanSizes(size[0] + size[2], size[2] + size[4])
        nothing_clean = clean_sizes(log, cleanable_offsets(log, None, NOW_MS))
        assert nothing_clean == LogCleanSizes(0, size[0] + size[2] + size[4])
        assert nothing_clean.dirty_ratio == 1.0
        assert LogCleanSizes(0, 0).dirty_ratio == 0.0
    finally:
        log.close()


# -- selection ----------------------------------------------------------------------------


def _manager(
    data_dir: Path,
    logs: list[PartitionLog],
    clock: FakeClock | None = None,
    config: LogCleanerManagerConfig | None = None,
    **kwargs: Any,
) -> LogCleanerManager:
    return LogCleanerManager(
        config or LogCleanerManagerConfig(),
        [data_dir],
        lambda: list(logs),
        clock or FakeClock(NOW_MS),
        **kwargs,
    )


def _checkpoint(data_dir: Path, offsets: dict[str, int]) -> None:
    OffsetCheckpointFile(data_dir / CLEANER_OFFSET_CHECKPOINT).write(
        {TopicPartition(topic, 0): offset for topic, offset in offsets.items()}
    )


def test_the_dirtiest_eligible_log_is_picked_and_held_until_done(tmp_path: Path) -> None:
    logs = [
        _log(tmp_path, "all-dirty"),  # ratio 1
        _log(tmp_path, "third-dirty", min_cleanable_dirty_ratio=0.2),  # ratio ~1/3
        _log(tmp_path, "below-ratio"),  # ratio ~1/3 < 0.5
        _log(tmp_path, "not-compacted", cleanup_policy=frozenset({"delete"})),
        _log(tmp_path, "all-clean"),  # ratio 0
    ]
    _checkpoint(tmp_path, {"third-dirty": 4, "below-ratio": 4, "all-clean": 6})
    manager = _manager(tmp_path, logs)
    try:
        first = manager.grab_filthiest(NOW_MS)
        assert first is not None and first.log is logs[0]
        assert first.sizes.dirty_ratio == 1.0
        second = manager.grab_filthiest(NOW_MS)  # the first is being cleaned
        assert second is not None and second.log is logs[1]
        assert second.offsets.first_dirty_offset == 4
        assert manager.grab_filthiest(NOW_MS) is None
        manager.done_cleaning(logs[0], None)
        again = manager.grab_filthiest(NOW_MS)
        assert again is not None and again.log is logs[0]
        manager.done_cleaning(logs[0], None)
        manager.mark_uncleanable(logs[0], "test: damaged")
        assert manager.grab_filthiest(NOW_MS) is None  # logs[1] still being cleaned
        manager.done_cleaning(logs[1], None)
        last = manager.grab_filthiest(NOW_MS)
        assert last is not None and last.log is logs[1]
        assert manager.uncleanable == {TopicPartition("all-dirty", 0): "test: damaged"}
    finally:
        for log in logs:
            log.close()


def test_a_log_with_no_whole_segment_below_its_bound_is_not_dirty_and_never_picked(
    tmp_path: Path,
) -> None:
    # An open transaction at offset 1 bounds 'stuck' inside its first segment: a pass could
    # take nothing there, so it must not rank (ratio 1 before the bound was rounded down).
    stuck = _log(tmp_path, "stuck", batches=1)
    stuck.append(_keyed(7, txn_producer=42), leader_epoch=0)
    for i in range(6):
        stuck.append(_keyed(i % 2), leader_epoch=0)
    stuck.update_high_watermark(stuck.log_end_offset)
    other = _log(tmp_path, "other", min_cleanable_dirty_ratio=0.2)
    _checkpoint(tmp_path, {"other": 4})
    manager = _manager(tmp_path, [stuck, other])
    try:
        assert stuck.last_stable_offset == 1 and stuck.segment_base_offsets[:2] == (0, 2)
        state = manager.state_of(stuck)
        assert state.offsets.first_uncleanable_offset == 0
        assert state.sizes.dirty_bytes == 0
        target = manager.grab_filthiest(NOW_MS)
        assert target is not None and target.log is other
    finally:
        stuck.close()
        other.close()


def test_a_log_forced_by_max_compaction_lag_goes_first_whatever_its_ratio(
    tmp_path: Path,
) -> None:
    logs = [
        _log(tmp_path, "dirty"),
        _log(
            tmp_path,
            "old",
            timestamps=lambda i: NOW_MS - 2 * HOUR_MS,
            max_compaction_lag_ms=HOUR_MS,
            min_cleanable_dirty_ratio=0.9,
        ),
    ]
    _checkpoint(tmp_path, {"old": 4})
    manager = _manager(tmp_path, logs)
    try:
        target = manager.grab_filthiest(NOW_MS)
        assert target is not None and target.log is logs[1]
        assert target.offsets.forced and target.sizes.dirty_ratio < 0.9
    finally:
        for log in logs:
            log.close()


def test_a_damaged_batch_header_marks_the_partition_uncleanable_and_it_keeps_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _log(tmp_path, timestamps=lambda i: NOW_MS - 2 * HOUR_MS, max_compaction_lag_ms=HOUR_MS)
    try:
        # The first batch's magic byte: reading the header of the first dirty segment fails.
        segment = log.directory / f"{0:020d}.log"
        data = bytearray(segment.read_bytes())
        data[16] = 7
        segment.write_bytes(data)
        manager = _manager(tmp_path, [log])
        with caplog.at_level(logging.ERROR):
            assert manager.grab_filthiest(NOW_MS) is None
        reason = manager.uncleanable[log.topic_partition]
        assert "batch header" in reason
        assert any(
            "events-0" in record.getMessage() and "uncleanable" in record.getMessage()
            for record in caplog.records
            if record.levelno == logging.ERROR
        )
        info = log.append(_keyed(1), leader_epoch=0)
        assert info.first_offset == 8
    finally:
        log.close()


def test_abort_waits_for_the_pass_over_that_log_and_blocks_new_ones(tmp_path: Path) -> None:
    log = _log(tmp_path)
    manager = _manager(tmp_path, [log])
    try:
        target = manager.grab_filthiest(NOW_MS)
        assert target is not None
        returned = threading.Event()
        aborter = threading.Thread(
            target=lambda: (manager.abort_and_wait(log.topic_partition), returned.set())
        )
        aborter.start()
        assert not returned.wait(0.2), "abort returned while the pass was still running"
        manager.done_cleaning(log, None)
        assert returned.wait(WAIT_S)
        aborter.join()
        assert manager.grab_filthiest(NOW_MS) is None
        manager.resume(log.topic_partition)
        assert manager.grab_filthiest(NOW_MS) is not None
    finally:
        log.close()


def _with_manager(
    tmp_path: Path, body: Callable[[LogManager], Awaitable[None]], **cleaner: Any
) -> None:
    """Run ``body`` with a log manager over ``tmp_path``, closed afterwards."""

    async def scenario() -> None:
        manager = await LogManager.open(_compacted_manager_config(tmp_path, **cleaner))
        try:
            await body(manager)
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_deleting_a_log_waits_for_its_pass_to_end(tmp_path: Path) -> None:
    tp = TopicPartition("doomed", 0)

    async def body(manager: LogManager) -> None:
        log = await _fill(manager, tp)
        target = manager.cleaner.grab_filthiest(NOW_MS)
        assert target is not None and target.log is log
        assert manager.cleaner.in_progress == {tp}
        deletion = asyncio.create_task(manager.delete_log(tp))
        deadline = time.monotonic() + WAIT_S
        while not manager.cleaner.aborting(tp):
            assert time.monotonic() < deadline, "the deletion never asked the pass to stop"
            await asyncio.sleep(0.01)
        # The deletion is waiting for the pass now: it must not go on while the pass runs.
        assert not deletion.done(), "the files went while a pass was still over them"
        assert log.directory.exists()
        manager.cleaner.done_cleaning(log, None)
        await asyncio.wait_for(deletion, WAIT_S)
        assert not log.directory.exists() and manager.get_log(tp) is None

    _with_manager(tmp_path, body, enable=False)


# -- the checkpoint -----------------------------------------------------------------------


def _result(end_offset: int) -> CleanResult:
    return CleanResult(
        end_offset=end_offset,
        bytes_read=1000,
        bytes_written=400,
        records_read=8,
        records_retained=2,
        segments_replaced=3,
        elapsed_s=0.25,
    )


def _compacted_manager_config(data_dir: Path, **cleaner: Any) -> LogManagerConfig:
    return LogManagerConfig(log_dirs=(data_dir,), cleaner=LogCleanerManagerConfig(**cleaner))


COMPACTED_TOPIC = LogConfig(cleanup_policy=COMPACT, segment_bytes=SEGMENT_BYTES)


async def _fill(manager: LogManager, tp: TopicPartition, batches: int = 8) -> PartitionLog:
    log = await manager.get_or_create_log(tp, COMPACTED_TOPIC)
    for i in range(batches):
        log.append(_keyed(i % 2), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_the_cleaner_checkpoint_survives_a_restart_and_loses_deleted_logs(
    tmp_path: Path,
) -> None:
    kept, deleted = TopicPartition("kept", 0), TopicPartition("gone", 0)
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT

    async def scenario() -> None:
        manager = await LogManager.open(_compacted_manager_config(tmp_path, enable=False))
        try:
            for tp, end in ((kept, 4), (deleted, 6)):
                log = await _fill(manager, tp)
                assert manager.cleaner.grab_filthiest(NOW_MS) is not None
                manager.cleaner.done_cleaning(log, _result(end))
            assert path.read_text() == "0\n2\ngone 0 6\nkept 0 4\n"  # Kafka's format
            await manager.delete_log(deleted)
            assert path.read_text() == "0\n1\nkept 0 4\n"
        finally:
            await manager.close()

        reopened = await LogManager.open(
            _compacted_manager_config(tmp_path, enable=False),
            topic_configs={"kept": COMPACTED_TOPIC},
        )
        try:
            log = reopened.get_log(kept)
            assert log is not None
            state = reopened.cleaner.state_of(log)
            assert state.offsets.first_dirty_offset == 4
            assert state.sizes.clean_bytes > 0 and state.sizes.dirty_bytes > 0
            assert state.uncleanable_reason is None and state.last_cleaned_ms is None
        finally:
            await reopened.close()

    asyncio.run(scenario())


def test_a_damaged_cleaner_checkpoint_is_ignored_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / CLEANER_OFFSET_CHECKPOINT).write_text("0\n5\nkept 0 4\n")
    with caplog.at_level(logging.ERROR):
        manager = _manager(tmp_path, [])
    assert manager.checkpointed_offsets() == {tmp_path: {}}
    assert "damaged cleaner checkpoint" in caplog.text


def _checkpoint_file(data_dir: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(data_dir / CLEANER_OFFSET_CHECKPOINT).read()


def test_a_truncation_below_the_checkpoint_lowers_it_so_a_deleted_key_stays_deleted(
    tmp_path: Path,
) -> None:
    """Needs clean_log. An unclean election: this replica truncates below its checkpoint and
    takes a value and a tombstone of key x there; once the tombstone expires, x is gone."""
    tp = TopicPartition("events", 0)
    clock = FakeClock(NOW_MS)

    async def scenario() -> None:
        manager = await LogManager.open(
            _compacted_manager_config(tmp_path, enable=False), clock_ms=clock
        )
        try:
            log = await _fill(manager, tp)
            assert tp in await manager.run_cleaner()
            assert _checkpoint_file(tmp_path)[tp] >= 4
            assert log.truncate_to(1)
            assert _checkpoint_file(tmp_path)[tp] <= log.log_end_offset
            x = log.log_end_offset
            log.append(build_batch([(clock.now_ms, b"x", b"alive", ())]), leader_epoch=1)
            log.append(build_batch([(clock.now_ms, b"x", None, ())]), leader_epoch=1)
            for i in range(12):
                log.append(_keyed(i % 3, clock.now_ms), leader_epoch=1)
            log.update_high_watermark(log.log_end_offset)
            # The cleaner ages tombstones by the node's clock on the segment files: this
            # test's clock stands for it.
            for segment in log.segments:
                segment.set_last_modified_ms(clock.now_ms)
            clock.advance(2 * DAY_MS)  # the tombstone is past delete.retention.ms
            assert tp in await manager.run_cleaner()
            # Its tombstone may stay (delete.retention.ms counts from its first pass); its
            # value must not.
            left = [(r.offset, r.value) for r in read_records(log) if r.key == b"x"]
            assert all(value is None for _, value in left), f"x, deleted at {x + 1}, reads back"
        finally:
            await manager.close()

    asyncio.run(scenario())


async def _cleaned_to_6_then_checkpoint_blocked(
    manager: LogManager, tp: TopicPartition, data_dir: Path
) -> tuple[PartitionLog, Path]:
    """A log of 8 records checkpointed at 6, then every write of ``data_dir``'s cleaner
    checkpoint made to fail (a directory where its temporary file goes); returns the log and
    the obstacle, to remove with rmdir."""
    log = await _fill(manager, tp)
    assert manager.cleaner.grab_filthiest(NOW_MS) is not None
    manager.cleaner.done_cleaning(log, _result(6))
    obstacle = data_dir / f"{CLEANER_OFFSET_CHECKPOINT}.tmp"
    obstacle.mkdir()
    return log, obstacle


def test_a_truncation_does_not_happen_before_the_lowered_checkpoint_is_on_disk(
    tmp_path: Path,
) -> None:
    tp = TopicPartition("events", 0)

    async def body(manager: LogManager) -> None:
        log, obstacle = await _cleaned_to_6_then_checkpoint_blocked(manager, tp, tmp_path)
        with pytest.raises(LogStorageError, match=CLEANER_OFFSET_CHECKPOINT):
            log.truncate_to(3)
        assert log.log_end_offset == 8, "truncated over a checkpoint still at 6 on disk"
        obstacle.rmdir()
        assert log.truncate_to(3)
        # Lowered to the base of the segment cut: at or below any end the cut can leave (a
        # straddling batch goes whole; the offset may sit in a gap the cleaner left).
        lowered = log.segments.active.base_offset
        assert log.log_end_offset == 3 and _checkpoint_file(tmp_path) == {tp: lowered} != {tp: 6}
        assert lowered <= 3
        # Emptied and restarted below the checkpoint (a follower behind the leader's start).
        log.truncate_fully_and_start_at(2)
        assert _checkpoint_file(tmp_path) == {tp: min(lowered, 2)}

    _with_manager(tmp_path, body, enable=False)


def test_a_log_is_forgotten_by_the_checkpoint_before_its_files_go(tmp_path: Path) -> None:
    tp = TopicPartition("doomed", 0)

    async def body(manager: LogManager) -> None:
        log, obstacle = await _cleaned_to_6_then_checkpoint_blocked(manager, tp, tmp_path)
        with pytest.raises(LogStorageError, match=CLEANER_OFFSET_CHECKPOINT):
            await manager.delete_log(tp)
        # A crash here leaves the files with their entry: consistent, never an entry alone.
        assert log.directory.exists() and _checkpoint_file(tmp_path) == {tp: 6}
        obstacle.rmdir()
        # The log is still the manager's: a retry deletes it.
        assert manager.get_log(tp) is log
        await manager.delete_log(tp)
        assert not log.directory.exists() and tp not in _checkpoint_file(tmp_path)

    _with_manager(tmp_path, body, enable=False)


def test_a_new_log_does_not_inherit_a_stale_checkpoint_entry(tmp_path: Path) -> None:
    # Left by a log whose directory went without its entry (e.g. before deletion dropped the
    # entry first): a log created under that name starts all dirty.
    _checkpoint(tmp_path, {"reborn": 6})
    tp = TopicPartition("reborn", 0)

    async def body(manager: LogManager) -> None:
        log = await _fill(manager, tp)
        assert manager.cleaner.state_of(log).offsets.first_dirty_offset == 0
        assert tp not in _checkpoint_file(tmp_path)

    _with_manager(tmp_path, body, enable=False)


def test_a_checkpoint_past_its_logs_end_is_lowered_to_it_at_start(tmp_path: Path) -> None:
    # E.g. the log lost an unflushed tail in a crash, or restarted later while opening.
    log = _log(tmp_path)
    _checkpoint(tmp_path, {"events": 100})
    try:
        manager = _manager(tmp_path, [log])
        assert manager.checkpointed_offsets() == {tmp_path: {log.topic_partition: 8}}
        assert _checkpoint_file(tmp_path) == {log.topic_partition: 8}
    finally:
        log.close()


# -- settings -----------------------------------------------------------------------------


def _node(**settings: str) -> Any:
    raw = {"node.id": "1", "log.dirs": "/data/a", **settings}
    return CONFIG_DEF.parse({name: RawSetting(value, "test") for name, value in raw.items()})


def test_the_cleaner_settings_have_kafkas_names_and_defaults() -> None:
    assert node_log_manager_config(_node()).cleaner == LogCleanerManagerConfig()
    defaults = LogCleanerManagerConfig()
    assert (defaults.enable, defaults.threads, defaults.backoff_ms) == (True, 1, 15000)
    assert (defaults.dedupe_buffer_size, defaults.io_buffer_size) == (134217728, 524288)
    assert defaults.io_buffer_load_factor == 0.9
    config = node_log_manager_config(
        _node(
            **{
                "log.cleaner.enable": "false",
                "log.cleaner.threads": "4",
                "log.cleaner.dedupe.buffer.size": "4000000",
                "log.cleaner.io.buffer.size": "65536",
                "log.cleaner.io.buffer.load.factor": "0.75",
                "log.cleaner.io.max.bytes.per.second": "1048576",
                "log.cleaner.backoff.ms": "500",
            }
        )
    ).cleaner
    assert config == LogCleanerManagerConfig(
        enable=False,
        threads=4,
        dedupe_buffer_size=4_000_000,
        io_buffer_size=65536,
        io_buffer_load_factor=0.75,
        io_max_bytes_per_second=1048576.0,
        backoff_ms=500,
    )
    per_thread = config.cleaner_config()
    assert (per_thread.dedupe_buffer_bytes, per_thread.load_factor) == (1_000_000, 0.75)
    assert per_thread.io_buffer_bytes == 65536


def test_the_topic_default_synonyms_reach_every_logs_config() -> None:
    config = node_log_config(
        _node(
            **{
                "log.cleaner.delete.retention.ms": "1000",
                "log.cleaner.min.cleanable.ratio": "0.25",
                "log.cleaner.min.compaction.lag.ms": "2000",
                "log.cleaner.max.compaction.lag.ms": "3000",
            }
        )
    )
    assert (config.delete_retention_ms, config.min_cleanable_dirty_ratio) == (1000, 0.25)
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (2000, 3000)
    assert node_log_config(_node()) == LogConfig(retention_ms=7 * 24 * HOUR_MS)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"log.cleaner.threads": "0"}, r"log\.cleaner\.threads.*less than the minimum 1"),
        ({"log.cleaner.backoff.ms": "0"}, r"log\.cleaner\.backoff\.ms.*less than the minimum"),
        ({"log.cleaner.io.buffer.load.factor": "1.5"}, r"load\.factor.*greater than the maximum"),
        ({"log.cleaner.min.cleanable.ratio": "2"}, r"min\.cleanable\.ratio.*greater than"),
        ({"log.cleaner.enable": "maybe"}, r"log\.cleaner\.enable"),
        (
            {"log.cleaner.threads": "8", "log.cleaner.dedupe.buffer.size": "100"},
            r"leaves each of the 8 log\.cleaner\.threads less than one map entry",
        ),
    ],
)
def test_bad_cleaner_settings_are_refused_naming_the_setting(
    settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _node(**settings)


def test_a_cleaner_config_built_in_code_is_checked_too() -> None:
    with pytest.raises(ValueError, match=r"log\.cleaner\.threads must be >= 1"):
        LogCleanerManagerConfig(threads=0)
    with pytest.raises(ValueError, match=r"load\.factor must be in \(0, 1\]"):
        LogCleanerManagerConfig(io_buffer_load_factor=0)


# -- metrics and threads ------------------------------------------------------------------


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_metrics_show_dirtiness_uncleanable_partitions_bytes_and_thread_liveness(
    tmp_path: Path,
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    log = _log(tmp_path)
    clean = _log(tmp_path, "clean")
    _checkpoint(tmp_path, {"clean": 6})
    manager = _manager(
        tmp_path,
        [clean, log],
        config=LogCleanerManagerConfig(backoff_ms=60_000),
        instruments=provider.get_meter("test"),
    )
    try:
        assert manager.grab_filthiest(NOW_MS) is not None
        manager.done_cleaning(log, _result(6))
        manager.mark_uncleanable(clean, "test: damaged")
        points = _points(reader)
        assert [p.value for p in points["brook.log_cleaner.max_dirty_percent"]] == [100]
        assert [p.value for p in points["brook.log_cleaner.uncleanable_partitions"]] == [1]
        assert [p.value for p in points["brook.log_cleaner.bytes_read"]] == [1000]
        assert [p.value for p in points["brook.log_cleaner.bytes_written"]] == [400]
        assert [p.value for p in points["brook.log_cleaner.last_clean_duration"]] == [0.25]
        assert [p.value for p in points["brook.log_cleaner.recopy_percent"]] == [40]

        # The thread finds nothing (log is clean now, the other uncleanable) and backs off.
        manager.start()
        deadline = time.monotonic() + WAIT_S
        while not _points(reader).get("brook.log_cleaner.time_since_last_run"):
            assert time.monotonic() < deadline, "the cleaner thread never ran"
            time.sleep(0.01)
        [liveness] = _points(reader)["brook.log_cleaner.time_since_last_run"]
        assert dict(liveness.attributes) == {"thread": "0"}
        assert _points(reader)["brook.log_cleaner.max_dirty_percent"][0].value == 0
        started = time.monotonic()
        manager.close()
        assert time.monotonic() - started < 5, "close waited for the 60 s backoff"
    finally:
        manager.close()
        log.close()
        clean.close()
        provider.shutdown()


def test_disabled_cleaner_starts_no_threads(tmp_path: Path) -> None:
    manager = _manager(tmp_path, [], config=LogCleanerManagerConfig(enable=False))
    before = {thread.name for thread in threading.enumerate()}
    manager.start()
    assert not {t.name for t in threading.enumerate()} - before
    manager.close()


# -- with the cleaner (needs clean_log) ---------------------------------------------------


def _last_values(log: PartitionLog) -> dict[bytes | None, bytes | None]:
    return {record.key: record.value for record in read_records(log)}


def test_run_cleaner_compacts_a_log_and_checkpoints_where_the_pass_ended(
    tmp_path: Path,
) -> None:
    """Needs clean_log."""
    tp = TopicPartition("compacted", 0)

    async def body(manager: LogManager) -> None:
        log = await _fill(manager, tp, batches=20)
        expected = _last_values(log)
        before = log.size_bytes
        cleaned = await manager.run_cleaner()
        assert set(cleaned) == {tp}
        end = cleaned[tp].end_offset
        assert end == log.segment_base_offsets[-1]
        assert log.size_bytes < before
        assert _last_values(log) == expected
        state = manager.cleaner.state_of(log)
        assert state.offsets.first_dirty_offset == end
        assert state.sizes.dirty_bytes == 0 and state.last_cleaned_ms is not None
        checkpoint = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text()
        assert checkpoint == f"0\n1\ncompacted 0 {end}\n"
        assert await manager.run_cleaner() == {}  # nothing dirty any more

    _with_manager(tmp_path, body, enable=False)


def test_cleaner_threads_compact_a_dirty_log_on_their_own(tmp_path: Path) -> None:
    """Needs clean_log."""

    async def body(manager: LogManager) -> None:
        log = await _fill(manager, TopicPartition("compacted", 0), batches=20)
        before = log.size_bytes
        manager.start()
        deadline = time.monotonic() + WAIT_S
        while manager.cleaner.state_of(log).last_cleaned_ms is None:
            assert time.monotonic() < deadline, "the cleaner never cleaned the log"
            await asyncio.sleep(0.02)
        assert log.size_bytes < before

    _with_manager(tmp_path, body, backoff_ms=50)


def _dirty_again(log: PartitionLog, batches: int = 40) -> None:
    for i in range(batches):
        log.append(_keyed(i % 2), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)


def _wait_for_checkpoint_above(manager: LogCleanerManager, log: PartitionLog, offset: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while (
        manager.checkpointed_offsets()[log.directory.parent].get(log.topic_partition, 0) <= offset
    ):
        assert time.monotonic() < deadline, f"{log.directory.name} was never cleaned again"
        time.sleep(0.02)


def _stuck_and_other(tmp_path: Path) -> tuple[PartitionLog, PartitionLog]:
    """'stuck': an open transaction at offset 1, inside its first segment; 'other': dirty."""
    stuck = _log(tmp_path, "stuck", batches=1)
    stuck.append(_keyed(7, txn_producer=42), leader_epoch=0)
    _dirty_again(stuck, 6)
    return stuck, _log(tmp_path, "other", batches=40)


def test_a_log_bounded_inside_a_segment_does_not_starve_the_others(tmp_path: Path) -> None:
    """Needs clean_log."""
    stuck, other = _stuck_and_other(tmp_path)
    manager = _manager(tmp_path, [stuck, other], config=LogCleanerManagerConfig(backoff_ms=20))
    try:
        assert manager.run_round()
        first = manager.checkpointed_offsets()[tmp_path][other.topic_partition]
        _dirty_again(other)
        manager.start()
        _wait_for_checkpoint_above(manager, other, first)
    finally:
        manager.close()
        stuck.close()
        other.close()


def test_a_corrupt_segment_marks_the_partition_uncleanable_and_the_node_keeps_serving_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Needs clean_log."""
    tp = TopicPartition("compacted", 0)

    async def body(manager: LogManager) -> None:
        log = await _fill(manager, tp, batches=20)
        segment = log.directory / f"{2:020d}.log"
        # A byte of the segment's last record value: its batch's CRC no longer matches.
        data = bytearray(segment.read_bytes())
        data[-3] ^= 0xFF
        segment.write_bytes(data)
        with caplog.at_level(logging.ERROR):
            assert await manager.run_cleaner() == {}
        reason = manager.cleaner.uncleanable[tp]
        assert segment.name in reason
        assert any(
            "uncleanable" in r.getMessage() and str(tp) in r.getMessage() for r in caplog.records
        )
        assert manager.cleaner.state_of(log).uncleanable_reason == reason
        info = log.append(_keyed(1), leader_epoch=0)
        assert info.first_offset == 20
        assert await manager.run_cleaner() == {}  # skipped until restart

    _with_manager(tmp_path, body, enable=False)


def test_closing_or_deleting_aborts_a_throttled_pass_promptly(tmp_path: Path) -> None:
    """Needs clean_log."""
    closing, deleted = TopicPartition("closing", 0), TopicPartition("deleted", 0)

    async def running_pass(manager: LogManager, tp: TopicPartition) -> None:
        deadline = time.monotonic() + WAIT_S
        while tp not in manager.cleaner.in_progress:
            assert time.monotonic() < deadline, "no pass started"
            await asyncio.sleep(0.01)

    async def body(manager: LogManager) -> None:
        doomed = await _fill(manager, deleted, batches=40)
        manager.start()
        await running_pass(manager, deleted)
        started = time.monotonic()
        await manager.delete_log(deleted)
        assert time.monotonic() - started < ABORT_PROMPT_S
        assert not doomed.directory.exists()

        log = await _fill(manager, closing, batches=40)
        expected = _last_values(log)
        await running_pass(manager, closing)
        started = time.monotonic()
        await manager.close()
        assert time.monotonic() - started < ABORT_PROMPT_S
        reopened = await LogManager.open(
            _compacted_manager_config(tmp_path, enable=False),
            topic_configs={"closing": COMPACTED_TOPIC},
        )
        try:
            again = reopened.get_log(closing)
            assert again is not None and _last_values(again) == expected
        finally:
            await reopened.close()

    # 40 batches of 80 bytes at 200 bytes/s: a pass would take tens of seconds.
    _with_manager(tmp_path, body, backoff_ms=50, io_max_bytes_per_second=200.0)
