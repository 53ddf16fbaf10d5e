"""Which compacted log to clean next, and when (Kafka's LogCleanerManager and LogCleaner).

``cleanable_offsets`` bounds what one pass may touch and ``clean_sizes`` measures a log's clean
and dirty sections (what logs are ranked by, and what the CLI and metrics show).
``LogCleanerManager`` runs ``log.cleaner.threads`` threads (plain threads, not the event loop:
the log API is synchronous and a pass is long disk work). Each repeatedly takes the compacted
log with the highest dirty ratio at or above its ``min.cleanable.dirty.ratio`` (or any whose
oldest dirty record is past ``max.compaction.lag.ms``) that no other thread is cleaning and that
is not marked uncleanable, runs one pass (cleaner.clean_log) and checkpoints where the pass
ended in the data directory's ``cleaner-offset-checkpoint``; with nothing to clean it waits
``log.cleaner.backoff.ms``. Only whole segments below a log's bound count as dirty (what a
pass can take), so a log whose bound sits inside a segment cannot take every turn of the
threads from the others with passes that do nothing. A pass that meets damaged data
(UncleanableLogError), or fails in any other way that is not an abort, marks the partition
uncleanable until the node restarts (Kafka's LogCleaningException); the partition keeps
serving reads and appends.

Aborts: a log being closed or deleted stops its pass at the next batch (the ``aborted``
callback); ``abort_and_wait`` returns once no thread cleans it. Truncation needs no abort: the
pass's swap re-checks the segments under the log's lock and discards a stale result. It does
lower the checkpoint (Kafka's maybeTruncateCheckpoint): before a log is truncated its
checkpoint drops to the log end the truncation leaves, on disk, and a pass running meanwhile
checkpoints no higher; records written again below an old checkpoint would otherwise never be
mapped, and a tombstone among them could be removed while an older value of its key is kept.
A checkpoint past its log's end at construction (the log restarted at a later offset while
opening, or lost an unflushed tail) is lowered to that end the same way.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from brook.record import RecordError
from brook.telemetry import meter
from brook_storage_node.log.checkpoints import CheckpointFileError, OffsetCheckpointFile
from brook_storage_node.log.cleaner import (
    CleanableOffsets,
    CleanerConfig,
    CleanResult,
    Throttler,
    UncleanableLogError,
    clean_log,
)
from brook_storage_node.log.errors import LogError
from brook_storage_node.log.time_index import NO_TIMESTAMP
from brook_storage_node.log.topic_partition import TopicPartition

if TYPE_CHECKING:
    from brook_storage_node.log.log_segments import LogSegments
    from brook_storage_node.log.partition_log import PartitionLog

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "DEDUPE_BYTES_PER_ENTRY",
    "CleaningTarget",
    "LogCleanSizes",
    "LogCleanerManager",
    "LogCleanerManagerConfig",
    "LogCleaningState",
    "clean_sizes",
    "cleanable_offsets",
]

CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
# How long closing the manager, or aborting one log's pass, waits for a pass to notice; a pass
# polls ``aborted`` between batches, so this is only reached by a stuck disk.
ABORT_WAIT_S: Final = 30.0

_log = logging.getLogger(__name__)


def cleanable_offsets(
    log: PartitionLog, checkpointed_dirty_offset: int | None, now_ms: int
) -> CleanableOffsets:
    """Kafka's cleanableOffsets for ``log`` at ``now_ms``.

    The first dirty offset is the checkpoint clamped into [log start, log end] (the log start
    without one). The first uncleanable offset is the minimum of the active segment's base, the
    high watermark, the last stable offset (no open transaction is cleaned) and the base of the
    first segment at or after the first dirty offset whose largest timestamp is within
    ``min.compaction.lag.ms`` of now, rounded down to the base of the segment holding it (a
    pass takes whole segments only, so a segment straddling the bound is not dirty); never
    below the log start, and the first dirty offset is lowered to it if above (the dirty
    section never ends before it starts). ``forced`` when the first batch of the first dirty
    non-active segment is older than ``max.compaction.lag.ms``.
    """
    config = log.config
    segments = log.segments
    start, end = log.log_start_offset, log.log_end_offset
    checkpoint = start if checkpointed_dirty_offset is None else checkpointed_dirty_offset
    first_dirty = min(max(checkpoint, start), end)
    active = segments[-1]
    bound = min(active.base_offset, log.high_watermark, log.last_stable_offset)
    dirty_sealed = [
        segments[index]
        for index in range(len(segments) - 1)
        if segments[index + 1].base_offset > first_dirty
    ]
    if config.min_compaction_lag_ms > 0:
        for segment in dirty_sealed:
            if segment.largest_timestamp_for_retention > now_ms - config.min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    # A pass takes whole segments only (clean_log): the segment holding the bound is not
    # cleanable, so it is not dirty either (else a log could rank first with nothing to take).
    holding = segments.floor_index(bound)
    if holding >= 0:
        bound = segments[holding].base_offset
    first_uncleanable = max(bound, start)
    forced = False
    if dirty_sealed and config.max_compaction_lag_ms < now_ms:
        first_batch = next(dirty_sealed[0].batch_headers_from(dirty_sealed[0].base_offset), None)
        if first_batch is not None:
            timestamp = first_batch[1].max_timestamp
            forced = NO_TIMESTAMP < timestamp < now_ms - config.max_compaction_lag_ms
    return CleanableOffsets(
        first_dirty_offset=min(first_dirty, first_uncleanable),
        first_uncleanable_offset=first_uncleanable,
        forced=forced,
    )


@dataclass(frozen=True, slots=True)
class LogCleanSizes:
    """What the cleaner manager ranks logs by, and what the CLI and metrics show."""

    clean_bytes: int  # from the log start to the first dirty offset
    dirty_bytes: int  # from the first dirty offset to the first uncleanable offset

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def clean_sizes(log: PartitionLog, offsets: CleanableOffsets) -> LogCleanSizes:
    """Bytes of the whole segments holding offsets in [log start, first dirty) (clean) and in
    [first dirty, first uncleanable) (dirty), Kafka's way: a segment straddling the first
    dirty offset counts in both."""
    segments = log.segments
    start = log.log_start_offset
    return LogCleanSizes(
        clean_bytes=_bytes_between(segments, start, offsets.first_dirty_offset),
        dirty_bytes=_bytes_between(
            segments, offsets.first_dirty_offset, offsets.first_uncleanable_offset
        ),
    )


def _bytes_between(segments: LogSegments, low: int, high: int) -> int:
    """Total size of the segments holding any offset in [low, high)."""
    if low >= high:
        return 0
    total = 0
    for index, segment in enumerate(segments):
        following = segments[index + 1].base_offset if index + 1 < len(segments) else None
        if segment.base_offset < high and (following is None or following > low):
            total += segment.size_bytes
    return total


@dataclass(frozen=True, slots=True)
class LogCleanerManagerConfig:
    """The node's cleaner settings, by their Kafka names (defaults are Kafka's)."""

    # log.cleaner.enable: whether the cleaner threads run at all.
    enable: bool = True
    # log.cleaner.threads
    threads: int = 1
    # log.cleaner.dedupe.buffer.size: the key -> offset maps of all threads together.
    dedupe_buffer_size: int = 128 * 1024 * 1024
    # log.cleaner.io.buffer.size
    io_buffer_size: int = 512 * 1024
    # log.cleaner.io.buffer.load.factor
    io_buffer_load_factor: float = 0.9
    # log.cleaner.io.max.bytes.per.second: all threads together (Kafka's Double.MAX_VALUE:
    # unlimited).
    io_max_bytes_per_second: float = sys.float_info.max
    # log.cleaner.backoff.ms: the wait when no log needs cleaning.
    backoff_ms: int = 15_000

    def __post_init__(self) -> None:
        problems = []
        if self.threads < 1:
            problems.append(f"log.cleaner.threads must be >= 1, got {self.threads}")
        elif self.dedupe_buffer_size // self.threads < DEDUPE_BYTES_PER_ENTRY:
            problems.append(
                f"log.cleaner.dedupe.buffer.size {self.dedupe_buffer_size} leaves each of the "
                f"{self.threads} log.cleaner.threads less than one map entry "
                f"({DEDUPE_BYTES_PER_ENTRY} bytes)"
            )
        if self.io_buffer_size < 1:
            problems.append(f"log.cleaner.io.buffer.size must be >= 1, got {self.io_buffer_size}")
        if not 0 < self.io_buffer_load_factor <= 1:
            problems.append(
                "log.cleaner.io.buffer.load.factor must be in (0, 1], got "
                f"{self.io_buffer_load_factor}"
            )
        if not self.io_max_bytes_per_second > 0:
            problems.append(
                "log.cleaner.io.max.bytes.per.second must be > 0, got "
                f"{self.io_max_bytes_per_second}"
            )
        if self.backoff_ms < 1:
            problems.append(f"log.cleaner.backoff.ms must be >= 1, got {self.backoff_ms}")
        if problems:
            raise ValueError("; ".join(problems))

    def cleaner_config(self) -> CleanerConfig:
        """One thread's pass settings: its share of the dedupe buffer."""
        return CleanerConfig(
            dedupe_buffer_bytes=self.dedupe_buffer_size // self.threads,
            load_factor=self.io_buffer_load_factor,
            io_buffer_bytes=self.io_buffer_size,
        )


