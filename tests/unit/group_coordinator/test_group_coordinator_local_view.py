"""The local rocksdict view of __consumer_offsets: a reload replays only what was appended
since the view's position, and a view that no longer matches the topic is rebuilt from it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from brook_group_coordinator.local_view import LocalViewOffsetsLog
from brook_group_coordinator.offsets_log import LogRecord
from memory_offsets_log import MemoryOffsetsLog

PARTITION = 2


class BoundedMemoryLog(MemoryOffsetsLog):
    """The in-memory log with bounds, and a count of the records read from it."""

    def __init__(self) -> None:
        super().__init__()
        self.log_start_offset = 0
        self.records_read = 0

    async def bounds(self, partition: int) -> tuple[int, int]:
        return self.log_start_offset, len(self.partitions.get(partition, []))

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        start = max(from_offset, self.log_start_offset)
        for record in list(self.partitions.get(partition, []))[start:]:
            self.records_read += 1
            yield record


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


async def _replay(view: LocalViewOffsetsLog) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    async for record in view.read(PARTITION, 0):
        latest[record.key] = record.value
    return latest


def test_reload_replays_only_records_appended_after_the_views_position(tmp_path: Path) -> None:
    async def scenario() -> None:
        topic = BoundedMemoryLog()
        view = await LocalViewOffsetsLog.open(topic, tmp_path)
        await view.append(PARTITION, [(b"a", b"1"), (b"b", b"1")])
        assert await _replay(view) == {b"a": b"1", b"b": b"1"}
        await view.close()
        # Written by another coordinator while this one was away.
        await topic.append(PARTITION, [(b"a", b"2"), (b"c", b"1"), (b"b", None)])
        topic.records_read = 0
        reopened = await LocalViewOffsetsLog.open(topic, tmp_path)
        assert await _replay(reopened) == {b"a": b"2", b"b": None, b"c": b"1"}
        assert reopened.replayed_from[PARTITION] == 2
        assert topic.records_read == 3
        topic.records_read = 0
        assert await _replay(reopened) == {b"a": b"2", b"c": b"1"}
        assert topic.records_read == 0
        await reopened.close()

    run(scenario)


def test_view_ahead_of_the_topic_is_rebuilt_from_offset_zero(tmp_path: Path) -> None:
    async def scenario() -> None:
        old = BoundedMemoryLog()
        view = await LocalViewOffsetsLog.open(old, tmp_path)
        await view.append(PARTITION, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
        await _replay(view)
        await view.close()
        # The topic was recreated: it holds less than the view claims to have seen.
        recreated = BoundedMemoryLog()
        recreated.partitions[PARTITION] = [LogRecord(0, b"z", b"9")]
        reopened = await LocalViewOffsetsLog.open(recreated, tmp_path)
        assert await _replay(reopened) == {b"z": b"9"}
        assert reopened.replayed_from[PARTITION] == 0
        await reopened.close()

    run(scenario)


def test_view_behind_the_log_start_is_rebuilt(tmp_path: Path) -> None:
    async def scenario() -> None:
        topic = BoundedMemoryLog()
        view = await LocalViewOffsetsLog.open(topic, tmp_path)
        await view.append(PARTITION, [(b"a", b"1")])
        await _replay(view)
        await topic.append(PARTITION, [(b"a", b"2"), (b"b", b"1"), (b"a", None)])
        # Records 1..2 deleted: the view cannot know what they said.
        topic.log_start_offset = 3
        assert await _replay(view) == {b"a": None}
        assert view.replayed_from[PARTITION] == 0
        await view.close()

    run(scenario)


def test_append_not_following_the_view_is_left_to_the_next_replay(tmp_path: Path) -> None:
    async def scenario() -> None:
        topic = BoundedMemoryLog()
        view = await LocalViewOffsetsLog.open(topic, tmp_path)
        await view.append(PARTITION, [(b"first", b"1")])
        await _replay(view)
        await topic.append(PARTITION, [(b"other", b"1")])  # another writer, unseen
        await view.append(PARTITION, [(b"mine", b"1")])
        topic.records_read = 0
        assert await _replay(view) == {b"first": b"1", b"other": b"1", b"mine": b"1"}
        assert topic.records_read == 2
        assert view.replayed_from[PARTITION] == 1
        await view.close()

    run(scenario)
