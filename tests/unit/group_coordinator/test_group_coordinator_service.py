"""GroupCoordinatorService served in-process over real gRPC, with the group manager on a
__consumer_offsets kept in memory: the protocol round trips, ownership answers, offsets that
survive a hand-over to another coordinator, deletion and retention."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from brook_group_coordinator.coordinator_service import GroupCoordinatorServicer
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import GroupManager
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.offsets_log import LogRecord
from brook_group_coordinator.ownership import offsets_partition_for
from brook_group_coordinator.timers import LoopTimers
from memory_offsets_log import MemoryOffsetsLog

from brook.errors import ErrorCode
from brook.v1 import common_pb2, group_pb2, group_pb2_grpc

PARTITIONS = 4
NODE_ID = 7
OTHER_NODE_ID = 8
GROUP = "orders-app"
GROUP_PARTITION = offsets_partition_for(GROUP, PARTITIONS)
METADATA_MAX = 64
RPC_TIMEOUT_S = 10.0


@dataclass
class Served:
    stub: group_pb2_grpc.GroupCoordinatorServiceStub
    manager: GroupManager
    directory: CoordinatorDirectory


@asynccontextmanager
async def serving(
    log: MemoryOffsetsLog, *, retention_ms: int = 60_000, load: bool = True
) -> AsyncIterator[Served]:
    manager = GroupManager(
        limits=GroupLimits(100, 60_000, initial_rebalance_delay_ms=0, members_max=100),
        offset_limits=OffsetLimits(metadata_bytes_max=METADATA_MAX, retention_ms=retention_ms),
        timers=LoopTimers(asyncio.get_running_loop()),
        log=log,
        partition_count=PARTITIONS,
    )
    directory = CoordinatorDirectory()
    directory.set_endpoints(NODE_ID, (common_pb2.Endpoint(listener="GRPC", host="h", port=1),))
    directory.set_endpoints(
        OTHER_NODE_ID, (common_pb2.Endpoint(listener="GRPC", host="other", port=2),)
    )
    for partition in range(PARTITIONS):
        owner = NODE_ID if partition == GROUP_PARTITION else OTHER_NODE_ID
        directory.assign(partition, owner, 1)
    if load:
        await manager.load_partition(GROUP_PARTITION, 1)
    server = grpc.aio.server()
    group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
        GroupCoordinatorServicer(manager, directory), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = group_pb2_grpc.GroupCoordinatorServiceStub(channel)  # type: ignore[no-untyped-call]
        yield Served(stub, manager, directory)
    finally:
        await channel.close()
        await server.stop(None)
        await manager.close()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


def join_request(member_id: str = "", instance: str | None = None) -> group_pb2.JoinGroupRequest:
    return group_pb2.JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=5_000,
        rebalance_timeout_ms=5_000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[group_pb2.JoinGroupProtocol(name="range", metadata=b"topics")],
        client_id="test",
    )


async def stable_member(stub: group_pb2_grpc.GroupCoordinatorServiceStub) -> tuple[str, int]:
    first = await stub.JoinGroup(join_request(), timeout=RPC_TIMEOUT_S)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = await stub.JoinGroup(join_request(first.member_id), timeout=RPC_TIMEOUT_S)
    assert joined.error_code == ErrorCode.NONE and joined.leader_id == first.member_id
    synced = await stub.SyncGroup(
        group_pb2.SyncGroupRequest(
            group_id=GROUP,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=joined.member_id, assignment=b"a")
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"a"
    return joined.member_id, joined.generation_id


def commit_request(
    member_id: str, generation: int, offset: int, metadata: str = ""
) -> group_pb2.CommitOffsetsRequest:
    return group_pb2.CommitOffsetsRequest(
        group_id=GROUP,
        generation_id=generation,
        member_id=member_id,
        partitions=[
            group_pb2.OffsetCommitPartition(
                topic="orders", partition=0, committed_offset=offset, metadata=metadata
            )
        ],
    )


def test_member_joins_syncs_heartbeats_commits_and_fetches_over_grpc() -> None:
    async def scenario() -> None:
        async with serving(MemoryOffsetsLog()) as served:
            member_id, generation = await stable_member(served.stub)
            beat = await served.stub.Heartbeat(
                group_pb2.HeartbeatRequest(
                    group_id=GROUP, generation_id=generation, member_id=member_id
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert beat.error_code == ErrorCode.NONE
            committed = await served.stub.CommitOffsets(
                commit_request(member_id, generation, 42, "m"), timeout=RPC_TIMEOUT_S
            )
            assert [p.error_code for p in committed.partitions] == [ErrorCode.NONE]
            fetched = await served.stub.FetchOffsets(
                group_pb2.FetchOffsetsRequest(
                    group_id=GROUP,
                    partitions=[
                        common_pb2.TopicPartition(topic="orders", partition=0),
                        common_pb2.TopicPartition(topic="orders", partition=1),
                    ],
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert [(p.committed_offset, p.metadata) for p in fetched.partitions] == [
                (42, "m"),
                (-1, ""),
            ]
            described = await served.stub.DescribeGroups(
                group_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=RPC_TIMEOUT_S
            )
            assert described.groups[0].state == group_pb2.GROUP_STATE_STABLE
            assert [m.member_id for m in described.groups[0].members] == [member_id]

    run(scenario)


def test_group_of_another_coordinator_gets_not_coordinator_with_hint() -> None:
    other = next(
        g
        for g in (f"g{i}" for i in range(100))
        if offsets_partition_for(g, PARTITIONS) != GROUP_PARTITION
    )

    async def scenario() -> None:
        async with serving(MemoryOffsetsLog()) as served:
            request = join_request()
            request.group_id = other
            answer = await served.stub.JoinGroup(request, timeout=RPC_TIMEOUT_S)
            assert answer.error_code == ErrorCode.NOT_COORDINATOR
            assert answer.coordinator.node_id == OTHER_NODE_ID
            assert answer.coordinator.endpoints[0].host == "other"
            found = await served.stub.FindCoordinator(
                group_pb2.FindCoordinatorRequest(keys=[GROUP, other, ""]), timeout=RPC_TIMEOUT_S
            )
            assert [(c.node_id, c.error_code) for c in found.coordinators] == [
                (NODE_ID, ErrorCode.NONE),
                (OTHER_NODE_ID, ErrorCode.NONE),
                (-1, ErrorCode.INVALID_GROUP_ID),
            ]

    run(scenario)


def test_committed_offsets_and_members_survive_hand_over_to_another_coordinator() -> None:
    log = MemoryOffsetsLog()

    async def scenario() -> None:
        async with serving(log) as first:
            member_id, generation = await stable_member(first.stub)
            await first.stub.CommitOffsets(
                commit_request(member_id, generation, 100), timeout=RPC_TIMEOUT_S
            )
        # A new coordinator replays the same partition of __consumer_offsets.
        async with serving(log) as second:
            fetched = await second.stub.FetchOffsets(
                group_pb2.FetchOffsetsRequest(group_id=GROUP), timeout=RPC_TIMEOUT_S
            )
            assert [(p.topic, p.partition, p.committed_offset) for p in fetched.partitions] == [
                ("orders", 0, 100)
            ]
            # The member keeps its generation: it heartbeats on without rejoining.
            beat = await second.stub.Heartbeat(
                group_pb2.HeartbeatRequest(
                    group_id=GROUP, generation_id=generation, member_id=member_id
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert beat.error_code == ErrorCode.NONE

    run(scenario)


class GatedOffsetsLog(MemoryOffsetsLog):
    """Reads wait for the gate: a replay that takes as long as the test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        await self.gate.wait()
        async for record in super().read(partition, from_offset):
            yield record


