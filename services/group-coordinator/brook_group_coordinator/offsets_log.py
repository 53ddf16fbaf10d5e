"""How the coordinator reaches __consumer_offsets: append keyed records to a partition and
read a partition back from an offset to its current end.

The service's implementation talks to the storage nodes (StorageService, acks=all); the
interface keeps the group logic independent of the transport and lets it be proven against an
in-process log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["LogRecord", "OffsetsLog", "PartitionClaims"]


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    key: bytes
    # None: a tombstone (the key is deleted once compaction runs).
    value: bytes | None


class OffsetsLog(Protocol):
    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Appends the records as one batch, acknowledged by every in-sync replica; returns the
        offset of the last one. Raises BrookError (NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...)
        when the write is not durable."""
        ...

    def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        """Every record from ``from_offset`` to the partition's end when the read began."""
        ...


class PartitionClaims(Protocol):
    async def claim(self, partition: int, coordinator_epoch: int) -> int | None:
        """Makes this coordinator the only one whose appends to the partition succeed, from
        now until a newer coordinator epoch claims it; returns the offset of the fence record
        appended for it, if one was. Raises BrookError when it could not."""
        ...
