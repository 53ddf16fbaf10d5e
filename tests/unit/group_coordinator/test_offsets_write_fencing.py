"""Fencing a deposed coordinator's writes to __consumer_offsets, against the real storage node
served in-process (its idempotent-producer checks are what fences): group managers on
``StorageOffsetsLog`` stand for coordinators, each with the coordinator epoch the controllers
would have given it. The loader's tolerance of the fence and of unknown record kinds runs on
the in-memory log."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.fencing import (
    PRODUCER_EPOCH_MAX,
    OffsetsWriteError,
    fencing_producer_id,
)
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import CommitPartition, GroupManager
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.ownership import OFFSETS_TOPIC, offsets_partition_for
from brook_group_coordinator.records import (
    FENCE_KEY,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_fence_value,
    encode_key,
    encode_value,
)
from brook_group_coordinator.storage_offsets_log import OffsetsLogSettings, StorageOffsetsLog
from brook_group_coordinator.timers import LoopTimers
from brook_storage_node.log import TopicPartition
from memory_offsets_log import MemoryOffsetsLog

from brook.errors import BrookError, ErrorCode
from brook.record import scan_batches
from brook.rpc.backoff import RetryBackoff
from brook.v1 import common_pb2, controller_pb2, storage_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage_node"))
from storage_node_support import (
    NODE_ID,
    Node,
    QueueMetadataSource,
    broker_record,
    delta,
    fetch_request,
    partition_record,
    run,
    running_node,
    snapshot,
    topic_record,
)

PARTITIONS = 2
GROUP = "payments"
PARTITION = offsets_partition_for(GROUP, PARTITIONS)
TOPIC = "orders"
ABSENT_REPLICA = 2
COMMIT_TIMEOUT_MS = 1_500
REQUEST_TIMEOUT_MS = 5_000
LOAD_BUFFER_BYTES = 1 << 20
BACKOFF = RetryBackoff(20, 200)
EXPIRATION_MS = 300
FORGET_TIMEOUT_S = 10.0

Lost = list[tuple[int, int, bool]]


def _storage_metadata(port: int, *, isr: tuple[int, ...]) -> QueueMetadataSource:
    replicas = (NODE_ID,) if isr == (NODE_ID,) else (NODE_ID, ABSENT_REPLICA)
    return QueueMetadataSource(
        snapshot(
            broker_record(NODE_ID, port),
            topic_record(OFFSETS_TOPIC),
            *(
                partition_record(OFFSETS_TOPIC, p, replicas=replicas, isr=isr)
                for p in range(PARTITIONS)
            ),
        )
    )


@asynccontextmanager
async def _node(
    tmp_path: Path, *, isr: tuple[int, ...] = (NODE_ID,), settings: dict[str, str] | None = None
) -> AsyncIterator[tuple[Node, QueueMetadataSource]]:
    """The storage node, and the metadata stream through which the test changes its ISR."""
    sources: list[QueueMetadataSource] = []

    def source_for(port: int) -> QueueMetadataSource:
        sources.append(_storage_metadata(port, isr=isr))
        return sources[-1]

    async with running_node(tmp_path / "storage", source_for=source_for, settings=settings) as node:
        yield node, sources[0]


def coordinator_metadata(
    port: int, topic: str = OFFSETS_TOPIC, partitions: int = PARTITIONS
) -> ClusterMetadata:
    """A coordinator's metadata: the in-process node leading every partition of ``topic``."""
    metadata = ClusterMetadata(CoordinatorDirectory())
    metadata.apply(
        controller_pb2.WatchMetadataResponse(
            snapshot=True,
            offset=0,
            records=[
                broker_record(NODE_ID, port),
                topic_record(topic),
                *(partition_record(topic, p) for p in range(partitions)),
            ],
        )
    )
    return metadata


@asynccontextmanager
async def _log(node: Node) -> AsyncIterator[StorageOffsetsLog]:
    log = StorageOffsetsLog(
        coordinator_metadata(node.port),
        OffsetsLogSettings(
            commit_timeout_ms=COMMIT_TIMEOUT_MS,
            load_buffer_bytes=LOAD_BUFFER_BYTES,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            retry_backoff=BACKOFF,
        ),
    )
    try:
        yield log
    finally:
        await log.close()