# Kafka's accounting of one key -> offset map entry (a 16-byte hash and an 8-byte offset).
DEDUPE_BYTES_PER_ENTRY: Final = 24


@dataclass(frozen=True, slots=True)
class LogCleaningState:
    """What the manager knows of one log's cleaning (the CLI's ``log-dirs describe``)."""

    offsets: CleanableOffsets
    sizes: LogCleanSizes
    # Why the partition is uncleanable (until the node restarts), or None.
    uncleanable_reason: str | None
    # The wall clock (ms) at the end of its last pass since the node started, or None.
    last_cleaned_ms: int | None


@dataclass(frozen=True, slots=True)
class CleaningTarget:
    """A log chosen for a pass, with its bounds and sizes at the time it was chosen."""

    log: PartitionLog
    offsets: CleanableOffsets
    sizes: LogCleanSizes


class LogCleanerManager:
    """The node's log cleaner; ``start`` its threads, ``close`` to stop them.

    ``logs`` returns the node's open logs (read on every selection); ``data_dirs`` are the
    directories whose ``cleaner-offset-checkpoint`` files are read at construction.
    """

    def __init__(
        self,
        config: LogCleanerManagerConfig,
        data_dirs: Iterable[Path],
        logs: Callable[[], Iterable[PartitionLog]],
        clock_ms: Callable[[], int],
        *,
        instruments: Meter | None = None,
    ) -> None:
        self._config = config
        self._cleaner_config = config.cleaner_config()
        self._logs = logs
        self._clock_ms = clock_ms
        # Made at the first pass: one for all threads.
        self._throttler: Throttler | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # Guarded by _lock:
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {
            path: _read_checkpoint(path) for path in data_dirs
        }
        # Partitions truncated during their pass, with the lowest log end left: its cap.
        self._truncated_during_pass: dict[TopicPartition, int] = {}
        self._in_progress: set[TopicPartition] = set()
        self._aborting: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, str] = {}
        self._last_cleaned_ms: dict[TopicPartition, int] = {}
        self._max_dirty_ratio = 0.0
        self._last_run_ms: dict[int, int] = {}
        self._last_clean_duration_s = 0.0
        self._last_recopy_ratio = 0.0
        self._metrics(instruments or meter(__name__))
        for log in logs():
            self.truncate_checkpoint(log, log.log_end_offset)

    def _metrics(self, instruments: Meter) -> None:
        self._bytes_read = instruments.create_counter(
            "brook.log_cleaner.bytes_read",
            unit="By",
            description="Bytes of log segments the cleaner read",
        )
        self._bytes_written = instruments.create_counter(
            "brook.log_cleaner.bytes_written",
            unit="By",
            description="Bytes of cleaned segments the cleaner wrote",
        )
        for name, unit, description, observe in (
            (
                "brook.log_cleaner.max_dirty_percent",
                "%",
                "The highest dirty ratio among the compacted logs at the last selection",
                lambda: [Observation(round(100 * self._max_dirty_ratio))],
            ),
            (
                "brook.log_cleaner.uncleanable_partitions",
                "{partition}",
                "Partitions marked uncleanable (until the node restarts)",
                lambda: [Observation(len(self._uncleanable))],
            ),
            (
                "brook.log_cleaner.last_clean_duration",
                "s",
                "How long the last cleaning pass took",
                lambda: [Observation(self._last_clean_duration_s)],
            ),
            (
                "brook.log_cleaner.recopy_percent",
                "%",
                "Bytes written as a share of bytes read in the last pass",
                lambda: [Observation(round(100 * self._last_recopy_ratio))],
            ),
            (
                "brook.log_cleaner.time_since_last_run",
                "ms",
                "Time since each cleaner thread last looked for a log to clean",
                self._observe_time_since_last_run,
            ),
        ):
            instruments.create_observable_gauge(
                name,
                callbacks=[_callback(observe)],
                unit=unit,
                description=description,
            )

    def _observe_time_since_last_run(self) -> list[Observation]:
        now = self._clock_ms()
        with self._lock:
            runs = dict(self._last_run_ms)
        return [
            Observation(max(0, now - at), {"thread": str(thread)})
            for thread, at in sorted(runs.items())
        ]

    # -- threads --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the cleaner threads (none when log.cleaner.enable is false)."""
        assert not self._threads, "already started"
        if not self._config.enable:
            _log.info("the log cleaner is disabled (log.cleaner.enable=false)")
            return
        for number in range(self._config.threads):
            thread = threading.Thread(
                target=self._run, args=(number,), name=f"log-cleaner-{number}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def close(self) -> None:
        """Stop the threads: a running pass is aborted at its next batch; returns within
        about ABORT_WAIT_S even if a thread is stuck (it is a daemon thread)."""
        self._stopping.set()
        deadline = time.monotonic() + ABORT_WAIT_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                _log.warning("%s did not stop within %.0f s", thread.name, ABORT_WAIT_S)
        self._threads.clear()

    def _run(self, number: int) -> None:
        backoff_s = self._config.backoff_ms / 1000
        while not self._stopping.is_set():
            with self._lock:
                self._last_run_ms[number] = self._clock_ms()
            try:
                outcome = self._clean_filthiest(set())
                # A pass that did nothing backs off too: a thread never spins.
                cleaned = outcome is not None and outcome[1] is not None
            except Exception:
                _log.exception("log cleaner thread %d failed; retrying after the backoff", number)
                cleaned = False
            if not cleaned:
                self._stopping.wait(backoff_s)

    def run_round(self) -> dict[TopicPartition, CleanResult]:
        """Clean every log that needs it once now, dirtiest first, in the calling thread (for
        operators and tests, as LogManager.run_retention); returns what was cleaned."""
        done: dict[TopicPartition, CleanResult] = {}
        tried: set[TopicPartition] = set()
        while not self._stopping.is_set():
            outcome = self._clean_filthiest(tried)
            if outcome is None:
                break
            tp, result = outcome
            tried.add(tp)
            if result is not None:
                done[tp] = result
        return done

    # -- one pass -------------------------------------------------------------------------

    def _clean_filthiest(
        self, excluded: set[TopicPartition]
    ) -> tuple[TopicPartition, CleanResult | None] | None:
        """Clean the filthiest eligible log (not in ``excluded``); None when no log needs
        cleaning, else the partition and the pass's result (None: nothing was done)."""
        now_ms = self._clock_ms()
        target = self.grab_filthiest(now_ms, excluded)
        if target is None:
            return None
        log = target.log
        result: CleanResult | None = None
        try:
            result = self._clean(target, now_ms)
        finally:
            self.done_cleaning(log, result)
        return log.topic_partition, result

    def grab_filthiest(
        self, now_ms: int, excluded: Set[TopicPartition] = frozenset()
    ) -> CleaningTarget | None:
        """Kafka's grabFilthiestCompactedLog: the compacted log with the highest dirty ratio at
        or above its min.cleanable.dirty.ratio, or forced by max.compaction.lag.ms (those
        first), that is not being cleaned, aborted, uncleanable or in ``excluded``; it is
        marked as being cleaned until ``done_cleaning``. Updates the max dirty ratio metric."""
        best: CleaningTarget | None = None
        max_ratio = 0.0
        with self._lock:
            for log in self._logs():
                tp = log.topic_partition
                if not log.config.compact or log.closed or tp in self._uncleanable:
                    continue
                try:
                    target = self._measure(log, now_ms)
                except RecordError as exc:
                    self._mark_uncleanable_locked(log, f"a batch header cannot be read: {exc}")
                    continue
                except LogError as exc:
                    if not log.closed:
                        _log.warning("%s: cannot measure its dirty section: %s", log.directory, exc)
                    continue
                ratio = target.sizes.dirty_ratio
                max_ratio = max(max_ratio, ratio)
                if tp in excluded or tp in self._in_progress or tp in self._aborting:
                    continue
                if target.sizes.dirty_bytes == 0:
                    continue
                if not target.offsets.forced and ratio < log.config.min_cleanable_dirty_ratio:
                    continue
                if best is None or _rank(target) > _rank(best):
                    best = target
            self._max_dirty_ratio = max_ratio
            if best is not None:
                self._in_progress.add(best.log.topic_partition)
        return best

    def done_cleaning(self, log: PartitionLog, result: CleanResult | None) -> None:
        """Kafka's doneCleaning: ``log`` is no longer being cleaned; with a ``result``, its end
        offset is checkpointed (clamped to the log end, and to the lowest end a truncation
        during the pass left) and the pass is counted."""
        tp = log.topic_partition
        with self._changed:
            self._in_progress.discard(tp)
            truncated_to = self._truncated_during_pass.pop(tp, None)
            self._changed.notify_all()
            if result is None:
                return
            data_dir = log.directory.parent
            end = min(result.end_offset, log.log_end_offset)
            if truncated_to is not None:
                end = min(end, truncated_to)
            self._checkpoints.setdefault(data_dir, {})[tp] = end
            self._last_cleaned_ms[tp] = self._clock_ms()
            self._last_clean_duration_s = result.elapsed_s
            self._last_recopy_ratio = (
                result.bytes_written / result.bytes_read if result.bytes_read else 0.0
            )
            self._write_checkpoint_locked(data_dir)
        attributes = {"topic": tp.topic}
        self._bytes_read.add(result.bytes_read, attributes)
        self._bytes_written.add(result.bytes_written, attributes)
        _log.info(
            "%s: cleaned up to offset %d: read %d bytes, wrote %d, kept %d of %d records, "
            "replaced %d segments in %.3f s",
            log.directory,
            result.end_offset,
            result.bytes_read,
            result.bytes_written,
            result.records_retained,
            result.records_read,
            result.segments_replaced,
            result.elapsed_s,
        )

    def _measure(self, log: PartitionLog, now_ms: int) -> CleaningTarget:
        offsets = cleanable_offsets(log, self._checkpoint_of(log), now_ms)
        return CleaningTarget(log, offsets, clean_sizes(log, offsets))

    def _checkpoint_of(self, log: PartitionLog) -> int | None:
        return self._checkpoints.get(log.directory.parent, {}).get(log.topic_partition)

    def _clean(self, target: CleaningTarget, now_ms: int) -> CleanResult | None:
        log = target.log
        tp = log.topic_partition

        def aborted() -> bool:
            return self._stopping.is_set() or self.aborting(tp) or log.closed

        with self._lock:
            if self._throttler is None:
                self._throttler = Throttler(self._config.io_max_bytes_per_second)
            throttler = self._throttler
        try:
            result = clean_log(
                log,
                target.offsets,
                config=self._cleaner_config,
                throttler=throttler,
                now_ms=now_ms,
                aborted=aborted,
            )
        except UncleanableLogError as exc:
            self.mark_uncleanable(log, str(exc))
            return None
        except Exception as exc:
            if aborted():
                _log.info("%s: cleaning aborted (%s)", log.directory, exc)
                return None
            # As Kafka: whatever failed (a full disk, a bug) fails again on this log, so it is
            # not retried every backoff; the other logs are still cleaned.
            _log.exception("%s: cleaning failed", log.directory)
            self.mark_uncleanable(log, f"cleaning failed: {type(exc).__name__}: {exc}")
            return None
        return None if aborted() else result

    def mark_uncleanable(self, log: PartitionLog, reason: str) -> None:
        """Skip ``log`` until the node restarts (Kafka's markPartitionUncleanable); an ERROR
        log line names the partition, its directory and ``reason``."""
        with self._lock:
            self._mark_uncleanable_locked(log, reason)

    def _mark_uncleanable_locked(self, log: PartitionLog, reason: str) -> None:
        self._uncleanable[log.topic_partition] = reason
        _log.error(
            "partition %s (%s) is uncleanable until the node restarts; it keeps serving reads "
            "and appends: %s",
            log.topic_partition,
            log.directory,
            reason,
        )

    def _write_checkpoint_locked(self, data_dir: Path) -> None:
        try:
            self._persist_checkpoint_locked(data_dir)
        except LogError:
            _log.exception("%s: cannot write the cleaner offset checkpoint", data_dir)

    def _persist_checkpoint_locked(self, data_dir: Path) -> None:
        # Only the logs still open in the directory: entries of deleted logs go.
        present = {log.topic_partition for log in self._logs() if log.directory.parent == data_dir}
        entries = self._checkpoints.setdefault(data_dir, {})
        for tp in set(entries) - present:
            del entries[tp]
        OffsetCheckpointFile(data_dir / CLEANER_OFFSET_CHECKPOINT).write(entries)

    def truncate_checkpoint(self, log: PartitionLog, log_end_offset: int) -> None:
        """Kafka's maybeTruncateCheckpoint: ``log`` is about to be truncated to end at
        ``log_end_offset``; its checkpoint is lowered to it if above, and written before this
        returns (LogError if it cannot be: the truncation must not go ahead over a stale
        checkpoint). A pass over ``log`` running now checkpoints no higher."""
        tp = log.topic_partition
        data_dir = log.directory.parent
        with self._lock:
            if tp in self._in_progress:
                self._truncated_during_pass[tp] = min(
                    log_end_offset, self._truncated_during_pass.get(tp, log_end_offset)
                )
            entries = self._checkpoints.get(data_dir, {})
            checkpoint = entries.get(tp)
            if checkpoint is None or checkpoint <= log_end_offset:
                return
            entries[tp] = log_end_offset
            try:
                self._persist_checkpoint_locked(data_dir)
            except LogError:
                entries[tp] = checkpoint  # still right: the truncation does not happen
                raise
            _log.info(
                "%s: cleaner checkpoint lowered from %d to the log end %d",
                log.directory,
                checkpoint,
                log_end_offset,
            )

    # -- log lifecycle --------------------------------------------------------------------

    def abort_and_wait(self, tp: TopicPartition) -> None:
        """Stop any pass over ``tp`` and keep new ones from starting until ``forget`` (or
        ``resume``); returns once no thread cleans it (or after ABORT_WAIT_S)."""
        deadline = time.monotonic() + ABORT_WAIT_S
        with self._changed:
            self._aborting.add(tp)
            while tp in self._in_progress:
                left = deadline - time.monotonic()
                if left <= 0:
                    _log.warning("the cleaning of %s did not stop within %.0f s", tp, ABORT_WAIT_S)
                    return
                self._changed.wait(left)

    def aborting(self, tp: TopicPartition) -> bool:
        """Whether passes over ``tp`` are being stopped (``abort_and_wait`` was called, and
        neither ``resume`` nor ``forget`` since)."""
        return tp in self._aborting

    def resume(self, tp: TopicPartition) -> None:
        """Let ``tp`` be cleaned again after ``abort_and_wait``."""
        with self._lock:
            self._aborting.discard(tp)

    def forget(self, tp: TopicPartition, data_dir: Path) -> None:
        """``tp``'s log in ``data_dir`` is going or gone: drop its state and its checkpoint
        entry, written before this returns (LogError if it cannot be)."""
        with self._lock:
            self._aborting.discard(tp)
            self._uncleanable.pop(tp, None)
            self._last_cleaned_ms.pop(tp, None)
            entries = self._checkpoints.get(data_dir)
            if entries is not None and tp in entries:
                previous = entries.pop(tp)
                try:
                    self._persist_checkpoint_locked(data_dir)
                except BaseException:
                    entries[tp] = previous  # still on disk: a retry must write it again
                    raise

    # -- inspection -----------------------------------------------------------------------

    def state_of(self, log: PartitionLog) -> LogCleaningState:
        """``log``'s clean and dirty sections now, uncleanable reason and last clean time."""
        with self._lock:
            checkpoint = self._checkpoint_of(log)
            reason = self._uncleanable.get(log.topic_partition)
            last = self._last_cleaned_ms.get(log.topic_partition)
        offsets = cleanable_offsets(log, checkpoint, self._clock_ms())
        return LogCleaningState(offsets, clean_sizes(log, offsets), reason, last)

    @property
    def in_progress(self) -> frozenset[TopicPartition]:
        """The partitions being cleaned now."""
        with self._lock:
            return frozenset(self._in_progress)

    @property
    def uncleanable(self) -> Mapping[TopicPartition, str]:
        """The partitions marked uncleanable, with why."""
        with self._lock:
            return dict(self._uncleanable)

    def checkpointed_offsets(self) -> dict[Path, dict[TopicPartition, int]]:
        """The first dirty offsets as checkpointed, by data directory."""
        with self._lock:
            return {path: dict(entries) for path, entries in self._checkpoints.items()}


def _rank(target: CleaningTarget) -> tuple[bool, float]:
    return target.offsets.forced, target.sizes.dirty_ratio


def _callback(
    observe: Callable[[], list[Observation]],
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    return lambda options: observe()


def _read_checkpoint(data_dir: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(data_dir / CLEANER_OFFSET_CHECKPOINT).read()
    except CheckpointFileError as exc:
        # Safe: without a checkpoint every log's dirty section starts at its log start.
        _log.error("ignoring a damaged cleaner checkpoint: %s", exc)
        return {}
