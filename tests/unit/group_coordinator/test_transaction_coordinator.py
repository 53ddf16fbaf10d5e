"""The transaction coordinator's state machine (transactions/coordinator.py) over an in-process
__transaction_state, real producer id blocks and a manual clock: every transition and Kafka's
errors, epoch fencing, the timeout abort, expiry, a failed write changing nothing, and a
successor completing what its predecessor decided. Markers go to an in-process writer that
records them and can be held or failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import pytest
from brook_group_coordinator.offsets_log import LogRecord
from brook_group_coordinator.ownership import (
    offsets_partition_owning,
    transaction_state_partition_for,
)
from brook_group_coordinator.records import FENCE_KEY, RecordFormatError, UnknownRecordKindError
from brook_group_coordinator.transactions.coordinator import (
    TransactionCoordinator,
    TransactionSettings,
)
from brook_group_coordinator.transactions.records import (
    decode_transaction,
    decode_transaction_key,
    encode_transaction,
    encode_transaction_key,
)
from brook_group_coordinator.transactions.state import (
    PRODUCER_EPOCH_MAX,
    Transaction,
    TxnState,
)
from manual_timers import ManualTimers
from memory_offsets_log import MemoryOffsetsLog

from brook.errors import BrookError, ErrorCode
from brook.producer_ids import ProducerIdBlock, ProducerIdManager
from brook.rpc.backoff import RetryBackoff

_T = TypeVar("_T")

PARTITIONS = 4
TXN = "txn-a"
TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 900_000
EXPIRATION_MS = 3_600_000
BACKOFF = RetryBackoff(1, 5)
BLOCK_SIZE = 1000
WAIT_S = 5.0


class Markers:
    """The coordinator's MarkerWriter, in process: records what it wrote; ``hold`` keeps
    writes waiting, ``failures`` fails that many (a storage error), ``crashes`` that many
    with an exception no writer is expected to raise (a bug)."""

    def __init__(self) -> None:
        self.written: list[tuple[Transaction, int]] = []
        self.hold: asyncio.Event | None = None
        self.failures = 0
        self.crashes = 0
        self.attempts = 0

    async def write_markers(self, transaction: Transaction, coordinator_epoch: int) -> None:
        self.attempts += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.crashes > 0:
            self.crashes -= 1
            raise RuntimeError("a bug in the marker writer")
        if self.failures > 0:
            self.failures -= 1
            raise BrookError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the leader moved")
        self.written.append((transaction, coordinator_epoch))


class Log(MemoryOffsetsLog):
    """MemoryOffsetsLog whose next appends can fail, and whose appends and reads can be held."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next: list[ErrorCode] = []
        self.read_hold: asyncio.Event | None = None
        # Set once a read waits for read_hold.
        self.read_held = asyncio.Event()
        self.append_hold: asyncio.Event | None = None
        # Set once an append waits for append_hold: sent, its outcome not known yet.
        self.append_held = asyncio.Event()

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        if self.append_hold is not None:
            self.append_held.set()
            await self.append_hold.wait()
        if self.fail_next:
            code = self.fail_next.pop(0)
            raise BrookError(code, f"append failed: {code.name}")
        return await super().append(partition, records)

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        if self.read_hold is not None:
            self.read_held.set()
            await self.read_hold.wait()
        async for record in super().read(partition, from_offset):
            yield record


class Blocks:
    def __init__(self) -> None:
        self.next = 0

    async def allocate(self) -> ProducerIdBlock:
        block = ProducerIdBlock(self.next, BLOCK_SIZE)
        self.next += BLOCK_SIZE
        return block


