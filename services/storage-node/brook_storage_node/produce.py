"""The produce path: a request's partitions checked, appended and answered (Kafka's
``ReplicaManager.appendRecords``).

``ProducePath.append_records`` takes one Produce or ProduceRecords request as plain values (the
servicer translates the protobuf) and returns one ``ProducePartitionResult`` per entry, in
order. What it guarantees, in the order it works:

1. Bounded memory: the request's bytes count against queued.max.request.bytes from admission
   until its appends are done (``ProduceLimitError`` when they would exceed it: nothing else
   happens to the request).
2. Per-partition order across concurrent requests: a request takes its place at the
   leadership gates (leadership_gate.py) on arrival, before its first await, and appends to
   a partition the node is becoming the leader of only when its turn comes, within its
   timeout (else NOT_LEADER_OR_FOLLOWER). Past the gates, every entry's append starts at
   once, as a task, in request order and before the request awaits anything, so each takes
   its place in its partition's append lock (FIFO) in arrival order: a request whose first
   entry runs on a thread cannot be overtaken at its second partition by a later request
   (Kafka serves a connection's requests in order; a client without idempotence that
   pipelines them relies on it).
3. Checks per entry: a malformed address is INVALID_REQUEST; the node must lead
   the partition (NOT_LEADER_OR_FOLLOWER with a hint, as ``ReplicaManager.leader_partition``
   says). In a client's request a partition may appear more than once: its entries are
   appended in the order they appear (point 2), each answered on its own (the gateway merges a
   connection's pipelined requests into one call this way); a transaction marker names each
   once; unless a coordinator's Produce writes (never a transaction marker), no internal
   topic (INVALID_TOPIC_EXCEPTION) and no producer id reserved for the coordinators
   (INVALID_RECORD). A ProduceRecords entry's
   records become one batch in the requested (or the topic's) codec.
4. Idempotent producers: a retried batch is answered with its original offsets
   (log/producer_state.py); a batch that arrived ahead of its producer's next sequence (or
   past sequence 0 as the first batch of a producer the partition has no state for, appended
   after the wait) waits, out of the gates, up to SEQUENCE_GAP_WAIT_MS for the ones in
   between, unless the batch it waits for was refused here a moment ago (refusals.py): then
   it is refused alike. acks=0 waits for nothing: its request is answered already.
5. Transactions (transaction.partition.verification.enable, txn_verification.py): a client's
   transactional batch that would open a transaction of its producer on the partition is first
   verified with the transaction coordinator of the request's ``transactional_id`` (an empty
   one cannot be: the log refuses the batch, INVALID_TXN_STATE, as Kafka's does), within the
   request's timeout, and appended only with the producer's verification guard, which a
   marker landing meanwhile withdraws. Only such a batch awaits before its append; every
   other keeps its place as point 2 says (a transactional producer's batches are ordered by
   their sequences, point 4).
6. Acknowledgement: acks=0 answers once the appends are started (errors are logged, never
   reported); acks=1 once appended here; acks=all (and unspecified) once the
   high watermark passes each batch (delayed_produce.py), the gate and gap waits coming out of
   the request's timeout (bounded by request.timeout.ms).

Append failures carry the partition's log start offset (the Java producer reads it to tell a
lost producer state from a real gap), except those Kafka answers with -1.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from brook.errors import ErrorCode
from brook.record import BatchBuilder, BatchHeader, Compression, RecordError, scan_batches
from brook.reserved import is_reserved_producer_id
from brook.v1 import common_pb2, storage_pb2
from brook_storage_node.delayed_produce import await_replication
from brook_storage_node.errors import ErrorResult, PartitionError, error_result
from brook_storage_node.leadership_gate import AppendTurns
from brook_storage_node.limits import InFlightBytes, StorageLimits
from brook_storage_node.log import AppendOrigin, LogAppendInfo, TopicPartition
from brook_storage_node.log.producer_state import (
    OutOfOrderSequenceError,
    VerificationGuard,
    is_producer_batch,
)
from brook_storage_node.log.time_index import NO_TIMESTAMP
from brook_storage_node.partition import NO_OFFSET, SEQUENCE_GAP_WAIT_MS, Partition
from brook_storage_node.refusals import RecentRefusals
from brook_storage_node.replica_manager import ReplicaManager
from brook_storage_node.txn_verification import TransactionVerifier

__all__ = [
    "PlainRecords",
    "ProduceEntry",
    "ProduceLimitError",
    "ProducePartitionResult",
    "ProducePath",
    "address_errors",
]

_log = logging.getLogger(__name__)

_VALID_ACKS: Final = frozenset(
    (
        storage_pb2.ACKS_UNSPECIFIED,
        storage_pb2.ACKS_NONE,
        storage_pb2.ACKS_LEADER,
        storage_pb2.ACKS_ALL,
    )
)
# brook.v1.CompressionType (UNSPECIFIED = the topic's choice) to the batch attribute codec.
_COMPRESSION_OF_PROTO: Final[dict[int, Compression]] = {
    common_pb2.COMPRESSION_TYPE_NONE: Compression.NONE,
    common_pb2.COMPRESSION_TYPE_GZIP: Compression.GZIP,
    common_pb2.COMPRESSION_TYPE_SNAPPY: Compression.SNAPPY,
    common_pb2.COMPRESSION_TYPE_LZ4: Compression.LZ4,
    common_pb2.COMPRESSION_TYPE_ZSTD: Compression.ZSTD,
}
# Append failures Kafka answers with log_start_offset -1 (ReplicaManager.appendToLocalLog);
# every other one carries the partition's log start offset.
_NO_LOG_START_ERRORS: Final = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class PlainRecords:
    """A ProduceRecords entry's records, which the node builds into one batch."""

    records: Sequence[common_pb2.Record]
    compression: int = common_pb2.COMPRESSION_TYPE_UNSPECIFIED
    """A brook.v1.CompressionType; UNSPECIFIED: the topic's compression.type."""


