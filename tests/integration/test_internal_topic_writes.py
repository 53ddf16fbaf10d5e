"""Clients cannot write __consumer_offsets or pass for a group coordinator, in a real cluster
(one controller, storage node, coordinator and gateway as processes).

The coordinators write __consumer_offsets partition p as producer id 2**62 + p and fence each
other with its epoch; a foreign batch there, or a client batch with such an id anywhere,
would break their reloads or fence them for good. The storage node refuses both unless the
produce says it comes from a coordinator (ProduceRequest.origin), whatever path the client
takes: raw gRPC, or a Kafka client through the gateway, which never sets the origin.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from cluster_fixture import ClusterFactory, wait_until

from brook.client import Admin, NewTopic, TopicPartition
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster
from brook.record import BatchBuilder
from brook.reserved import RESERVED_PRODUCER_ID_BASE
from brook.v1 import common_pb2, storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

OFFSETS_TOPIC = "__consumer_offsets"
TOPIC = "orders"
STORAGE_NODE = "storage-node-1"
RPC_TIMEOUT_S = 10.0
WAIT_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_MS = 20_000
PRODUCE_TIMEOUT_MS = 5_000
GROUP = "internal-writes"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("internal-writes"))
    try:
        started = factory(
            controllers=1,
            storage_nodes=1,
            group_coordinators=1,
            gateways=1,
            config_overrides={
                "controller": {
                    "offsets.topic.num.partitions": "1",
                    "offsets.topic.replication.factor": "1",
                },
                "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
            },
        )
        with Admin(started.controller_bootstrap_servers) as admin:
            assert admin.create_topics([NewTopic(TOPIC, 1, 1)]) == {TOPIC: None}
        yield started
    finally:
        factory.close(keep_files=False)


@pytest.fixture
def storage(cluster: LocalCluster) -> Iterator[storage_pb2_grpc.StorageServiceStub]:
    channel = grpc.insecure_channel(cluster.grpc_address(STORAGE_NODE))
    try:
        yield storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
    finally:
        channel.close()


def _batch(producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    builder = BatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
    )
    builder.append(None, b"key", b"forged", [])
    return builder.build()


def _latest_offset(stub: storage_pb2_grpc.StorageServiceStub, topic: str) -> int:
    """The partition's high watermark, once its leader answers."""

    found: list[int] = []

    def ask() -> bool:
        answer = stub.ListOffsets(
            storage_pb2.ListOffsetsRequest(
                partitions=[
                    storage_pb2.ListOffsetsPartition(
                        topic=topic, partition=0, spec=storage_pb2.OFFSET_SPEC_LATEST
                    )
                ]
            ),
            timeout=RPC_TIMEOUT_S,
        ).partitions[0]
        if error_code(answer.error_code) is not ErrorCode.NONE:
            return False
        found.append(int(answer.offset))
        return True

    wait_until(ask, f"{topic}-0 to answer ListOffsets", WAIT_TIMEOUT_S)
    return found[-1]


def _produce(
    stub: storage_pb2_grpc.StorageServiceStub, topic: str, records: bytes
) -> storage_pb2.PartitionProduceResponse:
    response: storage_pb2.ProduceResponse = stub.Produce(
        storage_pb2.ProduceRequest(
            acks=storage_pb2.ACKS_ALL,
            timeout_ms=PRODUCE_TIMEOUT_MS,
            partitions=[
                storage_pb2.PartitionProduceData(topic=topic, partition=0, records=records)
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return response.partitions[0]


def test_raw_grpc_produce_to_consumer_offsets_is_refused_and_appends_nothing(
    storage: storage_pb2_grpc.StorageServiceStub,
) -> None:
    before = _latest_offset(storage, OFFSETS_TOPIC)

    plain = _produce(storage, OFFSETS_TOPIC, _batch())
    # Even a batch that looks like the coordinator's own: the origin, not the id, decides.
    as_coordinator = _produce(
        storage, OFFSETS_TOPIC, _batch(RESERVED_PRODUCER_ID_BASE, 32767, base_sequence=0)
    )
    records = storage.ProduceRecords(
        storage_pb2.ProduceRecordsRequest(
            acks=storage_pb2.ACKS_ALL,
            timeout_ms=PRODUCE_TIMEOUT_MS,
            partitions=[
                storage_pb2.PartitionRecords(
                    topic=OFFSETS_TOPIC, partition=0, records=[common_pb2.Record(value=b"forged")]
                )
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    ).partitions[0]

    for answer in (plain, as_coordinator, records):
        assert error_code(answer.error_code) is ErrorCode.INVALID_TOPIC_EXCEPTION
        assert "internal topic" in answer.error_message
        assert answer.base_offset == -1
    assert _latest_offset(storage, OFFSETS_TOPIC) == before


def test_a_batch_with_a_reserved_producer_id_is_refused_on_a_client_topic(
    storage: storage_pb2_grpc.StorageServiceStub,
) -> None:
    before = _latest_offset(storage, TOPIC)
    # A normal batch first, then the forged one: the whole entry is refused.
    records = _batch() + _batch(RESERVED_PRODUCER_ID_BASE + 1, 0, base_sequence=0)

    answer = _produce(storage, TOPIC, records)

    assert error_code(answer.error_code) is ErrorCode.INVALID_RECORD
    assert f"producer id {RESERVED_PRODUCER_ID_BASE + 1}" in answer.error_message
    assert [e.index for e in answer.batch_errors] == [1]
    assert _latest_offset(storage, TOPIC) == before
    # The topic itself still takes client writes.
    accepted = _produce(storage, TOPIC, _batch())
    assert error_code(accepted.error_code) is ErrorCode.NONE
    assert _latest_offset(storage, TOPIC) == before + 1


def test_a_kafka_client_producing_to_consumer_offsets_through_the_gateway_gets_the_error(
    cluster: LocalCluster, storage: storage_pb2_grpc.StorageServiceStub
) -> None:
    from confluent_kafka import KafkaError, Producer

    before = _latest_offset(storage, OFFSETS_TOPIC)
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "message.timeout.ms": CLIENT_TIMEOUT_MS,
            "socket.timeout.ms": CLIENT_TIMEOUT_MS,
            "enable.idempotence": False,
        }
    )
    producer.produce(
        OFFSETS_TOPIC, value=b"forged", partition=0, on_delivery=lambda e, _: errors.append(e)
    )
    deadline = time.monotonic() + CLIENT_TIMEOUT_MS / 1000 + WAIT_TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)

    assert len(errors) == 1, "no delivery report"
    assert errors[0] is not None, "the produce to __consumer_offsets was accepted"
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION == int(ErrorCode.INVALID_TOPIC_EXCEPTION)
    assert _latest_offset(storage, OFFSETS_TOPIC) == before


def test_the_coordinator_still_commits_and_fetches_offsets(cluster: LocalCluster) -> None:
    partition = TopicPartition(TOPIC, 0)
    with Admin(
        cluster.controller_bootstrap_servers, default_api_timeout_ms=CLIENT_TIMEOUT_MS
    ) as admin:
        assert admin.alter_consumer_group_offsets(GROUP, {partition: 7}) == {partition: None}
        committed = admin.list_consumer_group_offsets(GROUP, [partition])
    assert committed[partition].offset == 7