def _manager(log: StorageOffsetsLog | MemoryOffsetsLog, lost: Lost | None = None) -> GroupManager:
    return GroupManager(
        limits=GroupLimits(100, 60_000, initial_rebalance_delay_ms=0, members_max=100),
        offset_limits=OffsetLimits(metadata_bytes_max=64, retention_ms=60_000),
        timers=LoopTimers(asyncio.get_running_loop()),
        log=log,
        partition_count=PARTITIONS,
        claims=log if isinstance(log, StorageOffsetsLog) else None,
        on_partition_lost=None if lost is None else lambda p, e, f: lost.append((p, e, f)),
    )


async def _commit(manager: GroupManager, offset: int) -> ErrorCode:
    # Generation -1 and no member id: a commit from outside the group (an admin tool).
    results = await manager.commit(GROUP, "", None, -1, [CommitPartition(TOPIC, 0, offset, -1, "")])
    return results[0].error


def _committed(manager: GroupManager) -> int:
    error, message, results = manager.fetch(GROUP, [(TOPIC, 0)])
    assert error is ErrorCode.NONE, message
    return results[0].offset


async def _producer_batches(node: Node) -> list[tuple[int, int, int]]:
    """(producer epoch, base sequence, record count) of every batch of the partition."""
    response = await node.stub.Fetch(fetch_request(OFFSETS_TOPIC, PARTITION, 0))
    data = bytes(response.partitions[0].records)
    return [
        (h.producer_epoch, h.base_sequence, h.records_count)
        for _, h in scan_batches(data)
        if h.producer_id == fencing_producer_id(PARTITION)
    ]


def test_a_deposed_coordinators_commit_is_refused_and_never_overrides_the_new_owners(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, _), _log(node) as old_log, _log(node) as new_log:
            old_lost: Lost = []
            old = _manager(old_log, old_lost)
            await old.load_partition(PARTITION, 3)
            assert await _commit(old, 100) is ErrorCode.NONE
            # The controllers hand the partition to another coordinator (epoch 4) while the
            # old one, paused, still believes it owns it.
            new = _manager(new_log)
            await new.load_partition(PARTITION, 4)
            assert _committed(new) == 100
            assert await _commit(new, 500) is ErrorCode.NONE

            assert await _commit(old, 200) is ErrorCode.NOT_COORDINATOR
            assert old_lost == [(PARTITION, 3, True)]
            assert old.check_coordinator(GROUP)[0] is ErrorCode.NOT_COORDINATOR
            # The zombie's write never reached the log: a replay still says 500.
            assert await _producer_batches(node) == [(3, 0, 1), (3, 1, 1), (4, 0, 1), (4, 1, 1)]
            async with _log(node) as replay_log:
                replayed = _manager(replay_log)
                await replayed.load_partition(PARTITION, 5)
                assert _committed(replayed) == 500
            # Loading it again at the fenced epoch is refused just as clearly.
            with pytest.raises(BrookError) as refused:
                await old.load_partition(PARTITION, 3)
            assert refused.value.code is ErrorCode.INVALID_PRODUCER_EPOCH

    run(scenario)


def test_a_deposed_coordinator_cannot_delete_the_group_either(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, _), _log(node) as old_log, _log(node) as new_log:
            old = _manager(old_log)
            await old.load_partition(PARTITION, 3)
            assert await _commit(old, 100) is ErrorCode.NONE
            await _manager(new_log).load_partition(PARTITION, 4)

            error, message = await old.delete(GROUP)

            assert error is ErrorCode.NOT_COORDINATOR, message
            # Its tombstones never reached the log: a replay still has the group's offset.
            async with _log(node) as replay_log:
                replayed = _manager(replay_log)
                await replayed.load_partition(PARTITION, 5)
                assert _committed(replayed) == 100

    run(scenario)


async def _write_foreign_marker(node: Node) -> None:
    """A transaction marker of another producer in the partition. The storage nodes refuse
    markers to internal topics now, but a log may have one from before (here
    __consumer_offsets is not flagged internal, so the node takes it)."""
    marked = await node.stub.WriteTxnMarkers(
        storage_pb2.WriteTxnMarkersRequest(
            markers=[
                storage_pb2.TxnMarker(
                    producer_id=7,
                    producer_epoch=0,
                    committed=False,
                    coordinator_epoch=0,
                    partitions=[
                        common_pb2.TopicPartition(topic=OFFSETS_TOPIC, partition=PARTITION)
                    ],
                )
            ]
        )
    )
    assert marked.markers[0].partitions[0].error_code == 0


