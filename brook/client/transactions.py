"""The transactional producer (Kafka's TransactionManager, its transactional half).

A producer with ``transactional.id`` writes records to several partitions, and a consumer
group's offsets, atomically: all of a transaction becomes visible to read_committed consumers,
or none of it. The protocol, against the transaction coordinator that owns the id
(FindCoordinator with key type TRANSACTION) and the partitions' leaders:

1. ``init_transactions``: InitProducerId(transactional.id) gives the producer id and a bumped
   epoch, fencing every older producer with the same id (their later writes are refused) and
   completing their open transaction first.
2. ``begin_transaction``: local only.
3. ``send``: a record opening a batch for a partition not yet in the transaction queues the
   partition for AddPartitionsToTxn; the sender adds the queued partitions in one request and
   sends no batch of a partition before its add is acknowledged. Batches carry the
   transactional bit.
4. ``send_offsets_to_transaction``: AddOffsetsToTxn(group) to the transaction coordinator,
   then TxnCommitOffsets to the group's coordinator (with the consumer's generation and member
   id when given: KIP-447 fencing of zombie consumers).
5. ``commit_transaction``: waits until every batch is acknowledged, then EndTxn(commit);
   ``abort_transaction``: drops the batches not yet sent, waits for those in flight, then
   EndTxn(abort). The coordinator writes the markers.

Errors are Kafka's three kinds:

- state errors (``TransactionStateError``): a method called in the wrong state; raised at once,
  nothing changes;
- abortable errors: a send, an AddPartitionsToTxn or the offsets of the transaction failed. The
  transaction cannot commit (``commit_transaction`` and ``send_offsets_to_transaction`` raise
  ``TransactionAbortableError``, sends raise it too and batches not yet sent are failed with
  it); ``abort_transaction`` recovers, bumping the epoch (KIP-360: InitProducerId with the
  current id and epoch) so that sequence gaps the failure left cannot block the next one;
- fatal errors: PRODUCER_FENCED and the coordinator's INVALID_PRODUCER_EPOCH
  (``ProducerFencedError``: a newer producer took the id), TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  INVALID_TXN_STATE and unexpected answers to InitProducerId or EndTxn. Every later call raises
  the error; close the producer. A partition's INVALID_PRODUCER_EPOCH is abortable instead
  (KIP-588): the coordinator aborted the transaction that outlived transaction.timeout.ms with a
  bumped epoch; the abort skips EndTxn and asks InitProducerId with the old epoch, which the
  coordinator answers with the new one unless another instance took the id since.

Coordinator answers NOT_COORDINATOR (following its NodeHint), COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS, and unreachable coordinators, are
retried with ``retry.backoff.ms`` back-off (finding the coordinator again where it moved),
each operation bounded (``max.block.ms`` for the caller's wait; the operation itself goes on
in the background when the caller's timeout passes, and calling the same method again waits
for it, as in Kafka). A commit or abort that ran out of its own bound stays COMMITTING or
ABORTING, and calling it again resumes it (EndTxn is idempotent). A send racing the commit or
abort is in the transaction or fails: both leave IN_TRANSACTION under the accumulator's lock,
under which a send checks the state and places its record.

``TransactionTracker`` is the bookkeeping the caller threads and the accumulator share (under
its own lock); ``TransactionManager`` does the I/O on the producer's loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import grpc

from brook.client.errors import (
    ApiError,
    BrookClientError,
    ClientTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
    api_error,
)
from brook.client.group.coordinator import offset_commit_partitions
from brook.client.idempotence import FENCING_CODES, IdempotenceState
from brook.client.types import PreparedTransaction, TopicPartition
from brook.errors import ErrorCode, error_code
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.rpc.channels import ChannelPool
from brook.rpc.coordinators import (
    COORDINATOR_ERRORS,
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator,
    hinted_coordinator,
)
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, group_pb2, transaction_pb2

if TYPE_CHECKING:
    from brook.client.accumulator import RecordAccumulator
    from brook.client.admin import OffsetAndMetadata
    from brook.client.group.coordinator import ConsumerGroupMetadata, CoordinatorLocator

__all__ = ["Operation", "TransactionManager", "TransactionTracker", "TxnState"]

_log = logging.getLogger(__name__)

# An operation a caller waits for (init_transactions, commit_transaction, ...), made by a
# method that first checks the state.
Operation = Callable[[], Coroutine[Any, Any, None]]

# Answers after which this producer may never write again (Kafka's fatal errors).
FATAL_CODES: Final = FENCING_CODES | {
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
}
# Answers that mean "ask again" (after a back-off; the coordinator elsewhere for the first
# three): the id moved or is loading, or the previous transaction's markers are still being
# written.
_RETRY_CODES: Final = COORDINATOR_ERRORS | {ErrorCode.CONCURRENT_TRANSACTIONS}
# Answers after which the coordinator is looked up again (or taken from the NodeHint).
_MOVED_CODES: Final = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
# TxnCommitOffsets answers that say the consumer's generation is gone (KIP-447): its
# partitions may be another member's, so the transaction must not commit these offsets.
_GENERATION_CODES: Final = frozenset(
    {
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.REBALANCE_IN_PROGRESS,
    }
)


class TxnState(enum.Enum):
    """Kafka's TransactionManager states (the client's, not the coordinator's)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in-transaction"
    COMMITTING = "committing"
    # Two-phase (KIP-939): prepare_transaction flushing, then the transaction left open.
    PREPARING = "preparing"
    PREPARED = "prepared"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable-error"
    FATAL_ERROR = "fatal-error"


