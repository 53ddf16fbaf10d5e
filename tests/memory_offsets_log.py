"""An in-process __consumer_offsets (append-only list per partition) for the group manager's
unit tests; the storage-node-backed log is exercised by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from brook_group_coordinator.offsets_log import LogRecord

__all__ = ["MemoryOffsetsLog"]


class MemoryOffsetsLog:
    def __init__(self) -> None:
        self.partitions: dict[int, list[LogRecord]] = {}

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        log = self.partitions.setdefault(partition, [])
        for key, value in records:
            log.append(LogRecord(len(log), key, value))
        return len(log) - 1

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        for record in list(self.partitions.get(partition, []))[from_offset:]:
            yield record
