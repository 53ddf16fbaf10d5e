"""The leader's view of its followers: when a follower counts as caught up, when it leaves
the ISR, when it may join again, and what the high watermark waits for meanwhile."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import pytest
from brook_storage_node.errors import PartitionError
from brook_storage_node.isr import IsrManager
from brook_storage_node.log import LogConfig, PartitionLog
from brook_storage_node.metadata_view import MetadataView
from brook_storage_node.partition import Partition
from brook_storage_node.replica_fetcher import truncation_offset
from brook_storage_node.topic_settings import TopicSettings
from storage_node_support import batch, run

from brook.errors import ErrorCode
from brook.metadata.delta import MetadataUpdate
from brook.metadata.info import PartitionInfo
from brook.record import Compression
from brook.v1 import common_pb2, controller_pb2, metadata_pb2

LEADER = 1
FOLLOWER = 2
THIRD = 3
LAG_S = 10.0
MIN_ISR_TWO = TopicSettings(LogConfig(), 2, Compression.NONE)


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _info(isr: tuple[int, ...], *, epoch: int = 4, partition_epoch: int = 0) -> PartitionInfo:
    return PartitionInfo(
        topic="t",
        partition=0,
        topic_id=b"t" * 16,
        replicas=(LEADER, FOLLOWER, THIRD),
        isr=isr,
        leader=LEADER,
        leader_epoch=epoch,
        partition_epoch=partition_epoch,
    )


def _leader(tmp_path: Path, clock: Clock, isr: tuple[int, ...]) -> Partition:
    settings = MIN_ISR_TWO
    partition = Partition(
        PartitionLog.open(tmp_path / "t-0", settings.log_config), LEADER, settings, clock_s=clock
    )
    partition.make_leader(_info(isr), settings)
    return partition


def test_a_follower_not_caught_up_for_the_lag_time_is_out_of_sync_and_one_at_the_end_is_not(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = Clock()
        partition = _leader(tmp_path, clock, (LEADER, FOLLOWER, THIRD))
        await partition.append_as_leader(batch(5), acks_all=False)
        clock.now_s += LAG_S / 2
        partition.update_follower_end_offset(FOLLOWER, 5)  # at the end: caught up now
        partition.update_follower_end_offset(THIRD, 2)  # behind
        clock.now_s += LAG_S * 0.6
        # FOLLOWER caught up 0.6 lag ago; THIRD never since the leader took over 1.1 lag ago.
        assert partition.out_of_sync_replicas(LAG_S) == (THIRD,)
        assert partition.high_watermark == 2

    run(scenario)


def test_the_high_watermark_waits_for_every_isr_member_and_a_pending_addition(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = Clock()
        partition = _leader(tmp_path, clock, (LEADER, FOLLOWER))
        await partition.append_as_leader(batch(4), acks_all=True)
        assert partition.high_watermark == 0  # the follower's position is unknown yet
        partition.update_follower_end_offset(FOLLOWER, 4)
        assert partition.high_watermark == 4
        await partition.append_as_leader(batch(4), acks_all=True)
        partition.update_follower_end_offset(THIRD, 4)
        assert partition.may_join_isr(THIRD)  # has everything up to the HW
        partition.pending_isr = (LEADER, FOLLOWER, THIRD)
        partition.update_follower_end_offset(FOLLOWER, 8)
        # THIRD may be in the ISR any moment: nothing past its position is committed yet.
        assert partition.high_watermark == 4
        partition.update_follower_end_offset(THIRD, 8)
        assert partition.high_watermark == 8

    run(scenario)


def test_acks_all_fails_after_append_when_the_isr_shrank_below_min_insync_replicas(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = Clock()
        partition = _leader(tmp_path, clock, (LEADER, FOLLOWER))
        info = await partition.append_as_leader(batch(3), acks_all=True)
        partition.make_leader(_info((LEADER,), partition_epoch=1), MIN_ISR_TWO)
        with pytest.raises(PartitionError) as raised:
            await partition.wait_for_high_watermark(info.last_offset + 1, 5.0)
        assert raised.value.code is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        with pytest.raises(PartitionError) as refused:
            await partition.append_as_leader(batch(1), acks_all=True)
        assert refused.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log_end_offset == 3

    run(scenario)


def test_a_follower_truncates_to_the_smaller_end_of_the_epoch_both_logs_share(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        settings = MIN_ISR_TWO
        log = PartitionLog.open(tmp_path / "t-0", settings.log_config)
        log.append(batch(3), leader_epoch=1)  # offsets 0-2 in epoch 1
        log.append(batch(3), leader_epoch=2)  # offsets 3-5 in epoch 2 (the leader ended it at 4)
        follower = Partition(log, FOLLOWER, settings)
        diverging = common_pb2.EpochEndOffset(epoch=2, end_offset=4)
        assert truncation_offset(follower, diverging) == 4
        # The leader's epoch 1 runs further: this log's own epoch 1 end is where they agree.
        assert truncation_offset(follower, common_pb2.EpochEndOffset(epoch=1, end_offset=9)) == 3

    run(scenario)


class _RecordingController:
    """Records AlterPartition requests and refuses them, as the controllers do for a fenced
    node."""

    def __init__(self) -> None:
        self.proposals: list[list[int]] = []

    async def alter_partition(self, request: Any, timeout_s: float | None = None) -> Any:
        self.proposals.append(list(request.partitions[0].new_isr))
        refusal = controller_pb2.AlterPartitionResponse(
            error_code=ErrorCode.INELIGIBLE_REPLICA,  # type: ignore[arg-type]
            error_message="node 2 is fenced or stopping",
        )
        return types.SimpleNamespace(response=refusal)


class _Replicas:
    def __init__(self, view: MetadataView, partition: Partition) -> None:
        self.view = view
        self.node_id = LEADER
        self._partition = partition

    def hosted(self) -> list[Partition]:
        return [self._partition]


def _broker(node_id: int, *, fenced: bool) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(node_id=node_id, broker_epoch=1, fenced=fenced)
    )


def test_a_caught_up_follower_is_proposed_for_the_isr_only_once_it_is_unfenced(
    tmp_path: Path,
) -> None:
    """A restarted node catches up before the controllers unfence it; proposing it then is
    refused (INELIGIBLE_REPLICA), and each of its fetches proposed again (a loop every few
    milliseconds, seen in a nemesis run). Kafka's leader checks the metadata first."""

    async def scenario() -> None:
        clock = Clock()
        partition = _leader(tmp_path, clock, (LEADER, THIRD))
        view = MetadataView()
        view.apply(
            MetadataUpdate(
                snapshot=True,
                offset=1,
                records=(_broker(LEADER, fenced=False), _broker(FOLLOWER, fenced=True)),
            )
        )
        controller = _RecordingController()
        isr = IsrManager(_Replicas(view, partition), controller, lambda: 1, lag_time_max_ms=10_000)  # type: ignore[arg-type]
        partition.update_follower_end_offset(FOLLOWER, partition.log_end_offset)
        assert partition.may_join_isr(FOLLOWER)
        isr.on_caught_up(partition, FOLLOWER)
        assert partition.pending_isr is None and controller.proposals == []
        # Unfenced: now it is proposed.
        view.apply(
            MetadataUpdate(snapshot=False, offset=2, records=(_broker(FOLLOWER, fenced=False),))
        )
        isr.on_caught_up(partition, FOLLOWER)
        await asyncio.gather(*isr._in_flight)
        assert controller.proposals == [[LEADER, THIRD, FOLLOWER]]
        partition.log.close()

    run(scenario)


def test_under_replication_counts_against_the_target_while_a_reassignment_removes_replicas(
    tmp_path: Path,
) -> None:
    partition = _leader(tmp_path, Clock(), (LEADER, FOLLOWER))
    assert partition.under_replicated, "2 of 3 replicas in sync"
    # THIRD is being removed (the target is LEADER and FOLLOWER): both in sync is full.
    moving = _info((LEADER, FOLLOWER), partition_epoch=1)._replace(removing=(THIRD,))
    partition.make_leader(moving, MIN_ISR_TWO)
    assert not partition.under_replicated
    partition.make_leader(moving._replace(isr=(LEADER,), partition_epoch=2), MIN_ISR_TWO)
    assert partition.under_replicated
