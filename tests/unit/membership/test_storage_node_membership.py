"""The storage node in a cluster: it joins through (fake, in-process) controllers, serves what
their metadata gives it, leads only while it holds its lease, and moves its leaderships away
before it stops. The node is the real service, run by brook.server.serve in the test's loop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from brook_storage_node.app import SPEC, StorageNode
from brook_storage_node.config import CONFIG_DEF
from grpc_health.v1 import health_pb2, health_pb2_grpc
from membership_support import (
    CLUSTER_ID,
    HEARTBEAT_INTERVAL_MS,
    NODE_ID,
    OTHER_NODE_ID,
    SESSION_TIMEOUT_MS,
    FakeQuorum,
    eventually,
    free_port,
    partition_record,
    run,
    running_quorum,
    topic_id,
    topic_record,
)

from brook.config import Config, RawSetting
from brook.errors import ErrorCode, error_code
from brook.membership import MetaProperties
from brook.membership.meta_properties import read_meta_properties, write_meta_properties
from brook.record import build_batch
from brook.server import EXIT_FAILURE, EXIT_OK, serve
from brook.v1 import common_pb2, metadata_pb2, storage_pb2, storage_pb2_grpc

STOP_TIMEOUT_S = 10.0
RPC_TIMEOUT_S = 5.0
SESSION_S = SESSION_TIMEOUT_MS / 1000
SLACK_S = 0.5
OTHER_NODE_PORT = 19_999


@dataclass
class RunningNode:
    node: StorageNode
    stub: Any
    stop: asyncio.Event
    served: asyncio.Task[int]


def _config(quorum: FakeQuorum, data_dir: Path, port: int, **settings: str) -> Config:
    raw = {
        "node.id": str(NODE_ID),
        "listeners": f"GRPC://127.0.0.1:{port}",
        "log.dirs": str(data_dir),
        "controller.quorum.bootstrap.servers": ",".join(
            c.address for c in quorum.controllers.values()
        ),
        "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "retry.backoff.ms": "10",
        "retry.backoff.max.ms": "50",
        "request.timeout.ms": "2000",
        "initial.broker.registration.timeout.ms": "10000",
        "shutdown.timeout.ms": "2000",
        **settings,
    }
    return CONFIG_DEF.parse({name: RawSetting(value, "test") for name, value in raw.items()})


def _serve(config: Config, stop: asyncio.Event) -> tuple[list[StorageNode], asyncio.Task[int]]:
    created: list[StorageNode] = []

    def create(config: Config) -> StorageNode:
        created.append(StorageNode(config))
        return created[-1]

    spec = dataclasses.replace(SPEC, create=create)
    return created, asyncio.get_running_loop().create_task(serve(spec, config, stop=stop))


@asynccontextmanager
async def running_node(
    quorum: FakeQuorum, data_dir: Path, **settings: str
) -> AsyncIterator[RunningNode]:
    """The storage node joined to ``quorum`` and SERVING; stopped on exit (exit 0 checked)."""
    port = free_port()
    stop = asyncio.Event()
    created, served = _serve(_config(quorum, data_dir, port, **settings), stop)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    health = health_pb2_grpc.HealthStub(channel)

    async def serving() -> bool:
        try:
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_TIMEOUT_S
        while not await serving():
            assert not served.done(), f"the node exited during start-up: {served.result()}"
            assert loop.time() < deadline, "the node did not become SERVING"
            await asyncio.sleep(0.02)
        stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
        yield RunningNode(created[0], stub, stop, served)
    finally:
        stop.set()
        exit_status = await asyncio.wait_for(served, STOP_TIMEOUT_S)
        await channel.close()
    assert exit_status == EXIT_OK


@asynccontextmanager
async def _assigned_node(data_dir: Path) -> AsyncIterator[tuple[FakeQuorum, RunningNode]]:
    """A quorum with ``_assign``'s topic and the node joined to it."""
    async with running_quorum() as quorum:
        _assign(quorum)
        async with running_node(quorum, data_dir) as node:
            yield quorum, node


def _assign(quorum: FakeQuorum) -> None:
    """Topic t: t-0 led by this node, t-1 led by the other node (this node follows it)."""
    quorum.append(
        metadata_pb2.MetadataRecord(
            broker=metadata_pb2.BrokerRecord(
                node_id=OTHER_NODE_ID,
                broker_epoch=1,
                role=common_pb2.NODE_ROLE_STORAGE_NODE,
                endpoints=[
                    common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=OTHER_NODE_PORT)
                ],
            )
        ),
        topic_record("t"),
        partition_record("t", 0, NODE_ID, replicas=(NODE_ID, OTHER_NODE_ID)),
        partition_record("t", 1, OTHER_NODE_ID, replicas=(OTHER_NODE_ID, NODE_ID)),
    )


