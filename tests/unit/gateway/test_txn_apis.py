"""The gateway's transaction APIs and read_committed reads: their messages against
kafka-python's independent protocol classes, and the handlers over a real Kafka-protocol server
in front of scripted coordinators and storage nodes (real grpc.aio servers answering as the
gRPC contract says: transaction.proto, group.proto, storage.proto). The coordinators and
storage nodes that implement the contract are tested on their own; here the gateway's part:
where each request goes, what it carries there, NOT_COORDINATOR hints followed, and each
version's answer and error codes.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from brook_gateway.apis import RECOMMENDED_VERSIONS
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.coordinator_routing import Routers
from brook_gateway.data_apis import data_handlers
from brook_gateway.group_apis import group_handlers
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import REQUESTS, RESPONSES, ApiKey
from brook_gateway.txn_apis import txn_handlers
from brook_gateway.upstream import Upstreams
from gateway_support import (
    RawClient,
    assert_same_bytes_as_kafka_python,
    dispatcher_with_api_versions,
    running_server,
)
from kafka.protocol.admin import transactions as kafka_admin_txn
from kafka.protocol.producer import transaction as kafka_txn
from scripted_servers import LOOPBACK, ScriptedServicer, serving

from brook.errors import ErrorCode
from brook.record.records import BatchBuilder
from brook.v1 import (
    common_pb2,
    group_pb2,
    group_pb2_grpc,
    metadata_pb2,
    storage_pb2,
    storage_pb2_grpc,
    transaction_pb2,
    transaction_pb2_grpc,
)

TIMEOUT_S = 30.0
GATEWAYS = (1, 2)
COORDINATORS = (7, 8)
STORAGE_IDS = (100, 101)
DEAD_STORAGE_ID = 102
TOPIC = "t"
DEAD_TOPIC = "unreachable"
TXN_ID = "orders-tx"
OTHER_TXN_ID = "billing-tx"
GROUP = "orders-app"
PRODUCER_ID = 4000
EPOCH = 3
HIGH_WATERMARK = 10
LAST_STABLE_OFFSET = 4
ABORTED = (9, 2)  # (producer id, first offset) of an aborted transaction below the LSO


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def _versions(api: ApiKey) -> range:
    low, high = RECOMMENDED_VERSIONS[api]
    return range(low, high + 1)


# -- messages against kafka-python -----------------------------------------------------------

_SAMPLES: dict[ApiKey, tuple[Any, Message, Any, Message]] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        kafka_txn.AddPartitionsToTxnRequest,
        {
            "v3_and_below_transactional_id": TXN_ID,
            "v3_and_below_producer_id": PRODUCER_ID,
            "v3_and_below_producer_epoch": EPOCH,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0, 1]}],
        },
        kafka_txn.AddPartitionsToTxnResponse,
        {
            "throttle_time_ms": 0,
            "results_by_topic_v3_and_below": [
                {
                    "name": TOPIC,
                    "results_by_partition": [
                        {"partition_index": 0, "partition_error_code": 0},
                        {"partition_index": 1, "partition_error_code": 51},
                    ],
                }
            ],
        },
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        kafka_txn.AddOffsetsToTxnRequest,
        {
            "transactional_id": TXN_ID,
            "producer_id": PRODUCER_ID,
            "producer_epoch": EPOCH,
            "group_id": GROUP,
        },
        kafka_txn.AddOffsetsToTxnResponse,
        {"throttle_time_ms": 0, "error_code": 90},
    ),
    ApiKey.END_TXN: (
        kafka_txn.EndTxnRequest,
        {
            "transactional_id": TXN_ID,
            "producer_id": PRODUCER_ID,
            "producer_epoch": EPOCH,
            "committed": True,
        },
        kafka_txn.EndTxnResponse,
        {"throttle_time_ms": 0, "error_code": 48},
    ),
    ApiKey.TXN_OFFSET_COMMIT: (
        kafka_txn.TxnOffsetCommitRequest,
        {
            "transactional_id": TXN_ID,
            "group_id": GROUP,
            "producer_id": PRODUCER_ID,
            "producer_epoch": EPOCH,
            "generation_id": 5,
            "member_id": "m-1",
            "group_instance_id": "i-1",
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 1,
                            "committed_offset": 42,
                            "committed_leader_epoch": 2,
                            "committed_metadata": "md",
                        }
                    ],
                }
            ],
        },
        kafka_txn.TxnOffsetCommitResponse,
        {
            "throttle_time_ms": 0,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 1, "error_code": 0}]}],
        },
    ),
    ApiKey.WRITE_TXN_MARKERS: (
        kafka_txn.WriteTxnMarkersRequest,
        {
            "markers": [
                {
                    "producer_id": PRODUCER_ID,
                    "producer_epoch": EPOCH,
                    "transaction_result": False,
                    "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
                    "coordinator_epoch": 6,
                }
            ]
        },
        kafka_txn.WriteTxnMarkersResponse,
        {
            "markers": [
                {
                    "producer_id": PRODUCER_ID,
                    "topics": [
                        {"name": TOPIC, "partitions": [{"partition_index": 0, "error_code": 0}]}
                    ],
                }
            ]
        },
    ),
    ApiKey.DESCRIBE_PRODUCERS: (
        kafka_admin_txn.DescribeProducersRequest,
        {"topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        kafka_admin_txn.DescribeProducersResponse,
        {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "error_message": None,
                            "active_producers": [
                                {
                                    "producer_id": PRODUCER_ID,
                                    "producer_epoch": EPOCH,
                                    "last_sequence": 9,
                                    "last_timestamp": 1_700_000_000_000,
                                    "coordinator_epoch": 6,
                                    "current_txn_start_offset": 5,
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: (
        kafka_admin_txn.DescribeTransactionsRequest,
        {"transactional_ids": [TXN_ID, OTHER_TXN_ID]},
        kafka_admin_txn.DescribeTransactionsResponse,
        {
            "throttle_time_ms": 0,
            "transaction_states": [
                {
                    "error_code": 0,
                    "transactional_id": TXN_ID,
                    "transaction_state": "Ongoing",
                    "transaction_timeout_ms": 60_000,
                    "transaction_start_time_ms": 1_700_000_000_000,
                    "producer_id": PRODUCER_ID,
                    "producer_epoch": EPOCH,
                    "topics": [{"topic": TOPIC, "partitions": [0, 1]}],
                }
            ],
        },
    ),
    ApiKey.LIST_TRANSACTIONS: (
        kafka_admin_txn.ListTransactionsRequest,
        {"state_filters": ["Ongoing"], "producer_id_filters": [PRODUCER_ID], "duration_filter": 5},
        kafka_admin_txn.ListTransactionsResponse,
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "unknown_state_filters": ["Sleeping"],
            "transaction_states": [
                {
                    "transactional_id": TXN_ID,
                    "producer_id": PRODUCER_ID,
                    "transaction_state": "Ongoing",
                }
            ],
        },
    ),
}

_CASES = [
    pytest.param(api, version, direction, id=f"{api.name}-v{version}-{direction}")
    for api in _SAMPLES
    for version in _versions(api)
    for direction in ("request", "response")
]


@pytest.mark.parametrize(("api", "version", "direction"), _CASES)
def test_txn_api_messages_are_byte_identical_to_kafka_pythons(
    api: ApiKey, version: int, direction: str
) -> None:
    request_class, request, response_class, response = _SAMPLES[api]
    kafka_class, sample, spec = (
        (request_class, request, REQUESTS[api])
        if direction == "request"
        else (response_class, response, RESPONSES[api])
    )
    assert_same_bytes_as_kafka_python(kafka_class, spec, version, sample)


# -- scripted coordinators and storage nodes --------------------------------------------------


@dataclass
class Script:
    """What the scripted servers answer, and what they were asked."""

    ports: dict[int, int] = field(default_factory=dict)
    """node id -> port of every scripted server."""
    owners: dict[str, int] = field(default_factory=dict)
    """key (transactional id or group) -> the coordinator that owns it."""
    named: dict[str, int] = field(default_factory=dict)
    """key -> the coordinator FindCoordinator names (a stale owner), when not the owner."""
    codes: dict[str, int] = field(default_factory=dict)
    """RPC name -> the error code its owner answers (NONE when absent)."""
    listed: dict[int, list[transaction_pb2.ListedTransaction]] = field(default_factory=dict)
    """coordinator -> the transactions its ListTransactions lists."""
    calls: list[tuple[int, str, Any]] = field(default_factory=list)
    """(node id, RPC name, request) of every call, in order."""
    key_types: list[int] = field(default_factory=list)
    """The key type of every FindCoordinator call."""

    def hint(self, node_id: int) -> common_pb2.NodeHint:
        endpoint = common_pb2.Endpoint(listener="GRPC", host=LOOPBACK, port=self.ports[node_id])
        return common_pb2.NodeHint(node_id=node_id, endpoints=[endpoint])

    def asked(self, method: str) -> list[tuple[int, Any]]:
        return [(node, request) for node, name, request in self.calls if name == method]


class ScriptedCoordinator(
    ScriptedServicer,
    group_pb2_grpc.GroupCoordinatorServiceServicer,
    transaction_pb2_grpc.TransactionCoordinatorServiceServicer,
):
    """A coordinator process: the group and the transaction service. A key it does not own
    is answered NOT_COORDINATOR with a hint naming the owner."""

    def __init__(self, script: Script, node_id: int) -> None:
        super().__init__(node_id, [])
        self.script = script
        self.node_id = node_id

    def _answer(self, method: str, key: str, request: Any) -> tuple[int, Any]:
        """(the code to answer, the NodeHint to carry or None)."""
        self.script.calls.append((self.node_id, method, request))
        owner = self.script.owners.get(key)
        if owner != self.node_id:
            hint = self.script.hint(owner) if owner is not None else None
            return int(ErrorCode.NOT_COORDINATOR), hint
        return self.script.codes.get(method, 0), None

    async def FindCoordinator(
        self, request: group_pb2.FindCoordinatorRequest, context: Any
    ) -> group_pb2.FindCoordinatorResponse:
        self.script.key_types.append(request.key_type)
        answers = []
        for key in request.keys:
            node = self.script.named.get(key, self.script.owners.get(key))
            if node is None:
                answers.append(
                    group_pb2.Coordinator(
                        key=key, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), node_id=-1
                    )
                )
            else:
                hint = self.script.hint(node)
                answers.append(
                    group_pb2.Coordinator(key=key, node_id=node, endpoints=hint.endpoints)
                )
        return group_pb2.FindCoordinatorResponse(coordinators=answers)

    async def InitProducerId(
        self, request: transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest, _: Any
    ) -> transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse:
        code, hint = self._answer("InitProducerId", request.transactional_id, request)
        return transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse(
            error_code=code,  # type: ignore[arg-type]
            producer_id=PRODUCER_ID,
            producer_epoch=EPOCH,
            coordinator=hint,
        )

    async def AddPartitionsToTxn(
        self, request: transaction_pb2.AddPartitionsToTxnRequest, _: Any
    ) -> transaction_pb2.AddPartitionsToTxnResponse:
        code, hint = self._answer("AddPartitionsToTxn", request.transactional_id, request)
        return transaction_pb2.AddPartitionsToTxnResponse(
            partitions=[
                transaction_pb2.TxnPartitionResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=code,  # type: ignore[arg-type]
                )
                for p in request.partitions
            ],
            coordinator=hint,
        )

    async def AddOffsetsToTxn(
        self, request: transaction_pb2.AddOffsetsToTxnRequest, _: Any
    ) -> transaction_pb2.AddOffsetsToTxnResponse:
        code, hint = self._answer("AddOffsetsToTxn", request.transactional_id, request)
        return transaction_pb2.AddOffsetsToTxnResponse(error_code=code, coordinator=hint)  # type: ignore[arg-type]

    async def EndTxn(
        self, request: transaction_pb2.EndTxnRequest, _: Any
    ) -> transaction_pb2.EndTxnResponse:
        code, hint = self._answer("EndTxn", request.transactional_id, request)
        return transaction_pb2.EndTxnResponse(error_code=code, coordinator=hint)  # type: ignore[arg-type]

    async def DescribeTransactions(
        self, request: transaction_pb2.DescribeTransactionsRequest, _: Any
    ) -> transaction_pb2.DescribeTransactionsResponse:
        [transactional_id] = request.transactional_ids
        code, hint = self._answer("DescribeTransactions", transactional_id, request)
        return transaction_pb2.DescribeTransactionsResponse(
            transactions=[
                transaction_pb2.TransactionDescription(
                    transactional_id=transactional_id,
                    error_code=code,  # type: ignore[arg-type]
                    state=transaction_pb2.TRANSACTION_STATE_PREPARE_COMMIT,
                    producer_id=PRODUCER_ID,
                    producer_epoch=EPOCH,
                    transaction_timeout_ms=60_000,
                    transaction_start_time_ms=1_700_000_000_000,
                    partitions=[
                        common_pb2.TopicPartition(topic=TOPIC, partition=1),
                        common_pb2.TopicPartition(topic="other", partition=0),
                        common_pb2.TopicPartition(topic=TOPIC, partition=0),
                    ],
                    groups=[GROUP],
                    coordinator=hint,
                )
            ]
        )

    async def ListTransactions(
        self, request: transaction_pb2.ListTransactionsRequest, _: Any
    ) -> transaction_pb2.ListTransactionsResponse:
        self.script.calls.append((self.node_id, "ListTransactions", request))
        return transaction_pb2.ListTransactionsResponse(
            transactions=self.script.listed.get(self.node_id, [])
        )

    async def TxnCommitOffsets(
        self, request: group_pb2.TxnCommitOffsetsRequest, _: Any
    ) -> group_pb2.TxnCommitOffsetsResponse:
        code, hint = self._answer("TxnCommitOffsets", request.group_id, request)
        return group_pb2.TxnCommitOffsetsResponse(
            partitions=[
                group_pb2.OffsetCommitPartitionResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=code,  # type: ignore[arg-type]
                )
                for p in request.partitions
            ],
            coordinator=hint,
        )


class ScriptedStorageNode(ScriptedServicer, storage_pb2_grpc.StorageServiceServicer):
    """A storage node leading its partitions: answers what the contract says and records
    what it was asked."""

    def __init__(self, script: Script, node_id: int) -> None:
        super().__init__(node_id, [])
        self.script = script
        self.node_id = node_id

    async def Fetch(self, request: storage_pb2.FetchRequest, _: Any) -> storage_pb2.FetchResponse:
        self.script.calls.append((self.node_id, "Fetch", request))
        committed = request.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED
        return storage_pb2.FetchResponse(
            partitions=[
                storage_pb2.FetchPartitionResponse(
                    topic=p.topic,
                    partition=p.partition,
                    high_watermark=HIGH_WATERMARK,
                    last_stable_offset=LAST_STABLE_OFFSET,
                    log_start_offset=0,
                    aborted_transactions=[
                        common_pb2.AbortedTransaction(
                            producer_id=ABORTED[0], first_offset=ABORTED[1]
                        )
                    ]
                    if committed
                    else [],
                )
                for p in request.partitions
            ]
        )

    async def ListOffsets(
        self, request: storage_pb2.ListOffsetsRequest, _: Any
    ) -> storage_pb2.ListOffsetsResponse:
        self.script.calls.append((self.node_id, "ListOffsets", request))
        committed = request.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED
        return storage_pb2.ListOffsetsResponse(
            partitions=[
                storage_pb2.ListOffsetsPartitionResponse(
                    topic=p.topic,
                    partition=p.partition,
                    offset=LAST_STABLE_OFFSET if committed else HIGH_WATERMARK,
                )
                for p in request.partitions
            ]
        )

    async def Produce(
        self, request: storage_pb2.ProduceRequest, _: Any
    ) -> storage_pb2.ProduceResponse:
        self.script.calls.append((self.node_id, "Produce", request))
        return storage_pb2.ProduceResponse(
            partitions=[
                storage_pb2.PartitionProduceResponse(topic=p.topic, partition=p.partition)
                for p in request.partitions
            ]
        )

    async def InitProducerId(
        self, request: storage_pb2.InitProducerIdRequest, _: Any
    ) -> storage_pb2.InitProducerIdResponse:
        self.script.calls.append((self.node_id, "InitProducerId", request))
        return storage_pb2.InitProducerIdResponse(producer_id=PRODUCER_ID + 1, producer_epoch=0)

    async def DescribeProducers(
        self, request: storage_pb2.DescribeProducersRequest, _: Any
    ) -> storage_pb2.DescribeProducersResponse:
        self.script.calls.append((self.node_id, "DescribeProducers", request))
        return storage_pb2.DescribeProducersResponse(
            partitions=[
                storage_pb2.PartitionProducers(
                    topic=p.topic,
                    partition=p.partition,
                    producers=[
                        storage_pb2.ProducerDescription(
                            producer_id=PRODUCER_ID,
                            producer_epoch=EPOCH,
                            last_sequence=p.partition,
                            last_timestamp=1_700_000_000_000,
                            coordinator_epoch=self.node_id,
                            current_txn_start_offset=5,
                        )
                    ],
                )
                for p in request.partitions
            ]
        )

    async def WriteTxnMarkers(
        self, request: storage_pb2.WriteTxnMarkersRequest, _: Any
    ) -> storage_pb2.WriteTxnMarkersResponse:
        self.script.calls.append((self.node_id, "WriteTxnMarkers", request))
        code = self.script.codes.get("WriteTxnMarkers", 0)
        return storage_pb2.WriteTxnMarkersResponse(
            markers=[
                storage_pb2.TxnMarkerResult(
                    producer_id=m.producer_id,
                    partitions=[
                        storage_pb2.TxnMarkerPartitionResult(
                            topic=p.topic,
                            partition=p.partition,
                            error_code=code,  # type: ignore[arg-type]
                        )
                        for p in m.partitions
                    ],
                )
                for m in request.markers
            ]
        )


@dataclass
class Gateway:
    client: RawClient
    script: Script
    image: ClusterImage
    backend_node_id: int
    _correlation_ids: itertools.count[int]

    async def call(self, api: ApiKey, version: int, body: Message) -> Message:
        correlation_id = next(self._correlation_ids)
        await self.client.send(api, version, correlation_id, body)
        answered, response = await self.client.receive(api, version)
        assert answered == correlation_id
        return response


def _node(node_id: int, role: int, listener: str, port: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=role,  # type: ignore[arg-type]
            endpoints=[common_pb2.Endpoint(listener=listener, host=LOOPBACK, port=port)],
        )
    )


def _topic_id(topic: str) -> bytes:
    return topic.encode().ljust(16, b"-")


def _partition(topic: str, partition: int, leader: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        partition=metadata_pb2.PartitionRecord(
            topic_id=_topic_id(topic),
            topic=topic,
            partition=partition,
            replicas=[leader],
            isr=[leader],
            leader=leader,
        )
    )


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
    return port


@asynccontextmanager
async def gateway(*, coordinators: bool = True) -> AsyncIterator[Gateway]:
    """A gateway in front of scripted coordinators COORDINATORS (TXN_ID and GROUP owned by the
    first, OTHER_TXN_ID by the second) and storage nodes STORAGE_IDS (partition i of TOPIC led
    by STORAGE_IDS[i]); DEAD_TOPIC is led by a storage node nothing answers for. The gateway
    is the one presenting COORDINATORS[0]'s broker."""
    script = Script(owners={TXN_ID: COORDINATORS[0], GROUP: COORDINATORS[0]})
    script.owners[OTHER_TXN_ID] = COORDINATORS[1]
    nodes = (*COORDINATORS, *STORAGE_IDS) if coordinators else STORAGE_IDS

    def add(server: grpc.aio.Server, index: int) -> None:
        node_id = nodes[index]
        if node_id in COORDINATORS:
            servicer = ScriptedCoordinator(script, node_id)
            group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
            transaction_pb2_grpc.add_TransactionCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
                servicer, server
            )
        else:
            storage_pb2_grpc.add_StorageServiceServicer_to_server(  # type: ignore[no-untyped-call]
                ScriptedStorageNode(script, node_id), server
            )

    async with serving(len(nodes), add) as ports:
        script.ports = dict(zip(nodes, ports, strict=True))
        image = ClusterImage()
        records = [_node(g, common_pb2.NODE_ROLE_GATEWAY, "PLAINTEXT", 9000 + g) for g in GATEWAYS]
        records += [
            _node(n, common_pb2.NODE_ROLE_GROUP_COORDINATOR, "GRPC", script.ports[n])
            for n in nodes
            if n in COORDINATORS
        ]
        records += [
            _node(n, common_pb2.NODE_ROLE_STORAGE_NODE, "GRPC", script.ports[n])
            for n in STORAGE_IDS
        ]
        records.append(
            _node(DEAD_STORAGE_ID, common_pb2.NODE_ROLE_STORAGE_NODE, "GRPC", _closed_port())
        )
        for name in (TOPIC, DEAD_TOPIC, "other"):
            records.append(
                metadata_pb2.MetadataRecord(
                    topic=metadata_pb2.TopicRecord(name=name, topic_id=_topic_id(name))
                )
            )
        records += [_partition(TOPIC, i, leader) for i, leader in enumerate(STORAGE_IDS)]
        records += [_partition("other", 0, STORAGE_IDS[0])]
        records += [_partition(DEAD_TOPIC, 0, DEAD_STORAGE_ID)]
        image.apply(True, 1, records)
        upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=3_000)
        broker = image.coordinator_broker(image.kafka_brokers(), COORDINATORS[0])
        assert broker is not None
        backend = Backend(
            node_id=broker.gateway_id, image=image, upstreams=upstreams, controllers=()
        )
        dispatcher = dispatcher_with_api_versions()
        routers = Routers.of(backend)
        for handler in (
            *data_handlers(backend),
            *group_handlers(backend, routers),
            *txn_handlers(backend, routers),
        ):
            dispatcher.register(handler)
        try:
            async with running_server(dispatcher) as server:
                client = await RawClient.connect(server.port)
                try:
                    yield Gateway(client, script, image, broker.gateway_id, itertools.count(1))
                finally:
                    await client.close()
        finally:
            await upstreams.close()


