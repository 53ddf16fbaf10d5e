"""The coordinator's local view of __consumer_offsets (rocksdict, in
group.coordinator.state.dir), so that taking a partition back after a restart replays only what
was appended since, not the partition from offset 0.

``LocalViewOffsetsLog`` wraps the storage-backed log. For every partition it keeps the latest
record of each key (what compaction would keep) with its offset, and the offset replayed up to.
A replay from offset 0 (what ``GroupManager.load_partition`` asks for) yields the stored records
and then reads the topic from that offset on, storing what it reads. Appends go to the topic;
they are added to the view only when they directly follow its position, so the view never
claims an offset it has not seen (another coordinator may have written in between).

The view is stale, and rebuilt from the topic, when its position is outside the partition's
[log start offset, high watermark]: records it never saw were deleted, or the log it saw is not
the log the storage nodes hold now (a recreated topic). A view that cannot be opened is
discarded: it only ever saves time.

Layout: ``p`` + partition (i32) → position (i64); ``r`` + partition (i32) + record key →
offset (i64) + value. Tombstones delete the key. A record batch and the new position are
written in one WriteBatch, so the view is always a prefix of the log.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import struct
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final, Protocol

from rocksdict import Options, Rdict, WriteBatch

from brook_group_coordinator.offsets_log import LogRecord
from brook_group_coordinator.records import FENCE_KEY, encode_fence_value

__all__ = ["VIEW_FLUSH_RECORDS", "BoundedOffsetsLog", "LocalViewOffsetsLog"]

# Records read from the topic are written to the view in groups of this many, so a long replay
# holds a bounded number of them in memory and a crash mid-replay keeps what was done.
VIEW_FLUSH_RECORDS: Final = 10_000
VIEW_DIRECTORY: Final = "offsets-view"

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_log = logging.getLogger(__name__)


class BoundedOffsetsLog(Protocol):
    async def append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> int: ...

    def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]: ...

    async def bounds(self, partition: int) -> tuple[int, int]: ...

    async def claim(self, partition: int, coordinator_epoch: int) -> int | None: ...


def _position_key(partition: int) -> bytes:
    return b"p" + _I32.pack(partition)


def _record_prefix(partition: int) -> bytes:
    return b"r" + _I32.pack(partition)


class _View:
    """The rocksdict store; every method blocks (called through ``asyncio.to_thread``)."""

    def __init__(self, path: Path) -> None:
        try:
            self._db = Rdict(str(path), options=Options(raw_mode=True))
        except Exception as error:  # rocksdict raises plain exceptions for a damaged store
            _log.warning("discarding an unreadable local view", extra={"error": str(error)})
            shutil.rmtree(path, ignore_errors=True)
            self._db = Rdict(str(path), options=Options(raw_mode=True))

    def position(self, partition: int) -> int | None:
        raw = self._db.get(_position_key(partition))
        return None if raw is None else int(_I64.unpack(raw)[0])

    def records(self, partition: int) -> list[LogRecord]:
        prefix = _record_prefix(partition)
        found = []
        iterator = self._db.iter()
        iterator.seek(prefix)
        while iterator.valid():
            key = iterator.key()
            if not key.startswith(prefix):
                break
            raw = iterator.value()
            found.append(LogRecord(_I64.unpack_from(raw)[0], key[len(prefix) :], raw[8:]))
            iterator.next()
        return found

    def clear(self, partition: int) -> None:
        batch = WriteBatch(raw_mode=True)
        for record in self.records(partition):
            batch.delete(_record_prefix(partition) + record.key)
        batch.delete(_position_key(partition))
        self._db.write(batch)

    def store(self, partition: int, records: Sequence[LogRecord], position: int) -> None:
        batch = WriteBatch(raw_mode=True)
        prefix = _record_prefix(partition)
        for record in records:
            if record.value is None:
                batch.delete(prefix + record.key)
            else:
                batch.put(prefix + record.key, _I64.pack(record.offset) + record.value)
        batch.put(_position_key(partition), _I64.pack(position))
        self._db.write(batch)

    def close(self) -> None:
        self._db.close()


class LocalViewOffsetsLog:
    def __init__(self, log: BoundedOffsetsLog, view: _View) -> None:
        self._log = log
        self._view = view
        # One thread at a time in the store; per-partition order comes from the manager.
        self._lock = asyncio.Lock()
        self.replayed_from: dict[int, int] = {}
        """partition → the topic offset its last load read from (0: a full replay)."""

    @classmethod
    async def open(cls, log: BoundedOffsetsLog, state_dir: Path) -> LocalViewOffsetsLog:
        view = await asyncio.to_thread(_View, state_dir / VIEW_DIRECTORY)
        return cls(log, view)

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._view.close)

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        last = await self._log.append(partition, records)
        first = last - len(records) + 1
        async with self._lock:
            position = await asyncio.to_thread(self._view.position, partition)
            if position == first:
                applied = [LogRecord(first + i, k, v) for i, (k, v) in enumerate(records)]
                await asyncio.to_thread(self._view.store, partition, applied, last + 1)
        return last

    async def claim(self, partition: int, coordinator_epoch: int) -> int | None:
        offset = await self._log.claim(partition, coordinator_epoch)
        if offset is not None:
            # Recorded like an append, so that the view still follows the log right after it.
            fence = LogRecord(offset, FENCE_KEY, encode_fence_value(coordinator_epoch))
            async with self._lock:
                position = await asyncio.to_thread(self._view.position, partition)
                if position == offset:
                    await asyncio.to_thread(self._view.store, partition, [fence], offset + 1)
        return offset

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        if from_offset != 0:
            async for record in self._log.read(partition, from_offset):
                yield record
            return
        log_start, high_watermark = await self._log.bounds(partition)
        async with self._lock:
            stored_position = await asyncio.to_thread(self._view.position, partition)
            position = stored_position
            if position is not None and log_start <= position <= high_watermark:
                stored = await asyncio.to_thread(self._view.records, partition)
            else:
                if position is not None:
                    _log.info(
                        "local view of a partition is stale; replaying it from the topic",
                        extra={
                            "partition": partition,
                            "view_position": position,
                            "log_start_offset": log_start,
                            "high_watermark": high_watermark,
                        },
                    )
                await asyncio.to_thread(self._view.clear, partition)
                position, stored = 0, []
        self.replayed_from[partition] = position
        for record in stored:
            yield record
        pending: list[LogRecord] = []
        reached = position
        async for record in self._log.read(partition, position):
            pending.append(record)
            reached = record.offset + 1
            yield record
            if len(pending) >= VIEW_FLUSH_RECORDS:
                await self._store(partition, pending, reached)
                pending = []
        # The read covered everything below the high watermark taken before it (control
        # batches and compacted gaps included), even where it yielded nothing.
        reached = max(reached, high_watermark)
        if pending or reached != stored_position:
            await self._store(partition, pending, reached)

    async def _store(self, partition: int, records: list[LogRecord], position: int) -> None:
        async with self._lock:
            await asyncio.to_thread(self._view.store, partition, records, position)
