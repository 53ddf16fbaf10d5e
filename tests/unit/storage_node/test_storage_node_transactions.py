"""Transactions at the storage node's API, in-process (one node, static topics):
WriteTxnMarkers' request checks, DescribeProducers, a READ_COMMITTED long poll that
waits for the last stable offset rather than the high watermark, and transaction verification
with no coordinator to verify with."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage_node_support import fetch_request, produce_request, run, running_node

from brook.errors import ErrorCode, error_code
from brook.record import build_batch
from brook.v1 import common_pb2, storage_pb2

LONG_WAIT_MS = 10_000
WAIT_S = 10.0
POLL_S = 0.01
NOW_MS = 1_700_000_000_000
PID = 77


def _settings(verification: bool = False) -> dict[str, str]:
    """The node's settings. The tests play the transaction coordinator (markers by hand), so
    there is none to verify transactional batches with, unless ``verification``."""
    return {
        "static.topics": "txn:1",
        "message.timestamp.difference.max.ms": str(2**62),
        "transaction.partition.verification.enable": str(verification).lower(),
    }


def _batch(value: bytes, *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return build_batch(
        [(NOW_MS, None, value, ())],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
    )


def _marker(
    partitions: list[tuple[str, int]], *, epoch: int = 0, committed: bool = True
) -> storage_pb2.TxnMarker:
    return storage_pb2.TxnMarker(
        producer_id=PID,
        producer_epoch=epoch,
        committed=committed,
        coordinator_epoch=0,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions],
    )


def _codes(response: storage_pb2.WriteTxnMarkersResponse) -> list[list[ErrorCode]]:
    return [[error_code(p.error_code) for p in m.partitions] for m in response.markers]


def test_write_txn_markers_refuses_what_no_marker_can_carry(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_settings()) as node:
            invalid = ErrorCode.INVALID_REQUEST
            answer = await node.stub.WriteTxnMarkers(
                storage_pb2.WriteTxnMarkersRequest(
                    markers=[
                        _marker([("txn", 0)], epoch=40_000),
                        _marker([("txn", 0), ("txn", 0)]),
                        _marker([("", 0), ("txn", -1)]),
                    ]
                )
            )
            assert _codes(answer) == [[invalid], [invalid, invalid], [invalid, invalid]]
            negative = await node.stub.WriteTxnMarkers(
                storage_pb2.WriteTxnMarkersRequest(markers=[_marker([("txn", 0)])], timeout_ms=-1)
            )
            assert _codes(negative) == [[invalid]]
            fetched = await node.stub.Fetch(fetch_request("txn", 0, 0))
            assert fetched.partitions[0].high_watermark == 0, "nothing was appended"
            described = await node.stub.DescribeProducers(
                storage_pb2.DescribeProducersRequest(
                    partitions=[common_pb2.TopicPartition(topic="nope", partition=0)]
                )
            )
            [unknown] = described.partitions
            assert error_code(unknown.error_code) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario)


def test_a_read_committed_long_poll_waits_for_the_lso_not_the_hw(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_settings()) as node:
            txn = await node.stub.Produce(
                produce_request("txn", 0, _batch(b"in-txn", pid=PID, seq=0, txn=True))
            )
            assert error_code(txn.partitions[0].error_code) is ErrorCode.NONE
            request = fetch_request("txn", 0, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=1, decode=True)
            request.isolation_level = common_pb2.ISOLATION_LEVEL_READ_COMMITTED
            waiting = asyncio.ensure_future(node.stub.Fetch(request))
            replicas = node.node.replicas
            assert replicas is not None
            partition = replicas.leader_partition("txn", 0)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while not list(partition.listeners):
                assert loop.time() < deadline, "the long poll never parked"
                await asyncio.sleep(POLL_S)
            # Data past the open transaction moves the HW, not the LSO: the poll stays parked.
            plain = await node.stub.Produce(produce_request("txn", 0, _batch(b"plain")))
            assert error_code(plain.partitions[0].error_code) is ErrorCode.NONE
            assert (partition.high_watermark, partition.last_stable_offset) == (2, 0)
            assert not waiting.done()
            described = await node.stub.DescribeProducers(
                storage_pb2.DescribeProducersRequest(
                    partitions=[common_pb2.TopicPartition(topic="txn", partition=0)]
                )
            )
            [producer] = described.partitions[0].producers
            assert (producer.producer_id, producer.current_txn_start_offset) == (PID, 0)
            assert (producer.last_sequence, producer.coordinator_epoch) == (0, -1)
            written = await node.stub.WriteTxnMarkers(
                storage_pb2.WriteTxnMarkersRequest(markers=[_marker([("txn", 0)])])
            )
            assert _codes(written) == [[ErrorCode.NONE]]
            fetched = (await asyncio.wait_for(waiting, WAIT_S)).partitions[0]
            assert fetched.last_stable_offset == fetched.high_watermark == 3
            assert [r.value for r in fetched.decoded_records] == [b"in-txn", b"plain"]

    run(scenario)


def test_an_unverifiable_transactional_batch_opens_no_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_settings(verification=True)) as node:
            batch = _batch(b"in-txn", pid=PID, seq=0, txn=True)
            # No transactional id: nothing to verify with (Kafka's log refuses it too).
            anonymous = await node.stub.Produce(produce_request("txn", 0, batch))
            assert error_code(anonymous.partitions[0].error_code) is ErrorCode.INVALID_TXN_STATE
            # No coordinator answers within the request's timeout: retriable, not appended.
            request = produce_request("txn", 0, batch)
            request.transactional_id = "tx"
            request.timeout_ms = 500
            unverified = await node.stub.Produce(request)
            assert error_code(unverified.partitions[0].error_code) is (
                ErrorCode.NOT_ENOUGH_REPLICAS
            )
            # Idempotent batches are not concerned.
            plain = await node.stub.Produce(
                produce_request("txn", 0, _batch(b"plain", pid=PID + 1, seq=0))
            )
            assert error_code(plain.partitions[0].error_code) is ErrorCode.NONE
            fetched = await node.stub.Fetch(fetch_request("txn", 0, 0))
            assert fetched.partitions[0].high_watermark == 1, "only the idempotent batch"

    run(scenario)