@dataclass(frozen=True, slots=True)
class ProduceEntry:
    """One partition entry of a request, as the client sent it: RecordBatch v2 bytes
    (Produce) or plain records (ProduceRecords)."""

    topic: str
    partition_index: int
    records: bytes = b""
    plain: PlainRecords | None = None


@dataclass(frozen=True, slots=True)
class ProducePartitionResult:
    """The answer for one entry: an error, or where its batches went (-1 where unknown: an
    acks=0 entry is answered before it is appended)."""

    topic: str
    partition_index: int
    error: ErrorResult | None = None
    base_offset: int = NO_OFFSET
    log_append_time_ms: int = NO_TIMESTAMP
    log_start_offset: int = NO_OFFSET


class ProduceLimitError(Exception):
    """The request would take the node over queued.max.request.bytes; nothing was done."""


@dataclass(frozen=True, slots=True)
class _Append:
    """An entry that passed its checks: ``records`` (built, for plain records) go to
    ``partition``."""

    index: int
    """Its position in the request."""
    entry: ProduceEntry
    partition: Partition
    records: bytes


# The outcome of one append attempt: appended, refused, or set aside (None) because its
# batch is ahead of its producer's sequence.
_Outcome = LogAppendInfo | ProducePartitionResult | None

AppendedCounter = Callable[[Sequence[tuple[str, LogAppendInfo]]], None]
"""Told, once per request, the (topic, append) pairs it appended (for bytes_in/messages_in)."""