async def _produce(
    node: RunningNode, topic: str, partition: int, value_bytes: int = 10
) -> storage_pb2.PartitionProduceResponse:
    batch = build_batch([(1_700_000_000_000, b"k", b"v" * value_bytes, [])])
    response = await node.stub.Produce(
        storage_pb2.ProduceRequest(
            # The followers do not replicate yet (issue #6): acks=all would wait for them.
            acks=storage_pb2.ACKS_LEADER,
            partitions=[
                storage_pb2.PartitionProduceData(topic=topic, partition=partition, records=batch)
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    result: storage_pb2.PartitionProduceResponse = response.partitions[0]
    return result


async def _produce_code(node: RunningNode, topic: str, partition: int) -> ErrorCode:
    return error_code((await _produce(node, topic, partition)).error_code)


def test_a_node_without_static_topics_joins_and_serves_what_the_controllers_assign(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _assigned_node(tmp_path) as (quorum, node):
            assert not quorum.brokers[NODE_ID].fenced
            led = await _produce(node, "t", 0)
            followed = await _produce(node, "t", 1)
            replicas = node.node.replicas
            assert replicas is not None
            follower = next(p for tp, p in replicas.partitions.items() if tp.partition == 1)

            assert error_code(led.error_code) is ErrorCode.NONE
            assert error_code(followed.error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert followed.current_leader.leader_id == OTHER_NODE_ID
            assert [e.port for e in followed.current_leader.endpoints] == [OTHER_NODE_PORT]
            assert not follower.is_leader and follower.leader_id == OTHER_NODE_ID
            registration = quorum.calls_of("RegisterBroker")[0]
            assert registration.role == common_pb2.NODE_ROLE_STORAGE_NODE

        assert read_meta_properties(tmp_path) == MetaProperties(NODE_ID, CLUSTER_ID)

    run(scenario)


def test_a_node_that_lost_its_lease_answers_not_leader_or_follower_until_it_is_back(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _assigned_node(tmp_path) as (quorum, node):
            assert await _produce_code(node, "t", 0) is ErrorCode.NONE

            quorum.unreachable.update(quorum.controllers)
            cut_at = time.monotonic()
            while await _produce_code(node, "t", 0) is ErrorCode.NONE:
                assert time.monotonic() - cut_at < SESSION_S + SLACK_S, "still leading"
                await asyncio.sleep(0.02)
            refused = await _produce(node, "t", 0)

            assert error_code(refused.error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert "cannot lead partitions now" in refused.error_message
            assert refused.current_leader.leader_id == -1

            quorum.unreachable.clear()
            await _eventually_produces(node, "t", 0)

    run(scenario)


async def _eventually_produces(node: RunningNode, topic: str, partition: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STOP_TIMEOUT_S
    while await _produce_code(node, topic, partition) is not ErrorCode.NONE:
        assert loop.time() < deadline, f"{topic}-{partition} never led again"
        await asyncio.sleep(0.02)


def test_a_node_told_it_is_fenced_stops_leading_before_its_lease_would_lapse(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _assigned_node(tmp_path) as (quorum, node):
            quorum.keep_fenced.add(NODE_ID)
            quorum.set_fenced(NODE_ID, True)
            fenced_at = time.monotonic()
            await eventually(
                lambda: node.node.replicas is not None and not node.node.replicas.may_lead(),
                "the node to stop leading",
            )

            assert time.monotonic() - fenced_at < SESSION_S / 2
            assert await _produce_code(node, "t", 0) is ErrorCode.NOT_LEADER_OR_FOLLOWER

            quorum.keep_fenced.clear()
            await _eventually_produces(node, "t", 0)

    run(scenario)


def test_topic_deletion_removes_the_partitions_data(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _assigned_node(tmp_path) as (quorum, node):
            assert await _produce_code(node, "t", 0) is ErrorCode.NONE
            assert (tmp_path / "t-0").is_dir() and (tmp_path / "t-1").is_dir()

            quorum.append(_remove_topic_record("t"))
            await eventually(
                lambda: not (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists(),
                "the partition directories to go",
            )

            assert await _produce_code(node, "t", 0) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario)


def _remove_topic_record(topic: str) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic_id(topic), name=topic)
    )


def _config_record(topic: str, name: str, value: str | None) -> metadata_pb2.MetadataRecord:
    record = metadata_pb2.ConfigRecord(
        resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC, resource_name=topic, name=name
    )
    if value is not None:
        record.value = value
    return metadata_pb2.MetadataRecord(config=record)


def test_topic_config_records_override_the_node_defaults(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _assigned_node(tmp_path) as (quorum, node):
            assert error_code((await _produce(node, "t", 0, 1000)).error_code) is ErrorCode.NONE

            quorum.append(_config_record("t", "max.message.bytes", "200"))
            await eventually(
                lambda: (
                    node.node.replicas is not None
                    and node.node.replicas.topic_settings("t").log_config.max_message_bytes == 200
                ),
                "the override to apply",
            )
            too_large = await _produce(node, "t", 0, 1000)
            quorum.append(_config_record("t", "max.message.bytes", None))
            await _eventually_produces(node, "t", 0)

            assert error_code(too_large.error_code) is ErrorCode.MESSAGE_TOO_LARGE
            assert error_code((await _produce(node, "t", 0, 1000)).error_code) is (ErrorCode.NONE)

    run(scenario)


def test_on_stop_the_node_moves_its_leaderships_away_before_it_exits(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _assigned_node(tmp_path) as (quorum, node):
            assert await _produce_code(node, "t", 0) is ErrorCode.NONE
            stopped_at = time.monotonic()
            node.stop.set()
            exit_status = await asyncio.wait_for(node.served, STOP_TIMEOUT_S)
            took_s = time.monotonic() - stopped_at

            assert exit_status == EXIT_OK
            assert took_s < 2.0  # within shutdown.timeout.ms
            assert quorum.partitions()[("t", 0)].leader == OTHER_NODE_ID
            assert quorum.brokers[NODE_ID].in_controlled_shutdown
            assert quorum.calls_of("BrokerHeartbeat")[-1].want_shut_down

    run(scenario)


def test_a_node_whose_data_belongs_to_another_cluster_refuses_to_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_meta_properties(tmp_path, MetaProperties(NODE_ID, "SomeOtherCluster000000"))
    before = sorted(p.name for p in tmp_path.iterdir())

    async def scenario() -> int:
        async with running_quorum() as quorum:
            _assign(quorum)
            stop = asyncio.Event()
            _, served = _serve(_config(quorum, tmp_path, free_port()), stop)
            status = await asyncio.wait_for(served, STOP_TIMEOUT_S)
            assert quorum.calls_of("RegisterBroker") == []
            return status

    with caplog.at_level(logging.ERROR):
        assert run(scenario) == EXIT_FAILURE

    assert "INCONSISTENT_CLUSTER_ID" in caplog.text
    assert "SomeOtherCluster000000" in caplog.text
    # Nothing was created or changed but the log manager's own files.
    assert [n for n in sorted(p.name for p in tmp_path.iterdir()) if n not in before] in (
        [],
        [".lock"],
        [".lock", ".kafka_cleanshutdown"],
        [".kafka_cleanshutdown", ".lock"],
    )


def test_a_node_that_cannot_reach_any_controller_gives_up_within_its_registration_timeout(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=1) as quorum:
            await quorum.controllers[1001].stop()
            stop = asyncio.Event()
            started = time.monotonic()
            config = _config(
                quorum, tmp_path, free_port(), **{"initial.broker.registration.timeout.ms": "500"}
            )
            _, served = _serve(config, stop)
            status = await asyncio.wait_for(served, STOP_TIMEOUT_S)

            assert status == EXIT_FAILURE
            assert time.monotonic() - started < 0.5 + 2.0  # the shutdown itself is bounded too

    run(scenario)


def test_a_rejoining_node_deletes_the_logs_of_topics_deleted_while_it_was_down(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum:
            _assign(quorum)
            quorum.append(topic_record("gone"), partition_record("gone", 0, NODE_ID))
            async with running_node(quorum, tmp_path) as node:
                assert await _produce_code(node, "gone", 0) is ErrorCode.NONE
            assert (tmp_path / "gone-0").is_dir()

            quorum.append(_remove_topic_record("gone"))
            # The controllers expired the previous incarnation's lease meanwhile.
            quorum.set_fenced(NODE_ID, True, in_controlled_shutdown=False)
            async with running_node(quorum, tmp_path):
                assert not (tmp_path / "gone-0").exists()
                # Still replicas of this node (their leaderships moved at the controlled
                # shutdown): kept.
                assert (tmp_path / "t-0").is_dir() and (tmp_path / "t-1").is_dir()

    run(scenario)


def test_a_node_joining_a_cluster_for_the_first_time_keeps_the_data_it_already_has(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum:
            _assign(quorum)
            async with running_node(quorum, tmp_path, **{"static.topics": "local:1"}) as node:
                assert await _produce_code(node, "local", 0) is ErrorCode.NONE
            assert quorum.calls == []  # static: no controller contacted

            async with running_node(quorum, tmp_path):
                assert (tmp_path / "local-0").is_dir()
                assert (tmp_path / "t-0").is_dir()

        # It has joined now: a later start would treat local-0 as a stray.
        assert read_meta_properties(tmp_path) == MetaProperties(NODE_ID, CLUSTER_ID)

    run(scenario)