# -- FindCoordinator and InitProducerId ------------------------------------------------------


def test_find_coordinator_for_a_transactional_id_names_the_broker_of_its_coordinator() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            brokers = gw.image.kafka_brokers()
            expected = {
                key: gw.image.coordinator_broker(brokers, gw.script.owners[key])
                for key in (TXN_ID, OTHER_TXN_ID)
            }
            # v0 has no key type (groups only): transactional ids are looked up from v1.
            for version in range(1, 4):
                answer = await gw.call(
                    ApiKey.FIND_COORDINATOR, version, {"key": TXN_ID, "key_type": 1}
                )
                broker = expected[TXN_ID]
                assert broker is not None
                assert (answer["error_code"], answer["node_id"], answer["port"]) == (
                    0,
                    broker.node_id,
                    broker.port,
                )
            # v4: several transactional ids at once, each answered on its own.
            answer = await gw.call(
                ApiKey.FIND_COORDINATOR,
                4,
                {"key_type": 1, "coordinator_keys": [TXN_ID, OTHER_TXN_ID, "nobody"]},
            )
            got = [(c["key"], c["error_code"], c["node_id"]) for c in answer["coordinators"]]
            assert got == [
                (TXN_ID, 0, expected[TXN_ID].node_id),  # type: ignore[union-attr]
                (OTHER_TXN_ID, 0, expected[OTHER_TXN_ID].node_id),  # type: ignore[union-attr]
                ("nobody", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1),
            ]
            # The coordinators were asked for transaction coordinators, never for groups.
            assert set(gw.script.key_types) == {group_pb2.COORDINATOR_TYPE_TRANSACTION}

    run(scenario())


