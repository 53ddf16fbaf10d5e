"""The storage node takes writes to internal topics, and batches with the producer ids
reserved for the group coordinators, only from produce requests whose origin is a coordinator,
and never as a transaction marker (in-process node, real logs).
tests/integration/test_internal_topic_writes.py proves the same against a real cluster and
through the Kafka gateway."""

from __future__ import annotations

from pathlib import Path

from storage_node_support import (
    NODE_ID,
    QueueMetadataSource,
    batch,
    broker_record,
    partition_record,
    produce_request,
    run,
    running_node,
    snapshot,
    topic_record,
)

from brook.errors import ErrorCode, error_code
from brook.record import BatchBuilder
from brook.reserved import RESERVED_PRODUCER_ID_BASE
from brook.v1 import common_pb2, metadata_pb2, storage_pb2, storage_pb2_grpc

OFFSETS_TOPIC = "__consumer_offsets"


def _source(port: int) -> QueueMetadataSource:
    internal = metadata_pb2.MetadataRecord(
        topic=metadata_pb2.TopicRecord(
            name=OFFSETS_TOPIC, topic_id=OFFSETS_TOPIC.encode()[:16], internal=True
        )
    )
    return QueueMetadataSource(
        snapshot(
            broker_record(NODE_ID, port),
            internal,
            partition_record(OFFSETS_TOPIC, 0, topic_id=OFFSETS_TOPIC.encode()[:16]),
            topic_record("orders"),
            partition_record("orders", 0),
        )
    )


def _reserved_batch(partition: int = 0) -> bytes:
    builder = BatchBuilder(
        producer_id=RESERVED_PRODUCER_ID_BASE + partition, producer_epoch=0, base_sequence=0
    )
    builder.append(None, b"k", b"v", [])
    return builder.build()


async def _latest(stub: storage_pb2_grpc.StorageServiceStub, topic: str) -> int:
    answer = await stub.ListOffsets(
        storage_pb2.ListOffsetsRequest(
            partitions=[
                storage_pb2.ListOffsetsPartition(
                    topic=topic, partition=0, spec=storage_pb2.OFFSET_SPEC_LATEST
                )
            ]
        )
    )
    return int(answer.partitions[0].offset)


def _as_coordinator(request: storage_pb2.ProduceRequest) -> storage_pb2.ProduceRequest:
    request.origin = storage_pb2.PRODUCE_ORIGIN_COORDINATOR
    return request


def test_an_internal_topic_takes_writes_only_from_the_coordinator_origin(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, source_for=_source) as node:
            refused = [
                (await node.stub.Produce(produce_request(OFFSETS_TOPIC, 0, data))).partitions[0]
                for data in (batch(2), _reserved_batch())
            ]
            # acks=0 reports nothing, but must not append either.
            await node.stub.Produce(
                produce_request(OFFSETS_TOPIC, 0, batch(1), acks=storage_pb2.ACKS_NONE)
            )
            assert await _latest(node.stub, OFFSETS_TOPIC) == 0

            accepted = await node.stub.Produce(
                _as_coordinator(produce_request(OFFSETS_TOPIC, 0, _reserved_batch()))
            )

            for answer in refused:
                assert error_code(answer.error_code) is ErrorCode.INVALID_TOPIC_EXCEPTION
                assert f"{OFFSETS_TOPIC} is an internal topic" in answer.error_message
            assert error_code(accepted.partitions[0].error_code) is ErrorCode.NONE
            assert await _latest(node.stub, OFFSETS_TOPIC) == 1

    run(scenario)


def test_a_reserved_producer_id_is_refused_to_clients_on_any_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, source_for=_source) as node:
            refused = await node.stub.Produce(
                produce_request("orders", 0, batch(1) + _reserved_batch(3))
            )
            answer = refused.partitions[0]
            assert error_code(answer.error_code) is ErrorCode.INVALID_RECORD
            assert [e.index for e in answer.batch_errors] == [1]
            assert await _latest(node.stub, "orders") == 0

            plain = await node.stub.Produce(produce_request("orders", 0, batch(1)))
            assert error_code(plain.partitions[0].error_code) is ErrorCode.NONE
            assert await _latest(node.stub, "orders") == 1

    run(scenario)


def test_a_marker_may_not_go_to_an_internal_topic_nor_carry_a_reserved_producer_id(
    tmp_path: Path,
) -> None:
    """Anyone may send WriteTxnMarkers (the gateway forwards a Kafka client's): a marker with
    a coordinator's producer id at the top epoch would fence that coordinator for good, and a
    marker in __consumer_offsets would end its log with a batch that is not the owner's."""

    def marker(producer_id: int, *partitions: tuple[str, int]) -> storage_pb2.TxnMarker:
        return storage_pb2.TxnMarker(
            producer_id=producer_id,
            producer_epoch=32767,
            committed=False,
            coordinator_epoch=-1,
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions],
        )

    async def scenario() -> None:
        async with running_node(tmp_path, source_for=_source) as node:
            answer = await node.stub.WriteTxnMarkers(
                storage_pb2.WriteTxnMarkersRequest(
                    markers=[
                        marker(RESERVED_PRODUCER_ID_BASE, (OFFSETS_TOPIC, 0), ("orders", 0)),
                        marker(7, (OFFSETS_TOPIC, 0)),
                    ]
                )
            )
            codes = [[error_code(p.error_code) for p in m.partitions] for m in answer.markers]
            assert codes == [
                [ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_RECORD],
                [ErrorCode.INVALID_TOPIC_EXCEPTION],
            ]
            assert await _latest(node.stub, OFFSETS_TOPIC) == 0
            assert await _latest(node.stub, "orders") == 0

            # The coordinator of __consumer_offsets-0 (epoch 0) is not fenced.
            written = await node.stub.Produce(
                _as_coordinator(produce_request(OFFSETS_TOPIC, 0, _reserved_batch()))
            )
            assert error_code(written.partitions[0].error_code) is ErrorCode.NONE

    run(scenario)
