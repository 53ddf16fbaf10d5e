"""Crash recovery: torn and corrupted logs reopen with every batch before the damage and
nothing after it; indexes that do not fit their data are rebuilt; a clean shutdown skips it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from brook_storage_node.log import LogConfig, PartitionLog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_test_support import TOPIC_DIR, FakeClock, batch, read_batches, segment_files

from brook.record import Compression, read_header, scan_batches

CONFIG = LogConfig(segment_bytes=800, index_interval_bytes=150)
# Bytes of a batch header outside the CRC: baseOffset (0..8) and partitionLeaderEpoch (12..16).
UNCOVERED = (range(0, 8), range(12, 16))


def _write_log(directory: Path, batch_count: int) -> list[bytes]:
    log = PartitionLog.open(directory / TOPIC_DIR, CONFIG, clock_ms=FakeClock())
    for i in range(batch_count):
        compression = Compression.GZIP if i % 3 == 0 else Compression.NONE
        log.append(
            batch(1 + i % 4, timestamp=1_000 + 10 * i, compression=compression),
            leader_epoch=1 + i // 5,
        )
    batches = read_batches(log)
    log.close()
    return batches


def _reopen(directory: Path, **kwargs: int | bool) -> PartitionLog:
    return PartitionLog.open(directory / TOPIC_DIR, CONFIG, clock_ms=FakeClock(), **kwargs)  # type: ignore[arg-type]


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (directory / TOPIC_DIR).iterdir()}


def _restore(directory: Path, files: dict[str, bytes]) -> None:
    for path in (directory / TOPIC_DIR).iterdir():
        path.unlink()
    for name, data in files.items():
        (directory / TOPIC_DIR / name).write_bytes(data)


def _assert_log_is(log: PartitionLog, kept: list[bytes]) -> None:
    """The log holds exactly ``kept`` and accepts the next append right after them."""
    assert read_batches(log) == kept
    next_offset = read_header(kept[-1]).next_offset if kept else 0
    assert log.log_end_offset == next_offset
    info = log.append(batch(2), leader_epoch=50)
    assert info.first_offset == next_offset
    assert read_batches(log)[:-1] == kept


def test_log_cut_at_every_byte_of_its_last_batch_keeps_every_earlier_batch(tmp_path: Path) -> None:
    batches = _write_log(tmp_path, 12)
    pristine = _snapshot(tmp_path)
    last_log = segment_files(tmp_path)[-1]
    data = pristine[last_log.name]
    last_start = max(position for position, _ in scan_batches(data))
    assert len(data) - last_start > 60
    for cut in range(last_start, len(data)):
        _restore(tmp_path, pristine)
        os.truncate(last_log, cut)
        log = _reopen(tmp_path)
        try:
            _assert_log_is(log, batches[:-1])
        finally:
            log.close()


def test_log_cut_after_a_clean_shutdown_is_still_recovered(tmp_path: Path) -> None:
    batches = _write_log(tmp_path, 12)
    last_log = segment_files(tmp_path)[-1]
    os.truncate(last_log, last_log.stat().st_size - 5)
    log = _reopen(tmp_path, had_clean_shutdown=True)
    try:
        _assert_log_is(log, batches[:-1])
    finally:
        log.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_flipped_byte_ends_the_log_at_the_damaged_batch(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("flip")
    batches = _write_log(directory, 15)
    files = segment_files(directory)
    assert len(files) >= 3
    victim = data.draw(st.sampled_from(files), label="segment")
    content = bytearray(victim.read_bytes())
    starts = [position for position, _ in scan_batches(content)]
    victim_batch = data.draw(st.integers(0, len(starts) - 1), label="batch")
    start = starts[victim_batch]
    end = starts[victim_batch + 1] if victim_batch + 1 < len(starts) else len(content)
    covered = [p for p in range(start, end) if not any(p - start in r for r in UNCOVERED)]
    position = data.draw(st.sampled_from(covered), label="position")
    damaged_offset = read_header(content, start).base_offset
    content[position] ^= data.draw(st.integers(1, 255), label="xor")
    victim.write_bytes(content)

    kept = [b for b in batches if read_header(b).base_offset < damaged_offset]
    log = _reopen(directory)
    try:
        _assert_log_is(log, kept)
    finally:
        log.close()


def test_an_earlier_backwards_base_offset_ends_the_log(tmp_path: Path) -> None:
    # baseOffset is outside the CRC; recovery still refuses offsets that go backwards.
    batches = _write_log(tmp_path, 6)
    only = segment_files(tmp_path)[0]
    content = bytearray(only.read_bytes())
    third = [position for position, _ in scan_batches(content)][2]
    content[third : third + 8] = (0).to_bytes(8, "big")
    only.write_bytes(content)
    log = _reopen(tmp_path)
    try:
        _assert_log_is(log, batches[:2])
    finally:
        log.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 4096, os.urandom(3000), os.urandom(40)])
def test_nonsense_appended_by_a_crash_is_cut_off(tmp_path: Path, garbage: bytes) -> None:
    # The seed's second kind of corruption: the inode grew but the block was never written.
    batches = _write_log(tmp_path, 12)
    with open(segment_files(tmp_path)[-1], "ab") as file:
        file.write(garbage)
    log = _reopen(tmp_path)
    try:
        _assert_log_is(log, batches)
    finally:
        log.close()


def _damage_second_batch(segment: Path) -> None:
    """Flip a CRC-covered byte of the segment's second batch, keeping every length intact."""
    content = bytearray(segment.read_bytes())
    second = [position for position, _ in scan_batches(content)][1]
    content[second + 40] ^= 0xFF
    segment.write_bytes(content)


