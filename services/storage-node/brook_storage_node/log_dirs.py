"""DescribeLogDirs: the node's partition logs by data directory, with the log cleaner's view.

Kafka's DescribeLogDirs (what kafka-log-dirs prints) for one node, plus what the cleaner
manager knows of each compacted log (log/log_cleaner_manager.py): clean and dirty bytes, the
dirty ratio, where the next pass starts, whether the partition is uncleanable and why, and
when it was last cleaned. Every log the node holds is described, led or followed. Measuring a
log reads its segment list and at most one batch header, so the work runs off the event loop.
"""

from __future__ import annotations

from collections.abc import Collection

from brook.v1 import storage_pb2
from brook_storage_node.log import LogError, LogManager, PartitionLog, TopicPartition

__all__ = ["describe_log_dirs"]


def describe_log_dirs(
    log_manager: LogManager, partitions: Collection[TopicPartition]
) -> storage_pb2.DescribeLogDirsResponse:
    """The logs of ``partitions`` (all when empty) grouped by data directory, sorted by path
    and then partition. A log closed or deleted meanwhile is left out."""
    by_dir: dict[str, list[storage_pb2.LogDirPartition]] = {}
    for tp, log in sorted(log_manager.logs.items()):
        if partitions and tp not in partitions:
            continue
        try:
            described = _describe(log_manager, log)
        except LogError:
            if log.closed:
                continue
            raise
        by_dir.setdefault(str(log.directory.parent), []).append(described)
    return storage_pb2.DescribeLogDirsResponse(
        log_dirs=[
            storage_pb2.LogDirDescription(path=path, partitions=described)
            for path, described in sorted(by_dir.items())
        ]
    )


def _describe(log_manager: LogManager, log: PartitionLog) -> storage_pb2.LogDirPartition:
    tp = log.topic_partition
    described = storage_pb2.LogDirPartition(
        topic=tp.topic,
        partition=tp.partition,
        size_bytes=log.size_bytes,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        compacted=log.config.compact,
        last_cleaned_ms=-1,
    )
    if not log.config.compact:
        return described
    state = log_manager.cleaner.state_of(log)
    described.clean_bytes = state.sizes.clean_bytes
    described.dirty_bytes = state.sizes.dirty_bytes
    described.dirty_ratio = state.sizes.dirty_ratio
    described.first_dirty_offset = state.offsets.first_dirty_offset
    described.first_uncleanable_offset = state.offsets.first_uncleanable_offset
    described.uncleanable = state.uncleanable_reason is not None
    described.uncleanable_reason = state.uncleanable_reason or ""
    if state.last_cleaned_ms is not None:
        described.last_cleaned_ms = state.last_cleaned_ms
    return described
