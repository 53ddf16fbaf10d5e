"""Transactional offsets in the group coordinator (TxnCommitOffsets, CompleteTransaction,
FetchOffsets require_stable): pending offsets stay invisible until their transaction commits
and are dropped by an abort; an older producer epoch is fenced; plain commits interleave as in
Kafka (the most recent commit record of a partition wins); a reload of the partition, from the
whole log, from what compaction keeps of it (the local view) or from the real storage node,
gives the same committed and pending offsets; expiry and DeleteGroups treat pending offsets
as Kafka does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import CommitPartition, GroupManager
from brook_group_coordinator.local_view import LocalViewOffsetsLog
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.offsets_log import OffsetsLog
from brook_group_coordinator.ownership import offsets_partition_for
from brook_group_coordinator.txn_offsets import GroupTxnOffsets
from manual_timers import ManualTimers
from memory_offsets_log import MemoryOffsetsLog
from test_group_coordinator_local_view import BoundedMemoryLog
from test_group_coordinator_service import GROUP as SERVED_GROUP
from test_group_coordinator_service import (
    GROUP_PARTITION,
    OTHER_NODE_ID,
    RPC_TIMEOUT_S,
    run,
    serving,
    stable_member,
)
from test_group_coordinator_service import PARTITIONS as SERVED_PARTITIONS
from test_offsets_write_fencing import GROUP, PARTITION, PARTITIONS, TOPIC, _log, _manager, _node
from test_transaction_coordinator import Log as HeldLog

from brook.errors import ErrorCode
from brook.v1 import common_pb2, group_pb2

PRODUCER = 4_000
OTHER_PRODUCER = 4_001
RETENTION_MS = 1_000


async def _txn(
    manager: GroupManager, producer_id: int, epoch: int, offsets: dict[int, int]
) -> list[ErrorCode]:
    results = await manager.txn_commit(
        GROUP,
        producer_id,
        epoch,
        "",
        None,
        -1,
        [CommitPartition(TOPIC, p, o, -1, "") for p, o in offsets.items()],
    )
    return [r.error for r in results]


async def _plain(manager: GroupManager, offsets: dict[int, int]) -> list[ErrorCode]:
    results = await manager.commit(
        GROUP, "", None, -1, [CommitPartition(TOPIC, p, o, -1, "") for p, o in offsets.items()]
    )
    return [r.error for r in results]


async def _end(
    manager: GroupManager,
    producer_id: int,
    committed: bool,
    *,
    epoch: int = 0,
    coordinator_epoch: int = 0,
) -> ErrorCode:
    error, _ = await manager.complete_transaction(
        GROUP, producer_id, epoch, coordinator_epoch, committed
    )
    return error


def _visible(manager: GroupManager) -> dict[int, int]:
    """Every committed offset, as a fetch without require_stable sees it."""
    error, message, results = manager.fetch(GROUP, None)
    assert error is ErrorCode.NONE, message
    assert all(r.error is ErrorCode.NONE for r in results)
    return {r.partition: r.offset for r in results}


def _stable(manager: GroupManager, partitions: tuple[int, ...] = (0, 1)) -> list[object]:
    """Per partition: its committed offset, or the error of a fetch with require_stable."""
    error, message, results = manager.fetch(GROUP, [(TOPIC, p) for p in partitions], True)
    assert error is ErrorCode.NONE, message
    return [r.offset if r.error is ErrorCode.NONE else r.error for r in results]


async def _reloaded(log: OffsetsLog, coordinator_epoch: int = 2) -> GroupManager:
    """A coordinator that takes the partition over and replays it."""
    manager = _manager_on(log)
    await manager.load_partition(PARTITION, coordinator_epoch)
    return manager


def _manager_on(log: OffsetsLog, timers: ManualTimers | None = None) -> GroupManager:
    return GroupManager(
        limits=GroupLimits(100, 60_000, initial_rebalance_delay_ms=0, members_max=100),
        offset_limits=OffsetLimits(metadata_bytes_max=64, retention_ms=RETENTION_MS),
        timers=timers or ManualTimers(),
        log=log,
        partition_count=PARTITIONS,
    )


UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT
NONE = ErrorCode.NONE


async def _pending_over_plain(log: OffsetsLog) -> GroupManager:
    """Partition 0 committed at 5, then a transaction of PRODUCER with 0 at 10 and 1 at 20."""
    manager = await _reloaded(log, 1)
    assert await _plain(manager, {0: 5}) == [NONE]
    assert await _txn(manager, PRODUCER, 0, {0: 10, 1: 20}) == [NONE, NONE]
    return manager


def test_pending_offsets_are_invisible_until_the_commit_then_override_older_ones() -> None:
    async def scenario() -> None:
        manager = await _pending_over_plain(MemoryOffsetsLog())
        assert _visible(manager) == {0: 5}
        assert _stable(manager) == [UNSTABLE, UNSTABLE]
        # Fetching every partition lists those with a committed offset, as Kafka does.
        error, _, every = manager.fetch(GROUP, None, True)
        assert error is NONE
        assert [(r.partition, r.error) for r in every] == [(0, UNSTABLE)]
        assert await _end(manager, PRODUCER, True) == NONE
        assert _visible(manager) == {0: 10, 1: 20}
        assert _stable(manager) == [10, 20]

    run(scenario)


def test_an_abort_drops_pending_offsets_and_a_repeat_or_unknown_end_changes_nothing() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = await _pending_over_plain(log)
        assert await _end(manager, PRODUCER, False) == NONE
        assert _visible(manager) == {0: 5}
        assert _stable(manager) == [5, -1]
        written = len(log.partitions[PARTITION])
        assert await _end(manager, PRODUCER, False) == NONE
        assert await _end(manager, PRODUCER, True) == NONE
        error, _ = await manager.complete_transaction("no-such-group", PRODUCER, 0, 0, True)
        assert error is NONE
        assert len(log.partitions[PARTITION]) == written
        assert _visible(manager) == {0: 5}
        assert _visible(await _reloaded(log)) == {0: 5}

    run(scenario)


def test_an_older_producer_epoch_is_fenced_also_after_a_reload() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = await _reloaded(log, 1)
        assert await _txn(manager, PRODUCER, 3, {0: 10}) == [NONE]
        assert await _txn(manager, PRODUCER, 2, {0: 99}) == [ErrorCode.PRODUCER_FENCED]
        # A marker of the older epoch does not end the newer transaction.
        assert await _end(manager, PRODUCER, True, epoch=2) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _stable(manager, (0,)) == [UNSTABLE]
        # A timeout abort with the bumped epoch fences epoch 3, pending or not.
        assert await _end(manager, PRODUCER, False, epoch=4, coordinator_epoch=7) == NONE
        assert await _txn(manager, PRODUCER, 3, {0: 11}) == [ErrorCode.PRODUCER_FENCED]
        stale = await _end(manager, PRODUCER, True, epoch=4, coordinator_epoch=6)
        assert stale is ErrorCode.TRANSACTION_COORDINATOR_FENCED
        reloaded = await _reloaded(log)
        assert await _txn(reloaded, PRODUCER, 3, {0: 12}) == [ErrorCode.PRODUCER_FENCED]
        assert await _txn(reloaded, PRODUCER, 4, {0: 13}) == [NONE]
        assert _visible(reloaded) == {}

    run(scenario)


async def _interleaved(manager: GroupManager) -> None:
    """Partition 0: a plain commit before the transaction's record, overridden by its commit.
    Partition 1: a plain commit after the transaction's record (before its end), kept.
    Then producer B's record for partition 0 is more recent than A's: A ending after B
    leaves B's offset (also across a reload, see the callers)."""
    assert await _plain(manager, {0: 5}) == [NONE]
    assert await _txn(manager, PRODUCER, 0, {0: 10, 1: 20}) == [NONE, NONE]
    assert await _plain(manager, {1: 25}) == [NONE]
    assert await _end(manager, PRODUCER, True) == NONE
    assert _visible(manager) == {0: 10, 1: 25}
    assert await _txn(manager, PRODUCER, 0, {0: 30}) == [NONE]
    assert await _txn(manager, OTHER_PRODUCER, 0, {0: 40}) == [NONE]
    assert await _end(manager, PRODUCER, True) == NONE
    assert _visible(manager) == {0: 30, 1: 25}


