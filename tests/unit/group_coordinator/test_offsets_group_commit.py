"""Group commit of __consumer_offsets appends, against the real storage node served in-process:
commits queued behind the partition's in-flight append go out as one batch (one sequence),
each caller answered with the fate of that batch. The node, the log and the ISR switch are the
fencing tests' (test_offsets_write_fencing.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import (
    GROUP_COMMIT_BATCH_BYTES_MAX,
    GROUP_COMMIT_RECORDS_MAX,
    RECORD_OVERHEAD_BYTES_MAX,
    CommitPartition,
    GroupManager,
)
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from brook_group_coordinator.storage_offsets_log import StorageOffsetsLog
from brook_group_coordinator.timers import LoopTimers
from memory_offsets_log import MemoryOffsetsLog
from test_offsets_write_fencing import (
    ABSENT_REPLICA,
    GROUP,
    NODE_ID,
    PARTITION,
    PARTITIONS,
    TOPIC,
    Lost,
    _log,
    _node,
    _producer_batches,
    _set_isr,
    run,
)

from brook.errors import ErrorCode

COMMITTERS = 24
METADATA = "m" * 64  # OffsetLimits.metadata_bytes_max below: the largest commit accepted


def _manager(
    log: StorageOffsetsLog | MemoryOffsetsLog,
    lost: Lost | None = None,
    *,
    batch_bytes_max: int = GROUP_COMMIT_BATCH_BYTES_MAX,
    batch_records_max: int = GROUP_COMMIT_RECORDS_MAX,
) -> GroupManager:
    return GroupManager(
        limits=GroupLimits(100, 60_000, initial_rebalance_delay_ms=0, members_max=100),
        offset_limits=OffsetLimits(metadata_bytes_max=64, retention_ms=60_000),
        timers=LoopTimers(asyncio.get_running_loop()),
        log=log,
        partition_count=PARTITIONS,
        claims=log if isinstance(log, StorageOffsetsLog) else None,
        on_partition_lost=None if lost is None else lambda p, e, f: lost.append((p, e, f)),
        batch_bytes_max=batch_bytes_max,
        batch_records_max=batch_records_max,
    )


async def _commit_each(manager: GroupManager, offset: int) -> list[ErrorCode]:
    """COMMITTERS concurrent commits of ``offset`` + i to partition i of TOPIC, from outside
    the group (generation -1, no member id), as many consumers of one group committing at
    once; the error of each."""

    async def commit(i: int) -> ErrorCode:
        results = await manager.commit(
            GROUP, "", None, -1, [CommitPartition(TOPIC, i, offset + i, -1, METADATA)]
        )
        return results[0].error

    return list(await asyncio.gather(*(commit(i) for i in range(COMMITTERS))))


def _committed_each(manager: GroupManager) -> list[int]:
    error, message, results = manager.fetch(GROUP, [(TOPIC, i) for i in range(COMMITTERS)])
    assert error is ErrorCode.NONE, message
    return [r.offset for r in results]


def _expected(offset: int) -> list[int]:
    return [offset + i for i in range(COMMITTERS)]


def test_concurrent_commits_to_one_partition_share_batches_and_all_are_read_back_after_a_reload(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, _):
            async with _log(node) as log:
                manager = _manager(log)
                await manager.load_partition(PARTITION, 1)
                assert await _commit_each(manager, 100) == [ErrorCode.NONE] * COMMITTERS
                assert await _commit_each(manager, 200) == [ErrorCode.NONE] * COMMITTERS
                assert _committed_each(manager) == _expected(200)
            batches = await _producer_batches(node)
            fence, commits = batches[0], batches[1:]
            assert fence == (1, 0, 1)
            assert len(commits) < 2 * COMMITTERS
            assert sum(count for _, _, count in commits) == 2 * COMMITTERS
            # One producer sequence per record, no gap: each batch took the next sequences.
            sequence = 1
            for epoch, base_sequence, count in commits:
                assert (epoch, base_sequence) == (1, sequence)
                sequence += count
            async with _log(node) as replay_log:
                replayed = _manager(replay_log)
                await replayed.load_partition(PARTITION, 2)
                assert _committed_each(replayed) == _expected(200)

    run(scenario)


def test_a_merged_append_that_is_refused_fails_every_commit_in_it_and_changes_nothing(
    tmp_path: Path,
) -> None:
    # Each commit alone fits message.max.bytes; the merged batch of all of them does not.
    small_batches = {"message.max.bytes": "2048"}

    async def scenario() -> None:
        async with _node(tmp_path, settings=small_batches) as (node, _), _log(node) as log:
            lost: Lost = []
            manager = _manager(log, lost)
            await manager.load_partition(PARTITION, 1)
            results = await manager.commit(
                GROUP, "", None, -1, [CommitPartition(TOPIC, i, 7, -1, "") for i in range(3)]
            )
            assert [r.error for r in results] == [ErrorCode.NONE] * 3
            before = await _producer_batches(node)

            errors = await _commit_each(manager, 100)

            assert errors == [ErrorCode.INVALID_COMMIT_OFFSET_SIZE] * COMMITTERS
            assert await _producer_batches(node) == before
            # Still the coordinator, and no refused offset reached the cache.
            assert lost == []
            error, message, offsets = manager.fetch(GROUP, [(TOPIC, i) for i in range(4)])
            assert error is ErrorCode.NONE, message
            assert [r.offset for r in offsets] == [7, 7, 7, -1]

    run(scenario)


def test_a_merged_append_with_an_unknown_outcome_acknowledges_none_of_its_commits(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, source), _log(node) as log:
            lost: Lost = []
            manager = _manager(log, lost)
            await manager.load_partition(PARTITION, 1)
            # acks=all cannot be met: the ISR names a replica that never fetches.
            await _set_isr(source, (NODE_ID, ABSENT_REPLICA), 1)

            errors = await _commit_each(manager, 100)

            assert errors == [ErrorCode.NOT_COORDINATOR] * COMMITTERS
            # One failure, one partition dropped, however many waited on the batch.
            assert lost == [(PARTITION, 1, False)]
            assert manager.check_coordinator(GROUP)[0] is ErrorCode.NOT_COORDINATOR
            # The reload sends the kept batch again as is: the merged batch lands whole, once.
            await _set_isr(source, (NODE_ID,), 2)
            await manager.load_partition(PARTITION, 1)
            assert _committed_each(manager) == _expected(100)
            assert [count for epoch, _, count in await _producer_batches(node) if epoch == 1] == [
                1,
                COMMITTERS,
            ]

    run(scenario, timeout_s=60.0)


def _counted_bytes(offset: int) -> int:
    """What the group commit bound counts for one commit of ``_commit_each`` (their offsets
    all have as many digits as ``offset``)."""
    key = encode_key(OffsetCommitKey(GROUP, TOPIC, 0))
    value = encode_value(OffsetCommitValue(offset, -1, METADATA, time.time_ns() // 1_000_000))
    return len(key) + len(value) + RECORD_OVERHEAD_BYTES_MAX


@pytest.mark.parametrize("bound", ["records", "bytes"])
def test_the_group_commit_bounds_split_queued_commits_into_several_batches(
    tmp_path: Path, bound: str
) -> None:
    commits_per_batch_max = 5

    async def scenario() -> None:
        if bound == "records":
            bytes_max, records_max = GROUP_COMMIT_BATCH_BYTES_MAX, commits_per_batch_max
        else:
            # Room for 5 commits and a half: the sixth does not fit.
            per_commit = _counted_bytes(100)
            bytes_max = commits_per_batch_max * per_commit + per_commit // 2
            records_max = GROUP_COMMIT_RECORDS_MAX
        async with _node(tmp_path) as (node, _):
            async with _log(node) as log:
                manager = _manager(log, batch_bytes_max=bytes_max, batch_records_max=records_max)
                await manager.load_partition(PARTITION, 1)
                assert await _commit_each(manager, 100) == [ErrorCode.NONE] * COMMITTERS
            counts = [count for _, _, count in (await _producer_batches(node))[1:]]
            assert sum(counts) == COMMITTERS
            assert max(counts) == commits_per_batch_max, counts
            # Merged all the same: fewer batches than commits.
            assert len(counts) < COMMITTERS
            async with _log(node) as replay_log:
                replayed = _manager(replay_log)
                await replayed.load_partition(PARTITION, 2)
                assert _committed_each(replayed) == _expected(100)

    run(scenario)


def test_a_commit_whose_caller_gave_up_before_it_was_sent_is_left_out() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = _manager(log)
        await manager.load_partition(PARTITION, 1)
        first = asyncio.ensure_future(_commit_each(manager, 100))
        # Queued, then abandoned before its batch went out (a client that hung up).
        late = asyncio.ensure_future(
            manager.commit(GROUP, "", None, -1, [CommitPartition(TOPIC, 99, 5, -1, "")])
        )
        await asyncio.sleep(0)
        late.cancel()
        assert await first == [ErrorCode.NONE] * COMMITTERS
        with pytest.raises(asyncio.CancelledError):
            await late
        error, message, offsets = manager.fetch(GROUP, [(TOPIC, 99)])
        assert (error, offsets[0].offset) == (ErrorCode.NONE, -1), message
        assert len(log.partitions[PARTITION]) == COMMITTERS
        await manager.close()

    run(scenario)
