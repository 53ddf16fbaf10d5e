"""A hosted partition: high watermark, acks=all waits, leadership checks, data-arrival wake-ups;
and the replica manager that creates, leads, follows and drops partitions from metadata."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from brook_storage_node.delayed_fetch import DataWaiter
from brook_storage_node.errors import PartitionError
from brook_storage_node.log import (
    InvariantViolationError,
    LogConfig,
    LogManager,
    PartitionLog,
)
from brook_storage_node.log.producer_state import OutOfOrderSequenceError
from brook_storage_node.partition import INLINE_BYTES_MAX, SEQUENCE_GAP_WAIT_MS, Partition
from brook_storage_node.replica_manager import ReplicaManager
from brook_storage_node.topic_settings import TopicSettings
from storage_node_support import (
    NODE_ID,
    OTHER_NODE_ID,
    batch,
    broker_record,
    config_record,
    delta,
    open_replica_manager,
    partition_record,
    run,
    topic_record,
)

from brook.errors import ErrorCode
from brook.metadata.info import PartitionInfo
from brook.record import Compression, build_batch, scan_batches
from brook.v1 import metadata_pb2

SETTINGS = TopicSettings(LogConfig(max_message_bytes=4 * INLINE_BYTES_MAX), 1, Compression.NONE)
SHORT_WAIT_S = 0.2


def _info(
    *, leader: int = NODE_ID, isr: tuple[int, ...] = (NODE_ID,), epoch: int = 0
) -> PartitionInfo:
    return PartitionInfo(
        topic="orders",
        partition=0,
        topic_id=b"o" * 16,
        replicas=tuple(sorted({NODE_ID, OTHER_NODE_ID} if len(isr) > 1 else set(isr))),
        isr=isr,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=0,
    )


def _partition(
    tmp_path: Path, info: PartitionInfo | None = None, settings: TopicSettings = SETTINGS
) -> Partition:
    log = PartitionLog.open(tmp_path / "orders-0", settings.log_config)
    partition = Partition(log, NODE_ID, settings)
    partition.make_leader(info or _info(), settings)
    return partition


class Recorder:
    """A PartitionListener that writes down what it hears."""

    def __init__(self) -> None:
        self.committed: list[int] = []
        self.state_changes = 0

    def on_committed(self, partition: Partition, size_bytes: int) -> None:
        self.committed.append(size_bytes)

    def on_state_change(self, partition: Partition) -> None:
        self.state_changes += 1


def test_sole_isr_leader_makes_each_append_visible_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        listener = Recorder()
        partition.add_listener(listener)
        first, second = batch(3), batch(2)

        await partition.append_as_leader(first, acks_all=True)
        await partition.append_as_leader(second, acks_all=False)

        assert (partition.log_end_offset, partition.high_watermark) == (5, 5)
        assert listener.committed == [len(first), len(second)]
        data = partition.read(0, 1 << 20, min_one_batch=True)
        assert bytes(data.records) != b"" and data.next_offset == 5

    run(scenario)


def test_isr_member_with_unknown_position_holds_the_high_watermark(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, _info(isr=(NODE_ID, OTHER_NODE_ID)))
        listener = Recorder()
        partition.add_listener(listener)

        await partition.append_as_leader(batch(3), acks_all=False)
        assert partition.high_watermark == 0
        assert partition.read(0, 1 << 20, min_one_batch=True).records.nbytes == 0

        partition.update_follower_end_offset(OTHER_NODE_ID, 3)
        assert partition.high_watermark == 3
        assert listener.committed == [len(batch(3))]

    run(scenario)


def test_acks_all_wait_times_out_while_the_isr_lags(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, _info(isr=(NODE_ID, OTHER_NODE_ID)))
        info = await partition.append_as_leader(batch(1), acks_all=True)

        started = time.monotonic()
        with pytest.raises(PartitionError) as raised:
            await partition.wait_for_high_watermark(info.last_offset + 1, SHORT_WAIT_S)

        assert raised.value.code is ErrorCode.REQUEST_TIMED_OUT
        assert time.monotonic() - started >= SHORT_WAIT_S * 0.9

    run(scenario)


def test_acks_all_wait_ends_when_the_follower_catches_up(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, _info(isr=(NODE_ID, OTHER_NODE_ID)))
        info = await partition.append_as_leader(batch(2), acks_all=True)
        waiting = asyncio.create_task(partition.wait_for_high_watermark(2, 10.0))
        await asyncio.sleep(0)
        assert not waiting.done()

        partition.update_follower_end_offset(OTHER_NODE_ID, info.last_offset + 1)

        await asyncio.wait_for(waiting, 1.0)

    run(scenario)


def test_losing_leadership_fails_pending_acks_all_waits(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, _info(isr=(NODE_ID, OTHER_NODE_ID)))
        await partition.append_as_leader(batch(1), acks_all=True)
        waiting = asyncio.create_task(partition.wait_for_high_watermark(1, 10.0))
        await asyncio.sleep(0)

        partition.make_follower(
            _info(leader=OTHER_NODE_ID, isr=(OTHER_NODE_ID,), epoch=1), SETTINGS
        )

        with pytest.raises(PartitionError) as raised:
            await asyncio.wait_for(waiting, 1.0)
        assert raised.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario)


def test_acks_all_with_too_few_in_sync_replicas_appends_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = TopicSettings(LogConfig(), 2, Compression.NONE)
        partition = _partition(tmp_path, settings=settings)

        with pytest.raises(PartitionError) as raised:
            await partition.append_as_leader(batch(1), acks_all=True)
        await partition.append_as_leader(batch(1), acks_all=False)

        assert raised.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log_end_offset == 1

    run(scenario)


def test_follower_refuses_appends_and_keeps_its_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        partition.make_follower(_info(leader=OTHER_NODE_ID, epoch=1), SETTINGS)

        with pytest.raises(PartitionError) as raised:
            await partition.append_as_leader(batch(1), acks_all=False)

        assert raised.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert partition.log_end_offset == 0

    run(scenario)


@pytest.mark.parametrize(
    ("client_epoch", "code"),
    [
        (2, None),
        (-1, None),
        (1, ErrorCode.FENCED_LEADER_EPOCH),
        (3, ErrorCode.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_client_leader_epoch_is_checked_against_the_current_one(
    tmp_path: Path, client_epoch: int, code: ErrorCode | None
) -> None:
    partition = _partition(tmp_path, _info(epoch=2))
    if code is None:
        partition.check_leader(client_epoch)
        return
    with pytest.raises(PartitionError) as raised:
        partition.check_leader(client_epoch)
    assert raised.value.code is code


def test_a_leader_epoch_going_back_is_refused_with_the_partition_unchanged(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, _info(epoch=3))
        isr = (OTHER_NODE_ID, NODE_ID)
        with pytest.raises(InvariantViolationError, match="leader epoch 2 after 3"):
            partition.make_leader(_info(epoch=2), SETTINGS)
        with pytest.raises(InvariantViolationError, match="leader epoch 2 after 3"):
            partition.make_follower(_info(leader=OTHER_NODE_ID, isr=isr, epoch=2), SETTINGS)
        assert (partition.is_leader, partition.leader_epoch) == (True, 3)
        await partition.append_as_leader(batch(1), acks_all=False)
        # The same epoch again (the lease came back), then a newer one: both taken.
        partition.make_leader(_info(epoch=3), SETTINGS)
        partition.make_follower(_info(leader=OTHER_NODE_ID, isr=isr, epoch=4), SETTINGS)
        assert (partition.is_leader, partition.leader_epoch) == (False, 4)
        partition.log.close()

    run(scenario)


def test_appends_keep_their_arrival_order_when_some_run_on_a_thread(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        big = build_batch([(None, None, b"x" * (INLINE_BYTES_MAX + 1), ())])
        small = batch(1)
        payloads = [big, small, big, small, small]

        infos = await asyncio.gather(
            *(partition.append_as_leader(p, acks_all=False) for p in payloads)
        )

        assert [info.first_offset for info in infos] == [0, 1, 2, 3, 4]
        data = partition.read(0, 8 * INLINE_BYTES_MAX, min_one_batch=True)
        sizes = [header.size for _, header in scan_batches(data.records)]
        assert sizes == [len(p) for p in payloads]

    run(scenario)


def test_waiter_wakes_once_min_bytes_became_visible(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        one = batch(1)
        with DataWaiter([(partition, None)], needed_bytes=len(one) + 1) as waiter:
            waiting = asyncio.create_task(waiter.wait(10.0))
            await partition.append_as_leader(one, acks_all=False)
            await asyncio.sleep(0.01)
            assert not waiting.done()

            await partition.append_as_leader(one, acks_all=False)

            assert await asyncio.wait_for(waiting, 1.0) is True

    run(scenario)


def test_waiter_counts_each_partition_only_up_to_its_limit(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        data = batch(5)
        with DataWaiter([(partition, 10)], needed_bytes=11) as waiter:
            await partition.append_as_leader(data, acks_all=False)
            await partition.append_as_leader(data, acks_all=False)

            assert await waiter.wait(SHORT_WAIT_S) is False

    run(scenario)


def test_waiter_times_out_when_nothing_arrives(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        with DataWaiter([(partition, None)], needed_bytes=1) as waiter:
            started = time.monotonic()
            assert await waiter.wait(SHORT_WAIT_S) is False
            assert time.monotonic() - started >= SHORT_WAIT_S * 0.9

    run(scenario)


def test_leadership_change_wakes_a_waiter_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        with DataWaiter([(partition, None)], needed_bytes=1_000_000) as waiter:
            waiting = asyncio.create_task(waiter.wait(10.0))
            await asyncio.sleep(0)

            partition.make_follower(_info(leader=OTHER_NODE_ID, epoch=1), SETTINGS)

            assert await asyncio.wait_for(waiting, 1.0) is True
        assert list(partition.listeners) == []

    run(scenario)


# -- the replica manager ----------------------------------------------------------------------


async def _manager(
    tmp_path: Path, *records: metadata_pb2.MetadataRecord
) -> tuple[ReplicaManager, LogManager]:
    return await open_replica_manager(tmp_path, SETTINGS, *records)


def test_replica_manager_leads_follows_and_explains_every_miss(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas, logs = await _manager(
            tmp_path,
            broker_record(NODE_ID, 9101),
            broker_record(OTHER_NODE_ID, 9102),
            topic_record("orders"),
            partition_record("orders", 0),
            partition_record(
                "orders", 1, leader=OTHER_NODE_ID, replicas=(OTHER_NODE_ID, NODE_ID), leader_epoch=4
            ),
            partition_record("orders", 2, leader=OTHER_NODE_ID, replicas=(OTHER_NODE_ID,)),
        )
        try:
            assert replicas.leader_partition("orders", 0).is_leader
            for index in (1, 2):
                with pytest.raises(PartitionError) as raised:
                    replicas.leader_partition("orders", index)
                assert raised.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
                hint = raised.value.leader_hint
                assert hint is not None
                assert (hint.leader_id, [e.port for e in hint.endpoints]) == (OTHER_NODE_ID, [9102])
            for topic, index in (("orders", 9), ("nope", 0)):
                with pytest.raises(PartitionError) as raised:
                    replicas.leader_partition(topic, index)
                assert raised.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        finally:
            await logs.close()

    run(scenario)
    # A follower keeps a replica too; a partition this node holds no replica of gets none.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["orders-0", "orders-1"]


def test_partition_dropped_from_metadata_stops_serving_and_its_log_is_deleted(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        replicas, logs = await _manager(
            tmp_path, topic_record("orders"), partition_record("orders", 0)
        )
        try:
            partition = replicas.leader_partition("orders", 0)
            await partition.append_as_leader(batch(1), acks_all=True)

            await replicas.apply(
                delta(
                    partition_record(
                        "orders", 0, leader=OTHER_NODE_ID, replicas=(OTHER_NODE_ID,), leader_epoch=1
                    ),
                    offset=1,
                )
            )

            assert not partition.online
            assert not (tmp_path / "orders-0").exists()
            with pytest.raises(PartitionError):
                replicas.leader_partition("orders", 0)
        finally:
            await logs.close()

    run(scenario)


def test_topic_config_change_reaches_the_open_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas, logs = await _manager(
            tmp_path,
            topic_record("orders"),
            partition_record("orders", 0),
            config_record("orders", "retention.ms", "1000"),
        )
        try:
            partition = replicas.leader_partition("orders", 0)
            assert partition.log.config.retention_ms == 1000

            await replicas.apply(
                delta(
                    config_record("orders", "retention.ms", "2000"),
                    config_record("orders", "compression.type", "zstd"),
                    config_record("orders", "retention.bytes", "not-a-number"),
                    offset=1,
                )
            )

            assert partition.log.config.retention_ms == 2000
            assert partition.log.config.retention_bytes == -1
            assert partition.settings.compression is Compression.ZSTD
        finally:
            await logs.close()

    run(scenario)


WAIT_S = SEQUENCE_GAP_WAIT_MS / 1000


def _idempotent(sequence: int, *, value: bytes = b"v") -> bytes:
    return build_batch(
        [(0, None, value, ())], producer_id=42, producer_epoch=0, base_sequence=sequence
    )


def test_a_batch_ahead_of_its_producers_sequence_waits_for_the_ones_in_between(
    tmp_path: Path,
) -> None:
    """Pipelined requests can reach the node out of order (issue #13); a batch that arrives
    before the one it follows waits for it instead of failing OUT_OF_ORDER_SEQUENCE_NUMBER,
    and the log holds them in sequence order."""

    async def scenario() -> None:
        partition = _partition(tmp_path)
        await partition.append_as_leader(_idempotent(0), acks_all=False)
        ahead = asyncio.ensure_future(
            partition.append_as_leader(_idempotent(2), acks_all=False, gap_wait_s=WAIT_S)
        )
        await asyncio.sleep(0.05)
        assert not ahead.done()
        await partition.append_as_leader(_idempotent(1), acks_all=False)
        info = await asyncio.wait_for(ahead, 5)
        assert info.first_offset == 2
        data = partition.log.read(0, 1 << 20)
        sequences = [header.base_sequence for _, header in scan_batches(data.records)]
        assert sequences == [0, 1, 2]
        partition.log.close()

    run(scenario)


def test_a_gap_that_is_never_filled_fails_out_of_order_after_the_bounded_wait(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path)
        await partition.append_as_leader(_idempotent(0), acks_all=False)
        started = time.monotonic()
        with pytest.raises(Exception) as raised:
            await partition.append_as_leader(_idempotent(5), acks_all=False, gap_wait_s=WAIT_S)
        waited_s = time.monotonic() - started
        assert getattr(raised.value, "error_code", None) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert WAIT_S <= waited_s < WAIT_S + 2
        # Behind the producer's sequence: no wait, refused at once.
        started = time.monotonic()
        with pytest.raises(Exception) as behind:
            await partition.append_as_leader(
                _idempotent(-5 % (2**31)), acks_all=False, gap_wait_s=WAIT_S
            )
        assert getattr(behind.value, "error_code", None) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert time.monotonic() - started < WAIT_S
        # No wait asked: refused at once.
        with pytest.raises(Exception) as at_once:
            await partition.append_as_leader(_idempotent(5), acks_all=False)
        assert getattr(at_once.value, "error_code", None) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert not partition._append_waiters
        assert partition.log_end_offset == 1
        partition.log.close()

    run(scenario)


def test_a_new_producers_first_batch_past_0_waits_for_0_then_is_accepted_alone(
    tmp_path: Path,
) -> None:
    """The partition has no state for the producer: its batch at sequence 3 may have
    overtaken its batches from 0. Without a wait it is set aside (ahead of 0); with one, it
    waits for them, and when none comes it is appended all the same: Kafka accepts an
    unknown producer at any sequence (its state may have expired)."""

    async def scenario() -> None:
        partition = _partition(tmp_path)
        with pytest.raises(OutOfOrderSequenceError) as set_aside:
            await partition.append_as_leader(_idempotent(3), acks_all=False)
        assert (set_aside.value.ahead, set_aside.value.producer) == (True, (42, 0, 0))
        started = time.monotonic()
        info = await partition.append_as_leader(_idempotent(3), acks_all=False, gap_wait_s=WAIT_S)
        assert WAIT_S <= time.monotonic() - started < WAIT_S + 2
        assert info.first_offset == 0
        # From then on, the usual rules: 4 follows at once.
        following = await partition.append_as_leader(_idempotent(4), acks_all=False, gap_wait_s=0)
        assert following.first_offset == 1
        partition.log.close()

    run(scenario)
