"""Log compaction: one cleaning pass over one partition log (Kafka's Cleaner, seed 001 "Log
Compaction").

CONTRACT STUB (issue #18): the signatures below are what the cleaner manager
(log_cleaner_manager.py) and the tests build on; the implementation replaces the bodies.

A pass: build a key -> last offset map (offset_map.py) over the dirty section
[first dirty offset, first uncleanable offset), as far as the map holds (a dirty section that
does not fit is cleaned in passes: the pass ends at the end of the last segment whose keys all
fit); then rewrite every segment from the log start up to where the map ends, in groups of
consecutive segments whose total fits segment.bytes, each group into one new segment written
beside the old ones with the ``.cleaned`` suffix, keeping every retained record's offset; then
swap each group in atomically (PartitionLog.replace_segments, recovery in loader.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from brook_storage_node.log.partition_log import PartitionLog


class UncleanableLogError(Exception):
    """The log cannot be cleaned (a segment fails its CRC, a batch cannot be decoded); the
    message names the file and position. The manager marks the partition uncleanable and the
    node keeps serving it."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    # The key -> offset map's budget for one cleaner thread (log.cleaner.dedupe.buffer.size
    # divided by log.cleaner.threads), in Kafka's accounting of 24 bytes per entry.
    dedupe_buffer_bytes: int = 128 * 1024 * 1024
    # log.cleaner.io.buffer.load.factor: the share of the map's slots that may be used.
    load_factor: float = 0.9
    # log.cleaner.io.buffer.size: bytes read per I/O while cleaning.
    io_buffer_bytes: int = 512 * 1024


class Throttler:
    """log.cleaner.io.max.bytes.per.second: ``maybe_throttle(n)`` after every n bytes read or
    written sleeps as long as keeps the running rate at or below the limit (inf: never)."""

    def __init__(
        self,
        max_bytes_per_second: float,
        *,
        clock_s: Callable[[], float] | None = None,
        sleep_s: Callable[[float], None] | None = None,
    ) -> None:
        raise NotImplementedError

    def maybe_throttle(self, observed_bytes: int) -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class CleanableOffsets:
    """Kafka's cleanableOffsets: where the dirty section starts and the first offset the
    cleaner may not touch (min of: the active segment's base, the high watermark, the first
    unstable offset, the first segment still inside min.compaction.lag.ms)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    # True when max.compaction.lag.ms forces a clean whatever the dirty ratio.
    forced: bool


@dataclass(frozen=True, slots=True)
class CleanResult:
    # The next pass's first dirty offset (what the manager checkpoints).
    end_offset: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_retained: int
    segments_replaced: int
    elapsed_s: float


def clean_log(
    log: PartitionLog,
    offsets: CleanableOffsets,
    *,
    config: CleanerConfig,
    throttler: Throttler,
    now_ms: int,
    aborted: Callable[[], bool] = lambda: False,
) -> CleanResult | None:
    """One pass (see the module docstring); None when there was nothing to clean. Runs
    without the log's lock except for each swap. ``aborted`` is polled between batches (the
    log is closing or the node shutting down): the pass stops, leaving the log as it was.
    UncleanableLogError for damaged data; LogError (e.g. LogClosedError) propagates."""
    raise NotImplementedError
