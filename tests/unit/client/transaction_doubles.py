"""A scripted transaction and group coordinator served beside the storage double (one gRPC
server), for the transactional producer's and read_committed consumer's unit tests."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
from storage_double import RunningDouble, StorageDouble, answer_all

from brook.client import Admin, Consumer, Producer, RecordMetadata
from brook.client.group.coordinator import ConsumerGroupMetadata
from brook.errors import ErrorCode
from brook.record import ControlType, build_control_batch, scan_batches
from brook.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    group_pb2,
    group_pb2_grpc,
    storage_pb2,
    transaction_pb2,
    transaction_pb2_grpc,
)

TOPICS = {"events": 3, "single": 1}
TXN_ID = "copier-1"
PRODUCER_ID = 4000
COORDINATOR_NODE_ID = 2
FAST = {
    "transactional.id": TXN_ID,
    "transaction.timeout.ms": 3000,
    "linger.ms": 0,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "request.timeout.ms": 2000,
    "delivery.timeout.ms": 8000,
    "max.block.ms": 5000,
}
RESULT_TIMEOUT_S = 15.0
GROUP = ConsumerGroupMetadata("billing", 7, "member-1", None)
# What the scripted FetchOffsets answers when it answers without error.
COMMITTED_OFFSET = 17


class TxnStorageDouble(StorageDouble):
    """The storage double with a leader's DescribeProducers (``producers`` per partition) and
    WriteTxnMarkers (the marker is appended as a control batch, and logged in ``markers``)."""

    def __init__(self, topics: dict[str, int]) -> None:
        super().__init__(topics)
        self.producers: dict[tuple[str, int], list[storage_pb2.ProducerDescription]] = {}
        self.markers: list[storage_pb2.WriteTxnMarkersRequest] = []

    async def DescribeProducers(self, request: Any, context: Any) -> Any:
        return storage_pb2.DescribeProducersResponse(
            partitions=[
                storage_pb2.PartitionProducers(
                    topic=p.topic,
                    partition=p.partition,
                    producers=self.producers.get((p.topic, p.partition), []),
                )
                for p in request.partitions
            ]
        )

    async def WriteTxnMarkers(self, request: Any, context: Any) -> Any:
        self.markers.append(request)
        results = []
        for marker in request.markers:
            for p in marker.partitions:
                self.append(
                    p.topic,
                    p.partition,
                    build_control_batch(
                        ControlType.COMMIT if marker.committed else ControlType.ABORT,
                        producer_id=marker.producer_id,
                        producer_epoch=marker.producer_epoch,
                        coordinator_epoch=marker.coordinator_epoch,
                        timestamp_ms=1,
                    ),
                )
            results.append(
                storage_pb2.TxnMarkerResult(
                    producer_id=marker.producer_id,
                    partitions=[
                        storage_pb2.TxnMarkerPartitionResult(topic=p.topic, partition=p.partition)
                        for p in marker.partitions
                    ],
                )
            )
        return storage_pb2.WriteTxnMarkersResponse(markers=results)


class ScriptedAdmin(admin_pb2_grpc.AdminServiceServicer):
    """The active controller as Admin sees it: the double is the storage node and the
    coordinator, and its topics are the cluster's."""

    def __init__(self, double: StorageDouble) -> None:
        self.double = double

    async def DescribeCluster(self, request: Any, context: Any) -> Any:
        host, port = self.double.address.rsplit(":", 1)
        endpoints = [common_pb2.Endpoint(listener="GRPC", host=host, port=int(port))]
        return admin_pb2.DescribeClusterResponse(
            cluster_id="double",
            controller_id=-1,
            nodes=[
                admin_pb2.NodeDescription(
                    node_id=1, role=common_pb2.NODE_ROLE_STORAGE_NODE, endpoints=endpoints
                ),
                admin_pb2.NodeDescription(
                    node_id=COORDINATOR_NODE_ID,
                    role=common_pb2.NODE_ROLE_GROUP_COORDINATOR,
                    endpoints=endpoints,
                ),
            ],
        )

    async def DescribeTopics(self, request: Any, context: Any) -> Any:
        metadata = await self.double.GetMetadata(
            storage_pb2.GetMetadataRequest(topics=request.names), context
        )
        for topic in metadata.topics:
            topic.topic_id = uuid.uuid5(uuid.NAMESPACE_URL, topic.name).bytes
        return admin_pb2.DescribeTopicsResponse(topics=metadata.topics)


