"""What the offset index and the time index share: a memory-mapped file of fixed-size entries.

As in Kafka, the active segment's index file is preallocated (sparse) to segment.index.bytes and
mapped read-write; when the segment stops being active the file is trimmed to its entries. A
sealed segment's index is mapped read-only, and only when first used, so a node with many
segments holds a descriptor per index it actually reads, not per index on disk.

The entry count lives in memory. A preallocated file left behind by a crash therefore looks
full of zero entries on disk; such a file belongs to a segment past the recovery point, and
recovery rebuilds it (LogLoader). Only a trimmed file is ever trusted as it is.

Trimming keeps the existing mapping: a reader in another thread may be mid-lookup, and the
mapping stays valid for every byte below the new end of file, which is all it ever reads.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Self

from brook_storage_node.log.files import fsync_file

# Reads the sort key of one slot from a mapping.
KeyAt = Callable[[mmap.mmap, int], int]


class AbstractIndex:
    """A sorted, append-only array of ``ENTRY_BYTES``-sized entries in a file."""

    ENTRY_BYTES: ClassVar[int]

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        assert base_offset >= 0
        self.path = path
        self.base_offset = base_offset
        self._max_entries = max(max_index_bytes // self.ENTRY_BYTES, 1)
        self._entries = 0
        self._mm: mmap.mmap | None = None
        self._writable = False
        # Guards lazy mapping and remapping; lookups on an established mapping take no lock.
        self._map_lock = threading.Lock()

    # -- opening --------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_bytes: int) -> Self:
        """A new, empty index mapped for appends; the file must not exist."""
        index = cls(path, base_offset, max_index_bytes)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.close(fd)
        index.make_writable()
        return index

    @classmethod
    def load(cls, path: Path, base_offset: int, max_index_bytes: int) -> Self:
        """An existing index file, not mapped until first used; its length gives the entries."""
        index = cls(path, base_offset, max_index_bytes)
        index._entries = os.stat(path).st_size // cls.ENTRY_BYTES
        return index

    def make_writable(self) -> None:
        """Prepare for appends: extend the file to its maximum size and map it read-write."""
        with self._map_lock:
            # A file written under a larger segment.index.bytes keeps all of its entries.
            size = max(self._max_entries, self._entries) * self.ENTRY_BYTES
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                if self._mm is not None and self._writable and len(self._mm) >= size:
                    return
                old = self._mm
                self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
                self._writable = True
            finally:
                os.close(fd)
            if old is not None:
                old.close()

    def _mapping(self) -> mmap.mmap:
        mm = self._mm
        if mm is not None:
            return mm
        with self._map_lock:
            if self._mm is None:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    self._mm = mmap.mmap(
                        fd, self._entries * self.ENTRY_BYTES, access=mmap.ACCESS_READ
                    )
                finally:
                    os.close(fd)
            return self._mm

    # -- state ----------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        return self._entries * self.ENTRY_BYTES

    def _writable_mapping(self) -> mmap.mmap:
        assert self._writable and self._mm is not None, f"{self.path} is not open for appends"
        return self._mm

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index from the log)."""
        self._entries = 0

    def _truncate_to_entries(self, entries: int) -> None:
        assert 0 <= entries <= self._entries
        self._entries = entries

    def trim(self) -> None:
        """Shrink the file to its entries: a sealed segment's index on disk is exact."""
        with self._map_lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, self._entries * self.ENTRY_BYTES)
            finally:
                os.close(fd)

    def _peek(self, slot: int) -> bytes:
        """The raw bytes of one entry, without mapping the file (start-up checks of every
        segment's index would otherwise hold a descriptor per index for nothing)."""
        assert 0 <= slot < self._entries
        if self._mm is not None:
            return self._mm[slot * self.ENTRY_BYTES : (slot + 1) * self.ENTRY_BYTES]
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, self.ENTRY_BYTES, slot * self.ENTRY_BYTES)
        finally:
            os.close(fd)

    def _slot_search(self, key_at: KeyAt, target: int) -> int:
        """The last slot whose key is <= ``target``, or -1; keys must be non-decreasing."""
        if self._entries == 0:
            return -1
        mm = self._mapping()
        if key_at(mm, 0) > target:
            return -1
        low, high = 0, self._entries - 1
        while low < high:
            middle = (low + high + 1) // 2
            if key_at(mm, middle) <= target:
                low = middle
            else:
                high = middle - 1
        return low

    # -- durability and lifetime -----------------------------------------------------------

    def flush(self) -> None:
        """fsync the file; on Linux that writes back pages dirtied through the mapping too."""
        if self._mm is not None and self._writable:
            fsync_file(self.path)

    def close(self) -> None:
        with self._map_lock:
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            self._writable = False

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete_file(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