class ProducePath:
    """Appends produce requests to the partitions this node leads. Use on the event loop;
    ``close`` on shutdown."""

    def __init__(
        self,
        replicas: ReplicaManager,
        limits: StorageLimits,
        on_appended: AppendedCounter,
        verifier: TransactionVerifier | None = None,
    ) -> None:
        """``verifier`` None: transaction.partition.verification.enable is false."""
        self._replicas = replicas
        self._verifier = verifier
        self._limits = limits
        self._on_appended = on_appended
        self._bytes = InFlightBytes(limits.produce_bytes_in_flight_max)
        self._refusals = RecentRefusals()
        # acks=0 appends still running after their request was answered.
        self._background: set[asyncio.Future[list[_Outcome]]] = set()

    @property
    def bytes_in_flight(self) -> int:
        return self._bytes.in_use_bytes

    async def close(self) -> None:
        """Cancel and await the acks=0 appends still running (the server has stopped); their
        bytes and gate places are released, started or not."""
        running = list(self._background)
        for appending in running:
            appending.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def append_records(
        self,
        entries: Sequence[ProduceEntry],
        *,
        acks: int,
        timeout_ms: int,
        size_bytes: int,
        coordinator: bool = False,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transactional_id: str = "",
    ) -> list[ProducePartitionResult]:
        """Append a request's entries (``acks`` a brook.v1.Acks, ``size_bytes`` what the
        request counts against queued.max.request.bytes, ``coordinator`` whether a
        coordinator's Produce sent it (internal topics and reserved producer ids allowed; never
        for markers), ``origin`` COORDINATOR for transaction markers, which only
        WriteTxnMarkers sends, ``transactional_id`` a transactional producer's, for point 5);
        one result per entry, in order. ProduceLimitError before
        anything is done if the node has too many bytes in flight."""
        if not self._bytes.try_acquire(size_bytes):
            raise ProduceLimitError(
                f"the node is already processing {self._bytes.in_use_bytes} bytes of "
                f"produce requests; this one ({size_bytes} bytes) would exceed "
                f"queued.max.request.bytes={self._bytes.limit_bytes}; retry later"
            )
        released = False
        # Before the first await: a request's place at a gate is its arrival order.
        turns = self._replicas.gates.enter(
            [TopicPartition(e.topic, e.partition_index) for e in entries]
        )
        try:
            request_error = _request_error(acks, timeout_ms)
            if request_error is not None:
                return [_refused(entry, request_error) for entry in entries]
            wait_ms = min(
                self._limits.wait_ms_max if timeout_ms == 0 else timeout_ms,
                self._limits.wait_ms_max,
            )
            late: set[TopicPartition] = set()
            if turns is not None:
                # The gate's wait comes out of the request's timeout, not on top of it.
                started = asyncio.get_running_loop().time()
                late = await turns.wait(wait_ms / 1000)
                waited_ms = (asyncio.get_running_loop().time() - started) * 1000
                wait_ms = max(0, int(wait_ms - waited_ms))
            # A transaction marker names each partition once; a client's entries may repeat one.
            refusals, appends = self._resolve(
                entries, coordinator=coordinator, repeats=origin is AppendOrigin.CLIENT
            )
            if late:
                refusals = _still_becoming(entries, refusals, late)
            self._remember_refusals(entries, refusals, appends)
            appends = [append for append in appends if append.index not in refusals]
            acks_all = acks not in (storage_pb2.ACKS_NONE, storage_pb2.ACKS_LEADER)
            verification = None
            if self._verifier is not None and not coordinator and origin is AppendOrigin.CLIENT:
                verification = _Verification(
                    self._verifier, transactional_id, time.monotonic() + wait_ms / 1000
                )
            # acks=0 has no second pass: no batch is set aside (point 4).
            gap_wait_s = 0.0 if acks == storage_pb2.ACKS_NONE else None
            # No await between here and the gates (or the arrival): see point 2 above.
            appending = asyncio.gather(
                *(
                    self._append(
                        a,
                        acks_all=acks_all,
                        gap_wait_s=gap_wait_s,
                        origin=origin,
                        verification=verification,
                    )
                    for a in appends
                )
            )
            if acks == storage_pb2.ACKS_NONE:
                # Answered now: the gates are left, and the bytes released, when the appends
                # are done (or cancelled, even before they started).
                self._queue_unacknowledged(appends, appending, size_bytes, turns)
                released = True
                turns = None
                return _answers(entries, refusals, {})
            return await self._append_acknowledged(
                entries,
                refusals,
                appends,
                appending,
                turns,
                wait_ms,
                acks_all=acks_all,
                verification=verification,
            )
        finally:
            if turns is not None:
                turns.release()
            if not released:
                self._bytes.release(size_bytes)

    async def _append_acknowledged(
        self,
        entries: Sequence[ProduceEntry],
        refusals: dict[int, ProducePartitionResult],
        appends: list[_Append],
        appending: asyncio.Future[list[_Outcome]],
        turns: AppendTurns | None,
        wait_ms: int,
        *,
        acks_all: bool,
        verification: _Verification | None,
    ) -> list[ProducePartitionResult]:
        """acks=1 and acks=all: wait for the request's ``appending`` (one outcome per append),
        then answer."""
        started = asyncio.get_running_loop().time()
        outcomes: dict[int, _Outcome] = {
            append.index: outcome for append, outcome in zip(appends, await appending, strict=True)
        }
        # Verifications come out of the request's timeout.
        wait_ms = max(0, int(wait_ms - (asyncio.get_running_loop().time() - started) * 1000))
        if turns is not None:
            # Appended: the next request at these partitions' gates may append.
            turns.release()
        ahead = [append for append in appends if outcomes[append.index] is None]
        if ahead:
            # Batches that arrived before the ones they follow wait for them, together and
            # out of the gates (the ones they wait for may be queued there), the wait coming
            # out of the request's timeout.
            gap_wait_s = min(SEQUENCE_GAP_WAIT_MS, wait_ms) / 1000
            started = asyncio.get_running_loop().time()
            retried = await asyncio.gather(
                *(
                    self._append(
                        a, acks_all=acks_all, gap_wait_s=gap_wait_s, verification=verification
                    )
                    for a in ahead
                )
            )
            for append, outcome in zip(ahead, retried, strict=True):
                outcomes[append.index] = outcome
            waited_ms = (asyncio.get_running_loop().time() - started) * 1000
            wait_ms = max(0, int(wait_ms - waited_ms))
        appended = [
            (append, info)
            for append in appends
            if isinstance(info := outcomes[append.index], LogAppendInfo)
        ]
        self._on_appended([(append.entry.topic, info) for append, info in appended])
        results = {
            index: outcome
            for index, outcome in outcomes.items()
            if isinstance(outcome, ProducePartitionResult)
        }
        for append, info in appended:
            results[append.index] = _appended(append.entry, info)
        if acks_all:
            waits = await await_replication(
                [(append.partition, info) for append, info in appended], wait_ms
            )
            for (append, info), error in zip(appended, waits, strict=True):
                if error is not None:
                    # The batch is in the leader's log; as Kafka does, say where.
                    results[append.index] = ProducePartitionResult(
                        append.entry.topic,
                        append.entry.partition_index,
                        error,
                        base_offset=info.first_offset,
                        log_start_offset=info.log_start_offset,
                    )
        return _answers(entries, refusals, results)

    def _resolve(
        self, entries: Sequence[ProduceEntry], *, coordinator: bool, repeats: bool
    ) -> tuple[dict[int, ProducePartitionResult], list[_Append]]:
        """Check addresses (a repeated partition is refused unless ``repeats``), leadership
        and, unless a coordinator writes, that no internal topic or reserved producer id is
        written (and build the batches of plain records): each entry is either refused (by its
        index) or to be appended."""
        refusals: dict[int, ProducePartitionResult] = {}
        appends: list[_Append] = []
        errors = address_errors(
            [(entry.topic, entry.partition_index) for entry in entries], repeats=repeats
        )
        for index, (entry, address_error) in enumerate(zip(entries, errors, strict=True)):
            try:
                if address_error is not None:
                    raise PartitionError(address_error.code, address_error.message)
                partition = self._replicas.leader_partition(entry.topic, entry.partition_index)
                refused = None if coordinator else self._client_write_error(entry)
                if refused is not None:
                    refusals[index] = _refused(entry, refused)
                    continue
                records = entry.records
                if entry.plain is not None:
                    records = _build_batch(entry.plain, partition)
                appends.append(_Append(index, entry, partition, records))
            except Exception as exc:
                refusals[index] = _refused(
                    entry,
                    exc.result if isinstance(exc, _RecordBuildError) else error_result(exc),
                )
        return refusals, appends

    def _client_write_error(self, entry: ProduceEntry) -> ErrorResult | None:
        """Why a client (or a transaction marker) may not write this entry, if it may not:
        Kafka's ReplicaManager refuses internal topics to every origin but the coordinators',
        and a batch with a coordinator's producer id would fence the coordinators or break
        their reload."""
        topic = self._replicas.view.topic(entry.topic)
        if topic is not None and topic.internal:
            return ErrorResult(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"{entry.topic} is an internal topic: only its coordinators write it, never a "
                "client's produce or a transaction marker (commit offsets with OffsetCommit, "
                "or TxnOffsetCommit in a transaction)",
            )
        reserved = _reserved_producer_batch(entry.records)
        if reserved is None:
            return None
        index, producer_id = reserved
        return ErrorResult(
            ErrorCode.INVALID_RECORD,
            f"record batch {index} carries producer id {producer_id}, reserved for the "
            "coordinators' own writes; producer ids come from InitProducerId",
            batch_index=index,
        )

    def _remember_refusals(
        self,
        entries: Sequence[ProduceEntry],
        refusals: dict[int, ProducePartitionResult],
        appends: Sequence[_Append],
    ) -> None:
        """Entries refused before appending (not the leader, still becoming it): a batch of the
        same producer that follows them and reaches the node later is refused alike. The
        batch remembered is the one that would have been appended (``appends``, built for
        plain records) where there is one, else the entry's records as sent."""
        built = {append.index: append.records for append in appends}
        for index in sorted(refusals):
            error = refusals[index].error
            if error is not None:
                entry = entries[index]
                self._refusals.refused(
                    TopicPartition(entry.topic, entry.partition_index),
                    built.get(index, entry.records),
                    error.code,
                    error.message,
                )

    async def _append(
        self,
        append: _Append,
        *,
        acks_all: bool,
        gap_wait_s: float | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification: _Verification | None = None,
    ) -> _Outcome:
        """``gap_wait_s`` None: a batch ahead of its producer's sequence is set aside (None)
        for a second pass that waits for the ones in between — unless the batch it waits for
        was refused here a moment ago: then it is refused alike, as a Kafka broker serving the
        connection's requests in order would have refused it. Otherwise the wait
        (``Partition.append_as_leader``). ``verification``: the request's, when transactional
        batches are verified (point 5)."""
        partition = append.partition
        try:
            guard = None
            if verification is not None:
                guard = await verification.guard(append)
            return await partition.append_as_leader(
                append.records,
                acks_all=acks_all,
                gap_wait_s=gap_wait_s,
                origin=origin,
                verify=verification is not None,
                guard=guard,
            )
        except Exception as exc:
            if isinstance(exc, OutOfOrderSequenceError) and exc.ahead and gap_wait_s is None:
                echoed = self._refusals.echo(partition.topic_partition, exc.producer)
                return None if echoed is None else _refused(append.entry, echoed)
            result = error_result(
                exc,
                records=append.records,
                max_batch_bytes=partition.settings.log_config.max_message_bytes,
            )
            self._refusals.refused(
                partition.topic_partition, append.records, result.code, result.message
            )
            if result.code in _NO_LOG_START_ERRORS:
                return _refused(append.entry, result)
            return ProducePartitionResult(
                append.entry.topic,
                append.entry.partition_index,
                result,
                log_start_offset=partition.log_start_offset,
            )

    def _queue_unacknowledged(
        self,
        appends: list[_Append],
        appending: asyncio.Future[list[_Outcome]],
        size_bytes: int,
        turns: AppendTurns | None,
    ) -> None:
        """acks=0: the request is answered while ``appending`` runs on; its bytes stay
        counted, and its places at gates held, until it is done — released in its done
        callback, which runs even if ``close`` cancels it before any append started."""

        def done(appending: asyncio.Future[list[_Outcome]]) -> None:
            self._background.discard(appending)
            if turns is not None:
                turns.release()
            self._bytes.release(size_bytes)
            if appending.cancelled():
                return
            appended = []
            for append, outcome in zip(appends, appending.result(), strict=True):
                if isinstance(outcome, LogAppendInfo):
                    appended.append((append.entry.topic, outcome))
                elif outcome is not None and outcome.error is not None:
                    _log.debug(
                        "acks=0 append to %s-%d failed: %s",
                        outcome.topic,
                        outcome.partition_index,
                        outcome.error.message,
                    )
            self._on_appended(appended)

        self._background.add(appending)
        appending.add_done_callback(done)


