"""The data and admin APIs in the versions current clients send, against the compatibility
suite's real cluster (conftest.py: two storage nodes, two gateways).

Two kinds of checks per raised API: the handler's answer in each served version, through raw
requests (fields that exist only in some versions, Kafka's per-version meaning); and a real
client negotiating the new version end to end. Which version librdkafka sends is read from its
own protocol debug log ("Sent ProduceRequest (v10, ..."), kafka-python's from its negotiated
broker version data.

The KIP-951 leader hints (Produce v10, Fetch v12) need a request to reach a storage node that
does not lead the partition: an in-process gateway whose metadata names the wrong node does
that, as a real gateway with stale metadata would.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final

import grpc
import pytest
from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import Dispatcher
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.data_apis import data_handlers
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.server import KafkaServer, ServerLimits
from brook_gateway.upstream import Upstreams
from test_gateway_fuzz import KafkaGateways, kafka_gateways, kafka_request

from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.record import BatchBuilder
from brook.v1 import common_pb2, metadata_pb2, storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

TIMEOUT_S: Final = 30.0
CLIENT_TIMEOUT_MS: Final = 30_000
GATEWAY_NODE_ID: Final = 4001
LIMITS: Final = ServerLimits(
    request_bytes_max=1 << 20,
    connections_max=4,
    in_flight_per_connection_max=4,
    idle_timeout_ms=60_000,
    request_timeout_ms=CLIENT_TIMEOUT_MS,
)
RECORDS: Final = 5


@pytest.fixture(scope="module")
def gateways(compat_cluster: LocalCluster) -> KafkaGateways:
    return kafka_gateways(compat_cluster)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _batch(value: bytes = b"value") -> bytes:
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), b"key", value)
    return builder.build()


def _produce_body(topic: str, records: bytes, acks: int = -1) -> Message:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": CLIENT_TIMEOUT_MS,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }


# -- librdkafka's own account of the versions it sends ----------------------------------------


class _Lines(logging.Handler):
    """The lines a confluent-kafka client logs through `logger` (pass it as `logger=`)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"librdkafka-{uuid.uuid4().hex[:8]}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def librdkafka_log() -> Iterator[_Lines]:
    lines = _Lines()
    lines.logger.addHandler(lines)
    try:
        yield lines
    finally:
        lines.logger.removeHandler(lines)


def versions_sent(lines: _Lines, request: str) -> set[int]:
    """The versions of `request` (e.g. "Produce") librdkafka logged as sent."""
    pattern = re.compile(rf"Sent {request}Request \(v(\d+),")
    return {int(m.group(1)) for line in lines.lines for m in pattern.finditer(line)}


# -- an in-process gateway whose metadata names the wrong leader ------------------------------


def _storage_nodes(cluster: LocalCluster) -> dict[int, int]:
    """storage node id -> its gRPC port."""
    return {
        cluster.spec(name).node_id: cluster.spec(name).ports["GRPC"]
        for name in cluster.names(Role.STORAGE_NODE)
    }


async def _leader(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    """(storage node id, leader epoch) of partition 0 of `topic`, from a storage node."""
    port = next(iter(_storage_nodes(cluster).values()))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        response = await stub.GetMetadata(storage_pb2.GetMetadataRequest(topics=[topic]))
    (state,) = response.topics
    (partition,) = [p for p in state.partitions if p.partition == 0]
    return partition.leader_id, partition.leader_epoch


def _misrouting_image(cluster: LocalCluster, topic: str, wrong_leader: int) -> ClusterImage:
    records = [
        metadata_pb2.MetadataRecord(
            broker=metadata_pb2.BrokerRecord(
                node_id=GATEWAY_NODE_ID,
                role=common_pb2.NODE_ROLE_GATEWAY,
                endpoints=[common_pb2.Endpoint(listener="PLAINTEXT", host="127.0.0.1", port=1)],
            )
        )
    ]
    for node_id, port in _storage_nodes(cluster).items():
        records.append(
            metadata_pb2.MetadataRecord(
                broker=metadata_pb2.BrokerRecord(
                    node_id=node_id,
                    role=common_pb2.NODE_ROLE_STORAGE_NODE,
                    endpoints=[common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=port)],
                )
            )
        )
    records += [
        metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name=topic)),
        metadata_pb2.MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                topic=topic,
                partition=0,
                replicas=[wrong_leader],
                isr=[wrong_leader],
                leader=wrong_leader,
            )
        ),
    ]
    image = ClusterImage()
    image.apply(True, 1, records)
    return image


@asynccontextmanager
async def misrouting_gateway(cluster: LocalCluster, topic: str) -> AsyncIterator[tuple[str, int]]:
    """The Kafka address of an in-process gateway that sends partition 0 of `topic` to a
    storage node that does not lead it."""
    leader, _ = await _leader(cluster, topic)
    wrong = next(n for n in _storage_nodes(cluster) if n != leader)
    upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=CLIENT_TIMEOUT_MS)
    backend = Backend(
        node_id=GATEWAY_NODE_ID,
        image=_misrouting_image(cluster, topic, wrong),
        upstreams=upstreams,
        controllers=(),
    )
    dispatcher = Dispatcher()
    dispatcher.register(api_versions_handler(dispatcher))
    for handler in data_handlers(backend):
        dispatcher.register(handler)
    server = KafkaServer(dispatcher, LIMITS, "127.0.0.1", 0)
    await server.start()
    try:
        yield ("127.0.0.1", server.port)
    finally:
        await server.stop()
        await upstreams.close()


async def _call(address: tuple[str, int], api: ApiKey, version: int, body: Message) -> Message:
    """One raw request, on a thread: the gateway answering it runs on this event loop."""
    return await asyncio.to_thread(kafka_request, address, api, version, body, TIMEOUT_S)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {TIMEOUT_S} s"
        time.sleep(0.05)


# -- InitProducerId ---------------------------------------------------------------------------


def _init_producer_id(gateways: KafkaGateways, version: int, pid: int, epoch: int) -> Message:
    return kafka_request(
        gateways.address,
        ApiKey.INIT_PRODUCER_ID,
        version,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60_000,
            "producer_id": pid,
            "producer_epoch": epoch,
        },
        TIMEOUT_S,
    )


@pytest.mark.parametrize("version", range(5))
def test_init_producer_id_hands_out_a_new_id_in_every_version(
    gateways: KafkaGateways, version: int
) -> None:
    first = _init_producer_id(gateways, version, -1, -1)
    second = _init_producer_id(gateways, version, -1, -1)
    for answer in (first, second):
        assert answer["error_code"] == ErrorCode.NONE, answer
        assert answer["producer_id"] >= 0 and answer["producer_epoch"] == 0
    assert first["producer_id"] != second["producer_id"]


@pytest.mark.parametrize("version", [3, 4])
def test_init_producer_id_v3_and_later_bump_the_epoch_of_the_producer_named(
    gateways: KafkaGateways, version: int
) -> None:
    """KIP-360: what kafka-python asks for (with v3+) after a sequence error."""
    fresh = _init_producer_id(gateways, version, -1, -1)
    bumped = _init_producer_id(gateways, version, fresh["producer_id"], fresh["producer_epoch"])
    assert bumped == {**fresh, "producer_epoch": fresh["producer_epoch"] + 1}
