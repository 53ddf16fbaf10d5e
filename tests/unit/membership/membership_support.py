"""An in-process controller quorum the membership tests script, and helpers around it.

``FakeQuorum`` holds the state every ``FakeController`` of the quorum shares: which one leads,
the controller epoch, the registered nodes and a metadata log (offset = position in the list,
as the real controllers number records). Each ``FakeController`` is a real grpc.aio server on
a free loopback port serving ControllerService and AdminService.DescribeCluster, so the code
under test talks gRPC exactly as it does to real controllers. The controllers' rules are the
real ones in small (a follower answers writes NOT_CONTROLLER with a hint; a node registers
fenced, is unfenced once its heartbeat reports its registration offset; want_shut_down moves
its leaderships away), and every part of them can be overridden by a test: errors to answer
first, a controller that stops answering, a stale epoch on a stream, a node kept fenced.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from brook.config import Listener
from brook.errors import ErrorCode
from brook.membership import (
    AppliedMetadataOffset,
    BrokerLease,
    BrokerLifecycleManager,
    ControllerClient,
    ControllerClientSettings,
    LifecycleSettings,
)
from brook.ports import allocate_free_ports
from brook.rpc.backoff import RetryBackoff
from brook.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    metadata_pb2,
)

T = TypeVar("T")

SCENARIO_TIMEOUT_S = 30.0
WAIT_TIMEOUT_S = 10.0
POLL_S = 0.01
CLUSTER_ID = "FakeClusterId000000000"
NODE_ID = 1
OTHER_NODE_ID = 2
# Fast enough for unit tests, slow enough for a loaded two-core machine.
HEARTBEAT_INTERVAL_MS = 50
SESSION_TIMEOUT_MS = 600
REQUEST_TIMEOUT_MS = 2000
BACKOFF = RetryBackoff(10, 50)


def run(scenario: Callable[[], Awaitable[T]], timeout_s: float = SCENARIO_TIMEOUT_S) -> T:
    """Run an async scenario with a bound, so a hang fails the test instead of the suite."""

    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout_s)

    return asyncio.run(bounded())


def free_port() -> int:
    return allocate_free_ports(1)[0]


async def eventually(
    check: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S
) -> None:
    """Wait until ``check()`` holds; AssertionError naming ``what`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(POLL_S)


def partition_record(
    topic: str,
    partition: int,
    leader: int,
    *,
    leader_epoch: int = 0,
    replicas: tuple[int, ...] = (),
) -> metadata_pb2.MetadataRecord:
    replicas = replicas or (leader,)
    return metadata_pb2.MetadataRecord(
        partition=metadata_pb2.PartitionRecord(
            topic_id=topic_id(topic),
            topic=topic,
            partition=partition,
            replicas=replicas,
            isr=replicas,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=leader_epoch,
        )
    )


def topic_id(topic: str) -> bytes:
    return topic.encode().ljust(16, b"-")[:16]


def topic_record(topic: str) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        topic=metadata_pb2.TopicRecord(name=topic, topic_id=topic_id(topic))
    )


@dataclass
class Call:
    controller_id: int
    method: str
    request: Any


@dataclass
class FakeQuorum:
    """What all fake controllers share; tests read and change it directly."""

    leader_id: int = 1001
    epoch: int = 1
    records: list[metadata_pb2.MetadataRecord] = field(default_factory=list)
    brokers: dict[int, metadata_pb2.BrokerRecord] = field(default_factory=dict)
    registration_offsets: dict[int, int] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    # Scripted answers: popped one per request of that kind, before the normal rules.
    register_errors: list[ErrorCode] = field(default_factory=list)
    heartbeat_errors: list[ErrorCode] = field(default_factory=list)
    # A node id in here stays fenced whatever its heartbeats say.
    keep_fenced: set[int] = field(default_factory=set)
    # Controllers (ids) that abort every write with UNAVAILABLE, as if gone.
    unreachable: set[int] = field(default_factory=set)
    # Controllers (ids) that take writes but never answer, as if stopped (SIGSTOP).
    hanging: set[int] = field(default_factory=set)
    # Whether a follower's NOT_CONTROLLER names the leader.
    hints: bool = True
    grant_shutdown: bool = True
    controllers: dict[int, FakeController] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        if not self.records:
            self.records.append(
                metadata_pb2.MetadataRecord(
                    cluster=metadata_pb2.ClusterRecord(cluster_id=CLUSTER_ID)
                )
            )

    @property
    def offset(self) -> int:
        return len(self.records) - 1

    def append(self, *records: metadata_pb2.MetadataRecord) -> int:
        """Commit ``records`` (applied to the brokers table too); returns the new offset."""
        for record in records:
            if record.WhichOneof("record") == "broker":
                self.brokers[record.broker.node_id] = record.broker
            self.records.append(record)
        self.wake()
        return self.offset

    def wake(self) -> None:
        """Make every open WatchMetadata stream look again."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def calls_of(self, method: str) -> list[Any]:
        return [call.request for call in self.calls if call.method == method]

    def partitions(self) -> dict[tuple[str, int], metadata_pb2.PartitionRecord]:
        latest: dict[tuple[str, int], metadata_pb2.PartitionRecord] = {}
        for record in self.records:
            if record.WhichOneof("record") == "partition":
                latest[(record.partition.topic, record.partition.partition)] = record.partition
        return latest

    def move_leaderships_away(self, node_id: int) -> None:
        moved = []
        for partition in self.partitions().values():
            if partition.leader != node_id:
                continue
            others = [r for r in partition.replicas if r != node_id]
            updated = metadata_pb2.PartitionRecord()
            updated.CopyFrom(partition)
            updated.leader = others[0] if others else -1
            updated.leader_epoch += 1
            updated.partition_epoch += 1
            moved.append(metadata_pb2.MetadataRecord(partition=updated))
        if moved:
            self.append(*moved)

    def set_fenced(self, node_id: int, fenced: bool, **changes: bool) -> int:
        broker = metadata_pb2.BrokerRecord()
        broker.CopyFrom(self.brokers[node_id])
        broker.fenced = fenced
        for name, value in changes.items():
            setattr(broker, name, value)
        return self.append(metadata_pb2.MetadataRecord(broker=broker))

    def hint(self) -> common_pb2.NodeHint:
        leader = self.controllers.get(self.leader_id)
        if not self.hints or leader is None:
            return common_pb2.NodeHint(node_id=-1)
        host, port = leader.address.rsplit(":", 1)
        return common_pb2.NodeHint(
            node_id=self.leader_id,
            endpoints=[common_pb2.Endpoint(listener="GRPC", host=host, port=int(port))],
        )


class FakeController(
    controller_pb2_grpc.ControllerServiceServicer, admin_pb2_grpc.AdminServiceServicer
):
    def __init__(self, quorum: FakeQuorum, node_id: int) -> None:
        self.quorum = quorum
        self.node_id = node_id
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Stamped on this controller's WatchMetadata messages; None: the quorum's epoch.
        self.watch_epoch: int | None = None
        # A lagging controller: it has applied the log up to here only (None: all of it).
        self.max_offset: int | None = None
        # A controller that no longer holds the log after any offset: a snapshot first, always.
        self.always_snapshot = False
        self.watch_requests: list[controller_pb2.WatchMetadataRequest] = []
        self.server: Any = None
        quorum.controllers[node_id] = self

    async def start(self) -> None:
        self.server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        admin_pb2_grpc.add_AdminServiceServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        self.server.add_insecure_port(self.address)
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
            self.server = None

    async def _write_check(self, method: str, request: Any, context: Any) -> bool:
        """Records the call; False (after answering for the caller) if this controller does
        not take writes now."""
        quorum = self.quorum
        quorum.calls.append(Call(self.node_id, method, request))
        if self.node_id in quorum.unreachable:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "controller unreachable (scripted)")
        if self.node_id in quorum.hanging:
            await asyncio.sleep(SCENARIO_TIMEOUT_S)
        return quorum.leader_id == self.node_id

    async def RegisterBroker(
        self, request: controller_pb2.RegisterBrokerRequest, context: Any
    ) -> controller_pb2.RegisterBrokerResponse:
        quorum = self.quorum
        if not await self._write_check("RegisterBroker", request, context):
            return controller_pb2.RegisterBrokerResponse(
                error_code=ErrorCode.NOT_CONTROLLER,  # type: ignore[arg-type]
                controller=quorum.hint(),
            )
        if quorum.register_errors:
            return controller_pb2.RegisterBrokerResponse(
                error_code=quorum.register_errors.pop(0),  # type: ignore[arg-type]
                error_message="scripted",
            )
        if request.cluster_id and request.cluster_id != CLUSTER_ID:
            return controller_pb2.RegisterBrokerResponse(
                error_code=ErrorCode.INCONSISTENT_CLUSTER_ID,  # type: ignore[arg-type]
                error_message=f"this is cluster {CLUSTER_ID}",
            )
        existing = quorum.brokers.get(request.node_id)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            return controller_pb2.RegisterBrokerResponse(
                broker_epoch=existing.broker_epoch, cluster_id=CLUSTER_ID
            )
        epoch = quorum.offset + 1
        record = metadata_pb2.BrokerRecord(
            node_id=request.node_id,
            broker_epoch=epoch,
            incarnation_id=request.incarnation_id,
            role=request.role,
            endpoints=request.endpoints,
            rack=request.rack,
            fenced=True,
        )
        quorum.registration_offsets[request.node_id] = quorum.append(
            metadata_pb2.MetadataRecord(broker=record)
        )
        return controller_pb2.RegisterBrokerResponse(broker_epoch=epoch, cluster_id=CLUSTER_ID)

    async def BrokerHeartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, context: Any
    ) -> controller_pb2.BrokerHeartbeatResponse:
        quorum = self.quorum
        response = controller_pb2.BrokerHeartbeatResponse(controller_epoch=quorum.epoch)
        if not await self._write_check("BrokerHeartbeat", request, context):
            response.error_code = ErrorCode.NOT_CONTROLLER  # type: ignore[assignment]
            response.controller.CopyFrom(quorum.hint())
            return response
        if quorum.heartbeat_errors:
            response.error_code = quorum.heartbeat_errors.pop(0)  # type: ignore[assignment]
            return response
        broker = quorum.brokers.get(request.node_id)
        if broker is None:
            response.error_code = ErrorCode.BROKER_ID_NOT_REGISTERED  # type: ignore[assignment]
            return response
        if broker.broker_epoch != request.broker_epoch:
            response.error_code = ErrorCode.STALE_BROKER_EPOCH  # type: ignore[assignment]
            return response
        caught_up = request.current_metadata_offset >= quorum.registration_offsets[request.node_id]
        if request.want_shut_down and not broker.in_controlled_shutdown:
            quorum.set_fenced(request.node_id, broker.fenced, in_controlled_shutdown=True)
            if quorum.grant_shutdown:
                quorum.move_leaderships_away(request.node_id)
        elif broker.fenced and caught_up and request.node_id not in quorum.keep_fenced:
            quorum.set_fenced(request.node_id, False)
        broker = quorum.brokers[request.node_id]
        response.is_caught_up = caught_up
        response.is_fenced = broker.fenced
        response.lease_ms = SESSION_TIMEOUT_MS
        response.should_shut_down = broker.in_controlled_shutdown and all(
            p.leader != request.node_id for p in quorum.partitions().values()
        )
        return response

    async def DescribeCluster(
        self, request: admin_pb2.DescribeClusterRequest, context: Any
    ) -> admin_pb2.DescribeClusterResponse:
        quorum = self.quorum
        return admin_pb2.DescribeClusterResponse(
            cluster_id=CLUSTER_ID,
            controller_id=quorum.leader_id,
            controller_epoch=quorum.epoch,
            nodes=[
                admin_pb2.NodeDescription(
                    node_id=b.node_id,
                    role=b.role,
                    endpoints=b.endpoints,
                    fenced=b.fenced,
                    broker_epoch=b.broker_epoch,
                )
                for b in quorum.brokers.values()
            ],
            metadata_offset=quorum.offset,
        )

    async def WatchMetadata(
        self, request: controller_pb2.WatchMetadataRequest, context: Any
    ) -> AsyncIterator[controller_pb2.WatchMetadataResponse]:
        self.watch_requests.append(request)
        quorum = self.quorum
        position = request.after_offset

        def epoch() -> int:
            return self.watch_epoch if self.watch_epoch is not None else quorum.epoch

        def visible() -> int:
            return quorum.offset if self.max_offset is None else min(quorum.offset, self.max_offset)

        if position < 0 or self.always_snapshot:
            position = visible()
            yield controller_pb2.WatchMetadataResponse(
                snapshot=True,
                offset=position,
                controller_epoch=epoch(),
                records=quorum.records[: position + 1],
            )
        while True:
            changed = quorum.changed
            if position < visible():
                end = visible()
                records = quorum.records[position + 1 : end + 1]
                position = end
                yield controller_pb2.WatchMetadataResponse(
                    offset=position, controller_epoch=epoch(), records=records
                )
                continue
            await changed.wait()


@asynccontextmanager
async def running_quorum(controllers: int = 3) -> AsyncIterator[FakeQuorum]:
    """``controllers`` fake controllers (ids 1001..), the first leading; stopped on exit."""
    quorum = FakeQuorum()
    started = [FakeController(quorum, 1001 + i) for i in range(controllers)]
    try:
        for controller in started:
            await controller.start()
        yield quorum
    finally:
        for controller in started:
            await controller.stop()


def client_for(quorum: FakeQuorum, *addresses: str) -> ControllerClient:
    """A client bootstrapped with ``addresses`` (every fake controller's by default)."""
    return ControllerClient(
        ControllerClientSettings(
            bootstrap_servers=addresses or tuple(c.address for c in quorum.controllers.values()),
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            retry_backoff=BACKOFF,
        )
    )


def lifecycle_settings(node_id: int = NODE_ID, port: int = 9101) -> LifecycleSettings:
    return LifecycleSettings(
        node_id=node_id,
        role=common_pb2.NODE_ROLE_STORAGE_NODE,
        endpoints=(Listener("GRPC", "127.0.0.1", port),),
        rack="rack-a",
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        retry_backoff=BACKOFF,
    )


class RecordingListener:
    """A LeaseListener that remembers what it was told."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_lease_acquired(self) -> None:
        self.events.append("acquired")

    def on_lease_lost(self, reason: str) -> None:
        self.events.append(f"lost: {reason}")


@dataclass
class Member:
    """A lifecycle manager wired as a process wires it, with its heartbeat task."""

    client: ControllerClient
    lifecycle: BrokerLifecycleManager
    applied: AppliedMetadataOffset
    lease: BrokerLease
    listener: RecordingListener
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start_heartbeats(self) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(self.lifecycle.run()))

    def follow(self, quorum: FakeQuorum) -> asyncio.Task[None]:
        """Apply the quorum's log as it grows, as a process's metadata follower does (until
        the task returned is cancelled)."""

        async def apply() -> None:
            while True:
                changed = quorum.changed
                self.applied.advance(quorum.offset)
                await changed.wait()

        task = asyncio.get_running_loop().create_task(apply())
        self.tasks.append(task)
        return task


def make_member(quorum: FakeQuorum, node_id: int = NODE_ID) -> Member:
    client = client_for(quorum)
    applied = AppliedMetadataOffset()
    lease = BrokerLease()
    listener = RecordingListener()
    lifecycle = BrokerLifecycleManager(
        client,
        lifecycle_settings(node_id),
        applied=applied,
        lease=lease,
        meta=None,
        listener=listener,
    )
    return Member(client, lifecycle, applied, lease, listener)


@asynccontextmanager
async def member_of(quorum: FakeQuorum, node_id: int = NODE_ID) -> AsyncIterator[Member]:
    """A member, its heartbeat task cancelled and its client closed on exit."""
    member = make_member(quorum, node_id)
    try:
        yield member
    finally:
        for task in member.tasks:
            task.cancel()
        await asyncio.gather(*member.tasks, return_exceptions=True)
        await member.client.close()
