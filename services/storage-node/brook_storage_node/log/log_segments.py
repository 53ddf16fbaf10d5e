"""The ordered set of a log's segments, as an immutable snapshot.

The seed's copy-on-write segment list (5.4, "Deletes"): a reader takes the current snapshot
and binary-searches it while a roll, truncation or retention pass builds the next one. Changes
cost O(segments) and happen once per roll or deletion; appends never touch the list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from brook_storage_node.log.log_segment import LogSegment


class LogSegments:
    __slots__ = ("_base_offsets", "_segments")

    def __init__(self, segments: Iterable[LogSegment]) -> None:
        self._segments = tuple(segments)
        self._base_offsets = [segment.base_offset for segment in self._segments]
        assert all(
            a < b for a, b in zip(self._base_offsets, self._base_offsets[1:], strict=False)
        ), f"segment base offsets are not increasing: {self._base_offsets}"

    def __len__(self) -> int:
        return len(self._segments)

    def __getitem__(self, index: int) -> LogSegment:
        return self._segments[index]

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    @property
    def active(self) -> LogSegment:
        """The last segment, the only one appended to."""
        return self._segments[-1]

    def floor_index(self, offset: int) -> int:
        """Index of the segment that would hold ``offset`` (largest base <= offset), or -1."""
        return bisect.bisect_right(self._base_offsets, offset) - 1

    def from_offset(self, offset: int) -> tuple[LogSegment, ...]:
        """The segment holding ``offset`` and every later one."""
        return self._segments[max(self.floor_index(offset), 0) :]

    def next_base_offset(self, index: int) -> int | None:
        """Base offset of the segment after ``index``, None for the active segment."""
        return self._base_offsets[index + 1] if index + 1 < len(self._base_offsets) else None

    def total_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    def with_segment(self, segment: LogSegment) -> LogSegments:
        return LogSegments((*self._segments, segment))

    def without(self, removed: Iterable[LogSegment]) -> LogSegments:
        gone = {id(segment) for segment in removed}
        return LogSegments(segment for segment in self._segments if id(segment) not in gone)
