"""The log of one partition replica: append, read, roll, truncate, delete, look up by time.

A directory of segments (log_segment.py) plus the offsets that frame them: log start offset
(first readable), log end offset (next to assign), high watermark (replicated to the ISR, the
limit of what consumers see; kept here, advanced by the replication layer) and recovery point
(fsynced up to). Kafka's UnifiedLog and LocalLog in one class, with the rules of a valid
append in log_validator.py and start-up recovery in loader.py.

Transactions: the producer state (producer_state.py) tracks open transactions; the last stable
offset (LSO, the limit of what READ_COMMITTED readers see) is min(first unstable offset, HW),
kept up to date under the lock at every change of either, and read without one. An ABORT
marker adds an entry to the ``.txnindex`` of the segment it is written to
(transaction_index.py), which READ_COMMITTED fetches collect.

The API is synchronous: call it from a worker thread (or directly for small operations). All
changes are serialised by one lock; reads take no lock and work on an immutable snapshot of
the segment list, so they never wait for an append, a roll or retention. Segments that leave
the log are renamed ``*.deleted`` and removed file.delete.delay.ms later (their descriptors
stay open until then), so a read that already picked a segment finishes on it.

Compaction (cleaner.py) reads sealed segments without the lock and swaps each cleaned segment
in with ``replace_segments``, under the lock, only if the segments it read are still the log's.

Reads concurrent with truncate_to are not supported: a replica truncates only as a follower,
when it serves no reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from brook.record import ControlType, RecordError
from brook_storage_node.log.checkpoints import TEMP_SUFFIX
from brook_storage_node.log.errors import (
    InvariantViolationError,
    LogClosedError,
    LogStorageError,
    OffsetOutOfRangeError,
    StaleLeaderEpochError,
    SwapIncompleteError,
)
from brook_storage_node.log.failpoints import fault_point
from brook_storage_node.log.files import Buffer, fsync_dir, may_exist, write_atomically
from brook_storage_node.log.leader_epoch import LeaderEpochFileCache
from brook_storage_node.log.loader import load_log
from brook_storage_node.log.log_config import LONG_MAX, LogConfig
from brook_storage_node.log.log_segment import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    segment_file_name,
)
from brook_storage_node.log.log_segments import LogSegments
from brook_storage_node.log.log_validator import (
    AppendOrigin,
    ValidatedAppend,
    check_append_offsets,
    validate_follower_append,
    validate_leader_append,
)
from brook_storage_node.log.producer_state import (
    ActiveProducer,
    BatchMetadata,
    ProducerStateManager,
    VerificationGuard,
    is_producer_batch,
    read_marker,
)
from brook_storage_node.log.retention import deletable_prefix
from brook_storage_node.log.time_index import NO_TIMESTAMP, TimestampOffset
from brook_storage_node.log.topic_partition import TopicPartition
from brook_storage_node.log.transaction_index import AbortedTxn

_log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """The outcome of an append: what a produce response reports."""

    first_offset: int
    last_offset: int
    # The timestamp the leader stamped (LogAppendTime topics), else -1.
    log_append_time_ms: int
    log_start_offset: int
    max_timestamp: int
    record_count: int
    size_bytes: int
    # A retried idempotent batch already in the log: the offsets are the original ones and
    # nothing was appended.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchData:
    """The outcome of a read: whole raw batches and where to continue."""

    records: memoryview
    # The offset to fetch next: after the last batch returned (the requested offset if none).
    next_offset: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int


# (COMMIT or ABORT, coordinator epoch) of a marker, by the index of its batch in an append.
_Markers = dict[int, tuple[ControlType, int]]

RollListener = Callable[["PartitionLog", int], None]
# Called under the log's lock before a truncation removes data, with the log end offset it
# leaves; if it raises, the log is not truncated.
TruncationListener = Callable[["PartitionLog", int], None]


class PartitionLog:
    """Open with ``PartitionLog.open``; close with ``close``."""

    def __init__(
        self,
        *,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochFileCache,
        clock_ms: Callable[[], int],
        on_roll: RollListener | None,
        on_truncate: TruncationListener | None,
    ) -> None:
        self.directory = directory
        self.topic_partition = TopicPartition.from_dir_name(directory.name)
        self.leader_epoch_cache = epoch_cache
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._high_watermark = log_start_offset
        self._last_stable_offset = log_start_offset
        self._recovery_point = recovery_point
        self._clock_ms = clock_ms
        self._on_roll = on_roll
        self._on_truncate = on_truncate
        self._lock = threading.RLock()
        self._closed = False
        # Why the log went offline (an I/O error in the middle of a swap), None while online.
        self._offline: str | None = None
        # Bumped by every truncation: a flush that raced one must not move the recovery point
        # over data written after it.
        self._truncations = 0
        self._last_flush_ms = clock_ms()
        self._dir_dirty = False
        self._pending_deletes: list[tuple[LogSegment, int]] = []
        self.producer_state = ProducerStateManager(directory)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        had_clean_shutdown: bool = False,
        clock_ms: Callable[[], int] = wall_clock_ms,
        on_roll: RollListener | None = None,
        on_truncate: TruncationListener | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``, named ``topic-partition``.

        The defaults recover every segment: safe for a log whose checkpoints are unknown. The
        log manager passes the checkpointed offsets and whether the shutdown was clean.
        """
        TopicPartition.from_dir_name(directory.name)
        try:
            if not directory.exists():
                directory.mkdir()
                fsync_dir(directory.parent)
            epoch_cache = LeaderEpochFileCache.load(directory)
            loaded = load_log(
                directory,
                config,
                recovery_point=recovery_point,
                had_clean_shutdown=had_clean_shutdown,
                log_start_offset=log_start_offset,
                epoch_cache=epoch_cache,
                now_ms=clock_ms(),
            )
        except OSError as exc:
            raise LogStorageError(f"cannot open the log in {directory}: {exc}") from exc
        segments = LogSegments(loaded.segments)
        log = cls(
            directory=directory,
            config=config,
            segments=segments,
            log_start_offset=max(log_start_offset, segments[0].base_offset),
            log_end_offset=loaded.log_end_offset,
            recovery_point=loaded.recovery_point,
            epoch_cache=epoch_cache,
            clock_ms=clock_ms,
            on_roll=on_roll,
            on_truncate=on_truncate,
        )
        if log._log_start_offset > log._log_end_offset:
            _log.warning(
                "%s: log start offset %d is past the log end offset %d; starting empty there",
                directory,
                log._log_start_offset,
                log._log_end_offset,
            )
            log.truncate_fully_and_start_at(log._log_start_offset)
        epoch_cache.truncate_from_start(log._log_start_offset)
        # A legitimate clamp, not a violation: the checkpointed HW may be past what recovery
        # kept (a crash lost an unflushed tail) or below a log start moved since it was written.
        log._high_watermark = min(max(high_watermark, log._log_start_offset), log._log_end_offset)
        with log._storage_errors("rebuild the producer state of"):
            log._rebuild_producer_state_locked(loaded.txn_index_rebuild_from)
        _log.info(
            "%s: opened with %d segments, offsets %d..%d, high watermark %d (%d recovered)",
            directory,
            len(segments),
            log._log_start_offset,
            log._log_end_offset,
            log._high_watermark,
            loaded.recovered_segments,
        )
        return log

    # -- state ----------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The first offset a READ_COMMITTED reader may not see yet (<= the HW)."""
        return self._last_stable_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return self._segments.total_bytes()

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> LogSegments:
        """The current segments: an immutable snapshot, the last one active."""
        return self._segments

    def producer_last_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last batch, for every producer the state knows
        with a batch in its current epoch (the batches the cleaner keeps, possibly empty)."""
        with self._lock:
            return {
                producer_id: entry.last_offset
                for producer_id, entry in self.producer_state.producers.items()
                if entry.batches
            }

    def producer_marker_epochs(self) -> dict[int, int]:
        """Producer id -> epoch, for every producer the state knows whose current epoch was
        opened by a marker and has no batch yet (a fencing abort bumped it): the cleaner keeps
        that epoch's markers, or a replay would bring back the fenced epoch (Kafka's rule)."""
        with self._lock:
            return {
                producer_id: entry.producer_epoch
                for producer_id, entry in self.producer_state.producers.items()
                if not entry.batches
            }

    @property
    def segment_base_offsets(self) -> tuple[int, ...]:
        return tuple(segment.base_offset for segment in self._segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of ``epoch`` in this log, for a follower's truncation."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic settings; index sizes and interval take effect at the next roll."""
        with self._lock:
            self._config = config

    # -- appends --------------------------------------------------------------------------

    def append(
        self,
        records: Buffer,
        *,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verify: bool = False,
        guard: VerificationGuard | None = None,
        hold_unknown_producers: bool = False,
    ) -> LogAppendInfo:
        """Append a producer's record batches as leader of ``leader_epoch``. ``verify``
        (transaction.partition.verification.enable): a transactional batch that would open
        a transaction needs ``guard``, still current (``start_transaction_verification``),
        else INVALID_TXN_STATE. ``hold_unknown_producers``: the first batch here of a
        producer with no state that starts past sequence 0 is refused as ahead of 0
        (``ProducerStateManager.check_append``).

        Validates them (log_validator), assigns offsets from the log end offset, stamps the
        leader epoch (and the append time on LogAppendTime topics) and writes them; O(1) in
        the size of the log. A rejected append raises RecordError or LogError and changes
        nothing. A leader epoch below the latest in the epoch history is a
        StaleLeaderEpochError (leadership moved on while the append was on its way: the
        client retries); a negative one is an InvariantViolationError (no leader has one).
        """
        with self._lock:
            self._check_open()
            if leader_epoch < 0:
                raise InvariantViolationError(
                    f"{self.topic_partition}: a leader append in epoch {leader_epoch}"
                )
            now_ms = self._clock_ms()
            validated = validate_leader_append(
                records,
                next_offset=self._log_end_offset,
                leader_epoch=leader_epoch,
                config=self._config,
                now_ms=now_ms,
                origin=origin,
            )
            # Checked and appended under one lock: two batches of one producer can never
            # both pass the sequence check against the same state.
            markers = _markers_of(validated)
            for index, (header, _) in enumerate(validated.headers):
                if index in markers:
                    self.producer_state.check_marker(
                        header.producer_id, header.producer_epoch, markers[index][1]
                    )
                elif is_producer_batch(header):
                    duplicate = self.producer_state.check_append(
                        header,
                        verify=verify,
                        guard=guard,
                        hold_unknown_producers=hold_unknown_producers,
                    )
                    if duplicate is not None:
                        return self._duplicate_info(duplicate, validated)
            info = self._append_locked(validated, now_ms, dense=True)
            with self._storage_errors("index an aborted transaction of"):
                self._apply_producer_batches(validated, now_ms, markers)
            return info

    def start_transaction_verification(
        self, producer_id: int, producer_epoch: int
    ) -> VerificationGuard | None:
        """The guard a transactional batch of the producer must bring to ``append`` once the
        coordinator has verified it; None when it needs none (its transaction is open here).
        InvalidProducerEpochError for a fenced epoch (producer_state.py)."""
        with self._lock:
            return self.producer_state.start_verification(
                producer_id, producer_epoch, self._clock_ms()
            )

    def abandon_transaction_verification(self, guard: VerificationGuard) -> None:
        """The coordinator refused the verification: ``guard`` is withdrawn."""
        with self._lock:
            self.producer_state.abandon_verification(guard)

    def _duplicate_info(self, batch: BatchMetadata, validated: ValidatedAppend) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=batch.first_offset,
            last_offset=batch.last_offset,
            log_append_time_ms=-1 if validated.log_append_time_ms < 0 else batch.timestamp_ms,
            log_start_offset=self._log_start_offset,
            max_timestamp=batch.timestamp_ms,
            record_count=0,
            size_bytes=0,
            duplicate=True,
        )

    def _apply_producer_batches(
        self, validated: ValidatedAppend, now_ms: int, markers: _Markers
    ) -> None:
        """Record the appended batches in the producer state; an ABORT marker's transaction
        goes to the aborted index of the segment it was written to (the active one)."""
        state = self.producer_state
        for index, ((header, first_offset), batch) in enumerate(
            zip(validated.headers, validated.batches, strict=True)
        ):
            if index in markers:
                control_type, coordinator_epoch = markers[index]
                completed = state.apply_marker(
                    header, first_offset, control_type, coordinator_epoch, append_time_ms=now_ms
                )
                if completed is not None and completed.aborted:
                    self._segments.active.txn_index.append(
                        AbortedTxn(
                            completed.producer_id,
                            completed.first_offset,
                            completed.last_offset,
                            state.last_stable_offset_after(completed),
                        )
                    )
            elif is_producer_batch(header):
                state.apply(header, first_offset, batch.max_timestamp, append_time_ms=now_ms)
        self._update_last_stable_offset_locked()

    def _update_last_stable_offset_locked(self) -> None:
        """LSO = min(first unstable offset (at least the log start), HW), as Kafka's."""
        high_watermark = self._high_watermark
        first = self.producer_state.first_unstable_offset(high_watermark)
        if first is None:
            self._last_stable_offset = high_watermark
        else:
            self._last_stable_offset = min(max(first, self._log_start_offset), high_watermark)

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        """Append batches copied from the leader, offsets and epochs as the leader set them.

        They must be whole, pass their CRCs and start at or after the log end offset; the
        leader epochs they carry extend the epoch history.
        """
        with self._lock:
            self._check_open()
            validated = validate_follower_append(
                records, log_end_offset=self._log_end_offset, config=self._config
            )
            markers = _markers_of(validated, copied_into=self.directory)
            now_ms = self._clock_ms()
            info = self._append_locked(validated, now_ms, dense=False)
            with self._storage_errors("index an aborted transaction of"):
                self._apply_producer_batches(validated, now_ms, markers)
            return info

    def _append_locked(
        self, validated: ValidatedAppend, now_ms: int, *, dense: bool
    ) -> LogAppendInfo:
        """Write validated batches at the log end; ``dense``: a leader's, whose offsets were
        assigned here (a follower's may leave gaps: the leader's log may be compacted)."""
        # Before a byte is written (TigerBeetle's habit): what goes to disk starts where the
        # log ends and, for a leader, numbers every record once.
        check_append_offsets(validated, self._log_end_offset, dense=dense)
        with self._storage_errors("append to"):
            # The epoch is recorded before the data, as Kafka does: an epoch start with no
            # data after it is harmless, data whose epoch was never recorded is not.
            for epoch, start_offset in validated.epoch_starts:
                latest = self.leader_epoch_cache.latest_epoch
                if latest is None or epoch > latest:
                    self.leader_epoch_cache.assign(epoch, start_offset)
                elif dense and epoch < latest:
                    # A leader's one epoch, checked before anything is written: the append
                    # read its epoch, then leadership moved away and back (make_leader
                    # recorded the newer epoch) before it reached this lock. Written, it
                    # would corrupt the history followers truncate by.
                    raise StaleLeaderEpochError(
                        f"{self.topic_partition}: a leader append in epoch {epoch}, but the "
                        f"epoch history already reaches epoch {latest}; leadership moved "
                        "meanwhile, retry"
                    )
            active = self._segments.active
            reason = active.should_roll(
                self._config,
                messages_bytes=validated.size_bytes,
                max_timestamp=validated.max_timestamp,
                max_offset=validated.last_offset,
                now_ms=now_ms,
            )
            if reason is not None:
                active = self._roll_locked(validated.first_offset, now_ms, reason)
            active.append(validated.data, validated.batches)
            self._log_end_offset = validated.last_offset + 1
            if self._log_end_offset - self._recovery_point >= self._config.flush_messages:
                self.flush()
        return LogAppendInfo(
            first_offset=validated.first_offset,
            last_offset=validated.last_offset,
            log_append_time_ms=validated.log_append_time_ms,
            log_start_offset=self._log_start_offset,
            max_timestamp=validated.max_timestamp,
            record_count=validated.record_count,
            size_bytes=validated.size_bytes,
        )

    def _roll_locked(self, new_base: int, now_ms: int, reason: str) -> LogSegment:
        old = self._segments.active
        assert new_base >= old.base_offset
        if old.size_bytes == 0 and old.base_offset == new_base:
            return old
        # Created before the old one is sealed, so a failure leaves the log as it was.
        new = LogSegment.create(self.directory, new_base, self._config, now_ms)
        if old.size_bytes == 0:
            # An empty segment before a gap in offsets would only be a hole: replace it.
            self._segments = self._segments.without([old]).with_segment(new)
            self._schedule_delete_locked([old], now_ms)
        else:
            old.seal()
            self._segments = self._segments.with_segment(new)
        self._dir_dirty = True
        _log.info("%s: rolled to a new segment at offset %d (%s)", self.directory, new_base, reason)
        # Each roll bounds the replay after a crash to about the active segment.
        self._write_producer_snapshot_locked(new_base)
        if self._on_roll is not None:
            try:
                self._on_roll(self, new_base)
            except Exception:
                _log.exception("%s: roll listener failed", self.directory)
        return new

    # -- reads ----------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchData:
        """Whole raw batches from the one holding ``offset``, up to ``max_bytes``.

        Only batches ending at or before ``max_offset`` (exclusive; consumers pass the high
        watermark) are returned. If the first batch alone is larger than ``max_bytes`` it is
        still returned when ``min_one_batch``, so a consumer always progresses. Data comes
        from one segment per call. OffsetOutOfRangeError for an offset below the log start
        or above the log end; reading at the log end returns no data.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self._check_open()
        # Read the end before the segments: a roll after this point only adds data the
        # bound excludes.
        log_end = self._log_end_offset
        log_start = self._log_start_offset
        last_stable_offset = self._last_stable_offset
        high_watermark = self._high_watermark
        segments = self._segments
        if offset < log_start or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.topic_partition}'s range "
                f"[{log_start}, {log_end}]"
            )
        limit = log_end if max_offset is None else min(max_offset, log_end)
        records, next_offset = memoryview(b""), offset
        if offset < limit:
            with self._storage_errors("read from"):
                for segment in segments.from_offset(offset):
                    result = segment.read(
                        offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch
                    )
                    if result is not None:
                        records, next_offset = result
                        break
        return FetchData(
            records, next_offset, log_start, log_end, high_watermark, last_stable_offset
        )

    def collect_aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [``start``, ``upper``) (Kafka's
        collectAbortedTransactions): from the aborted indexes of the segment holding
        ``start`` and later ones, until an entry's LSO shows no later abort can overlap."""
        self._check_open()
        found: list[AbortedTxn] = []
        with self._storage_errors("read the aborted transactions of"):
            for segment in self._segments.from_offset(start):
                entries, complete = segment.txn_index.collect(start, upper)
                found.extend(entries)
                if complete:
                    break
        return found

    def describe_producers(self) -> list[ActiveProducer]:
        """The producers this replica knows, as DescribeProducers reports them."""
        with self._lock:
            return [entry.describe() for entry in self.producer_state.producers.values()]

    def offset_for_timestamp(
        self, timestamp_ms: int, *, max_offset: int | None = None
    ) -> TimestampOffset | None:
        """The first record with timestamp >= ``timestamp_ms`` (ListOffsets), or None.

        ``max_offset`` (exclusive) hides records not yet visible, e.g. above the high watermark.
        """
        self._check_open()
        log_start = self._log_start_offset
        with self._storage_errors("search"):
            for segment in self._segments:
                if segment.max_timestamp < timestamp_ms:
                    continue
                found = segment.find_offset_by_timestamp(timestamp_ms, log_start)
                if found is not None:
                    if max_offset is not None and found.offset >= max_offset:
                        return None
                    return found
        return None

    def offset_of_max_timestamp(self, *, max_offset: int) -> TimestampOffset | None:
        """The first record below ``max_offset`` (exclusive) carrying the largest timestamp
        of the visible log (ListOffsets' MAX_TIMESTAMP, KIP-734), or None when no record
        there has a timestamp.

        Two passes: the largest timestamp (each segment's tracked maximum where the segment
        lies wholly inside the range), then the first record reaching it, by the time index.
        """
        self._check_open()
        log_start = self._log_start_offset
        largest = NO_TIMESTAMP
        with self._storage_errors("search"):
            for segment in self._segments:
                if segment.base_offset >= max_offset:
                    break
                largest = max(largest, segment.max_timestamp_between(log_start, max_offset))
        if largest == NO_TIMESTAMP:
            return None
        return self.offset_for_timestamp(largest, max_offset=max_offset)

    # -- high watermark -------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> int:
        """Set a follower's high watermark from its leader's (Kafka's
        ``maybeUpdateHighWatermark``); returns the value set.

        A legitimate clamp, Kafka's min(leaderHW, LEO), made under the lock so that an append
        or truncation on a thread cannot move the end between the read and the write: the
        leader's HW counts records this follower has not fetched yet. It may move back (a new
        leader's HW can trail the one its predecessor announced) and is raised to the log
        start (the leader's HW may be older than the log start this replica has taken)."""
        with self._lock:
            return self._set_high_watermark_locked(min(leader_high_watermark, self._log_end_offset))

    def update_high_watermark(self, offset: int) -> int:
        """Set a follower's high watermark (Kafka's updateHighWatermark); returns the value set.

        As ``update_follower_high_watermark``, without the clamp: past the log end offset it
        is an InvariantViolationError, a bug, not a state."""
        with self._lock:
            return self._set_high_watermark_locked(offset)

    def _set_high_watermark_locked(self, offset: int) -> int:
        if offset > self._log_end_offset:
            raise InvariantViolationError(
                f"{self.topic_partition}: high watermark {offset} past the log end offset "
                f"{self._log_end_offset}"
            )
        self._high_watermark = max(offset, self._log_start_offset)
        self._update_last_stable_offset_locked()
        return self._high_watermark

    def maybe_increment_high_watermark(self, replicas_end_offset: int | None = None) -> bool:
        """Move a leader's high watermark up to the smallest log end offset in its ISR; True
        if it moved. ``replicas_end_offset``: the smallest of the other members' (None when
        this replica is alone in the ISR); this log's own end is read here, under the lock, so
        a follower's truncation still finishing on a thread as the node takes over cannot slip
        between the read and the move (Kafka's leaderIsrUpdateLock keeps it out; Kafka then
        asserts the HW is within the log end, which here holds by construction). A lower value
        changes nothing: on a leader the HW never goes back."""
        with self._lock:
            new = self._log_end_offset
            if replicas_end_offset is not None:
                new = min(new, replicas_end_offset)
            if new <= self._high_watermark:
                return False
            self._high_watermark = new
            self._update_last_stable_offset_locked()
            return True

    # -- truncation and deletion ----------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding ``offset`` or later (a follower diverged from its leader).

        A batch that straddles ``offset`` goes whole, so the log end offset may end below
        ``offset``. True if anything was removed: records, or leader epochs that start at or
        past the log end. Before records are removed, ``on_truncate`` (if set) is called with
        the log end they leave.

        With no record to remove, the epoch history is still trimmed at the log end (Kafka's
        rule): a node that became leader, recorded "my epoch starts at my log end" and
        appended nothing keeps that entry while it follows the next leader, and a follower
        whose latest epoch names no record asks its leader about an epoch the leader never
        saw — a divergence that only dropping the entry resolves.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                with self._storage_errors("truncate"):
                    return self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
            segments = self._segments
            if offset < segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            if self._on_truncate is not None:
                # The log end the truncation leaves is at least the base of the segment it
                # cuts (a batch straddling ``offset`` goes whole, and ``offset`` may sit in a
                # gap the cleaner left): that base bounds it from below, which is all a
                # listener lowering a checkpoint needs.
                self._on_truncate(self, segments[segments.floor_index(offset)].base_offset)
            now_ms = self._clock_ms()
            with self._storage_errors("truncate"):
                doomed = [segment for segment in segments if segment.base_offset > offset]
                kept = segments.without(doomed)
                active = kept.active
                if doomed:
                    active.make_active()
                removed = active.truncate_to(offset, now_ms)
                self._segments = kept
                self._schedule_delete_locked(doomed, now_ms)
                self._after_truncation_locked(active.next_offset)
                self._rebuild_producer_state_locked()
            _log.info(
                "%s: truncated to offset %d (%d bytes and %d segments removed), log end %d",
                self.directory,
                offset,
                removed,
                len(doomed),
                self._log_end_offset,
            )
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a follower behind the leader's
        log start offset); ``on_truncate`` (if set) is called with ``offset`` first."""
        if offset < 0:
            raise ValueError(f"cannot start a log at a negative offset {offset}")
        with self._lock:
            self._check_open()
            if self._on_truncate is not None:
                self._on_truncate(self, offset)
            now_ms = self._clock_ms()
            with self._storage_errors("reset"):
                doomed = list(self._segments)
                # The new segment may reuse a doomed one's name: rename those first.
                self._schedule_delete_locked(doomed, now_ms)
                self._segments = LogSegments(
                    [LogSegment.create(self.directory, offset, self._config, now_ms)]
                )
                self._dir_dirty = True
                self._log_start_offset = offset
                self.leader_epoch_cache.clear()
                self._after_truncation_locked(offset)
                self.producer_state.clear()
                self.producer_state.delete_snapshots(self.producer_state.snapshot_offsets())
                self._update_last_stable_offset_locked()
            _log.info("%s: emptied; the log now starts at offset %d", self.directory, offset)

    def _after_truncation_locked(self, log_end_offset: int) -> None:
        # Truncation legitimately lowers these: nothing may point past the new end.
        self._log_end_offset = log_end_offset
        self._log_start_offset = min(self._log_start_offset, log_end_offset)
        self._recovery_point = min(self._recovery_point, log_end_offset)
        self._high_watermark = min(self._high_watermark, log_end_offset)
        self.leader_epoch_cache.truncate_from_end(log_end_offset)
        self._truncations += 1

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords); returns the new start.

        Records below it become unreadable at once; segments wholly below it are deleted.
        ``offset`` may not pass the high watermark (OffsetOutOfRangeError).
        """
        with self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.topic_partition} before {offset}: above "
                    f"the high watermark {self._high_watermark}"
                )
            if offset <= self._log_start_offset:
                return self._log_start_offset
            self._log_start_offset = offset
            with self._storage_errors("delete records of"):
                self.leader_epoch_cache.truncate_from_start(offset)
                self._delete_old_segments_locked(self._clock_ms())
                self.producer_state.delete_snapshots_below(self._segments[0].base_offset)
            self._update_last_stable_offset_locked()
            return offset

    def delete_old_segments(self) -> int:
        """Apply retention (retention.ms, retention.bytes, log start offset); returns how many
        segments were deleted."""
        with self._lock:
            self._check_open()
            with self._storage_errors("apply retention to"):
                return self._delete_old_segments_locked(self._clock_ms())

    def _delete_old_segments_locked(self, now_ms: int) -> int:
        segments = self._segments
        decision = deletable_prefix(
            segments,
            self._config,
            now_ms=now_ms,
            high_watermark=self._high_watermark,
            log_start_offset=self._log_start_offset,
        )
        if decision is None:
            return 0
        doomed = [segments[index] for index in range(decision.count)]
        self._segments = segments.without(doomed)
        new_start = self._segments[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self._update_last_stable_offset_locked()
        self._schedule_delete_locked(doomed, now_ms)
        self.producer_state.delete_snapshots_below(self._segments[0].base_offset)
        _log.info(
            "%s: deleting %d segments (%s): %s; log start offset now %d",
            self.directory,
            len(doomed),
            decision.reason,
            ", ".join(segment.log_path.name for segment in doomed),
            self._log_start_offset,
        )
        return decision.count

    def _schedule_delete_locked(self, segments: Sequence[LogSegment], now_ms: int) -> None:
        due_ms = now_ms + self._config.file_delete_delay_ms
        for segment in segments:
            segment.rename_to_deleted()
            self._pending_deletes.append((segment, due_ms))
        if segments:
            self._dir_dirty = True

    @property
    def truncation_count(self) -> int:
        """How many truncations this log has had: a reader of sealed segments that saw the
        same count before and after knows none of them was cut and written again."""
        return self._truncations

    def replace_segments(
        self, old: Sequence[LogSegment], new: LogSegment, *, truncation_count: int
    ) -> bool:
        """Swap the cleaner's ``new`` segment (written and fsynced with CLEANED_SUFFIX on every
        file, holding exactly the kept batches of ``old``) in for the consecutive sealed
        segments ``old``; False, with nothing changed, when ``old`` are no longer exactly
        segments of the log, consecutive and not the active one (retention, deletion or reset
        happened since the cleaner read them), or when the log was truncated since
        ``truncation_count`` was read before them (a truncation may cut a sealed segment,
        append to it and seal it again: the same object, other bytes): the caller deletes
        ``new``.

        Under the lock, as docs/compaction.md ("Swap") describes: the ``<base>.swap`` file
        naming the replaced base offsets is written atomically (the commit point), the old
        segments renamed ``.deleted``, the new segment's files renamed to their final names
        (indexes first, log last), the directory fsynced, the swap file removed and the
        directory fsynced again (a swap file that came back after a power failure could
        otherwise delete later segments of the same base offsets); only then does the segment
        list change and the old segments go to the delayed deletion (reads that picked them
        finish). A crash anywhere leaves the old segments or the new one (loader.py
        recovers). An I/O error before the commit point is a LogStorageError with nothing
        changed (the caller deletes ``new``); after it, SwapIncompleteError: the log goes
        offline (every call raises LogStorageError) and keeps the new segment's files for the
        next open to finish the swap, since anything this process changed meanwhile (a
        truncation, retention) that finishing could undo must not happen. The log start
        offset, the producer state and its snapshots and the last stable offset do not
        change: the cleaner keeps every offset and every batch they depend on."""
        with self._lock:
            self._check_open()
            current = list(self._segments)
            first = next((i for i, s in enumerate(current) if s is old[0]), None) if old else None
            if (
                first is None
                or first + len(old) >= len(current)
                or any(current[first + i] is not segment for i, segment in enumerate(old))
                or new.base_offset != old[0].base_offset
                or self._truncations != truncation_count
            ):
                return False
            swap_path = self.directory / segment_file_name(new.base_offset, SWAP_SUFFIX)
            try:
                write_atomically(
                    swap_path,
                    "".join(f"{segment.base_offset}\n" for segment in old).encode(),
                    TEMP_SUFFIX,
                )
            except OSError as exc:
                if may_exist(swap_path):
                    raise self._swap_incomplete_locked(new, exc) from exc
                raise LogStorageError(
                    f"cannot swap cleaned segments into {self.directory}: {exc}"
                ) from exc
            try:
                fault_point("swap_committed")
                for segment in old:
                    segment.rename_to_deleted()
                    fault_point("old_renamed_midway")
                new.strip_suffix(
                    CLEANED_SUFFIX, after_each=lambda: fault_point("cleaned_renamed_midway")
                )
                fsync_dir(self.directory)
                fault_point("before_swap_removed")
                swap_path.unlink()
                fsync_dir(self.directory)
            except OSError as exc:
                raise self._swap_incomplete_locked(new, exc) from exc
            self._segments = LogSegments([*current[:first], new, *current[first + len(old) :]])
            due_ms = self._clock_ms() + self._config.file_delete_delay_ms
            self._pending_deletes.extend((segment, due_ms) for segment in old)
            _log.info(
                "%s: swapped in the cleaned segment %s (%d bytes) for %d segments",
                self.directory,
                new.log_path.name,
                new.size_bytes,
                len(old),
            )
            return True

    def _swap_incomplete_locked(self, new: LogSegment, exc: OSError) -> SwapIncompleteError:
        """The log goes offline after a swap failed past its commit point; the error to raise."""
        self._take_offline_locked(f"the swap at {new.base_offset} failed: {exc}")
        return SwapIncompleteError(
            f"cannot finish the swap of a cleaned segment into {self.directory} "
            f"(the next start finishes it): {exc}"
        )

    def purge_deleted_segments(self, *, everything: bool = False) -> int:
        """Remove the files of deleted segments whose delay has passed; returns how many."""
        now_ms = self._clock_ms()
        with self._lock:
            due = [entry for entry in self._pending_deletes if everything or entry[1] <= now_ms]
            self._pending_deletes = [entry for entry in self._pending_deletes if entry not in due]
        with self._storage_errors("remove deleted segments of"):
            for segment, _ in due:
                segment.delete_files()
        return len(due)

    # -- durability and lifetime ----------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync everything below ``up_to_offset`` (default: the log end) and move the
        recovery point there. The fsyncs run without holding the log's lock."""
        with self._lock:
            self._check_open()
            target = (
                self._log_end_offset
                if up_to_offset is None
                else min(up_to_offset, self._log_end_offset)
            )
            if target <= self._recovery_point and not self._dir_dirty:
                return
            segments = self._segments
            first = max(segments.floor_index(self._recovery_point), 0)
            to_flush = [
                segments[i] for i in range(first, len(segments)) if segments[i].base_offset < target
            ]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            truncations = self._truncations
        try:
            for segment in to_flush:
                segment.flush()
            if dir_dirty:
                fsync_dir(self.directory)
        except OSError as exc:
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise LogStorageError(f"cannot flush {self.directory}: {exc}") from exc
        with self._lock:
            if self._truncations == truncations and target > self._recovery_point:
                self._recovery_point = target
            self._last_flush_ms = self._clock_ms()

    def flush_if_due(self) -> bool:
        """Flush if flush.ms has passed since the last flush and there is unflushed data."""
        flush_ms = self._config.flush_ms
        if flush_ms >= LONG_MAX or self._closed:
            return False
        if (
            self._log_end_offset <= self._recovery_point
            or self._clock_ms() - self._last_flush_ms < flush_ms
        ):
            return False
        self.flush()
        return True

    def close(self) -> None:
        """Flush, leave exact index files (what a clean restart trusts) and release every file.

        The caller stops reads and appends first: a read still running may fail.
        """
        with self._lock:
            if self._closed:
                return
            if self._offline is not None:
                # Nothing more is written: the next open recovers (its directory must not be
                # marked cleanly shut down, hence the error).
                self._closed = True
                for segment in self._segments:
                    segment.release()
                raise LogStorageError(f"{self.directory} was offline: {self._offline}")
            try:
                with self._storage_errors("close"):
                    active = self._segments.active
                    active.seal()
                    self.flush()
                    # After the flush: a snapshot must never claim batches the disk lacks.
                    self._write_producer_snapshot_locked(self._log_end_offset)
                    # The seal rewrote the active segment's indexes even if no data was unflushed.
                    active.offset_index.flush()
                    active.time_index.flush()
            finally:
                # Files are released even when the flush failed; the error still propagates.
                self._closed = True
                for segment in self._segments:
                    segment.close()
                self.purge_deleted_segments(everything=True)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- producer state -------------------------------------------------------------------

    def expire_producers(self, expiration_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` (producer.id.expiration.ms)."""
        with self._lock:
            if self._closed:
                return []
            expired = self.producer_state.expire(self._clock_ms(), expiration_ms)
        if expired:
            _log.info("%s: expired %d idle producers", self.directory, len(expired))
        return expired

    def _write_producer_snapshot_locked(self, offset: int) -> None:
        try:
            self.producer_state.write_snapshot(offset)
        except OSError as exc:
            # Only the bound on replay is lost: recovery replays from an older snapshot.
            _log.warning(
                "%s: cannot write a producer snapshot at %d: %s", self.directory, offset, exc
            )

    def _rebuild_producer_state_locked(self, txn_index_rebuild_from: int | None = None) -> None:
        """The producer state of exactly the batches in the log: the newest intact snapshot
        at or below the log end, then every batch after it (Kafka's loadProducerState); the
        last stable offset follows.

        ``txn_index_rebuild_from``: the base offset of the first segment whose aborted index
        must be rebuilt (loader.py); the replay then starts from a snapshot at or below it
        and rewrites the index of that segment and every later one from the markers met.
        """
        state = self.producer_state
        state.delete_snapshots_above(self._log_end_offset)
        state.delete_snapshots_below(self._segments[0].base_offset)
        bound = self._log_end_offset
        if txn_index_rebuild_from is not None:
            bound = min(bound, txn_index_rebuild_from)
        loaded = state.load_latest_snapshot(bound)
        start = self._segments[0].base_offset if loaded is None else loaded
        if txn_index_rebuild_from is not None:
            for segment in self._segments.from_offset(txn_index_rebuild_from):
                segment.txn_index.reset()
        # A replayed batch's timestamp may be its client's clock; idleness is measured from
        # the load (producer_state.py, expiration).
        load_time_ms = self._clock_ms()
        replayed = 0
        for segment in self._segments.from_offset(start):
            rebuild_index = (
                txn_index_rebuild_from is not None and segment.base_offset >= txn_index_rebuild_from
            )
            for position, header in segment.batch_headers_from(start):
                if header.is_control and header.has_producer_id:
                    marker = _replayed_marker(segment.read_batch(position, header), segment)
                    if marker is None:
                        continue
                    completed = state.apply_marker(
                        header, header.base_offset, *marker, append_time_ms=load_time_ms
                    )
                    if completed is not None and completed.aborted and rebuild_index:
                        segment.txn_index.append(
                            AbortedTxn(
                                completed.producer_id,
                                completed.first_offset,
                                completed.last_offset,
                                state.last_stable_offset_after(completed),
                            )
                        )
                    replayed += 1
                elif is_producer_batch(header):
                    state.apply(
                        header,
                        header.base_offset,
                        header.max_timestamp,
                        append_time_ms=load_time_ms,
                    )
                    replayed += 1
        if txn_index_rebuild_from is not None:
            # Durable now: segments below the recovery point are never flushed again, and an
            # empty index lost to a power failure would read as "no aborts".
            for segment in self._segments.from_offset(txn_index_rebuild_from):
                segment.txn_index.flush()
            fsync_dir(self.directory)
        self._update_last_stable_offset_locked()
        _log.debug(
            "%s: producer state from snapshot %s and %d replayed batches: %d producers",
            self.directory,
            loaded,
            replayed,
            len(state.producers),
        )

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the log of {self.topic_partition} is closed")
        if self._offline is not None:
            raise LogStorageError(
                f"the log of {self.topic_partition} is offline until the node restarts: "
                f"{self._offline}"
            )

    def _take_offline_locked(self, reason: str) -> None:
        """Stop serving and changing this log until the node restarts (Kafka takes a log
        directory offline on an I/O error); the next open recovers it."""
        self._offline = reason
        _log.error(
            "%s: the log is offline until the node restarts, which recovers it: %s",
            self.directory,
            reason,
        )

    @contextmanager
    def _storage_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise LogStorageError(f"cannot {action} {self.directory}: {exc}") from exc

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory}, offsets {self._log_start_offset}.."
            f"{self._log_end_offset}, {len(self._segments)} segments)"
        )


def _markers_of(validated: ValidatedAppend, *, copied_into: Path | None = None) -> _Markers:
    """The markers among the batches of an append, decoded. A leader's append
    (``copied_into`` None) with a control batch that is not a COMMIT or ABORT marker is a
    RecordError: nothing is appended. A follower's (``copied_into``: its log directory) keeps
    such a batch and skips it, logged, as replay does (``_replayed_marker``): the leader has
    it, and refusing it would stall replication there for good."""
    markers: _Markers = {}
    for index, ((header, _), batch) in enumerate(
        zip(validated.headers, validated.batches, strict=True)
    ):
        if not (header.is_control and header.has_producer_id):
            continue
        try:
            markers[index] = read_marker(validated.data, batch.position)
        except RecordError as exc:
            if copied_into is None:
                raise
            _log.warning(
                "%s: invariant: the leader sent a control batch at offset %d that is no "
                "marker; copied, not applied: %s",
                copied_into,
                header.base_offset,
                exc,
            )
    return markers


def _replayed_marker(batch: bytes, segment: LogSegment) -> tuple[ControlType, int] | None:
    """The marker in a control batch met by replay, or None (logged) when it is not one: a
    control batch a coordinator wrote before markers were checked on append."""
    try:
        return read_marker(batch, 0)
    except RecordError as exc:
        _log.warning("%s: skipping a control batch that is no marker: %s", segment.log_path, exc)
        return None
