"""Replication between real storage nodes served in-process (two nodes, test-driven metadata).

Each node runs the real service on a loopback port; the test hands both the same metadata
(brokers, one topic, who leads in which epoch) through ``QueueMetadataSource``. No
controllers: ISR changes are not recorded here (see tests/integration/test_replication*.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from brook_storage_node.log import TopicPartition
from storage_node_support import (
    Node,
    QueueMetadataSource,
    batch,
    broker_record,
    config_record,
    delta,
    fetch_request,
    free_port,
    partition_record,
    produce_request,
    run,
    running_node,
    snapshot,
    topic_record,
)

from brook.errors import ErrorCode
from brook.v1 import metadata_pb2, replica_pb2, replica_pb2_grpc, storage_pb2

TOPIC = "replicated"
LEADER = 1
FOLLOWER = 2
WAIT_S = 10.0
POLL_S = 0.02
# Settings that make a follower fetch and retry promptly.
FAST = {"replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "50"}
LONG_POLL_MS = 5000
PRODUCE_TIMEOUT_MS = 10_000


def _metadata(
    ports: dict[int, int], *, leader: int, isr: tuple[int, ...], epoch: int, min_isr: int = 1
) -> QueueMetadataSource:
    return QueueMetadataSource(
        snapshot(
            *(broker_record(node, port) for node, port in ports.items()),
            topic_record(TOPIC),
            config_record(TOPIC, "min.insync.replicas", str(min_isr)),
            partition_record(
                TOPIC, 0, leader=leader, replicas=(LEADER, FOLLOWER), isr=isr, leader_epoch=epoch
            ),
        )
    )


def _settings(node_id: int, **extra: str) -> dict[str, str]:
    return {"node.id": str(node_id), **FAST, **extra}


def _log_bytes(node: Node) -> bytes:
    replicas = node.node.replicas
    assert replicas is not None
    log = replicas.partitions[TopicPartition(TOPIC, 0)].log
    data = log.read(log.log_start_offset, 1 << 30, min_one_batch=True)
    return bytes(data.records)


def _log_end(node: Node) -> int:
    replicas = node.node.replicas
    assert replicas is not None
    return replicas.partitions[TopicPartition(TOPIC, 0)].log_end_offset


async def _until(condition: object, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(POLL_S)


def test_acks_all_answers_once_the_follower_has_the_batch_and_logs_are_byte_identical(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        async with (
            running_node(
                tmp_path / "1",
                port=ports[LEADER],
                source_for=lambda _: _metadata(
                    ports, leader=LEADER, isr=(1, 2), epoch=3, min_isr=2
                ),
                settings=_settings(LEADER),
            ) as leader,
            running_node(
                tmp_path / "2",
                port=ports[FOLLOWER],
                source_for=lambda _: _metadata(
                    ports, leader=LEADER, isr=(1, 2), epoch=3, min_isr=2
                ),
                settings=_settings(FOLLOWER),
            ) as follower,
        ):
            for i in range(5):
                response = await leader.stub.Produce(
                    produce_request(
                        TOPIC, 0, batch(3, prefix=f"b{i}"), timeout_ms=PRODUCE_TIMEOUT_MS
                    )
                )
                result = response.partitions[0]
                assert result.error_code == ErrorCode.NONE, result.error_message
                assert result.base_offset == i * 3
                # Acknowledged means the follower holds it: it is in the follower's log now.
                assert _log_end(follower) >= (i + 1) * 3
            assert _log_bytes(follower) == _log_bytes(leader)
            fetched = await leader.stub.Fetch(fetch_request(TOPIC, 0, 0))
            assert fetched.partitions[0].high_watermark == 15
            replicas = follower.node.replicas
            assert replicas is not None
            follower_partition = replicas.partitions[TopicPartition(TOPIC, 0)]
            await _until(lambda: follower_partition.high_watermark == 15, "the follower's HW")

    run(scenario)


def test_acks_all_with_an_isr_below_min_insync_replicas_is_refused_before_appending(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        async with running_node(
            tmp_path / "1",
            port=ports[LEADER],
            source_for=lambda _: _metadata(ports, leader=LEADER, isr=(1,), epoch=0, min_isr=2),
            settings=_settings(LEADER),
        ) as leader:
            response = await leader.stub.Produce(produce_request(TOPIC, 0, batch(2)))
            assert response.partitions[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
            assert _log_end(leader) == 0
            accepted = await leader.stub.Produce(
                produce_request(TOPIC, 0, batch(2), acks=storage_pb2.ACKS_LEADER)
            )
            assert accepted.partitions[0].error_code == ErrorCode.NONE

    run(scenario)


def test_a_follower_truncates_what_its_new_leader_never_had_and_copies_the_leaders_log(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        # Epoch 0: node 2 leads alone and writes 4 batches node 1 never sees.
        async with running_node(
            tmp_path / "2",
            port=ports[FOLLOWER],
            source_for=lambda _: _metadata(ports, leader=FOLLOWER, isr=(2,), epoch=0),
            settings=_settings(FOLLOWER),
        ) as old_leader:
            for i in range(4):
                response = await old_leader.stub.Produce(
                    produce_request(TOPIC, 0, batch(2, prefix=f"lost{i}"), acks=1)
                )
                assert response.partitions[0].error_code == ErrorCode.NONE
        # Epoch 1: node 1 leads with an empty log, takes 2 batches; node 2 comes back.
        new_metadata = {"leader": LEADER, "isr": (1,), "epoch": 1}
        async with running_node(
            tmp_path / "1",
            port=ports[LEADER],
            source_for=lambda _: _metadata(ports, **new_metadata),  # type: ignore[arg-type]
            settings=_settings(LEADER),
        ) as leader:
            for i in range(2):
                response = await leader.stub.Produce(
                    produce_request(TOPIC, 0, batch(3, prefix=f"kept{i}"), acks=1)
                )
                assert response.partitions[0].error_code == ErrorCode.NONE
            async with running_node(
                tmp_path / "2",
                port=ports[FOLLOWER],
                source_for=lambda _: _metadata(ports, **new_metadata),  # type: ignore[arg-type]
                settings=_settings(FOLLOWER),
            ) as follower:
                expected = _log_bytes(leader)
                await _until(lambda: _log_bytes(follower) == expected, "the follower to agree")
                assert _log_end(follower) == 6

    run(scenario)


def _latest_epoch(node: Node) -> int | None:
    replicas = node.node.replicas
    assert replicas is not None
    return replicas.partitions[TopicPartition(TOPIC, 0)].log.latest_epoch


def test_a_leader_that_appended_nothing_follows_the_next_leader_and_copies_its_log(
    tmp_path: Path,
) -> None:
    """Issue #13: node 2 leads epoch 1 (its history gains "epoch 1 starts at my log end"),
    appends nothing, and node 1 leads again in epoch 2. As a follower, node 2 must drop its
    empty epoch 1 and copy epoch 2, not loop on a divergence that truncating no record can
    resolve (Kafka trims the epoch history on every truncation, a no-op one included)."""

    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        sources: dict[int, QueueMetadataSource] = {}

        def source_for(node: int) -> QueueMetadataSource:
            sources[node] = _metadata(ports, leader=LEADER, isr=(1, 2), epoch=0, min_isr=2)
            return sources[node]

        async def lead(leader: int, epoch: int) -> None:
            record = partition_record(
                TOPIC,
                0,
                leader=leader,
                replicas=(LEADER, FOLLOWER),
                isr=(1, 2),
                leader_epoch=epoch,
            )
            for source in sources.values():
                await source.push(delta(record, offset=epoch))

        async with (
            running_node(
                tmp_path / "1",
                port=ports[LEADER],
                source_for=lambda _: source_for(LEADER),
                settings=_settings(LEADER),
            ) as node_1,
            running_node(
                tmp_path / "2",
                port=ports[FOLLOWER],
                source_for=lambda _: source_for(FOLLOWER),
                settings=_settings(FOLLOWER),
            ) as node_2,
        ):
            response = await node_1.stub.Produce(
                produce_request(TOPIC, 0, batch(3, prefix="e0"), timeout_ms=PRODUCE_TIMEOUT_MS)
            )
            assert response.partitions[0].error_code == ErrorCode.NONE
            await _until(lambda: _log_end(node_2) == 3, "node 2 to copy epoch 0")
            await lead(FOLLOWER, 1)
            await _until(lambda: _latest_epoch(node_2) == 1, "node 2 to lead epoch 1")
            await lead(LEADER, 2)
            response = await node_1.stub.Produce(
                produce_request(TOPIC, 0, batch(2, prefix="e2"), acks=1)
            )
            assert response.partitions[0].error_code == ErrorCode.NONE
            expected = _log_bytes(node_1)
            await _until(lambda: _log_bytes(node_2) == expected, "node 2 to copy epoch 2")
            assert _log_end(node_2) == 5
            assert _latest_epoch(node_2) == 2

    run(scenario)


def _failed_partitions(node: Node) -> int:
    fetchers = node.node.fetchers
    assert fetchers is not None
    return fetchers.failed_partitions()


def test_a_replication_error_that_persists_is_logged_once_counted_and_cleared_when_it_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader does not count node 2 as a replica (its metadata lags), so it refuses every
    fetch: node 2 retries each back-off, logs the error once (not once per back-off), shows it
    in brook.replication.failed_partitions, and clears both once the leader's view catches up."""

    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        brokers = [broker_record(node, port) for node, port in ports.items()]

        def record(replicas: tuple[int, ...]) -> metadata_pb2.MetadataRecord:
            return partition_record(
                TOPIC, 0, leader=LEADER, replicas=replicas, isr=(LEADER,), leader_epoch=1
            )

        leader_source = QueueMetadataSource(
            snapshot(*brokers, topic_record(TOPIC), record((LEADER,)))
        )
        async with (
            running_node(
                tmp_path / "1",
                port=ports[LEADER],
                source_for=lambda _: leader_source,
                settings=_settings(LEADER),
            ) as leader,
            running_node(
                tmp_path / "2",
                port=ports[FOLLOWER],
                source_for=lambda _: QueueMetadataSource(
                    snapshot(*brokers, topic_record(TOPIC), record((LEADER, FOLLOWER)))
                ),
                settings=_settings(FOLLOWER),
            ) as follower,
        ):
            caplog.set_level(logging.INFO, logger="brook_storage_node.replica_fetcher")
            await _until(lambda: _failed_partitions(follower) == 1, "the refusal to count")
            # Twenty rounds of the follower's retry loop: still one line.
            fetchers = follower.node.fetchers
            assert fetchers is not None
            await _until(
                lambda: fetchers.failures(TopicPartition(TOPIC, 0)) >= 20, "twenty refusals"
            )
            refusals = [r for r in caplog.records if "is not a replica" in r.getMessage()]
            assert len(refusals) == 1, [r.getMessage() for r in refusals]
            assert _failed_partitions(follower) == 1
            await leader_source.push(delta(record((LEADER, FOLLOWER)), offset=1))
            response = await leader.stub.Produce(produce_request(TOPIC, 0, batch(2), acks=1))
            assert response.partitions[0].error_code == ErrorCode.NONE
            expected = _log_bytes(leader)
            await _until(lambda: _log_bytes(follower) == expected, "the follower to copy")
            assert _failed_partitions(follower) == 0
            cleared = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
            assert len(cleared) == 1, cleared

    run(scenario)