class Harness:
    def __init__(self, log: Log | None = None, id_expiration_ms: int = EXPIRATION_MS) -> None:
        self.log = log or Log()
        self.timers = ManualTimers()
        self.markers = Markers()
        self.blocks = Blocks()
        self.producer_ids = ProducerIdManager(self.blocks.allocate, BACKOFF)
        self.coordinator = TransactionCoordinator(
            settings=TransactionSettings(
                max_timeout_ms=MAX_TIMEOUT_MS,
                id_expiration_ms=id_expiration_ms,
                producer_id_wait_ms=5_000,
                retry_backoff=BACKOFF,
            ),
            timers=self.timers,
            log=self.log,
            claims=None,
            producer_ids=self.producer_ids,
            markers=self.markers,
            partition_count=PARTITIONS,
        )

    async def load(self, coordinator_epoch: int = 0) -> None:
        for partition in range(PARTITIONS):
            await self.coordinator.load_partition(partition, coordinator_epoch)

    def state(self, transactional_id: str = TXN) -> Transaction:
        error, message, transaction = self.coordinator.describe(transactional_id)
        assert error is ErrorCode.NONE, message
        assert transaction is not None
        return transaction

    async def until_state(self, state: TxnState, transactional_id: str = TXN) -> Transaction:
        """Polls (bounded) until the id is in ``state``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while self.state(transactional_id).state is not state:
            assert loop.time() < deadline, f"{transactional_id} never reached {state}"
            await asyncio.sleep(0.005)
        return self.state(transactional_id)

    async def init(
        self, transactional_id: str = TXN, timeout_ms: int = TIMEOUT_MS
    ) -> tuple[int, int]:
        result = await self.coordinator.init_producer_id(transactional_id, timeout_ms)
        assert result.error is ErrorCode.NONE, result.message
        return result.producer_id, result.producer_epoch

    def records_of(self, transactional_id: str = TXN) -> list[bytes | None]:
        key = encode_transaction_key(transactional_id)
        partition = transaction_state_partition_for(transactional_id, PARTITIONS)
        return [r.value for r in self.log.partitions.get(partition, []) if r.key == key]

    async def close(self) -> None:
        await self.coordinator.close()
        await self.producer_ids.close()


def run(scenario: Callable[[Harness], Awaitable[_T]], id_expiration_ms: int = EXPIRATION_MS) -> _T:
    async def main() -> _T:
        harness = Harness(id_expiration_ms=id_expiration_ms)
        await harness.load()
        try:
            return await scenario(harness)
        finally:
            await harness.close()

    return asyncio.run(asyncio.wait_for(main(), 30))


# -- InitProducerId ------------------------------------------------------------------------


def test_a_new_transactional_id_gets_a_new_producer_id_at_epoch_0_written_before_the_answer() -> (
    None
):
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        assert (producer_id, epoch) == (0, 0)
        other_id, _ = await h.init("txn-b")
        assert other_id == 1
        described = h.state()
        assert described.state is TxnState.EMPTY and described.timeout_ms == TIMEOUT_MS
        [value] = h.records_of()
        assert value is not None and decode_transaction(TXN, value) == described

    run(scenario)


def test_init_again_bumps_the_epoch_and_fences_the_older_instance() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, _ = await h.init()
        assert await h.init() == (producer_id, 1)
        refused = await h.coordinator.add_partitions(TXN, producer_id, 0, [("t", 0)])
        assert refused[0] is ErrorCode.PRODUCER_FENCED
        assert (await h.coordinator.end_txn(TXN, producer_id, 0, True))[0] is (
            ErrorCode.PRODUCER_FENCED
        )

    run(scenario)


def test_kip_360_init_with_the_current_id_and_epoch_bumps_and_a_stale_one_is_fenced() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, _ = await h.init()
        bumped = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, 0)
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (
            ErrorCode.NONE,
            producer_id,
            1,
        )
        # A retry of that call (its answer lost) gets the same answer, no second bump.
        retry = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, 0)
        assert (retry.error, retry.producer_epoch) == (ErrorCode.NONE, 1)
        assert len(h.records_of()) == 2
        stale = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id + 7, 1)
        assert stale.error is ErrorCode.PRODUCER_FENCED

    run(scenario)


def test_a_bump_without_an_expected_epoch_leaves_the_older_instance_fenced() -> None:
    """Instance A holds (P, 0); instance B's InitProducerId (no expected epoch) bumps to
    (P, 1). A's KIP-360 InitProducerId naming (P, 0) is not a retry of B's call: it is
    PRODUCER_FENCED, never B's (P, 1)."""

    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        assert await h.init() == (producer_id, epoch + 1)
        zombie = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, epoch)
        assert zombie.error is ErrorCode.PRODUCER_FENCED, zombie
        assert h.state().producer_epoch == epoch + 1

    run(scenario)


