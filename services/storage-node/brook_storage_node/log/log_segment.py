"""One segment of a partition log: a ``.log`` file of record batches and its indexes.

Files are named by the segment's base offset, 20 digits zero-padded, as Kafka names them
(``00000000000000368769.log``, ``.index``, ``.timeindex``, ``.txnindex``: the aborted
transactions whose markers it holds, transaction_index.py). Data is written with ``pwrite``
and read with ``pread``: the page cache is the only cache, and a read returns the bytes the
kernel hands over, without another copy.

Only the last segment of a log (the active one) is appended to; the log serialises appends,
truncation and rolls. Reads may run in other threads at the same time, lock-free: every field
a reader uses is published after the bytes it describes are written.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from brook.record import (
    BATCH_OVERHEAD,
    BatchHeader,
    RecordError,
    TimestampType,
    iter_records,
    read_header,
    scan_batches,
    verify_crc,
)
from brook_storage_node.log.errors import LogStorageError
from brook_storage_node.log.files import Buffer, pwrite_all
from brook_storage_node.log.leader_epoch import LeaderEpochFileCache
from brook_storage_node.log.log_config import LogConfig
from brook_storage_node.log.offset_index import OffsetIndex
from brook_storage_node.log.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from brook_storage_node.log.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"
# A segment the cleaner is writing: every file of it carries this suffix until the swap
# (PartitionLog.replace_segments) renames them to their final names.
CLEANED_SUFFIX: Final = ".cleaned"
# ``<base>.swap``: the commit point of a swap, naming the base offsets of the segments the
# cleaned segment at ``<base>`` replaces (PartitionLog.replace_segments, loader.py).
SWAP_SUFFIX: Final = ".swap"
SEGMENT_SUFFIXES: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
BASE_OFFSET_DIGITS: Final = 20

INT32_MAX: Final = 2**31 - 1
# Reads and offset look-ups scan headers from an index entry, at most about one index
# interval: one pread of this size usually covers it.
HEADER_SCAN_CHUNK_BYTES: Final = 16 * 1024
# Recovery reads whole batches to check their CRCs; large reads keep the syscalls few.
RECOVERY_CHUNK_BYTES: Final = 4 * 1024 * 1024

_log = logging.getLogger(__name__)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:0{BASE_OFFSET_DIGITS}d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) for a segment file name, else None."""
    for suffix in SEGMENT_SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) == BASE_OFFSET_DIGITS and stem.isdigit():
                return int(stem), suffix
    return None