def test_transactional_init_producer_id_follows_a_not_coordinator_hint_to_the_owner() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            # The look-up names the coordinator that just lost the id; it hints the owner.
            gw.script.named[TXN_ID] = COORDINATORS[1]
            body = {
                "transactional_id": TXN_ID,
                "transaction_timeout_ms": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            }
            answer = await gw.call(ApiKey.INIT_PRODUCER_ID, 4, body)
            assert answer == {
                "throttle_time_ms": 0,
                "error_code": 0,
                "producer_id": PRODUCER_ID,
                "producer_epoch": EPOCH,
            }
            asked = gw.script.asked("InitProducerId")
            assert [node for node, _ in asked] == [COORDINATORS[1], COORDINATORS[0]]
            forwarded = asked[-1][1]
            assert (forwarded.transactional_id, forwarded.transaction_timeout_ms) == (
                TXN_ID,
                60_000,
            )
            # Without a transactional id: a storage node's producer id, as before.
            idempotent = await gw.call(
                ApiKey.INIT_PRODUCER_ID, 4, body | {"transactional_id": None}
            )
            assert (idempotent["error_code"], idempotent["producer_id"]) == (0, PRODUCER_ID + 1)
            assert gw.script.asked("InitProducerId")[-1][0] in STORAGE_IDS
            # An empty one is refused, as Kafka's coordinator does.
            empty = await gw.call(ApiKey.INIT_PRODUCER_ID, 4, body | {"transactional_id": ""})
            assert (empty["error_code"], empty["producer_id"], empty["producer_epoch"]) == (
                ErrorCode.INVALID_REQUEST,
                -1,
                -1,
            )

    run(scenario())