async def _then_other_producer_ends(manager: GroupManager) -> None:
    assert _stable(manager) == [UNSTABLE, 25]
    assert await _end(manager, OTHER_PRODUCER, True) == NONE
    assert _visible(manager) == {0: 40, 1: 25}


def test_plain_commits_interleave_with_transactions_as_in_kafka() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = await _reloaded(log, 1)
        await _interleaved(manager)
        await _then_other_producer_ends(manager)
        assert _visible(await _reloaded(log)) == {0: 40, 1: 25}

    run(scenario)


@pytest.mark.parametrize("in_flight", [False, True], ids=["queued", "in_flight"])
def test_a_plain_commit_still_being_written_when_the_end_is_decided_wins(in_flight: bool) -> None:
    """Its record lands after the pending one (whose producer's turn the end holds), so it is
    the more recent, as Kafka's rule wants, in memory and after a reload."""

    async def scenario() -> None:
        log = HeldLog()
        manager = await _pending_over_plain(log)
        hold = log.append_hold = asyncio.Event()
        if in_flight:
            plain = asyncio.ensure_future(_plain(manager, {0: 30}))
            await log.append_held.wait()
        else:
            ahead = asyncio.ensure_future(_plain(manager, {2: 7}))
            await log.append_held.wait()
            plain = asyncio.ensure_future(_plain(manager, {0: 30}))
            await asyncio.sleep(0)  # queued behind the held append
        end = asyncio.ensure_future(_end(manager, PRODUCER, True))
        await asyncio.sleep(0)  # decided and queued: it waits for no turn
        hold.set()
        assert await plain == [NONE]
        assert await end == NONE
        if not in_flight:
            assert await ahead == [NONE]
        assert _stable(manager) == _stable(await _reloaded(log)) == [30, 20]

    run(scenario)