def test_the_fencing_abort_leaves_the_fenced_instance_fenced() -> None:
    """Instance A's ongoing transaction is aborted with a bumped epoch when instance B calls
    InitProducerId; A's KIP-360 InitProducerId naming its old epoch afterwards is
    PRODUCER_FENCED, never the fencing epoch."""

    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        fencing = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        assert fencing.error is ErrorCode.CONCURRENT_TRANSACTIONS
        await h.until_state(TxnState.COMPLETE_ABORT)
        zombie = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, epoch)
        assert zombie.error is ErrorCode.PRODUCER_FENCED, zombie
        assert await h.init() == (producer_id, epoch + 2)

    run(scenario)


def test_a_new_producer_id_without_an_expected_epoch_is_not_handed_to_the_old_one() -> None:
    """Epoch exhausted: a plain InitProducerId gets a new producer id; the old id at its
    last epoch is then fenced, not taken for a retry of that call."""

    async def scenario(h: Harness) -> None:
        old_id, _ = await h.init()
        await _exhaust_epoch(h)
        fresh_id, fresh_epoch = await h.init()
        assert fresh_id != old_id and fresh_epoch == 0
        zombie = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, old_id, PRODUCER_EPOCH_MAX)
        assert zombie.error is ErrorCode.PRODUCER_FENCED, zombie

    run(scenario)


async def _exhaust_epoch(h: Harness) -> None:
    """Puts TXN at the last epoch the way a log replay would."""
    partition = transaction_state_partition_for(TXN, PARTITIONS)
    exhausted = replace(h.state(), producer_epoch=PRODUCER_EPOCH_MAX)
    await h.log.append(partition, [(encode_transaction_key(TXN), encode_transaction(exhausted))])
    h.coordinator.unload_partition(partition)
    await h.coordinator.load_partition(partition, 1)


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    async def scenario(h: Harness) -> None:
        old_id, _ = await h.init()
        await _exhaust_epoch(h)

        fresh = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, old_id, PRODUCER_EPOCH_MAX)
        assert fresh.error is ErrorCode.NONE
        assert fresh.producer_id != old_id and fresh.producer_epoch == 0
        retry = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS, old_id, PRODUCER_EPOCH_MAX)
        assert (retry.producer_id, retry.producer_epoch) == (fresh.producer_id, 0)

    run(scenario)


@pytest.mark.parametrize("timeout_ms", [0, -1, MAX_TIMEOUT_MS + 1])
def test_a_timeout_outside_the_bounds_is_invalid(timeout_ms: int) -> None:
    async def scenario(h: Harness) -> None:
        result = await h.coordinator.init_producer_id(TXN, timeout_ms)
        assert result.error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert str(MAX_TIMEOUT_MS) in result.message

    run(scenario)


# -- a whole transaction -------------------------------------------------------------------