class _Verification:
    """One request's transaction verification (point 5): the guard each of its entries
    took, by entry index, so that a batch set aside (point 4) is not verified twice."""

    def __init__(
        self, verifier: TransactionVerifier, transactional_id: str, deadline_s: float
    ) -> None:
        self._verifier = verifier
        self._transactional_id = transactional_id
        self._deadline_s = deadline_s
        self._guards: dict[int, VerificationGuard | None] = {}

    async def guard(self, append: _Append) -> VerificationGuard | None:
        """The guard ``append`` brings to the log: None when it opens no transaction (or
        cannot be verified without a transactional id: the log refuses it then). Awaits only
        when the coordinator must be asked. Raises PartitionError (the coordinator's answer
        as the Produce error) or ProducerStateError (a fenced epoch) when it is refused."""
        if append.index in self._guards:
            return self._guards[append.index]
        header = _transactional_batch(append.records)
        guard = None
        if header is not None and self._transactional_id:
            log = append.partition.log
            guard = log.start_transaction_verification(header.producer_id, header.producer_epoch)
            if guard is not None:
                refused = await self._verifier.verify(
                    self._transactional_id,
                    header.producer_id,
                    header.producer_epoch,
                    append.entry.topic,
                    append.entry.partition_index,
                    self._deadline_s,
                )
                if refused is not None:
                    log.abandon_transaction_verification(guard)
                    raise PartitionError(refused.code, refused.message)
        self._guards[append.index] = guard
        return guard


