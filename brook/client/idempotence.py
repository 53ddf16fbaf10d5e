"""The idempotent producer's bookkeeping (the non-transactional half of Kafka's TransactionManager).

The producer holds a producer id and epoch (from InitProducerId) and numbers the records of each
partition from 0: a batch's base sequence is assigned the first time it is drained and never
changes while it is retried, so the leader recognises a batch it already appended and answers
with the original offsets instead of appending it again.

What the leader's answer to a sequenced batch means for the producer (``verdict``) follows
Kafka 3.x's idempotent producer (KIP-360):

- success, or DUPLICATE_SEQUENCE_NUMBER (an old duplicate, offsets unknown): acknowledged;
- OUT_OF_ORDER_SEQUENCE_NUMBER for an attempt sent while an earlier batch of the partition was
  unanswered: the predecessor had not landed yet; retried once it has;
- OUT_OF_ORDER_SEQUENCE_NUMBER for an attempt sent with every predecessor answered, or
  UNKNOWN_PRODUCER_ID: the leader lost the producer's state (a truncated log, expiration, a
  failover to a replica without it), and the batch is not in its log. The producer bumps its
  epoch, numbers every partition from 0 again and retries;
- INVALID_PRODUCER_EPOCH / PRODUCER_FENCED: another instance holds this producer id with a newer
  epoch. Fatal: writing on would fence the newer instance in turn (a transactional producer's
  INVALID_PRODUCER_EPOCH excepted: its coordinator's timeout abort, see transactions.py);
- any other error: retriable ones are retried with the same sequence. A batch that finally
  fails may or may not be in the log; the next batch of its partition tells: it is appended
  (the failed one was), or refused as out of order with every predecessor answered (it was
  not), which bumps the epoch as above.

The epoch bump waits until no batch is in flight and every sequenced batch still queued is
known not to be in the log (meanwhile the others are retried under the old epoch), so
renumbering never writes a batch twice.

All of it is mutated under the accumulator's lock (by the accumulator) or on the sender's loop.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import crc32c

from brook.client.errors import ProducerFencedError
from brook.errors import ErrorCode

__all__ = [
    "SEQUENCE_MODULUS",
    "IdempotenceState",
    "Verdict",
    "add_sequence",
    "restamp",
    "verdict",
]

# Sequences are int32 and wrap to 0 after 2^31 - 1, as Kafka's do.
SEQUENCE_MODULUS: Final = 2**31
NO_PRODUCER_ID: Final = -1
NO_SEQUENCE: Final = -1

# RecordBatch v2 header positions (seed 001 section 5.3): producerId, producerEpoch and
# baseSequence sit together under the CRC, which covers attributes to the end of the batch.
_CRC_OFFSET: Final = 17
_CRC_COVERED_FROM: Final = 21
_PRODUCER_FIELDS_OFFSET: Final = 43
_PRODUCER_FIELDS: Final = struct.Struct(">qhi")
_CRC: Final = struct.Struct(">I")
_HEADER_BYTES: Final = 61


def add_sequence(sequence: int, count: int) -> int:
    """``sequence + count`` with Kafka's int32 wrap."""
    return (sequence + count) % SEQUENCE_MODULUS


def restamp(batch: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """``batch`` (one sealed v2 batch) with new producer fields and its CRC recomputed.

    Used when an epoch bump renumbers a batch that was already sent: the records are the same
    bytes, only the header changes."""
    if len(batch) < _HEADER_BYTES:
        raise ValueError(f"a {len(batch)}-byte buffer holds no record batch header")
    out = bytearray(batch)
    _PRODUCER_FIELDS.pack_into(
        out, _PRODUCER_FIELDS_OFFSET, producer_id, producer_epoch, base_sequence
    )
    crc = crc32c.crc32c(memoryview(out)[_CRC_COVERED_FROM:])
    _CRC.pack_into(out, _CRC_OFFSET, crc)
    return bytes(out)


class Verdict(enum.Enum):
    """What the producer does with a sequenced batch after the leader's answer."""

    ACKNOWLEDGED = "acknowledged"
    # Acknowledged, but the leader did not say at which offsets (DUPLICATE_SEQUENCE_NUMBER).
    ACKNOWLEDGED_OFFSETS_UNKNOWN = "acknowledged-offsets-unknown"
    RETRY = "retry"
    RETRY_AFTER_EPOCH_BUMP = "retry-after-epoch-bump"
    FENCED = "fenced"
    # Not retriable: the batch fails, and its sequence hole needs an epoch bump.
    FAIL = "fail"


FENCING_CODES: Final = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})


def verdict(code: ErrorCode, follows_acknowledged: bool) -> Verdict:
    """Classify the leader's answer ``code`` to a sequenced batch; ``follows_acknowledged``:
    every earlier batch of its partition had been answered when this attempt was sent."""
    if code is ErrorCode.NONE:
        return Verdict.ACKNOWLEDGED
    if code is ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
        return Verdict.ACKNOWLEDGED_OFFSETS_UNKNOWN
    if code in FENCING_CODES:
        return Verdict.FENCED
    if code is ErrorCode.UNKNOWN_PRODUCER_ID:
        return Verdict.RETRY_AFTER_EPOCH_BUMP
    if code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
        # A predecessor was still on its way (in flight, or queued for a retry): the leader
        # takes this batch once it has landed. Kafka asks whether the batch is the next
        # sequence after the last acknowledged one, which is the same question only when
        # answers arrive in send order, as on Kafka's one TCP connection; concurrent gRPC
        # calls can be answered in any order.
        if not follows_acknowledged:
            return Verdict.RETRY
        return Verdict.RETRY_AFTER_EPOCH_BUMP
    return Verdict.RETRY if code.retriable else Verdict.FAIL


class IdempotenceState:
    """The producer id and epoch, and whether they must be (re)obtained before sending."""

    __slots__ = ("bump_reason", "disabled", "epoch", "fatal_error", "producer_id")

    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        # Why the epoch must be bumped before new batches are sent ("" when it need not).
        self.bump_reason = ""
        # Set when the producer may not write again (fenced, or InitProducerId refused).
        self.fatal_error: BaseException | None = None
        # The cluster has no producer ids and idempotence was only defaulted: sending goes on
        # without it (see sender.py).
        self.disabled = False

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def request_epoch_bump(self, reason: str) -> None:
        if not self.bump_reason:
            self.bump_reason = reason

    def fence(self, where: str, code: ErrorCode, message: str) -> BaseException:
        """Become fatally fenced (once); returns the error every pending record fails with."""
        if self.fatal_error is None:
            self.fatal_error = ProducerFencedError(
                f"producer id {self.producer_id} epoch {self.epoch} was fenced: "
                f"{where} answered {code.name} ({message}); another producer "
                "instance holds a newer epoch of this id, so this one may not write again"
            )
        return self.fatal_error
