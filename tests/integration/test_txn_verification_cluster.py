"""Transaction verification on a real cluster (KIP-890 part 1,
transaction.partition.verification.enable, on by default): controllers, storage nodes and two
coordinators as processes, raw gRPC.

The late batch: a producer's transaction writes to a partition and is aborted (same epoch); a
batch of that transaction delayed past the ABORT marker (in flight in a gateway, or retried to
a new leader) then reaches the leader, in sequence. Without verification it would open a new
transaction there, which the producer's next COMMIT would commit, exposing aborted records.
With it, the leader asks the transaction coordinator and refuses the batch: nothing is
appended, READ_COMMITTED never sees it, and the next transaction's commit exposes only its own
records.
"""

from __future__ import annotations

import pytest
from cluster_fixture import ClusterFactory
from storage_rpc import READ_COMMITTED, batch, code_of, fetch, leader_address, produce, values
from test_storage_transactions import _list_latest
from test_transaction_coordinator_cluster import TOPIC, TxnClient, _cluster, _wait

from brook.errors import ErrorCode
from brook.v1 import storage_pb2, transaction_pb2

pytestmark = pytest.mark.integration

TXN = "late-batch-tx"


def _batch(producer: tuple[int, int], sequence: int, records: list[bytes]) -> bytes:
    return batch(records, producer[0], sequence, epoch=producer[1], txn=True)


def _produce(
    address: str, partition: int, records: bytes, transactional_id: str = TXN
) -> storage_pb2.PartitionProduceResponse:
    answer: storage_pb2.PartitionProduceResponse = produce(
        address, TOPIC, partition, records, transactional_id
    )
    return answer


def _until_state(client: TxnClient, state: int) -> None:
    _wait(
        lambda: True if client.describe().state == state else None,
        f"{client.transactional_id} to reach {transaction_pb2.TransactionState.Name(state)}",
    )


def test_a_late_batch_of_an_aborted_transaction_is_refused_and_never_committed(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory)
    client = TxnClient(cluster, TXN)
    try:
        producer = client.init()
        leader = leader_address(cluster, TOPIC, 0)
        other = leader_address(cluster, TOPIC, 1)
        assert client.add(producer, [0]) == [ErrorCode.NONE]

        # Transaction 1 writes seq 0-1 to partition 0 (verified: the partition is in it).
        written = _produce(leader, 0, _batch(producer, 0, [b"aborted-0", b"aborted-1"]))
        assert code_of(written) is ErrorCode.NONE, written.error_message
        # A partition never added to the transaction is refused, and so is a transactional
        # batch without its transactional id (nothing to verify it with).
        not_added = _produce(other, 1, _batch(producer, 0, [b"stray"]))
        assert code_of(not_added) is ErrorCode.INVALID_TXN_STATE, not_added.error_message
        anonymous = _produce(other, 1, _batch(producer, 0, [b"stray"]), transactional_id="")
        assert code_of(anonymous) is ErrorCode.INVALID_TXN_STATE

        # The client aborts; the ABORT marker reaches partition 0.
        assert client.end(producer, committed=False) is ErrorCode.NONE
        _until_state(client, transaction_pb2.TRANSACTION_STATE_COMPLETE_ABORT)
        end_before = _list_latest(leader, TOPIC, 0)[1]

        # The late batch of transaction 1 (seq 2-3, in sequence) arrives: refused.
        late = _produce(leader, 0, _batch(producer, 2, [b"late-2", b"late-3"]))
        assert code_of(late) is ErrorCode.INVALID_TXN_STATE, late.error_message
        assert _list_latest(leader, TOPIC, 0)[1] == end_before, "the late batch was appended"
        # Nothing holds the last stable offset back: no transaction was opened.
        assert _list_latest(leader, TOPIC, 0, READ_COMMITTED)[1] == end_before
        assert values(fetch(leader, TOPIC, 0, 0, READ_COMMITTED, decode=True)) == []

        # The producer's next transaction writes there (seq 2-3 again, its own records) and
        # commits: READ_COMMITTED sees exactly its records.
        assert client.add(producer, [0]) == [ErrorCode.NONE]
        committed = _produce(leader, 0, _batch(producer, 2, [b"committed-2", b"committed-3"]))
        assert code_of(committed) is ErrorCode.NONE, committed.error_message
        assert client.end(producer, committed=True) is ErrorCode.NONE
        _until_state(client, transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT)

        def visible() -> list[bytes] | None:
            read = values(fetch(leader, TOPIC, 0, 0, READ_COMMITTED, decode=True))
            return read or None

        assert _wait(visible, "the committed transaction to be visible") == [
            b"committed-2",
            b"committed-3",
        ]
    finally:
        client.close()