def test_partition_being_loaded_answers_coordinator_load_in_progress() -> None:
    async def scenario() -> None:
        log = GatedOffsetsLog()
        async with serving(log, load=False) as served:
            loading = asyncio.create_task(served.manager.load_partition(GROUP_PARTITION, 1))
            await asyncio.sleep(0)
            answer = await served.stub.JoinGroup(join_request(), timeout=RPC_TIMEOUT_S)
            assert answer.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            log.gate.set()
            await loading
            answer = await served.stub.JoinGroup(join_request(), timeout=RPC_TIMEOUT_S)
            assert answer.error_code == ErrorCode.MEMBER_ID_REQUIRED

    run(scenario)


def test_list_groups_says_load_in_progress_while_a_partition_is_being_loaded() -> None:
    async def scenario() -> None:
        log = GatedOffsetsLog()
        async with serving(log, load=False) as served:
            loading = asyncio.create_task(served.manager.load_partition(GROUP_PARTITION, 1))
            await asyncio.sleep(0)
            listed = await served.stub.ListGroups(
                group_pb2.ListGroupsRequest(), timeout=RPC_TIMEOUT_S
            )
            assert listed.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            log.gate.set()
            await loading
            await stable_member(served.stub)
            listed = await served.stub.ListGroups(
                group_pb2.ListGroupsRequest(), timeout=RPC_TIMEOUT_S
            )
            assert listed.error_code == ErrorCode.NONE
            assert [g.group_id for g in listed.groups] == [GROUP]

    run(scenario)