def _transactional_batch(records: bytes) -> BatchHeader | None:
    """The header of the first transactional producer batch in ``records`` (an entry has at
    most one producer batch), None if none (or the bytes are malformed: the log refuses
    them and names the fault)."""
    try:
        for _, header in scan_batches(records):
            if header.is_transactional and is_producer_batch(header):
                return header
    except RecordError:
        return None
    return None


def address_errors(
    addresses: Sequence[tuple[str, int]], *, repeats: bool = False
) -> list[ErrorResult | None]:
    """INVALID_REQUEST for each malformed (topic, partition) of one request, and, unless
    ``repeats`` (the produce path's entries, appended in order), each repeated one."""
    counts = None if repeats else Counter(addresses)
    errors: list[ErrorResult | None] = []
    for topic, partition in addresses:
        if not topic:
            errors.append(ErrorResult(ErrorCode.INVALID_REQUEST, "the topic name is empty"))
        elif partition < 0:
            errors.append(
                ErrorResult(ErrorCode.INVALID_REQUEST, f"partition {partition} is negative")
            )
        elif counts is not None and counts[(topic, partition)] > 1:
            errors.append(
                ErrorResult(
                    ErrorCode.INVALID_REQUEST,
                    f"{topic}-{partition} appears {counts[(topic, partition)]} times in one "
                    "request; name each partition once",
                )
            )
        else:
            errors.append(None)
    return errors


