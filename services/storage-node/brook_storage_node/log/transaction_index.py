"""A segment's aborted-transaction index: the ``.txnindex`` file (Kafka's TransactionIndex).

One entry per ABORT marker in the segment, in log order: the producer, the transaction's first
offset, the marker's offset (``last_offset``) and the last stable offset right after the abort
(the first offset of the oldest transaction still open then, else the marker's next offset).
A READ_COMMITTED fetch collects the entries that overlap the range it returns
(``PartitionLog.collect_aborted_transactions``); the LSO field tells it where to stop looking:
an entry whose LSO is at or past the range's end proves that no later abort overlaps it.

Brook's own format, not Kafka's: fixed-size entries of version int16, producer id int64, first
offset int64, last offset int64, last stable offset int64 and a CRC-32C (uint32) of the 34
bytes before it. Every segment has the file, empty when it holds no abort, so a missing file is
noticed; a file that is missing, of a size that is not a whole number of entries, with an
entry that fails its CRC, names an unknown version or breaks the order is damaged, and
recovery rebuilds it from the log (PartitionLog, producer state replay). Entries are appended
with a plain write after the marker itself is written (a crash in between leaves the segment
unflushed: recovery rebuilds its index) and fsynced with the segment.

Entries are few (one per aborted transaction), so they are kept in memory, loaded on first
use; readers take the tuple as it is (replaced whole on every change) without a lock.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c

from brook_storage_node.log.files import fsync_file, pwrite_all

__all__ = ["TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]

TXN_INDEX_SUFFIX: Final = ".txnindex"
_VERSION: Final = 0
_BODY: Final = struct.Struct(">hqqqq")
_CRC: Final = struct.Struct(">I")
ENTRY_BYTES: Final = _BODY.size + _CRC.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    # The ABORT marker's offset.
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        body = _BODY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )
        return body + _CRC.pack(crc32c.crc32c(body))


def _decode(data: bytes, base_offset: int) -> tuple[AbortedTxn, ...]:
    """The entries of a file's bytes; ValueError if they cannot be trusted."""
    if len(data) % ENTRY_BYTES:
        raise ValueError(f"{len(data)} bytes is not a whole number of {ENTRY_BYTES}-byte entries")
    entries: list[AbortedTxn] = []
    for position in range(0, len(data), ENTRY_BYTES):
        body = data[position : position + _BODY.size]
        (crc,) = _CRC.unpack_from(data, position + _BODY.size)
        if crc32c.crc32c(body) != crc:
            raise ValueError(f"entry at byte {position} fails its CRC-32C")
        version, producer_id, first, last, lso = _BODY.unpack(body)
        if version != _VERSION:
            raise ValueError(f"entry at byte {position} has unknown version {version}")
        if last < base_offset or first > last or (entries and last <= entries[-1].last_offset):
            raise ValueError(
                f"entry at byte {position} (offsets {first}..{last}) is out of order or "
                f"outside the segment at {base_offset}"
            )
        entries.append(AbortedTxn(producer_id, first, last, lso))
    return tuple(entries)


class TransactionIndex:
    """The ``.txnindex`` of the segment at ``base_offset``. Not thread-safe for writers (the
    log serialises them); readers use ``entries``."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: tuple[AbortedTxn, ...] | None = None
        self._dirty = False

    @classmethod
    def create(cls, path: Path, base_offset: int) -> TransactionIndex:
        """A new, empty index; the file must not exist."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        index = cls(path, base_offset)
        index._entries = ()
        return index

    def problem(self) -> str | None:
        """Why the file cannot be trusted (missing or damaged), or None; loads it."""
        try:
            self._entries = _decode(self.path.read_bytes(), self.base_offset)
        except FileNotFoundError:
            return f"{self.path.name} is missing"
        except ValueError as exc:
            return f"{self.path.name}: {exc}"
        return None

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        entries = self._entries
        if entries is None:
            problem = self.problem()
            if problem is not None:
                # Checked at open (loader.py): only a file damaged since can get here.
                raise OSError(f"aborted-transaction index unusable: {problem}")
            entries = self._entries
            assert entries is not None
        return entries

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of an abort written to the segment after every other one."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path.name}: abort at {entry.last_offset} after one at "
                f"{entries[-1].last_offset}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            pwrite_all(fd, entry.encode(), len(entries) * ENTRY_BYTES)
        finally:
            os.close(fd)
        self._entries = (*entries, entry)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at ``offset`` or later."""
        entries = self.entries
        kept = tuple(entry for entry in entries if entry.last_offset < offset)
        if len(kept) != len(entries):
            self._rewrite(kept)

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds them)."""
        self._rewrite(())

    def _rewrite(self, entries: tuple[AbortedTxn, ...]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, len(entries) * ENTRY_BYTES)
        finally:
            os.close(fd)
        self._entries = entries
        self._dirty = True

    def collect(self, start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping [``start``, ``upper``), and whether the search is complete
        (an entry's LSO reached ``upper``: no later abort can overlap the range)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= start and entry.first_offset < upper:
                found.append(entry)
            if entry.last_stable_offset >= upper:
                return found, True
        return found, False

    def flush(self) -> None:
        if self._dirty:
            fsync_file(self.path)
            self._dirty = False

    def rename(self, path: Path) -> None:
        # A file found missing at open is recreated by recovery before any rename; tolerate
        # its absence all the same (nothing of value is lost with an empty index).
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, path)
        self.path = path

    def delete_file(self) -> None:
        self.path.unlink(missing_ok=True)
