"""The transaction coordinator in a real cluster (controllers, storage nodes and two
coordinators as processes), over raw gRPC (brook.v1.TransactionCoordinatorService).

__transaction_state (4 partitions here) is created by the controllers and each partition is
owned by the coordinator owning __consumer_offsets partition (p % 2). The tests prove
FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn and DescribeTransactions through
gRPC, fencing by epoch, that a coordinator killed -9 with a transaction decided
(PrepareCommit) is succeeded by the other one, which completes that transaction, and that a
transaction whose markers the partitions refuse as fenced (an operator's abort wrote there
with newer epochs) is still completed.

Each transaction writes a transactional record to every partition it adds (raw Produce to
the storage nodes, tests/storage_rpc.py); a committed transaction must reach CompleteCommit,
and its markers are checked where they matter, with READ_COMMITTED fetches: before the
commit the last stable offset holds readers before the record, after it the record is
visible and the last stable offset has passed the marker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc
import pytest
from brook_group_coordinator.ownership import transaction_state_partition_for
from cluster_fixture import ClusterFactory, coordinator_owners
from coordinator_client import RPC_TIMEOUT_S, CoordinatorClient, wait_for
from storage_rpc import READ_COMMITTED, batch, code_of, fetch, leader_address, produce, values

from brook.client import Admin, TopicPartition
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    group_pb2,
    transaction_pb2,
    transaction_pb2_grpc,
)

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 2
TXN_PARTITIONS = 4
STORAGE_NODES = 2
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 200
WAIT_TIMEOUT_S = 60.0
TOPIC = "payments"
TXN_TIMEOUT_MS = 60_000
_TRANSIENT = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)
_R = TypeVar("_R")


def _cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    session = str(SESSION_TIMEOUT_MS)
    heartbeat = str(HEARTBEAT_INTERVAL_MS)
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=STORAGE_NODES,
        group_coordinators=2,
        gateways=0,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": session,
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "offsets.topic.replication.factor": str(STORAGE_NODES),
                "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
                "transaction.state.log.replication.factor": str(STORAGE_NODES),
            },
            "storage-node": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
            },
            "group-coordinator": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
                "retry.backoff.max.ms": "500",
            },
        },
    )
    with grpc.insecure_channel(cluster.controller_bootstrap_servers.split(",")[0]) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        created = admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreatableTopic(name=TOPIC, num_partitions=2, replication_factor=1)
                ]
            ),
            timeout=RPC_TIMEOUT_S,
        )
        assert error_code(created.topics[0].error_code) is ErrorCode.NONE
    return cluster


def _wait(condition: Callable[[], _R | None], what: str) -> _R:
    return wait_for(condition, what, WAIT_TIMEOUT_S)


class TxnClient(CoordinatorClient):
    """Raw gRPC to whichever coordinator FindCoordinator names for ``transactional_id``."""

    def __init__(self, cluster: LocalCluster, transactional_id: str) -> None:
        super().__init__(
            cluster,
            transactional_id,
            group_pb2.COORDINATOR_TYPE_TRANSACTION,
            _TRANSIENT,
            WAIT_TIMEOUT_S,
        )
        self.transactional_id = transactional_id

    def stub(self, address: str) -> transaction_pb2_grpc.TransactionCoordinatorServiceStub:
        return transaction_pb2_grpc.TransactionCoordinatorServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def init(self) -> tuple[int, int]:
        answer = self.call(
            "InitProducerId",
            transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=TXN_TIMEOUT_MS,
                producer_id=-1,
                producer_epoch=-1,
            ),
            "InitProducerId",
        )
        assert isinstance(
            answer, transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse
        )
        assert error_code(answer.error_code) is ErrorCode.NONE, answer.error_message
        return answer.producer_id, answer.producer_epoch

    def add(
        self, producer: tuple[int, int], partitions: list[int], topic: str = TOPIC
    ) -> list[ErrorCode]:
        answer = self.call(
            "AddPartitionsToTxn",
            transaction_pb2.AddPartitionsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=producer[0],
                producer_epoch=producer[1],
                partitions=[
                    common_pb2.TopicPartition(topic=topic, partition=p) for p in partitions
                ],
            ),
            "AddPartitionsToTxn",
        )
        assert isinstance(answer, transaction_pb2.AddPartitionsToTxnResponse)
        return [error_code(p.error_code) for p in answer.partitions]

    def end(self, producer: tuple[int, int], committed: bool) -> ErrorCode:
        answer = self.call(
            "EndTxn",
            transaction_pb2.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=producer[0],
                producer_epoch=producer[1],
                committed=committed,
            ),
            "EndTxn",
        )
        assert isinstance(answer, transaction_pb2.EndTxnResponse)
        return error_code(answer.error_code)

    def describe(self) -> transaction_pb2.TransactionDescription:
        """The id's description, once its coordinator has it loaded."""

        def loaded() -> transaction_pb2.TransactionDescription | None:
            answer = self.call(
                "DescribeTransactions",
                transaction_pb2.DescribeTransactionsRequest(
                    transactional_ids=[self.transactional_id]
                ),
                "DescribeTransactions",
            )
            assert isinstance(answer, transaction_pb2.DescribeTransactionsResponse)
            [description] = answer.transactions
            return None if error_code(description.error_code) in _TRANSIENT else description

        return _wait(loaded, f"a description of {self.transactional_id}")


