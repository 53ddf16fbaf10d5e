"""The leader-epoch history of a partition: which epoch's leader wrote from which offset on.

Kafka's LeaderEpochFileCache. Each entry (epoch, start offset) says the leader of ``epoch``
appended its first batch at ``start offset``. A follower of a new leader asks "where does my
latest epoch end in your log?" (``end_offset_for``) and truncates to that point, so logs never
diverge. The history is kept in the partition directory's ``leader-epoch-checkpoint``,
rewritten atomically on every change (changes come once per leadership change).
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from brook_storage_node.log.checkpoints import (
    CheckpointFile,
    CheckpointFileError,
    parse_non_negative,
)
from brook_storage_node.log.errors import InvariantViolationError

LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def _format_entry(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _parse_entry(line: str) -> EpochEntry:
    fields = line.split(" ")
    if len(fields) != 2:
        raise ValueError(f"expected 'epoch start_offset', got {line!r}")
    return EpochEntry(
        parse_non_negative(fields[0], "epoch"), parse_non_negative(fields[1], "offset")
    )


class LeaderEpochCheckpointFile:
    VERSION: Final = 0

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, self.VERSION, _format_entry, _parse_entry
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: list[EpochEntry]) -> None:
        self._file.write(entries)

    def read(self) -> list[EpochEntry]:
        return self._file.read()


class LeaderEpochFileCache:
    """Epoch start offsets, strictly increasing in both epoch and offset; thread-safe."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile, entries: list[EpochEntry]) -> None:
        self._checkpoint = checkpoint
        self._entries = list(entries)
        self._lock = threading.Lock()
        self._check_monotonic()

    @classmethod
    def load(cls, partition_dir: Path) -> LeaderEpochFileCache:
        """Read the partition's history; a damaged file is logged and the history rebuilt.

        Rebuilt from what recovery sees in the batches it re-validates; until a full history
        is known, end_offset_for answers conservatively (earlier epochs map to later starts,
        which makes a follower truncate more, never keep a divergent suffix).
        """
        checkpoint = LeaderEpochCheckpointFile(partition_dir / LEADER_EPOCH_CHECKPOINT)
        try:
            entries = checkpoint.read()
        except CheckpointFileError as exc:
            _log.error("leader epoch history lost, starting empty: %s", exc)
            entries = []
        if not _is_monotonic(entries):
            _log.error(
                "leader epoch checkpoint %s is not increasing (%s); starting empty",
                checkpoint.path,
                entries,
            )
            entries = []
        return cls(checkpoint, entries)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        with self._lock:
            return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        latest = self.latest_entry
        return None if latest is None else latest.epoch

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the history changed.

        The same epoch at a later offset changes nothing. An entry that is not above the
        latest in both epoch and offset first removes the entries it contradicts: the log
        was truncated below them (Kafka's rule).
        """
        if epoch < 0 or start_offset < 0:
            raise InvariantViolationError(
                f"{self._checkpoint.path}: leader epoch {epoch} at offset {start_offset}; "
                "both must be >= 0"
            )
        with self._lock:
            if self._entries:
                latest = self._entries[-1]
                if epoch == latest.epoch and start_offset >= latest.start_offset:
                    return False
            removed = []
            while self._entries and (
                self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
            ):
                removed.append(self._entries.pop())
            if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
                _log.warning(
                    "%s: epoch %d at offset %d replaces later entries %s",
                    self._checkpoint.path,
                    epoch,
                    start_offset,
                    removed[::-1],
                )
            self._entries.append(EpochEntry(epoch, start_offset))
            if flush:
                self._flush_locked()
            return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower whose latest epoch is ``requested_epoch``.

        The end offset is the start of the first epoch after it (or the log end offset for
        the latest epoch); the epoch returned is the largest known epoch <= the requested
        one. (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when the answer is unknown.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._entries[-1].epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = None
            for entry in self._entries:
                if entry.epoch > requested_epoch:
                    break
                floor = entry
            if floor is None:
                # Older than anything kept (its data was deleted): the follower keeps nothing
                # past where the next known epoch begins.
                return requested_epoch, higher.start_offset
            return floor.epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> bool:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there, or
        ends there); True if any was forgotten."""
        with self._lock:
            if not self._entries or self._entries[-1].start_offset < end_offset:
                return False
            while self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries.pop()
            if flush:
                self._flush_locked()
            return True

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> None:
        """Forget epochs wholly below ``start_offset``; the epoch in force there starts there."""
        with self._lock:
            keep_from = 0
            for index, entry in enumerate(self._entries):
                if entry.start_offset <= start_offset:
                    keep_from = index
            if not self._entries or (
                keep_from == 0 and self._entries[0].start_offset >= start_offset
            ):
                return
            first = self._entries[keep_from]
            self._entries[: keep_from + 1] = [EpochEntry(first.epoch, start_offset)]
            if flush:
                self._flush_locked()

    def clear(self, *, flush: bool = True) -> None:
        with self._lock:
            self._entries.clear()
            if flush:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._check_monotonic()
        self._checkpoint.write(self._entries)

    def _check_monotonic(self) -> None:
        # Before every write of the checkpoint: a history whose epochs or offsets do not
        # increase would send followers to the wrong truncation point.
        if not _is_monotonic(self._entries):
            raise InvariantViolationError(
                f"{self._checkpoint.path}: leader epochs not increasing in both epoch and "
                f"offset: {self._entries}"
            )


def _is_monotonic(entries: list[EpochEntry]) -> bool:
    return all(
        a.epoch < b.epoch and a.start_offset < b.start_offset
        for a, b in itertools.pairwise(entries)
    )