def test_an_owner_that_keeps_refusing_is_not_coordinator_and_none_is_not_available() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            # The look-up names a coordinator that hints an owner which never answers: after
            # its tries the gateway answers NOT_COORDINATOR, and the client looks it up again.
            gw.script.owners[TXN_ID] = 99
            gw.script.ports[99] = _closed_port()
            gw.script.named[TXN_ID] = COORDINATORS[1]
            body = {"transactional_id": TXN_ID, "transaction_timeout_ms": 60_000}
            answer = await gw.call(ApiKey.INIT_PRODUCER_ID, 1, body)
            assert (answer["error_code"], answer["producer_id"]) == (ErrorCode.NOT_COORDINATOR, -1)
            end = {"transactional_id": TXN_ID, "producer_id": 1, "producer_epoch": 0}
            answer = await gw.call(ApiKey.END_TXN, 1, end | {"committed": True})
            assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
        async with gateway(coordinators=False) as gw:
            answer = await gw.call(ApiKey.ADD_OFFSETS_TO_TXN, 0, end | {"group_id": GROUP})
            assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(scenario())


# -- error codes per version ---------------------------------------------------------------

_FENCED = int(ErrorCode.PRODUCER_FENCED)
_OLD_EPOCH = int(ErrorCode.INVALID_PRODUCER_EPOCH)
_ABORTABLE = int(ErrorCode.TRANSACTION_ABORTABLE)
_BAD_STATE = int(ErrorCode.INVALID_TXN_STATE)
_TXN = {"transactional_id": TXN_ID, "producer_id": PRODUCER_ID, "producer_epoch": EPOCH}
_COMMIT_TOPICS = [
    {
        "name": TOPIC,
        "partitions": [
            {
                "partition_index": 0,
                "committed_offset": 8,
                "committed_leader_epoch": 1,
                "committed_metadata": None,
            }
        ],
    }
]