@pytest.mark.parametrize("marker_at_tail", [False, True])
def test_a_claim_fences_once_and_a_restart_at_the_same_epoch_continues_the_sequence(
    tmp_path: Path, marker_at_tail: bool
) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, _):
            async with _log(node) as first_log:
                first = _manager(first_log)
                await first.load_partition(PARTITION, 2)
                assert await _commit(first, 10) is ErrorCode.NONE
                assert await _commit(first, 11) is ErrorCode.NONE
            if marker_at_tail:
                # Not the owner's tail: the restart below still continues its sequence
                # (fencing at 0 would be answered as a duplicate, and the load fail for ever).
                await _write_foreign_marker(node)
            # The same coordinator restarts before any hand-over: same coordinator epoch, a
            # process that remembers nothing. A second fence at sequence 0 would be out of
            # order; it continues after its own last batch instead.
            async with _log(node) as restarted_log:
                restarted = _manager(restarted_log)
                await restarted.load_partition(PARTITION, 2)
                assert _committed(restarted) == 11
                assert await _commit(restarted, 12) is ErrorCode.NONE
            assert await _producer_batches(node) == [(2, 0, 1), (2, 1, 1), (2, 2, 1), (2, 3, 1)]

    run(scenario)


async def _set_isr(source: QueueMetadataSource, isr: tuple[int, ...], offset: int) -> None:
    await source.push(
        delta(
            *(
                partition_record(OFFSETS_TOPIC, p, replicas=(NODE_ID, ABSENT_REPLICA), isr=isr)
                for p in range(PARTITIONS)
            ),
            offset=offset,
        )
    )


