"""Idempotent producers' state per partition: the sequence rules, replication, truncation,
snapshots and recovery, expiration (log/producer_state.py through PartitionLog)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from brook_storage_node.log import (
    AppendOrigin,
    LogConfig,
    LogManager,
    LogManagerConfig,
    PartitionLog,
)
from brook_storage_node.log.producer_state import (
    BATCHES_RETAINED,
    SNAPSHOT_SUFFIX,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    snapshot_file_name,
)
from brook_storage_node.log.topic_partition import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.record import (
    ControlType,
    InvalidRecordError,
    build_batch,
    build_control_batch,
    iter_records,
    read_header,
    scan_batches,
)
from brook.record.varint import INT32_MAX

TOPIC_DIR = "events-0"
START_MS = 1_700_000_000_000
PID = 4000
WAIT_S = 10.0


class _Clock:
    def __init__(self) -> None:
        self.now_ms = START_MS

    def __call__(self) -> int:
        return self.now_ms


def _batch(
    seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0, timestamp: int = START_MS
) -> bytes:
    return build_batch(
        [(timestamp, None, b"%d-%d" % (seq, i), ()) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def _open(directory: Path, clock: _Clock | None = None, **config: int) -> PartitionLog:
    directory.mkdir(parents=True, exist_ok=True)
    return PartitionLog.open(directory / TOPIC_DIR, LogConfig(**config), clock_ms=clock or _Clock())


def _values(log: PartitionLog) -> list[bytes]:
    values: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        data = bytes(fetched.records)
        for position, header in scan_batches(data):
            chunk = data[position : position + header.size]
            values.extend(record.value or b"" for record in iter_records(chunk))
        offset = fetched.next_offset
    return values


def _copy_to_follower(leader: PartitionLog, follower: PartitionLog) -> None:
    fetched = leader.read(follower.log_end_offset, 1 << 20)
    if fetched.records.nbytes:
        follower.append_as_follower(fetched.records)


# -- the rules, on the leader ---------------------------------------------------------------


def test_a_retried_batch_is_answered_with_its_original_offsets_and_not_appended(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        first = log.append(_batch(0, 3), leader_epoch=0)
        second = log.append(_batch(3, 2), leader_epoch=0)
        end = log.log_end_offset
        again = log.append(_batch(0, 3), leader_epoch=0)
        assert again.duplicate
        assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
        assert log.append(_batch(3, 2), leader_epoch=0).first_offset == second.first_offset
        assert log.log_end_offset == end
        assert _values(log) == [b"0-0", b"0-1", b"0-2", b"3-0", b"3-1"]
    finally:
        log.close()


def test_only_the_last_five_batches_are_recognised_as_retries(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        for seq in range(BATCHES_RETAINED + 1):
            log.append(_batch(seq), leader_epoch=0)
        assert log.append(_batch(1), leader_epoch=0).duplicate
        with pytest.raises(OutOfOrderSequenceError):
            log.append(_batch(0), leader_epoch=0)
    finally:
        log.close()


def test_a_gap_or_a_rewind_is_out_of_order_and_appends_nothing(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        log.append(_batch(0, 2), leader_epoch=0)
        end = log.log_end_offset
        for bad in (_batch(3), _batch(1), _batch(0, 1)):
            with pytest.raises(OutOfOrderSequenceError):
                log.append(bad, leader_epoch=0)
        assert log.log_end_offset == end
        log.append(_batch(2), leader_epoch=0)
        assert log.log_end_offset == end + 1
    finally:
        log.close()


def test_an_older_epoch_is_fenced_and_a_newer_one_must_restart_at_sequence_zero(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        log.append(_batch(0, epoch=3), leader_epoch=0)
        with pytest.raises(OutOfOrderSequenceError):
            log.append(_batch(1, epoch=4), leader_epoch=0)
        log.append(_batch(0, epoch=4), leader_epoch=0)
        for stale in (_batch(1, epoch=3), _batch(0, epoch=3)):
            with pytest.raises(InvalidProducerEpochError) as fenced:
                log.append(stale, leader_epoch=0)
            assert fenced.value.error_code == 47
        assert _values(log) == [b"0-0", b"0-0"]
        entry = log.producer_state.entry(PID)
        assert entry is not None and entry.producer_epoch == 4
    finally:
        log.close()


def test_an_unknown_producers_first_batch_is_taken_at_any_sequence_and_then_held_to_order(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        # Kafka >= 2.5: its state may have expired while batches were in flight.
        log.append(_batch(7, epoch=2), leader_epoch=0)
        log.append(_batch(8, epoch=2), leader_epoch=0)
        assert log.append(_batch(7, epoch=2), leader_epoch=0).duplicate
        end = log.log_end_offset
        with pytest.raises(OutOfOrderSequenceError) as gap:
            log.append(_batch(10, epoch=2), leader_epoch=0)
        assert gap.value.error_code == 45
        assert log.log_end_offset == end
        assert _values(log) == [b"7-0", b"8-0"]
    finally:
        log.close()


def test_sequences_wrap_from_int32_max_to_zero(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    near_end = read_header(_batch(0, 2))
    state.apply(
        read_header(
            build_batch(
                [(START_MS, None, b"x", ()), (START_MS, None, b"y", ())],
                producer_id=PID,
                producer_epoch=0,
                base_sequence=INT32_MAX - 1,
            )
        ),
        0,
        START_MS,
        append_time_ms=START_MS,
    )
    entry = state.entry(PID)
    assert entry is not None and entry.last_seq == INT32_MAX
    assert state.check_append(near_end) is None
    with pytest.raises(OutOfOrderSequenceError):
        state.check_append(read_header(_batch(1)))


def test_an_idempotent_batch_must_travel_alone_and_carry_epoch_and_sequence(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    try:
        with pytest.raises(InvalidRecordError, match="one batch per partition"):
            log.append(_batch(0) + _batch(1), leader_epoch=0)
        no_sequence = build_batch(
            [(START_MS, None, b"v", ())], producer_id=PID, producer_epoch=0, base_sequence=-1
        )
        with pytest.raises(InvalidRecordError, match="base sequence -1"):
            log.append(no_sequence, leader_epoch=0)
        assert log.log_end_offset == 0
        assert log.producer_state.producers == {}
        # Batches without a producer id keep their old freedom.
        plain = build_batch([(START_MS, None, b"p", ())])
        log.append(plain + plain, leader_epoch=0)
    finally:
        log.close()


def test_control_batches_leave_the_producer_state_alone(tmp_path: Path) -> None:
    log = _open(tmp_path)
    try:
        log.append(_batch(0), leader_epoch=0)
        marker = build_control_batch(
            ControlType.COMMIT,
            producer_id=PID,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=START_MS,
        )
        log.append(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
        entry = log.producer_state.entry(PID)
        assert entry is not None and entry.last_seq == 0
        log.append(_batch(1), leader_epoch=0)
    finally:
        log.close()


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.lists(st.integers(0, 6), max_size=3)),
        min_size=1,
        max_size=10,
    )
)
def test_any_mix_of_retries_leaves_each_batch_in_the_log_once_in_order(
    sends: list[tuple[int, list[int]]],
) -> None:
    """A producer sends batches in order; after each it retries some earlier ones (``back``
    batches ago). Retries of the last five are answered with their original offsets, older
    ones are rejected; the log holds every batch exactly once, in send order."""
    with tempfile.TemporaryDirectory() as temp:
        log = _open(Path(temp))
        try:
            sent: list[tuple[bytes, int]] = []
            expected: list[bytes] = []
            next_seq = 0
            for count, retries in sends:
                batch = _batch(next_seq, count)
                sent.append((batch, log.append(batch, leader_epoch=0).first_offset))
                expected.extend(b"%d-%d" % (next_seq, i) for i in range(count))
                next_seq += count
                for back in retries:
                    if back >= len(sent):
                        continue
                    retried, offset = sent[-1 - back]
                    if back < BATCHES_RETAINED:
                        assert log.append(retried, leader_epoch=0).first_offset == offset
                    else:
                        with pytest.raises(OutOfOrderSequenceError):
                            log.append(retried, leader_epoch=0)
            assert _values(log) == expected
        finally:
            log.close()


# -- replication and truncation -------------------------------------------------------------


def test_a_follower_learns_the_sequences_from_the_batches_it_copies(tmp_path: Path) -> None:
    leader = _open(tmp_path / "leader")
    follower = _open(tmp_path / "follower")
    try:
        originals = [leader.append(_batch(seq), leader_epoch=0) for seq in range(3)]
        _copy_to_follower(leader, follower)
        # The follower becomes leader: a retry of the last batch is recognised there.
        retried = follower.append(_batch(2), leader_epoch=1)
        assert retried.duplicate and retried.first_offset == originals[2].first_offset
        with pytest.raises(OutOfOrderSequenceError):
            follower.append(_batch(4), leader_epoch=1)
    finally:
        leader.close()
        follower.close()


def test_truncation_rolls_the_producer_state_back_with_the_log(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=400)
    try:
        for seq in range(6):
            log.append(_batch(seq), leader_epoch=0)
        assert log.segment_count > 1
        log.truncate_to(3)
        entry = log.producer_state.entry(PID)
        assert entry is not None and entry.last_seq == 2
        # The truncated batch 3 is no duplicate any more: its retry is appended.
        assert not log.append(_batch(3), leader_epoch=1).duplicate
        log.truncate_fully_and_start_at(10)
        assert log.producer_state.producers == {}
        assert not list((tmp_path / TOPIC_DIR).glob(f"*{SNAPSHOT_SUFFIX}"))
    finally:
        log.close()


# -- snapshots and recovery -----------------------------------------------------------------


def test_a_clean_close_leaves_a_snapshot_at_the_log_end_that_reopening_uses(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    first = log.append(_batch(0), leader_epoch=0)
    log.close()
    assert (tmp_path / TOPIC_DIR / snapshot_file_name(1)).exists()
    reopened = _open(tmp_path)
    try:
        assert reopened.append(_batch(0), leader_epoch=0).first_offset == first.first_offset
        assert reopened.log_end_offset == 1
    finally:
        reopened.close()


def test_without_a_snapshot_the_state_is_replayed_from_the_log(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=400)
    answers = [log.append(_batch(seq), leader_epoch=0) for seq in range(6)]
    log.close()
    for snapshot in (tmp_path / TOPIC_DIR).glob(f"*{SNAPSHOT_SUFFIX}"):
        snapshot.unlink()
    reopened = _open(tmp_path, segment_bytes=400)
    try:
        assert reopened.append(_batch(5), leader_epoch=0).first_offset == answers[5].first_offset
        assert reopened.append(_batch(1), leader_epoch=0).first_offset == answers[1].first_offset
    finally:
        reopened.close()


def test_a_corrupt_snapshot_is_ignored_and_an_older_one_plus_replay_is_used(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path, segment_bytes=400)
    answers = [log.append(_batch(seq), leader_epoch=0) for seq in range(6)]
    log.close()
    directory = tmp_path / TOPIC_DIR
    snapshots = sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"))
    assert len(snapshots) >= 2, "rolls and the close should each leave a snapshot"
    newest = snapshots[-1]
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    # After a clean shutdown (an unclean one rebuilds the aborted-transaction indexes, which
    # replays from the snapshot at the first recovered segment instead).
    reopened = PartitionLog.open(
        directory, LogConfig(segment_bytes=400), had_clean_shutdown=True, clock_ms=_Clock()
    )
    try:
        assert not newest.exists()
        assert reopened.append(_batch(5), leader_epoch=0).first_offset == answers[5].first_offset
        assert not reopened.append(_batch(6), leader_epoch=0).duplicate
    finally:
        reopened.close()


def test_snapshots_past_the_recovered_log_end_are_discarded(tmp_path: Path) -> None:
    log = _open(tmp_path)
    log.append(_batch(0), leader_epoch=0)
    log.close()
    directory = tmp_path / TOPIC_DIR
    state = ProducerStateManager(directory)
    # A snapshot claiming batches the log does not have (the disk lost them).
    state.apply(read_header(_batch(1)), 1, START_MS, append_time_ms=START_MS)
    state.write_snapshot(50)
    reopened = _open(tmp_path)
    try:
        assert not (directory / snapshot_file_name(50)).exists()
        entry = reopened.producer_state.entry(PID)
        assert entry is not None and entry.last_seq == 0
    finally:
        reopened.close()


def test_snapshots_below_the_log_start_are_deleted(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=400)
    try:
        for seq in range(8):
            log.append(_batch(seq), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        before = log.producer_state.snapshot_offsets()
        assert before
        log.delete_records_before(log.segment_base_offsets[-1])
        assert all(o >= log.log_start_offset for o in log.producer_state.snapshot_offsets())
        # The producer is still known: its state does not depend on the deleted segments.
        assert log.append(_batch(7), leader_epoch=0).duplicate
    finally:
        log.close()


# -- expiration -------------------------------------------------------------------------------


EXPIRATION_MS = 800
# A client timestamp far older than any expiration (MirrorMaker keeping a source's timestamps).
OLD_CLIENT_MS = START_MS - 30 * 86_400_000


def test_a_producer_idle_past_the_expiration_is_forgotten_and_then_continues_where_it_was(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    log = _open(tmp_path, clock)
    try:
        log.append(_batch(0, pid=1), leader_epoch=0)
        clock.now_ms = START_MS + 500
        log.append(_batch(0, pid=2), leader_epoch=0)
        clock.now_ms = START_MS + 1000
        assert log.expire_producers(EXPIRATION_MS) == [1]
        assert log.producer_state.entry(1) is None
        # Its next batch is taken as it comes; from then on it is tracked again.
        log.append(_batch(1, pid=1), leader_epoch=0)
        with pytest.raises(OutOfOrderSequenceError):
            log.append(_batch(3, pid=1), leader_epoch=0)
        log.append(_batch(1, pid=2), leader_epoch=0)
    finally:
        log.close()


def test_a_busy_producer_with_old_client_timestamps_is_not_expired(tmp_path: Path) -> None:
    clock = _Clock()
    log = _open(tmp_path, clock)
    try:
        for seq in range(4):
            log.append(_batch(seq, timestamp=OLD_CLIENT_MS), leader_epoch=0)
            clock.now_ms += EXPIRATION_MS // 2
            assert log.expire_producers(EXPIRATION_MS) == []
        assert log.append(_batch(3, timestamp=OLD_CLIENT_MS), leader_epoch=0).duplicate
        # Idle, by the node's clock, for the whole expiration: forgotten.
        clock.now_ms += EXPIRATION_MS
        assert log.expire_producers(EXPIRATION_MS) == [PID]
    finally:
        log.close()


def test_a_follower_measures_idleness_from_its_own_appends(tmp_path: Path) -> None:
    leader_clock, follower_clock = _Clock(), _Clock()
    leader = _open(tmp_path / "leader", leader_clock)
    follower = _open(tmp_path / "follower", follower_clock)
    try:
        leader.append(_batch(0, timestamp=OLD_CLIENT_MS), leader_epoch=0)
        follower_clock.now_ms += EXPIRATION_MS // 2
        _copy_to_follower(leader, follower)
        follower_clock.now_ms += EXPIRATION_MS // 2
        assert follower.expire_producers(EXPIRATION_MS) == []
        follower_clock.now_ms += EXPIRATION_MS // 2
        assert follower.expire_producers(EXPIRATION_MS) == [PID]
    finally:
        leader.close()
        follower.close()


def test_batches_replayed_at_recovery_count_as_appended_at_load_and_snapshots_keep_the_time(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    log = _open(tmp_path, clock)
    log.append(_batch(0, timestamp=OLD_CLIENT_MS), leader_epoch=0)
    log.close()
    for snapshot in (tmp_path / TOPIC_DIR).glob(f"*{SNAPSHOT_SUFFIX}"):
        snapshot.unlink()
    clock.now_ms = START_MS + 5 * EXPIRATION_MS
    replayed = _open(tmp_path, clock)
    try:
        entry = replayed.producer_state.entry(PID)
        assert entry is not None and entry.last_append_time_ms == clock.now_ms
        assert replayed.expire_producers(EXPIRATION_MS) == []
    finally:
        replayed.close()
    # The close's snapshot holds that time; a clean reopening later does not refresh it.
    clock.now_ms += EXPIRATION_MS
    restored = PartitionLog.open(
        tmp_path / TOPIC_DIR, LogConfig(), had_clean_shutdown=True, clock_ms=clock
    )
    try:
        assert restored.expire_producers(EXPIRATION_MS) == [PID]
    finally:
        restored.close()


def test_the_log_manager_expires_idle_producers_periodically(tmp_path: Path) -> None:
    async def scenario() -> None:
        manager = await LogManager.open(
            LogManagerConfig(
                log_dirs=(tmp_path / "data",),
                producer_id_expiration_ms=50,
                producer_id_expiration_check_interval_ms=20,
            )
        )
        try:
            manager.start()
            log = await manager.get_or_create_log(TopicPartition("events", 0))
            now_ms = int(time.time() * 1000)
            log.append(_batch(0, timestamp=now_ms), leader_epoch=0)
            assert log.producer_state.entry(PID) is not None
            await _eventually(lambda: log.producer_state.entry(PID) is None)
        finally:
            await manager.close()

    asyncio.run(scenario())


async def _eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)