def test_oversized_metadata_is_refused_and_nothing_is_written() -> None:
    log = MemoryOffsetsLog()

    async def scenario() -> None:
        async with serving(log) as served:
            answer = await served.stub.CommitOffsets(
                commit_request("", -1, 5, "x" * (METADATA_MAX + 1)), timeout=RPC_TIMEOUT_S
            )
            assert [p.error_code for p in answer.partitions] == [
                ErrorCode.OFFSET_METADATA_TOO_LARGE
            ]
            assert log.partitions.get(GROUP_PARTITION, []) == []

    run(scenario)


def test_delete_refuses_groups_with_members_and_unknown_groups() -> None:
    async def scenario() -> None:
        async with serving(MemoryOffsetsLog()) as served:
            await stable_member(served.stub)
            answer = await served.stub.DeleteGroups(
                group_pb2.DeleteGroupsRequest(group_ids=[GROUP]), timeout=RPC_TIMEOUT_S
            )
            assert answer.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
            served.manager.unload_partition(GROUP_PARTITION)
            await served.manager.load_partition(GROUP_PARTITION, 2)
            missing = next(
                g
                for g in (f"never-{i}" for i in range(100))
                if offsets_partition_for(g, PARTITIONS) == GROUP_PARTITION
            )
            answer = await served.stub.DeleteGroups(
                group_pb2.DeleteGroupsRequest(group_ids=[missing]), timeout=RPC_TIMEOUT_S
            )
            assert answer.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND

    run(scenario)


def test_offsets_of_empty_group_expire_after_retention_and_group_is_removed() -> None:
    async def scenario() -> None:
        async with serving(MemoryOffsetsLog(), retention_ms=50) as served:
            answer = await served.stub.CommitOffsets(
                commit_request("", -1, 9), timeout=RPC_TIMEOUT_S
            )
            assert answer.partitions[0].error_code == ErrorCode.NONE
            assert await served.manager.expire_offsets() == 0
            await asyncio.sleep(0.1)
            assert await served.manager.expire_offsets() == 1
            fetched = await served.stub.FetchOffsets(
                group_pb2.FetchOffsetsRequest(group_id=GROUP), timeout=RPC_TIMEOUT_S
            )
            assert list(fetched.partitions) == []
            listed = await served.stub.ListGroups(
                group_pb2.ListGroupsRequest(), timeout=RPC_TIMEOUT_S
            )
            assert GROUP not in [g.group_id for g in listed.groups]

    run(scenario)
