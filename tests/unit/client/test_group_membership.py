"""The consumer's group state machine (ConsumerCoordinator) against the real coordinator
service served in-process over gRPC (its group manager on an in-memory __consumer_offsets),
with topic metadata from the storage double."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import grpc
import pytest
from brook_group_coordinator.coordinator_service import GroupCoordinatorServicer
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import GroupManager
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.ownership import offsets_partition_for
from brook_group_coordinator.timers import LoopTimers
from memory_offsets_log import MemoryOffsetsLog
from storage_double import PartitionData, RunningDouble

from brook.client.admin import OffsetAndMetadata
from brook.client.config import consumer_config
from brook.client.errors import CommitFailedError, FencedInstanceIdError
from brook.client.group.coordinator import ConsumerCoordinator
from brook.client.metadata import Metadata
from brook.client.runtime import Notifier, Wakeup
from brook.client.types import TopicPartition
from brook.rpc.channels import ChannelPool, channel_options
from brook.v1 import common_pb2, group_pb2_grpc

OFFSETS_PARTITIONS = 4
NODE_ID = 7
GROUP = "unit-group"
SCENARIO_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 10.0
EVENTS = [TopicPartition("events", p) for p in range(3)]


@dataclass
class Served:
    address: str
    manager: GroupManager
    storage: RunningDouble
    network: ChannelPool


@asynccontextmanager
async def serving(storage: RunningDouble, *, load: bool = True) -> AsyncIterator[Served]:
    manager = GroupManager(
        limits=GroupLimits(100, 60_000, initial_rebalance_delay_ms=0, members_max=100),
        offset_limits=OffsetLimits(metadata_bytes_max=64, retention_ms=60_000),
        timers=LoopTimers(asyncio.get_running_loop()),
        log=MemoryOffsetsLog(),
        partition_count=OFFSETS_PARTITIONS,
    )
    directory = CoordinatorDirectory()
    server = grpc.aio.server()
    group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
        GroupCoordinatorServicer(manager, directory), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    directory.set_endpoints(
        NODE_ID, (common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=port),)
    )
    for partition in range(OFFSETS_PARTITIONS):
        directory.assign(partition, NODE_ID, 1)
    if load:
        await manager.load_partition(offsets_partition_for(GROUP, OFFSETS_PARTITIONS), 1)
    await server.start()
    network = ChannelPool(
        channel_options(
            client_id="unit",
            send_bytes_max=1 << 20,
            receive_bytes_max=1 << 20,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=200,
        )
    )
    try:
        yield Served(f"127.0.0.1:{port}", manager, storage, network)
    finally:
        await network.close()
        await server.stop(None)
        await manager.close()


class Member:
    """A ConsumerCoordinator with the metadata cache it needs, its tasks owned here."""

    def __init__(self, served: Served, **settings: object) -> None:
        defaults: dict[str, object] = {
            "bootstrap.servers": served.storage.address,
            "group.id": GROUP,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 100,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "request.timeout.ms": 5000,
            "fetch.max.wait.ms": 100,
        }
        defaults.update({name.replace("_", "."): value for name, value in settings.items()})
        self.config = consumer_config(defaults)
        loop = asyncio.get_running_loop()
        self.notifier = Notifier()
        self.metadata = Metadata(
            bootstrap_servers=self.config.bootstrap_servers,
            network=served.network,
            notifier=self.notifier,
            wakeup=Wakeup(loop),
            backoff=self.config.retry_backoff,
            request_timeout_ms=self.config.request_timeout_ms,
            max_age_ms=self.config.metadata_max_age_ms,
        )
        wakeup = Wakeup(loop)
        self.metadata.add_listener(wakeup)

        async def locate() -> list[str]:
            return [served.address]

        self.group = ConsumerCoordinator(
            group_id=GROUP,
            group_instance_id=self.config.group_instance_id,
            config=self.config,
            metadata=self.metadata,
            network=served.network,
            notifier=self.notifier,
            wakeup=wakeup,
            locator=locate,
            assignors=self.config.partition_assignment_strategy,
            session_timeout_ms=self.config.session_timeout_ms,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            max_poll_interval_ms=self.config.max_poll_interval_ms,
        )
        self.tasks = [asyncio.create_task(self.metadata.run())]

    def heartbeat(self) -> None:
        self.tasks.append(asyncio.create_task(self.group.run()))

    async def join(self) -> list[TopicPartition]:
        return await self.group.join(time.monotonic() + JOIN_TIMEOUT_S)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def run(
    storage: RunningDouble, scenario: Callable[[Served, AsyncExitStack], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            served = await stack.enter_async_context(serving(storage))
            await scenario(served, stack)

    asyncio.run(asyncio.wait_for(main(), SCENARIO_TIMEOUT_S))


async def _member(stack: AsyncExitStack, served: Served, **settings: object) -> Member:
    member = Member(served, **settings)
    stack.push_async_callback(member.close)
    return member


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_a_lone_member_joins_with_the_id_the_coordinator_requires_and_gets_everything(
    double: RunningDouble,
) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        member = await _member(stack, served)
        member.group.subscribe(["events"])
        assert await member.join() == EVENTS
        # The coordinator answered the empty member id with MEMBER_ID_REQUIRED and an id;
        # the member joined with that id, so the group has exactly it.
        group = served.manager.group(GROUP)
        assert group is not None
        assert list(group.members) == [member.group.member_id]
        assert member.group.generation_id == 1
        assert member.group.is_leader

    run(double, scenario)


def test_heartbeat_reports_a_rebalance_and_rejoining_splits_the_partitions(
    double: RunningDouble,
) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        first = await _member(stack, served)
        second = await _member(stack, served)
        for m in (first, second):
            m.group.subscribe(["events"])
        await first.join()
        first.heartbeat()
        joining = asyncio.create_task(second.join())
        await _until(lambda: first.group.rejoin_needed, "the heartbeat to ask for a rejoin")
        mine, theirs = await asyncio.gather(first.join(), joining)
        assert sorted(mine + theirs) == EVENTS
        assert not set(mine) & set(theirs)
        assert first.group.generation_id == second.group.generation_id == 2

    run(double, scenario)


def test_commit_from_a_member_the_group_dropped_is_commit_failed(double: RunningDouble) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        # No heartbeats: the session (the coordinator's minimum, 100 ms) expires.
        member = await _member(stack, served, session_timeout_ms=200, heartbeat_interval_ms=100)
        member.group.subscribe(["events"])
        await member.join()
        await asyncio.sleep(0.5)
        with pytest.raises(CommitFailedError, match="UNKNOWN_MEMBER_ID"):
            await member.group.commit(
                {EVENTS[0]: OffsetAndMetadata(3)}, time.monotonic() + 5, group_managed=True
            )
        assert member.group.rejoin_needed
        assert member.group.member_id == ""
        committed = await member.group.fetch_committed(EVENTS, time.monotonic() + 5)
        assert committed == dict.fromkeys(EVENTS)

    run(double, scenario)


def test_committed_offsets_are_fetched_back_with_their_metadata(double: RunningDouble) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        member = await _member(stack, served)
        member.group.subscribe(["events"])
        await member.join()
        await member.group.commit(
            {EVENTS[0]: OffsetAndMetadata(5, "processed up to 4")},
            time.monotonic() + 5,
            group_managed=True,
        )
        committed = await member.group.fetch_committed(EVENTS, time.monotonic() + 5)
        assert committed[EVENTS[0]] == OffsetAndMetadata(5, "processed up to 4")
        assert committed[EVENTS[1]] is None

    run(double, scenario)


def test_a_static_member_replaced_by_another_process_is_fenced(double: RunningDouble) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        old = await _member(stack, served, group_instance_id="worker-1")
        new = await _member(stack, served, group_instance_id="worker-1")
        for m in (old, new):
            m.group.subscribe(["events"])
        await old.join()
        old.heartbeat()
        assert await new.join() == EVENTS
        await _until(lambda: old.group.fatal_error is not None, "the old member to be fenced")
        assert isinstance(old.group.fatal_error, FencedInstanceIdError)
        with pytest.raises(FencedInstanceIdError):
            await old.join()

    run(double, scenario)


def test_join_waits_out_a_coordinator_that_is_still_loading(double: RunningDouble) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            served = await stack.enter_async_context(serving(double, load=False))
            member = await _member(stack, served)
            member.group.subscribe(["events"])
            partition = offsets_partition_for(GROUP, OFFSETS_PARTITIONS)
            asyncio.get_running_loop().call_later(
                0.3, lambda: asyncio.ensure_future(served.manager.load_partition(partition, 1))
            )
            started = time.monotonic()
            assert await member.join() == EVENTS
            assert time.monotonic() - started >= 0.3

    asyncio.run(asyncio.wait_for(main(), SCENARIO_TIMEOUT_S))


def test_a_member_that_stops_polling_leaves_the_group(double: RunningDouble) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        member = await _member(stack, served, max_poll_interval_ms=300)
        member.group.subscribe(["events"])
        await member.join()
        member.heartbeat()
        await _until(lambda: member.group.member_id == "", "the member to leave")
        assert member.group.rejoin_needed
        group = served.manager.group(GROUP)
        assert group is not None and not group.members

    run(double, scenario)


def test_the_leader_rejoins_when_a_subscribed_topic_gains_partitions(
    double: RunningDouble,
) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        member = await _member(stack, served, metadata_max_age_ms=100)
        member.group.subscribe(["events"])
        assert await member.join() == EVENTS
        member.heartbeat()
        double.call(lambda: double.double.partitions.__setitem__(("events", 3), PartitionData()))
        await _until(lambda: member.group.rejoin_needed, "the leader to notice the new partition")
        assert await member.join() == [*EVENTS, TopicPartition("events", 3)]

    run(double, scenario)


def test_the_leader_rejoins_when_a_subscribed_topic_is_created(double: RunningDouble) -> None:
    async def scenario(served: Served, stack: AsyncExitStack) -> None:
        member = await _member(stack, served, metadata_max_age_ms=100)
        member.group.subscribe(["later"])
        assert await member.join() == []
        member.heartbeat()
        double.call(lambda: double.double.partitions.__setitem__(("later", 0), PartitionData()))
        await _until(lambda: member.group.rejoin_needed, "the leader to notice the new topic")
        assert await member.join() == [TopicPartition("later", 0)]

    run(double, scenario)