def test_commit_adds_partitions_and_a_group_writes_markers_then_completes() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        started = h.timers.now_ms()
        add = h.coordinator.add_partitions
        assert await add(TXN, producer_id, epoch, [("t", 0), ("t", 1)]) == (ErrorCode.NONE, "")
        assert await add(TXN, producer_id, epoch, [("t", 1), ("u", 0)]) == (ErrorCode.NONE, "")
        writes = len(h.records_of())
        assert await add(TXN, producer_id, epoch, [("u", 0)]) == (ErrorCode.NONE, "")
        assert len(h.records_of()) == writes, "nothing new: nothing written"
        assert (await h.coordinator.add_offsets(TXN, producer_id, epoch, "g"))[0] is ErrorCode.NONE
        ongoing = h.state()
        assert ongoing.state is TxnState.ONGOING and ongoing.start_ms == started
        assert ongoing.partitions == {("t", 0), ("t", 1), ("u", 0)} and ongoing.groups == {"g"}

        assert await h.coordinator.end_txn(TXN, producer_id, epoch, True) == (ErrorCode.NONE, "")
        done = await h.until_state(TxnState.COMPLETE_COMMIT)
        [(marked, coordinator_epoch)] = h.markers.written
        assert marked.state is TxnState.PREPARE_COMMIT and coordinator_epoch == 0
        assert marked.partitions == ongoing.partitions and marked.groups == {"g"}
        assert done.partitions == frozenset() and done.start_ms == -1
        states = [decode_transaction(TXN, v).state for v in h.records_of() if v is not None]
        assert states[-2:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]

        # A retry of the same outcome succeeds; the other outcome is invalid.
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, True))[0] is ErrorCode.NONE
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, False))[0] is (
            ErrorCode.INVALID_TXN_STATE
        )
        # The next transaction starts from CompleteCommit.
        assert (await add(TXN, producer_id, epoch, [("t", 0)]))[0] is ErrorCode.NONE
        assert h.state().partitions == {("t", 0)}

    run(scenario)


def test_abort_writes_abort_markers_and_completes() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, False))[0] is ErrorCode.NONE
        await h.until_state(TxnState.COMPLETE_ABORT)
        assert [t.state for t, _ in h.markers.written] == [TxnState.PREPARE_ABORT]
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, False))[0] is ErrorCode.NONE
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, True))[0] is (
            ErrorCode.INVALID_TXN_STATE
        )

    run(scenario)


def test_kafkas_errors_for_unknown_ids_wrong_producers_and_states() -> None:
    async def scenario(h: Harness) -> None:
        unknown = await h.coordinator.add_partitions("nobody", 5, 0, [("t", 0)])
        assert unknown[0] is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        producer_id, epoch = await h.init()
        wrong = await h.coordinator.end_txn(TXN, producer_id + 1, epoch, True)
        assert wrong[0] is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        empty = await h.coordinator.end_txn(TXN, producer_id, epoch, True)
        assert empty[0] is ErrorCode.INVALID_TXN_STATE
        no_group = await h.coordinator.add_offsets(TXN, producer_id, epoch, "")
        assert no_group[0] is ErrorCode.INVALID_GROUP_ID
        assert h.coordinator.describe("nobody")[0] is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert (await h.coordinator.init_producer_id("", TIMEOUT_MS)).error is (
            ErrorCode.INVALID_REQUEST
        )

    run(scenario)


def test_requests_while_markers_are_written_are_concurrent_transactions() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        h.markers.hold = asyncio.Event()
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, True))[0] is ErrorCode.NONE
        assert h.state().state is TxnState.PREPARE_COMMIT

        concurrent = ErrorCode.CONCURRENT_TRANSACTIONS
        assert (await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 1)]))[0] is (
            concurrent
        )
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, True))[0] is concurrent
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, False))[0] is (
            ErrorCode.INVALID_TXN_STATE
        )
        assert (await h.coordinator.init_producer_id(TXN, TIMEOUT_MS)).error is concurrent

        h.markers.hold.set()
        await h.until_state(TxnState.COMPLETE_COMMIT)
        assert await h.init() == (producer_id, epoch + 1)

    run(scenario)


# -- fencing, timeouts, expiry -------------------------------------------------------------


