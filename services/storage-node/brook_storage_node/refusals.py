"""Idempotent batches this node refused unappended a moment ago, so that the batches of the same
producer pipelined behind them are refused alike instead of being taken as a sequence gap.

A Kafka broker serves a connection's requests one at a time: when it refuses a producer's batch
(it is no longer, or not yet, the leader; the ISR is below min.insync.replicas), it refuses the
batches pipelined behind it for the same reason, and the client sends them all again in order.
This node serves concurrent calls, and its state can change between two of them: a leader that
refused batch n while taking over accepts batch n + 1 a millisecond later, finds a gap, and
``OUT_OF_ORDER_SEQUENCE_NUMBER`` makes librdkafka bump its epoch and resend its unacknowledged
batches under new sequences (a duplicate for any whose append was done but its answer lost).
So the Produce handler records each refusal here, and a batch that arrives ahead of its
producer's sequence exactly where a refused batch starts gets that refusal too (issue #13).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from brook.errors import NOT_APPENDED_RETRIABLE, ErrorCode
from brook.record.sequence import first_batch_sequence
from brook_storage_node.errors import ErrorResult
from brook_storage_node.log import TopicPartition

__all__ = ["REFUSAL_ECHO_MS", "RecentRefusals"]

# Pipelined batches arrive within milliseconds of the refused one; the client's own retry of
# it comes later and is appended (or refused) on its merits.
REFUSAL_ECHO_MS: Final = 1000
# Refusals remembered at most: memory stays bounded whatever the load.
REFUSALS_MAX: Final = 10_000


@dataclass(frozen=True, slots=True)
class _Refused:
    result: ErrorResult
    until_s: float


class RecentRefusals:
    """Keyed by partition, producer id, epoch and the refused batch's first sequence. Use on
    the event loop."""

    def __init__(self, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._clock_s = clock_s
        # In insertion order, which is expiry order (every refusal holds as long).
        self._refused: dict[tuple[TopicPartition, int, int, int], _Refused] = {}

    def __len__(self) -> int:
        return len(self._refused)

    def refused(self, tp: TopicPartition, records: bytes, code: ErrorCode, message: str) -> None:
        """The batches in ``records`` were answered ``code`` and not appended."""
        if code not in NOT_APPENDED_RETRIABLE:
            return
        sequence = first_batch_sequence(records)
        if sequence is None:
            return
        self._drop_expired()
        if len(self._refused) >= REFUSALS_MAX:
            return
        key = (tp, *sequence)
        self._refused.pop(key, None)
        self._refused[key] = _Refused(
            ErrorResult(code, message), self._clock_s() + REFUSAL_ECHO_MS / 1000
        )

    def echo(self, tp: TopicPartition, producer: tuple[int, int, int] | None) -> ErrorResult | None:
        """For a batch of ``producer`` = (id, epoch, the sequence expected next) that arrived
        ahead of it: the refusal of the batch at that expected sequence, if one holds."""
        if producer is None or not self._refused:
            return None
        self._drop_expired()
        producer_id, epoch, expected = producer
        refused = self._refused.get((tp, producer_id, epoch, expected))
        if refused is None:
            return None
        return ErrorResult(
            refused.result.code,
            f"sequence {expected} of producer {producer_id} was refused here a moment ago "
            f"({refused.result.message}); send it again first",
        )

    def _drop_expired(self) -> None:
        now_s = self._clock_s()
        while self._refused:
            key, oldest = next(iter(self._refused.items()))
            if oldest.until_s >= now_s:
                return
            del self._refused[key]
