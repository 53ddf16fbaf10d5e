"""A transactional id's state, as the transaction coordinator keeps it (Kafka's
TransactionMetadata): the states, the record of one transactional id, and which states may
follow which.

``Transaction`` is immutable: an operation computes the next one, the coordinator writes it to
__transaction_state, and only once that write is acknowledged does it replace the current one
(so a failed write leaves the state as it was).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Final

__all__ = [
    "NO_PRODUCER_ID",
    "PRODUCER_EPOCH_MAX",
    "Transaction",
    "TxnState",
]

NO_PRODUCER_ID: Final = -1
# Kafka bumps a producer epoch up to Short.MAX_VALUE - 1 and hands out a new producer id
# after that (brook.producer_ids.PRODUCER_EPOCH_MAX, the same bound).
PRODUCER_EPOCH_MAX: Final = 32766


class TxnState(enum.Enum):
    """Kafka's TransactionState. PREPARE_EPOCH_FENCE is never written: it is what an ongoing
    transaction shows while the abort that fences its producer (a bumped epoch) is being
    written."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def preparing(self) -> bool:
        """Decided, markers not all written yet: the coordinator completes it."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def idle(self) -> bool:
        """No transaction in progress: a new one may start, the id may be bumped or expire."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


# Kafka's TransactionState.validPreviousStates, read forwards.
_NEXT: Final[dict[TxnState, frozenset[TxnState]]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD}),
    TxnState.ONGOING: frozenset(
        {
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
        }
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD}),
    TxnState.DEAD: frozenset(),
    TxnState.PREPARE_EPOCH_FENCE: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transactional id. ``last_producer_id``/``last_producer_epoch``: the id and epoch
    the last InitProducerId replaced when that request named them as its expected ones
    (KIP-360: a retry of it is recognised); NO_PRODUCER_ID/-1 when the last change of the
    epoch was not such a request (a new id, a plain InitProducerId, a fencing abort), as
    Kafka's NO_PRODUCER_EPOCH: whoever held the replaced epoch then is fenced. ``start_ms``:
    when the ongoing transaction began, -1 when none is. Times are wall-clock milliseconds.
    ``two_phase``: the last InitProducerId asked for two-phase commit (KIP-939's enable2Pc):
    the transaction is never aborted for its timeout, only by EndTxn or a fencing
    InitProducerId."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    groups: frozenset[str]
    start_ms: int
    update_ms: int
    two_phase: bool = False

    def to(self, state: TxnState, now_ms: int, **changes: Any) -> Transaction:
        """The next state; ValueError for a transition Kafka does not allow (a bug here,
        never a client's mistake: requests are checked before they get this far)."""
        if state not in _NEXT[self.state]:
            raise ValueError(
                f"transactional id {self.transactional_id!r}: {self.state.value} -> "
                f"{state.value} is not a valid transition"
            )
        return replace(self, state=state, update_ms=now_ms, **changes)

    @property
    def expires_ms(self) -> int:
        """When an ongoing transaction times out."""
        return self.start_ms + self.timeout_ms