class ScriptedCoordinator(
    group_pb2_grpc.GroupCoordinatorServiceServicer,
    transaction_pb2_grpc.TransactionCoordinatorServiceServicer,
):
    """Answers every transaction and group call with the next scripted code (NONE when the
    script is empty) and logs (method, request) in ``log``, which the storage double's
    Produce calls are logged to as well, in arrival order."""

    def __init__(self, double: StorageDouble, log: list[tuple[str, Any]]) -> None:
        self.double = double
        self.log = log
        self.scripts: dict[str, list[ErrorCode]] = {}
        # Methods that fail with a gRPC status instead of answering.
        self.statuses: dict[str, grpc.StatusCode] = {}
        self.epoch = -1
        # Seconds AddPartitionsToTxn waits before it answers.
        self.add_delay_s = 0.0
        # What DescribeTransactions and ListTransactions answer about, by transactional id.
        self.transactions: dict[str, transaction_pb2.TransactionDescription] = {}

    def _code(self, method: str, request: Any) -> int:
        self.log.append((method, request))
        script = self.scripts.get(method)
        return int(script.pop(0) if script else ErrorCode.NONE)

    def calls(self, method: str) -> list[Any]:
        return [request for name, request in self.log if name == method]

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        code = self._code("FindCoordinator", request)
        host, port = self.double.address.rsplit(":", 1)
        return group_pb2.FindCoordinatorResponse(
            coordinators=[
                group_pb2.Coordinator(
                    key=key,
                    error_code=code,  # type: ignore[arg-type]
                    node_id=COORDINATOR_NODE_ID,
                    endpoints=[common_pb2.Endpoint(listener="GRPC", host=host, port=int(port))],
                )
                for key in request.keys
            ]
        )

    async def InitProducerId(self, request: Any, context: Any) -> Any:
        code = self._code("InitProducerId", request)
        if code:
            return transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse(
                error_code=code  # type: ignore[arg-type]
            )
        self.epoch += 1
        return transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse(
            producer_id=PRODUCER_ID, producer_epoch=self.epoch
        )

    async def AddPartitionsToTxn(self, request: Any, context: Any) -> Any:
        code = self._code("AddPartitionsToTxn", request)
        await asyncio.sleep(self.add_delay_s)
        return transaction_pb2.AddPartitionsToTxnResponse(
            partitions=[
                transaction_pb2.TxnPartitionResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=code,  # type: ignore[arg-type]
                )
                for p in request.partitions
            ]
        )

    async def AddOffsetsToTxn(self, request: Any, context: Any) -> Any:
        code = self._code("AddOffsetsToTxn", request)
        return transaction_pb2.AddOffsetsToTxnResponse(error_code=code)  # type: ignore[arg-type]

    async def EndTxn(self, request: Any, context: Any) -> Any:
        code = self._code("EndTxn", request)
        if "EndTxn" in self.statuses:
            await context.abort(self.statuses["EndTxn"], "scripted failure")
        return transaction_pb2.EndTxnResponse(error_code=code)  # type: ignore[arg-type]

    async def DescribeTransactions(self, request: Any, context: Any) -> Any:
        self.log.append(("DescribeTransactions", request))
        return transaction_pb2.DescribeTransactionsResponse(
            transactions=[
                self.transactions.get(name)
                or transaction_pb2.TransactionDescription(
                    transactional_id=name,
                    error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,  # type: ignore[arg-type]
                    error_message=f"no transactional id {name}",
                )
                for name in request.transactional_ids
            ]
        )

    async def ListTransactions(self, request: Any, context: Any) -> Any:
        self.log.append(("ListTransactions", request))
        return transaction_pb2.ListTransactionsResponse(
            transactions=[
                transaction_pb2.ListedTransaction(
                    transactional_id=d.transactional_id, producer_id=d.producer_id, state=d.state
                )
                for d in self.transactions.values()
                if not request.state_filters or d.state in request.state_filters
            ]
        )

    async def FetchOffsets(self, request: Any, context: Any) -> Any:
        code = self._code("FetchOffsets", request)
        return group_pb2.FetchOffsetsResponse(
            partitions=[
                group_pb2.OffsetFetchPartitionResult(
                    topic=p.topic,
                    partition=p.partition,
                    committed_offset=-1 if code else COMMITTED_OFFSET,
                    committed_leader_epoch=-1,
                    error_code=code,  # type: ignore[arg-type]
                )
                for p in request.partitions
            ]
        )

    async def TxnCommitOffsets(self, request: Any, context: Any) -> Any:
        code = self._code("TxnCommitOffsets", request)
        return group_pb2.TxnCommitOffsetsResponse(
            partitions=[
                group_pb2.OffsetCommitPartitionResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=code,  # type: ignore[arg-type]
                )
                for p in request.partitions
            ]
        )


