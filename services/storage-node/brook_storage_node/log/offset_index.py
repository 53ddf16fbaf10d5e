"""The sparse offset index of a segment: offset -> byte position of the batch holding it.

One 8-byte entry (relative offset int32, position int32, big-endian: Kafka's own ``.index``
layout) roughly every index.interval.bytes of log. An entry maps the last offset of a batch to
the position where that batch starts, so a look-up for any offset lands at or before the batch
that contains it and the segment scans forward at most about one interval of headers.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

from brook_storage_node.log.abstract_index import AbstractIndex
from brook_storage_node.log.log_config import OFFSET_INDEX_ENTRY_BYTES

_ENTRY = struct.Struct(">ii")
_RELATIVE = struct.Struct(">i")
_INT32_MAX = 2**31 - 1
assert _ENTRY.size == OFFSET_INDEX_ENTRY_BYTES


class OffsetPosition(NamedTuple):
    offset: int
    position: int


def _relative_offset_at(mm: mmap.mmap, slot: int) -> int:
    (relative,) = _RELATIVE.unpack_from(mm, slot * OFFSET_INDEX_ENTRY_BYTES)
    return int(relative)


class OffsetIndex(AbstractIndex):
    ENTRY_BYTES = OFFSET_INDEX_ENTRY_BYTES

    def entry(self, slot: int) -> OffsetPosition:
        assert 0 <= slot < self._entries
        relative, position = _ENTRY.unpack_from(self._mapping(), slot * self.ENTRY_BYTES)
        return OffsetPosition(self.base_offset + relative, position)

    def last_entry(self) -> OffsetPosition:
        """The newest entry, or (base offset, 0) when there is none."""
        if self._entries == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(self._entries - 1)

    def lookup(self, offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``offset``, or (base offset, 0)."""
        slot = self._slot_search(_relative_offset_at, offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; False (and nothing written) when the index is full.

        A sparse index may skip entries, so a full index costs only longer scans until the
        segment rolls (which a full index also triggers).
        """
        if self.is_full:
            return False
        relative = offset - self.base_offset
        assert 0 <= relative <= _INT32_MAX, f"offset {offset} is outside segment {self.base_offset}"
        assert 0 <= position <= _INT32_MAX
        if self._entries:
            last = self.last_entry()
            assert offset > last.offset and position > last.position, (
                f"index entry ({offset}, {position}) does not follow {last} in {self.path}"
            )
        _ENTRY.pack_into(
            self._writable_mapping(), self._entries * self.ENTRY_BYTES, relative, position
        )
        self._entries += 1
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for ``offset`` or later."""
        self._truncate_to_entries(
            self._slot_search(_relative_offset_at, offset - self.base_offset - 1) + 1
        )

    def problem(self, segment_bytes: int, next_offset: int | None) -> str | None:
        """Why this index cannot belong to a segment of ``segment_bytes`` whose offsets end
        before ``next_offset`` (None: unknown), or None.

        Cheap checks on the last entry only (Kafka checks less): enough to catch a file that
        was never trimmed or that belongs to other data.
        """
        size = self.path.stat().st_size
        if size % self.ENTRY_BYTES:
            return f"its size {size} is not a multiple of {self.ENTRY_BYTES}"
        if self._entries == 0:
            return None
        relative, position = _ENTRY.unpack(self._peek(self._entries - 1))
        last = OffsetPosition(self.base_offset + relative, position)
        # The first batch of a segment is never indexed, so every entry points past byte 0.
        if (
            last.offset <= self.base_offset
            or not 0 < last.position < segment_bytes
            or (next_offset is not None and last.offset >= next_offset)
        ):
            return (
                f"its last entry (offset {last.offset}, position {last.position}) cannot "
                f"belong to a {segment_bytes}-byte segment based at {self.base_offset}"
            )
        return None