def test_init_with_an_ongoing_transaction_aborts_it_with_a_bumped_epoch_first() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])

        first = await h.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        assert first.error is ErrorCode.CONCURRENT_TRANSACTIONS
        aborted = await h.until_state(TxnState.COMPLETE_ABORT)
        [(marked, _)] = h.markers.written
        assert marked.state is TxnState.PREPARE_ABORT
        assert marked.producer_epoch == epoch + 1, "the markers fence the old producer too"
        assert aborted.producer_epoch == epoch + 1

        assert await h.init() == (producer_id, epoch + 2)
        zombie = await h.coordinator.end_txn(TXN, producer_id, epoch, True)
        assert zombie[0] is ErrorCode.PRODUCER_FENCED

    run(scenario)


def test_a_timed_out_transaction_is_aborted_with_a_bumped_epoch_fencing_its_producer() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init(timeout_ms=1_000)
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        h.timers.advance(999)
        assert h.coordinator.abort_timed_out() == []
        h.timers.advance(1)
        assert h.coordinator.abort_timed_out() == [TXN]

        aborted = await h.until_state(TxnState.COMPLETE_ABORT)
        assert aborted.producer_epoch == epoch + 1
        assert [(t.state, t.producer_epoch) for t, _ in h.markers.written] == [
            (TxnState.PREPARE_ABORT, epoch + 1)
        ]
        for call in (
            h.coordinator.end_txn(TXN, producer_id, epoch, True),
            h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)]),
        ):
            assert (await call)[0] is ErrorCode.PRODUCER_FENCED
        assert h.coordinator.abort_timed_out() == []

    run(scenario)


def test_idle_ids_expire_with_a_tombstone_and_ongoing_ones_do_not() -> None:
    async def scenario(h: Harness) -> None:
        await h.init("idle")
        busy_id, busy_epoch = await h.init("busy", timeout_ms=MAX_TIMEOUT_MS)
        await h.coordinator.add_partitions("busy", busy_id, busy_epoch, [("t", 0)])
        h.timers.advance(999)
        assert await h.coordinator.expire_ids() == 0
        h.timers.advance(1)

        assert await h.coordinator.expire_ids() == 1
        assert h.coordinator.describe("idle")[0] is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert h.records_of("idle")[-1] is None
        assert h.state("busy").state is TxnState.ONGOING
        # An expired id starts over with a new producer id.
        assert (await h.init("idle"))[1] == 0

    run(scenario, id_expiration_ms=1_000)


# -- writes and ownership ------------------------------------------------------------------


