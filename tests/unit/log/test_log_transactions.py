"""Transactions in the partition log: open transactions in the producer state, markers, the
last stable offset, the aborted-transaction index (.txnindex), followers, truncation,
snapshots and recovery (log/producer_state.py, log/transaction_index.py, PartitionLog)."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest
from brook_storage_node.log import AppendOrigin, LogConfig, PartitionLog
from brook_storage_node.log.producer_state import (
    NO_TXN,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    snapshot_file_name,
)
from brook_storage_node.log.transaction_index import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    TransactionIndex,
)
from log_test_support import FakeClock

from brook.record import BatchBuilder, ControlType, build_batch, build_control_batch, scan_batches

TOPIC_DIR = "events-0"
NOW_MS = 1_700_000_000_000


def _open(directory: Path, *, clean: bool = False, **config: Any) -> PartitionLog:
    directory.mkdir(parents=True, exist_ok=True)
    return PartitionLog.open(
        directory / TOPIC_DIR,
        LogConfig(**config),
        had_clean_shutdown=clean,
        high_watermark=1 << 40,
        clock_ms=FakeClock(NOW_MS),
    )


def _data(pid: int, seq: int, count: int = 2, *, epoch: int = 0, txn: bool = True) -> bytes:
    return build_batch(
        [(NOW_MS, None, b"%d-%d-%d" % (pid, seq, i), ()) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def _marker(pid: int, kind: ControlType, *, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(
        kind,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=NOW_MS,
    )


def _write_marker(
    log: PartitionLog, pid: int, kind: ControlType, *, epoch: int = 0, coordinator_epoch: int = 0
) -> int:
    info = log.append(
        _marker(pid, kind, epoch=epoch, coordinator_epoch=coordinator_epoch),
        leader_epoch=0,
        origin=AppendOrigin.COORDINATOR,
    )
    return info.first_offset


def _aborted(log: PartitionLog) -> list[tuple[int, int, int]]:
    return [
        (txn.producer_id, txn.first_offset, txn.last_offset)
        for txn in log.collect_aborted_transactions(0, log.log_end_offset)
    ]


def _commit_everything(log: PartitionLog) -> None:
    log.maybe_increment_high_watermark()


def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        log.append(_data(1, 0, txn=False), leader_epoch=0)  # offsets 0-1, not transactional
        first = log.append(_data(2, 0), leader_epoch=0).first_offset  # 2-3: opens pid 2's
        log.append(_data(3, 0), leader_epoch=0)  # 4-5: opens pid 3's
        log.append(_data(2, 2), leader_epoch=0)  # 6-7: continues pid 2's
        _commit_everything(log)
        assert log.high_watermark == 8
        assert log.last_stable_offset == first == 2
        assert log.producer_state.ongoing_transactions == {2: 2, 3: 4}
        assert log.read(0, 1 << 20, max_offset=log.last_stable_offset).next_offset == 2
        commit = _write_marker(log, 2, ControlType.COMMIT)
        # The marker is above the HW: the transaction stays unstable until it is replicated.
        assert log.last_stable_offset == 2
        _commit_everything(log)
        assert log.high_watermark == commit + 1
        assert log.last_stable_offset == 4  # pid 3's is still open
        _write_marker(log, 3, ControlType.ABORT)
        _commit_everything(log)
        assert log.last_stable_offset == log.high_watermark == log.log_end_offset
        assert _aborted(log) == [(3, 4, 9)]
    finally:
        log.close()


def test_the_unreplicated_marker_rule_holds_back_until_the_hw_passes_the_marker(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        log.append(_data(7, 0), leader_epoch=0)  # 0-1
        abort = _write_marker(log, 7, ControlType.ABORT)  # 2
        log.append(build_batch([(NOW_MS, None, b"plain", ())]), leader_epoch=0)  # 3
        # The ISR has everything below the marker: the HW stops just before it.
        log.maybe_increment_high_watermark(abort)
        assert log.high_watermark == abort
        assert log.last_stable_offset == 0
        log.maybe_increment_high_watermark(abort + 1)
        assert log.last_stable_offset == abort + 1
    finally:
        log.close()


def test_a_non_transactional_batch_of_a_producer_in_a_transaction_is_refused(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        log.append(_data(5, 0), leader_epoch=0)
        end = log.log_end_offset
        with pytest.raises(InvalidTxnStateError) as raised:
            log.append(_data(5, 2, txn=False), leader_epoch=0)
        assert raised.value.error_code == 48
        # A newer epoch does not end the transaction either: only a marker does.
        with pytest.raises(InvalidTxnStateError):
            log.append(_data(5, 0, epoch=1, txn=False), leader_epoch=0)
        assert log.log_end_offset == end
        _write_marker(log, 5, ControlType.COMMIT)
        log.append(_data(5, 2, txn=False), leader_epoch=0)
    finally:
        log.close()


def test_markers_are_fenced_by_producer_epoch_and_coordinator_epoch(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        log.append(_data(9, 0, epoch=3), leader_epoch=0)
        end = log.log_end_offset
        with pytest.raises(InvalidProducerEpochError):
            _write_marker(log, 9, ControlType.ABORT, epoch=2, coordinator_epoch=5)
        _write_marker(log, 9, ControlType.COMMIT, epoch=3, coordinator_epoch=5)
        end = log.log_end_offset
        with pytest.raises(TransactionCoordinatorFencedError) as raised:
            _write_marker(log, 9, ControlType.ABORT, epoch=3, coordinator_epoch=4)
        assert raised.value.error_code == 52
        assert log.log_end_offset == end
        # An operator's abort (coordinator epoch -1) is not fenced and changes nothing of it.
        _write_marker(log, 9, ControlType.ABORT, epoch=3, coordinator_epoch=-1)
        entry = log.producer_state.entry(9)
        assert entry is not None and entry.coordinator_epoch == 5
        # A marker in a newer epoch bumps the producer: its old epoch is fenced, and the new
        # epoch's first batch starts at sequence 0.
        _write_marker(log, 9, ControlType.ABORT, epoch=4, coordinator_epoch=6)
        with pytest.raises(InvalidProducerEpochError):
            log.append(_data(9, 2, epoch=3), leader_epoch=0)
        log.append(_data(9, 0, epoch=4), leader_epoch=0)
    finally:
        log.close()


def test_a_marker_without_an_open_transaction_is_appended_and_ends_nothing(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        offset = _write_marker(log, 11, ControlType.ABORT, epoch=2, coordinator_epoch=1)
        assert offset == 0 and log.log_end_offset == 1
        assert _aborted(log) == []
        described = log.describe_producers()
        assert [(p.producer_id, p.producer_epoch, p.last_sequence) for p in described] == [
            (11, 2, -1)
        ]
        assert described[0].coordinator_epoch == 1
        assert described[0].current_txn_first_offset == NO_TXN
    finally:
        log.close()


def test_aborted_transactions_are_collected_for_the_range_across_segments(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path, segment_bytes=300)
    try:
        log.append(_data(1, 0), leader_epoch=0)  # 0-1
        log.append(_data(2, 0), leader_epoch=0)  # 2-3
        for seq in range(2, 12, 2):  # pid 1 keeps writing: several segments
            log.append(_data(1, seq), leader_epoch=0)
        abort_2 = _write_marker(log, 2, ControlType.ABORT)
        abort_1 = _write_marker(log, 1, ControlType.ABORT)
        _commit_everything(log)
        assert log.segment_count > 2
        assert _aborted(log) == [(2, 2, abort_2), (1, 0, abort_1)]
        # A range after pid 2's transaction ended sees only pid 1's.
        assert [t.producer_id for t in log.collect_aborted_transactions(abort_2 + 1, 10**6)] == [1]
        # pid 1's transaction spans the whole range: any range overlaps it.
        assert log.collect_aborted_transactions(0, 1)[0].producer_id == 1
        files = sorted((tmp_path / TOPIC_DIR).glob(f"*{TXN_INDEX_SUFFIX}"))
        assert len(files) == log.segment_count
    finally:
        log.close()


def test_a_crash_mid_transaction_recovers_open_transactions_and_aborted_index(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path, segment_bytes=400)
    try:
        log.append(_data(1, 0), leader_epoch=0)  # 0-1
        log.append(_data(2, 0), leader_epoch=0)  # 2-3
        abort = _write_marker(log, 1, ControlType.ABORT)  # 4
        for seq in range(2, 10, 2):
            log.append(_data(2, seq), leader_epoch=0)
        log.append(_data(3, 0), leader_epoch=0)
        expected_aborted = _aborted(log)
        assert expected_aborted == [(1, 0, abort)]
        # The process dies without closing: what is on disk is what the page cache had.
        crashed = tmp_path / "crashed"
        shutil.copytree(tmp_path / TOPIC_DIR, crashed / TOPIC_DIR)
    finally:
        log.close()
    reopened = _open(crashed, segment_bytes=400)
    try:
        assert reopened.producer_state.ongoing_transactions == {2: 2, 3: 13}
        assert reopened.last_stable_offset == 2
        assert _aborted(reopened) == expected_aborted
        _write_marker(reopened, 2, ControlType.ABORT)
        _write_marker(reopened, 3, ControlType.COMMIT)
        _commit_everything(reopened)
        assert reopened.last_stable_offset == reopened.log_end_offset
        assert [a[0] for a in _aborted(reopened)] == [1, 2]
    finally:
        reopened.close()


@pytest.mark.parametrize("damage", ["missing", "flipped", "torn"])
def test_a_missing_or_damaged_txnindex_is_rebuilt(tmp_path: Path, damage: str) -> None:
    log = _open(tmp_path, segment_bytes=300)
    try:
        for pid in range(1, 5):
            log.append(_data(pid, 0), leader_epoch=0)
        for pid in range(1, 5):
            _write_marker(log, pid, ControlType.ABORT if pid % 2 else ControlType.COMMIT)
        log.append(_data(7, 0), leader_epoch=0)
        expected = log.collect_aborted_transactions(0, log.log_end_offset)
        assert len(expected) == 2
    finally:
        log.close()
    files = [
        f for f in sorted((tmp_path / TOPIC_DIR).glob(f"*{TXN_INDEX_SUFFIX}")) if f.stat().st_size
    ]
    assert files, "an abort's index file holds an entry"
    target = files[0]
    if damage == "missing":
        target.unlink()
    elif damage == "flipped":
        data = bytearray(target.read_bytes())
        data[10] ^= 0x01
        target.write_bytes(bytes(data))
    else:
        target.write_bytes(target.read_bytes()[:-3])
    reopened = _open(tmp_path, clean=True, segment_bytes=300)
    try:
        assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == expected
        assert reopened.producer_state.ongoing_transactions == {7: reopened.log_end_offset - 2}
    finally:
        reopened.close()
    # Rebuilt on disk too: a second clean open trusts it as it is.
    again = _open(tmp_path, clean=True, segment_bytes=300)
    try:
        assert again.collect_aborted_transactions(0, again.log_end_offset) == expected
    finally:
        again.close()


def test_snapshots_carry_open_transactions_and_coordinator_epochs(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        log.append(_data(1, 0, epoch=2), leader_epoch=0)
        log.append(_data(2, 0), leader_epoch=0)
        _write_marker(log, 2, ControlType.COMMIT, coordinator_epoch=8)
    finally:
        log.close()
    # Only the snapshot can tell: the log's segments are gone from the replay's reach.
    state = ProducerStateManager(tmp_path / TOPIC_DIR)
    assert state.load_latest_snapshot(1 << 40) == 5
    assert state.ongoing_transactions == {1: 0}
    entry = state.entry(2)
    assert entry is not None and entry.coordinator_epoch == 8
    assert entry.current_txn_first_offset == NO_TXN


def test_a_version_1_snapshot_is_still_read(tmp_path: Path) -> None:
    directory = tmp_path / TOPIC_DIR
    directory.mkdir()
    producer = struct.pack(">qhqb", 42, 3, NOW_MS, 1) + struct.pack(">iiqqq", 0, 4, 0, 4, NOW_MS)
    body = struct.pack(">i", 1) + producer
    (directory / snapshot_file_name(5)).write_bytes(
        struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    )
    state = ProducerStateManager(directory)
    assert state.load_latest_snapshot(5) == 5
    entry = state.entry(42)
    assert entry is not None and (entry.producer_epoch, entry.last_seq) == (3, 4)
    assert (entry.coordinator_epoch, entry.current_txn_first_offset) == (NO_TXN, NO_TXN)


def test_followers_build_the_same_state_and_truncation_rebuilds_it(tmp_path: Path) -> None:
    leader = _open(tmp_path / "leader")
    follower = _open(tmp_path / "follower")
    try:
        leader.append(_data(1, 0), leader_epoch=0)  # 0-1
        leader.append(_data(2, 0), leader_epoch=0)  # 2-3
        abort = _write_marker(leader, 1, ControlType.ABORT)  # 4
        commit = _write_marker(leader, 2, ControlType.COMMIT)  # 5
        copied = bytes(leader.read(0, 1 << 20).records)
        follower.append_as_follower(copied)
        assert _aborted(follower) == _aborted(leader) == [(1, 0, abort)]
        assert follower.producer_state.ongoing_transactions == {}
        follower.update_follower_high_watermark(commit)
        # The HW has not passed the COMMIT marker: pid 2's transaction is still unstable.
        assert follower.last_stable_offset == 2
        follower.update_follower_high_watermark(commit + 1)
        assert follower.last_stable_offset == commit + 1
        # A new leader never had the markers: the follower truncates them away.
        follower.truncate_to(abort)
        assert _aborted(follower) == []
        assert follower.producer_state.ongoing_transactions == {1: 0, 2: 2}
        assert follower.last_stable_offset == 0
        follower.truncate_fully_and_start_at(100)
        assert follower.producer_state.ongoing_transactions == {}
        assert follower.last_stable_offset == follower.high_watermark
    finally:
        leader.close()
        follower.close()


def test_a_follower_copies_a_control_batch_that_is_no_marker_as_replay_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older leader accepted control batches that are not markers; a follower must get past
    one (refusing it would stall replication there for good), applying nothing from it, as
    recovery replay does."""
    leader = _open(tmp_path / "leader")
    follower = _open(tmp_path / "follower")
    try:
        leader.append(_data(1, 0), leader_epoch=0)  # 0-1: opens pid 1's transaction
        copied = bytes(leader.read(0, 1 << 20).records)
        odd = BatchBuilder(
            producer_id=1,
            producer_epoch=0,
            is_transactional=True,
            partition_leader_epoch=0,
            is_control=True,
        )
        odd.append(NOW_MS, struct.pack(">hh", 0, 7), struct.pack(">hi", 0, 0), ())  # type 7
        abort = build_control_batch(
            ControlType.ABORT,
            producer_id=1,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=NOW_MS,
            base_offset=3,
            partition_leader_epoch=0,
        )
        follower.append_as_follower(copied + odd.build(2) + abort)
        assert follower.log_end_offset == 4
        assert "no marker" in caplog.text
        assert follower.producer_state.ongoing_transactions == {}
        assert _aborted(follower) == [(1, 0, 3)]
        # Replay reads the log the same way.
        follower.truncate_to(3)
        assert follower.producer_state.ongoing_transactions == {1: 0}
    finally:
        leader.close()
        follower.close()