class TransactionTracker:
    """The transaction as the caller threads, the accumulator and the sender share it."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        # Partitions added to the open transaction (acknowledged by its coordinator), and
        # those that have a batch but are not added yet.
        self.added: set[tuple[str, int]] = set()
        self.new: set[tuple[str, int]] = set()
        # A group's offsets were added (AddOffsetsToTxn): EndTxn is needed even without data.
        self.offsets_added = False
        # Why the transaction cannot commit (ABORTABLE_ERROR) or the producer is dead (FATAL).
        self.error: BaseException | None = None
        # The next abort must bump the epoch: sequences of the partitions may have gaps.
        self.bump_required = False
        # A partition refused a batch as INVALID_PRODUCER_EPOCH: the coordinator aborted the
        # transaction with a bumped epoch (its timeout), so the abort sends no EndTxn (the
        # old epoch would be refused) and goes straight to the bump (KIP-588).
        self.ended_by_coordinator = False

    def _fail_if_errored(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            assert self.error is not None
            raise self.error.with_traceback(None)
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"transaction of {self.transactional_id!r} failed ({self.error}); call "
                "abort_transaction() and begin a new one"
            ) from self.error

    def check_send(self) -> None:
        """send may add a record only inside a transaction."""
        state = self.state
        if state is TxnState.IN_TRANSACTION:
            return
        self._fail_if_errored()
        raise TransactionStateError(
            f"send on a transactional producer needs an open transaction (the producer is "
            f"{state.value}): call init_transactions() once, then begin_transaction()"
        )

    def begin(self) -> None:
        with self._lock:
            self._fail_if_errored()
            if self.state is not TxnState.READY:
                raise TransactionStateError(
                    f"begin_transaction needs a producer ready for a new transaction, not "
                    f"{self.state.value}"
                    + (
                        " (call init_transactions() first)"
                        if self.state is TxnState.UNINITIALIZED
                        else ""
                    )
                )
            self.state = TxnState.IN_TRANSACTION

    def require(self, what: str, *states: TxnState) -> None:
        """Raise unless the producer is in one of ``states`` (errors first)."""
        if self.state in states:
            return
        self._fail_if_errored()
        raise TransactionStateError(
            f"{what} is not possible while the producer is {self.state.value}"
        )

    def transition(self, to: TxnState, *, allowed_from: Iterable[TxnState]) -> None:
        with self._lock:
            if self.state not in allowed_from:
                self._fail_if_errored()
                raise TransactionStateError(
                    f"the producer is {self.state.value}; it cannot become {to.value}"
                )
            self.state = to

    def partition_opened(self, topic: str, partition: int) -> None:
        """A batch was opened for ``topic``-``partition`` (the accumulator's lock held)."""
        tp = (topic, partition)
        if tp not in self.added:
            with self._lock:
                self.new.add(tp)

    def send_allowed(self, topic: str, partition: int) -> bool:
        """Whether the coordinator has the partition in the transaction (batches wait until)."""
        return (topic, partition) in self.added

    def take_new(self) -> list[tuple[str, int]]:
        """The partitions to add now; they stay queued until their add is acknowledged."""
        with self._lock:
            return sorted(self.new - self.added)

    def partitions_added(self, partitions: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            for tp in partitions:
                self.added.add(tp)
                self.new.discard(tp)

    @property
    def started(self) -> bool:
        """Whether the coordinator knows of the open transaction (EndTxn is needed)."""
        return bool(self.added) or self.offsets_added

    def completed(self) -> None:
        """The transaction ended (committed or aborted): ready for the next."""
        with self._lock:
            self.added.clear()
            self.new.clear()
            self.offsets_added = False
            self.ended_by_coordinator = False
            self.error = None
            self.state = TxnState.READY

    def abortable(self, error: BaseException) -> None:
        """The open transaction can no longer commit (a send or an add failed)."""
        with self._lock:
            if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.PREPARING):
                _log.info("transaction of %r must be aborted: %s", self.transactional_id, error)
                self.state = TxnState.ABORTABLE_ERROR
                self.error = error
                self.bump_required = True

    def fatal(self, error: BaseException) -> BaseException:
        """The producer may not write again; returns the error every later call raises."""
        with self._lock:
            if self.state is not TxnState.FATAL_ERROR:
                _log.error("transactional producer %r failed: %s", self.transactional_id, error)
                self.state = TxnState.FATAL_ERROR
                self.error = error
            assert self.error is not None
            return self.error

    def batch_failed(self, error: BaseException) -> None:
        """A batch of the transaction failed for good (the accumulator tells). Unless the
        abort dropped it unsent, it may have left a gap in its partition's sequences, in any
        state (during an abort too): the next epoch must not inherit them."""
        if isinstance(error, ProducerFencedError):
            self.fatal(error)
        elif not isinstance(error, TransactionAbortedError):
            with self._lock:
                self.bump_required = True
                if isinstance(error, ApiError) and error.code is ErrorCode.INVALID_PRODUCER_EPOCH:
                    self.ended_by_coordinator = True
            self.abortable(error)


def _resumable(name: str, error: ClientTimeoutError) -> ClientTimeoutError:
    """The error of operation ``name`` that ran out of time and stays pending: calling
    ``name`` again resumes it (Kafka keeps the pending result the same way)."""
    return ClientTimeoutError(f"{name}: {error}; call {name} again to resume it")


class _Retry(Exception):
    """An attempt to be repeated after a back-off (within the operation's deadline)."""


class TransactionManager:
    """The transactional producer's requests, on the producer's event loop."""

    def __init__(
        self,
        *,
        state: TransactionTracker,
        transaction_timeout_ms: int,
        two_phase: bool,
        accumulator: RecordAccumulator,
        network: ChannelPool,
        locator: CoordinatorLocator,
        request_timeout_ms: int,
        backoff: RetryBackoff,
        wake_sender: Callable[[], None],
    ) -> None:
        self.state = state
        self._timeout_ms = transaction_timeout_ms
        self._two_phase = two_phase
        self._accumulator = accumulator
        idempotence = accumulator.idempotence
        assert idempotence is not None, "a transactional producer is idempotent"
        self._idempotence: IdempotenceState = idempotence
        self._network = network
        self._locator = locator
        self._request_timeout_s = request_timeout_ms / 1000
        self._backoff = backoff
        self._wake_sender = wake_sender
        # Coordinators as last found, by (key type, key).
        self._coordinators: dict[tuple[int, str], Coordinator] = {}
        # The AddPartitionsToTxn in flight, and when the next may go after a failure.
        self._adding: asyncio.Task[None] | None = None
        self._add_failures = 0
        self._add_retry_at = 0.0
        # The operation a caller waits for (name, task): a caller that timed out and calls
        # the same method again waits for the same task, as Kafka's pending result.
        self._operation: tuple[str, asyncio.Task[None]] | None = None

    async def close(self) -> None:
        """Cancel the requests of the manager still running (the producer is closing); a
        transaction left open is aborted by its coordinator after transaction.timeout.ms
        (never a two-phase one: it waits for its EndTxn), or at once by the next
        init_transactions with the same id."""
        tasks = [task for task in (self._adding, self._operation and self._operation[1]) if task]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    @property
    def _transactional_id(self) -> str:
        return self.state.transactional_id

    # -- the caller's operations --------------------------------------------------------------

    async def run_operation(
        self,
        name: str,
        prepare: Callable[[], Operation],
        timeout_s: float,
    ) -> None:
        """Run the operation ``prepare()`` returns (after checking the state: it raises
        when the operation is not allowed now) as the producer's one pending operation, and
        wait up to ``timeout_s`` for it. A repeated call of a timed-out ``name`` waits for the
        same operation instead of starting another."""
        pending = self._operation
        if pending is not None and pending[1].done():
            self._operation = pending = None
        if pending is not None and pending[0] != name:
            raise TransactionStateError(
                f"{name} while {pending[0]} is still in progress: call {pending[0]} again to "
                "wait for it"
            )
        if pending is None:
            task = asyncio.create_task(prepare()(), name=f"brook-producer-{name}")
            pending = self._operation = (name, task)
        task = pending[1]
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(task)
        except TimeoutError:
            if task.done():
                raise
            raise ClientTimeoutError(
                f"{name} did not complete within {timeout_s} s; it goes on in the background: "
                f"call {name} again to wait for it"
            ) from None
        finally:
            if task.done():
                self._operation = None

    def begin_init(self) -> Operation:
        self.state.require("init_transactions", TxnState.UNINITIALIZED)
        return self._init_producer_id

    async def _init_producer_id(self, *, bump: bool = False) -> None:
        """InitProducerId for the transactional id (with the current id and epoch when
        ``bump``: KIP-360), then number every partition from 0 under the answer."""
        idempotence = self._idempotence
        request = transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest(
            transactional_id=self._transactional_id,
            transaction_timeout_ms=self._timeout_ms,
            producer_id=idempotence.producer_id if bump else -1,
            producer_epoch=idempotence.epoch if bump else -1,
            enable_two_phase_commit=self._two_phase,
        )
        response = await self._txn_call(
            "InitProducerId", request, lambda r: [r.error_code], self._operation_deadline()
        )
        code = error_code(response.error_code)
        if code is not ErrorCode.NONE:
            raise self._fatal_answer("InitProducerId", code, response.error_message)
        _log.info(
            "transactional id %r: producer id %d epoch %d",
            self._transactional_id,
            response.producer_id,
            response.producer_epoch,
        )
        self._accumulator.reset_sequences(response.producer_id, response.producer_epoch)
        self.state.bump_required = False
        self.state.completed()

    def begin_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
    ) -> Operation:
        self.state.require("send_offsets_to_transaction", TxnState.IN_TRANSACTION)

        async def send() -> None:
            try:
                await self._send_offsets(offsets, group)
            except Exception as error:
                # Ran out of time, or failed unexpectedly: the offsets may be missing from
                # the transaction, which must not commit without them.
                self.state.abortable(error)
                raise

        return send

    async def _send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
    ) -> None:
        deadline = self._operation_deadline()
        idempotence = self._idempotence
        added = await self._txn_call(
            "AddOffsetsToTxn",
            transaction_pb2.AddOffsetsToTxnRequest(
                transactional_id=self._transactional_id,
                producer_id=idempotence.producer_id,
                producer_epoch=idempotence.epoch,
                group_id=group.group_id,
            ),
            lambda r: [r.error_code],
            deadline,
        )
        code = error_code(added.error_code)
        if code is not ErrorCode.NONE:
            self._raise_abortable_or_fatal("AddOffsetsToTxn", code, added.error_message)
        self.state.offsets_added = True
        request = group_pb2.TxnCommitOffsetsRequest(
            transactional_id=self._transactional_id,
            group_id=group.group_id,
            producer_id=idempotence.producer_id,
            producer_epoch=idempotence.epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            partitions=offset_commit_partitions(offsets),
        )
        failures = 0
        while True:
            committed = await self._coordinator_call(
                "TxnCommitOffsets",
                (group_pb2.COORDINATOR_TYPE_GROUP, group.group_id),
                lambda address: self._network.groups(address).TxnCommitOffsets,
                request,
                lambda r: [p.error_code for p in r.partitions],
                deadline,
            )
            failed = [
                p for p in committed.partitions if error_code(p.error_code) is not ErrorCode.NONE
            ]
            if not failed:
                return
            codes = {error_code(p.error_code) for p in failed}
            first = failed[0]
            text = (
                f"TxnCommitOffsets({group.group_id}) of {first.topic}-{first.partition}: "
                f"{first.error_message or error_code(first.error_code).name}"
            )
            if codes & FATAL_CODES:
                raise self._fatal_answer("TxnCommitOffsets", min(codes & FATAL_CODES), text)
            if codes & _GENERATION_CODES:
                raise self._abort_required(
                    api_error(
                        min(codes & _GENERATION_CODES),
                        f"{text}; the consumer's generation is no longer current, so its "
                        "partitions may be another member's",
                    )
                )
            if all(c.retriable for c in codes):
                failures += 1
                await self._sleep_before_retry(failures, deadline, text)
                continue
            raise self._abort_required(api_error(min(codes), text))

    def begin_prepare(self) -> Operation:
        """prepare_transaction (KIP-939): every batch of the transaction acknowledged, then
        the transaction left open (PREPARED) with its producer id and epoch for whoever
        completes it; only commit_transaction or abort_transaction may follow here."""
        if not self._two_phase:
            raise TransactionStateError(
                "prepare_transaction needs transaction.two.phase.commit.enable=true (else the "
                "coordinator aborts the prepared transaction after transaction.timeout.ms)"
            )
        self._end_sends(TxnState.PREPARING, (TxnState.IN_TRANSACTION, TxnState.PREPARING))
        return self._prepare

    async def _prepare(self) -> None:
        await self._flush()
        # A batch that failed while the prepare waited made the transaction abortable.
        self.state.transition(TxnState.PREPARED, allowed_from=(TxnState.PREPARING,))

    def prepared(self) -> PreparedTransaction:
        """The prepared transaction's identity (after ``begin_prepare``'s operation)."""
        self.state.require("prepared", TxnState.PREPARED)
        idempotence = self._idempotence
        return PreparedTransaction(
            self._transactional_id, idempotence.producer_id, idempotence.epoch
        )

    def begin_commit(self) -> Operation:
        # COMMITTING: a commit that ran out of time is resumed (EndTxn is idempotent).
        self._end_sends(
            TxnState.COMMITTING,
            (TxnState.IN_TRANSACTION, TxnState.PREPARED, TxnState.COMMITTING),
        )
        return self._commit

    async def _commit(self) -> None:
        await self._flush()
        # A batch that failed while the commit waited made the transaction abortable.
        self.state.require("commit_transaction", TxnState.COMMITTING)
        if self.state.started:
            try:
                await self._end_transaction(committed=True)
            except ClientTimeoutError as error:
                # EndTxn may have been decided without its answer reaching us: the outcome is
                # unknown until a repeated EndTxn tells (as in Kafka, only commit may follow).
                raise ClientTimeoutError(
                    f"commit_transaction: {error}; the coordinator may or may not have "
                    "committed the transaction: call commit_transaction again to resume it "
                    "and learn the outcome"
                ) from error
        self.state.completed()

    def begin_abort(self) -> Operation:
        # ABORTING: an abort that failed (it ran out of time) is resumed; every step of it
        # may be repeated (EndTxn is idempotent).
        self._end_sends(
            TxnState.ABORTING,
            (
                TxnState.IN_TRANSACTION,
                TxnState.PREPARED,
                TxnState.ABORTABLE_ERROR,
                TxnState.ABORTING,
            ),
        )
        return self._abort

    def _end_sends(self, to: TxnState, allowed_from: tuple[TxnState, ...]) -> None:
        """Leave the open transaction for ``to`` with no send in progress: a record sent
        concurrently is in the transaction (the flush waits for its batch) or fails."""
        self._accumulator.hold_sends(lambda: self.state.transition(to, allowed_from=allowed_from))

    async def _abort(self) -> None:
        # Batches not sent yet are not written at all (Kafka aborts the undrained batches);
        # those in flight must be answered before the markers are written.
        if self._accumulator.abort_queued(
            TransactionAbortedError(f"the transaction of {self._transactional_id!r} was aborted")
        ):
            # A sequenced batch (a retry) dropped: its partition's sequence has a gap.
            self.state.bump_required = True
        await self._flush()
        if self._adding is not None:
            await asyncio.wait([self._adding])
        try:
            if self.state.started and not self.state.ended_by_coordinator:
                await self._end_transaction(committed=False)
            if self.state.bump_required:
                await self._init_producer_id(bump=True)
        except ClientTimeoutError as error:
            raise _resumable("abort_transaction", error) from error
        self.state.completed()

    async def _flush(self) -> None:
        """Wait until every batch of the transaction is acknowledged or failed (Kafka's
        hasIncompleteBatches). Sends ended with the transaction (``_end_sends``), so every
        incomplete batch is one of it and none can be added."""
        batches = self._accumulator.begin_flush()
        try:
            for batch in batches:
                await batch.wait_async()
        finally:
            self._accumulator.end_flush()

    async def _end_transaction(self, *, committed: bool) -> None:
        idempotence = self._idempotence
        response = await self._txn_call(
            "EndTxn",
            transaction_pb2.EndTxnRequest(
                transactional_id=self._transactional_id,
                producer_id=idempotence.producer_id,
                producer_epoch=idempotence.epoch,
                committed=committed,
            ),
            lambda r: [r.error_code],
            self._operation_deadline(),
        )
        code = error_code(response.error_code)
        if code is not ErrorCode.NONE:
            raise self._fatal_answer("EndTxn", code, response.error_message)

    def _operation_deadline(self) -> float:
        # The coordinator aborts a transaction open longer than its timeout: retrying past
        # it (and one request more) cannot help.
        return time.monotonic() + self._timeout_ms / 1000 + self._request_timeout_s

    # -- adding partitions (the sender's side) ------------------------------------------------

    def poll(self, now: float) -> float | None:
        """Called by the sender each pass: abort the undrained batches after an abortable
        error, and start AddPartitionsToTxn for partitions that have batches. Returns when to
        look again (None: an answer wakes the sender)."""
        state = self.state
        if state.state is TxnState.ABORTABLE_ERROR:
            assert state.error is not None
            self._accumulator.abort_queued(state.error)
            return None
        if state.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.PREPARING):
            return None
        if self._adding is not None or not state.new:
            return None
        if now < self._add_retry_at:
            return self._add_retry_at
        partitions = state.take_new()
        if not partitions:
            return None
        self._adding = asyncio.create_task(
            self._add_partitions(partitions), name="brook-producer-add-partitions"
        )
        return None

    async def _add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        idempotence = self._idempotence
        request = transaction_pb2.AddPartitionsToTxnRequest(
            transactional_id=self._transactional_id,
            producer_id=idempotence.producer_id,
            producer_epoch=idempotence.epoch,
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions],
        )
        try:
            response = await self._txn_call(
                "AddPartitionsToTxn",
                request,
                lambda r: [p.error_code for p in r.partitions],
                time.monotonic() + self._request_timeout_s,
            )
            self._settle_added(partitions, response)
        except ClientTimeoutError as error:
            # Tried again on the next pass; a coordinator that stays away lets the batches
            # expire (delivery.timeout.ms), which makes the transaction abortable.
            self._add_failures += 1
            self._add_retry_at = time.monotonic() + backoff_s(self._backoff, self._add_failures)
            _log.debug("AddPartitionsToTxn: %s; retrying", error)
        except BrookClientError as error:
            _log.info("AddPartitionsToTxn failed: %s", error)
        except Exception as defect:
            _log.exception("AddPartitionsToTxn failed unexpectedly")
            self.state.abortable(BrookClientError(f"AddPartitionsToTxn failed: {defect!r}"))
        finally:
            self._adding = None
            self._wake_sender()

    def _settle_added(
        self,
        partitions: list[tuple[str, int]],
        response: transaction_pb2.AddPartitionsToTxnResponse,
    ) -> None:
        """Apply the answer: the partitions are in the transaction, or (they stay queued)
        asked again after a back-off, or the transaction is abortable or the producer
        fenced."""
        results = {(p.topic, p.partition): p for p in response.partitions}
        if all(
            tp in results and error_code(results[tp].error_code) is ErrorCode.NONE
            for tp in partitions
        ):
            self._add_failures = 0
            self.state.partitions_added(partitions)
            return
        refused = [
            r
            for r in results.values()
            if error_code(r.error_code) not in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED)
        ]
        codes = {error_code(r.error_code) for r in refused}
        text = (
            f"AddPartitionsToTxn of {refused[0].topic}-{refused[0].partition}: "
            f"{refused[0].error_message or error_code(refused[0].error_code).name}"
            if refused
            else "AddPartitionsToTxn answered without every partition"
        )
        if codes & FATAL_CODES:
            self._fatal_answer("AddPartitionsToTxn", min(codes & FATAL_CODES), text)
        elif all(code.retriable for code in codes):
            # UNKNOWN_TOPIC_OR_PARTITION while metadata catches up, for one: the partitions
            # are still queued (state.new) and asked again after the back-off.
            self._add_failures += 1
            self._add_retry_at = time.monotonic() + backoff_s(self._backoff, self._add_failures)
            _log.debug("%s; retrying", text)
        else:
            self.state.abortable(api_error(min(codes), text))

    # -- errors -----------------------------------------------------------------------------

    def _fatal_answer(self, what: str, code: ErrorCode, text: str) -> BaseException:
        message = f"{what} for transactional id {self._transactional_id!r}: {text or code.name}"
        error: BaseException
        if code in FENCING_CODES:
            error = self._idempotence.fence(what, code, text or code.name)
        else:
            error = api_error(code, message)
            self._idempotence.fatal_error = error
        error = self.state.fatal(error)
        self._accumulator.abort_queued(error)
        return error

    def _raise_abortable_or_fatal(self, what: str, code: ErrorCode, text: str) -> None:
        if code in FATAL_CODES:
            raise self._fatal_answer(what, code, text)
        raise self._abort_required(
            api_error(code, f"{what} for {self._transactional_id!r}: {text or code.name}")
        )

    def _abort_required(self, cause: ApiError) -> TransactionAbortableError:
        self.state.abortable(cause)
        error = TransactionAbortableError(
            f"{cause.message}; call abort_transaction() and begin a new transaction"
        )
        error.__cause__ = cause
        return error

    # -- coordinator requests ---------------------------------------------------------------

    async def _txn_call(
        self,
        method: str,
        request: Any,
        codes_of: Callable[[Any], Iterable[int]],
        deadline: float,
    ) -> Any:
        return await self._coordinator_call(
            method,
            (group_pb2.COORDINATOR_TYPE_TRANSACTION, self._transactional_id),
            lambda address: getattr(self._network.transactions(address), method),
            request,
            codes_of,
            deadline,
        )

    async def _coordinator_call(
        self,
        what: str,
        key: tuple[int, str],
        rpc_at: Callable[[str], Callable[..., Awaitable[Any]]],
        request: Any,
        codes_of: Callable[[Any], Iterable[int]],
        deadline: float,
    ) -> Any:
        """The answer of ``rpc_at(address)(request)`` (RPC ``what``) at the coordinator of
        ``key`` (key type, key), asked again while it moved, is loading, answers
        CONCURRENT_TRANSACTIONS or cannot be reached, until ``deadline`` (then
        ClientTimeoutError). A call failing with a gRPC status that is not retriable
        (UNIMPLEMENTED, INVALID_ARGUMENT, ...: ``rpc_error``) is an unexpected answer: fatal."""
        failures = 0
        while True:
            problem = ""
            try:
                coordinator = await self._coordinator(key, deadline)
                timeout_s = min(self._request_timeout_s, max(deadline - time.monotonic(), 0.001))
                response = await rpc_at(coordinator.address)(request, timeout=timeout_s)
            except _Retry as retry:
                problem = str(retry)
            except grpc.aio.AioRpcError as failure:
                code, problem = rpc_error(failure)
                if not code.retriable:
                    raise self._fatal_answer(what, code, problem) from None
                self._coordinators.pop(key, None)
            else:
                codes = {error_code(code) for code in codes_of(response)}
                if not codes & _RETRY_CODES:
                    return response
                # COORDINATOR_LOAD_IN_PROGRESS: the owner, still loading; asked again.
                if codes & _MOVED_CODES:
                    hinted = hinted_coordinator(codes, getattr(response, "coordinator", None))
                    if hinted is None:
                        self._coordinators.pop(key, None)
                    else:
                        self._coordinators[key] = hinted
                problem = f"{coordinator.address} answered " + ", ".join(
                    sorted(c.name for c in codes & _RETRY_CODES)
                )
            failures += 1
            await self._sleep_before_retry(failures, deadline, problem)

    async def _sleep_before_retry(self, failures: int, deadline: float, problem: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ClientTimeoutError(
                f"transactional id {self._transactional_id!r}: no answer in time ({problem})"
            )
        _log.debug("transactional id %r: %s; retrying", self._transactional_id, problem)
        await asyncio.sleep(min(backoff_s(self._backoff, failures), remaining))

    async def _coordinator(self, key: tuple[int, str], deadline: float) -> Coordinator:
        found = self._coordinators.get(key)
        if found is not None:
            return found
        addresses = await self._locator()
        if not addresses:
            raise _Retry("no coordinator is registered with the cluster yet")
        key_type, name = key

        def ask(
            address: str, request: group_pb2.FindCoordinatorRequest, timeout_s: float
        ) -> Awaitable[group_pb2.FindCoordinatorResponse]:
            return self._network.groups(address).FindCoordinator(  # type: ignore[no-any-return]
                request, timeout=min(timeout_s, self._request_timeout_s)
            )

        try:
            found = await find_coordinator(name, addresses, ask, deadline, key_type=key_type)
        except CoordinatorNotFoundError as error:
            raise _Retry(str(error)) from None
        except CoordinatorRefusedError as error:
            if key_type == group_pb2.COORDINATOR_TYPE_GROUP:
                # The group's (send_offsets_to_transaction), e.g. GROUP_AUTHORIZATION_FAILED:
                # this transaction cannot commit its offsets; the producer is fine (Kafka).
                raise self._abort_required(api_error(error.code, str(error))) from None
            raise self._fatal_answer("FindCoordinator", error.code, str(error)) from None
        self._coordinators[key] = found
        return found
