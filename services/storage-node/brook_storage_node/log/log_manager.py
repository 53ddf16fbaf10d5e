"""All partition logs of a storage node: opened at start-up, owned, maintained, closed.

Kafka's LogManager. At start-up every data directory (log.dirs) is locked against a second
process, its checkpoints are read, and all partition directories in it are opened in parallel
on num.recovery.threads.per.data.dir threads (recovery is disk-bound per directory). While
running, asyncio tasks owned by the manager apply retention, honour flush.ms, remove deleted
segment files and write the per-directory checkpoints; the disk work runs on a bounded thread
pool (background.threads), never on the event loop. The log cleaner (log_cleaner_manager.py)
compacts cleanup.policy=compact logs on threads of its own; deleting a log aborts its pass
first. ``close`` stops the tasks and the cleaner, flushes and closes every log, writes the
checkpoints and the clean-shutdown marker that lets the next start skip recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from opentelemetry.metrics import CallbackOptions, Observation

from brook.telemetry import meter
from brook_storage_node.log.checkpoints import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointFileError,
    OffsetCheckpointFile,
)
from brook_storage_node.log.cleaner import CleanResult
from brook_storage_node.log.errors import LogError, LogStorageError
from brook_storage_node.log.files import fsync_dir
from brook_storage_node.log.log_cleaner_manager import LogCleanerManager, LogCleanerManagerConfig
from brook_storage_node.log.log_config import LogConfig
from brook_storage_node.log.partition_log import PartitionLog, wall_clock_ms
from brook_storage_node.log.topic_partition import (
    DELETE_DIR_SUFFIX,
    TopicPartition,
    check_topic_name,
)

CLEAN_SHUTDOWN_FILE: Final = ".brook_cleanshutdown"
LOCK_FILE: Final = ".lock"

_log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Node-level settings of the log layer, by their Kafka names."""

    # log.dirs
    log_dirs: tuple[Path, ...]
    # num.recovery.threads.per.data.dir
    num_recovery_threads_per_data_dir: int = 1
    # background.threads: the pool that runs retention, flushes and checkpoints.
    background_threads: int = 10
    # log.retention.check.interval.ms
    log_retention_check_interval_ms: int = 300_000
    # log.flush.scheduler.interval.ms: how often flush.ms and deleted files are looked at.
    # Kafka 0.8's default; later Kafkas default to Long.MAX, which silently ignores flush.ms.
    log_flush_scheduler_interval_ms: int = 3_000
    # log.flush.offset.checkpoint.interval.ms
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    # log.flush.start.offset.checkpoint.interval.ms
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    # replica.high.watermark.checkpoint.interval.ms
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    # producer.id.expiration.ms: idempotent producers idle this long are forgotten.
    producer_id_expiration_ms: int = 86_400_000
    # producer.id.expiration.check.interval.ms
    producer_id_expiration_check_interval_ms: int = 600_000
    # log.cleaner.*: the compaction of cleanup.policy=compact logs.
    cleaner: LogCleanerManagerConfig = field(default_factory=LogCleanerManagerConfig)

    def __post_init__(self) -> None:
        if not self.log_dirs:
            raise ValueError("log.dirs must name at least one directory")
        resolved = [path.resolve() for path in self.log_dirs]
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"log.dirs names a directory twice: {self.log_dirs}")
        if self.num_recovery_threads_per_data_dir < 1 or self.background_threads < 1:
            raise ValueError(
                "num.recovery.threads.per.data.dir and background.threads must be >= 1"
            )
        intervals = (
            self.log_retention_check_interval_ms,
            self.log_flush_scheduler_interval_ms,
            self.log_flush_offset_checkpoint_interval_ms,
            self.log_flush_start_offset_checkpoint_interval_ms,
            self.replica_high_watermark_checkpoint_interval_ms,
            self.producer_id_expiration_ms,
            self.producer_id_expiration_check_interval_ms,
        )
        if min(intervals) < 1:
            raise ValueError(
                f"every *.interval.ms and producer.id.expiration.ms must be >= 1, got {intervals}"
            )


