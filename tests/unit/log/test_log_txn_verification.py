"""Transaction verification in the partition log (KIP-890 part 1; log/producer_state.py's
VerificationGuard, PartitionLog.append with ``verify``): a transactional batch that would open
a transaction needs its producer's current guard, which a marker or a new epoch withdraws.

The late batch: a transaction's batch delayed past the client's ABORT marker (same producer
epoch) must not open a new transaction that the producer's next COMMIT would commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from brook_storage_node.log import PartitionLog
from brook_storage_node.log.producer_state import InvalidProducerEpochError, InvalidTxnStateError
from test_log_transactions import _aborted, _commit_everything, _data, _open, _write_marker

from brook.record import ControlType

PID = 7


def _verified_append(log: PartitionLog, records: bytes, pid: int = PID, epoch: int = 0) -> int:
    """Append as a leader with verification on, having taken the guard first (the coordinator
    said yes)."""
    guard = log.start_transaction_verification(pid, epoch)
    return log.append(records, leader_epoch=0, verify=True, guard=guard).first_offset


def test_the_late_batch_of_an_aborted_transaction_is_refused_and_the_next_commit_skips_it(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        # Transaction 1 writes seq 0-1; a retry of its seq 2-3 is taken in flight, verified
        # (the partition was in the ongoing transaction then) ...
        _verified_append(log, _data(PID, 0))
        late_guard = log.start_transaction_verification(PID, 0)
        assert late_guard is None  # its transaction is open: no verification needed
        _write_marker(log, PID, ControlType.ABORT)
        # ... and reaches the log after the ABORT marker: refused, nothing appended.
        end = log.log_end_offset
        with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
            log.append(_data(PID, 2), leader_epoch=0, verify=True, guard=late_guard)
        assert log.log_end_offset == end
        assert log.producer_state.ongoing_transactions == {}
        # The producer's next transaction (bumped epoch) writes and commits here: the aborted
        # transaction's records stay aborted and nothing of the late batch exists.
        _verified_append(log, _data(PID, 0, epoch=1), epoch=1)
        _write_marker(log, PID, ControlType.COMMIT, epoch=1)
        _commit_everything(log)
        assert _aborted(log) == [(PID, 0, 2)]
        assert log.last_stable_offset == log.log_end_offset
    finally:
        log.close()


def test_a_marker_between_verification_and_append_withdraws_the_guard(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        # No transaction open: the batch is verified with the coordinator, which says yes,
        # but the (abort) marker of that transaction lands before the batch is appended.
        guard = log.start_transaction_verification(PID, 0)
        assert guard is not None
        _write_marker(log, PID, ControlType.ABORT)
        with pytest.raises(InvalidTxnStateError, match="marker or a new epoch"):
            log.append(_data(PID, 0), leader_epoch=0, verify=True, guard=guard)
        assert log.producer_state.ongoing_transactions == {}
    finally:
        log.close()


def test_a_new_epoch_between_verification_and_append_withdraws_the_guard(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        guard = log.start_transaction_verification(PID, 0)
        assert guard is not None
        # The producer was bumped and its new epoch wrote here (not transactionally).
        log.append(_data(PID, 0, epoch=1, txn=False), leader_epoch=0, verify=True)
        with pytest.raises(InvalidProducerEpochError):
            log.append(_data(PID, 2), leader_epoch=0, verify=True, guard=guard)
        # An older epoch cannot even start a verification now.
        with pytest.raises(InvalidProducerEpochError):
            log.start_transaction_verification(PID, 0)
    finally:
        log.close()


def test_without_a_guard_a_transactional_batch_cannot_open_a_transaction(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        # Unverified (a Produce without a transactional id): refused, as Kafka's log does.
        with pytest.raises(InvalidTxnStateError, match="no verification"):
            log.append(_data(PID, 0), leader_epoch=0, verify=True)
        # A guard of another verification (taken, then the coordinator refused it) is no
        # guard either.
        refused = log.start_transaction_verification(PID, 0)
        assert refused is not None
        log.abandon_transaction_verification(refused)
        with pytest.raises(InvalidTxnStateError):
            log.append(_data(PID, 0), leader_epoch=0, verify=True, guard=refused)
        # Non-transactional batches and verification off are not concerned.
        log.append(_data(8, 0, txn=False), leader_epoch=0, verify=True)
        log.append(_data(9, 0), leader_epoch=0)
        assert log.producer_state.ongoing_transactions == {9: 2}
    finally:
        log.close()


def test_batches_of_the_open_transaction_and_their_retries_need_no_guard(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        first = log.start_transaction_verification(PID, 0)
        # Two requests of the same transaction verified at once share the guard.
        assert log.start_transaction_verification(PID, 0) is first
        log.append(_data(PID, 0), leader_epoch=0, verify=True, guard=first)
        # The transaction is open: the guard is spent, the next batches need none.
        log.append(_data(PID, 2), leader_epoch=0, verify=True, guard=first)
        log.append(_data(PID, 4), leader_epoch=0, verify=True)
        retry = log.append(_data(PID, 2), leader_epoch=0, verify=True)
        assert retry.duplicate and retry.first_offset == 2
        _write_marker(log, PID, ControlType.COMMIT)
        # The next transaction opens only with a new guard: the old one was spent.
        with pytest.raises(InvalidTxnStateError):
            log.append(_data(PID, 6), leader_epoch=0, verify=True, guard=first)
        # A retry of a batch appended before the marker is still answered as a duplicate.
        again = log.append(_data(PID, 4), leader_epoch=0, verify=True)
        assert again.duplicate and again.first_offset == 4
        second = log.start_transaction_verification(PID, 0)
        assert second is not None and second is not first
        log.append(_data(PID, 6), leader_epoch=0, verify=True, guard=second)
        assert log.producer_state.ongoing_transactions == {PID: 7}
    finally:
        log.close()


def test_unused_guards_are_dropped_after_the_producer_expiration(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        guard = log.start_transaction_verification(PID, 0)
        assert guard is not None
        log.producer_state.expire(guard.created_ms + 1000, 1000)
        with pytest.raises(InvalidTxnStateError):
            log.append(_data(PID, 0), leader_epoch=0, verify=True, guard=guard)
    finally:
        log.close()
