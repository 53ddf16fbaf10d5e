"""Raw gRPC to the storage nodes for tests that need to know every offset: hand-built
batches (brook/record, transactional or not) produced to a partition's leader, and Fetch
answers read back per isolation level (issue #16's tests of markers and the last stable
offset)."""

from __future__ import annotations

import time
from typing import Any, Final

import grpc

from brook.client.admin import Admin
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.record import build_batch
from brook.v1 import common_pb2, storage_pb2, storage_pb2_grpc

RPC_TIMEOUT_S: Final = 10.0
FETCH_BYTES_MAX: Final = 1 << 20
READ_COMMITTED: Final = common_pb2.ISOLATION_LEVEL_READ_COMMITTED
READ_UNCOMMITTED: Final = common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED


def storage_stub(address: str) -> Any:
    """A StorageService stub on a channel of its own to ``address``."""
    return storage_pb2_grpc.StorageServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]


def code_of(response: Any) -> ErrorCode:
    return error_code(response.error_code)


def node_names(cluster: LocalCluster) -> dict[int, str]:
    """Storage node id -> process name."""
    return {cluster.spec(name).node_id: name for name in cluster.names(Role.STORAGE_NODE)}


def leader_address(cluster: LocalCluster, topic: str, partition: int) -> str:
    """The gRPC address of the partition's leader, as the controllers name it."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[partition].leader
    assert leader is not None
    return cluster.grpc_address(node_names(cluster)[leader])


def batch(
    values: list[bytes], pid: int = -1, seq: int = -1, *, epoch: int = 0, txn: bool = False
) -> bytes:
    """A batch of ``values`` (no keys, no headers), from producer ``pid`` at ``epoch`` with
    base sequence ``seq`` (pid -1: no producer), transactional when ``txn``."""
    now_ms = int(time.time() * 1000)
    return build_batch(
        [(now_ms, None, value, []) for value in values],
        producer_id=pid,
        producer_epoch=epoch if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
    )


def first_answer(address: str, method: str, request: Any) -> Any:
    """The first per-partition answer of a one-partition call."""
    return getattr(storage_stub(address), method)(request, timeout=RPC_TIMEOUT_S).partitions[0]


def produce(
    address: str, topic: str, partition: int, records: bytes, transactional_id: str = ""
) -> Any:
    """``records`` produced with acks=all; the partition's answer. A transactional batch
    carries its producer's ``transactional_id``, which the leader verifies it with (KIP-890)."""
    data = storage_pb2.PartitionProduceData(topic=topic, partition=partition, records=records)
    request = storage_pb2.ProduceRequest(
        acks=storage_pb2.ACKS_ALL, partitions=[data], transactional_id=transactional_id
    )
    return first_answer(address, "Produce", request)


def fetch(
    address: str,
    topic: str,
    partition: int,
    offset: int,
    isolation: common_pb2.IsolationLevel,
    *,
    decode: bool = False,
    check: bool = True,
) -> Any:
    """One partition's Fetch answer (no long poll); ``check``: assert it has no error."""
    target = storage_pb2.FetchPartition(topic=topic, partition=partition, fetch_offset=offset)
    request = storage_pb2.FetchRequest(
        max_bytes=FETCH_BYTES_MAX,
        isolation_level=isolation,
        decode_records=decode,
        partitions=[target],
    )
    response = first_answer(address, "Fetch", request)
    assert not check or code_of(response) is ErrorCode.NONE, response.error_message
    return response


def values(response: Any) -> list[bytes]:
    """The values of a decoded Fetch (or Subscribe) answer's records."""
    return [record.value for record in response.decoded_records]


def delete_records(cluster: LocalCluster, topic: str, partition: int, before: int) -> int:
    """DeleteRecords of every record of the partition below offset ``before`` (retention's
    effect, on demand); the partition's new log start offset."""
    request = storage_pb2.DeleteRecordsRequest(
        partitions=[
            storage_pb2.DeleteRecordsPartition(topic=topic, partition=partition, offset=before)
        ],
        timeout_ms=int(RPC_TIMEOUT_S * 1000),
    )
    answer = first_answer(leader_address(cluster, topic, partition), "DeleteRecords", request)
    assert code_of(answer) is ErrorCode.NONE, answer.error_message
    return int(answer.low_watermark)
