"""The transaction coordinator's marker writer (transactions/markers.py) against real gRPC
servers on the loopback that answer as scripted: one WriteTxnMarkers per leader node with the
transaction's ids and epochs, retried until every partition is written, a deleted partition
and an internal topic's skipped, CompleteTransaction to the group's coordinator retried until
NONE, and a fenced answer making that marker obsolete."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.ownership import OFFSETS_TOPIC
from brook_group_coordinator.transactions.markers import GrpcMarkerWriter, MarkerSettings
from brook_group_coordinator.transactions.state import Transaction, TxnState
from scripted_servers import ScriptedServicer, serving

from brook.errors import ErrorCode
from brook.rpc.backoff import RetryBackoff
from brook.v1 import (
    controller_pb2,
    group_pb2,
    group_pb2_grpc,
    metadata_pb2,
    storage_pb2,
    storage_pb2_grpc,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage_node"))
from storage_node_support import broker_record, partition_record, topic_record

COORDINATOR_ID = 3001
COORDINATOR_EPOCH = 4
TRANSACTION = Transaction(
    transactional_id="tx",
    producer_id=42,
    producer_epoch=3,
    last_producer_id=-1,
    last_producer_epoch=-1,
    timeout_ms=60_000,
    state=TxnState.PREPARE_COMMIT,
    partitions=frozenset({("t", 0), ("t", 1), ("t", 2), ("gone", 0), (OFFSETS_TOPIC, 0)}),
    groups=frozenset({"g"}),
    start_ms=1,
    update_ms=2,
)


class Storage(ScriptedServicer, storage_pb2_grpc.StorageServiceServicer):
    """Answers each partition with the next code of its script (NONE once it is used up)."""

    def __init__(
        self, index: int, calls: list[int], script: dict[tuple[str, int], list[ErrorCode]]
    ):
        super().__init__(index, calls)
        self.script = script
        self.requests: list[storage_pb2.WriteTxnMarkersRequest] = []

    async def WriteTxnMarkers(
        self, request: storage_pb2.WriteTxnMarkersRequest, context: Any
    ) -> storage_pb2.WriteTxnMarkersResponse:
        self.called()
        self.requests.append(request)
        results = []
        for marker in request.markers:
            answers = []
            for tp in marker.partitions:
                codes = self.script.get((tp.topic, tp.partition), [])
                code = codes.pop(0) if codes else ErrorCode.NONE
                answers.append(
                    storage_pb2.TxnMarkerPartitionResult(
                        topic=tp.topic,
                        partition=tp.partition,
                        error_code=int(code),  # type: ignore[arg-type]
                    )
                )
            results.append(
                storage_pb2.TxnMarkerResult(producer_id=marker.producer_id, partitions=answers)
            )
        return storage_pb2.WriteTxnMarkersResponse(markers=results)


class Groups(ScriptedServicer, group_pb2_grpc.GroupCoordinatorServiceServicer):
    def __init__(self, index: int, calls: list[int], codes: list[ErrorCode]) -> None:
        super().__init__(index, calls)
        self.codes = codes
        self.requests: list[group_pb2.CompleteTransactionRequest] = []

    async def CompleteTransaction(
        self, request: group_pb2.CompleteTransactionRequest, context: Any
    ) -> group_pb2.CompleteTransactionResponse:
        self.called()
        self.requests.append(request)
        code = self.codes.pop(0) if self.codes else ErrorCode.NONE
        return group_pb2.CompleteTransactionResponse(error_code=int(code))  # type: ignore[arg-type]


def _internal(record: metadata_pb2.MetadataRecord) -> metadata_pb2.MetadataRecord:
    record.topic.internal = True
    return record


def _writer(ports: Sequence[int]) -> GrpcMarkerWriter:
    """Nodes 1 and 2 (storage: 1 leads t-0 and t-2, 2 leads t-1) and the group coordinator of
    __consumer_offsets-0 on the third port."""
    directory = CoordinatorDirectory()
    metadata = ClusterMetadata(directory)
    metadata.apply(
        controller_pb2.WatchMetadataResponse(
            snapshot=True,
            offset=0,
            records=[
                broker_record(1, ports[0]),
                broker_record(2, ports[1]),
                broker_record(COORDINATOR_ID, ports[2]),
                topic_record("t"),
                partition_record("t", 0, leader=1, replicas=(1,)),
                partition_record("t", 1, leader=2, replicas=(2,)),
                partition_record("t", 2, leader=1, replicas=(1,)),
                _internal(topic_record(OFFSETS_TOPIC)),
                partition_record(OFFSETS_TOPIC, 0, leader=1, replicas=(1,)),
            ],
        )
    )
    directory.assign(0, COORDINATOR_ID, 0)
    return GrpcMarkerWriter(metadata, directory, MarkerSettings(2_000, RetryBackoff(1, 5)))


def test_markers_go_once_per_leader_retried_until_written_and_groups_completed() -> None:
    async def scenario() -> None:
        calls: list[int] = []
        storage = [
            Storage(0, calls, {("t", 0): [ErrorCode.NOT_LEADER_OR_FOLLOWER]}),
            Storage(1, calls, {("t", 1): [ErrorCode.NOT_ENOUGH_REPLICAS]}),
        ]
        groups = Groups(2, calls, [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])

        def add(server: Any, index: int) -> None:
            if index < 2:
                storage_pb2_grpc.add_StorageServiceServicer_to_server(storage[index], server)  # type: ignore[no-untyped-call]
            else:
                group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(groups, server)  # type: ignore[no-untyped-call]

        async with serving(3, add) as ports:
            writer = _writer(ports)
            try:
                await writer.write_markers(TRANSACTION, COORDINATOR_EPOCH)
            finally:
                await writer.close()

        first = storage[0].requests[0].markers[0]
        assert (first.producer_id, first.producer_epoch, first.committed) == (42, 3, True)
        assert first.coordinator_epoch == COORDINATOR_EPOCH
        assert {(p.topic, p.partition) for p in first.partitions} == {("t", 0), ("t", 2)}
        # The retry carries only what is left; the deleted topic, and the internal one (the
        # storage nodes refuse markers there, so it would be retried for ever), are never
        # asked for.
        assert [
            [(p.topic, p.partition) for p in r.markers[0].partitions] for r in storage[0].requests
        ] == [
            [("t", 0), ("t", 2)],
            [("t", 0)],
        ]
        assert len(storage[1].requests) == 2
        assert [r.group_id for r in groups.requests] == ["g", "g"]
        completed = groups.requests[-1]
        assert (completed.producer_id, completed.producer_epoch, completed.committed) == (
            42,
            3,
            True,
        )
        assert (completed.coordinator_epoch, completed.transactional_id) == (
            COORDINATOR_EPOCH,
            "tx",
        )

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_fenced_answer_makes_that_marker_obsolete_and_the_others_are_written() -> None:
    """INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: a marker of a newer epoch has
    already ended the producer's transaction there; the partition (or group) is done, the
    writer goes on with the others and returns (the coordinator then completes)."""

    async def scenario() -> None:
        calls: list[int] = []
        storage = [
            Storage(
                0,
                calls,
                {
                    ("t", 0): [ErrorCode.TRANSACTION_COORDINATOR_FENCED],
                    ("t", 2): [ErrorCode.NOT_LEADER_OR_FOLLOWER],
                },
            ),
            Storage(1, calls, {("t", 1): [ErrorCode.INVALID_PRODUCER_EPOCH]}),
        ]
        groups = Groups(2, calls, [ErrorCode.INVALID_PRODUCER_EPOCH])

        def add(server: Any, index: int) -> None:
            if index < 2:
                storage_pb2_grpc.add_StorageServiceServicer_to_server(storage[index], server)  # type: ignore[no-untyped-call]
            else:
                group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(groups, server)  # type: ignore[no-untyped-call]

        async with serving(3, add) as ports:
            writer = _writer(ports)
            try:
                await writer.write_markers(TRANSACTION, COORDINATOR_EPOCH)
            finally:
                await writer.close()

        # t-0 and t-1 are asked once; t-2 again until written; the group once.
        assert [
            [(p.topic, p.partition) for p in r.markers[0].partitions] for r in storage[0].requests
        ] == [[("t", 0), ("t", 2)], [("t", 2)]]
        assert len(storage[1].requests) == 1
        assert len(groups.requests) == 1

    asyncio.run(asyncio.wait_for(scenario(), 30))