# api -> (the coordinator RPC, a request body, the answer's error code)
_TXN_CALLS: dict[ApiKey, tuple[str, Message, Any]] = {
    ApiKey.INIT_PRODUCER_ID: (
        "InitProducerId",
        {"transactional_id": TXN_ID, "transaction_timeout_ms": 1000},
        lambda r: r["error_code"],
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        "AddPartitionsToTxn",
        {
            "v3_and_below_transactional_id": TXN_ID,
            "v3_and_below_producer_id": PRODUCER_ID,
            "v3_and_below_producer_epoch": EPOCH,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0, 1]}],
        },
        lambda r: {
            p["partition_error_code"]
            for t in r["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        }.pop(),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        "AddOffsetsToTxn",
        _TXN | {"group_id": GROUP},
        lambda r: r["error_code"],
    ),
    ApiKey.END_TXN: ("EndTxn", _TXN | {"committed": False}, lambda r: r["error_code"]),
    ApiKey.TXN_OFFSET_COMMIT: (
        "TxnCommitOffsets",
        _TXN | {"group_id": GROUP, "topics": _COMMIT_TOPICS},
        lambda r: r["topics"][0]["partitions"][0]["error_code"],
    ),
}
# api -> (first version answered PRODUCER_FENCED (None: never), first answered
# TRANSACTION_ABORTABLE), from the schemas' version notes.
_NEW_CODES_FROM: dict[ApiKey, tuple[int | None, int]] = {
    ApiKey.INIT_PRODUCER_ID: (4, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (2, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (2, 4),
    ApiKey.END_TXN: (2, 4),
    ApiKey.TXN_OFFSET_COMMIT: (None, 4),
}


@pytest.mark.parametrize("api", list(_TXN_CALLS), ids=lambda api: api.name)
def test_codes_a_version_predates_are_answered_as_kafka_answers_that_version(
    api: ApiKey,
) -> None:
    method, body, code_of = _TXN_CALLS[api]
    fenced_from, abortable_from = _NEW_CODES_FROM[api]

    async def scenario() -> None:
        async with gateway() as gw:
            for version in _versions(api):
                got = {}
                for code in (0, _FENCED, _ABORTABLE, int(ErrorCode.CONCURRENT_TRANSACTIONS)):
                    gw.script.codes[method] = code
                    got[code] = code_of(await gw.call(api, version, body))
                knows_fenced = fenced_from is not None and version >= fenced_from
                assert got == {
                    0: 0,
                    _FENCED: _FENCED if knows_fenced else _OLD_EPOCH,
                    _ABORTABLE: _ABORTABLE if version >= abortable_from else _BAD_STATE,
                    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.CONCURRENT_TRANSACTIONS,
                }, f"{api.name} v{version}"

    run(scenario())


# -- what reaches the coordinators -----------------------------------------------------------


def test_add_partitions_offsets_and_end_carry_the_transaction_to_its_coordinator() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            _, add_partitions, _ = _TXN_CALLS[ApiKey.ADD_PARTITIONS_TO_TXN]
            answer = await gw.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions)
            assert answer["results_by_topic_v3_and_below"] == [
                {
                    "name": TOPIC,
                    "results_by_partition": [
                        {"partition_index": 0, "partition_error_code": 0},
                        {"partition_index": 1, "partition_error_code": 0},
                    ],
                }
            ]
            await gw.call(ApiKey.ADD_OFFSETS_TO_TXN, 4, _TXN | {"group_id": GROUP})
            await gw.call(ApiKey.END_TXN, 4, _TXN | {"committed": True})
            [(node, added)] = gw.script.asked("AddPartitionsToTxn")
            assert node == COORDINATORS[0]
            assert (added.transactional_id, added.producer_id, added.producer_epoch) == (
                TXN_ID,
                PRODUCER_ID,
                EPOCH,
            )
            assert [(p.topic, p.partition) for p in added.partitions] == [(TOPIC, 0), (TOPIC, 1)]
            [(_, offsets)] = gw.script.asked("AddOffsetsToTxn")
            assert (offsets.transactional_id, offsets.group_id) == (TXN_ID, GROUP)
            [(_, end)] = gw.script.asked("EndTxn")
            assert (end.transactional_id, end.producer_epoch, end.committed) == (
                TXN_ID,
                EPOCH,
                True,
            )

    run(scenario())


def test_add_partitions_naming_an_unknown_partition_reaches_no_coordinator() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            body = {
                "v3_and_below_transactional_id": TXN_ID,
                "v3_and_below_producer_id": PRODUCER_ID,
                "v3_and_below_producer_epoch": EPOCH,
                "v3_and_below_topics": [
                    {"name": TOPIC, "partitions": [0, 7]},
                    {"name": "missing", "partitions": [0]},
                ],
            }
            answer = await gw.call(ApiKey.ADD_PARTITIONS_TO_TXN, 1, body)
            codes = {
                (t["name"], p["partition_index"]): p["partition_error_code"]
                for t in answer["results_by_topic_v3_and_below"]
                for p in t["results_by_partition"]
            }
            assert codes == {
                (TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                (TOPIC, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            assert gw.script.asked("AddPartitionsToTxn") == []
            # v4+ is a broker's batched verification: not served, and said so at the top.
            batched = {
                "transactions": [
                    {
                        "transactional_id": TXN_ID,
                        "producer_id": PRODUCER_ID,
                        "producer_epoch": EPOCH,
                        "verify_only": True,
                        "topics": [{"name": TOPIC, "partitions": [0]}],
                    }
                ]
            }
            answer = await gw.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, batched)
            assert answer["error_code"] == ErrorCode.UNSUPPORTED_VERSION
            assert gw.script.asked("AddPartitionsToTxn") == []

    run(scenario())


def test_txn_offset_commit_goes_to_the_groups_coordinator_with_its_member() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            # The group's look-up names the wrong coordinator: its hint is followed.
            gw.script.named[GROUP] = COORDINATORS[1]
            body = _TXN | {
                "group_id": GROUP,
                "generation_id": 5,
                "member_id": "m-1",
                "group_instance_id": "i-1",
                "topics": [
                    *_COMMIT_TOPICS,
                    {"name": "missing", "partitions": _COMMIT_TOPICS[0]["partitions"]},
                ],
            }
            answer = await gw.call(ApiKey.TXN_OFFSET_COMMIT, 3, body)
            assert [
                (t["name"], p["error_code"]) for t in answer["topics"] for p in t["partitions"]
            ] == [(TOPIC, 0), ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
            asked = gw.script.asked("TxnCommitOffsets")
            assert [node for node, _ in asked] == [COORDINATORS[1], COORDINATORS[0]]
            commit = asked[-1][1]
            assert (commit.transactional_id, commit.group_id, commit.producer_id) == (
                TXN_ID,
                GROUP,
                PRODUCER_ID,
            )
            assert (commit.generation_id, commit.member_id, commit.group_instance_id) == (
                5,
                "m-1",
                "i-1",
            )
            [partition] = commit.partitions
            assert (partition.topic, partition.committed_offset, partition.metadata) == (
                TOPIC,
                8,
                "",
            )
            # v0-2 have no member: the coordinator is told not to check one.
            await gw.call(
                ApiKey.TXN_OFFSET_COMMIT, 0, _TXN | {"group_id": GROUP, "topics": _COMMIT_TOPICS}
            )
            old = gw.script.asked("TxnCommitOffsets")[-1][1]
            assert (old.generation_id, old.member_id, old.HasField("group_instance_id")) == (
                -1,
                "",
                False,
            )
            assert group_pb2.COORDINATOR_TYPE_GROUP in gw.script.key_types

    run(scenario())


# -- DescribeTransactions, ListTransactions --------------------------------------------------


def test_describe_transactions_asks_each_ids_coordinator() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            gw.script.codes["DescribeTransactions"] = 0
            answer = await gw.call(
                ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN_ID, OTHER_TXN_ID]}
            )
            described = answer["transaction_states"]
            assert [d["transactional_id"] for d in described] == [TXN_ID, OTHER_TXN_ID]
            assert described[0] == {
                "error_code": 0,
                "transactional_id": TXN_ID,
                "transaction_state": "PrepareCommit",
                "transaction_timeout_ms": 60_000,
                "transaction_start_time_ms": 1_700_000_000_000,
                "producer_id": PRODUCER_ID,
                "producer_epoch": EPOCH,
                "topics": [
                    {"topic": TOPIC, "partitions": [1, 0]},
                    {"topic": "other", "partitions": [0]},
                ],
            }
            asked = {
                request.transactional_ids[0]: node
                for node, request in gw.script.asked("DescribeTransactions")
            }
            assert asked == {TXN_ID: COORDINATORS[0], OTHER_TXN_ID: COORDINATORS[1]}
            gw.script.codes["DescribeTransactions"] = int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
            answer = await gw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN_ID]})
            [missing] = answer["transaction_states"]
            assert (
                missing["error_code"],
                missing["transaction_state"],
                missing["producer_id"],
            ) == (
                ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                "",
                -1,
            )

    run(scenario())


