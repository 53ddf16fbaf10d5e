"""A coordinator taking over a compacted __consumer_offsets partition (issue #18), against the
real storage node served in-process: offsets missing before, between and inside batches,
empty batches kept for the writer's sequence, tombstones already gone with what they deleted,
a log that starts above 0. The replay ends at the high watermark its first read saw, never
waiting for an offset that is gone, and rebuilds exactly the offsets the log still holds."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from brook_group_coordinator.fencing import fencing_producer_id
from brook_group_coordinator.group_manager import CommitPartition, GroupManager
from brook_group_coordinator.ownership import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    transaction_state_partition_for,
)
from brook_group_coordinator.records import OffsetCommitKey, OffsetCommitValue, encode_key
from brook_group_coordinator.records import encode_value as encode_record_value
from brook_group_coordinator.transactions.records import encode_transaction, encode_transaction_key
from brook_group_coordinator.transactions.state import Transaction, TxnState
from brook_storage_node.log import LogConfig, PartitionLog
from compacted_batches import KeptRecord, compacted_batch
from test_offsets_write_fencing import GROUP, PARTITION, TOPIC, _log, _manager, _node
from test_transaction_state_fencing import PARTITIONS as TXN_PARTITIONS
from test_transaction_state_fencing import _coordinator, _with_broker

from brook.errors import ErrorCode
from brook.reserved import TRANSACTION_STATE_PRODUCER_ID_BASE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage_node"))
from storage_node_support import (
    QueueMetadataSource,
    partition_record,
    run,
    running_node,
    snapshot,
    topic_record,
)

T0 = 1_700_000_000_000
OLD_EPOCH = 3
TXN_PARTITION = transaction_state_partition_for("first", TXN_PARTITIONS)


def _commit(partition: int, offset: int, delta: int, group: str = GROUP) -> KeptRecord:
    key = encode_key(OffsetCommitKey(group, TOPIC, partition))
    value = encode_record_value(OffsetCommitValue(offset, -1, "", T0))
    return (delta, T0 + delta, key, value)


def _previous_owners_log(data_dir: Path, log_start: int, active_base: int | None) -> None:
    """What the cleaner leaves of an older owner's writes (coordinator epoch 3): the log
    starts at ``log_start`` (retention or DeleteRecords); then [10, 14] keeps partition 0's
    last commit (100) at 12 (earlier commits and another group's commit and its tombstone
    are gone); [15, 18] is empty, kept for the writer's sequence; [19, 21] keeps partition 1's
    commit (7) at 19; [22, 23], the writer's last batch, is empty. ``active_base``: an empty
    active segment there, after a gap (the cleaner removed the rest of the last sealed
    segment)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    directory = data_dir / f"{OFFSETS_TOPIC}-{PARTITION}"
    log = PartitionLog.open(directory, LogConfig())
    try:
        if log_start:
            log.truncate_fully_and_start_at(log_start)
        producer = fencing_producer_id(PARTITION)

        def batch(base: int, last_delta: int, sequence: int, kept: Sequence[KeptRecord]) -> bytes:
            return compacted_batch(
                kept,
                base_offset=base,
                last_offset_delta=last_delta,
                producer_id=producer,
                producer_epoch=OLD_EPOCH,
                base_sequence=sequence,
            )

        for data in (
            batch(10, 4, 0, [_commit(0, 100, 2)]),
            batch(15, 3, 5, []),
            batch(19, 2, 9, [_commit(1, 7, 0)]),
            batch(22, 1, 12, []),
        ):
            log.append_as_follower(data)
        log.flush()
    finally:
        log.close()
    if active_base is not None:
        # What a roll leaves: the active segment's (empty) log file names its base offset.
        (directory / f"{active_base:020d}.log").write_bytes(b"")


def _committed(manager: GroupManager) -> list[int]:
    error, message, results = manager.fetch(GROUP, [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)])
    assert error is ErrorCode.NONE, message
    return [result.offset for result in results]