def test_a_transaction_begun_below_the_log_start_survives_a_rebuild(tmp_path: Path) -> None:
    """DeleteRecords into the segment after the transaction's first one: the transaction is
    still open (the LSO stays at the log start), and a rebuild of the producer state from that
    segment (here its aborted index is lost, so recovery replays from its base) still knows it,
    so its later abort is indexed."""
    log = _open(tmp_path, segment_bytes=300)
    try:
        log.append(_data(1, 0), leader_epoch=0)  # 0-1: opens pid 1's transaction
        while log.segment_count < 3:
            log.append(_data(2, log.log_end_offset, txn=False), leader_epoch=0)
        _commit_everything(log)
        second = log.segment_base_offsets[1]
        start = log.delete_records_before(second + 1)
        assert log.last_stable_offset == start
    finally:
        log.close()
    (tmp_path / TOPIC_DIR / f"{second:020d}{TXN_INDEX_SUFFIX}").unlink()
    reopened = PartitionLog.open(
        tmp_path / TOPIC_DIR,
        LogConfig(segment_bytes=300),
        log_start_offset=start,
        high_watermark=1 << 40,
        had_clean_shutdown=True,
        clock_ms=FakeClock(NOW_MS),
    )
    try:
        assert reopened.producer_state.ongoing_transactions == {1: 0}
        assert reopened.last_stable_offset == start
        abort = _write_marker(reopened, 1, ControlType.ABORT)
        assert [(pid, last) for pid, _, last in _aborted(reopened)] == [(1, abort)]
    finally:
        reopened.close()