def test_a_reload_between_two_ends_decides_as_the_coordinator_that_stayed_would() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        await _interleaved(await _reloaded(log, 1))
        # B's record is more recent than A's pending record, not than the commit A's end
        # wrote: the reloaded coordinator knows where A's record was.
        await _then_other_producer_ends(await _reloaded(log))

    run(scenario)


def test_replay_of_what_compaction_keeps_gives_the_same_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        topic = BoundedMemoryLog()
        view = await LocalViewOffsetsLog.open(topic, tmp_path)
        await _interleaved(await _reloaded(view, 1))
        await view.close()
        # The reopened view replays its latest record per key, in key order, not the log.
        reopened = await LocalViewOffsetsLog.open(topic, tmp_path)
        manager = await _reloaded(reopened)
        assert reopened.replayed_from[PARTITION] == len(topic.partitions[PARTITION])
        await _then_other_producer_ends(manager)
        await reopened.close()

    run(scenario)


def test_a_restarted_coordinator_keeps_pending_what_has_no_end_in_the_log() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = await _reloaded(log, 1)
        assert await _plain(manager, {0: 5}) == [NONE]
        assert await _txn(manager, PRODUCER, 0, {0: 10}) == [NONE]
        assert await _txn(manager, OTHER_PRODUCER, 0, {1: 20}) == [NONE]
        before_end = list(log.partitions[PARTITION])
        assert await _end(manager, PRODUCER, True) == NONE
        assert await _end(manager, OTHER_PRODUCER, False) == NONE
        assert _visible(await _reloaded(log)) == {0: 10}
        # The log as it was before the ends were appended: both still pending.
        truncated = MemoryOffsetsLog()
        truncated.partitions[PARTITION] = before_end
        reloaded = await _reloaded(truncated)
        assert _visible(reloaded) == {0: 5}
        assert _stable(reloaded) == [UNSTABLE, UNSTABLE]
        assert await _end(reloaded, PRODUCER, True, coordinator_epoch=1) == NONE
        assert _stable(reloaded) == [10, UNSTABLE]

    run(scenario)


