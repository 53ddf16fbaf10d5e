"""Producer sequence numbers (int32, wrapping to 0 after 2**31 - 1, seed 001 "Idempotence"):
which one comes next, and whether one lies ahead of another.

One home for the arithmetic the storage node's sequence checks and the gateway's per-
connection ordering share (the SDK and the coordinators still keep their own copies: issue
#15).
"""

from __future__ import annotations

from typing import Final

from brook.record.batch import read_header
from brook.record.errors import RecordError
from brook.record.varint import INT32_MAX

__all__ = [
    "SEQUENCE_AHEAD_MAX",
    "first_batch_sequence",
    "is_ahead",
    "next_sequence",
    "sequence_follows",
]

SEQUENCE_MODULUS: Final = INT32_MAX + 1
# Sequences at most this far past another count as after it; beyond, as before it (half the
# space: a producer never has that many records in flight).
SEQUENCE_AHEAD_MAX: Final = SEQUENCE_MODULUS // 2


def next_sequence(last_sequence: int) -> int:
    return (last_sequence + 1) % SEQUENCE_MODULUS


def sequence_follows(last_sequence: int, first_sequence: int) -> bool:
    """Whether a batch starting at ``first_sequence`` directly follows ``last_sequence``."""
    return first_sequence == next_sequence(last_sequence)


def is_ahead(sequence: int, reference: int) -> bool:
    """Whether ``sequence`` lies after ``reference`` (not equal), wrap-around included."""
    return 0 < (sequence - reference) % SEQUENCE_MODULUS < SEQUENCE_AHEAD_MAX


def first_batch_sequence(records: bytes | None) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of the first batch of ``records``; None when it has
    no producer id or cannot be read (whoever appends it says what is wrong with it)."""
    try:
        header = read_header(records or b"")
    except (RecordError, ValueError, IndexError):
        return None
    if header.producer_id < 0:
        return None
    return header.producer_id, header.producer_epoch, header.base_sequence
