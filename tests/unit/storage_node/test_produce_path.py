"""The produce path (produce.py) over real partitions and logs: a request keeps its arrival
place at every partition it names; an append whose leader epoch went stale while it was on
its way is refused retriably; acks=0 appends cancelled at shutdown give their bytes back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from brook_storage_node.limits import StorageLimits
from brook_storage_node.log import LogConfig
from brook_storage_node.partition import INLINE_BYTES_MAX, Partition
from brook_storage_node.produce import ProduceEntry, ProducePartitionResult, ProducePath
from brook_storage_node.replica_manager import ReplicaManager
from brook_storage_node.topic_settings import TopicSettings
from storage_node_support import (
    NODE_ID,
    OTHER_NODE_ID,
    batch,
    broker_record,
    open_replica_manager,
    partition_record,
    run,
    topic_record,
)

from brook.errors import ErrorCode
from brook.metadata.info import PartitionInfo
from brook.record import Compression, build_batch, scan_batches
from brook.v1 import storage_pb2

TOPIC = "orders"
SETTINGS = TopicSettings(LogConfig(max_message_bytes=4 * INLINE_BYTES_MAX), 1, Compression.NONE)
LIMITS = StorageLimits(
    fetch_bytes_max=1 << 20, wait_ms_max=5_000, produce_bytes_in_flight_max=64 * INLINE_BYTES_MAX
)
POLL_S = 0.001
POLL_BOUND_S = 5.0
# Larger than INLINE_BYTES_MAX: appended on a worker thread.
THREADED = build_batch([(None, None, b"x" * (INLINE_BYTES_MAX + 1), ())])


@asynccontextmanager
async def _produce_path(
    tmp_path: Path, *, partitions: int = 2, leader_epoch: int = 0
) -> AsyncIterator[tuple[ProducePath, ReplicaManager]]:
    replicas, logs = await open_replica_manager(
        tmp_path,
        SETTINGS,
        broker_record(NODE_ID, 9101),
        broker_record(OTHER_NODE_ID, 9102),
        topic_record(TOPIC),
        *(
            partition_record(
                TOPIC,
                index,
                replicas=(NODE_ID, OTHER_NODE_ID),
                isr=(NODE_ID,),
                leader_epoch=leader_epoch,
            )
            for index in range(partitions)
        ),
    )
    path = ProducePath(replicas, LIMITS, lambda appended: None)
    try:
        yield path, replicas
    finally:
        await path.close()
        await logs.close()


async def _produce(
    path: ProducePath, entries: Sequence[ProduceEntry], acks: int = storage_pb2.ACKS_LEADER
) -> list[ProducePartitionResult]:
    return await path.append_records(
        entries,
        acks=acks,
        timeout_ms=5_000,
        size_bytes=sum(len(entry.records) for entry in entries),
    )


async def _poll(condition: str, done: Callable[[], bool]) -> None:
    deadline_s = time.monotonic() + POLL_BOUND_S
    while not done():
        assert time.monotonic() < deadline_s, f"still waiting for {condition}"
        await asyncio.sleep(POLL_S)


def _records_counts(partition: Partition) -> list[int]:
    data = partition.log.read(0, 8 * INLINE_BYTES_MAX)
    return [header.records_count for _, header in scan_batches(data.records)]


@pytest.mark.parametrize(
    "acks", [storage_pb2.ACKS_NONE, storage_pb2.ACKS_LEADER, storage_pb2.ACKS_ALL]
)
def test_a_request_keeps_its_arrival_place_at_every_partition(tmp_path: Path, acks: int) -> None:
    """R1 = [p0 on a thread, p1] arrives before R2 = [p1]: R1's p1 batch comes first in p1,
    though R1 is still appending p0 when R2 reaches p1 (a client pipelining requests on one
    connection sees them appended in the order it sent them, as Kafka serves them)."""

    async def scenario() -> None:
        async with _produce_path(tmp_path) as (path, replicas):
            first = [ProduceEntry(TOPIC, 0, THREADED), ProduceEntry(TOPIC, 1, batch(1))]
            second = [ProduceEntry(TOPIC, 1, batch(2))]

            results = await asyncio.gather(
                _produce(path, first, acks), _produce(path, second, acks)
            )

            await _poll("the acks=0 appends", lambda: path.bytes_in_flight == 0)
            p1 = replicas.leader_partition(TOPIC, 1)
            assert _records_counts(p1) == [1, 2]
            if acks != storage_pb2.ACKS_NONE:
                assert [r.base_offset for r in results[0]] == [0, 0]
                assert [r.base_offset for r in results[1]] == [1]

    run(scenario)


def _idempotent(value: bytes, sequence: int = 0) -> bytes:
    return build_batch(
        [(0, None, value, ())], producer_id=42, producer_epoch=0, base_sequence=sequence
    )


def _first_batches(sequence: int, count: int, producer_epoch: int = 0) -> bytes:
    """``count`` records of producer 42 from ``sequence`` on, their values their sequences."""
    return build_batch(
        [(0, None, str(sequence + i).encode(), ()) for i in range(count)],
        producer_id=42,
        producer_epoch=producer_epoch,
        base_sequence=sequence,
    )


@pytest.mark.parametrize("acks", [storage_pb2.ACKS_LEADER, storage_pb2.ACKS_ALL])
def test_a_new_producers_second_batch_arriving_first_waits_for_its_first(
    tmp_path: Path, acks: int
) -> None:
    """A producer the partition has no state for pipelines batch 0-2 then batch 3, and the
    calls reach the node in the wrong order (the gRPC server and the gateway's concurrent
    calls keep no order; seen in test_gateway_idempotent_leader_moves.py under load). Batch 3
    must not start the producer's state: batch 0-2 would then be behind it, refused
    OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka takes as fatal for the batch it expects
    next. Batch 3 waits for it; both are appended, in sequence order."""

    async def scenario() -> None:
        async with _produce_path(tmp_path, partitions=1) as (path, replicas):
            second, first = await asyncio.gather(
                _produce(path, [ProduceEntry(TOPIC, 0, _first_batches(3, 1))], acks),
                _produce(path, [ProduceEntry(TOPIC, 0, _first_batches(0, 3))], acks),
            )

            assert [(r.error, r.base_offset) for r in first + second] == [(None, 0), (None, 3)]
            data = replicas.leader_partition(TOPIC, 0).log.read(0, INLINE_BYTES_MAX)
            assert [h.base_sequence for _, h in scan_batches(data.records)] == [0, 3]

    run(scenario)


def test_acks_0_appends_a_new_producers_first_batch_past_0_at_once(tmp_path: Path) -> None:
    """acks=0 has no second pass to wait in: a producer the partition has no state for is
    accepted at any sequence, as Kafka does, not set aside and dropped."""

    async def scenario() -> None:
        async with _produce_path(tmp_path, partitions=1) as (path, replicas):
            entry = ProduceEntry(TOPIC, 0, _first_batches(3, 1))
            await _produce(path, [entry], storage_pb2.ACKS_NONE)
            await _poll("the acks=0 append", lambda: path.bytes_in_flight == 0)
            assert replicas.leader_partition(TOPIC, 0).log_end_offset == 1

    run(scenario)


def _moved(partition: Partition, leader: int, epoch: int) -> PartitionInfo:
    return PartitionInfo(
        topic=TOPIC,
        partition=0,
        topic_id=TOPIC.encode().ljust(16, b"-"),
        replicas=partition.replicas,
        isr=(leader,),
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=partition.partition_epoch + 1,
    )


def test_an_append_whose_leader_epoch_went_stale_on_its_way_is_refused_retriably(
    tmp_path: Path,
) -> None:
    """Leadership moves away and back (epochs 5 → 6 → 7) while an epoch-5 append is on its
    way to the log (held at the log's lock, on its thread): it is refused with nothing
    written, NOT_LEADER_OR_FOLLOWER (the client refreshes and retries), and the producer's
    retry of that very batch is appended in epoch 7 (the refusal does not poison it)."""

    async def scenario() -> None:
        async with _produce_path(tmp_path, partitions=1, leader_epoch=5) as (path, replicas):
            partition = replicas.leader_partition(TOPIC, 0)
            records = _idempotent(b"x" * (INLINE_BYTES_MAX + 1))
            entry = ProduceEntry(TOPIC, 0, records)
            # The log's lock is re-entrant: the loop's own leadership changes pass it, the
            # append's thread waits at it.
            with partition.log._lock:
                on_its_way = asyncio.ensure_future(_produce(path, [entry]))
                await _poll("the append on its thread", partition._append_lock.locked)
                partition.make_follower(_moved(partition, OTHER_NODE_ID, 6), SETTINGS)
                partition.make_leader(_moved(partition, NODE_ID, 7), SETTINGS)
            [refused] = await on_its_way

            assert refused.error is not None
            assert refused.error.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert partition.log_end_offset == 0
            [retried] = await _produce(path, [entry])
            assert (retried.error, retried.base_offset) == (None, 0)
            assert partition.log.latest_epoch == 7
            [following] = await _produce(path, [ProduceEntry(TOPIC, 0, _idempotent(b"y", 1))])
            assert (following.error, following.base_offset) == (None, 1)

    run(scenario)


def test_acks_0_appends_cancelled_at_shutdown_give_their_bytes_back(tmp_path: Path) -> None:
    """close() cancels acks=0 appends that have not started yet: the bytes they held count
    against queued.max.request.bytes no longer."""

    async def scenario() -> None:
        async with _produce_path(tmp_path) as (path, replicas):
            entries = [ProduceEntry(TOPIC, 0, batch(3)), ProduceEntry(TOPIC, 1, batch(3))]
            results = await _produce(path, entries, storage_pb2.ACKS_NONE)
            assert [r.error for r in results] == [None, None]
            assert path.bytes_in_flight > 0

            await path.close()

            assert path.bytes_in_flight == 0
            assert replicas.leader_partition(TOPIC, 0).log_end_offset == 0

    run(scenario)
