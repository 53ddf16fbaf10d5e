"""Fencing a deposed coordinator's writes to __consumer_offsets and __transaction_state with the
storage nodes' idempotent-producer checks (docs/decisions.md, "Fencing coordinator writes").

Every coordinator writes partition p of such a topic (``FencedTopic``) as producer id
``producer_id_base + p`` (``OFFSETS_FENCING_PRODUCER_ID_BASE`` for __consumer_offsets,
``TRANSACTION_STATE_PRODUCER_ID_BASE`` for __transaction_state) with the producer epoch set to
its coordinator epoch for p. Taking a partition over appends a
fence batch in the new epoch first, so the leader answers INVALID_PRODUCER_EPOCH to every later
batch of an older owner, whether it knows it lost the partition or not.

The base is brook.reserved's RESERVED_PRODUCER_ID_BASE: the controllers never hand out ids
from it up, and the storage nodes take batches with such ids only from produce requests marked
PRODUCE_ORIGIN_COORDINATOR (storage_offsets_log.py sets it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from brook.errors import BrookError, ErrorCode
from brook.reserved import RESERVED_PRODUCER_ID_BASE, TRANSACTION_STATE_PRODUCER_ID_BASE
from brook_group_coordinator.ownership import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

__all__ = [
    "OFFSETS_FENCING_PRODUCER_ID_BASE",
    "OFFSETS_LOG",
    "PRODUCER_EPOCH_MAX",
    "TRANSACTION_STATE_LOG",
    "FencedTopic",
    "OffsetsWriteError",
    "fencing_producer_id",
    "producer_epoch_for",
]

OFFSETS_FENCING_PRODUCER_ID_BASE: Final = RESERVED_PRODUCER_ID_BASE
# A producer epoch is an int16 in RecordBatch v2.
PRODUCER_EPOCH_MAX: Final = 2**15 - 1


class OffsetsWriteError(BrookError):
    """An append whose failure costs this coordinator the partition: ``fenced`` when a newer
    owner has written (drop it until the controllers assign it here again), otherwise the
    outcome or the sequence state is unknown (drop it and load it again)."""

    def __init__(self, code: ErrorCode, message: str, *, fenced: bool) -> None:
        super().__init__(code, message)
        self.fenced = fenced


@dataclass(frozen=True, slots=True)
class FencedTopic:
    """An internal topic the coordinators write as fenced producers."""

    name: str
    producer_id_base: int

    def producer_id(self, partition: int) -> int:
        if partition < 0:
            raise ValueError(f"partition {partition} is negative")
        return self.producer_id_base + partition


OFFSETS_LOG: Final = FencedTopic(OFFSETS_TOPIC, OFFSETS_FENCING_PRODUCER_ID_BASE)
TRANSACTION_STATE_LOG: Final = FencedTopic(
    TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_PRODUCER_ID_BASE
)


def fencing_producer_id(partition: int) -> int:
    """__consumer_offsets-``partition``'s writer."""
    return OFFSETS_LOG.producer_id(partition)


def producer_epoch_for(partition: int, coordinator_epoch: int, topic: str = OFFSETS_TOPIC) -> int:
    """The producer epoch of the owner at ``coordinator_epoch``: the same number, which must
    fit RecordBatch v2's int16. Past it the partition cannot be fenced, so it is not served:
    a clear error rather than an unfenced writer (32767 hand-overs of one partition)."""
    if not 0 <= coordinator_epoch <= PRODUCER_EPOCH_MAX:
        raise BrookError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"{topic}-{partition}: coordinator epoch {coordinator_epoch} is outside "
            f"[0, {PRODUCER_EPOCH_MAX}], the producer epochs that fence older owners' writes",
        )
    return coordinator_epoch
