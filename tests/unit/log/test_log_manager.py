"""The log manager: start-up loading and recovery, ownership, background work, clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from brook_storage_node.log import (
    LogConfig,
    LogManager,
    LogManagerConfig,
    LogStorageError,
    TopicPartition,
)
from brook_storage_node.log.log_manager import CLEAN_SHUTDOWN_FILE
from log_test_support import batch, read_batches

WAIT_S = 10.0
DAY_MS = 24 * 60 * 60 * 1000


def _config(*dirs: Path, **settings: int) -> LogManagerConfig:
    return LogManagerConfig(log_dirs=dirs, **settings)


async def _eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _fill(
    manager: LogManager, partitions: list[TopicPartition], batches: int = 5
) -> dict[TopicPartition, list[bytes]]:
    contents = {}
    for tp in partitions:
        log = await manager.get_or_create_log(tp)
        for _ in range(batches):
            log.append(batch(2), leader_epoch=1)
        log.update_high_watermark(log.log_end_offset)
        contents[tp] = read_batches(log)
    return contents


def test_logs_spread_over_data_dirs_and_reopen_cleanly_after_close(tmp_path: Path) -> None:
    dirs = (tmp_path / "a", tmp_path / "b")
    partitions = [TopicPartition("orders", p) for p in range(4)]

    async def scenario() -> None:
        manager = await LogManager.open(_config(*dirs))
        contents = await _fill(manager, partitions)
        await manager.close()
        for directory in dirs:
            assert (directory / CLEAN_SHUTDOWN_FILE).exists()
            assert len([p for p in directory.iterdir() if p.is_dir()]) == 2
            assert (directory / "replication-offset-checkpoint").read_text().count("orders") == 2

        reopened = await LogManager.open(_config(*dirs))
        try:
            for directory in dirs:
                assert not (directory / CLEAN_SHUTDOWN_FILE).exists()
            assert set(reopened.logs) == set(partitions)
            for tp, expected in contents.items():
                log = reopened.get_log(tp)
                assert log is not None
                assert read_batches(log) == expected
                assert log.high_watermark == log.log_end_offset == 10
                assert log.recovery_point == 10
        finally:
            await reopened.close()

    asyncio.run(scenario())


def test_a_crashed_node_recovers_its_logs_at_start_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    partitions = [TopicPartition("t", p) for p in range(3)]

    async def scenario() -> None:
        manager = await LogManager.open(_config(live))
        try:
            contents = await _fill(manager, partitions)
            # The files of a running node are what a crash (kill -9) leaves behind.
            shutil.copytree(live, crashed)
        finally:
            await manager.close()
        caplog.set_level(logging.INFO)
        recovered = await LogManager.open(_config(crashed))
        try:
            assert "no clean shutdown marker" in caplog.text
            assert caplog.text.count("recovering") >= len(partitions)
            for tp, expected in contents.items():
                log = recovered.get_log(tp)
                assert log is not None and read_batches(log) == expected
        finally:
            await recovered.close()

    asyncio.run(scenario())


def test_start_up_opens_partitions_in_parallel_within_the_thread_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "data"
    partitions = [TopicPartition("t", p) for p in range(12)]

    async def scenario() -> None:
        manager = await LogManager.open(_config(directory))
        await _fill(manager, partitions, batches=1)
        await manager.close()
        caplog.set_level(logging.INFO, logger="brook_storage_node.log.partition_log")
        reopened = await LogManager.open(_config(directory, num_recovery_threads_per_data_dir=2))
        await reopened.close()

    asyncio.run(scenario())
    openers = {r.threadName for r in caplog.records if "opened with" in r.getMessage()}
    assert len(openers) <= 2
    assert all(str(name).startswith("log-recovery-data") for name in openers)


def test_a_data_dir_in_use_by_another_manager_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = await LogManager.open(_config(tmp_path / "data"))
        try:
            with pytest.raises(LogStorageError, match="in use by another process"):
                await LogManager.open(_config(tmp_path / "other", tmp_path / "data"))
        finally:
            await first.close()
        # The refused manager released what it had locked.
        again = await LogManager.open(_config(tmp_path / "other"))
        await again.close()

    asyncio.run(scenario())


def test_background_retention_deletes_expired_segments(tmp_path: Path) -> None:
    tp = TopicPartition("clicks", 0)
    old = time.time_ns() // 1_000_000 - DAY_MS

    async def scenario() -> None:
        manager = await LogManager.open(
            _config(
                tmp_path / "data",
                log_retention_check_interval_ms=20,
                log_flush_scheduler_interval_ms=20,
            ),
            topic_configs={
                "clicks": LogConfig(
                    segment_bytes=2 * len(batch()), retention_ms=60_000, file_delete_delay_ms=0
                )
            },
        )
        try:
            log = await manager.get_or_create_log(tp)
            for _ in range(7):
                log.append(batch(timestamp=old), leader_epoch=0)
            log.update_high_watermark(log.log_end_offset)
            assert log.segment_count == 4
            manager.start()
            await _eventually(lambda: log.segment_count == 1)
            assert log.log_start_offset == 6
            # The flush pass then removes the deleted files.
            await _eventually(lambda: not list((tmp_path / "data" / "clicks-0").glob("*.deleted")))
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_a_roll_flushes_the_sealed_segment_in_the_background(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)

    async def scenario() -> None:
        manager = await LogManager.open(
            _config(tmp_path / "data"), default_log_config=LogConfig(segment_bytes=3 * len(batch()))
        )
        try:
            log = await manager.get_or_create_log(tp)
            for _ in range(4):
                log.append(batch(), leader_epoch=0)
            assert log.segment_base_offsets == (0, 3)
            await _eventually(lambda: log.recovery_point == 3)
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_deleted_logs_are_gone_and_half_deleted_dirs_are_finished_at_start_up(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "data"

    async def scenario() -> None:
        manager = await LogManager.open(_config(directory))
        await _fill(manager, [TopicPartition("keep", 0), TopicPartition("drop", 0)], batches=1)
        await manager.delete_log(TopicPartition("drop", 0))
        assert manager.get_log(TopicPartition("drop", 0)) is None
        assert not (directory / "drop-0").exists()
        await manager.close()
        (directory / "gone-3.0123abcd-delete").mkdir()
        (directory / "gone-3.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"x")
        (directory / "not a partition").mkdir()
        reopened = await LogManager.open(_config(directory))
        try:
            assert set(reopened.logs) == {TopicPartition("keep", 0)}
            assert not (directory / "gone-3.0123abcd-delete").exists()
        finally:
            await reopened.close()

    asyncio.run(scenario())


def test_topic_config_changes_reach_existing_logs(tmp_path: Path) -> None:
    async def scenario() -> None:
        manager = await LogManager.open(_config(tmp_path / "data"))
        try:
            log = await manager.get_or_create_log(TopicPartition("t", 0))
            changed = LogConfig().with_overrides({"retention.ms": "1000"})
            manager.update_topic_config("t", changed)
            assert log.config.retention_ms == 1000
            other = await manager.get_or_create_log(TopicPartition("t", 1))
            assert other.config == changed
        finally:
            await manager.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "tp", [TopicPartition("../escape", 0), TopicPartition("a/b", 0), TopicPartition("t", -1)]
)
def test_a_partition_that_cannot_be_a_directory_name_is_refused(
    tmp_path: Path, tp: TopicPartition
) -> None:
    async def scenario() -> None:
        manager = await LogManager.open(_config(tmp_path / "data"))
        try:
            with pytest.raises(ValueError):
                await manager.get_or_create_log(tp)
        finally:
            await manager.close()
        assert sorted(p.name for p in (tmp_path / "data").iterdir() if p.is_dir()) == []

    asyncio.run(scenario())