def test_a_failed_write_leaves_the_state_unchanged() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        h.log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        refused = await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        assert refused[0] is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert h.state().state is TxnState.EMPTY and h.state().partitions == frozenset()

        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        h.log.fail_next = [ErrorCode.REQUEST_TIMED_OUT]
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch, True))[0] is (
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
        assert h.state().state is TxnState.ONGOING and h.markers.attempts == 0

        h.log.fail_next = [ErrorCode.NOT_ENOUGH_REPLICAS]
        assert (await h.coordinator.init_producer_id("new", TIMEOUT_MS)).error is (
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
        assert h.coordinator.describe("new")[0] is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    run(scenario)


def test_a_caller_giving_up_mid_write_neither_loses_nor_half_applies_the_decision() -> None:
    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        h.log.append_hold = asyncio.Event()
        end = asyncio.create_task(h.coordinator.end_txn(TXN, producer_id, epoch, True))
        await asyncio.wait_for(h.log.append_held.wait(), WAIT_S)
        end.cancel()  # the client's call was cancelled while PrepareCommit was being written
        with pytest.raises(asyncio.CancelledError):
            await end
        h.log.append_hold.set()
        await h.until_state(TxnState.COMPLETE_COMMIT)
        assert [t.state for t, _ in h.markers.written] == [TxnState.PREPARE_COMMIT]

    run(scenario)


def test_marker_failures_and_unexpected_errors_are_retried_until_complete() -> None:
    """Whatever the completion meets (a storage error, an exception no writer should raise),
    it tries again: a transaction is never left in PrepareCommit with nobody completing it."""

    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init()
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        h.markers.crashes = 2
        h.markers.failures = 3
        await h.coordinator.end_txn(TXN, producer_id, epoch, True)
        await h.until_state(TxnState.COMPLETE_COMMIT)
        assert h.markers.attempts == 6
        assert [t.state for t, _ in h.markers.written] == [TxnState.PREPARE_COMMIT]

    run(scenario)


def test_not_coordinator_and_load_in_progress() -> None:
    async def scenario() -> None:
        h = Harness()
        partition = transaction_state_partition_for(TXN, PARTITIONS)
        error, message = h.coordinator.check_coordinator(TXN)
        assert error is ErrorCode.NOT_COORDINATOR and "__transaction_state" in message
        h.log.read_hold = asyncio.Event()
        load = asyncio.create_task(h.coordinator.load_partition(partition, 3))
        await asyncio.wait_for(h.log.read_held.wait(), WAIT_S)
        assert (await h.coordinator.init_producer_id(TXN, TIMEOUT_MS)).error is (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        )
        assert h.coordinator.loading_partitions() == [partition]
        h.log.read_hold.set()
        await load
        assert (await h.coordinator.init_producer_id(TXN, TIMEOUT_MS)).error is ErrorCode.NONE
        h.coordinator.unload_partition(partition)
        assert h.coordinator.check_coordinator(TXN)[0] is ErrorCode.NOT_COORDINATOR
        await h.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_successor_loading_the_partition_completes_a_decided_transaction() -> None:
    async def scenario() -> None:
        first = Harness()
        await first.load(coordinator_epoch=0)
        producer_id, epoch = await first.init()
        await first.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        await first.coordinator.add_offsets(TXN, producer_id, epoch, "g")
        first.markers.hold = asyncio.Event()  # the markers never get out
        await first.coordinator.end_txn(TXN, producer_id, epoch, True)
        await first.close()  # the coordinator goes away with the transaction decided

        successor = Harness(first.log)
        await successor.load(coordinator_epoch=1)
        done = await successor.until_state(TxnState.COMPLETE_COMMIT)
        [(marked, coordinator_epoch)] = successor.markers.written
        assert marked.state is TxnState.PREPARE_COMMIT and coordinator_epoch == 1
        assert marked.partitions == {("t", 0)} and marked.groups == {"g"}
        assert (done.producer_id, done.producer_epoch) == (producer_id, epoch)
        await successor.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_list_filters_by_state_producer_and_duration() -> None:
    async def scenario(h: Harness) -> None:
        a_id, a_epoch = await h.init("a")
        await h.init("b")
        await h.coordinator.add_partitions("a", a_id, a_epoch, [("t", 0)])
        h.timers.advance(5_000)
        listed = h.coordinator.transactions
        assert {t.transactional_id for t in listed()} == {"a", "b"}
        assert [t.transactional_id for t in listed(states={TxnState.ONGOING})] == ["a"]
        assert [t.transactional_id for t in listed(producer_ids={a_id})] == ["a"]
        assert [t.transactional_id for t in listed(running_longer_than_ms=5_000)] == ["a"]
        assert listed(running_longer_than_ms=5_001) == []

    run(scenario)


# -- records and ownership -----------------------------------------------------------------


def test_records_round_trip_and_bad_keys_are_told_apart() -> None:
    transaction = Transaction(
        transactional_id="tx-é",
        producer_id=2**40,
        producer_epoch=7,
        last_producer_id=2**40 - 1,
        last_producer_epoch=32766,
        timeout_ms=60_000,
        state=TxnState.PREPARE_COMMIT,
        partitions=frozenset({("t", 3), ("a", 0)}),
        groups=frozenset({"g1", "g2"}),
        start_ms=1_700_000_000_000,
        update_ms=1_700_000_000_500,
    )
    key = encode_transaction_key(transaction.transactional_id)
    assert decode_transaction_key(key) == "tx-é"
    assert decode_transaction("tx-é", encode_transaction(transaction)) == transaction
    with pytest.raises(UnknownRecordKindError):
        decode_transaction_key(FENCE_KEY)
    with pytest.raises(RecordFormatError):
        decode_transaction_key(key + b"x")
    with pytest.raises(RecordFormatError):
        decode_transaction("x", b'{"v": 1, "state": "Sleeping"}')
    with pytest.raises(RecordFormatError):
        decode_transaction("x", b"not json")


def test_a_transactional_ids_partition_is_owned_with_its_offsets_partition() -> None:
    assert transaction_state_partition_for("my-txn", 50) == abs(hash_of("my-txn")) % 50
    assert [offsets_partition_owning(p, 4) for p in range(6)] == [0, 1, 2, 3, 0, 1]
    with pytest.raises(ValueError, match="at least 1"):
        transaction_state_partition_for("x", 0)


def hash_of(value: str) -> int:
    """Java's String.hashCode, spelled out for ASCII."""
    h = 0
    for char in value:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_transitions_outside_kafkas_rules_are_refused() -> None:
    empty = Transaction("x", 1, 0, -1, -1, 1000, TxnState.EMPTY, frozenset(), frozenset(), -1, 0)
    with pytest.raises(ValueError, match="Empty -> PrepareCommit"):
        empty.to(TxnState.PREPARE_COMMIT, 1)
    prepared = replace(empty, state=TxnState.PREPARE_ABORT)
    with pytest.raises(ValueError):
        prepared.to(TxnState.COMPLETE_COMMIT, 1)
    assert prepared.to(TxnState.COMPLETE_ABORT, 5).update_ms == 5


def test_the_producer_of_a_timed_out_transaction_recovers_with_its_old_epoch() -> None:
    """KIP-588: after the timeout abort, the producer's InitProducerId naming its id and old
    epoch is told to wait while the markers are written, then gets the fencing epoch, which
    it can write with; once another instance bumped the id, the old epoch is fenced."""

    async def scenario(h: Harness) -> None:
        producer_id, epoch = await h.init(timeout_ms=1_000)
        await h.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        h.markers.hold = asyncio.Event()
        h.timers.advance(1_000)
        assert h.coordinator.abort_timed_out() == [TXN]
        await h.until_state(TxnState.PREPARE_ABORT)
        early = await h.coordinator.init_producer_id(TXN, 1_000, producer_id, epoch)
        assert early.error is ErrorCode.CONCURRENT_TRANSACTIONS, early
        h.markers.hold.set()
        await h.until_state(TxnState.COMPLETE_ABORT)

        recovered = await h.coordinator.init_producer_id(TXN, 1_000, producer_id, epoch)
        assert recovered.error is ErrorCode.NONE, recovered
        assert (recovered.producer_id, recovered.producer_epoch) == (producer_id, epoch + 1)
        added = await h.coordinator.add_partitions(TXN, producer_id, epoch + 1, [("t", 0)])
        assert added[0] is ErrorCode.NONE, added
        assert (await h.coordinator.end_txn(TXN, producer_id, epoch + 1, True))[0] is (
            ErrorCode.NONE
        )
        await h.until_state(TxnState.COMPLETE_COMMIT)

        # Another instance takes the id: the old epoch is fenced for good.
        assert await h.init() == (producer_id, epoch + 2)
        zombie = await h.coordinator.init_producer_id(TXN, 1_000, producer_id, epoch)
        assert zombie.error is ErrorCode.PRODUCER_FENCED, zombie

    run(scenario)


# -- two-phase commit (KIP-939) ------------------------------------------------------------


def test_a_two_phase_transaction_outlives_its_timeout_and_any_holder_of_its_epoch_commits() -> None:
    """The timeout sweep aborts the ordinary transaction and leaves the two-phase one Ongoing;
    a commit with its producer id and epoch (from whoever) completes it, and a retry of that
    commit succeeds once it is complete (while its markers are written: the retriable
    CONCURRENT_TRANSACTIONS, as Kafka)."""

    async def scenario(h: Harness) -> None:
        result = await h.coordinator.init_producer_id("2pc", 1_000, two_phase=True)
        assert result.error is ErrorCode.NONE, result
        producer_id, epoch = result.producer_id, result.producer_epoch
        plain_id, plain_epoch = await h.init("plain", timeout_ms=1_000)
        await h.coordinator.add_partitions("2pc", producer_id, epoch, [("t", 0)])
        await h.coordinator.add_partitions("plain", plain_id, plain_epoch, [("t", 1)])
        h.timers.advance(10 * MAX_TIMEOUT_MS)
        assert h.coordinator.abort_timed_out() == ["plain"]
        await h.until_state(TxnState.COMPLETE_ABORT, "plain")
        prepared = h.state("2pc")
        assert prepared.state is TxnState.ONGOING and prepared.two_phase

        h.markers.hold = asyncio.Event()
        assert (await h.coordinator.end_txn("2pc", producer_id, epoch, True))[0] is ErrorCode.NONE
        retried = await h.coordinator.end_txn("2pc", producer_id, epoch, True)
        assert retried[0] is ErrorCode.CONCURRENT_TRANSACTIONS
        h.markers.hold.set()
        await h.until_state(TxnState.COMPLETE_COMMIT, "2pc")
        assert (await h.coordinator.end_txn("2pc", producer_id, epoch, True))[0] is ErrorCode.NONE
        assert (await h.coordinator.end_txn("2pc", producer_id, epoch, False))[0] is (
            ErrorCode.INVALID_TXN_STATE
        )

    run(scenario)


def test_two_phase_survives_a_successor_and_is_cleared_by_a_plain_init() -> None:
    async def scenario() -> None:
        first = Harness()
        await first.load(coordinator_epoch=0)
        result = await first.coordinator.init_producer_id(TXN, 1_000, two_phase=True)
        producer_id, epoch = result.producer_id, result.producer_epoch
        await first.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        await first.close()

        successor = Harness(first.log)
        await successor.load(coordinator_epoch=1)
        successor.timers.advance(10 * MAX_TIMEOUT_MS)
        assert successor.coordinator.abort_timed_out() == []
        assert successor.state().two_phase and successor.state().state is TxnState.ONGOING

        # A plain InitProducerId fences the prepared transaction (aborted, its epoch bumped)
        # and clears the flag: the next transaction times out as any other.
        fenced = await successor.coordinator.init_producer_id(TXN, 1_000)
        assert fenced.error is ErrorCode.CONCURRENT_TRANSACTIONS
        await successor.until_state(TxnState.COMPLETE_ABORT)
        assert await successor.init(timeout_ms=1_000) == (producer_id, epoch + 2)
        assert not successor.state().two_phase
        zombie = await successor.coordinator.end_txn(TXN, producer_id, epoch, True)
        assert zombie[0] is ErrorCode.PRODUCER_FENCED
        await successor.coordinator.add_partitions(TXN, producer_id, epoch + 2, [("t", 0)])
        successor.timers.advance(1_000)
        assert successor.coordinator.abort_timed_out() == [TXN]
        await successor.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_two_phase_flag_round_trips_and_old_values_read_as_not_two_phase() -> None:
    transaction = Transaction(
        transactional_id="t",
        producer_id=5,
        producer_epoch=1,
        last_producer_id=-1,
        last_producer_epoch=-1,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=frozenset({("t", 0)}),
        groups=frozenset(),
        start_ms=10,
        update_ms=10,
        two_phase=True,
    )
    assert decode_transaction("t", encode_transaction(transaction)) == transaction
    plain = replace(transaction, two_phase=False)
    old_value = encode_transaction(plain)
    assert b"two_phase" not in old_value, "values without the flag are as before"
    assert decode_transaction("t", old_value) == plain
    with pytest.raises(RecordFormatError):
        decode_transaction("t", old_value[:-1] + b',"two_phase":1}')
