"""The sparse time index of a segment: largest timestamp so far -> offset of that record.

One 12-byte entry (timestamp int64, relative offset int32, big-endian: Kafka's ``.timeindex``
layout), added with the offset index entries and only when the segment's largest timestamp
grew, so timestamps and offsets both increase along the file. An entry (T, O) says every
record up to offset O has a timestamp <= T: a search for the first record with timestamp >= t
may start after the last entry with T < t.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

from brook_storage_node.log.abstract_index import AbstractIndex
from brook_storage_node.log.log_config import TIME_INDEX_ENTRY_BYTES

_ENTRY = struct.Struct(">qi")
_TIMESTAMP = struct.Struct(">q")
_RELATIVE = struct.Struct(">i")
_INT32_MAX = 2**31 - 1
_RELATIVE_OFFSET_POSITION = 8
assert _ENTRY.size == TIME_INDEX_ENTRY_BYTES

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


def _timestamp_at(mm: mmap.mmap, slot: int) -> int:
    (timestamp,) = _TIMESTAMP.unpack_from(mm, slot * TIME_INDEX_ENTRY_BYTES)
    return int(timestamp)


def _relative_offset_at(mm: mmap.mmap, slot: int) -> int:
    (relative,) = _RELATIVE.unpack_from(
        mm, slot * TIME_INDEX_ENTRY_BYTES + _RELATIVE_OFFSET_POSITION
    )
    return int(relative)


class TimeIndex(AbstractIndex):
    ENTRY_BYTES = TIME_INDEX_ENTRY_BYTES

    @property
    def is_full(self) -> bool:
        # The last slot is kept for the entry written when the segment is sealed, so that a
        # sealed segment's largest timestamp is always its last entry.
        return self._entries >= self._max_entries - 1

    def entry(self, slot: int) -> TimestampOffset:
        assert 0 <= slot < self._entries
        timestamp, relative = _ENTRY.unpack_from(self._mapping(), slot * self.ENTRY_BYTES)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def _unpack(self, raw: bytes) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack(raw)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def last_entry(self) -> TimestampOffset:
        """The newest entry, or (NO_TIMESTAMP, base offset) when there is none."""
        if self._entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(self._entries - 1)

    def lookup_before(self, timestamp: int) -> TimestampOffset:
        """The last entry with a timestamp strictly below ``timestamp``, or (NO_TIMESTAMP, base).

        Strictly below, because records up to an entry's offset may share its timestamp; a
        record equal to ``timestamp`` could sit anywhere before the entry's offset.
        """
        slot = self._slot_search(_timestamp_at, timestamp - 1)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> bool:
        """Add (timestamp, offset) if ``timestamp`` is larger than the last entry's.

        ``final`` may use the slot kept for sealing the segment.
        """
        if self._entries and timestamp <= self.last_entry().timestamp:
            return False
        if timestamp <= NO_TIMESTAMP:
            return False
        if self._entries >= self._max_entries or (self.is_full and not final):
            return False
        relative = offset - self.base_offset
        assert 0 <= relative <= _INT32_MAX, f"offset {offset} is outside segment {self.base_offset}"
        if self._entries:
            assert offset >= self.last_entry().offset, (
                f"time index offsets go backwards in {self.path}"
            )
        _ENTRY.pack_into(
            self._writable_mapping(), self._entries * self.ENTRY_BYTES, timestamp, relative
        )
        self._entries += 1
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ``offset`` or later."""
        self._truncate_to_entries(
            self._slot_search(_relative_offset_at, offset - self.base_offset - 1) + 1
        )

    def problem(self, next_offset: int | None) -> str | None:
        """Why this file cannot be the trimmed time index of a segment whose offsets end
        before ``next_offset`` (None: unknown), or None. Cheap: first and last entry."""
        size = self.path.stat().st_size
        if size % self.ENTRY_BYTES:
            return f"its size {size} is not a multiple of {self.ENTRY_BYTES}"
        if self._entries == 0:
            return None
        first, last = (self._unpack(self._peek(slot)) for slot in (0, self._entries - 1))
        if (
            first.timestamp <= NO_TIMESTAMP
            or last.timestamp < first.timestamp
            or last.offset < first.offset
            or first.offset < self.base_offset
            or (next_offset is not None and last.offset >= next_offset)
        ):
            return f"its entries are not increasing (first {tuple(first)}, last {tuple(last)})"
        return None