class AppendedBatch(NamedTuple):
    """What the segment needs to know of each batch it appends (offsets already assigned)."""

    position: int  # within the appended buffer
    size: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class BatchLocation:
    position: int
    header: BatchHeader


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    reason: str | None


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        size_bytes: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        config: LogConfig,
        created_ms: int,
        txn_index: TransactionIndex,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self._fd = fd
        self._size_bytes = size_bytes
        self._index_interval_bytes = config.index_interval_bytes
        self._created_ms = created_ms
        # Kafka draws the jitter once per segment, so segments of partitions created together
        # spread their time-based rolls.
        self._roll_jitter_ms = (
            random.randint(0, config.segment_jitter_ms) if config.segment_jitter_ms else 0
        )
        # What the active segment tracks in memory. A sealed segment loaded from disk never
        # needs it (its largest timestamp is its time index's last entry); it is computed on
        # first use by _load_tail_state.
        self._tail_loaded = False
        self._next_offset = base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_last_index_entry = 0
        self._rolling_timestamp: int | None = None

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, suffix: str = ""
    ) -> LogSegment:
        """A new, empty active segment; its files must not exist yet. ``suffix`` (the
        cleaner's CLEANED_SUFFIX) is appended to every file name until ``strip_suffix``."""
        log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            offset_index = OffsetIndex.create(
                directory / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix),
                base_offset,
                config.segment_index_bytes,
            )
            time_index = TimeIndex.create(
                directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
                base_offset,
                config.segment_index_bytes,
            )
            txn_index = TransactionIndex.create(
                directory / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + suffix),
                base_offset,
            )
        except BaseException:
            os.close(fd)
            raise
        segment = cls(
            directory, base_offset, fd, 0, offset_index, time_index, config, now_ms, txn_index
        )
        segment.log_path = log_path
        segment._tail_loaded = True
        return segment

    def index_problem(self, next_offset: int | None) -> str | None:
        """Why the index files cannot describe this segment, whose offsets end before
        ``next_offset`` (None if unknown), or None. Reads two entries per index at most."""
        problems = [
            f"{index.path.name}: {problem}"
            for index, problem in (
                (self.offset_index, self.offset_index.problem(self._size_bytes, next_offset)),
                (self.time_index, self.time_index.problem(next_offset)),
            )
            if problem is not None
        ]
        return "; ".join(problems) or None

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int
    ) -> tuple[LogSegment, str | None]:
        """An existing segment, and why its indexes must be rebuilt (None if they look sound).

        A missing index is created empty, to be rebuilt. Nothing is mapped or scanned here:
        start-up touches only what recovery needs.
        """
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        fd = os.open(log_path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            problems = []
            indexes = []
            for index_type, suffix in ((OffsetIndex, INDEX_SUFFIX), (TimeIndex, TIME_INDEX_SUFFIX)):
                path = directory / segment_file_name(base_offset, suffix)
                if path.exists():
                    indexes.append(index_type.load(path, base_offset, config.segment_index_bytes))
                else:
                    problems.append(f"{path.name} is missing")
                    indexes.append(index_type.create(path, base_offset, config.segment_index_bytes))
            offset_index, time_index = indexes
            assert isinstance(offset_index, OffsetIndex) and isinstance(time_index, TimeIndex)
        except BaseException:
            os.close(fd)
            raise
        txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX), base_offset
        )
        segment = cls(
            directory, base_offset, fd, size, offset_index, time_index, config, now_ms, txn_index
        )
        return segment, "; ".join(problems) or None

    # -- state ----------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def next_offset(self) -> int:
        """The offset after this segment's last batch (its base offset when empty)."""
        self._ensure_tail_state()
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """The largest batch timestamp in the segment, or NO_TIMESTAMP."""
        if self._tail_loaded:
            return self._max_timestamp
        return self.time_index.last_entry().timestamp

    @property
    def largest_timestamp_for_retention(self) -> int:
        """max_timestamp, or the file's modification time when no batch carries one (Kafka)."""
        timestamp = self.max_timestamp
        if timestamp > NO_TIMESTAMP:
            return timestamp
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        """When the node last wrote this segment's data, by its own clock: the ``.log`` file's
        modification time."""
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    def set_last_modified_ms(self, timestamp_ms: int) -> None:
        """Give the ``.log`` file this modification time (a cleaned segment keeps the latest
        of the segments it replaces, as Kafka's cleaner does)."""
        timestamp_ns = timestamp_ms * 1_000_000
        os.utime(self._fd, ns=(timestamp_ns, timestamp_ns))

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, {self._size_bytes} bytes)"

    def _ensure_tail_state(self) -> None:
        if not self._tail_loaded:
            problem = self.tail_problem()
            if problem is not None:
                raise LogStorageError(f"{self.log_path} needs recovery: {problem}")

    def tail_problem(self) -> str | None:
        """Load the in-memory state of an active segment; why its tail is damaged, or None.

        Reads only the batches after the last offset index entry. A segment whose bytes do
        not end with a whole, parseable batch must be recovered before it is appended to.
        """
        try:
            valid_end = self._load_tail_state()
        except RecordError as exc:
            self._tail_loaded = False
            return str(exc)
        if valid_end != self._size_bytes:
            self._tail_loaded = False
            return (
                f"{self._size_bytes - valid_end} bytes follow its last complete batch "
                f"(which ends at byte {valid_end})"
            )
        problem = self.index_problem(self._next_offset)
        if problem is not None:
            self._tail_loaded = False
        return problem

    def _load_tail_state(self) -> int:
        """Compute next offset, largest timestamp and bytes since the last index entry from
        the indexes and the batches after the last offset index entry; returns where the
        last complete batch ends."""
        last_indexed = self.offset_index.last_entry()
        time_entry = self.time_index.last_entry()
        next_offset = self.base_offset
        max_timestamp, offset_of_max = time_entry
        end = last_indexed.position
        for position, header in self._iter_headers(last_indexed.position, self._size_bytes):
            next_offset = header.next_offset
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            end = position + header.size
        self._next_offset = next_offset
        self._max_timestamp = max_timestamp
        self._offset_of_max_timestamp = offset_of_max
        self._bytes_since_last_index_entry = self._size_bytes - last_indexed.position
        self._rolling_timestamp = None
        self._tail_loaded = True
        return end

    # -- scanning -------------------------------------------------------------------------

    def _iter_headers(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every whole batch in [start, end), reading headers only."""
        for position, header, _, _ in self._scan(
            start, end, HEADER_SCAN_CHUNK_BYTES, with_body=False
        ):
            yield position, header

    def _scan(
        self, start: int, end: int, chunk_bytes: int, *, with_body: bool
    ) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """(position, header, chunk, position in chunk) for every whole batch in [start, end).

        With ``with_body`` the chunk holds the whole batch. Stops at a torn tail (a header or
        batch running past ``end``); a header that cannot be parsed raises RecordError.
        """
        chunk = b""
        chunk_start = start
        position = start
        while end - position >= BATCH_OVERHEAD:
            relative = position - chunk_start
            if relative + BATCH_OVERHEAD > len(chunk):
                chunk = os.pread(self._fd, min(chunk_bytes, end - position), position)
                chunk_start, relative = position, 0
                if len(chunk) < BATCH_OVERHEAD:
                    return
            header = read_header(chunk, relative)
            if position + header.size > end:
                return
            if with_body and relative + header.size > len(chunk):
                chunk = os.pread(
                    self._fd, max(header.size, min(chunk_bytes, end - position)), position
                )
                chunk_start, relative = position, 0
                if len(chunk) < header.size:
                    return
            yield position, header, chunk, relative
            position += header.size

    def iter_batches(self, chunk_bytes: int) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """(position, header, chunk, position in chunk) of every whole batch, the chunk
        holding the whole batch, read ``chunk_bytes`` at a time (the cleaner's reads). Stops
        at a torn tail; a header that cannot be parsed raises RecordError. CRCs are not
        checked."""
        return self._scan(0, self._size_bytes, chunk_bytes, with_body=True)

    def batch_headers_from(self, offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of the batches holding ``offset`` or later, in order (replaying
        producer state reads headers only, and a control batch's one record: read_batch)."""
        start = self.offset_index.lookup(offset).position
        for position, header in self._iter_headers(start, self._size_bytes):
            if header.last_offset >= offset:
                yield position, header

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The whole batch at ``position`` (found by ``batch_headers_from``)."""
        return os.pread(self._fd, header.size, position)

    def translate_offset(self, offset: int) -> BatchLocation | None:
        """The first batch whose last offset is >= ``offset`` (the batch holding it), or None."""
        start = self.offset_index.lookup(offset).position
        for position, header in self._iter_headers(start, self._size_bytes):
            if header.last_offset >= offset:
                return BatchLocation(position, header)
        return None

    # -- append ---------------------------------------------------------------------------

    def should_roll(
        self,
        config: LogConfig,
        *,
        messages_bytes: int,
        max_timestamp: int,
        max_offset: int,
        now_ms: int,
    ) -> str | None:
        """Why an append of ``messages_bytes`` must go to a new segment, or None."""
        self._ensure_tail_state()
        if self._size_bytes > config.segment_bytes - messages_bytes:
            return f"segment.bytes {config.segment_bytes} reached"
        if self._size_bytes > 0 and self._time_waited_for_roll(now_ms, max_timestamp) > (
            config.segment_ms - self._roll_jitter_ms
        ):
            return f"segment.ms {config.segment_ms} reached"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index full"
        if max_offset - self.base_offset > INT32_MAX:
            return "offsets would overflow the index's relative offsets"
        return None

    def _time_waited_for_roll(self, now_ms: int, max_timestamp: int) -> int:
        # Kafka measures a segment's age by record timestamps where it has them, so a replica
        # rebuilt from old data rolls where the leader did, not by its own wall clock.
        if self._rolling_timestamp is None and self._size_bytes > 0:
            self._rolling_timestamp = read_header(
                os.pread(self._fd, BATCH_OVERHEAD, 0)
            ).max_timestamp
        if self._rolling_timestamp is not None and self._rolling_timestamp >= 0:
            return max_timestamp - self._rolling_timestamp
        return now_ms - self._created_ms

    def append(self, data: Buffer, batches: Sequence[AppendedBatch]) -> None:
        """Write ``data`` (whole batches, offsets assigned) at the end and index it.

        On an I/O error the file is cut back to where it was and LogStorageError raised:
        the segment is unchanged.
        """
        assert batches, "an append holds at least one batch"
        self._ensure_tail_state()
        start = self._size_bytes
        try:
            pwrite_all(self._fd, data, start)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                _log.exception(
                    "%s: cannot cut back a failed append at byte %d", self.log_path, start
                )
            raise LogStorageError(f"cannot append to {self.log_path}: {exc}") from exc
        for batch in batches:
            self._account_batch(
                start + batch.position, batch.size, batch.last_offset, batch.max_timestamp
            )
        self._next_offset = batches[-1].last_offset + 1
        # Published last: a concurrent reader bounds itself by this size.
        self._size_bytes = start + len(data)

    def _account_batch(
        self, position: int, size: int, last_offset: int, max_timestamp: int
    ) -> None:
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = last_offset
        if position == 0:
            self._rolling_timestamp = max_timestamp
        if self._bytes_since_last_index_entry > self._index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    # -- reads ----------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool
    ) -> tuple[memoryview, int] | None:
        """Whole batches from the one holding ``offset``: (bytes, next offset to fetch).

        At most ``max_bytes``, unless the first batch alone is larger and ``min_one_batch``
        (Kafka's rule, so a consumer always progresses); only batches that end at or before
        ``max_offset`` (exclusive bound, e.g. the high watermark). None if this segment has
        nothing at or after ``offset``.
        """
        size = self._size_bytes
        location = self.translate_offset(offset)
        if location is None:
            return None
        first = location.header
        if first.next_offset > max_offset:
            return memoryview(b""), offset
        wanted = min(max_bytes, size - location.position)
        if wanted < first.size:
            if not min_one_batch:
                return memoryview(b""), offset
            wanted = first.size
        data = os.pread(self._fd, wanted, location.position)
        end = 0
        next_offset = offset
        for position, header in scan_batches(data):
            if header.next_offset > max_offset:
                break
            end = position + header.size
            next_offset = header.next_offset
        return memoryview(data)[:end], next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampOffset | None:
        """The first record at or after ``starting_offset`` with timestamp >= ``timestamp``.

        The time index bounds where to start; headers are scanned to the first batch whose
        largest timestamp qualifies, and only that batch's records are decoded.
        """
        entry = self.time_index.lookup_before(timestamp)
        start = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for position, header in self._iter_headers(start, self._size_bytes):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                return TimestampOffset(
                    header.max_timestamp, max(header.base_offset, starting_offset)
                )
            batch = os.pread(self._fd, header.size, position)
            for record in iter_records(batch):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampOffset(record.timestamp, record.offset)
        return None

    def max_timestamp_between(self, start_offset: int, end_offset: int) -> int:
        """The largest timestamp of this segment's records in [start_offset, end_offset), or
        NO_TIMESTAMP when it has none there.

        A segment wholly inside the range answers from its tracked maximum; otherwise headers
        are scanned from the offset index entry before ``start_offset``, and only a batch
        that straddles an end of the range is decoded.
        """
        if start_offset <= self.base_offset and self.next_offset <= end_offset:
            return self.max_timestamp
        best = NO_TIMESTAMP
        start = self.offset_index.lookup(max(start_offset, self.base_offset)).position
        for position, header in self._iter_headers(start, self._size_bytes):
            if header.base_offset >= end_offset:
                break
            if header.last_offset < start_offset:
                continue
            inside = header.base_offset >= start_offset and header.last_offset < end_offset
            if inside or header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                best = max(best, header.max_timestamp)
                continue
            batch = os.pread(self._fd, header.size, position)
            for record in iter_records(batch):
                if start_offset <= record.offset < end_offset:
                    best = max(best, record.timestamp)
        return best

    # -- truncation and recovery ----------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove the batch holding ``offset`` and everything after it; returns bytes removed."""
        self._ensure_tail_state()
        location = self.translate_offset(offset)
        if location is None:
            return 0
        cut = location.header.base_offset
        self.offset_index.truncate_to(cut)
        self.time_index.truncate_to(cut)
        self.txn_index.truncate_to(cut)
        removed = self._size_bytes - location.position
        self._size_bytes = location.position
        os.ftruncate(self._fd, location.position)
        self._load_tail_state()
        if self._size_bytes == 0:
            self._created_ms = now_ms
        return removed

    def recover(
        self, *, min_first_offset: int, epoch_cache: LeaderEpochFileCache | None
    ) -> RecoveryResult:
        """Re-validate every batch and rebuild both indexes; cut the file after the last good one.

        A batch is good if its header parses, its CRC-32C matches, and its offsets continue
        the log (at least ``min_first_offset`` and the previous batch's next offset, within
        int32 of the base offset). The leader epochs met are recorded in ``epoch_cache``
        (unflushed: the caller flushes once).
        """
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self.offset_index.reset()
        self.time_index.reset()
        self._tail_loaded = True
        self._next_offset = self.base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        self._rolling_timestamp = None
        file_bytes = os.fstat(self._fd).st_size
        expected_offset = max(self.base_offset, min_first_offset)
        valid_end = 0
        reason: str | None = None
        try:
            for position, header, chunk, relative in self._scan(
                0, file_bytes, RECOVERY_CHUNK_BYTES, with_body=True
            ):
                verify_crc(chunk, relative, header)
                reason = _offset_problem(header, position, expected_offset, self.base_offset)
                if reason is not None:
                    break
                self._account_batch(position, header.size, header.last_offset, header.max_timestamp)
                epoch = header.partition_leader_epoch
                if epoch_cache is not None and epoch > _latest_epoch(epoch_cache):
                    epoch_cache.assign(epoch, header.base_offset, flush=False)
                expected_offset = self._next_offset = header.next_offset
                valid_end = position + header.size
        except RecordError as exc:
            reason = str(exc)
        truncated = file_bytes - valid_end
        if truncated:
            reason = reason or "the last batch is incomplete (torn write)"
            _log.warning(
                "%s: truncating %d bytes from position %d: %s",
                self.log_path,
                truncated,
                valid_end,
                reason,
            )
            os.ftruncate(self._fd, valid_end)
        self._size_bytes = valid_end
        return RecoveryResult(valid_end, truncated, reason if truncated else None)

    # -- lifecycle ------------------------------------------------------------------------

    def make_active(self) -> None:
        """Open the indexes for appends again (the segment became the last one)."""
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self._ensure_tail_state()

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp and trim its indexes."""
        self._ensure_tail_state()
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, final=True)
        self.offset_index.trim()
        self.time_index.trim()

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Release the descriptor and mappings; after a clean close the files are exact."""
        if self._fd < 0:
            return
        if self._tail_loaded:
            # The trimmed, final state is what a clean restart trusts without recovery.
            try:
                self.seal()
            except (OSError, LogStorageError):
                _log.exception("%s: cannot trim indexes on close", self.log_path)
        self.release()

    def release(self) -> None:
        """Release the descriptor and mappings without writing anything (a log taken offline:
        the next open recovers it)."""
        if self._fd < 0:
            return
        self.offset_index.close()
        self.time_index.close()
        os.close(self._fd)
        self._fd = -1

    def strip_suffix(self, suffix: str, after_each: Callable[[], None] | None = None) -> None:
        """Rename every file from ``<name><suffix>`` to ``<name>``: the indexes first, the log
        last (the swap of a cleaned segment); ``after_each`` runs after each rename."""
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name.removesuffix(suffix)))
            if after_each is not None:
                after_each()
        final = self.log_path.with_name(self.log_path.name.removesuffix(suffix))
        os.replace(self.log_path, final)
        self.log_path = final

    def rename_to_deleted(self) -> None:
        """Mark the files for deletion; the descriptor stays valid for readers still in it."""
        deleted = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.replace(self.log_path, deleted)
        self.log_path = deleted
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def delete_files(self) -> None:
        self.offset_index.delete_file()
        self.time_index.delete_file()
        self.txn_index.delete_file()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.log_path.unlink(missing_ok=True)


def _offset_problem(
    header: BatchHeader, position: int, expected_offset: int, base_offset: int
) -> str | None:
    # baseOffset is outside the CRC (the leader patches it), so recovery checks it against
    # its neighbours instead: offsets only move forward and stay addressable by the index.
    if header.base_offset < expected_offset:
        return (
            f"batch at position {position} starts at offset {header.base_offset}, "
            f"before the expected {expected_offset}"
        )
    if header.last_offset_delta < 0 or header.last_offset - base_offset > INT32_MAX:
        return (
            f"batch at position {position} has impossible offsets "
            f"(base {header.base_offset}, last offset delta {header.last_offset_delta})"
        )
    return None


def _latest_epoch(epoch_cache: LeaderEpochFileCache) -> int:
    latest = epoch_cache.latest_epoch
    return -1 if latest is None else latest
