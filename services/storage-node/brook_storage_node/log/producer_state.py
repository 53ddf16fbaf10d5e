"""Idempotent producers' state on one partition (Kafka's ProducerStateManager; seed 001, 4.6).

Per producer id: the current producer epoch, the node's wall-clock time of its last append and
the last ``BATCHES_RETAINED`` batches appended in that epoch (first and last sequence, first and
last offset, max timestamp). A leader checks each producer batch against it before appending
(``check_append``), by the rules of Kafka >= 2.5 (ProducerAppendInfo.checkSequence):

- a producer id this partition has no state for (new here, or expired after
  producer.id.expiration.ms) is accepted at any epoch and sequence: its state may have gone
  while the producer still had batches in flight, and Java's producer (>= 2.5) and librdkafka
  count on this; the state then starts from that batch. A leader that may get a producer's
  pipelined batches out of order asks (``hold_unknown_producers``) for such a batch past
  sequence 0 to be refused as ahead of 0 first: the producer's first batches may still be on
  their way, and once it started the state they would be behind it (Partition.append_as_leader
  waits for them, then appends it without asking);
- epoch older than the current one: INVALID_PRODUCER_EPOCH (what Kafka's produce path answers
  since 2.7; PRODUCER_FENCED belongs to the transaction coordinator), nothing appended;
- epoch newer: the batch must start at sequence 0 (a new epoch restarts sequences), else
  OUT_OF_ORDER_SEQUENCE_NUMBER; the state then restarts in the new epoch;
- same epoch: a batch with the first and last sequence of one of the retained batches is a
  retry of it: the caller answers with that batch's original offsets and appends nothing; a
  batch continuing the last sequence (int32 wrap included) is appended; anything else is
  OUT_OF_ORDER_SEQUENCE_NUMBER.

UNKNOWN_PRODUCER_ID is never answered (as in Kafka >= 2.5).

Transactions (seed 001, "Control Batches"; Kafka's ProducerAppendInfo): a transactional batch
opens its producer's transaction on the partition at its first offset, or continues the open
one; a non-transactional batch of a producer with an open transaction is INVALID_TXN_STATE
(checked after the sequence rules, as Kafka does). A COMMIT or ABORT marker (``check_marker``,
``apply_marker``) ends the open transaction, if any, sets the producer's epoch to the marker's
and records its coordinator epoch: a marker in an older producer epoch is
INVALID_PRODUCER_EPOCH, one from an older coordinator epoch than the last marker's is
TRANSACTION_COORDINATOR_FENCED, except a coordinator epoch below 0 (an operator's abort), which
is never fenced and leaves the recorded one as it is. The first unstable offset
(``first_unstable_offset``) is the first offset of the oldest open transaction, or of the
oldest completed one whose marker the high watermark has not passed yet (Kafka's
unreplicated transactions: until then the marker may still be truncated away).

Verification (KIP-890 part 1, transaction.partition.verification.enable): a leader appending
with ``verify`` refuses (INVALID_TXN_STATE) a transactional batch of a producer that has no
open transaction here in the batch's epoch unless it brings the producer's current
``VerificationGuard``: handed out by ``start_verification`` before the leader asks the
transaction coordinator whether the partition is in the producer's ongoing transaction, and
withdrawn by the producer's next marker, by a change of its epoch and once its transaction is
open. So a batch of a transaction that ended (a delayed retry arriving after the ABORT marker)
cannot open a new one here, even if it was verified just before the marker landed. A guard is
compared by identity, held per producer only while verifications are in flight (one per
producer: an older epoch's verification is INVALID_PRODUCER_EPOCH), and dropped after
producer.id.expiration.ms if never used.

Expiration (``expire``) compares the node's clock with the node's clock at the producer's last
append, not with a batch timestamp. Kafka compares with ``lastTimestamp``, the last batch's max
timestamp, which on CreateTime topics is the client's clock: a producer that writes old
timestamps (MirrorMaker keeping the source's, backfills) is forgotten at every expiration pass
however busy it is. The leader and the followers record their own clock at their append;
batches replayed from the log at recovery get the node's clock at load time (their batch
timestamps may be the client's), so a restart gives the producers it replays a whole
expiration period again; producers restored from a snapshot keep the append time recorded in
it (snapshots written before this rule hold the batch's max timestamp there instead, which at
worst expires a producer early once).

A producer with an open transaction never expires (Kafka's rule: its transaction would
otherwise hold the last stable offset back with no one left to end it).

Followers and recovery apply batches with ``apply`` and no checks: the leader checked them,
and applying what the log holds is how a new leader already knows every producer's sequences.

The state lives in memory and is made durable by snapshot files ``<offset>.snapshot`` next to
the segments: the state of every batch below ``offset``, open transactions and coordinator
epochs included (version 2; version 1 files, written before transactions, are read too). A
snapshot is written whole to a temporary file, fsynced and renamed (a crash leaves the old set
intact) and carries a CRC-32C, so a torn or damaged one is noticed and skipped; the log then
replays from an older one.

Not thread-safe: the partition log calls it under its own lock.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import crc32c

from brook.errors import ErrorCode
from brook.record import (
    BatchHeader,
    ControlType,
    InvalidRecordError,
    decode_control_record,
    iter_records,
)
from brook.record.sequence import is_ahead, next_sequence, sequence_follows
from brook_storage_node.log.checkpoints import TEMP_SUFFIX
from brook_storage_node.log.errors import LogError
from brook_storage_node.log.files import Buffer, write_atomically

__all__ = [
    "BATCHES_RETAINED",
    "NO_TXN",
    "SNAPSHOT_SUFFIX",
    "ActiveProducer",
    "BatchMetadata",
    "CompletedTxn",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerStateEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "VerificationGuard",
    "in_sequence",
    "is_producer_batch",
    "parse_snapshot_file_name",
    "read_marker",
    "read_snapshot",
    "snapshot_file_name",
]

_log = logging.getLogger(__name__)

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: a producer has at most five batches in
# flight per partition (max.in.flight.requests.per.connection <= 5 with idempotence), so any
# retry it can send is one of the last five it appended.
BATCHES_RETAINED: Final = 5
SNAPSHOT_SUFFIX: Final = ".snapshot"
_OFFSET_DIGITS: Final = 20
# No open transaction, no coordinator epoch (Kafka's -1).
NO_TXN: Final = -1
_SNAPSHOT_VERSION: Final = 2
_SNAPSHOT_VERSION_1: Final = 1
# version int16, crc uint32 (of everything after it), producer count int32
_FILE_HEADER: Final = struct.Struct(">hIi")
# Version 1: producer id int64, epoch int16, last append time int64, batch count int8
_PRODUCER_V1: Final = struct.Struct(">qhqb")
# Version 2: producer id int64, epoch int16, last append time int64, coordinator epoch int32,
# first offset of the open transaction int64 (-1: none), batch count int8
_PRODUCER: Final = struct.Struct(">qhqiqb")
# first seq int32, last seq int32, first offset int64, last offset int64, timestamp int64
_BATCH: Final = struct.Struct(">iiqqq")
_CRC_START: Final = 6


class ProducerStateError(LogError):
    """A producer batch breaks the idempotence rules; nothing was appended."""


class OutOfOrderSequenceError(ProducerStateError):
    error_code = int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def __init__(
        self,
        message: str,
        *,
        ahead: bool = False,
        producer: tuple[int, int, int] | None = None,
        unknown_producer: bool = False,
    ) -> None:
        super().__init__(message)
        # The batch starts past the next expected sequence in the producer's current epoch
        # (or past 0, a producer with no state here: ``unknown_producer``): the batches in
        # between may still be on their way (see Partition.append_as_leader).
        self.ahead = ahead
        # (producer id, epoch, the sequence expected next) when ``ahead``.
        self.producer = producer
        # The partition has no state for the producer (``hold_unknown_producers``): the batch
        # is refused only while its producer's first batches may be on their way, and is
        # appended once they are not (Kafka's rule for an unknown producer).
        self.unknown_producer = unknown_producer


class InvalidProducerEpochError(ProducerStateError):
    error_code = int(ErrorCode.INVALID_PRODUCER_EPOCH)


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch of a producer whose transaction is open on the partition."""

    error_code = int(ErrorCode.INVALID_TXN_STATE)


