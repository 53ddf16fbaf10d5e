"""Which old segments a log may delete (seed 001 section 5.4, "Deletes").

Three rules, each over a prefix of the segments, oldest first: the newest record of a segment
is older than retention.ms; the partition is larger than retention.bytes; the segment lies
wholly below the log start offset (DeleteRecords moved it). A segment goes if any rule says
so. Retention deletes whole segments only, never the active one, and never a segment holding
records at or above the high watermark: data not yet replicated is not the retention's to drop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from brook_storage_node.log.log_config import LogConfig
from brook_storage_node.log.log_segments import LogSegments


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    count: int  # the oldest ``count`` segments go
    reason: str


def deletable_prefix(
    segments: LogSegments,
    config: LogConfig,
    *,
    now_ms: int,
    high_watermark: int,
    log_start_offset: int,
) -> RetentionDecision | None:
    """How many of the oldest segments retention deletes now, and why; None for none."""
    candidates = 0
    for index in range(len(segments) - 1):
        next_base = segments.next_base_offset(index)
        assert next_base is not None
        if next_base > high_watermark:
            break
        candidates += 1
    if candidates == 0:
        return None
    decisions = []
    below_start = _count_while(candidates, lambda i: _next_base(segments, i) <= log_start_offset)
    if below_start:
        decisions.append(
            RetentionDecision(below_start, f"below the log start offset {log_start_offset}")
        )
    if config.delete_retention_enabled and config.retention_ms >= 0:
        expired = _count_while(
            candidates,
            lambda i: now_ms - segments[i].largest_timestamp_for_retention > config.retention_ms,
        )
        if expired:
            decisions.append(
                RetentionDecision(expired, f"older than retention.ms={config.retention_ms}")
            )
    if config.delete_retention_enabled and config.retention_bytes >= 0:
        excess = segments.total_bytes() - config.retention_bytes
        oversize = 0
        for index in range(candidates):
            size = segments[index].size_bytes
            if excess - size < 0:
                break
            excess -= size
            oversize += 1
        if oversize:
            decisions.append(
                RetentionDecision(
                    oversize, f"partition over retention.bytes={config.retention_bytes}"
                )
            )
    if not decisions:
        return None
    return max(decisions, key=lambda decision: decision.count)


def _next_base(segments: LogSegments, index: int) -> int:
    next_base = segments.next_base_offset(index)
    assert next_base is not None
    return next_base


def _count_while(limit: int, predicate: Callable[[int], bool]) -> int:
    count = 0
    while count < limit and predicate(count):
        count += 1
    return count