def test_list_transactions_lists_those_of_the_coordinators_this_broker_stands_for() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            listed = transaction_pb2.ListedTransaction(
                transactional_id=TXN_ID,
                producer_id=PRODUCER_ID,
                state=transaction_pb2.TRANSACTION_STATE_ONGOING,
            )
            gw.script.listed = {
                COORDINATORS[0]: [listed],
                COORDINATORS[1]: [transaction_pb2.ListedTransaction(transactional_id=OTHER_TXN_ID)],
            }
            brokers = gw.image.kafka_brokers()
            presenting = {
                c: gw.image.coordinator_broker(brokers, c).gateway_id  # type: ignore[union-attr]
                for c in COORDINATORS
            }
            # The two coordinators' brokers are presented by different gateways: this one
            # lists COORDINATORS[0]'s transactions only (a client asks every broker).
            assert presenting[COORDINATORS[0]] == gw.backend_node_id != presenting[COORDINATORS[1]]
            answer = await gw.call(
                ApiKey.LIST_TRANSACTIONS,
                1,
                {
                    "state_filters": ["Ongoing", "Sleeping"],
                    "producer_id_filters": [PRODUCER_ID],
                    "duration_filter": 5_000,
                },
            )
            assert answer == {
                "throttle_time_ms": 0,
                "error_code": 0,
                "unknown_state_filters": ["Sleeping"],
                "transaction_states": [
                    {
                        "transactional_id": TXN_ID,
                        "producer_id": PRODUCER_ID,
                        "transaction_state": "Ongoing",
                    }
                ],
            }
            [(node, request)] = gw.script.asked("ListTransactions")
            assert node == COORDINATORS[0]
            assert list(request.state_filters) == [transaction_pb2.TRANSACTION_STATE_ONGOING]
            assert (list(request.producer_id_filters), request.duration_filter_ms) == (
                [PRODUCER_ID],
                5_000,
            )
            # v0 has no duration filter; only unknown states match nothing, unasked.
            answer = await gw.call(
                ApiKey.LIST_TRANSACTIONS,
                0,
                {"state_filters": ["Sleeping"], "producer_id_filters": []},
            )
            assert (answer["unknown_state_filters"], answer["transaction_states"]) == (
                ["Sleeping"],
                [],
            )
            assert len(gw.script.asked("ListTransactions")) == 1

    run(scenario())