def test_a_commit_whose_append_outcome_is_unknown_is_not_acknowledged_and_is_resolved_on_reload(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        # The partition's ISR names a replica that never fetches: acks=all cannot be met.
        async with (
            _node(tmp_path, isr=(NODE_ID, ABSENT_REPLICA)) as (node, source),
            _log(node) as log,
        ):
            lost: Lost = []
            manager = _manager(log, lost)
            # The fence itself is in the leader's log but not acknowledged.
            with pytest.raises(OffsetsWriteError) as unknown:
                await manager.load_partition(PARTITION, 1)
            assert (unknown.value.code, unknown.value.fenced) == (
                ErrorCode.REQUEST_TIMED_OUT,
                False,
            )
            await _set_isr(source, (NODE_ID,), 1)
            await manager.load_partition(PARTITION, 1)
            assert await _commit(manager, 7) is ErrorCode.NONE
            # The fence was sent again as the same batch: the leader answered it as a
            # duplicate, so the log holds it once.
            assert await _producer_batches(node) == [(1, 0, 1), (1, 1, 1)]

            await _set_isr(source, (NODE_ID, ABSENT_REPLICA), 2)
            assert await _commit(manager, 8) is ErrorCode.NOT_COORDINATOR
            assert lost == [(PARTITION, 1, False)]
            assert manager.check_coordinator(GROUP)[0] is ErrorCode.NOT_COORDINATOR
            await _set_isr(source, (NODE_ID,), 3)
            await manager.load_partition(PARTITION, 1)
            # The unanswered commit did land (once): the reload shows what the log holds.
            assert _committed(manager) == 8
            assert await _commit(manager, 9) is ErrorCode.NONE
            assert await _producer_batches(node) == [(1, 0, 1), (1, 1, 1), (1, 2, 1), (1, 3, 1)]

    run(scenario)


async def _forgotten(node: Node) -> None:
    replicas = node.node.replicas
    assert replicas is not None
    log = replicas.partitions[TopicPartition(OFFSETS_TOPIC, PARTITION)].log
    deadline = asyncio.get_running_loop().time() + FORGET_TIMEOUT_S
    while log.producer_state.entry(fencing_producer_id(PARTITION)) is not None:
        assert asyncio.get_running_loop().time() < deadline, "the producer was not expired"
        await asyncio.sleep(EXPIRATION_MS / 1000)


EXPIRING = {
    "producer.id.expiration.ms": str(EXPIRATION_MS),
    "producer.id.expiration.check.interval.ms": str(EXPIRATION_MS),
}


async def _handed_over_then_idle(
    node: Node,
    old_log: StorageOffsetsLog,
    new_log: StorageOffsetsLog,
    old_lost: Lost,
    new_lost: Lost,
) -> tuple[GroupManager, GroupManager]:
    """Epoch 3 commits 100, epoch 4 takes over and commits 500, then the partition stays idle
    until the leader has forgotten the fencing producer: (deposed, owner)."""
    old = _manager(old_log, old_lost)
    await old.load_partition(PARTITION, 3)
    assert await _commit(old, 100) is ErrorCode.NONE
    new = _manager(new_log, new_lost)
    await new.load_partition(PARTITION, 4)
    assert await _commit(new, 500) is ErrorCode.NONE
    await _forgotten(node)
    return old, new


def test_after_the_leader_forgets_the_producer_the_owners_next_commit_fences_again(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with (
            _node(tmp_path, settings=EXPIRING) as (node, _),
            _log(node) as old_log,
            _log(node) as new_log,
        ):
            old_lost: Lost = []
            old, new = await _handed_over_then_idle(node, old_log, new_log, old_lost, [])

            # The owner's next sequence is taken as an unknown producer's first batch, which
            # puts the state back at its epoch: the deposed owner is refused again.
            assert await _commit(new, 600) is ErrorCode.NONE
            assert await _commit(old, 200) is ErrorCode.NOT_COORDINATOR
            assert old_lost == [(PARTITION, 3, True)]
            assert await _producer_batches(node) == [
                (3, 0, 1),
                (3, 1, 1),
                (4, 0, 1),
                (4, 1, 1),
                (4, 2, 1),
            ]
            async with _log(node) as replay_log:
                replayed = _manager(replay_log)
                await replayed.load_partition(PARTITION, 5)
                assert _committed(replayed) == 600

    run(scenario)


def test_a_deposed_owner_writing_first_after_the_leader_forgot_is_taken_once_then_fenced(
    tmp_path: Path,
) -> None:
    """The residual risk of docs/decisions.md ("After the leader expires the fencing
    producer"), bounded: one zombie commit lands, the owner's next write re-fences."""

    async def scenario() -> None:
        async with (
            _node(tmp_path, settings=EXPIRING) as (node, _),
            _log(node) as old_log,
            _log(node) as new_log,
        ):
            old_lost: Lost = []
            new_lost: Lost = []
            old, new = await _handed_over_then_idle(node, old_log, new_log, old_lost, new_lost)

            # Kafka >= 2.5's rule: an unknown producer is taken at any epoch and sequence.
            assert await _commit(old, 200) is ErrorCode.NONE
            # The owner's sequence no longer matches the leader's state: it reloads, which
            # fences at sequence 0 because the log's last batch is of an older epoch.
            assert await _commit(new, 600) is ErrorCode.NOT_COORDINATOR
            assert new_lost == [(PARTITION, 4, False)]
            await new.load_partition(PARTITION, 4)
            # The reload applied the zombie's commit: the group's offset went back.
            assert _committed(new) == 200
            assert await _commit(new, 700) is ErrorCode.NONE
            assert await _commit(old, 300) is ErrorCode.NOT_COORDINATOR
            assert old_lost == [(PARTITION, 3, True)]
            assert await _producer_batches(node) == [
                (3, 0, 1),
                (3, 1, 1),
                (4, 0, 1),
                (4, 1, 1),
                (3, 2, 1),
                (4, 0, 1),
                (4, 1, 1),
            ]

    run(scenario)


def test_a_coordinator_epoch_beyond_the_int16_producer_epoch_is_refused_clearly(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _node(tmp_path) as (node, _), _log(node) as log:
            manager = _manager(log)
            with pytest.raises(BrookError) as refused:
                await manager.load_partition(PARTITION, PRODUCER_EPOCH_MAX + 1)
            assert refused.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert str(PRODUCER_EPOCH_MAX) in refused.value.message
            assert manager.check_coordinator(GROUP)[0] is ErrorCode.NOT_COORDINATOR
            assert await _producer_batches(node) == []

    run(scenario)


def test_loading_skips_the_fence_and_records_of_unknown_kinds_and_keeps_every_offset() -> None:
    async def scenario() -> None:
        log = MemoryOffsetsLog()
        key = encode_key(OffsetCommitKey(GROUP, TOPIC, 0))
        await log.append(
            PARTITION,
            [
                (FENCE_KEY, encode_fence_value(1)),
                (key, encode_value(OffsetCommitValue(42, -1, "", 1))),
                # A kind a newer coordinator version might write.
                (b"\x00\x63" + b"future", b"{}"),
            ],
        )
        manager = _manager(log)
        await manager.load_partition(PARTITION, 1)
        assert manager.check_coordinator(GROUP)[0] is ErrorCode.NONE
        assert _committed(manager) == 42

    run(scenario)
