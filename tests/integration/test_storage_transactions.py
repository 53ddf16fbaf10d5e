"""Transactions on the storage nodes (issue #16), with real processes: transactional batches
through Produce, markers through WriteTxnMarkers, READ_COMMITTED Fetch and ListOffsets, and a
leader killed between a transaction's data and its marker.

Batches are built by hand (brook/record/records.py, is_transactional=True) and sent with raw
gRPC, so each test knows every offset; the transaction coordinator's part is played by the
test, which sends the markers itself. There is no coordinator to verify transactional batches
with, so the storage nodes run with transaction.partition.verification.enable=false
(verification has its own test, test_txn_verification_cluster.py).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from cluster_fixture import ClusterFactory, replication_cluster, wait_until
from storage_rpc import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    RPC_TIMEOUT_S,
    batch,
    code_of,
    fetch,
    first_answer,
    leader_address,
    node_names,
    produce,
    storage_stub,
    values,
)

from brook.client.admin import Admin, NewTopic
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.v1 import common_pb2, storage_pb2

pytestmark = pytest.mark.integration

WAIT_TIMEOUT_S = 40.0
POLL_S = 0.05


def _wait(condition: Callable[[], bool], what: str) -> float:
    return wait_until(condition, what, WAIT_TIMEOUT_S, POLL_S)


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Generator[ClusterFactory, None, None]:
    built = ClusterFactory(Path(tmp_path_factory.mktemp("txn-storage")) / "clusters")
    try:
        replication_cluster(
            built,
            controllers=1,
            session_timeout_ms=2000,
            heartbeat_interval_ms=200,
            lag_time_max_ms=2000,
            storage_node_config={"transaction.partition.verification.enable": "false"},
        )
        yield built
    finally:
        built.close(keep_files=False)


def _create_topic(cluster: LocalCluster, topic: str, partitions: int) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics(
            [NewTopic(topic, partitions, 3, configs={"min.insync.replicas": "2"})]
        )
        assert created == {topic: None}

        def ready() -> bool:
            described = admin.describe_topics([topic])[topic].partitions
            return all(p.leader is not None and len(p.isr) == 3 for p in described)

        _wait(ready, f"{topic} to have leaders and full ISRs")
    for partition in range(partitions):
        _wait(
            lambda p=partition: (
                _list_latest(leader_address(cluster, topic, p), topic, p)[0] is ErrorCode.NONE
            ),
            f"{topic}-{partition}'s leader to serve it",
        )


def _producer_id(address: str) -> int:
    request = storage_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while True:
        response = storage_stub(address).InitProducerId(request, timeout=RPC_TIMEOUT_S)
        if code_of(response) is ErrorCode.NONE:
            return int(response.producer_id)
        assert code_of(response) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, response.error_message
        assert time.monotonic() < deadline, "no producer id"
        time.sleep(POLL_S)


def _marker(
    pid: int,
    committed: bool,
    partitions: list[tuple[str, int]],
    *,
    epoch: int = 0,
    coordinator_epoch: int = 0,
) -> storage_pb2.TxnMarker:
    return storage_pb2.TxnMarker(
        producer_id=pid,
        producer_epoch=epoch,
        committed=committed,
        coordinator_epoch=coordinator_epoch,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions],
    )


def _write_markers(address: str, *markers: storage_pb2.TxnMarker) -> list[list[Any]]:
    response = storage_stub(address).WriteTxnMarkers(
        storage_pb2.WriteTxnMarkersRequest(markers=markers), timeout=RPC_TIMEOUT_S
    )
    return [list(result.partitions) for result in response.markers]


def _list_latest(
    address: str,
    topic: str,
    partition: int,
    isolation: common_pb2.IsolationLevel = READ_UNCOMMITTED,
) -> tuple[ErrorCode, int]:
    target = storage_pb2.ListOffsetsPartition(
        topic=topic, partition=partition, spec=storage_pb2.OFFSET_SPEC_LATEST
    )
    request = storage_pb2.ListOffsetsRequest(isolation_level=isolation, partitions=[target])
    response = first_answer(address, "ListOffsets", request)
    return code_of(response), int(response.offset)


def test_read_committed_stops_at_open_transactions_and_markers_end_them(
    factory: ClusterFactory,
) -> None:
    cluster = factory.clusters[0]
    topic = "txn-two"
    _create_topic(cluster, topic, 2)
    p0, p1 = leader_address(cluster, topic, 0), leader_address(cluster, topic, 1)
    pid = _producer_id(p0)
    assert code_of(produce(p0, topic, 0, batch([b"plain-0"]))) is ErrorCode.NONE  # offset 0
    txn_0 = produce(p0, topic, 0, batch([b"t0-a", b"t0-b"], pid, 0, txn=True))  # 1-2
    txn_1 = produce(p1, topic, 1, batch([b"t1-a", b"t1-b"], pid, 0, txn=True))  # 0-1
    assert (code_of(txn_0), txn_0.base_offset) == (ErrorCode.NONE, 1)
    assert (code_of(txn_1), txn_1.base_offset) == (ErrorCode.NONE, 0)
    assert code_of(produce(p0, topic, 0, batch([b"plain-3"]))) is ErrorCode.NONE  # offset 3

    # The open transaction holds READ_COMMITTED readers at its first offset.
    before = fetch(p0, topic, 0, 0, READ_COMMITTED, decode=True)
    assert (before.high_watermark, before.last_stable_offset) == (4, 1)
    assert values(before) == [b"plain-0"] and before.next_fetch_offset == 1
    assert fetch(p0, topic, 0, 1, READ_COMMITTED).records == b""
    assert _list_latest(p0, topic, 0, READ_COMMITTED) == (ErrorCode.NONE, 1)
    assert _list_latest(p0, topic, 0) == (ErrorCode.NONE, 4)
    assert fetch(p1, topic, 1, 0, READ_COMMITTED).last_stable_offset == 0
    # A non-transactional batch of the producer while its transaction is open.
    refused = produce(p0, topic, 0, batch([b"stray"], pid, 2))
    assert code_of(refused) is ErrorCode.INVALID_TXN_STATE, refused.error_message
    described = first_answer(
        p0,
        "DescribeProducers",
        storage_pb2.DescribeProducersRequest(
            partitions=[common_pb2.TopicPartition(topic=topic, partition=0)]
        ),
    )
    assert [(p.producer_id, p.current_txn_start_offset) for p in described.producers] == [(pid, 1)]

    # Markers from an older epoch, or to a node that does not lead, change nothing.
    follower = next(
        cluster.grpc_address(name)
        for name in cluster.names(Role.STORAGE_NODE)
        if cluster.grpc_address(name) != p0
    )
    [[not_leader]] = _write_markers(follower, _marker(pid, False, [(topic, 0)]))
    assert code_of(not_leader) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert cluster.grpc_address(node_names(cluster)[not_leader.current_leader.leader_id]) == p0
    [[unknown]] = _write_markers(p0, _marker(pid, False, [("no-such-topic", 0)]))
    assert code_of(unknown) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # ABORT on partition 0, COMMIT on partition 1, each sent to its leader.
    [[aborted]] = _write_markers(p0, _marker(pid, False, [(topic, 0)], coordinator_epoch=3))
    [[committed]] = _write_markers(p1, _marker(pid, True, [(topic, 1)], coordinator_epoch=3))
    assert code_of(aborted) is ErrorCode.NONE, aborted.error_message
    assert code_of(committed) is ErrorCode.NONE, committed.error_message

    after = fetch(p0, topic, 0, 0, READ_COMMITTED)
    assert after.high_watermark == after.last_stable_offset == 5  # the marker is offset 4
    assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(pid, 1)]
    decoded = fetch(p0, topic, 0, 0, READ_COMMITTED, decode=True)
    assert values(decoded) == [b"plain-0", b"plain-3"]
    assert values(fetch(p0, topic, 0, 0, READ_UNCOMMITTED, decode=True)) == [
        b"plain-0",
        b"t0-a",
        b"t0-b",
        b"plain-3",
    ]
    assert list(fetch(p0, topic, 0, 0, READ_UNCOMMITTED).aborted_transactions) == []
    assert _list_latest(p0, topic, 0, READ_COMMITTED) == (ErrorCode.NONE, 5)
    stream = storage_stub(p0).Subscribe(
        storage_pb2.SubscribeRequest(
            isolation_level=READ_COMMITTED,
            decode_records=True,
            partitions=[
                storage_pb2.SubscribePartition(
                    topic=topic, partition=0, start=storage_pb2.OFFSET_SPEC_OFFSET, offset=0
                )
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    pushed = next(iter(stream)).partitions[0]
    stream.cancel()
    assert values(pushed) == [b"plain-0", b"plain-3"] and pushed.last_stable_offset == 5
    on_1 = fetch(p1, topic, 1, 0, READ_COMMITTED, decode=True)
    assert on_1.last_stable_offset == 3 and list(on_1.aborted_transactions) == []
    assert values(on_1) == [b"t1-a", b"t1-b"]

    # The coordinator epoch only moves forward; the producer epoch too.
    [[fenced]] = _write_markers(p0, _marker(pid, True, [(topic, 0)], coordinator_epoch=2))
    assert code_of(fenced) is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    [[bumped]] = _write_markers(p0, _marker(pid, False, [(topic, 0)], epoch=1, coordinator_epoch=3))
    assert code_of(bumped) is ErrorCode.NONE
    [[old_epoch]] = _write_markers(p0, _marker(pid, False, [(topic, 0)], coordinator_epoch=3))
    assert code_of(old_epoch) is ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_new_leader_holds_the_lso_at_an_open_transaction_and_its_marker_completes_it(
    factory: ClusterFactory,
) -> None:
    cluster = factory.clusters[0]
    topic = "txn-failover"
    _create_topic(cluster, topic, 1)
    old_leader = leader_address(cluster, topic, 0)
    pid = _producer_id(old_leader)
    for records in (
        batch([b"before"]),
        batch([b"in-txn-a", b"in-txn-b"], pid, 0, txn=True),
        batch([b"after"]),
    ):
        assert code_of(produce(old_leader, topic, 0, records)) is ErrorCode.NONE
    assert fetch(old_leader, topic, 0, 0, READ_COMMITTED).last_stable_offset == 1
    victim = next(
        name
        for name in cluster.names(Role.STORAGE_NODE)
        if cluster.grpc_address(name) == old_leader
    )
    cluster.kill(victim, signal.SIGKILL)
    cluster.wait(victim, 10_000)
    try:
        _wait(lambda: leader_address(cluster, topic, 0) != old_leader, "a new leader")
        new_leader = leader_address(cluster, topic, 0)

        def caught_up() -> bool:
            answer = fetch(new_leader, topic, 0, 0, READ_COMMITTED, check=False)
            return code_of(answer) is ErrorCode.NONE and answer.high_watermark == 4

        _wait(caught_up, "the new leader's high watermark to reach the acknowledged records")
        held = fetch(new_leader, topic, 0, 0, READ_COMMITTED, decode=True)
        assert held.last_stable_offset == 1 and values(held) == [b"before"]
        # A READ_COMMITTED long poll at the LSO waits for the LSO, not the HW (past it).
        long_poll = storage_stub(new_leader).Fetch.future(
            storage_pb2.FetchRequest(
                max_wait_ms=int(RPC_TIMEOUT_S * 1000) // 2,
                min_bytes=1,
                isolation_level=READ_COMMITTED,
                decode_records=True,
                partitions=[storage_pb2.FetchPartition(topic=topic, partition=0, fetch_offset=1)],
            ),
            timeout=RPC_TIMEOUT_S,
        )
        [[result]] = _write_markers(new_leader, _marker(pid, True, [(topic, 0)]))
        assert code_of(result) is ErrorCode.NONE, result.error_message
        woken = long_poll.result().partitions[0]
        assert woken.last_stable_offset == 5
        assert values(woken) == [b"in-txn-a", b"in-txn-b", b"after"]
        done = fetch(new_leader, topic, 0, 0, READ_COMMITTED, decode=True)
        assert done.last_stable_offset == done.high_watermark == 5
        assert values(done) == [b"before", b"in-txn-a", b"in-txn-b", b"after"]
        assert list(done.aborted_transactions) == []
    finally:
        factory.start(cluster, victim)