def _owner_of(cluster: LocalCluster, transactional_id: str) -> int:
    partition = transaction_state_partition_for(transactional_id, TXN_PARTITIONS)
    return coordinator_owners(cluster)[partition % OFFSETS_PARTITIONS]


def _name_of(cluster: LocalCluster, node_id: int) -> str:
    return next(
        n for n in cluster.names(Role.GROUP_COORDINATOR) if cluster.spec(n).node_id == node_id
    )


def _write_in_transaction(
    cluster: LocalCluster, client: TxnClient, producer: tuple[int, int], partitions: list[int]
) -> None:
    """One transactional record (the first of ``producer`` there) to each of ``partitions``
    of TOPIC, its value naming the producer, sent with ``client``'s transactional id (the
    leader verifies it with the coordinator); then each partition's last stable offset is
    held before it for READ_COMMITTED readers."""
    for partition in partitions:
        leader = leader_address(cluster, TOPIC, partition)
        records = batch([_value_of(producer)], producer[0], 0, epoch=producer[1], txn=True)
        written = produce(leader, TOPIC, partition, records, client.transactional_id)
        assert code_of(written) is ErrorCode.NONE, written.error_message
        held = fetch(leader, TOPIC, partition, 0, READ_COMMITTED, decode=True)
        assert held.last_stable_offset == written.base_offset < held.high_watermark
        assert values(held) == []


def _value_of(producer: tuple[int, int]) -> bytes:
    return f"in-transaction-of-{producer[0]}-{producer[1]}".encode()


def _wait_committed(client: TxnClient, producer: tuple[int, int], partitions: list[int]) -> None:
    """Waits until ``client``'s transaction is in CompleteCommit, then checks its markers:
    a READ_COMMITTED fetch of each partition returns the transaction's record, and the last
    stable offset has reached the high watermark (the markers are written and replicated)."""
    _wait(
        lambda: (
            True
            if client.describe().state == transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT
            else None
        ),
        f"{client.transactional_id}'s commit to complete",
    )
    for partition in partitions:
        leader = leader_address(client.cluster, TOPIC, partition)
        read = fetch(leader, TOPIC, partition, 0, READ_COMMITTED, decode=True)
        assert values(read) == [_value_of(producer)]
        # The record, its marker (a successor resending a decided transaction's markers may
        # write a second one, as Kafka's does: a marker for no open transaction is harmless).
        assert read.last_stable_offset == read.high_watermark >= 2
        assert list(read.aborted_transactions) == []