# -- DescribeProducers, WriteTxnMarkers ------------------------------------------------------


def test_describe_producers_asks_each_partitions_leader() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            answer = await gw.call(
                ApiKey.DESCRIBE_PRODUCERS,
                0,
                {
                    "topics": [
                        {"name": TOPIC, "partition_indexes": [0, 1]},
                        {"name": DEAD_TOPIC, "partition_indexes": [0]},
                        {"name": "missing", "partition_indexes": [0]},
                    ]
                },
            )
            by_partition = {
                (t["name"], p["partition_index"]): p
                for t in answer["topics"]
                for p in t["partitions"]
            }
            for index, leader in enumerate(STORAGE_IDS):
                shown = by_partition[(TOPIC, index)]
                assert shown["error_code"] == 0
                assert shown["active_producers"] == [
                    {
                        "producer_id": PRODUCER_ID,
                        "producer_epoch": EPOCH,
                        "last_sequence": index,
                        "last_timestamp": 1_700_000_000_000,
                        "coordinator_epoch": leader,
                        "current_txn_start_offset": 5,
                    }
                ]
            assert by_partition[(DEAD_TOPIC, 0)]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (
                by_partition[("missing", 0)]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            asked = sorted(
                (node, [(p.topic, p.partition) for p in r.partitions])
                for node, r in gw.script.asked("DescribeProducers")
            )
            assert asked == [(STORAGE_IDS[0], [(TOPIC, 0)]), (STORAGE_IDS[1], [(TOPIC, 1)])]

    run(scenario())


def test_write_txn_markers_split_by_leader_and_answered_per_marker() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            markers = [
                {
                    "producer_id": PRODUCER_ID,
                    "producer_epoch": EPOCH,
                    "transaction_result": False,
                    "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
                    "coordinator_epoch": -1,
                },
                {
                    "producer_id": PRODUCER_ID + 1,
                    "producer_epoch": 0,
                    "transaction_result": True,
                    "topics": [
                        {"name": TOPIC, "partition_indexes": [1]},
                        {"name": DEAD_TOPIC, "partition_indexes": [0]},
                    ],
                    "coordinator_epoch": 6,
                },
            ]
            for version in _versions(ApiKey.WRITE_TXN_MARKERS):
                gw.script.calls.clear()
                answer = await gw.call(ApiKey.WRITE_TXN_MARKERS, version, {"markers": markers})
                assert [
                    (m["producer_id"], t["name"], p["partition_index"], p["error_code"])
                    for m in answer["markers"]
                    for t in m["topics"]
                    for p in t["partitions"]
                ] == [
                    (PRODUCER_ID, TOPIC, 0, 0),
                    (PRODUCER_ID, TOPIC, 1, 0),
                    (PRODUCER_ID + 1, TOPIC, 1, 0),
                    (PRODUCER_ID + 1, DEAD_TOPIC, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                ]
                sent = {
                    node: [
                        (
                            m.producer_id,
                            m.producer_epoch,
                            m.committed,
                            m.coordinator_epoch,
                            [(p.topic, p.partition) for p in m.partitions],
                        )
                        for m in request.markers
                    ]
                    for node, request in gw.script.asked("WriteTxnMarkers")
                }
                assert sent == {
                    STORAGE_IDS[0]: [(PRODUCER_ID, EPOCH, False, -1, [(TOPIC, 0)])],
                    STORAGE_IDS[1]: [
                        (PRODUCER_ID, EPOCH, False, -1, [(TOPIC, 1)]),
                        (PRODUCER_ID + 1, 0, True, 6, [(TOPIC, 1)]),
                    ],
                }
            gw.script.codes["WriteTxnMarkers"] = int(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
            answer = await gw.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": markers[:1]})
            assert {
                p["error_code"] for t in answer["markers"][0]["topics"] for p in t["partitions"]
            } == {ErrorCode.TRANSACTION_COORDINATOR_FENCED}

    run(scenario())


# -- read_committed Fetch and ListOffsets, transactional Produce -------------------------------


def _fetch_body(isolation_level: int) -> Message:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": isolation_level,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}],
            }
        ],
    }


