"""AddPartitionsToTxn verify_only at the transaction coordinator (KIP-890 part 1;
TransactionCoordinator.verify_partitions): a partition leader learns whether a partition is in
the ongoing transaction of a producer id and epoch; nothing is added or written."""

from __future__ import annotations

import asyncio

from brook_group_coordinator.transactions.state import TxnState
from test_transaction_coordinator import TXN, Harness, run

from brook.errors import ErrorCode


def test_only_partitions_of_the_ongoing_transaction_at_its_epoch_are_verified() -> None:
    async def scenario(h: Harness) -> None:
        verify = h.coordinator.verify_partitions
        producer_id, epoch = await h.init()
        # Empty: no transaction, nothing is in one.
        assert verify(TXN, producer_id, epoch, [("t", 0)]) == (ErrorCode.NONE, "", frozenset())
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        written = len(h.log.partitions.get(h.coordinator.partition_for(TXN), []))
        assert verify(TXN, producer_id, epoch, [("t", 0), ("t", 1)]) == (
            ErrorCode.NONE,
            "",
            frozenset({("t", 0)}),
        )
        # Verifying neither added the partition nor wrote anything.
        assert h.state().partitions == frozenset({("t", 0)})
        assert len(h.log.partitions[h.coordinator.partition_for(TXN)]) == written
        assert verify(TXN, producer_id, epoch + 1, [("t", 0)])[0] is ErrorCode.PRODUCER_FENCED
        assert verify(TXN, producer_id + 1, epoch, [("t", 0)])[0] is (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
        assert verify("nobody", producer_id, epoch, [("t", 0)])[0] is (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )

        # While the abort's markers are written: CONCURRENT_TRANSACTIONS (the leader retries).
        h.markers.hold = asyncio.Event()
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, False))[0] is ErrorCode.NONE
        assert verify(TXN, producer_id, epoch, [("t", 0)])[0] is (ErrorCode.CONCURRENT_TRANSACTIONS)
        h.markers.hold.set()
        await h.until_state(TxnState.COMPLETE_ABORT)
        # Aborted: the partition is in no transaction any more (the late batch's answer).
        assert verify(TXN, producer_id, epoch, [("t", 0)]) == (ErrorCode.NONE, "", frozenset())

    run(scenario)


def test_verification_is_refused_by_a_coordinator_not_owning_the_id() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        h.coordinator.unload_partition(h.coordinator.partition_for(TXN))
        assert h.coordinator.verify_partitions(TXN, producer_id, epoch, [("t", 0)])[0] is (
            ErrorCode.NOT_COORDINATOR
        )

    run(scenario)