class Cluster:
    """The storage double with the scripted coordinator; ``log`` holds every call to
    either, in arrival order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        double = self.storage = TxnStorageDouble(dict(TOPICS))
        double.coordinator_node_id = COORDINATOR_NODE_ID
        self.coordinator = ScriptedCoordinator(double, self.log)
        self.produce_errors: list[ErrorCode] = []

        async def produce(request: Any, context: Any) -> Any:
            self.log.append(("Produce", request))
            if not self.produce_errors:
                return None
            return answer_all(request, self.produce_errors.pop(0))

        double.faults["Produce"] = produce

        def add(server: grpc.aio.Server) -> None:
            group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
                self.coordinator, server
            )
            transaction_pb2_grpc.add_TransactionCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
                self.coordinator, server
            )
            admin_pb2_grpc.add_AdminServiceServicer_to_server(  # type: ignore[no-untyped-call]
                ScriptedAdmin(double), server
            )

        self.running = RunningDouble(double, add)
        # The server also answers as the controllers (ScriptedAdmin).
        double.controller_addresses = [self.running.address]

    def producer(self, **settings: object) -> Producer:
        config: dict[str, object] = {"bootstrap.servers": self.running.address, **FAST}
        config.update({name.replace("_", "."): value for name, value in settings.items()})
        return Producer(config)

    def commit_one(self) -> RecordMetadata:
        """A new producer's first transaction: one record to "single", committed."""
        with self.producer() as producer:
            producer.init_transactions()
            producer.begin_transaction()
            future = producer.send("single", b"x")
            producer.commit_transaction()
            return future.result(RESULT_TIMEOUT_S)

    def admin(self) -> Admin:
        return Admin(self.running.address, default_api_timeout_ms=5000, retry_backoff_ms=10)

    def consumer(self, **settings: object) -> Consumer:
        config: dict[str, object] = {
            "bootstrap.servers": self.running.address,
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 50,
            "request.timeout.ms": 2000,
        }
        config.update({name.replace("_", "."): value for name, value in settings.items()})
        return Consumer(config)

    def methods(self) -> list[str]:
        return [name for name, _ in self.log]

    def produced_batches(self) -> list[tuple[str, int, Any]]:
        """(topic, partition, header) of every batch every Produce carried."""
        return [
            (data.topic, data.partition, header)
            for name, request in self.log
            if name == "Produce"
            for data in request.partitions
            for _, header in scan_batches(data.records)
        ]