def _request_error(acks: int, timeout_ms: int) -> ErrorResult | None:
    if acks not in _VALID_ACKS:
        return ErrorResult(
            ErrorCode.INVALID_REQUIRED_ACKS,
            f"acks {acks} is not one of ACKS_NONE, ACKS_LEADER, ACKS_ALL",
        )
    if timeout_ms < 0:
        return ErrorResult(ErrorCode.INVALID_REQUEST, f"timeout_ms {timeout_ms} is negative")
    return None


def _refused(entry: ProduceEntry, error: ErrorResult) -> ProducePartitionResult:
    return ProducePartitionResult(entry.topic, entry.partition_index, error)


def _appended(entry: ProduceEntry, info: LogAppendInfo) -> ProducePartitionResult:
    return ProducePartitionResult(
        entry.topic,
        entry.partition_index,
        base_offset=info.first_offset,
        log_append_time_ms=info.log_append_time_ms,
        log_start_offset=info.log_start_offset,
    )


def _answers(
    entries: Sequence[ProduceEntry],
    refusals: dict[int, ProducePartitionResult],
    results: dict[int, ProducePartitionResult],
) -> list[ProducePartitionResult]:
    """One result per entry: its refusal, its outcome, or (acks=0, queued) no offsets yet —
    Kafka's producer reports offset -1 too."""
    return [
        refusals.get(index)
        or results.get(index)
        or ProducePartitionResult(entry.topic, entry.partition_index)
        for index, entry in enumerate(entries)
    ]


