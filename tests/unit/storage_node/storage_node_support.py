"""Helpers for the storage node tests: metadata records, batches, and a node served in-process.

``running_node`` runs the real storage node service (brook.server.serve with the node's own
SPEC) on a free loopback port inside the test's event loop, with its data in a temp dir,
and yields a grpc.aio stub. A ``QueueMetadataSource`` stands where the controller's
WatchMetadata stream will: the test pushes metadata updates and the node applies them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from brook_storage_node.app import SPEC, StorageNode
from brook_storage_node.config import CONFIG_DEF
from brook_storage_node.log import LogManager, LogManagerConfig
from brook_storage_node.metadata_view import MetadataView
from brook_storage_node.replica_manager import ReplicaManager
from brook_storage_node.topic_settings import TopicDefaults, TopicSettings
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brook.config import Config, RawSetting
from brook.metadata.delta import MetadataUpdate
from brook.record import build_batch
from brook.server import EXIT_OK, serve
from brook.v1 import common_pb2, metadata_pb2, storage_pb2, storage_pb2_grpc

T = TypeVar("T")

NODE_ID = 1
OTHER_NODE_ID = 2
SCENARIO_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
RPC_TIMEOUT_S = 10.0
READY_POLL_S = 0.02
BASE_TIMESTAMP_MS = 1_700_000_000_000


def run(scenario: Callable[[], Awaitable[T]], timeout_s: float = SCENARIO_TIMEOUT_S) -> T:
    """Run an async scenario with a bound, so a hang fails the test instead of the suite."""

    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout_s)

    return asyncio.run(bounded())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def records(
    count: int, *, prefix: str = "r", timestamp_ms: int = BASE_TIMESTAMP_MS
) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes | None]]]]:
    return [
        (
            timestamp_ms + i,
            f"{prefix}-key-{i}".encode(),
            f"{prefix}-value-{i}".encode(),
            [("n", str(i).encode())],
        )
        for i in range(count)
    ]


def batch(count: int = 3, *, prefix: str = "r", timestamp_ms: int = BASE_TIMESTAMP_MS) -> bytes:
    return build_batch(records(count, prefix=prefix, timestamp_ms=timestamp_ms))


# -- metadata records -------------------------------------------------------------------------


def broker_record(node_id: int, port: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=common_pb2.NODE_ROLE_STORAGE_NODE,
            endpoints=[common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=port)],
        )
    )


def topic_record(name: str, topic_id: bytes | None = None) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        topic=metadata_pb2.TopicRecord(
            name=name, topic_id=topic_id or name.encode().ljust(16, b"-")
        )
    )


def partition_record(
    topic: str,
    partition: int,
    *,
    leader: int = NODE_ID,
    replicas: Sequence[int] = (NODE_ID,),
    isr: Sequence[int] | None = None,
    leader_epoch: int = 0,
    topic_id: bytes | None = None,
) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        partition=metadata_pb2.PartitionRecord(
            topic_id=topic_id or topic.encode().ljust(16, b"-"),
            topic=topic,
            partition=partition,
            replicas=list(replicas),
            isr=list(replicas if isr is None else isr),
            leader=leader,
            leader_epoch=leader_epoch,
        )
    )


def config_record(topic: str, name: str, value: str | None) -> metadata_pb2.MetadataRecord:
    record = metadata_pb2.ConfigRecord(
        resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC, resource_name=topic, name=name
    )
    if value is not None:
        record.value = value
    return metadata_pb2.MetadataRecord(config=record)


def snapshot(*records: metadata_pb2.MetadataRecord, offset: int = 0) -> MetadataUpdate:
    return MetadataUpdate(snapshot=True, offset=offset, records=records)


def delta(*records: metadata_pb2.MetadataRecord, offset: int) -> MetadataUpdate:
    return MetadataUpdate(snapshot=False, offset=offset, records=records)


async def open_replica_manager(
    data_dir: Path, settings: TopicSettings, *records: metadata_pb2.MetadataRecord
) -> tuple[ReplicaManager, LogManager]:
    """A ReplicaManager over real logs in ``data_dir``, its partitions made from ``records``
    (a metadata snapshot) with ``settings`` as every topic's defaults; close the LogManager."""
    view = MetadataView()
    view.apply(snapshot(*records))
    logs = await LogManager.open(LogManagerConfig(log_dirs=(data_dir,)))
    replicas = ReplicaManager(NODE_ID, logs, TopicDefaults(settings), view)
    await replicas.initialize()
    return replicas, logs