def test_fetch_carries_the_isolation_level_and_answers_the_lso_and_aborted_transactions() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            for version in _versions(ApiKey.FETCH):
                gw.script.calls.clear()
                committed = await gw.call(ApiKey.FETCH, version, _fetch_body(1))
                [partition] = committed["responses"][0]["partitions"]
                assert (partition["high_watermark"], partition["last_stable_offset"]) == (
                    HIGH_WATERMARK,
                    LAST_STABLE_OFFSET,
                )
                assert partition["aborted_transactions"] == [
                    {"producer_id": ABORTED[0], "first_offset": ABORTED[1]}
                ]
                uncommitted = await gw.call(ApiKey.FETCH, version, _fetch_body(0))
                [partition] = uncommitted["responses"][0]["partitions"]
                assert partition["last_stable_offset"] == LAST_STABLE_OFFSET
                assert partition["aborted_transactions"] is None
                assert [r.isolation_level for _, r in gw.script.asked("Fetch")] == [
                    common_pb2.ISOLATION_LEVEL_READ_COMMITTED,
                    common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED,
                ]
                refused = await gw.call(ApiKey.FETCH, version, _fetch_body(2))
                [partition] = refused["responses"][0]["partitions"]
                assert partition["error_code"] == ErrorCode.INVALID_REQUEST
                if version >= 7:
                    assert refused["error_code"] == ErrorCode.INVALID_REQUEST
                assert len(gw.script.asked("Fetch")) == 2, "an invalid level reached a node"

    run(scenario())


def test_list_offsets_latest_read_committed_is_the_last_stable_offset() -> None:
    async def scenario() -> None:
        async with gateway() as gw:

            def body(isolation_level: int) -> Message:
                return {
                    "replica_id": -1,
                    "isolation_level": isolation_level,
                    "topics": [
                        {"name": TOPIC, "partitions": [{"partition_index": 1, "timestamp": -1}]}
                    ],
                }

            for version in _versions(ApiKey.LIST_OFFSETS):
                offsets = {}
                for level in (0, 1):
                    answer = await gw.call(ApiKey.LIST_OFFSETS, version, body(level))
                    offsets[level] = answer["topics"][0]["partitions"][0]["offset"]
                # v1 has no isolation level: it reads uncommitted.
                committed = LAST_STABLE_OFFSET if version >= 2 else HIGH_WATERMARK
                assert offsets == {0: HIGH_WATERMARK, 1: committed}, version
                if version >= 2:
                    before = len(gw.script.asked("ListOffsets"))
                    refused = await gw.call(ApiKey.LIST_OFFSETS, version, body(-3))
                    [partition] = refused["topics"][0]["partitions"]
                    assert (partition["error_code"], partition["offset"]) == (
                        ErrorCode.INVALID_REQUEST,
                        -1,
                    )
                    assert len(gw.script.asked("ListOffsets")) == before

    run(scenario())


def test_a_transactional_batch_reaches_the_leader_byte_for_byte() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            builder = BatchBuilder(
                producer_id=PRODUCER_ID,
                producer_epoch=EPOCH,
                base_sequence=0,
                is_transactional=True,
            )
            builder.append(1_700_000_000_000, b"key", b"value")
            batch = builder.build()
            for version in (3, RECOMMENDED_VERSIONS[ApiKey.PRODUCE][1]):
                gw.script.calls.clear()
                answer = await gw.call(
                    ApiKey.PRODUCE,
                    version,
                    {
                        "transactional_id": TXN_ID,
                        "acks": -1,
                        "timeout_ms": 1000,
                        "topic_data": [
                            {"name": TOPIC, "partition_data": [{"index": 1, "records": batch}]}
                        ],
                    },
                )
                [partition] = answer["responses"][0]["partition_responses"]
                assert partition["error_code"] == 0
                [(node, produced)] = gw.script.asked("Produce")
                assert node == STORAGE_IDS[1]
                assert [bytes(p.records) for p in produced.partitions] == [batch]
                assert produced.acks == storage_pb2.ACKS_ALL

    run(scenario())


def test_api_versions_advertises_the_transaction_apis() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            answer = await gw.call(
                ApiKey.API_VERSIONS,
                3,
                {"client_software_name": "test", "client_software_version": "1"},
            )
            advertised = {
                a["api_key"]: (a["min_version"], a["max_version"]) for a in answer["api_keys"]
            }
            assert {
                api: advertised.get(api)
                for api in (
                    ApiKey.INIT_PRODUCER_ID,
                    ApiKey.ADD_PARTITIONS_TO_TXN,
                    ApiKey.ADD_OFFSETS_TO_TXN,
                    ApiKey.END_TXN,
                    ApiKey.WRITE_TXN_MARKERS,
                    ApiKey.TXN_OFFSET_COMMIT,
                    ApiKey.DESCRIBE_PRODUCERS,
                    ApiKey.DESCRIBE_TRANSACTIONS,
                    ApiKey.LIST_TRANSACTIONS,
                )
            } == {
                ApiKey.INIT_PRODUCER_ID: (0, 5),
                ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
                ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
                ApiKey.END_TXN: (0, 4),
                ApiKey.WRITE_TXN_MARKERS: (0, 1),
                ApiKey.TXN_OFFSET_COMMIT: (0, 4),
                ApiKey.DESCRIBE_PRODUCERS: (0, 0),
                ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
                ApiKey.LIST_TRANSACTIONS: (0, 1),
            }

    run(scenario())