async def _txn_commit_given_up_mid_write(log: HeldLog) -> tuple[GroupManager, asyncio.Event]:
    """A TxnCommitOffsets of PRODUCER (partition 0 at 10) whose caller is gone (a gRPC deadline,
    the gateway's retry) once its record was sent; its append waits for the event returned."""
    manager = await _reloaded(log, 1)
    hold = log.append_hold = asyncio.Event()
    gave_up = asyncio.ensure_future(_txn(manager, PRODUCER, 0, {0: 10}))
    await log.append_held.wait()
    gave_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gave_up
    return manager, hold


def test_a_txn_commit_whose_caller_gave_up_mid_write_is_pending_as_the_log_has_it() -> None:
    async def scenario() -> None:
        log = HeldLog()
        manager, hold = await _txn_commit_given_up_mid_write(log)
        hold.set()
        # Queued behind the abandoned write, so answered once that one was applied.
        assert await _plain(manager, {1: 5}) == [NONE]
        assert _stable(manager) == _stable(await _reloaded(log)) == [UNSTABLE, 5]
        # So the end knows it, and no reload brings it back.
        assert await _end(manager, PRODUCER, False) == NONE
        assert _stable(manager) == _stable(await _reloaded(log)) == [-1, 5]

    run(scenario)


def test_an_end_racing_a_txn_commit_of_its_producer_ends_it_or_fences_it_for_good() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = await _reloaded(log, 1)
        # The TxnCommitOffsets is in flight when the end comes: the end ends it (as Kafka's
        # marker ends everything of the producer before it in the log).
        committed = await asyncio.gather(
            _txn(manager, PRODUCER, 0, {0: 10}), _end(manager, PRODUCER, True)
        )
        assert committed == [[NONE], NONE]
        # A zombie's commit racing the abort that fences it (bumped epoch).
        fenced = await asyncio.gather(
            _txn(manager, PRODUCER, 0, {1: 20}), _end(manager, PRODUCER, False, epoch=1)
        )
        assert fenced == [[NONE], NONE]
        # The other way round: the abort first, so the zombie's commit is refused.
        late = await asyncio.gather(
            _end(manager, PRODUCER, False, epoch=2), _txn(manager, PRODUCER, 1, {1: 30})
        )
        assert late == [NONE, [ErrorCode.PRODUCER_FENCED]]
        assert _stable(manager) == _stable(await _reloaded(log)) == [10, -1]

    run(scenario)


def test_an_end_waits_for_a_txn_commit_whose_caller_gave_up_mid_write() -> None:
    async def scenario() -> None:
        log = HeldLog()
        manager, hold = await _txn_commit_given_up_mid_write(log)
        # The fencing abort comes while the abandoned record is still being written.
        abort = asyncio.ensure_future(_end(manager, PRODUCER, False, epoch=1))
        hold.set()
        assert await abort == NONE
        assert _stable(manager) == _stable(await _reloaded(log)) == [-1, -1]

    run(scenario)