def test_damage_in_an_older_segment_deletes_every_later_segment(tmp_path: Path) -> None:
    batches = _write_log(tmp_path, 15)
    _damage_second_batch(segment_files(tmp_path)[0])
    log = _reopen(tmp_path)
    try:
        assert log.segment_count == 1
        _assert_log_is(log, batches[:1])
    finally:
        log.close()


def test_clean_shutdown_marker_skips_the_scan_of_older_segments(tmp_path: Path) -> None:
    batches = _write_log(tmp_path, 15)
    _damage_second_batch(segment_files(tmp_path)[0])  # only a CRC check can see it

    trusted = _reopen(tmp_path, had_clean_shutdown=True)
    try:
        assert trusted.log_end_offset == read_header(batches[-1]).next_offset
        assert len(read_batches(trusted)) == len(batches)
    finally:
        trusted.close()
    recovered = _reopen(tmp_path, had_clean_shutdown=False, recovery_point=0)
    try:
        assert read_batches(recovered) == batches[:1]
    finally:
        recovered.close()


def test_segments_below_the_recovery_point_are_not_rescanned(tmp_path: Path) -> None:
    batches = _write_log(tmp_path, 15)
    files = segment_files(tmp_path)
    # Damage the first segment, then say it was flushed: only later segments are checked.
    content = bytearray(files[0].read_bytes())
    content[-5] ^= 0xFF
    files[0].write_bytes(content)
    recovery_point = int(files[1].name[:20])
    log = _reopen(tmp_path, had_clean_shutdown=False, recovery_point=recovery_point)
    try:
        assert log.log_end_offset == read_header(batches[-1]).next_offset
        assert log.recovery_point == log.log_end_offset
    finally:
        log.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", ["missing", "not_a_multiple", "garbage_last_entry"])
def test_an_index_that_does_not_fit_its_segment_is_rebuilt_identically(
    tmp_path: Path, suffix: str, damage: str
) -> None:
    batches = _write_log(tmp_path, 15)
    index = segment_files(tmp_path, suffix)[0]
    original = index.read_bytes()
    assert len(original) >= 2 * (8 if suffix == ".index" else 12), "the test needs index entries"
    if damage == "missing":
        index.unlink()
    elif damage == "not_a_multiple":
        index.write_bytes(original + b"\x01\x02\x03")
    else:
        index.write_bytes(original[:-4] + b"\x7f\xff\xff\xff")
    log = _reopen(tmp_path, had_clean_shutdown=True)
    try:
        assert read_batches(log) == batches
        assert index.read_bytes() == original
        assert log.offset_for_timestamp(1_000 + 10 * 7) is not None
    finally:
        log.close()


def test_a_log_copied_while_open_as_a_crash_would_leave_it_recovers_fully(tmp_path: Path) -> None:
    # Copying the files of an open log captures what a crash leaves on disk (the page cache
    # is what a surviving kernel writes back): preallocated, untrimmed indexes included.
    config = LogConfig(segment_bytes=3000, index_interval_bytes=50)
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    log = PartitionLog.open(live / TOPIC_DIR, config, clock_ms=FakeClock())
    try:
        for i in range(60):
            log.append(batch(1, timestamp=1_000 + i), leader_epoch=2)
        expected = read_batches(log)
        shutil.copytree(live, crashed)
    finally:
        log.close()
    assert segment_files(crashed, ".index")[-1].stat().st_size == config.segment_index_bytes

    reopened = PartitionLog.open(crashed / TOPIC_DIR, config, clock_ms=FakeClock())
    try:
        assert read_batches(reopened) == expected
        assert reopened.offset_for_timestamp(1_040) == (1_040, 40)
    finally:
        reopened.close()
    # The rebuilt indexes are exactly what the clean close of the live log wrote.
    for suffix in (".index", ".timeindex"):
        rebuilt = [p.read_bytes() for p in segment_files(crashed, suffix)]
        assert rebuilt == [p.read_bytes() for p in segment_files(live, suffix)]
    again = PartitionLog.open(crashed / TOPIC_DIR, config, clock_ms=FakeClock())
    try:
        assert again.append(batch(1), leader_epoch=2).first_offset == 60
    finally:
        again.close()


def test_recovery_rebuilds_the_leader_epoch_history_of_recovered_segments(tmp_path: Path) -> None:
    _write_log(tmp_path, 12)
    (tmp_path / TOPIC_DIR / "leader-epoch-checkpoint").unlink()
    log = _reopen(tmp_path)
    try:
        epochs = [(entry.epoch, entry.start_offset) for entry in log.leader_epoch_cache.entries]
        assert [epoch for epoch, _ in epochs] == [1, 2, 3]
        for epoch, start in epochs:
            first = log.read(start, 1).records
            assert read_header(first).partition_leader_epoch == epoch
    finally:
        log.close()