class TransactionCoordinatorFencedError(ProducerStateError):
    """A marker from an older coordinator epoch than the producer's last marker."""

    error_code = int(ErrorCode.TRANSACTION_COORDINATOR_FENCED)


class VerificationGuard:
    """Proof that a producer's transaction was being verified with its coordinator when no
    transaction of it was open here (module docstring); valid while it is the producer's
    current guard. Compared by identity."""

    __slots__ = ("created_ms", "producer_epoch", "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int, created_ms: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.created_ms = created_ms

    def __repr__(self) -> str:
        return f"VerificationGuard(producer {self.producer_id}, epoch {self.producer_epoch})"


def is_producer_batch(header: BatchHeader) -> bool:
    """Whether the batch carries producer sequences: a producer id and not a control batch
    (transaction markers have no sequence and are written by coordinators)."""
    return header.has_producer_id and not header.is_control


def read_marker(data: Buffer, position: int) -> tuple[ControlType, int]:
    """(COMMIT or ABORT, coordinator epoch) of the control batch at ``position`` in ``data``:
    its one record decoded (brook/record/control.py). RecordError if it is not a marker."""
    for record in iter_records(data, position):
        control_type, _, coordinator_epoch = decode_control_record(record)
        return control_type, coordinator_epoch
    raise InvalidRecordError("a control batch holds no record")


# The sequence arithmetic lives in brook.record.sequence; these names are the log's.
in_sequence = sequence_follows
in_sequence_next = next_sequence


def snapshot_file_name(offset: int) -> str:
    return f"{offset:0{_OFFSET_DIGITS}d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return int(stem) if len(stem) == _OFFSET_DIGITS and stem.isdigit() else None


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended producer batch, as its retries are recognised and answered
    (``timestamp_ms``: the batch's max timestamp, which a retry's answer repeats)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: its first offset and the marker's (``last_offset``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """What DescribeProducers reports of one producer (a copy, safe to read anywhere)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_append_time_ms: int
    coordinator_epoch: int
    current_txn_first_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))
    # The node's wall clock at the last append of this producer (not a client timestamp).
    last_append_time_ms: int = -1
    # The coordinator epoch of the last marker written for it (NO_TXN: none).
    coordinator_epoch: int = NO_TXN
    # The first offset of its open transaction on this partition (NO_TXN: none open).
    current_txn_first_offset: int = NO_TXN

    @property
    def last_seq(self) -> int:
        """The last sequence appended in the current epoch, -1 when none (after a marker
        opened a new epoch)."""
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset

    def describe(self) -> ActiveProducer:
        return ActiveProducer(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_append_time_ms,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class ProducerStateManager:
    """The producers of the partition whose log lives in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._producers: dict[int, ProducerStateEntry] = {}
        # Producer id -> first offset, for every open transaction.
        self._ongoing: dict[int, int] = {}
        # Completed transactions whose marker the high watermark has not passed yet.
        self._unreplicated: list[CompletedTxn] = []
        # Producer id -> its current verification guard (module docstring).
        self._verifications: dict[int, VerificationGuard] = {}

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        return self._producers

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    # -- the leader's check and every replica's update ------------------------------------

    def check_append(
        self,
        header: BatchHeader,
        *,
        verify: bool = False,
        guard: VerificationGuard | None = None,
        hold_unknown_producers: bool = False,
    ) -> BatchMetadata | None:
        """The retained batch that ``header`` retries (answer with it, append nothing), or
        None when the batch may be appended. Raises ProducerStateError when it may not.
        ``verify``: a transactional batch opening a transaction needs ``guard``, the
        producer's current one. ``hold_unknown_producers``: a batch of a producer with no
        state here that starts past sequence 0 raises OutOfOrderSequenceError, ``ahead`` of
        0 and ``unknown_producer``, instead of being accepted (module docstring)."""
        duplicate = self._check_sequence(header, hold_unknown_producers)
        if duplicate is None and verify and header.is_transactional:
            self._check_verified(header, guard)
        return duplicate

    def _check_sequence(
        self, header: BatchHeader, hold_unknown_producers: bool
    ) -> BatchMetadata | None:
        producer_id = header.producer_id
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        entry = self._producers.get(producer_id)
        if entry is None:
            if hold_unknown_producers and is_ahead(first_seq, 0):
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} epoch {epoch}: no state here, and its batch "
                    f"starts at sequence {first_seq}; its batches from 0 may be on their way",
                    ahead=True,
                    producer=(producer_id, epoch, 0),
                    unknown_producer=True,
                )
            return None
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is fenced: epoch "
                f"{entry.producer_epoch} has written to this partition since"
            )
        if epoch > entry.producer_epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: the first batch of new epoch {epoch} starts at "
                    f"sequence {first_seq}; a new epoch starts at 0"
                )
            self._check_txn_state(entry, header)
            return None
        duplicate = entry.find_duplicate(first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate
        if not entry.batches:
            # A marker opened this epoch: its first batch starts the sequences.
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: its first batch in epoch {epoch} starts at "
                    f"sequence {first_seq}; it must start at 0"
                )
        elif not in_sequence(entry.last_seq, first_seq):
            expected = in_sequence_next(entry.last_seq)
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: batch sequences {first_seq}.."
                f"{header.last_sequence} do not follow the last appended sequence "
                f"{entry.last_seq} (expected {expected})",
                ahead=is_ahead(first_seq, expected),
                producer=(producer_id, epoch, expected),
            )
        self._check_txn_state(entry, header)
        return None

    def _check_verified(self, header: BatchHeader, guard: VerificationGuard | None) -> None:
        if not self.needs_verification(header.producer_id, header.producer_epoch):
            return
        current = self._verifications.get(header.producer_id)
        if guard is None or guard is not current or guard.producer_epoch != header.producer_epoch:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} epoch {header.producer_epoch}: the "
                "transactional batch is not part of an ongoing transaction here ("
                + (
                    "it brings no verification with the transaction coordinator"
                    if guard is None
                    else "a transaction marker or a new epoch came after its verification"
                )
                + "); add the partition to a transaction first"
            )

    def needs_verification(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether a transactional batch of the producer in ``producer_epoch`` would open a
        transaction here (none of it is open in that epoch), and so must be verified."""
        entry = self._producers.get(producer_id)
        return (
            entry is None
            or entry.current_txn_first_offset == NO_TXN
            or entry.producer_epoch != producer_epoch
        )

    def start_verification(
        self, producer_id: int, producer_epoch: int, now_ms: int
    ) -> VerificationGuard | None:
        """The guard a transactional batch of the producer in ``producer_epoch`` must bring
        once verified (the current one if a verification in that epoch is in flight), or
        None when it needs none (its transaction is open here). InvalidProducerEpochError
        for an epoch older than the producer's or than one being verified."""
        if not self.needs_verification(producer_id, producer_epoch):
            return None
        entry = self._producers.get(producer_id)
        current = self._verifications.get(producer_id)
        newest = max(
            -1 if entry is None else entry.producer_epoch,
            -1 if current is None else current.producer_epoch,
        )
        if producer_epoch < newest:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is fenced: epoch {newest} is "
                "known on this partition"
            )
        if current is None or current.producer_epoch != producer_epoch:
            current = VerificationGuard(producer_id, producer_epoch, now_ms)
            self._verifications[producer_id] = current
        return current

    def abandon_verification(self, guard: VerificationGuard) -> None:
        """The coordinator refused the verification ``guard`` was handed out for: withdraw it
        (a no-op if it is no longer current)."""
        if self._verifications.get(guard.producer_id) is guard:
            del self._verifications[guard.producer_id]

    def _withdraw_verification(self, producer_id: int, below_epoch: int) -> None:
        current = self._verifications.get(producer_id)
        if current is not None and current.producer_epoch < below_epoch:
            del self._verifications[producer_id]

    @staticmethod
    def _check_txn_state(entry: ProducerStateEntry, header: BatchHeader) -> None:
        if not header.is_transactional and entry.current_txn_first_offset != NO_TXN:
            raise InvalidTxnStateError(
                f"producer {entry.producer_id} sent a non-transactional batch while its "
                f"transaction begun at offset {entry.current_txn_first_offset} is open here; "
                "end it (commit or abort) first"
            )

    def apply(
        self, header: BatchHeader, first_offset: int, timestamp_ms: int, *, append_time_ms: int
    ) -> None:
        """Record an appended producer batch (already checked, or copied from the leader):
        ``timestamp_ms`` is the batch's max timestamp, ``append_time_ms`` the node's clock at
        the append (what expiration measures idleness from)."""
        entry = self._entry_in_epoch(header.producer_id, header.producer_epoch)
        if header.is_transactional and entry.current_txn_first_offset == NO_TXN:
            entry.current_txn_first_offset = first_offset
            self._ongoing[entry.producer_id] = first_offset
            # Open now: its later batches need no guard, and a marker ends it.
            self._withdraw_verification(entry.producer_id, header.producer_epoch + 1)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                first_offset + header.last_offset_delta,
                timestamp_ms,
            )
        )
        entry.last_append_time_ms = max(entry.last_append_time_ms, append_time_ms)

    def _entry_in_epoch(self, producer_id: int, epoch: int) -> ProducerStateEntry:
        """The producer's entry, moved to ``epoch``: a follower never rejects what its leader
        accepted; an epoch change, either way, restarts the retained batches (an open
        transaction and the coordinator epoch carry over, as in Kafka)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerStateEntry(producer_id, epoch)
            self._producers[producer_id] = entry
        elif entry.producer_epoch != epoch:
            entry.producer_epoch = epoch
            entry.batches.clear()
        self._withdraw_verification(producer_id, epoch)
        return entry

    # -- transaction markers ----------------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Raise unless a marker of ``producer_id`` in ``producer_epoch`` from
        ``coordinator_epoch`` may be appended (module docstring)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"transaction marker of producer {producer_id} in epoch {producer_epoch} is "
                f"fenced: the producer is at epoch {entry.producer_epoch} on this partition"
            )
        if 0 <= coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"transaction marker of producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}: a marker from coordinator epoch "
                f"{entry.coordinator_epoch} was written here since"
            )

    def apply_marker(
        self,
        header: BatchHeader,
        offset: int,
        control_type: ControlType,
        coordinator_epoch: int,
        *,
        append_time_ms: int,
    ) -> CompletedTxn | None:
        """Record the marker ``header`` appended at ``offset`` (checked, or copied from the
        leader); the transaction it ended, or None when its producer had none open."""
        entry = self._entry_in_epoch(header.producer_id, header.producer_epoch)
        # A batch verified before this marker belongs to the transaction it ends, or to none.
        self._verifications.pop(entry.producer_id, None)
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        entry.last_append_time_ms = max(entry.last_append_time_ms, append_time_ms)
        first_offset = entry.current_txn_first_offset
        if first_offset == NO_TXN:
            return None
        entry.current_txn_first_offset = NO_TXN
        del self._ongoing[entry.producer_id]
        completed = CompletedTxn(
            entry.producer_id, first_offset, offset, control_type is ControlType.ABORT
        )
        self._unreplicated.append(completed)
        return completed

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO an aborted-transaction index entry records (Kafka's): the first offset of
        the oldest transaction still open once ``completed`` ended, else the marker's next."""
        return min(self._ongoing.values(), default=completed.last_offset + 1)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest open transaction or of the oldest completed one
        whose marker is not below ``high_watermark`` (those it passed are forgotten), or
        None: everything below the high watermark is stable."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]
        firsts = [t.first_offset for t in self._unreplicated]
        firsts.extend(self._ongoing.values())
        return min(firsts, default=None)

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction (a copy)."""
        return dict(self._ongoing)

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._verifications.clear()

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers with no open transaction whose last append was ``expiration_ms``
        or more before ``now_ms`` by the node's clock (producer.id.expiration.ms); returns
        their ids."""
        expired = [
            producer_id
            for producer_id, entry in self._producers.items()
            if entry.current_txn_first_offset == NO_TXN
            and now_ms - entry.last_append_time_ms >= expiration_ms
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        self._verifications = {
            producer_id: guard
            for producer_id, guard in self._verifications.items()
            if now_ms - guard.created_ms < expiration_ms
        }
        return expired

    # -- snapshots --------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files present, ascending."""
        offsets = []
        for entry in os.scandir(self.directory):
            offset = parse_snapshot_file_name(entry.name)
            if offset is not None:
                offsets.append(offset)
        return sorted(offsets)

    def write_snapshot(self, offset: int) -> Path:
        """Write the state (every batch below ``offset``) to ``<offset>.snapshot``, crash-safe."""
        body = bytearray()
        for entry in self._producers.values():
            body += _PRODUCER.pack(
                entry.producer_id,
                entry.producer_epoch,
                entry.last_append_time_ms,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                len(entry.batches),
            )
            for batch in entry.batches:
                body += _BATCH.pack(
                    batch.first_seq,
                    batch.last_seq,
                    batch.first_offset,
                    batch.last_offset,
                    batch.timestamp_ms,
                )
        count = struct.pack(">i", len(self._producers))
        crc = crc32c.crc32c(count + body)
        data = _FILE_HEADER.pack(_SNAPSHOT_VERSION, crc, len(self._producers)) + body
        path = self.directory / snapshot_file_name(offset)
        write_atomically(path, data, TEMP_SUFFIX)
        return path

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Replace the state by the newest intact snapshot at or below ``max_offset``;
        returns its offset, or None (state cleared) when there is none. Damaged snapshots
        are logged, deleted and skipped."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                continue
            path = self.directory / snapshot_file_name(offset)
            try:
                producers = read_snapshot(path.read_bytes())
            except (OSError, ValueError, struct.error) as exc:
                _log.warning("%s: ignoring a damaged producer snapshot: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            self._set_producers(producers)
            return offset
        self._set_producers([])
        return None

    def _set_producers(self, producers: list[ProducerStateEntry]) -> None:
        self._producers = {entry.producer_id: entry for entry in producers}
        self._ongoing = {
            entry.producer_id: entry.current_txn_first_offset
            for entry in producers
            if entry.current_txn_first_offset != NO_TXN
        }
        self._unreplicated = []
        self._verifications = {}

    def delete_snapshots(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            (self.directory / snapshot_file_name(offset)).unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: int) -> None:
        """Delete the snapshots below ``offset``, the first segment's base offset: no replay
        starts there. The one at that base is kept even when the log start is above it
        (DeleteRecords): it holds transactions begun in deleted segments that are still
        open, which a replay from that segment would otherwise not know."""
        self.delete_snapshots(o for o in self.snapshot_offsets() if o < offset)

    def delete_snapshots_above(self, offset: int) -> None:
        """Delete the snapshots past ``offset`` (the log end, after a truncation): they hold
        batches the log no longer has."""
        self.delete_snapshots(o for o in self.snapshot_offsets() if o > offset)


def read_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The producers a snapshot file's bytes hold; ValueError if they cannot be trusted."""
    if len(data) < _FILE_HEADER.size:
        raise ValueError(f"{len(data)} bytes is shorter than the snapshot header")
    version, crc, count = _FILE_HEADER.unpack_from(data, 0)
    if version not in (_SNAPSHOT_VERSION, _SNAPSHOT_VERSION_1):
        raise ValueError(f"unknown snapshot version {version}")
    actual = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if actual != crc:
        raise ValueError(f"CRC-32C mismatch: stored {crc:#010x}, computed {actual:#010x}")
    if count < 0:
        raise ValueError(f"negative producer count {count}")
    position = _FILE_HEADER.size
    producers = []
    for _ in range(count):
        coordinator_epoch = txn_first_offset = NO_TXN
        if version == _SNAPSHOT_VERSION_1:
            producer_id, epoch, last_append_time_ms, batch_count = _PRODUCER_V1.unpack_from(
                data, position
            )
            position += _PRODUCER_V1.size
            least_batches = 1
        else:
            (
                producer_id,
                epoch,
                last_append_time_ms,
                coordinator_epoch,
                txn_first_offset,
                batch_count,
            ) = _PRODUCER.unpack_from(data, position)
            position += _PRODUCER.size
            # A producer known only from a marker has no batch in its epoch.
            least_batches = 0
        if not least_batches <= batch_count <= BATCHES_RETAINED:
            raise ValueError(f"producer {producer_id} has {batch_count} batches")
        entry = ProducerStateEntry(
            producer_id,
            epoch,
            last_append_time_ms=last_append_time_ms,
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=txn_first_offset,
        )
        for _ in range(batch_count):
            entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, position)))
            position += _BATCH.size
        producers.append(entry)
    if position != len(data):
        raise ValueError(f"{len(data) - position} unexpected bytes after the last producer")
    return producers
