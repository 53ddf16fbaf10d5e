"""Committed offsets of one group: commit (with Kafka's metadata bound), fetch, and expiry by
offsets.retention.minutes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from brook.errors import ErrorCode
from brook_group_coordinator.records import OffsetCommitValue

__all__ = ["GroupOffsets", "OffsetLimits", "check_commit_partition"]

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetLimits:
    metadata_bytes_max: int
    retention_ms: int


def check_commit_partition(
    limits: OffsetLimits, topic: str, partition: int, offset: int, metadata: str
) -> tuple[ErrorCode, str]:
    """The per-partition checks of a commit, before anything is written."""
    if not topic or partition < 0:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "a commit needs a topic and a partition >= 0"
    if offset < -1:
        return ErrorCode.INVALID_REQUEST, f"committed offset {offset} is below -1"
    size = len(metadata.encode("utf-8"))
    if size > limits.metadata_bytes_max:
        return (
            ErrorCode.OFFSET_METADATA_TOO_LARGE,
            f"metadata is {size} bytes; offset.metadata.max.bytes is {limits.metadata_bytes_max}",
        )
    return ErrorCode.NONE, ""


class GroupOffsets:
    """The latest committed offset per partition of one group, with the log position that
    orders it against a transaction's offsets (``record_offset``)."""

    def __init__(self) -> None:
        self.by_partition: dict[TopicPartitionKey, OffsetCommitValue] = {}
        self._record_offsets: dict[TopicPartitionKey, int] = {}

    def __len__(self) -> int:
        return len(self.by_partition)

    def put(self, topic: str, partition: int, value: OffsetCommitValue, record_offset: int) -> None:
        """``record_offset``: where the commit is in __consumer_offsets; for an offset a
        committed transaction made the group's, where its pending record is."""
        self.by_partition[(topic, partition)] = value
        self._record_offsets[(topic, partition)] = record_offset

    def remove(self, topic: str, partition: int) -> None:
        self.by_partition.pop((topic, partition), None)
        self._record_offsets.pop((topic, partition), None)

    def get(self, topic: str, partition: int) -> OffsetCommitValue | None:
        return self.by_partition.get((topic, partition))

    def record_offset(self, topic: str, partition: int) -> int | None:
        return self._record_offsets.get((topic, partition))

    def expired(
        self, now_ms: int, retention_ms: int, empty_since_ms: int | None
    ) -> Iterable[TopicPartitionKey]:
        """Kafka's rule (KIP-211): offsets expire only while the group is empty, counted from
        the later of the commit and the moment the group became empty."""
        if empty_since_ms is None:
            return []
        return [
            key
            for key, value in self.by_partition.items()
            if max(value.commit_timestamp_ms, empty_since_ms) + retention_ms <= now_ms
        ]
