"""Which compacted log to clean next, and when (Kafka's LogCleanerManager and LogCleaner).

CONTRACT STUB (issue #18): the signatures below are what the cleaner threads, the CLI and
metrics build on; the implementation replaces the bodies. See docs/compaction.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from brook_storage_node.log.cleaner import CleanableOffsets

if TYPE_CHECKING:
    from brook_storage_node.log.partition_log import PartitionLog


def cleanable_offsets(
    log: PartitionLog, checkpointed_dirty_offset: int | None, now_ms: int
) -> CleanableOffsets:
    raise NotImplementedError


@dataclass(frozen=True, slots=True)
class LogCleanSizes:
    """What the cleaner manager ranks logs by, and what the CLI and metrics show."""

    clean_bytes: int  # from the log start to the first dirty offset
    dirty_bytes: int  # from the first dirty offset to the first uncleanable offset

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def clean_sizes(log: PartitionLog, offsets: CleanableOffsets) -> LogCleanSizes:
    raise NotImplementedError