def test_retention_deletes_a_segments_txnindex_with_it(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=300, retention_bytes=1)
    try:
        log.append(_data(1, 0), leader_epoch=0)
        _write_marker(log, 1, ControlType.ABORT)
        for _ in range(6):
            log.append(build_batch([(NOW_MS, None, b"x" * 40, ())]), leader_epoch=0)
        _commit_everything(log)
        before = log.segment_count
        assert log.delete_old_segments() > 0
        log.purge_deleted_segments(everything=True)
        files = list((tmp_path / TOPIC_DIR).glob(f"*{TXN_INDEX_SUFFIX}*"))
        assert len(files) == log.segment_count < before
        assert _aborted(log) == []
    finally:
        log.close()


def test_a_producer_with_an_open_transaction_does_not_expire(tmp_path: Path) -> None:
    clock = FakeClock(NOW_MS)
    log = PartitionLog.open(tmp_path / TOPIC_DIR, LogConfig(), clock_ms=clock)
    try:
        log.append(_data(1, 0), leader_epoch=0)
        log.append(_data(2, 0, txn=False), leader_epoch=0)
        clock.now_ms += 10_000
        assert log.expire_producers(1_000) == [2]
        assert log.producer_state.entry(1) is not None
    finally:
        log.close()


def test_control_batches_must_be_a_lone_transactional_marker(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        marker = _marker(1, ControlType.COMMIT)
        with pytest.raises(Exception, match="alone"):
            log.append(marker + marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
        assert log.log_end_offset == 0
        assert [h.is_control for _, h in scan_batches(marker)] == [True]
    finally:
        log.close()


def test_an_entry_that_fails_its_checksum_is_noticed(tmp_path: Path) -> None:
    entry = AbortedTxn(1, 2, 3, 4)
    data = bytearray(entry.encode())
    assert len(data) == 38
    data[5] ^= 1
    path = tmp_path / f"{0:020d}{TXN_INDEX_SUFFIX}"
    path.write_bytes(bytes(data))
    assert "CRC" in (TransactionIndex(path, 0).problem() or "")