def test_transactions_through_grpc_with_fencing(cluster_factory: ClusterFactory) -> None:
    cluster = _cluster(cluster_factory)
    client = TxnClient(cluster, "payments-tx")
    other = TxnClient(cluster, "fenced-tx")
    try:
        node_id, _ = client.find()
        assert node_id == _owner_of(cluster, client.transactional_id)

        # The other coordinator refuses it and names the owner.
        elsewhere = next(
            cluster.grpc_address(n)
            for n in cluster.names(Role.GROUP_COORDINATOR)
            if cluster.spec(n).node_id != node_id
        )
        refused = client.stub(elsewhere).InitProducerId(
            transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest(
                transactional_id=client.transactional_id, transaction_timeout_ms=TXN_TIMEOUT_MS
            ),
            timeout=RPC_TIMEOUT_S,
        )
        assert error_code(refused.error_code) is ErrorCode.NOT_COORDINATOR
        assert refused.coordinator.node_id == node_id

        producer = client.init()
        assert producer[1] == 0
        assert client.add(producer, [0, 1]) == [ErrorCode.NONE, ErrorCode.NONE]
        _write_in_transaction(cluster, client, producer, [0, 1])
        assert client.add(producer, [0, 7]) == [
            ErrorCode.OPERATION_NOT_ATTEMPTED,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ]
        # Internal topics are never in a transaction (a marker there would break the
        # coordinators' fenced writers), as Kafka's broker answers.
        for internal in ("__consumer_offsets", "__transaction_state"):
            assert client.add(producer, [0], topic=internal) == [
                ErrorCode.TOPIC_AUTHORIZATION_FAILED
            ]
        ongoing = client.describe()
        assert ongoing.state == transaction_pb2.TRANSACTION_STATE_ONGOING
        assert {(p.topic, p.partition) for p in ongoing.partitions} == {(TOPIC, 0), (TOPIC, 1)}
        assert ongoing.producer_id == producer[0] and ongoing.transaction_start_time_ms > 0

        assert client.end(producer, committed=True) is ErrorCode.NONE
        decided = client.describe().state
        assert decided in (
            transaction_pb2.TRANSACTION_STATE_PREPARE_COMMIT,
            transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT,
        )
        _wait_committed(client, producer, [0, 1])

        # A new instance bumps the epoch; the old one is fenced.
        first = other.init()
        second = other.init()
        assert second == (first[0], first[1] + 1)
        assert other.add(first, [0]) == [ErrorCode.PRODUCER_FENCED]
        assert other.add(second, [0]) == [ErrorCode.NONE]
    finally:
        client.close()
        other.close()


def test_a_killed_coordinators_decided_transaction_is_resumed_by_its_successor(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory)
    client = TxnClient(cluster, "resumed-tx")
    try:
        producer = client.init()
        assert client.add(producer, [0, 1]) == [ErrorCode.NONE, ErrorCode.NONE]
        _write_in_transaction(cluster, client, producer, [0, 1])
        assert client.end(producer, committed=True) is ErrorCode.NONE
        victim_id, _ = client.find()
        victim = _name_of(cluster, victim_id)

        cluster.kill(victim)
        cluster.wait(victim, 10_000)

        _wait(
            lambda: client.find()[0] if client.find()[0] != victim_id else None,
            "the other coordinator to take the transaction over",
        )
        resumed = client.describe()
        assert (resumed.producer_id, resumed.producer_epoch) == producer
        assert resumed.state in (
            transaction_pb2.TRANSACTION_STATE_PREPARE_COMMIT,
            transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT,
        )
        _wait_committed(client, producer, [0, 1])
        # Decided is decided: the successor does not let the producer abort it.
        assert client.end(producer, committed=False) is ErrorCode.INVALID_TXN_STATE
    finally:
        client.close()


def test_markers_refused_as_fenced_while_still_the_owner_still_complete_the_transaction(
    cluster_factory: ClusterFactory,
) -> None:
    """An operator's abort (Admin.abort_transaction) writes a marker with a newer producer
    epoch on partition 0 and a newer coordinator epoch on partition 1: the coordinator, still
    the owner, is answered INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED there.
    Those markers are obsolete (a newer marker ended the producer's transaction there); the
    transaction reaches CompleteCommit instead of staying in PrepareCommit with nobody
    completing it, and its producer can go on."""
    cluster = _cluster(cluster_factory)
    client = TxnClient(cluster, "operator-aborted-tx")
    try:
        producer = client.init()
        assert client.add(producer, [0, 1]) == [ErrorCode.NONE, ErrorCode.NONE]
        with Admin(cluster.controller_bootstrap_servers) as admin:
            admin.abort_transaction(TopicPartition(TOPIC, 0), producer[0], producer[1] + 5, 0)
            admin.abort_transaction(TopicPartition(TOPIC, 1), producer[0], producer[1], 1_000)
        assert client.end(producer, committed=True) is ErrorCode.NONE
        _wait(
            lambda: (
                True
                if client.describe().state == transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT
                else None
            ),
            "the transaction to complete",
        )
        assert client.init() == (producer[0], producer[1] + 1)
    finally:
        client.close()
