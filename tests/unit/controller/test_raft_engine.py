"""The Raft engine (pysyncobj behind our interface): three real engines in this process, on
loopback ports, with their journals and snapshots in tmp_path."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from brook_controller.commands import Command, CommandKind, encode_command
from brook_controller.image import ControllerImage
from brook_controller.raft import SNAPSHOT_FILE, EngineSettings, NotLeaderError, PySyncObjEngine
from brook_controller.state_machine import ApplyStatus, MetadataStateMachine

from brook.ports import allocate_free_ports
from brook.v1 import metadata_pb2

START_TIMEOUT_S = 20
LEADER_TIMEOUT_S = 10
COMMIT_TIMEOUT_S = 5
SNAPSHOT_EVERY_ENTRIES = 10


class _Ignore:
    def on_records(self, offset: int, records: Sequence[metadata_pb2.MetadataRecord]) -> None:
        pass

    def on_reset(self, image: ControllerImage) -> None:
        pass


class Replica:
    def __init__(self, node_id: int, voters: dict[int, str], root: Path) -> None:
        self.node_id = node_id
        self.directory = root / str(node_id)
        self.directory.mkdir(exist_ok=True)
        self.settings = EngineSettings(
            node_id=node_id,
            voters=voters,
            bind_address=voters[node_id],
            directory=self.directory,
            password="test-secret",
            heartbeat_interval_ms=50,
            election_timeout_ms=400,
            connection_timeout_ms=2000,
            reconnect_backoff_ms=200,
            leader_fallback_timeout_ms=1000,
            snapshot_min_entries=SNAPSHOT_EVERY_ENTRIES,
            snapshot_interval_ms=3_600_000,
        )
        self.machine = MetadataStateMachine(_Ignore())
        self.engine: PySyncObjEngine | None = None

    async def start(self) -> None:
        self.machine = MetadataStateMachine(_Ignore())
        self.engine = await PySyncObjEngine.start(
            self.settings, self.machine, ready_timeout_s=START_TIMEOUT_S
        )

    async def stop(self) -> None:
        if self.engine is not None:
            await self.engine.close(timeout_s=5)
            self.engine = None


def _replicas(root: Path) -> list[Replica]:
    ports = allocate_free_ports(3)
    voters = {node_id: f"127.0.0.1:{port}" for node_id, port in zip((1, 2, 3), ports, strict=True)}
    return [Replica(node_id, voters, root) for node_id in voters]


async def _leader(replicas: Sequence[Replica]) -> Replica:
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    while True:
        for replica in replicas:
            if replica.engine is not None and replica.engine.is_leader():
                return replica
        assert time.monotonic() < deadline, "no leader was elected"
        await asyncio.sleep(0.02)


async def _propose(leader: Replica, name: str) -> None:
    assert leader.engine is not None
    record = metadata_pb2.MetadataRecord(
        topic=metadata_pb2.TopicRecord(name=name, topic_id=uuid.uuid4().bytes)
    )
    command = Command(CommandKind.RECORDS, leader.engine.term, records=[record])
    outcome = await leader.engine.propose(encode_command(command), COMMIT_TIMEOUT_S)
    assert outcome.status is ApplyStatus.APPLIED


async def _converged(replicas: Sequence[Replica], offset: int) -> set[str]:
    """Waits until every running replica has applied up to ``offset``; their digests. (A
    restarted replica reaches it in steps: its snapshot, then its journal up to the commit
    index it learns from the leader.)"""
    running = [r for r in replicas if r.engine is not None]
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    while {r.machine.offset for r in running} != {offset}:
        assert time.monotonic() < deadline, [r.machine.offset for r in running]
        await asyncio.sleep(0.02)
    # The engines apply on their own threads: digest on those threads too.
    return {
        await r.engine.call_on_engine_thread(r.machine.image.digest, COMMIT_TIMEOUT_S)
        for r in running
        if r.engine is not None
    }


async def _stop_all(replicas: Sequence[Replica]) -> None:
    await asyncio.gather(*(replica.stop() for replica in replicas))


@contextlib.asynccontextmanager
async def _running(root: Path) -> AsyncIterator[list[Replica]]:
    """Three started replicas; all stopped on the way out, whatever happened."""
    replicas = _replicas(root)
    try:
        await asyncio.gather(*(replica.start() for replica in replicas))
        yield replicas
    finally:
        await _stop_all(replicas)


def test_committed_commands_reach_every_replica_and_survive_a_leader_failure(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _running(tmp_path) as replicas:
            leader = await _leader(replicas)
            for index in range(5):
                await _propose(leader, f"before-{index}")
            first_term = leader.engine.term if leader.engine else 0

            await leader.stop()
            started = time.monotonic()
            successor = await _leader([r for r in replicas if r is not leader])
            failover_s = time.monotonic() - started
            await _propose(successor, "after")

            assert successor.engine is not None and successor.engine.term > first_term
            assert failover_s < 3, f"failover took {failover_s:.1f} s"
            assert len(await _converged(replicas, 5)) == 1

    asyncio.run(scenario())


def test_a_follower_refuses_to_propose(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _running(tmp_path) as replicas:
            leader = await _leader(replicas)
            follower = next(r for r in replicas if r is not leader)
            assert follower.engine is not None
            deadline = time.monotonic() + LEADER_TIMEOUT_S
            while follower.engine.leader_id() is None:
                assert time.monotonic() < deadline, "the follower never heard from the leader"
                await asyncio.sleep(0.02)

            with pytest.raises(NotLeaderError):
                await _propose(follower, "nope")

            assert follower.engine.leader_id() == leader.node_id
            assert follower.machine.offset == -1

    asyncio.run(scenario())


def test_restarted_replicas_recover_their_state_from_snapshot_and_journal_and_catch_up(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _running(tmp_path) as replicas:
            leader = await _leader(replicas)
            lagging = next(r for r in replicas if r is not leader)
            await lagging.stop()
            last = 4 * SNAPSHOT_EVERY_ENTRIES - 1
            for index in range(last + 1):
                await _propose(leader, f"t{index}")
            (digest,) = await _converged(replicas, last)

            await lagging.start()
            assert {digest} == await _converged(replicas, last), "the lagging replica caught up"
            await _stop_all(replicas)
            await asyncio.gather(*(replica.start() for replica in replicas))
            await _leader(replicas)

            assert {digest} == await _converged(replicas, last)
            assert all((r.directory / SNAPSHOT_FILE).is_file() for r in replicas)

    asyncio.run(scenario())
