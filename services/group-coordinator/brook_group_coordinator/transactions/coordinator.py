"""The transaction coordinator: every transactional id of the __transaction_state partitions
this process owns, Kafka's TransactionCoordinator rules, and the state written before it is
answered.

Ownership: __transaction_state partition p is owned by the owner of __consumer_offsets
partition ``p % offsets partitions`` at that coordinator epoch (``ownership.py``); the service
(``app.py``) loads and unloads partitions as the assignments change. A transactional id whose
partition is not owned here is answered NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS while it
is replayed. Loading claims the partition (fenced against older owners, ``fencing.py``),
replays it, and resumes every transaction in PrepareCommit/PrepareAbort: its markers are
written again (they are idempotent) and it is completed.

Every state change is one record appended to the partition (``records.py``), acknowledged by
the in-sync replicas, before it is applied and answered; a failed append leaves the state as
it was (the client gets NOT_COORDINATOR when the append cost this process the partition,
Kafka's translation of the storage error otherwise). While a transactional id's change is
being written, other requests for it are answered CONCURRENT_TRANSACTIONS (retriable), as in
Kafka. Appends of a partition are serialized (one in flight: the fenced writer's sequences).

Ending a transaction: EndTxn writes PrepareCommit/PrepareAbort and is answered; a completion
task then writes the markers (``MarkerWriter``: WriteTxnMarkers on the data partitions,
CompleteTransaction for the groups), retried with back-off until written, and then
CompleteCommit/CompleteAbort. An ongoing transaction is aborted by the coordinator with a
bumped producer epoch (Kafka's epoch fence) when it times out (``abort_timed_out``; never a
two-phase one, KIP-939: it waits for EndTxn from whoever holds its producer id and epoch) or
when InitProducerId finds it (the new instance is told CONCURRENT_TRANSACTIONS until the abort is
complete): the old producer's later requests are PRODUCER_FENCED here, and the markers carry
the bumped epoch, which fences it on the data partitions too. Only the producer whose
transaction timed out may come back (KIP-588): its InitProducerId naming its id and old epoch
gets the bumped epoch once the abort is complete, unless another instance bumped it since.
While that abort is being written the transaction is pending PrepareEpochFence; the record
written is PrepareAbort.
Idle transactional ids expire after transactional.id.expiration.ms (``expire_ids``: a
tombstone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Protocol

from brook.errors import BrookError, ErrorCode
from brook.producer_ids import ProducerIdUnavailableError
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook_group_coordinator.fencing import OffsetsWriteError
from brook_group_coordinator.group_manager import commit_error
from brook_group_coordinator.offsets_log import OffsetsLog, PartitionClaims
from brook_group_coordinator.ownership import (
    TRANSACTION_STATE_TOPIC,
    OwnedPartition,
    PartitionLoad,
    transaction_state_partition_for,
)
from brook_group_coordinator.partition_loader import (
    LostPartition,
    claim_and_replay,
    drop_lost_partition,
)
from brook_group_coordinator.records import RecordFormatError, UnknownRecordKindError
from brook_group_coordinator.timers import Timers
from brook_group_coordinator.transactions.records import (
    decode_transaction,
    decode_transaction_key,
    encode_transaction,
    encode_transaction_key,
)
from brook_group_coordinator.transactions.state import (
    NO_PRODUCER_ID,
    PRODUCER_EPOCH_MAX,
    Transaction,
    TxnState,
)

__all__ = [
    "InitResult",
    "MarkerWriter",
    "ProducerIdSource",
    "TransactionCoordinator",
    "TransactionSettings",
]

_log = logging.getLogger(__name__)

NO_EPOCH: Final = -1
NO_START: Final = -1


class ProducerIdSource(Protocol):
    async def generate(self, wait_s: float) -> int:
        """A producer id never handed out before; ProducerIdUnavailableError when none is at
        hand within ``wait_s`` (``brook.producer_ids.ProducerIdManager``)."""
        ...


class MarkerWriter(Protocol):
    async def write_markers(self, transaction: Transaction, coordinator_epoch: int) -> None:
        """Writes the transaction's outcome (PrepareCommit: commit, PrepareAbort: abort) to
        each of its partitions and groups, retrying until every one is written or skipped (a
        deleted topic, or a marker made obsolete by a marker of a newer epoch written there:
        ``markers.py``). Cancelled when the partition is lost."""
        ...


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    max_timeout_ms: int
    id_expiration_ms: int
    # How long InitProducerId waits for a block of producer ids.
    producer_id_wait_ms: int
    retry_backoff: RetryBackoff


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    message: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


@dataclass(slots=True)
class _Entry:
    """A transactional id here: ``current`` is what the log says (None: being created),
    ``pending`` the state being written, if a write is in flight."""

    owned: OwnedPartition
    current: Transaction | None
    pending: TxnState | None = None


class TransactionCoordinator:
    def __init__(
        self,
        *,
        settings: TransactionSettings,
        timers: Timers,
        log: OffsetsLog,
        claims: PartitionClaims | None,
        producer_ids: ProducerIdSource,
        markers: MarkerWriter,
        partition_count: int,
        on_partition_lost: LostPartition | None = None,
    ) -> None:
        """``log``/``claims``: __transaction_state (``claims`` None: not fenced, for a log only
        this process writes). ``on_partition_lost(partition, coordinator_epoch, fenced)``:
        called after a failed append dropped a partition."""
        self._settings = settings
        self._timers = timers
        self._log = log
        self._claims = claims
        self._producer_ids = producer_ids
        self._markers = markers
        self._on_partition_lost = on_partition_lost
        self.partition_count = partition_count
        self.owned: dict[int, OwnedPartition] = {}
        self._entries: dict[str, _Entry] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._completions: dict[str, asyncio.Task[None]] = {}
        # Appends in flight (with what follows them), whoever still waits for them.
        self._writes: set[asyncio.Task[None]] = set()

    # -- ownership --------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return transaction_state_partition_for(transactional_id, self.partition_count)

    def check_coordinator(self, transactional_id: str) -> tuple[ErrorCode, str]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, "the transactional id is empty"
        if self.partition_count <= 0:
            return (
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{TRANSACTION_STATE_TOPIC} does not exist yet",
            )
        partition = self.partition_for(transactional_id)
        owned = self.owned.get(partition)
        if owned is None:
            return (
                ErrorCode.NOT_COORDINATOR,
                f"{TRANSACTION_STATE_TOPIC}-{partition} is not owned here",
            )
        if owned.load is PartitionLoad.LOADING:
            return (
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"{TRANSACTION_STATE_TOPIC}-{partition} is being loaded",
            )
        return ErrorCode.NONE, ""

    async def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Takes ownership of a partition: claims it, replays it, and resumes the completion
        of every transaction it finds decided (PrepareCommit/PrepareAbort)."""
        loaded = await claim_and_replay(
            self.owned,
            partition,
            coordinator_epoch,
            self._log,
            self._claims,
            self._lock(partition),
        )
        if loaded is None:
            return
        owned, latest = loaded
        for raw_key, (_, raw_value) in latest.items():
            if raw_value is None:
                continue
            try:
                transactional_id = decode_transaction_key(raw_key)
                transaction = decode_transaction(transactional_id, raw_value)
            except UnknownRecordKindError:
                continue  # the fence, or a newer version's record
            except RecordFormatError as error:
                _log.error(
                    "skipping an unreadable __transaction_state record",
                    extra={"partition": partition, "error": str(error)},
                )
                continue
            self._entries[transactional_id] = _Entry(owned, transaction)
        owned.load = PartitionLoad.LOADED
        for transactional_id, entry in list(self._entries.items()):
            if entry.owned is owned and entry.current is not None:
                if entry.current.state.preparing:
                    self._start_completion(transactional_id)

    def unload_partition(self, partition: int) -> None:
        owned = self.owned.pop(partition, None)
        if owned is None:
            return
        for transactional_id in [t for t, e in self._entries.items() if e.owned is owned]:
            del self._entries[transactional_id]
            completion = self._completions.pop(transactional_id, None)
            if completion is not None:
                completion.cancel()

    def _lock(self, partition: int) -> asyncio.Lock:
        return self._locks.setdefault(partition, asyncio.Lock())

    # -- writing ----------------------------------------------------------------------------

    async def _write(
        self, entry: _Entry, transactional_id: str, target: Transaction | None, shown: TxnState
    ) -> None:
        """Appends ``target`` (None: a tombstone) for the entry's ownership, showing
        ``shown`` as pending meanwhile, then applies it (and starts the completion of a
        PrepareCommit/PrepareAbort); raises BrookError with the state unchanged when the append
        fails. The append and what follows run on whether or not the caller waits to the end:
        a caller that gives up (a client's call cancelled) neither leaves the append's outcome
        unknown nor a written state unapplied."""
        entry.pending = shown
        write = asyncio.get_running_loop().create_task(
            self._write_now(entry, transactional_id, target),
            name=f"txn-write-{transactional_id}",
        )
        self._writes.add(write)
        write.add_done_callback(self._write_done)
        await asyncio.shield(write)

    def _write_done(self, write: asyncio.Task[None]) -> None:
        self._writes.discard(write)
        if not write.cancelled():
            write.exception()  # retrieved: a caller that gave up was told nothing

    async def _write_now(
        self, entry: _Entry, transactional_id: str, target: Transaction | None
    ) -> None:
        owned = entry.owned
        try:
            async with self._lock(owned.partition):
                if self.owned.get(owned.partition) is not owned:
                    raise BrookError(
                        ErrorCode.NOT_COORDINATOR,
                        f"{TRANSACTION_STATE_TOPIC}-{owned.partition} is not owned here",
                    )
                value = None if target is None else encode_transaction(target)
                try:
                    await self._log.append(
                        owned.partition, [(encode_transaction_key(transactional_id), value)]
                    )
                except OffsetsWriteError as error:
                    drop_lost_partition(
                        self, TRANSACTION_STATE_TOPIC, owned, error, self._on_partition_lost
                    )
                    raise
        finally:
            entry.pending = None
        if self._entries.get(transactional_id) is not entry:
            return  # the partition was lost meanwhile: its new owner replays the record
        if target is None:
            del self._entries[transactional_id]
            return
        entry.current = target
        if target.state.preparing:
            self._start_completion(transactional_id)

    def _entry(self, transactional_id: str) -> _Entry | None:
        """The loaded entry (check_coordinator first), None if the id is unknown."""
        entry = self._entries.get(transactional_id)
        return entry if entry is not None and entry.current is not None else None

    # -- InitProducerId ---------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_producer_epoch: int = NO_EPOCH,
        *,
        two_phase: bool = False,
    ) -> InitResult:
        """Kafka's InitProducerId with a transactional id (KIP-360's expected id and epoch,
        or NO_PRODUCER_ID): a new producer id at epoch 0 for a new id, else the epoch bumped
        (a new producer id once the epoch is exhausted), fencing older instances. With an
        expected id and epoch: the current ones bump (and are recorded as the last ones, so a
        retry of this call whose answer was lost gets the same answer), the recorded last
        ones get the current ones again, anything else is PRODUCER_FENCED. ``two_phase``
        (KIP-939's enable2Pc) is recorded with the new epoch: it marks the id's transactions
        as two-phase (exempt from the timeout abort) until an InitProducerId without it."""
        error, message = self.check_coordinator(transactional_id)
        if error is not ErrorCode.NONE:
            return InitResult(error, message)
        if not 0 < timeout_ms <= self._settings.max_timeout_ms:
            return InitResult(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction timeout {timeout_ms} ms is outside (0, "
                f"{self._settings.max_timeout_ms}] (transaction.max.timeout.ms)",
            )
        entry = self._entries.get(transactional_id)
        if entry is None:
            return await self._init_new(transactional_id, timeout_ms, two_phase)
        if entry.pending is not None or entry.current is None:
            return _concurrent(transactional_id)
        current = entry.current
        expected = (expected_producer_id, expected_producer_epoch)
        if expected_producer_id != NO_PRODUCER_ID:
            if _retried(current, expected):
                # A retry of the InitProducerId that bumped it, or the producer whose own
                # transaction this coordinator aborted (KIP-588): the current id and epoch,
                # once the abort's markers are written.
                if current.state.preparing:
                    return _concurrent(transactional_id)
                if current.state.idle:
                    return InitResult(
                        ErrorCode.NONE, "", current.producer_id, current.producer_epoch
                    )
            if expected != (current.producer_id, current.producer_epoch):
                return InitResult(
                    ErrorCode.PRODUCER_FENCED,
                    f"producer {expected_producer_id} epoch {expected_producer_epoch} is not "
                    f"the current one of {transactional_id!r}",
                )
        if current.state.preparing:
            return _concurrent(transactional_id)
        if current.state is TxnState.ONGOING:
            self._fence(transactional_id, entry, recoverable=False)
            return _concurrent(transactional_id)
        now_ms = self._timers.now_ms()
        producer_id, producer_epoch = current.producer_id, current.producer_epoch + 1
        if current.producer_epoch >= PRODUCER_EPOCH_MAX:
            entry.pending = TxnState.EMPTY  # no other request while the id is fetched
            try:
                producer_id = await self._new_producer_id()
            except BrookError as e:
                return InitResult(e.code, e.message)
            finally:
                entry.pending = None
            producer_epoch = 0
            if self._entries.get(transactional_id) is not entry or entry.current is not current:
                return _concurrent(transactional_id)
        # The id and epoch replaced are recorded only when the request named them (KIP-360: a
        # retry of it is recognised); a plain InitProducerId fences whoever held them.
        last_id, last_epoch = (
            (current.producer_id, current.producer_epoch)
            if expected_producer_id != NO_PRODUCER_ID
            else (NO_PRODUCER_ID, NO_EPOCH)
        )
        target = current.to(
            TxnState.EMPTY,
            now_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            last_producer_id=last_id,
            last_producer_epoch=last_epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            groups=frozenset(),
            start_ms=NO_START,
            two_phase=two_phase,
        )
        try:
            await self._write(entry, transactional_id, target, TxnState.EMPTY)
        except BrookError as e:
            return InitResult(_write_failure(e), e.message)
        return InitResult(ErrorCode.NONE, "", producer_id, producer_epoch)

    async def _init_new(
        self, transactional_id: str, timeout_ms: int, two_phase: bool
    ) -> InitResult:
        owned = self.owned[self.partition_for(transactional_id)]
        entry = _Entry(owned, None, TxnState.EMPTY)
        self._entries[transactional_id] = entry
        try:
            producer_id = await self._new_producer_id()
            now_ms = self._timers.now_ms()
            target = Transaction(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=0,
                last_producer_id=NO_PRODUCER_ID,
                last_producer_epoch=NO_EPOCH,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=frozenset(),
                groups=frozenset(),
                start_ms=NO_START,
                update_ms=now_ms,
                two_phase=two_phase,
            )
            await self._write(entry, transactional_id, target, TxnState.EMPTY)
        except BrookError as e:
            return InitResult(_write_failure(e), e.message)
        finally:
            if entry.current is None and self._entries.get(transactional_id) is entry:
                del self._entries[transactional_id]
        return InitResult(ErrorCode.NONE, "", producer_id, 0)

    async def _new_producer_id(self) -> int:
        try:
            return await self._producer_ids.generate(self._settings.producer_id_wait_ms / 1000)
        except ProducerIdUnavailableError as error:
            raise BrookError(error.code, str(error)) from None

    def _fence(self, transactional_id: str, entry: _Entry, *, recoverable: bool) -> None:
        """Aborts the entry's ongoing transaction with a bumped producer epoch (the same one
        when it is exhausted: the next InitProducerId hands out a new id), in the background.

        ``recoverable`` (the transaction timed out): the producer's id and epoch are recorded
        as the last ones, so that its InitProducerId naming them gets the bumped epoch
        (KIP-588: a producer recovers from its transaction's timeout by aborting). A fence for
        another instance's InitProducerId records none: the fenced instance stays fenced."""
        current = entry.current
        assert current is not None and current.state is TxnState.ONGOING
        bump = 1 if current.producer_epoch < PRODUCER_EPOCH_MAX else 0
        last_id, last_epoch = (
            (current.producer_id, current.producer_epoch)
            if recoverable and bump
            else (NO_PRODUCER_ID, NO_EPOCH)
        )
        target = current.to(
            TxnState.PREPARE_ABORT,
            self._timers.now_ms(),
            producer_epoch=current.producer_epoch + bump,
            last_producer_id=last_id,
            last_producer_epoch=last_epoch,
        )
        entry.pending = TxnState.PREPARE_EPOCH_FENCE  # until the task's write takes over
        task = asyncio.get_running_loop().create_task(
            self._write_fence(transactional_id, entry, target),
            name=f"txn-fence-{transactional_id}",
        )
        self._track_completion(transactional_id, task)

    async def _write_fence(self, transactional_id: str, entry: _Entry, target: Transaction) -> None:
        """The fencing abort's PrepareAbort (its completion starts once it is written)."""
        try:
            await self._write(entry, transactional_id, target, TxnState.PREPARE_EPOCH_FENCE)
        except BrookError as error:
            _log.warning(
                "the abort of a transaction (epoch fence) was not written",
                extra={"transactional_id": transactional_id, "error": error.message},
            )

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, str, _Entry | None]:
        """Kafka's checks shared by AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, in its
        order; the entry when they pass."""
        error, message = self.check_coordinator(transactional_id)
        if error is not ErrorCode.NONE:
            return error, message, None
        entry = self._entry(transactional_id)
        if entry is None or entry.current is None or entry.current.producer_id != producer_id:
            return (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer {producer_id} is not the one of transactional id {transactional_id!r}",
                None,
            )
        if entry.current.producer_epoch != producer_epoch:
            return (
                ErrorCode.PRODUCER_FENCED,
                f"producer epoch {producer_epoch} is not the current one "
                f"({entry.current.producer_epoch}) of {transactional_id!r}",
                None,
            )
        if entry.pending is not None:
            error, message = _concurrent_error(transactional_id)
            return error, message, None
        return ErrorCode.NONE, "", entry

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[tuple[str, int]],
    ) -> tuple[ErrorCode, str]:
        """Adds data partitions to the transaction, starting it if none is ongoing."""
        return await self._add(
            transactional_id, producer_id, producer_epoch, frozenset(partitions), frozenset()
        )

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[tuple[str, int]],
    ) -> tuple[ErrorCode, str, frozenset[tuple[str, int]]]:
        """AddPartitionsToTxn verify_only (KIP-890 part 1, a partition leader asking before
        it opens a transaction): an error for the whole request, or NONE and those of
        ``partitions`` that are in the ongoing transaction of ``producer_id`` at
        ``producer_epoch``. Changes nothing. As Kafka, a write in flight is no reason to
        refuse (the leader's verification guard catches a marker that follows), but a
        transaction being committed or aborted is CONCURRENT_TRANSACTIONS."""
        error, message = self.check_coordinator(transactional_id)
        if error is not ErrorCode.NONE:
            return error, message, frozenset()
        entry = self._entry(transactional_id)
        current = None if entry is None else entry.current
        if current is None or current.producer_id != producer_id:
            return (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer {producer_id} is not the one of transactional id {transactional_id!r}",
                frozenset(),
            )
        if current.producer_epoch != producer_epoch:
            return (
                ErrorCode.PRODUCER_FENCED,
                f"producer epoch {producer_epoch} is not the current one "
                f"({current.producer_epoch}) of {transactional_id!r}",
                frozenset(),
            )
        if current.state.preparing:
            error, message = _concurrent_error(transactional_id)
            return error, message, frozenset()
        if current.state is not TxnState.ONGOING:
            return ErrorCode.NONE, "", frozenset()
        return ErrorCode.NONE, "", frozenset(partitions) & current.partitions

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> tuple[ErrorCode, str]:
        """Adds a group's offsets to the transaction, starting it if none is ongoing."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "the group id is empty"
        return await self._add(
            transactional_id, producer_id, producer_epoch, frozenset(), frozenset({group_id})
        )

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[tuple[str, int]],
        groups: frozenset[str],
    ) -> tuple[ErrorCode, str]:
        error, message, entry = self._check_producer(transactional_id, producer_id, producer_epoch)
        if entry is None or entry.current is None:
            return error, message
        current = entry.current
        if current.state.preparing:
            return _concurrent_error(transactional_id)
        ongoing = current.state is TxnState.ONGOING
        if ongoing and partitions <= current.partitions and groups <= current.groups:
            return ErrorCode.NONE, ""
        now_ms = self._timers.now_ms()
        target = current.to(
            TxnState.ONGOING,
            now_ms,
            partitions=(current.partitions if ongoing else frozenset()) | partitions,
            groups=(current.groups if ongoing else frozenset()) | groups,
            start_ms=current.start_ms if ongoing else now_ms,
        )
        try:
            await self._write(entry, transactional_id, target, TxnState.ONGOING)
        except BrookError as e:
            return _write_failure(e), e.message
        return ErrorCode.NONE, ""

    # -- EndTxn -----------------------------------------------------------------------------

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> tuple[ErrorCode, str]:
        """Decides the ongoing transaction: answered once PrepareCommit/PrepareAbort is
        written; the markers and CompleteCommit/CompleteAbort follow in the background. A
        retry after completion with the same outcome succeeds."""
        error, message, entry = self._check_producer(transactional_id, producer_id, producer_epoch)
        if entry is None or entry.current is None:
            return error, message
        current = entry.current
        if current.state.preparing:
            wanted = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
            if current.state is wanted:
                return _concurrent_error(transactional_id)
            return _invalid_end(transactional_id, current.state, committed)
        if current.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
            if current.state is done:
                return ErrorCode.NONE, ""
            return _invalid_end(transactional_id, current.state, committed)
        if current.state is not TxnState.ONGOING:
            return _invalid_end(transactional_id, current.state, committed)
        state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        target = current.to(state, self._timers.now_ms())
        try:
            await self._write(entry, transactional_id, target, state)
        except BrookError as e:
            return _write_failure(e), e.message
        return ErrorCode.NONE, ""

    # -- completion -------------------------------------------------------------------------

    def _start_completion(self, transactional_id: str) -> None:
        entry = self._entries[transactional_id]
        task = asyncio.get_running_loop().create_task(
            self._complete(transactional_id, entry), name=f"txn-complete-{transactional_id}"
        )
        self._track_completion(transactional_id, task)

    def _track_completion(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        self._completions[transactional_id] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._completions.get(transactional_id) is finished:
                del self._completions[transactional_id]

        task.add_done_callback(done)

    async def _complete(self, transactional_id: str, entry: _Entry) -> None:
        """Markers, then CompleteCommit/CompleteAbort; whatever fails (an unexpected exception
        too: logged with its traceback) is retried with back-off while the partition is owned
        here (a lost partition cancels this task), so a decided transaction is never left
        without anyone completing it. Markers refused because a newer epoch wrote there are
        obsolete (``MarkerWriter``): if a successor owns the partition now, it is the append of
        the completion that finds out (fenced: the partition is dropped, this task ends)."""
        failures = 0
        while self._entries.get(transactional_id) is entry:
            current = entry.current
            if current is None or not current.state.preparing:
                return
            try:
                await self._markers.write_markers(current, entry.owned.coordinator_epoch)
                committed = current.state is TxnState.PREPARE_COMMIT
                state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
                target = current.to(
                    state,
                    self._timers.now_ms(),
                    partitions=frozenset(),
                    groups=frozenset(),
                    start_ms=NO_START,
                )
                await self._write(entry, transactional_id, target, state)
                return
            except BrookError as error:
                failures += 1
                wait_s = backoff_s(self._settings.retry_backoff, failures)
                _log.warning(
                    "completing a transaction failed; trying again",
                    extra={
                        "transactional_id": transactional_id,
                        "error": error.message,
                        "wait_ms": round(wait_s * 1000),
                    },
                )
                await asyncio.sleep(wait_s)
            except Exception:
                failures += 1
                wait_s = backoff_s(self._settings.retry_backoff, failures)
                _log.exception(
                    "completing a transaction failed unexpectedly; trying again",
                    extra={"transactional_id": transactional_id, "wait_ms": round(wait_s * 1000)},
                )
                await asyncio.sleep(wait_s)

    # -- timeouts and expiry ----------------------------------------------------------------

    def abort_timed_out(self) -> list[str]:
        """Starts the epoch-fencing abort of every ongoing transaction past its timeout,
        except two-phase ones (KIP-939: prepared, they wait for their decision however long it
        takes); returns their transactional ids."""
        now_ms = self._timers.now_ms()
        timed_out = [
            (transactional_id, entry)
            for transactional_id, entry in self._entries.items()
            if entry.pending is None
            and entry.current is not None
            and entry.current.state is TxnState.ONGOING
            and not entry.current.two_phase
            and entry.current.expires_ms <= now_ms
            and entry.owned.load is PartitionLoad.LOADED
        ]
        for transactional_id, entry in timed_out:
            _log.info(
                "aborting a transaction that timed out",
                extra={"transactional_id": transactional_id},
            )
            self._fence(transactional_id, entry, recoverable=True)
        return [transactional_id for transactional_id, _ in timed_out]

    async def expire_ids(self) -> int:
        """Removes (a tombstone each) the transactional ids with no transaction in progress
        and no change for transactional.id.expiration.ms; returns how many."""
        now_ms = self._timers.now_ms()
        expired = [
            (transactional_id, entry)
            for transactional_id, entry in self._entries.items()
            if entry.pending is None
            and entry.current is not None
            and entry.current.state.idle
            and entry.current.update_ms + self._settings.id_expiration_ms <= now_ms
        ]
        removed = 0
        for transactional_id, entry in expired:
            if self._entries.get(transactional_id) is not entry or entry.pending is not None:
                continue
            try:
                await self._write(entry, transactional_id, None, TxnState.DEAD)
            except BrookError as error:
                _log.warning(
                    "an expired transactional id was not removed",
                    extra={"transactional_id": transactional_id, "error": error.message},
                )
                continue
            removed += 1
        return removed

    # -- administration ---------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, str, Transaction | None]:
        error, message = self.check_coordinator(transactional_id)
        if error is not ErrorCode.NONE:
            return error, message, None
        entry = self._entry(transactional_id)
        if entry is None:
            return (
                ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                f"no transactional id {transactional_id!r}",
                None,
            )
        return ErrorCode.NONE, "", entry.current

    def loading_partitions(self) -> list[int]:
        return sorted(p for p, o in self.owned.items() if o.load is PartitionLoad.LOADING)

    def transactions(
        self,
        states: Collection[TxnState] = (),
        producer_ids: Collection[int] = (),
        running_longer_than_ms: int = 0,
    ) -> list[Transaction]:
        """The loaded transactions matching every filter given (empty: no filter)."""
        now_ms = self._timers.now_ms()
        found = []
        for entry in self._entries.values():
            current = entry.current
            if current is None or entry.owned.load is not PartitionLoad.LOADED:
                continue
            if states and current.state not in states:
                continue
            if producer_ids and current.producer_id not in producer_ids:
                continue
            if running_longer_than_ms > 0 and (
                current.start_ms < 0 or now_ms - current.start_ms < running_longer_than_ms
            ):
                continue
            found.append(current)
        return found

    async def close(self) -> None:
        """Stops the completions (a successor resumes them), waits for the appends in flight
        (each bounded by the log's own timeout) and drops every partition."""
        completions = list(self._completions.values())
        for task in completions:
            task.cancel()
        await asyncio.gather(*completions, return_exceptions=True)
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        for partition in list(self.owned):
            self.unload_partition(partition)


def _retried(current: Transaction, expected: tuple[int, int]) -> bool:
    """Whether an InitProducerId naming ``expected`` is a retry of the one that made
    ``current``: it names the id and epoch that call named (recorded only then, never after
    a plain bump or a fencing abort). Another producer id than the current one is a retry only
    of the call that replaced an exhausted epoch with a new id, as in Kafka."""
    expected_id, expected_epoch = expected
    return (
        current.last_producer_epoch != NO_EPOCH
        and expected == (current.last_producer_id, current.last_producer_epoch)
        and (expected_id == current.producer_id or expected_epoch >= PRODUCER_EPOCH_MAX)
    )


def _concurrent_error(transactional_id: str) -> tuple[ErrorCode, str]:
    return (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        f"a state change of transactional id {transactional_id!r} is in progress; retry",
    )


def _concurrent(transactional_id: str) -> InitResult:
    return InitResult(*_concurrent_error(transactional_id))


def _invalid_end(transactional_id: str, state: TxnState, committed: bool) -> tuple[ErrorCode, str]:
    outcome = "commit" if committed else "abort"
    return (
        ErrorCode.INVALID_TXN_STATE,
        f"cannot {outcome} transactional id {transactional_id!r} in state {state.value}",
    )


def _write_failure(error: BrookError) -> ErrorCode:
    """What a client is told when the state change it asked for was not written."""
    if isinstance(error, OffsetsWriteError):
        return ErrorCode.NOT_COORDINATOR
    return commit_error(error.code)