def _replays_the_compacted_log(
    tmp_path: Path, log_start: int, active_base: int | None = None
) -> None:
    _previous_owners_log(tmp_path / "storage", log_start, active_base)

    async def scenario() -> None:
        async with _node(tmp_path) as (node, _), _log(node) as log:
            manager = _manager(log)
            await asyncio.wait_for(manager.load_partition(PARTITION, OLD_EPOCH + 1), 30)
            assert _committed(manager) == [100, 7, -1]
            # The new owner fences and writes on after the gaps and empty batches.
            results = await manager.commit(
                GROUP, "", None, -1, [CommitPartition(TOPIC, 2, 55, -1, "")]
            )
            assert results[0].error is ErrorCode.NONE
            async with _log(node) as replay_log:
                replayed = _manager(replay_log)
                await asyncio.wait_for(replayed.load_partition(PARTITION, OLD_EPOCH + 2), 30)
                assert _committed(replayed) == [100, 7, 55]

    run(scenario)


def test_a_replay_steps_over_gaps_and_empty_batches(tmp_path: Path) -> None:
    _replays_the_compacted_log(tmp_path, 0)


def test_a_replay_of_a_log_starting_above_zero(tmp_path: Path) -> None:
    _replays_the_compacted_log(tmp_path, 5)


def test_a_replay_ends_at_the_high_watermark_when_the_logs_tail_was_removed(
    tmp_path: Path,
) -> None:
    # Offsets 24-29 are gone and the active segment at 30 is empty: no batch ends the log,
    # and the replay must not wait for one.
    _replays_the_compacted_log(tmp_path, 0, active_base=30)


def test_a_transaction_coordinator_replays_a_compacted_transaction_state(tmp_path: Path) -> None:
    # What the cleaner leaves of __transaction_state: per transactional id its last state, at
    # its original offset, inside batches whose other records are gone, after a gap, with an
    # empty batch of the writer in between and a log starting above 0.
    def state(txn: str, producer_id: int, txn_state: TxnState) -> bytes:
        return encode_transaction(
            Transaction(
                txn, producer_id, 0, -1, -1, 60_000, txn_state, frozenset(), frozenset(), -1, T0
            )
        )

    directory = tmp_path / "storage" / f"{TRANSACTION_STATE_TOPIC}-{TXN_PARTITION}"
    directory.parent.mkdir(parents=True)
    log = PartitionLog.open(directory, LogConfig())
    try:
        log.truncate_fully_and_start_at(3)
        writer = TRANSACTION_STATE_PRODUCER_ID_BASE + TXN_PARTITION
        first = (
            3,
            T0,
            encode_transaction_key("first"),
            state("first", 11, TxnState.COMPLETE_COMMIT),
        )
        second = (0, T0, encode_transaction_key("second"), state("second", 12, TxnState.EMPTY))
        for kept, base, last_delta, sequence in (
            ([first], 6, 4, 0),
            ([], 11, 2, 5),
            ([second], 20, 1, 8),
        ):
            log.append_as_follower(
                compacted_batch(
                    kept,
                    base_offset=base,
                    last_offset_delta=last_delta,
                    producer_id=writer,
                    producer_epoch=OLD_EPOCH,
                    base_sequence=sequence,
                )
            )
        log.flush()
    finally:
        log.close()

    async def scenario() -> None:
        metadata = QueueMetadataSource(
            snapshot(
                topic_record(TRANSACTION_STATE_TOPIC),
                *(partition_record(TRANSACTION_STATE_TOPIC, p) for p in range(TXN_PARTITIONS)),
            )
        )
        async with (
            running_node(
                tmp_path / "storage", source_for=lambda port: _with_broker(metadata, port)
            ) as node,
            _coordinator(node) as coordinator,
        ):
            await asyncio.wait_for(coordinator.load_partition(TXN_PARTITION, OLD_EPOCH + 1), 30)
            for txn, producer_id, txn_state in (
                ("first", 11, TxnState.COMPLETE_COMMIT),
                ("second", 12, TxnState.EMPTY),
            ):
                error, _, loaded = coordinator.describe(txn)
                assert error is ErrorCode.NONE and loaded is not None, txn
                assert (loaded.producer_id, loaded.state) == (producer_id, txn_state)

    run(scenario)