class QueueMetadataSource:
    """A metadata stream the test drives: the first snapshot, then whatever it pushes."""

    def __init__(self, first: MetadataUpdate) -> None:
        self.first = first
        self._queue: asyncio.Queue[tuple[MetadataUpdate, asyncio.Event]] = asyncio.Queue()

    async def push(self, update: MetadataUpdate) -> None:
        """Hand ``update`` to the node and return once it has applied it completely."""
        applied = asyncio.Event()
        await self._queue.put((update, applied))
        await asyncio.wait_for(applied.wait(), READY_TIMEOUT_S)

    async def updates(self) -> AsyncIterator[MetadataUpdate]:
        yield self.first
        while True:
            update, applied = await self._queue.get()
            yield update
            # The node asks for the next update only once it has acted on this one.
            applied.set()


# -- an in-process node -----------------------------------------------------------------------


def node_config(data_dir: Path, port: int, **settings: str) -> Config:
    raw = {
        "node.id": str(NODE_ID),
        "listeners": f"GRPC://127.0.0.1:{port}",
        "log.dirs": str(data_dir),
        "shutdown.timeout.ms": "2000",
        **settings,
    }
    return CONFIG_DEF.parse({name: RawSetting(value, "test") for name, value in raw.items()})


@dataclass
class Node:
    stub: storage_pb2_grpc.StorageServiceStub
    address: str
    port: int
    node: StorageNode
    stop: asyncio.Event
    served: asyncio.Task[int]


@asynccontextmanager
async def running_node(
    data_dir: Path,
    *,
    source_for: Callable[[int], QueueMetadataSource] | None = None,
    settings: dict[str, str] | None = None,
    port: int | None = None,
) -> AsyncIterator[Node]:
    """The storage node serving on a free port; stopped (and checked to exit 0) on exit.

    ``source_for(port)`` builds the metadata source (it may need the node's own port for
    its broker record); without one the node uses static.topics from ``settings``. ``port``:
    where to listen (default: a free one), for nodes that must know each other's addresses."""
    port = port if port is not None else free_port()
    config = node_config(data_dir, port, **(settings or {}))
    source = source_for(port) if source_for is not None else None
    created: list[StorageNode] = []

    def create(config: Config) -> StorageNode:
        created.append(StorageNode(config, source))
        return created[-1]

    spec = dataclasses.replace(SPEC, create=create)
    stop = asyncio.Event()
    served = asyncio.get_running_loop().create_task(serve(spec, config, stop=stop))
    address = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(address)
    try:
        await _wait_serving(channel, served)
        yield Node(
            storage_pb2_grpc.StorageServiceStub(channel), address, port, created[0], stop, served
        )
    finally:
        stop.set()
        exit_status = await asyncio.wait_for(served, STOP_TIMEOUT_S)
        await channel.close()
    assert exit_status == EXIT_OK


async def _wait_serving(channel: Any, served: asyncio.Task[int]) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while True:
        if served.done():
            raise AssertionError(f"the node exited during start-up: {served.result()}")
        try:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        assert loop.time() < deadline, "the node did not become SERVING"
        await asyncio.sleep(READY_POLL_S)


def produce_request(
    topic: str,
    partition: int,
    data: bytes,
    *,
    acks: int = storage_pb2.ACKS_ALL,
    timeout_ms: int = 0,
) -> storage_pb2.ProduceRequest:
    return storage_pb2.ProduceRequest(
        acks=acks,  # type: ignore[arg-type]
        timeout_ms=timeout_ms,
        partitions=[
            storage_pb2.PartitionProduceData(topic=topic, partition=partition, records=data)
        ],
    )


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 0,
    partition_max_bytes: int = 0,
    decode: bool = False,
) -> storage_pb2.FetchRequest:
    return storage_pb2.FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        decode_records=decode,
        partitions=[
            storage_pb2.FetchPartition(
                topic=topic,
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=partition_max_bytes,
                current_leader_epoch=-1,
            )
        ],
    )
