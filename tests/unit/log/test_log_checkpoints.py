"""Checkpoint files: exact round trips, clear errors for damaged files, and atomic replacement
(a writer that dies mid-write leaves the previous file intact)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from brook_storage_node.log import TopicPartition
from brook_storage_node.log.checkpoints import CheckpointFileError, OffsetCheckpointFile
from brook_storage_node.log.leader_epoch import EpochEntry, LeaderEpochCheckpointFile

CHILD_TIMEOUT_S = 30


def test_offset_checkpoint_round_trips_and_is_readable_text(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert checkpoint.read() == {}
    offsets = {TopicPartition("orders", 0): 42, TopicPartition("a.b-c_d", 12): 0}
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets
    assert checkpoint.path.read_text() == "0\n2\na.b-c_d 12 0\norders 0 42\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_leader_epoch_checkpoint_round_trips(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    entries = [EpochEntry(0, 0), EpochEntry(4, 17)]
    checkpoint.write(entries)
    assert checkpoint.read() == entries


@pytest.mark.parametrize(
    "content",
    [
        "1\n0\n",  # unknown version
        "0\n2\norders 0 1\n",  # fewer entries than announced
        "0\n1\norders 0 1",  # no final newline: a torn file
        "0\n1\norders zero 1\n",
        "0\n1\norders 0 -5\n",
        "0\n1\nbad/topic 0 5\n",
        "",
        "\xff\xfe",
    ],
)
def test_a_damaged_offset_checkpoint_is_a_clear_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(CheckpointFileError, match="log-start-offset-checkpoint") as raised:
        OffsetCheckpointFile(path).read()
    assert raised.value.error_code == 56


def _child(path: Path, code: str, *, file_size_limit: int | None = None) -> subprocess.Popen[bytes]:
    preamble = ""
    if file_size_limit is not None:
        # Python ignores SIGXFSZ by default; restored, the kernel kills the writer in write().
        preamble = (
            "import resource, signal\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_size_limit}, {file_size_limit}))\n"
        )
    script = (
        preamble
        + textwrap.dedent(
            f"""
        from pathlib import Path
        from brook_storage_node.log import TopicPartition
        from brook_storage_node.log.checkpoints import OffsetCheckpointFile
        checkpoint = OffsetCheckpointFile(Path({str(path)!r}))
        """
        )
        + textwrap.dedent(code)
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_a_writer_killed_by_the_file_size_limit_mid_write_leaves_the_old_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    old = {TopicPartition("t", 0): 1}
    OffsetCheckpointFile(path).write(old)
    # The new content is far over the limit: the kernel kills the writer inside write().
    child = _child(
        path,
        "checkpoint.write({TopicPartition('t', p): p for p in range(20_000)})",
        file_size_limit=4096,
    )
    try:
        child.wait(CHILD_TIMEOUT_S)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGXFSZ, child.stderr.read() if child.stderr else ""
    assert (tmp_path / "replication-offset-checkpoint.tmp").stat().st_size == 4096
    assert OffsetCheckpointFile(path).read() == old
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 2})
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 2}


def test_a_writer_killed_at_random_moments_always_leaves_a_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    versions = [{TopicPartition("t", p): p + v for p in range(5_000)} for v in range(2)]
    OffsetCheckpointFile(path).write(versions[0])
    rng = random.Random(20240601)
    for _ in range(5):
        child = _child(
            path,
            """
            versions = [{TopicPartition('t', p): p + v for p in range(5_000)} for v in range(2)]
            print("writing", flush=True)
            while True:
                for version in versions:
                    checkpoint.write(version)
            """,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == b"writing\n"
            time.sleep(rng.uniform(0.01, 0.2))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(CHILD_TIMEOUT_S)
        assert OffsetCheckpointFile(path).read() in versions
