"""kill -9 at every step of a clean-and-swap (issue #18): a child process cleans a log and
SIGKILLs itself at one step (BROOK_CLEANER_CRASH_AT, log/failpoints.py); reopened, the log is
exactly its old version or exactly its cleaned one, with no swap leftovers, and takes appends.
An I/O error at each step (BROOK_CLEANER_FAIL_AT) ends the same way after a reopen."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from brook_storage_node.log.errors import LogStorageError, SwapIncompleteError
from brook_storage_node.log.failpoints import CRASH_AT_ENV, FAIL_AT_ENV
from brook_storage_node.log.files import may_exist
from cleaner_test_support import Workload, clean, open_compacted_log
from log_test_support import TOPIC_DIR, FakeClock, read_records

from brook.record import build_batch

CONFIG = {"segment_bytes": 1 << 20, "segment_ms": 1000, "delete_retention_ms": 0}

# Steps before the commit point leave the old version, the others the new one.
STEPS_OLD = ["cleaned_written", "cleaned_synced"]
STEPS_NEW = [
    "swap_committed",
    "old_renamed_midway",
    "cleaned_renamed_midway",
    "before_swap_removed",
]

_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from brook_storage_node.log import LogConfig, PartitionLog
    from brook_storage_node.log.cleaner import (
        CleanableOffsets, CleanerConfig, Throttler, clean_log,
    )
    directory, now_ms = Path(sys.argv[1]), int(sys.argv[2])
    config = LogConfig(
        cleanup_policy=frozenset({"compact"}), segment_bytes=1 << 20, segment_ms=1000,
        delete_retention_ms=0,
    )
    log = PartitionLog.open(directory, config, high_watermark=1 << 40, clock_ms=lambda: now_ms)
    result = clean_log(
        log, CleanableOffsets(0, log.log_end_offset, False), config=CleanerConfig(),
        throttler=Throttler(float("inf")), now_ms=now_ms,
    )
    assert result is not None and result.segments_replaced >= 3, result
    log.close()
    """
)

Rows = list[tuple[int, bytes | None, bytes | None]]


def _build_log(tmp_path: Path, clock: FakeClock) -> None:
    """Several small segments (rolled by segment.ms) that one cleaned segment replaces, with
    superseded values, a tombstone, an aborted and a committed transaction."""
    log = open_compacted_log(tmp_path, clock, **CONFIG)
    work = Workload(log, clock)
    for i in range(8):
        work.plain([(b"k%d" % (i % 3), b"v%d" % i), (b"t", b"x")])
        if i == 2:
            work.plain([(b"t", None)])
        if i == 3:
            work.transactional(1, [(b"k0", b"aborted")])
            work.end_txn(1, commit=False)
        if i == 5:
            work.transactional(1, [(b"k1", b"committed")])
            work.end_txn(1, commit=True)
        clock.advance(2000)
    log.close()


def _rows(directory: Path, clock: FakeClock) -> Rows:
    log = open_compacted_log(directory, clock, high_watermark=1 << 40, **CONFIG)
    try:
        return [(r.offset, r.key, r.value) for r in read_records(log)]
    finally:
        log.close()


def _run_child(directory: Path, now_ms: int, crash_at: str | None) -> int:
    env = dict(os.environ)
    env.pop(CRASH_AT_ENV, None)
    if crash_at is not None:
        env[CRASH_AT_ENV] = crash_at
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, str(directory / TOPIC_DIR), str(now_ms)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    if crash_at is None:
        assert completed.returncode == 0, completed.stderr.decode()
    return completed.returncode


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Rows, Rows, int]:
    """A log directory to copy, its rows before and after an uncrashed clean, and the clock."""
    base = tmp_path_factory.mktemp("crash-base")
    clock = FakeClock()
    _build_log(base, clock)
    old = _rows(base, clock)
    reference = tmp_path_factory.mktemp("crash-reference")
    shutil.copytree(base / TOPIC_DIR, reference / TOPIC_DIR)
    _run_child(reference, clock.now_ms, None)
    new = _rows(reference, clock)
    assert new != old and len(new) < len(old)
    return base, old, new, clock.now_ms


@pytest.mark.parametrize("step", STEPS_OLD + STEPS_NEW)
def test_a_crash_at_any_step_leaves_the_old_or_the_new_log(
    tmp_path: Path, versions: tuple[Path, Rows, Rows, int], step: str
) -> None:
    base, old, new, now_ms = versions
    shutil.copytree(base / TOPIC_DIR, tmp_path / TOPIC_DIR)
    assert _run_child(tmp_path, now_ms, step) == -signal.SIGKILL
    clock = FakeClock(now_ms)
    log = open_compacted_log(tmp_path, clock, high_watermark=1 << 40, **CONFIG)
    try:
        names = os.listdir(tmp_path / TOPIC_DIR)
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
        recovered = [(r.offset, r.key, r.value) for r in read_records(log)]
        assert recovered == (old if step in STEPS_OLD else new)
        info = log.append(build_batch([(now_ms, b"k", b"after", ())]), leader_epoch=0)
        assert info.first_offset == log.log_end_offset - 1
        log.maybe_increment_high_watermark()
        assert [(r.key, r.value) for r in read_records(log)][-1] == (b"k", b"after")
    finally:
        log.close()


@pytest.mark.parametrize("step", STEPS_OLD + STEPS_NEW)
def test_an_io_error_at_any_step_leaves_the_old_log_or_an_offline_one_that_reopens_new(
    tmp_path: Path,
    versions: tuple[Path, Rows, Rows, int],
    step: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before the commit point the pass fails and changes nothing. After it the new segment's
    # files must survive (the swap file names it); the log goes offline, and the next open
    # finishes the swap: deleting them there would leave the swap file to delete old data.
    base, old, new, now_ms = versions
    shutil.copytree(base / TOPIC_DIR, tmp_path / TOPIC_DIR)
    clock = FakeClock(now_ms)
    log = open_compacted_log(tmp_path, clock, high_watermark=1 << 40, **CONFIG)
    monkeypatch.setenv(FAIL_AT_ENV, step)
    committed = step in STEPS_NEW
    with pytest.raises(SwapIncompleteError if committed else LogStorageError) as raised:
        clean(log, now_ms)
    monkeypatch.delenv(FAIL_AT_ENV)
    if committed:
        with pytest.raises(LogStorageError, match="offline"):
            log.read(0, 1 << 20)
        with pytest.raises(LogStorageError, match="offline"):
            log.close()
    else:
        assert not isinstance(raised.value, SwapIncompleteError)
        assert [(r.offset, r.key, r.value) for r in read_records(log)] == old
        log.close()
    reopened = open_compacted_log(tmp_path, clock, high_watermark=1 << 40, **CONFIG)
    try:
        names = os.listdir(tmp_path / TOPIC_DIR)
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))], names
        recovered = [(r.offset, r.key, r.value) for r in read_records(reopened)]
        assert recovered == (new if committed else old)
    finally:
        reopened.close()


def test_a_commit_file_whose_look_up_fails_may_exist(tmp_path: Path) -> None:
    # The swap decides "committed or not" by this after a failed write of the swap file: an
    # error that is not "no such file" must not read as "not written" (the cleaned files
    # would be deleted while the swap file stays, and the next open delete the old ones).
    (tmp_path / "written").write_bytes(b"")
    assert may_exist(tmp_path / "written")
    assert not may_exist(tmp_path / "missing")
    # ENOTDIR: the look-up itself fails.
    assert may_exist(tmp_path / "written" / "beneath")