class _LeaderThatHangsUp(replica_pb2_grpc.ReplicaServiceServicer):
    """Answers each replica fetch stream once, then ends the call."""

    def __init__(self) -> None:
        self.streams = 0

    async def ReplicaFetch(self, request_iterator: Any, context: Any) -> Any:
        self.streams += 1
        async for _request in request_iterator:
            yield replica_pb2.ReplicaFetchResponse()
            return


def test_a_fetcher_whose_leader_ends_its_streams_keeps_reconnecting(tmp_path: Path) -> None:
    """A leader may end the call at any point (the follower then writes to a finished call:
    InvalidStateError, or reads EOF); the fetcher task must survive and open a new stream,
    or every partition it carries stops replicating (seen in a nemesis run, issue #13)."""

    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        leader = _LeaderThatHangsUp()
        server = grpc.aio.server()
        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(leader, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"127.0.0.1:{ports[LEADER]}")
        await server.start()
        try:
            async with running_node(
                tmp_path / "2",
                port=ports[FOLLOWER],
                source_for=lambda _: _metadata(ports, leader=LEADER, isr=(1, 2), epoch=1),
                settings=_settings(FOLLOWER),
            ) as follower:
                await _until(lambda: leader.streams >= 5, "five streams, one after another")
                fetchers = follower.node.fetchers
                assert fetchers is not None
                task = fetchers.fetchers[LEADER].task
                assert task is not None and not task.done()
        finally:
            await server.stop(None)

    run(scenario)


