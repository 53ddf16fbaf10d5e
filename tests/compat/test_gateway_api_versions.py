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
from brook_gateway.server import KafkaListener, KafkaServer, ServerLimits
from brook_gateway.upstream import Upstreams
from test_gateway_fuzz import KafkaGateways, create_topic, kafka_gateways, kafka_request
from test_kafka_clients import PARTITIONS, RECORDS, confluent_produce

from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.record import BatchBuilder, scan_batches
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


@pytest.fixture(scope="module")
def gateways(compat_cluster: LocalCluster) -> KafkaGateways:
    return kafka_gateways(compat_cluster)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _batch(value: bytes = b"value", timestamp_ms: int | None = None) -> bytes:
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000) if timestamp_ms is None else timestamp_ms, b"key", value)
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
    server = KafkaServer(dispatcher, LIMITS, [KafkaListener("PLAINTEXT", "127.0.0.1", 0)])
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


def test_confluent_kafka_idempotent_producer_uses_init_producer_id_v4_and_produce_v10(
    gateways: KafkaGateways,
) -> None:
    topic = _topic("idempotent-v10")
    create_topic(gateways.address, topic, PARTITIONS, TIMEOUT_S)
    with librdkafka_log() as lines:
        offsets = confluent_produce(
            gateways.bootstrap,
            topic,
            {"enable.idempotence": True, "debug": "protocol"},
            logger=lines.logger,
        )
    assert sorted(offsets) == sorted(list(range(RECORDS // PARTITIONS)) * PARTITIONS)
    assert versions_sent(lines, "InitProducerId") == {4}
    assert versions_sent(lines, "Produce") == {10}


def test_kafka_python_negotiates_produce_v9_and_init_producer_id_v5(
    gateways: KafkaGateways,
) -> None:
    """kafka-python infers the broker release from the ranges: Produce 9 makes it at least 2.8
    (ListOffsets 7 makes it 3.0), which turns on its KIP-360 epoch bump, which needs
    InitProducerId 3+ (it sends 5, the highest served: v4's layout, TRANSACTION_ABORTABLE
    allowed)."""
    from kafka import KafkaProducer
    from kafka.protocol.producer.produce import ProduceRequest
    from kafka.protocol.producer.transaction import InitProducerIdRequest

    topic = _topic("kafka-python-v9")
    create_topic(gateways.address, topic, 1, TIMEOUT_S)
    producer = KafkaProducer(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        offsets = [
            producer.send(topic, value=b"v%d" % i, partition=0).get(TIMEOUT_S).offset
            for i in range(RECORDS)
        ]
        versions = producer._sender._client._manager.broker_version_data
        assert versions.broker_version >= (2, 8)
        # The version its Sender asks for (it caps Produce at 9).
        assert versions.api_version(ProduceRequest, max_version=9) == 9
        assert versions.api_version(InitProducerIdRequest, min_version=3) == 5
    finally:
        producer.close(timeout=TIMEOUT_S)
    assert offsets == list(range(RECORDS))


# -- Produce ------------------------------------------------------------------------------------

# What a client retries while a new partition reaches its storage node.
_NOT_YET: Final = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
)


def produce_once(
    gateways: KafkaGateways, version: int, topic: str, records: bytes | None = None
) -> Message:
    """The partition's answer to one batch, sent again (as a client would) while the storage
    node does not know the new partition yet, for at most TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    body = _produce_body(topic, _batch() if records is None else records)
    while True:
        response = kafka_request(gateways.address, ApiKey.PRODUCE, version, body, TIMEOUT_S)
        ((answer,),) = [t["partition_responses"] for t in response["responses"]]
        if answer["error_code"] not in _NOT_YET or time.monotonic() > deadline:
            assert response["node_endpoints"] == []
            return answer  # type: ignore[no-any-return]
        time.sleep(0.05)


@pytest.mark.parametrize("version", range(3, 11))
def test_produce_appends_in_every_served_version(gateways: KafkaGateways, version: int) -> None:
    topic = _topic(f"produce-v{version}")
    create_topic(gateways.address, topic, 1, TIMEOUT_S)
    for expected_offset in (0, 1):
        partition = produce_once(gateways, version, topic)
        assert partition["error_code"] == ErrorCode.NONE, partition
        assert partition["base_offset"] == expected_offset
        assert partition["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
        if version >= 5:
            assert partition["log_start_offset"] == 0


@pytest.mark.parametrize("version", [9, 10])
def test_produce_refused_by_a_node_not_leading_names_the_leader_from_v10(
    compat_cluster: LocalCluster, gateways: KafkaGateways, version: int
) -> None:
    topic = _produced(gateways, f"produce-hint-v{version}", 1)

    async def scenario() -> None:
        leader, epoch = await _leader(compat_cluster, topic)
        async with misrouting_gateway(compat_cluster, topic) as address:
            response = await _call(address, ApiKey.PRODUCE, version, _produce_body(topic, _batch()))
        ((partition,),) = [t["partition_responses"] for t in response["responses"]]
        assert partition["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER, partition
        if version < 10:
            assert partition["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
            assert response["node_endpoints"] == []
            return
        # The real leader, a listed broker, at the in-process gateway's metadata's only
        # gateway address.
        assert partition["current_leader"] == {"leader_id": leader, "leader_epoch": epoch}
        assert response["node_endpoints"] == [
            {"node_id": leader, "host": "127.0.0.1", "port": 1, "rack": None}
        ]

    run(scenario())


# -- Fetch --------------------------------------------------------------------------------------


def _fetch_body(topic: str, offset: int, last_fetched_epoch: int = -1) -> Message:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": offset,
                        "last_fetched_epoch": last_fetched_epoch,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _produced(
    gateways: KafkaGateways, prefix: str, count: int, timestamps_ms: list[int] | None = None
) -> str:
    """A new topic of one partition holding `count` records, one batch each (stamped with
    `timestamps_ms`, else the time of sending)."""
    topic = _topic(prefix)
    create_topic(gateways.address, topic, 1, TIMEOUT_S)
    for i in range(count):
        stamp = None if timestamps_ms is None else timestamps_ms[i]
        answer = produce_once(gateways, 10, topic, _batch(timestamp_ms=stamp))
        assert answer["error_code"] == ErrorCode.NONE, answer
    return topic


def _fetched(gateways: KafkaGateways, version: int, body: Message) -> Message:
    response = kafka_request(gateways.address, ApiKey.FETCH, version, body, TIMEOUT_S)
    ((partition,),) = [t["partitions"] for t in response["responses"]]
    return partition  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_reads_in_every_served_version(gateways: KafkaGateways, version: int) -> None:
    topic = _produced(gateways, f"fetch-v{version}", 3)
    partition = _fetched(gateways, version, _fetch_body(topic, 1))
    assert partition["error_code"] == ErrorCode.NONE, partition
    assert (partition["high_watermark"], partition["last_stable_offset"]) == (3, 3)
    offsets = [h.base_offset for _, h in scan_batches(partition["records"])]
    assert offsets == [1, 2]
    assert partition["diverging_epoch"] == {"epoch": -1, "end_offset": -1}


def test_fetch_v12_answers_a_diverging_last_fetched_epoch_without_records(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    topic = _produced(gateways, "fetch-diverging", 3)
    _, epoch = run(_leader(compat_cluster, topic))
    # The client's last batch is of the current epoch: nothing diverges.
    agreeing = _fetched(gateways, 12, _fetch_body(topic, 2, last_fetched_epoch=epoch))
    assert agreeing["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    assert [h.base_offset for _, h in scan_batches(agreeing["records"])] == [2]
    # A client that fetched beyond this log in its current epoch (from a leader whose log was
    # lost): the log parts at the epoch's end, where the client must truncate to.
    diverging = _fetched(gateways, 12, _fetch_body(topic, 5, last_fetched_epoch=epoch))
    assert diverging["error_code"] == ErrorCode.NONE, diverging
    assert diverging["diverging_epoch"] == {"epoch": epoch, "end_offset": 3}
    assert not diverging["records"]
    assert diverging["high_watermark"] == 3
    # An epoch this log does not know: Kafka's OFFSET_OUT_OF_RANGE.
    unknown = _fetched(gateways, 12, _fetch_body(topic, 2, last_fetched_epoch=epoch + 1))
    assert unknown["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE, unknown
    # Before v12 there is no such field: the same position reads on.
    older = _fetched(gateways, 11, _fetch_body(topic, 2, last_fetched_epoch=epoch + 1))
    assert [h.base_offset for _, h in scan_batches(older["records"])] == [2]


def test_fetch_refused_by_a_node_not_leading_names_the_leader_from_v12(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    topic = _produced(gateways, "fetch-hint", 1)

    async def scenario() -> None:
        leader, epoch = await _leader(compat_cluster, topic)
        async with misrouting_gateway(compat_cluster, topic) as address:
            answers = {
                version: await _call(address, ApiKey.FETCH, version, _fetch_body(topic, 0))
                for version in (11, 12)
            }
        for version, response in answers.items():
            ((partition,),) = [t["partitions"] for t in response["responses"]]
            assert partition["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER, partition
            expected = (
                {"leader_id": leader, "leader_epoch": epoch}
                if version >= 12
                else {"leader_id": -1, "leader_epoch": -1}
            )
            assert partition["current_leader"] == expected

    run(scenario())


def test_confluent_kafka_consumer_fetches_with_fetch_v12(gateways: KafkaGateways) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = _produced(gateways, "confluent-fetch-v12", 3)
    with librdkafka_log() as lines:
        consumer = Consumer(
            {
                "bootstrap.servers": gateways.bootstrap,
                "group.id": topic,
                "auto.offset.reset": "earliest",
                "debug": "protocol",
            },
            logger=lines.logger,
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            offsets: list[int] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(offsets) < 3:
                assert time.monotonic() < deadline, f"read only {offsets}"
                message = consumer.poll(0.5)
                if message is not None:
                    assert message.error() is None, message.error()
                    offsets.append(message.offset())
        finally:
            consumer.close()
    assert offsets == [0, 1, 2]
    assert versions_sent(lines, "Fetch") == {12}


# -- ListOffsets ----------------------------------------------------------------------------------

_LATEST: Final = -1
_EARLIEST: Final = -2
_MAX_TIMESTAMP: Final = -3


def _listed(
    gateways: KafkaGateways, version: int, topic: str, timestamp: int, leader_epoch: int = -1
) -> Message:
    response = kafka_request(
        gateways.address,
        ApiKey.LIST_OFFSETS,
        version,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "current_leader_epoch": leader_epoch,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        },
        TIMEOUT_S,
    )
    ((partition,),) = [t["partitions"] for t in response["topics"]]
    return partition  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", range(1, 8))
def test_list_offsets_answers_in_every_served_version(
    compat_cluster: LocalCluster, gateways: KafkaGateways, version: int
) -> None:
    stamps = [1_000_000, 5_000_000, 3_000_000]
    topic = _produced(gateways, f"list-offsets-v{version}", 3, stamps)
    _, epoch = run(_leader(compat_cluster, topic))
    # v4+ answer the epoch of the record found (v0-3 have no such field).
    epoch_of_record = epoch if version >= 4 else -1
    found = {
        spec: (answer["error_code"], answer["offset"], answer["timestamp"], answer["leader_epoch"])
        for spec in (_LATEST, _EARLIEST, 2_000_000, 6_000_000)
        for answer in [_listed(gateways, version, topic, spec)]
    }
    assert found == {
        _LATEST: (ErrorCode.NONE, 3, -1, epoch_of_record),
        _EARLIEST: (ErrorCode.NONE, 0, -1, epoch_of_record),
        # The first record stamped at or after the time asked.
        2_000_000: (ErrorCode.NONE, 1, 5_000_000, epoch_of_record),
        # After every record: no offset.
        6_000_000: (ErrorCode.NONE, -1, -1, -1),
    }


def test_list_offsets_v7_finds_the_record_with_the_largest_timestamp(
    gateways: KafkaGateways,
) -> None:
    """KIP-734: the offset of the record itself, not the log end, and the first of equals."""
    topic = _produced(gateways, "list-offsets-max", 4, [1_000_000, 5_000_000, 3_000_000, 5_000_000])
    answer = _listed(gateways, 7, topic, _MAX_TIMESTAMP)
    assert (answer["error_code"], answer["offset"], answer["timestamp"]) == (
        ErrorCode.NONE,
        1,
        5_000_000,
    )


def test_list_offsets_v4_checks_the_clients_leader_epoch(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    """A client whose metadata names a newer epoch than the leader's hears
    UNKNOWN_LEADER_EPOCH (it retries); the current epoch is served. An older one is fenced by
    the same check (tests/unit/storage_node: FENCED_LEADER_EPOCH), which a new topic, at
    epoch 0, cannot show here."""
    topic = _produced(gateways, "list-offsets-epoch", 1)
    _, epoch = run(_leader(compat_cluster, topic))
    current = _listed(gateways, 4, topic, _LATEST, leader_epoch=epoch)
    assert (current["error_code"], current["offset"]) == (ErrorCode.NONE, 1)
    newer = _listed(gateways, 4, topic, _LATEST, leader_epoch=epoch + 1)
    assert (newer["error_code"], newer["offset"]) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1)
    # v3 has no such field: the same request is served.
    older_version = _listed(gateways, 3, topic, _LATEST, leader_epoch=epoch + 1)
    assert (older_version["error_code"], older_version["offset"]) == (ErrorCode.NONE, 1)


def test_confluent_kafka_lists_offsets_with_list_offsets_v7(gateways: KafkaGateways) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = _produced(gateways, "confluent-list-offsets", 3, [1_000_000, 2_000_000, 3_000_000])
    with librdkafka_log() as lines:
        consumer = Consumer(
            {"bootstrap.servers": gateways.bootstrap, "group.id": topic, "debug": "protocol"},
            logger=lines.logger,
        )
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, 0), timeout=TIMEOUT_S, cached=False
            )
            (by_time,) = consumer.offsets_for_times(
                [TopicPartition(topic, 0, 1_500_000)], timeout=TIMEOUT_S
            )
        finally:
            consumer.close()
    assert (low, high, by_time.offset) == (0, 3, 1)
    assert versions_sent(lines, "ListOffsets") == {7}


def test_kafka_python_lists_offsets_with_list_offsets_v7_and_infers_kafka_3_3(
    gateways: KafkaGateways,
) -> None:
    """ListOffsets 7 in range makes kafka-python take the gateway for Kafka 3.0 at least, and
    DescribeAcls 3 (issue #21) for 3.3; the one behaviour that changes from what it does with
    older brokers is its default session timeout (45 s instead of 30 s, KIP-735, since 3.0),
    which the group coordinators accept (group.max.session.timeout.ms)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.protocol.consumer.offsets import ListOffsetsRequest

    topic = _produced(gateways, "kafka-python-list-offsets", 3, [1_000_000, 2_000_000, 3_000_000])
    consumer = KafkaConsumer(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        partition = TopicPartition(topic, 0)
        assert consumer.end_offsets([partition]) == {partition: 3}
        assert consumer.beginning_offsets([partition]) == {partition: 0}
        by_time = consumer.offsets_for_times({partition: 1_500_000})
        assert by_time[partition] is not None and by_time[partition].offset == 1
        versions = consumer._client._manager.broker_version_data
        assert versions.broker_version == (3, 3)
        assert versions.api_version(ListOffsetsRequest, min_version=1) == 7
        assert consumer.config["session_timeout_ms"] == 45_000
    finally:
        consumer.close()


# -- CreateTopics -----------------------------------------------------------------------------


def _create_topics(
    gateways: KafkaGateways, version: int, topic: str, validate_only: bool = False
) -> Message:
    response = kafka_request(
        gateways.address,
        ApiKey.CREATE_TOPICS,
        version,
        {
            "topics": [
                {
                    "name": topic,
                    # The cluster's defaults, in every version (CLIENTS.md).
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "3600000"}],
                }
            ],
            "timeout_ms": CLIENT_TIMEOUT_MS,
            "validate_only": validate_only,
        },
        TIMEOUT_S,
    )
    (answer,) = response["topics"]
    return answer  # type: ignore[no-any-return]


async def _topic_state(cluster: LocalCluster, topic: str) -> storage_pb2.TopicMetadata | None:
    """The topic as a storage node knows it, or None."""
    port = next(iter(_storage_nodes(cluster).values()))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        response = await stub.GetMetadata(storage_pb2.GetMetadataRequest(topics=[topic]))
    (state,) = response.topics
    return state if state.partitions else None


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_answers_what_it_created_from_v5_and_its_id_from_v7(
    compat_cluster: LocalCluster, gateways: KafkaGateways, version: int
) -> None:
    topic = _topic(f"create-v{version}")
    answer = _create_topics(gateways, version, topic)
    assert answer["error_code"] == ErrorCode.NONE, answer
    state = run(_topic_state(compat_cluster, topic))
    assert state is not None
    if version < 5:
        # Fields of later versions decode to their defaults.
        assert (answer["num_partitions"], answer["configs"]) == (-1, [])
        return
    assert answer["num_partitions"] == len(state.partitions)
    assert answer["replication_factor"] == len(state.partitions[0].replicas)
    configs = {c["name"]: c for c in answer["configs"]}
    assert configs["retention.ms"] == {
        "name": "retention.ms",
        "value": "3600000",
        "read_only": False,
        "config_source": 1,  # DYNAMIC_TOPIC_CONFIG: the override just given
        "is_sensitive": False,
    }
    assert configs["cleanup.policy"]["config_source"] == 5  # DEFAULT_CONFIG
    assert answer["topic_id"] == (state.topic_id if version >= 7 else bytes(16))


def test_create_topics_v5_validate_only_answers_what_would_be_created_and_creates_nothing(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    topic = _topic("create-validate")
    answer = _create_topics(gateways, 7, topic, validate_only=True)
    assert answer["error_code"] == ErrorCode.NONE, answer
    assert answer["num_partitions"] > 0 and answer["replication_factor"] > 0
    assert {c["name"]: c["value"] for c in answer["configs"]}["retention.ms"] == "3600000"
    assert run(_topic_state(compat_cluster, topic)) is None
    # The name is still free.
    assert _create_topics(gateways, 7, topic)["error_code"] == ErrorCode.NONE


def test_kafka_python_admin_creates_topics_with_create_topics_v7(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.protocol.admin.topics import CreateTopicsRequest

    topic = _topic("kafka-python-create")
    admin = KafkaAdminClient(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        # -1 partitions and replication factor: the cluster's defaults.
        admin.create_topics([NewTopic(topic, -1, -1)], timeout_ms=CLIENT_TIMEOUT_MS)
        versions = admin._manager.broker_version_data
        assert versions.api_version(CreateTopicsRequest) == 7
    finally:
        admin.close()
    assert run(_topic_state(compat_cluster, topic)) is not None


# -- DeleteTopics -----------------------------------------------------------------------------


def _delete_topics(gateways: KafkaGateways, version: int, targets: list[Message]) -> list[Message]:
    """`targets`: {"name": ..., "topic_id": ...}; v0-5 send the names."""
    response = kafka_request(
        gateways.address,
        ApiKey.DELETE_TOPICS,
        version,
        {
            "topics": targets,
            "topic_names": [t["name"] for t in targets],
            "timeout_ms": CLIENT_TIMEOUT_MS,
        },
        TIMEOUT_S,
    )
    return response["responses"]  # type: ignore[no-any-return]


def _eventually(check: Callable[[], bool]) -> bool:
    """Whether `check` comes true, polled for at most TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _gone(cluster: LocalCluster, topic: str) -> bool:
    """Whether the storage nodes drop `topic` within TIMEOUT_S."""
    return _eventually(lambda: run(_topic_state(cluster, topic)) is None)


def _created(cluster: LocalCluster, gateways: KafkaGateways, prefix: str) -> tuple[str, bytes]:
    """A new topic and its id."""
    topic = _topic(prefix)
    create_topic(gateways.address, topic, 1, TIMEOUT_S)
    state = run(_topic_state(cluster, topic))
    assert state is not None
    return topic, state.topic_id


@pytest.mark.parametrize("version", range(7))
def test_delete_topics_deletes_by_name_in_every_served_version(
    compat_cluster: LocalCluster, gateways: KafkaGateways, version: int
) -> None:
    topic, topic_id = _created(compat_cluster, gateways, f"delete-v{version}")
    missing = _topic("delete-missing")
    answers = _delete_topics(
        gateways,
        version,
        [{"name": topic, "topic_id": bytes(16)}, {"name": missing, "topic_id": bytes(16)}],
    )
    assert [(a["name"], a["error_code"]) for a in answers] == [
        (topic, ErrorCode.NONE),
        (missing, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    # v5+ explain an error; v6+ give the topic's id.
    assert (answers[1]["error_message"] is not None) == (version >= 5)
    assert answers[0]["topic_id"] == (topic_id if version >= 6 else bytes(16))
    assert _gone(compat_cluster, topic)


def test_delete_topics_v6_deletes_by_id_and_refuses_unknown_and_ambiguous_ids(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    topic, topic_id = _created(compat_cluster, gateways, "delete-by-id")
    other, other_id = _created(compat_cluster, gateways, "delete-kept")
    unknown_id = uuid.uuid4().bytes
    answers = _delete_topics(
        gateways,
        6,
        [
            {"name": None, "topic_id": topic_id},
            {"name": None, "topic_id": unknown_id},
            {"name": other, "topic_id": other_id},
            {"name": None, "topic_id": bytes(16)},
        ],
    )
    assert [(a["name"], a["topic_id"], a["error_code"]) for a in answers] == [
        (topic, topic_id, ErrorCode.NONE),
        (None, unknown_id, ErrorCode.UNKNOWN_TOPIC_ID),
        (other, other_id, ErrorCode.INVALID_REQUEST),
        (None, bytes(16), ErrorCode.INVALID_REQUEST),
    ]
    assert all(a["error_message"] for a in answers[1:])
    assert _gone(compat_cluster, topic)
    # Refused requests change nothing.
    assert run(_topic_state(compat_cluster, other)) is not None


def test_kafka_python_admin_deletes_topics_with_delete_topics_v6(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin.topics import DeleteTopicsRequest

    topic, _ = _created(compat_cluster, gateways, "kafka-python-delete")
    admin = KafkaAdminClient(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        admin.delete_topics([topic], timeout_ms=CLIENT_TIMEOUT_MS)
        versions = admin._manager.broker_version_data
        assert versions.api_version(DeleteTopicsRequest) == 6
    finally:
        admin.close()
    assert _gone(compat_cluster, topic)


def test_confluent_kafka_admin_deletes_topics_with_delete_topics_v4(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    from confluent_kafka.admin import AdminClient

    topic, _ = _created(compat_cluster, gateways, "confluent-delete")
    with librdkafka_log() as lines:
        admin = AdminClient(
            {"bootstrap.servers": gateways.bootstrap, "debug": "protocol"}, logger=lines.logger
        )
        admin.delete_topics([topic], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
        admin.poll(0)  # serves the queued log lines
    assert versions_sent(lines, "DeleteTopics") == {4}
    assert _gone(compat_cluster, topic)


# -- DescribeConfigs --------------------------------------------------------------------------

_TOPIC_RESOURCE: Final = 2


def _described(
    gateways: KafkaGateways,
    version: int,
    topic: str,
    documented: bool,
    keys: tuple[str, ...] = ("retention.ms", "cleanup.policy"),
) -> Message:
    response = kafka_request(
        gateways.address,
        ApiKey.DESCRIBE_CONFIGS,
        version,
        {
            "resources": [
                {
                    "resource_type": _TOPIC_RESOURCE,
                    "resource_name": topic,
                    "configuration_keys": list(keys),
                }
            ],
            "include_synonyms": True,
            "include_documentation": documented,
        },
        TIMEOUT_S,
    )
    ((result),) = response["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {c["name"]: c for c in result["configs"]}


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_describes_in_every_served_version(
    gateways: KafkaGateways, version: int
) -> None:
    topic = _topic(f"describe-v{version}")
    assert _create_topics(gateways, 7, topic)["error_code"] == ErrorCode.NONE
    plain = _described(gateways, version, topic, documented=False)
    documented = _described(gateways, version, topic, documented=True)
    retention, policy = plain["retention.ms"], plain["cleanup.policy"]
    assert retention["value"] == "3600000"
    if version == 0:
        assert (retention["is_default"], policy["is_default"]) == (False, True)
    else:
        # v1+: where each value comes from, and (asked for) what it overrides.
        assert (retention["config_source"], policy["config_source"]) == (1, 5)
        assert retention["synonyms"][0] == {"name": "retention.ms", "value": "3600000", "source": 1}
    if version >= 3:
        # LONG and LIST; documentation only when asked for.
        assert (retention["config_type"], policy["config_type"]) == (5, 7)
        assert retention["documentation"] is None
        assert documented["retention.ms"]["documentation"]
    else:
        # Fields of later versions decode to their defaults.
        assert (retention["config_type"], documented["retention.ms"]["documentation"]) == (0, "")


def test_kafka_python_admin_describes_configs_with_describe_configs_v4(
    gateways: KafkaGateways,
) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.protocol.admin.configs import DescribeConfigsRequest

    topic = _topic("kafka-python-describe")
    assert _create_topics(gateways, 7, topic)["error_code"] == ErrorCode.NONE
    admin = KafkaAdminClient(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True
        )
        versions = admin._manager.broker_version_data
        assert versions.api_version(DescribeConfigsRequest) == 4
    finally:
        admin.close()
    assert "3600000" in repr(described)


# -- AlterConfigs -----------------------------------------------------------------------------


def _altered(gateways: KafkaGateways, version: int, topic: str, configs: list[Message]) -> Message:
    response = kafka_request(
        gateways.address,
        ApiKey.ALTER_CONFIGS,
        version,
        {
            "resources": [
                {"resource_type": _TOPIC_RESOURCE, "resource_name": topic, "configs": configs}
            ],
            "validate_only": False,
        },
        TIMEOUT_S,
    )
    ((result),) = response["responses"]
    return result  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", range(3))
def test_alter_configs_replaces_the_overrides_in_every_served_version(
    gateways: KafkaGateways, version: int
) -> None:
    topic = _topic(f"alter-v{version}")
    assert _create_topics(gateways, 7, topic)["error_code"] == ErrorCode.NONE
    refused = _altered(gateways, version, topic, [{"name": "segment.ms", "value": "soon"}])
    assert refused["error_code"] == ErrorCode.INVALID_CONFIG, refused
    assert _described(gateways, 4, topic, documented=False)["retention.ms"]["value"] == "3600000"
    # Legacy AlterConfigs: the overrides named replace the whole set.
    answer = _altered(gateways, version, topic, [{"name": "segment.ms", "value": "600000"}])
    assert (answer["error_code"], answer["resource_name"]) == (ErrorCode.NONE, topic)
    described = _described(gateways, 4, topic, False, ("retention.ms", "segment.ms"))
    assert described["retention.ms"]["config_source"] == 5  # back to the default
    assert (described["segment.ms"]["value"], described["segment.ms"]["config_source"]) == (
        "600000",
        1,
    )


def test_kafka_python_admin_alters_configs_with_alter_configs_v2(gateways: KafkaGateways) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.protocol.admin.configs import AlterConfigsRequest

    topic = _topic("kafka-python-alter")
    assert _create_topics(gateways, 7, topic)["error_code"] == ErrorCode.NONE
    admin = KafkaAdminClient(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})]
        )
        versions = admin._manager.broker_version_data
        assert versions.api_version(AlterConfigsRequest) == 2
    finally:
        admin.close()
    assert _described(gateways, 4, topic, documented=False)["retention.ms"]["value"] == "7200000"


# -- CreatePartitions -------------------------------------------------------------------------


def _partitions_created(gateways: KafkaGateways, version: int, topic: str, count: int) -> Message:
    response = kafka_request(
        gateways.address,
        ApiKey.CREATE_PARTITIONS,
        version,
        {
            "topics": [{"name": topic, "count": count, "assignments": None}],
            "timeout_ms": CLIENT_TIMEOUT_MS,
            "validate_only": False,
        },
        TIMEOUT_S,
    )
    ((result),) = response["results"]
    return result  # type: ignore[no-any-return]


def _partition_count(cluster: LocalCluster, topic: str, count: int) -> bool:
    """Whether the storage nodes come to know `count` partitions of `topic` within TIMEOUT_S."""

    def known() -> bool:
        state = run(_topic_state(cluster, topic))
        return state is not None and len(state.partitions) == count

    return _eventually(known)


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_grows_a_topic_in_every_served_version(
    compat_cluster: LocalCluster, gateways: KafkaGateways, version: int
) -> None:
    topic, _ = _created(compat_cluster, gateways, f"partitions-v{version}")
    shrink = _partitions_created(gateways, version, topic, 0)
    assert shrink["error_code"] == ErrorCode.INVALID_PARTITIONS, shrink
    grown = _partitions_created(gateways, version, topic, 3)
    assert grown["error_code"] == ErrorCode.NONE, grown
    assert _partition_count(compat_cluster, topic, 3)


def test_kafka_python_admin_creates_partitions_with_create_partitions_v3(
    compat_cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    from kafka.admin import KafkaAdminClient, NewPartitions
    from kafka.protocol.admin.topics import CreatePartitionsRequest

    topic, _ = _created(compat_cluster, gateways, "kafka-python-partitions")
    admin = KafkaAdminClient(bootstrap_servers=gateways.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_partitions({topic: NewPartitions(2)}, timeout_ms=CLIENT_TIMEOUT_MS)
        versions = admin._manager.broker_version_data
        assert versions.api_version(CreatePartitionsRequest) == 3
    finally:
        admin.close()
    assert _partition_count(compat_cluster, topic, 2)