@dataclass(slots=True)
class _DataDir:
    path: Path
    lock_fd: int
    had_clean_shutdown: bool
    logs: dict[TopicPartition, PartitionLog] = field(default_factory=dict)

    def write_checkpoint(self, name: str) -> None:
        value_of = _CHECKPOINTED_OFFSETS[name]
        OffsetCheckpointFile(self.path / name).write(
            {tp: value_of(log) for tp, log in self.logs.items()}
        )

    def read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(self.path / name).read()
        except CheckpointFileError as exc:
            # Every fallback is safe: recovery point 0 recovers everything, log start 0 keeps
            # the data still on disk, a high watermark at the log start is re-advanced by
            # replication.
            _log.error("ignoring a damaged checkpoint: %s", exc)
            return {}


# What each per-directory checkpoint file records of a log.
_CHECKPOINTED_OFFSETS: Final[dict[str, Callable[[PartitionLog], int]]] = {
    RECOVERY_POINT_CHECKPOINT: lambda log: log.recovery_point,
    LOG_START_OFFSET_CHECKPOINT: lambda log: log.log_start_offset,
    HIGH_WATERMARK_CHECKPOINT: lambda log: log.high_watermark,
}


class LogManager:
    """Create with ``await LogManager.open(...)``; ``start()`` the background tasks; ``close()``."""

    def __init__(
        self,
        config: LogManagerConfig,
        default_log_config: LogConfig,
        topic_configs: Mapping[str, LogConfig],
        clock_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._default_log_config = default_log_config
        self._topic_configs = dict(topic_configs)
        self._clock_ms = clock_ms
        self._dirs: list[_DataDir] = []
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._background = ThreadPoolExecutor(
            config.background_threads, thread_name_prefix="log-background"
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._create_lock = asyncio.Lock()
        self._closing = False
        self._cleaner: LogCleanerManager | None = None

    @classmethod
    async def open(
        cls,
        config: LogManagerConfig,
        *,
        default_log_config: LogConfig | None = None,
        topic_configs: Mapping[str, LogConfig] | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> LogManager:
        """Lock the data directories and open every partition log in them.

        Raises LogStorageError (and opens nothing) if a directory is locked by another
        process, a partition appears in two directories, or a log cannot be opened.
        """
        manager = cls(config, default_log_config or LogConfig(), topic_configs or {}, clock_ms)
        try:
            # Every directory finishes (or fails) before an abort, so none is left locked.
            results = await asyncio.gather(
                *(manager._open_dir(path) for path in config.log_dirs), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            manager._cleaner = await asyncio.to_thread(
                LogCleanerManager,
                config.cleaner,
                [data_dir.path for data_dir in manager._dirs],
                manager._open_logs,
                clock_ms,
            )
        except BaseException:
            await manager._abort_open()
            raise
        _log.info(
            "log manager opened %d logs in %d directories", len(manager._logs), len(manager._dirs)
        )
        return manager

    async def _open_dir(self, path: Path) -> None:
        data_dir = await asyncio.to_thread(self._lock_dir, path)
        self._dirs.append(data_dir)
        recovery_points, log_starts, high_watermarks = await asyncio.to_thread(
            lambda: [data_dir.read_checkpoint(name) for name in _CHECKPOINTED_OFFSETS]
        )
        partitions = await asyncio.to_thread(self._partition_dirs, path)
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(
            self._config.num_recovery_threads_per_data_dir,
            thread_name_prefix=f"log-recovery-{path.name}",
        ) as pool:
            opened = await asyncio.gather(
                *(
                    loop.run_in_executor(
                        pool,
                        functools.partial(
                            PartitionLog.open,
                            path / tp.dir_name,
                            self._config_for(tp.topic),
                            recovery_point=recovery_points.get(tp, 0),
                            log_start_offset=log_starts.get(tp, 0),
                            high_watermark=high_watermarks.get(tp, 0),
                            had_clean_shutdown=data_dir.had_clean_shutdown,
                            clock_ms=self._clock_ms,
                            on_roll=self._on_roll,
                            on_truncate=self._on_truncate,
                        ),
                    )
                    for tp in partitions
                ),
                return_exceptions=True,
            )
        failure: BaseException | None = None
        for tp, result in zip(partitions, opened, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
                continue
            self._adopt(data_dir, tp, result)
        if failure is not None:
            raise failure

    def _adopt(self, data_dir: _DataDir, tp: TopicPartition, log: PartitionLog) -> None:
        other = self._logs.get(tp)
        if other is not None:
            log.close()
            raise LogStorageError(
                f"partition {tp} is in two data directories: {other.directory} and {log.directory}"
            )
        data_dir.logs[tp] = log
        self._logs[tp] = log

    @staticmethod
    def _lock_dir(path: Path) -> _DataDir:
        try:
            path.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LogStorageError(f"cannot use data directory {path}: {exc}") from exc
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise LogStorageError(f"data directory {path} is in use by another process") from None
        marker = path / CLEAN_SHUTDOWN_FILE
        had_clean_shutdown = marker.exists()
        if had_clean_shutdown:
            # Gone before any log changes: a crash from here on must not look clean.
            marker.unlink()
            fsync_dir(path)
        else:
            _log.warning("%s: no clean shutdown marker; recovering unflushed segments", path)
        return _DataDir(path, lock_fd, had_clean_shutdown)

    @staticmethod
    def _partition_dirs(path: Path) -> list[TopicPartition]:
        partitions = []
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                _log.info("%s: finishing the deletion of %s", path, entry.name)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            try:
                partitions.append(TopicPartition.from_dir_name(entry.name))
            except ValueError as exc:
                _log.warning("%s: ignoring directory %s: %s", path, entry.name, exc)
        return partitions

    async def _abort_open(self) -> None:
        await asyncio.to_thread(self._close_all_logs, write_marker=False)
        self._background.shutdown(wait=True)

    # -- logs -----------------------------------------------------------------------------

    @property
    def logs(self) -> Mapping[TopicPartition, PartitionLog]:
        return dict(self._logs)

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self._logs.get(tp)

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self._default_log_config)

    async def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig | None = None
    ) -> PartitionLog:
        """The log of ``tp``, created (in the data directory with the fewest logs) if needed.

        ValueError for an illegal topic name or a negative partition.
        """
        check_topic_name(tp.topic)
        if tp.partition < 0:
            raise ValueError(f"partition must be >= 0, got {tp.partition}")
        async with self._create_lock:
            self._check_open()
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            if config is not None:
                self._topic_configs[tp.topic] = config
            data_dir = min(self._dirs, key=lambda d: len(d.logs))
            # Any checkpoint entry of a partition with no log is stale: a new log starts dirty.
            await self._run(functools.partial(self.cleaner.forget, tp, data_dir.path))
            log = await self._run(
                functools.partial(
                    PartitionLog.open,
                    data_dir.path / tp.dir_name,
                    self._config_for(tp.topic),
                    clock_ms=self._clock_ms,
                    on_roll=self._on_roll,
                    on_truncate=self._on_truncate,
                )
            )
            self._adopt(data_dir, tp, log)
            _log.info("created the log of %s in %s", tp, data_dir.path)
            return log

    async def delete_log(self, tp: TopicPartition) -> None:
        """Close the log of ``tp`` and delete its directory (renamed first, so a crash midway
        is finished at the next start). Its cleaner checkpoint entry goes first, so a crash
        midway leaves none for a log later created under the same name."""
        async with self._create_lock:
            log = self._logs.get(tp)
            if log is None:
                return
            data_dir = next(d for d in self._dirs if tp in d.logs)
            cleaner = self.cleaner
            # A pass over the log stops, and its checkpoint entry goes, before its files go;
            # if the entry cannot be dropped the log stays, owned, for a retry.
            await self._run(functools.partial(cleaner.abort_and_wait, tp))
            try:
                await self._run(functools.partial(cleaner.forget, tp, data_dir.path))
            except BaseException:
                cleaner.resume(tp)
                raise
            del self._logs[tp]
            del data_dir.logs[tp]
            await self._run(functools.partial(self._delete_log_files, log))

    @staticmethod
    def _delete_log_files(log: PartitionLog) -> None:
        log.purge_deleted_segments(everything=True)
        with contextlib.suppress(LogError):
            log.close()
        doomed = log.directory.with_name(log.topic_partition.deleted_dir_name())
        try:
            os.replace(log.directory, doomed)
            fsync_dir(doomed.parent)
            shutil.rmtree(doomed)
        except OSError as exc:
            raise LogStorageError(f"cannot delete {log.directory}: {exc}") from exc

    @property
    def cleaner(self) -> LogCleanerManager:
        """The log cleaner (its state per log, and what it cleaned)."""
        assert self._cleaner is not None, "the log manager is not open"
        return self._cleaner

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply changed settings to every log of ``topic`` and to logs created later."""
        self._topic_configs[topic] = config
        for tp, log in self._logs.items():
            if tp.topic == topic:
                log.update_config(config)

    def _observe_sizes(self, options: CallbackOptions) -> list[Observation]:
        if self._closing:
            return []
        return [
            Observation(log.size_bytes, {"topic": tp.topic, "partition": tp.partition})
            for tp, log in self.logs.items()
        ]

    # -- background work ------------------------------------------------------------------

    def start(self) -> None:
        """Start the periodic tasks (retention, flush, checkpoints) on the running loop, and
        the log cleaner's threads; from now on the ``brook.log.size`` gauge reports every log's
        size (Kafka's kafka.log:type=Log,name=Size)."""
        self._check_open()
        assert not self._tasks, "already started"
        config = self._config
        meter(__name__).create_observable_gauge(
            "brook.log.size",
            callbacks=[self._observe_sizes],
            unit="By",
            description="Bytes of each partition log's segments on this node",
        )
        self.cleaner.start()
        for name, interval_ms, work in (
            ("retention", config.log_retention_check_interval_ms, self._retention_pass),
            ("flush", config.log_flush_scheduler_interval_ms, self._flush_pass),
            (
                "producer-expiration",
                config.producer_id_expiration_check_interval_ms,
                self._producer_expiration_pass,
            ),
            (
                RECOVERY_POINT_CHECKPOINT,
                config.log_flush_offset_checkpoint_interval_ms,
                functools.partial(self._write_checkpoint, RECOVERY_POINT_CHECKPOINT),
            ),
            (
                LOG_START_OFFSET_CHECKPOINT,
                config.log_flush_start_offset_checkpoint_interval_ms,
                functools.partial(self._write_checkpoint, LOG_START_OFFSET_CHECKPOINT),
            ),
            (
                HIGH_WATERMARK_CHECKPOINT,
                config.replica_high_watermark_checkpoint_interval_ms,
                functools.partial(self._write_checkpoint, HIGH_WATERMARK_CHECKPOINT),
            ),
        ):
            self._tasks.append(
                asyncio.create_task(self._periodic(name, interval_ms, work), name=f"log-{name}")
            )

    async def _periodic(self, name: str, interval_ms: int, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await self._run(work)
            except Exception:
                _log.exception("log manager task %s failed; retrying in %d ms", name, interval_ms)

    async def run_retention(self) -> int:
        """One retention pass over every log now; returns the number of segments deleted."""
        return await self._run(self._retention_pass)

    async def run_cleaner(self) -> dict[TopicPartition, CleanResult]:
        """One cleaning round now: every compacted log that needs it, once; returns what was
        cleaned (whether or not log.cleaner.enable starts the cleaner's threads)."""
        return await self._run(self.cleaner.run_round)

    async def run_flush(self) -> int:
        """One flush.ms / deleted-file pass now; returns the number of logs flushed."""
        return await self._run(self._flush_pass)

    async def write_checkpoints(self) -> None:
        """Write every per-directory checkpoint now."""
        for name in _CHECKPOINTED_OFFSETS:
            await self._run(functools.partial(self._write_checkpoint, name))

    def _retention_pass(self) -> int:
        deleted = 0
        for log in self._open_logs():
            try:
                deleted += log.delete_old_segments()
            except LogError:
                _log.exception("%s: retention failed", log.directory)
        return deleted

    async def run_producer_expiration(self) -> int:
        """One producer.id.expiration.ms pass now; returns how many producers were dropped."""
        return await self._run(self._producer_expiration_pass)

    def _producer_expiration_pass(self) -> int:
        expired = 0
        for log in self._open_logs():
            expired += len(log.expire_producers(self._config.producer_id_expiration_ms))
        return expired

    def _flush_pass(self) -> int:
        flushed = 0
        for log in self._open_logs():
            try:
                flushed += log.flush_if_due()
                log.purge_deleted_segments()
            except LogError:
                _log.exception("%s: flush failed", log.directory)
        return flushed

    def _write_checkpoint(self, name: str) -> None:
        for data_dir in list(self._dirs):
            data_dir.write_checkpoint(name)

    def _on_roll(self, log: PartitionLog, new_base_offset: int) -> None:
        # Kafka flushes a rolled segment in the background right away: the recovery point
        # then trails the active segment, which bounds the work after a crash to about one
        # segment per partition. Called from the appending thread.
        if self._closing:
            return
        try:
            self._background.submit(self._flush_after_roll, log, new_base_offset)
        except RuntimeError:
            _log.debug("%s: not flushing after roll, shutting down", log.directory)

    def _on_truncate(self, log: PartitionLog, log_end_offset: int) -> None:
        # Called under the log's lock before it is truncated: the cleaner checkpoint is lowered
        # on disk first, so a crash in between leaves it low (safe), never stale. While the
        # logs open there is no cleaner yet; it lowers checkpoints past their log's end when
        # made.
        if self._cleaner is not None:
            self._cleaner.truncate_checkpoint(log, log_end_offset)

    @staticmethod
    def _flush_after_roll(log: PartitionLog, up_to_offset: int) -> None:
        try:
            log.flush(up_to_offset)
        except LogError:
            if not log.closed:
                _log.exception("%s: flush after roll failed", log.directory)

    def _open_logs(self) -> list[PartitionLog]:
        return [log for log in list(self._logs.values()) if not log.closed]

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._background, work)

    def _check_open(self) -> None:
        if self._closing:
            raise LogStorageError("the log manager is closed")

    # -- shutdown -------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop background work, flush and close every log, write checkpoints and the
        clean-shutdown marker of each directory whose logs all closed cleanly."""
        if self._closing:
            return
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._cleaner is not None:
            await asyncio.to_thread(self._cleaner.close)
        await asyncio.to_thread(self._background.shutdown, True)
        await asyncio.to_thread(self._close_all_logs, write_marker=True)
        _log.info("log manager closed")

    def _close_all_logs(self, *, write_marker: bool) -> None:
        # ``write_marker`` False (a failed start-up) writes no checkpoint either: a partition
        # that failed to open would be missing from it and lose its offsets.
        for data_dir in self._dirs:
            clean = True
            logs = list(data_dir.logs.values())
            with ThreadPoolExecutor(
                self._config.num_recovery_threads_per_data_dir,
                thread_name_prefix=f"log-close-{data_dir.path.name}",
            ) as pool:
                for log, error in zip(logs, pool.map(_close_log, logs), strict=True):
                    if error is not None:
                        clean = False
                        _log.error("%s: not closed cleanly: %s", log.directory, error)
            try:
                if write_marker:
                    for name in _CHECKPOINTED_OFFSETS:
                        data_dir.write_checkpoint(name)
                if write_marker and clean:
                    marker = os.open(
                        data_dir.path / CLEAN_SHUTDOWN_FILE,
                        os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC,
                        0o644,
                    )
                    os.fsync(marker)
                    os.close(marker)
                    fsync_dir(data_dir.path)
            except (OSError, LogError):
                _log.exception("%s: cannot record the shutdown", data_dir.path)
            finally:
                os.close(data_dir.lock_fd)
        self._dirs.clear()
        self._logs.clear()


def _close_log(log: PartitionLog) -> LogError | None:
    try:
        log.close()
    except LogError as exc:
        return exc
    return None