def test_a_parked_replica_fetch_answers_as_soon_as_the_leader_appends(tmp_path: Path) -> None:
    async def scenario() -> None:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        async with running_node(
            tmp_path / "1",
            port=ports[LEADER],
            source_for=lambda _: _metadata(ports, leader=LEADER, isr=(1,), epoch=2),
            settings=_settings(LEADER),
        ) as leader:
            async with grpc.aio.insecure_channel(leader.address) as channel:
                stub = replica_pb2_grpc.ReplicaServiceStub(channel)  # type: ignore[no-untyped-call]
                stream = stub.ReplicaFetch()
                await stream.write(_fetch(0, epoch=2, max_wait_ms=LONG_POLL_MS))
                await asyncio.sleep(0.2)
                started = time.monotonic()
                await leader.stub.Produce(produce_request(TOPIC, 0, batch(2), acks=1))
                response = await asyncio.wait_for(stream.read(), WAIT_S)
                assert time.monotonic() - started < LONG_POLL_MS / 1000 / 2
                entry = response.partitions[0]
                assert entry.error_code == ErrorCode.NONE
                assert bytes(entry.records) == _log_bytes(leader)
                # Stale epoch: fenced. A position past this leader's epoch history: diverging.
                await stream.write(_fetch(0, epoch=1))
                fenced = await asyncio.wait_for(stream.read(), WAIT_S)
                assert fenced.partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
                await stream.write(_fetch(9, epoch=2, last_fetched_epoch=2))
                diverging = await asyncio.wait_for(stream.read(), WAIT_S)
                assert diverging.partitions[0].HasField("diverging_epoch")
                assert diverging.partitions[0].diverging_epoch.end_offset == 2
                assert not diverging.partitions[0].records
                stream.cancel()

    run(scenario)


def _fetch(
    offset: int, *, epoch: int, last_fetched_epoch: int = -1, max_wait_ms: int = 0
) -> replica_pb2.ReplicaFetchRequest:
    return replica_pb2.ReplicaFetchRequest(
        replica_id=FOLLOWER,
        broker_epoch=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        partitions=[
            replica_pb2.ReplicaFetchPartition(
                topic=TOPIC,
                partition=0,
                fetch_offset=offset,
                current_leader_epoch=epoch,
                last_fetched_epoch=last_fetched_epoch,
                partition_max_bytes=1 << 20,
            )
        ],
    )