def test_an_apply_that_raises_neither_blocks_its_batch_nor_its_producer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in applying one appended write (here: the first pending offset's) is logged; the
    other writes of its batch are applied and answered, and its producer's turn ends."""
    raised: list[int] = []
    add_pending = GroupTxnOffsets.add_pending

    def buggy_once(txn_offsets: GroupTxnOffsets, producer_id: int, *args: Any) -> None:
        if producer_id == PRODUCER and not raised:
            raised.append(producer_id)
            raise RuntimeError("a bug in applying a pending offset")
        add_pending(txn_offsets, producer_id, *args)

    monkeypatch.setattr(GroupTxnOffsets, "add_pending", buggy_once)

    async def scenario() -> None:
        log = HeldLog()
        manager = await _reloaded(log, 1)
        # Held in flight, so the three writes below queue up and go out as ONE batch.
        hold = log.append_hold = asyncio.Event()
        first = asyncio.ensure_future(_plain(manager, {0: 1}))
        await log.append_held.wait()
        batch = asyncio.gather(
            _txn(manager, PRODUCER, 0, {0: 10}),
            _txn(manager, OTHER_PRODUCER, 0, {1: 20}),
            _plain(manager, {2: 30}),
        )
        await asyncio.sleep(0)
        hold.set()
        assert await first == [NONE]
        assert await asyncio.wait_for(batch, RPC_TIMEOUT_S) == [[NONE], [NONE], [NONE]]
        assert raised == [PRODUCER]
        assert "invariant violated" in caplog.text
        assert _stable(manager, (0, 1, 2)) == [1, UNSTABLE, 30]
        # PRODUCER's turn ended: its next writes are decided and written.
        assert await asyncio.wait_for(_txn(manager, PRODUCER, 0, {0: 11}), RPC_TIMEOUT_S) == [NONE]
        assert await asyncio.wait_for(_end(manager, PRODUCER, True), RPC_TIMEOUT_S) == NONE
        assert await asyncio.wait_for(_end(manager, OTHER_PRODUCER, True), RPC_TIMEOUT_S) == NONE
        assert _stable(manager, (0, 1, 2)) == _stable(await _reloaded(log), (0, 1, 2))
        assert _stable(manager, (0, 1, 2)) == [11, 20, 30]

    run(scenario)


def test_pending_offsets_keep_their_partition_and_group_from_expiring() -> None:
    async def scenario() -> None:
        timers = ManualTimers()
        log = MemoryOffsetsLog()
        manager = _manager_on(log, timers)
        await manager.load_partition(PARTITION, 1)
        assert await _plain(manager, {0: 5, 1: 6}) == [NONE, NONE]
        assert await _txn(manager, PRODUCER, 0, {0: 10}) == [NONE]
        timers.advance(RETENTION_MS + 1)
        assert await manager.expire_offsets() == 1
        assert _visible(manager) == {0: 5}
        assert manager.group(GROUP) is not None
        assert await _end(manager, PRODUCER, False) == NONE
        assert await manager.expire_offsets() == 1
        assert manager.group(GROUP) is None
        reloaded = await _reloaded(log)
        assert reloaded.group(GROUP) is None
        assert _stable(reloaded) == [-1, -1]

    run(scenario)


def test_deleting_a_group_drops_its_pending_offsets_for_good() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        manager = await _pending_over_plain(log)
        assert await manager.delete(GROUP) == (NONE, "")
        assert _stable(manager) == [-1, -1]
        # Nothing comes back: neither on a reload nor by the end of the transaction.
        reloaded = await _reloaded(log)
        assert reloaded.group(GROUP) is None
        assert await _end(reloaded, PRODUCER, True, coordinator_epoch=1) == NONE
        assert _stable(reloaded) == [-1, -1]
        assert reloaded.group(GROUP) is None

    run(scenario)


def test_pending_offsets_written_to_the_storage_node_survive_a_new_owner(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, _), _log(node) as first_log:
            first = _manager(first_log)
            await first.load_partition(PARTITION, 1)
            assert await _plain(first, {0: 5}) == [NONE]
            assert await _txn(first, PRODUCER, 0, {0: 10}) == [NONE]
            assert await _txn(first, OTHER_PRODUCER, 0, {1: 20}) == [NONE]
            assert await _end(first, PRODUCER, True) == NONE
            async with _log(node) as second_log:
                second = _manager(second_log)
                await second.load_partition(PARTITION, 2)
                assert _visible(second) == {0: 10}
                assert _stable(second) == [10, UNSTABLE]
                assert await _end(second, OTHER_PRODUCER, True) == NONE
                assert _stable(second) == [10, 20]

    run(scenario)


# -- over gRPC --------------------------------------------------------------------------------


def _txn_request(
    offset: int,
    *,
    group_id: str = SERVED_GROUP,
    epoch: int = 0,
    member_id: str = "",
    generation: int = -1,
    metadata: str = "",
) -> group_pb2.TxnCommitOffsetsRequest:
    return group_pb2.TxnCommitOffsetsRequest(
        transactional_id="copier",
        group_id=group_id,
        producer_id=PRODUCER,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member_id,
        partitions=[
            group_pb2.OffsetCommitPartition(
                topic=TOPIC, partition=0, committed_offset=offset, metadata=metadata
            )
        ],
    )


def test_txn_commit_offsets_over_grpc_checks_the_group_as_kafka() -> None:
    async def scenario() -> None:
        async with serving(MemoryOffsetsLog()) as served:
            stub = served.stub
            # An unknown group is created only for a commit from outside it.
            answer = await stub.TxnCommitOffsets(
                _txn_request(1, generation=3), timeout=RPC_TIMEOUT_S
            )
            assert answer.partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
            member_id, generation = await stable_member(stub)
            for request, expected in [
                (
                    _txn_request(1, member_id=member_id, generation=generation + 1),
                    ErrorCode.ILLEGAL_GENERATION,
                ),
                (
                    _txn_request(1, member_id="stranger", generation=generation),
                    ErrorCode.UNKNOWN_MEMBER_ID,
                ),
                (
                    _txn_request(1, member_id=member_id, generation=generation, metadata="m" * 65),
                    ErrorCode.OFFSET_METADATA_TOO_LARGE,
                ),
                (
                    _txn_request(7, member_id=member_id, generation=generation, epoch=1),
                    ErrorCode.NONE,
                ),
                (_txn_request(8, epoch=0), ErrorCode.PRODUCER_FENCED),
            ]:
                answer = await stub.TxnCommitOffsets(request, timeout=RPC_TIMEOUT_S)
                assert answer.partitions[0].error_code == expected, request
            other = next(
                g
                for g in (f"g{i}" for i in range(100))
                if offsets_partition_for(g, SERVED_PARTITIONS) != GROUP_PARTITION
            )
            answer = await stub.TxnCommitOffsets(
                _txn_request(1, group_id=other), timeout=RPC_TIMEOUT_S
            )
            assert answer.partitions[0].error_code == ErrorCode.NOT_COORDINATOR
            assert answer.coordinator.node_id == OTHER_NODE_ID
            ended = await stub.CompleteTransaction(
                group_pb2.CompleteTransactionRequest(
                    group_id=other, producer_id=PRODUCER, producer_epoch=1, committed=True
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert ended.error_code == ErrorCode.NOT_COORDINATOR
            assert ended.coordinator.node_id == OTHER_NODE_ID

    run(scenario)


def test_fetch_with_require_stable_waits_for_the_end_over_grpc() -> None:
    async def scenario() -> None:
        async with serving(MemoryOffsetsLog()) as served:
            stub = served.stub
            answer = await stub.TxnCommitOffsets(_txn_request(42), timeout=RPC_TIMEOUT_S)
            assert answer.partitions[0].error_code == ErrorCode.NONE

            async def fetch(require_stable: bool) -> tuple[int, int]:
                fetched = await stub.FetchOffsets(
                    group_pb2.FetchOffsetsRequest(
                        group_id=SERVED_GROUP,
                        partitions=[common_pb2.TopicPartition(topic=TOPIC, partition=0)],
                        require_stable=require_stable,
                    ),
                    timeout=RPC_TIMEOUT_S,
                )
                assert fetched.error_code == ErrorCode.NONE
                return fetched.partitions[0].error_code, fetched.partitions[0].committed_offset

            assert await fetch(True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
            assert await fetch(False) == (ErrorCode.NONE, -1)
            ended = await stub.CompleteTransaction(
                group_pb2.CompleteTransactionRequest(
                    group_id=SERVED_GROUP,
                    producer_id=PRODUCER,
                    producer_epoch=0,
                    committed=True,
                    coordinator_epoch=1,
                    transactional_id="copier",
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert ended.error_code == ErrorCode.NONE
            assert await fetch(True) == (ErrorCode.NONE, 42)

    run(scenario)