def _still_becoming(
    entries: Sequence[ProduceEntry],
    refusals: dict[int, ProducePartitionResult],
    late: set[TopicPartition],
) -> dict[int, ProducePartitionResult]:
    """``refusals`` and the entries whose partition's gate did not open within the request's
    timeout: not appended, NOT_LEADER_OR_FOLLOWER (the client retries)."""
    refusals = dict(refusals)
    for index, entry in enumerate(entries):
        if TopicPartition(entry.topic, entry.partition_index) in late:
            refusals[index] = _refused(
                entry,
                ErrorResult(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"this node is still becoming the leader of "
                    f"{entry.topic}-{entry.partition_index}; retry",
                ),
            )
    return refusals


def _reserved_producer_batch(records: bytes) -> tuple[int, int] | None:
    """(index, producer id) of the first batch in ``records`` with a reserved producer id."""
    try:
        for index, (_, header) in enumerate(scan_batches(records)):
            if is_reserved_producer_id(header.producer_id):
                return index, header.producer_id
    except RecordError:
        # Malformed bytes: the log refuses the whole entry and names the fault better.
        return None
    return None


class _RecordBuildError(Exception):
    def __init__(self, result: ErrorResult) -> None:
        super().__init__(result.message)
        self.result = result


def _build_batch(plain: PlainRecords, partition: Partition) -> bytes:
    """The batch of a ProduceRecords entry, in the requested (or the topic's) codec."""
    if plain.compression == common_pb2.COMPRESSION_TYPE_UNSPECIFIED:
        codec = partition.settings.compression
    else:
        found = _COMPRESSION_OF_PROTO.get(plain.compression)
        if found is None:
            raise _RecordBuildError(
                ErrorResult(
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"unknown compression {plain.compression}",
                )
            )
        codec = found
    if not plain.records:
        raise _RecordBuildError(ErrorResult(ErrorCode.INVALID_RECORD, "the entry holds no records"))
    builder = BatchBuilder(codec)
    for index, record in enumerate(plain.records):
        try:
            builder.append(
                record.timestamp_ms if record.HasField("timestamp_ms") else None,
                record.key if record.HasField("key") else None,
                record.value if record.HasField("value") else None,
                [
                    (header.key, header.value if header.HasField("value") else None)
                    for header in record.headers
                ],
            )
        except (ValueError, TypeError) as exc:
            raise _RecordBuildError(
                ErrorResult(ErrorCode.INVALID_RECORD, f"record {index}: {exc}", batch_index=index)
            ) from None
    try:
        return builder.build()
    except ValueError as exc:
        raise _RecordBuildError(ErrorResult(ErrorCode.INVALID_RECORD, str(exc))) from None
