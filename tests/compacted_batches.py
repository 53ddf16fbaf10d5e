"""Record batches as the log cleaner leaves them, for tests of the readers (issue #18).

A cleaned batch keeps its base offset, last offset delta, producer fields, attributes and
leader epoch; only its records, count, max timestamp and CRC change (docs/compaction.md,
"Batches keep their identity"). So after cleaning a partition holds batches whose
``recordsCount`` is below ``lastOffsetDelta + 1``, with gaps between their records, and empty
batches (``recordsCount`` 0, ``lastOffsetDelta`` >= 0) kept for a producer's sequence. This
module builds such batches from scratch with the record codec (``encode_batch``'s
``last_offset_delta``), so that readers are tested on exact shapes independently of what a
given cleaning pass leaves; the cleaner's own rewrite is brook/record/cleaning.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from brook.record.batch import CONTROL_MASK, TRANSACTIONAL_MASK
from brook.record.records import encode_batch, encode_record_tail, frame_record

__all__ = ["KeptRecord", "compacted_batch"]

# (offset delta within the batch, timestamp ms, key, value) of a record the cleaner kept.
KeptRecord = tuple[int, int, bytes | None, bytes | None]


def compacted_batch(
    kept: Sequence[KeptRecord],
    *,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int = 1_700_000_000_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A v2 batch spanning offsets ``[base_offset, base_offset + last_offset_delta]`` that
    holds only the ``kept`` records (offset deltas strictly increasing, each at most
    ``last_offset_delta``); with ``kept`` empty, an empty batch. The CRC is valid."""
    deltas = [delta for delta, _, _, _ in kept]
    if deltas != sorted(set(deltas)) or any(not 0 <= d <= last_offset_delta for d in deltas):
        raise ValueError(
            f"kept offset deltas {deltas} must increase within [0, {last_offset_delta}]"
        )
    first_timestamp = kept[0][1] if kept else base_timestamp
    body = b"".join(
        frame_record(encode_record_tail(key, value, None), timestamp - first_timestamp, delta)
        for delta, timestamp, key, value in kept
    )
    max_timestamp = max((timestamp for _, timestamp, _, _ in kept), default=first_timestamp)
    attributes = (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    return encode_batch(
        body,
        len(kept),
        first_timestamp,
        max_timestamp,
        attributes,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        last_offset_delta=last_offset_delta,
    )
