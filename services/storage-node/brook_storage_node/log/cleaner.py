"""Log compaction: one cleaning pass over one partition log (Kafka's Cleaner, seed 001 "Log
Compaction"; docs/compaction.md, "One pass" and "Swap").

A pass: build a key -> last offset map (offset_map.py) over the dirty section
[first dirty offset, first uncleanable offset), a whole segment at a time, as far as the map
holds (a dirty section that does not fit is cleaned in passes: the pass ends at the end of
the last segment whose keys all fit); then rewrite every segment from the log start up to
where the map ends, in groups of consecutive segments whose total fits segment.bytes and one
segment's indexes, each group into one new segment written beside the old ones with the
``.cleaned`` suffix, keeping every retained record's offset; then swap each group in
atomically (PartitionLog.replace_segments, recovery in loader.py).

Per batch (brook/record/cleaning.py keeps the batch's identity), a record is kept unless: a
later record of its key is in the map; it belongs to an aborted transaction; it is a
tombstone whose batch's largest timestamp is older than ``now - delete.retention.ms``; it has
no key. A batch with no record left is dropped, except the last data batch of each producer
the producer state knows, which stays empty. A transaction marker is kept while any batch of
its transaction is kept in the pass (a pass reads from the log start, so it knows) and until
it is older than delete.retention.ms; the ``.txnindex`` of a cleaned segment holds the
entries of the ABORT markers it kept.

The pass reads sealed segments without the log's lock: appends, reads and replication go on
meanwhile; only each swap takes the lock.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from brook.record import BatchHeader, RecordError, read_header, verify_crc
from brook.record.cleaning import BatchRecords, RecordSpan, record_spans, rewrite_batch
from brook_storage_node.log.errors import LogClosedError, LogStorageError, SwapIncompleteError
from brook_storage_node.log.failpoints import fault_point
from brook_storage_node.log.files import fsync_dir
from brook_storage_node.log.log_config import LogConfig
from brook_storage_node.log.log_segment import (
    CLEANED_SUFFIX,
    INT32_MAX,
    AppendedBatch,
    LogSegment,
)
from brook_storage_node.log.offset_map import OffsetMap, key_digest
from brook_storage_node.log.transaction_index import AbortedTxn

if TYPE_CHECKING:
    from brook_storage_node.log.partition_log import PartitionLog

_log = logging.getLogger(__name__)

# The throttler measures the rate over periods of at least this long (Kafka's 100 ms).
THROTTLE_CHECK_INTERVAL_S = 0.1
# Bytes read or written between two calls to the throttler.
THROTTLE_REPORT_BYTES = 64 * 1024


class UncleanableLogError(Exception):
    """The log cannot be cleaned (a segment fails its CRC, a batch cannot be decoded, the
    dedupe buffer cannot hold one segment's keys); the message names the file and position.
    The manager marks the partition uncleanable and the node keeps serving it."""


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
    written sleeps as long as keeps the running rate at or below the limit (inf: never).

    Kafka's Throttler: bytes are counted over periods of at least THROTTLE_CHECK_INTERVAL_S;
    at the end of one, a rate above the limit sleeps until the period's bytes fit the limit,
    and a new period starts. One throttler is shared by every cleaner thread (thread-safe:
    a thread that sleeps holds the others back too, which is the point)."""

    def __init__(
        self,
        max_bytes_per_second: float,
        *,
        clock_s: Callable[[], float] | None = None,
        sleep_s: Callable[[float], None] | None = None,
    ) -> None:
        if not max_bytes_per_second > 0:
            raise ValueError(f"max bytes per second must be > 0, got {max_bytes_per_second}")
        self._rate = max_bytes_per_second
        self._clock_s = clock_s or time.monotonic
        self._sleep_s = sleep_s or time.sleep
        self._lock = threading.Lock()
        self._period_start = self._clock_s()
        self._observed = 0

    def maybe_throttle(self, observed_bytes: int) -> None:
        if math.isinf(self._rate):
            return
        with self._lock:
            self._observed += observed_bytes
            elapsed = self._clock_s() - self._period_start
            if elapsed < THROTTLE_CHECK_INTERVAL_S:
                return
            wanted = self._observed / self._rate
            if wanted > elapsed:
                self._sleep_s(wanted - elapsed)
            self._period_start = self._clock_s()
            self._observed = 0


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
    # Records dropped because they had no key (Kafka's cleaner drops them too).
    records_without_key: int = 0


def clean_log(
    log: PartitionLog,
    offsets: CleanableOffsets,
    *,
    config: CleanerConfig,
    throttler: Throttler,
    now_ms: int,
    aborted: Callable[[], bool] = lambda: False,
) -> CleanResult | None:
    """One pass (see the module docstring); None when there was nothing to clean, or when
    the pass stopped early: ``aborted`` returned true (polled between batches: the log is
    closing or the node shutting down), or the log changed under the pass (a truncation,
    retention or deletion of the segments read: found by the swap's check, or by a segment
    that left the log or became active while read). Groups swapped before the stop stay
    swapped (each is complete); the rest of the log is as it was, and the next pass starts
    from the same first dirty offset. Runs without the log's lock except for each swap.
    UncleanableLogError for damaged data; LogError (e.g. LogClosedError) propagates."""
    pass_ = _Pass(log, config, throttler, now_ms, aborted)
    try:
        return pass_.run(offsets)
    except _PassAborted:
        _log.info("%s: cleaning pass stopped before its end", log.directory)
        return None


class _PassAborted(Exception):
    pass


class _AbortedRanges:
    """The aborted transactions of the pass: a transactional batch of producer P at or after
    an aborted transaction's first offset and before its ABORT marker was aborted."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        # Producer id -> (first offsets, marker offsets) of its aborted transactions, in order.
        ranges: dict[int, tuple[list[int], list[int]]] = {}
        for txn in sorted(aborted, key=lambda txn: txn.first_offset):
            firsts, markers = ranges.setdefault(txn.producer_id, ([], []))
            firsts.append(txn.first_offset)
            markers.append(txn.last_offset)
        self._ranges = ranges

    def contains(self, header: BatchHeader) -> bool:
        if not header.is_transactional:
            return False
        found = self._ranges.get(header.producer_id)
        if found is None:
            return False
        firsts, markers = found
        index = bisect.bisect_right(firsts, header.base_offset) - 1
        return index >= 0 and header.base_offset < markers[index]


@dataclass(slots=True)
class _Stats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    records_without_key: int = 0
    segments_replaced: int = 0
    unreported_bytes: int = 0


@dataclass(slots=True)
class _Output:
    """Batches of the new segment waiting to be written, one I/O buffer at a time."""

    segment: LogSegment
    data: bytearray = field(default_factory=bytearray)
    batches: list[AppendedBatch] = field(default_factory=list)


class _Pass:
    def __init__(
        self,
        log: PartitionLog,
        config: CleanerConfig,
        throttler: Throttler,
        now_ms: int,
        aborted: Callable[[], bool],
    ) -> None:
        self.log = log
        self.config = config
        self.log_config: LogConfig = log.config
        self.throttler = throttler
        self.aborted = aborted
        self.tombstone_horizon_ms = now_ms - self.log_config.delete_retention_ms
        # Segment base offset -> whether it is past the delete horizon (_past_delete_horizon).
        self.horizons: dict[int, bool] = {}
        self.first_dirty = 0  # set when the pass knows its bounds
        self.now_ms = now_ms
        # Read before the segments are: a truncation after it voids the pass's swaps.
        self.truncation_count = log.truncation_count
        self.stats = _Stats()
        # Producers whose current transaction has a batch kept in this pass.
        self.txn_data_kept: set[int] = set()
        # Producers whose current epoch only a marker carries: those markers are kept.
        self.marker_epochs = log.producer_marker_epochs()

    # -- the pass ------------------------------------------------------------------------

    def run(self, offsets: CleanableOffsets) -> CleanResult | None:
        started = time.monotonic()
        log = self.log
        segments = log.segments
        # Clamped defensively: whatever the manager computed, never the active segment,
        # nothing at or past the high watermark or the first unstable offset.
        bound = min(
            offsets.first_uncleanable_offset,
            log.high_watermark,
            log.last_stable_offset,
            segments.active.base_offset,
        )
        cleanable: list[LogSegment] = []
        next_bases: list[int] = []
        for index in range(len(segments) - 1):
            next_base = segments.next_base_offset(index)
            assert next_base is not None
            if next_base > bound:
                break
            cleanable.append(segments[index])
            next_bases.append(next_base)
        first_dirty = max(offsets.first_dirty_offset, segments[0].base_offset)
        self.first_dirty = first_dirty
        dirty_from = next((i for i, end in enumerate(next_bases) if end > first_dirty), None)
        if dirty_from is None:
            return None
        aborted = _AbortedRanges(
            log.collect_aborted_transactions(segments[0].base_offset, next_bases[-1])
        )
        producer_last_offsets = log.producer_last_offsets()
        offset_map = OffsetMap(self.config.dedupe_buffer_bytes, self.config.load_factor)
        fitted = self._build_offset_map(offset_map, cleanable[dirty_from:], first_dirty, aborted)
        end = dirty_from + fitted
        end_offset = next_bases[end - 1]
        for group in _group_segments(cleanable[:end], next_bases[:end], self.log_config):
            if not self._clean_group(group, offset_map, aborted, producer_last_offsets):
                return None
        self._report_io(0, flush=True)
        stats = self.stats
        result = CleanResult(
            end_offset=end_offset,
            bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written,
            records_read=stats.records_read,
            records_retained=stats.records_retained,
            segments_replaced=stats.segments_replaced,
            elapsed_s=time.monotonic() - started,
            records_without_key=stats.records_without_key,
        )
        _log.info(
            "%s: cleaned offsets %d..%d: %d segments replaced, %d of %d records kept, "
            "%d -> %d bytes in %.3f s",
            log.directory,
            segments[0].base_offset,
            end_offset,
            result.segments_replaced,
            result.records_retained,
            result.records_read,
            result.bytes_read,
            result.bytes_written,
            result.elapsed_s,
        )
        return result

    def _build_offset_map(
        self,
        offset_map: OffsetMap,
        dirty: Sequence[LogSegment],
        first_dirty: int,
        aborted: _AbortedRanges,
    ) -> int:
        """Enter the keys of the dirty segments, a whole segment at a time, as far as they
        fit; returns how many segments fit (at least one, else UncleanableLogError).
        Records of aborted transactions and control batches are not entered."""
        for fitted, segment in enumerate(dirty):
            entries: dict[bytes, int] = {}
            for position, header, chunk, relative in self._read(segment):
                if (
                    header.last_offset < first_dirty
                    or header.is_control
                    or aborted.contains(header)
                ):
                    continue
                records = self._spans(segment, position, header, chunk, relative)
                for span in records.spans:
                    key = span.key
                    if key is not None and span.offset >= first_dirty:
                        entries[key_digest(key)] = span.offset
            if not offset_map.merge(entries):
                if fitted == 0:
                    raise UncleanableLogError(
                        f"{segment.log_path}: its {len(entries)} keys do not fit the dedupe "
                        f"buffer of {offset_map.capacity} entries "
                        f"({self.config.dedupe_buffer_bytes} bytes at load factor "
                        f"{self.config.load_factor}); raise log.cleaner.dedupe.buffer.size"
                    )
                return fitted
        return len(dirty)

    def _clean_group(
        self,
        group: Sequence[LogSegment],
        offset_map: OffsetMap,
        aborted: _AbortedRanges,
        producer_last_offsets: dict[int, int],
    ) -> bool:
        """Rewrite ``group`` into one new segment and swap it in; False when the swap found
        the log changed (the new segment is then deleted)."""
        log = self.log
        new = LogSegment.create(
            log.directory, group[0].base_offset, self.log_config, self.now_ms, CLEANED_SUFFIX
        )
        swapped = committed = False
        try:
            output = _Output(new)
            aborts = {
                entry.last_offset: entry for segment in group for entry in segment.txn_index.entries
            }
            for segment in group:
                for position, header, chunk, relative in self._read(segment):
                    kept = self._clean_batch(
                        segment,
                        position,
                        header,
                        chunk,
                        relative,
                        offset_map,
                        aborted,
                        producer_last_offsets,
                    )
                    if kept is None:
                        continue
                    if header.is_control and header.base_offset in aborts:
                        new.txn_index.append(aborts[header.base_offset])
                    self._write(output, kept, header)
            self._flush(output)
            new.seal()
            # The delete horizon (_past_delete_horizon): a group holding dirty records starts
            # its clock now, at their first pass; an all-clean one keeps its sources' time.
            if any(self._dirty(segment) for segment in group):
                new.set_last_modified_ms(self.now_ms)
            else:
                new.set_last_modified_ms(max(map(self._last_modified_ms, group)))
            fault_point("cleaned_written")
            new.flush()
            fsync_dir(log.directory)
            fault_point("cleaned_synced")
            swapped = log.replace_segments(group, new, truncation_count=self.truncation_count)
        except SwapIncompleteError:
            # Committed: the next open finishes the swap from the new segment's files.
            committed = True
            new.release()
            raise
        except OSError as exc:
            raise self._storage_error(exc) from exc
        finally:
            if not swapped and not committed:
                new.delete_files()
        if swapped:
            self.stats.segments_replaced += len(group)
        return swapped

    def _clean_batch(
        self,
        segment: LogSegment,
        position: int,
        header: BatchHeader,
        chunk: bytes,
        relative: int,
        offset_map: OffsetMap,
        aborted: _AbortedRanges,
        producer_last_offsets: dict[int, int],
    ) -> bytes | memoryview | None:
        """The batch as it goes to the new segment (unchanged, rewritten or empty), or None
        when it goes."""
        whole = memoryview(chunk)[relative : relative + header.size]
        stats = self.stats
        if header.is_control:
            stats.records_read += header.records_count
            if not header.has_producer_id:
                return whole
            # A marker: kept while its transaction has a batch kept, while it is young, and
            # while it alone carries its producer's current epoch.
            has_data = header.producer_id in self.txn_data_kept
            self.txn_data_kept.discard(header.producer_id)
            if (
                has_data
                or not self._past_delete_horizon(segment)
                or self.marker_epochs.get(header.producer_id) == header.producer_epoch
            ):
                stats.records_retained += header.records_count
                return whole
            return None
        records = self._spans(segment, position, header, chunk, relative)
        spans = records.spans
        stats.records_read += len(spans)
        kept: list[RecordSpan] = []
        if not aborted.contains(header):
            get = offset_map.get
            tombstones_expired = self._past_delete_horizon(segment)
            for span in spans:
                key = span.key
                if key is None:
                    stats.records_without_key += 1
                elif span.offset >= get(key_digest(key)) and not (
                    span.is_tombstone and tombstones_expired
                ):
                    kept.append(span)
        last_of_producer = (
            header.has_producer_id
            and producer_last_offsets.get(header.producer_id) == header.last_offset
        )
        if not kept and not last_of_producer:
            return None
        stats.records_retained += len(kept)
        if header.is_transactional:
            self.txn_data_kept.add(header.producer_id)
        if len(kept) == len(spans):
            return whole
        return rewrite_batch(records, kept)

    def _past_delete_horizon(self, segment: LogSegment) -> bool:
        """Whether the tombstones (and the markers with no batch of their transaction kept) of
        ``segment`` may go: it lies wholly in the clean section (a pass went over it before,
        so a tombstone never goes in the pass that removes the value it deletes) and the
        node last wrote it more than delete.retention.ms ago, by its file's modification
        time, the node's clock. A cleaned segment holding dirty records is given the time of
        that pass, so its tombstones stay delete.retention.ms after their first pass (what
        Kafka's delete horizon, KIP-534, gives); an all-clean one keeps its sources' latest.
        Not the batch timestamps: under CreateTime they are the producer's clock, and a
        tombstone written just now with an old timestamp must still be seen."""
        horizon = self.horizons.get(segment.base_offset)
        if horizon is None:
            horizon = (
                not self._dirty(segment)
                and self._last_modified_ms(segment) < self.tombstone_horizon_ms
            )
            self.horizons[segment.base_offset] = horizon
        return horizon

    def _dirty(self, segment: LogSegment) -> bool:
        """Whether ``segment`` holds offsets at or past the pass's first dirty offset."""
        return segment.next_offset > self.first_dirty

    def _last_modified_ms(self, segment: LogSegment) -> int:
        try:
            return segment.last_modified_ms
        except OSError as exc:
            # Purged under the pass (a truncation, retention): no evidence of a bad disk.
            if not self._still_sealed(segment):
                raise _PassAborted from exc
            raise self._storage_error(exc) from exc

    # -- I/O -------------------------------------------------------------------------------

    def _read(self, segment: LogSegment) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """Every batch of a sealed segment, CRC-checked, polling ``aborted`` between batches
        and reporting the bytes read to the throttler."""
        end = 0
        try:
            for position, header, chunk, relative in segment.iter_batches(
                self.config.io_buffer_bytes
            ):
                if self.aborted():
                    raise _PassAborted
                try:
                    verify_crc(chunk, relative, header)
                except RecordError as exc:
                    raise self._damaged(
                        segment,
                        f"the batch at position {position} (base offset "
                        f"{header.base_offset}) is damaged: {exc}",
                    ) from exc
                self.stats.bytes_read += header.size
                self._report_io(header.size)
                yield position, header, chunk, relative
                end = position + header.size
        except RecordError as exc:
            raise self._damaged(
                segment, f"a batch header after position {end} is damaged: {exc}"
            ) from exc
        except OSError as exc:
            if not self.log.closed and not self._still_sealed(segment):
                raise _PassAborted from exc
            raise self._storage_error(exc) from exc
        if end != segment.size_bytes:
            raise self._damaged(
                segment,
                f"the batch at position {end} runs past the end of the sealed segment "
                f"({segment.size_bytes} bytes)",
            )

    def _spans(
        self, segment: LogSegment, position: int, header: BatchHeader, chunk: bytes, relative: int
    ) -> BatchRecords:
        try:
            return record_spans(chunk, relative, header, check_crc=False)
        except RecordError as exc:
            raise self._damaged(
                segment,
                f"the batch at position {position} (base offset {header.base_offset}) "
                f"cannot be decoded: {exc}",
            ) from exc

    def _damaged(self, segment: LogSegment, problem: str) -> Exception:
        """UncleanableLogError naming the file, unless the segment left the log (truncation,
        retention), became active or the log was truncated while it was read: then what was
        read is no evidence of damage and the pass stops (_PassAborted)."""
        if not self._still_sealed(segment):
            return _PassAborted()
        return UncleanableLogError(f"{segment.log_path}: {problem}")

    def _still_sealed(self, segment: LogSegment) -> bool:
        """Whether ``segment`` still holds what the pass began reading: in the log, not
        active, and no truncation since (which may have cut it and sealed it again)."""
        log = self.log
        segments = log.segments
        return (
            log.truncation_count == self.truncation_count
            and any(s is segment for s in segments)
            and segments.active is not segment
        )

    def _write(self, output: _Output, batch: bytes | memoryview, header: BatchHeader) -> None:
        size = len(batch)
        # A rewritten batch's largest timestamp is its kept records' (read from the batch
        # written: a recompressed batch may even keep its old size).
        max_timestamp = read_header(batch).max_timestamp
        output.batches.append(
            AppendedBatch(len(output.data), size, header.last_offset, max_timestamp)
        )
        output.data += batch
        if len(output.data) >= self.config.io_buffer_bytes:
            self._flush(output)

    def _flush(self, output: _Output) -> None:
        if not output.batches:
            return
        output.segment.append(output.data, output.batches)
        self.stats.bytes_written += len(output.data)
        self._report_io(len(output.data))
        output.data = bytearray()
        output.batches = []

    def _report_io(self, size: int, *, flush: bool = False) -> None:
        stats = self.stats
        stats.unreported_bytes += size
        if stats.unreported_bytes >= THROTTLE_REPORT_BYTES or (flush and stats.unreported_bytes):
            self.throttler.maybe_throttle(stats.unreported_bytes)
            stats.unreported_bytes = 0

    def _storage_error(self, exc: OSError) -> Exception:
        if self.log.closed:
            return LogClosedError(f"the log of {self.log.topic_partition} closed during cleaning")
        return LogStorageError(f"cannot clean {self.log.directory}: {exc}")


def _group_segments(
    segments: Sequence[LogSegment], next_bases: Sequence[int], config: LogConfig
) -> list[list[LogSegment]]:
    """Consecutive segments in groups that fit one new segment: total size within
    segment.bytes, index entries within segment.index.bytes, offsets within int32 of the
    group's base (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    index = 0
    while index < len(segments):
        first = segments[index]
        group = [first]
        size = first.size_bytes
        offset_entries = first.offset_index.entries
        time_entries = first.time_index.entries
        index += 1
        while index < len(segments):
            segment = segments[index]
            if (
                size + segment.size_bytes > config.segment_bytes
                or offset_entries + segment.offset_index.entries > config.offset_index_entries_max
                or time_entries + segment.time_index.entries > config.time_index_entries_max
                or next_bases[index] - 1 - first.base_offset > INT32_MAX
            ):
                break
            group.append(segment)
            size += segment.size_bytes
            offset_entries += segment.offset_index.entries
            time_entries += segment.time_index.entries
            index += 1
        groups.append(group)
    return groups
