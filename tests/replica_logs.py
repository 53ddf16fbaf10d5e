"""Reading back what a test cluster holds: every partition through a consumer up to its high
watermark, and the replicas' logs from disk (are they byte-identical up to the HW?).

For the disk comparison the storage nodes must be stopped first (cleanly, so nothing is
half-written). Each replica's partition directory is copied and opened through the log
library, so recovery on open changes nothing in the cluster's own files.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from brook_storage_node.log import LogConfig, PartitionLog

from brook.client import Consumer, ConsumerRecord, TopicPartition
from brook.launcher import LocalCluster, Role

READ_BYTES_MAX: Final = 1 << 20


def read_to_high_watermarks(
    bootstrap: str, topic: str, partitions: Sequence[int], timeout_s: float
) -> tuple[dict[int, int], dict[int, list[ConsumerRecord]]]:
    """(partition -> high watermark, partition -> its records from offset 0 up to that
    high watermark, in log order), read with the SDK's consumer from ``bootstrap``."""
    assigned = [TopicPartition(topic, p) for p in partitions]
    found: dict[int, list[ConsumerRecord]] = {p: [] for p in partitions}
    with Consumer(bootstrap_servers=bootstrap, request_timeout_ms=30_000) as consumer:
        ends = consumer.end_offsets(assigned, timeout_s)
        consumer.assign(assigned)
        for tp in assigned:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp, timeout_s) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, f"{topic}: not read to the high watermarks"
            for record in consumer.poll(1.0):
                if record.offset < ends[TopicPartition(topic, record.partition)]:
                    found[record.partition].append(record)
    return {tp.partition: offset for tp, offset in ends.items()}, found


def committed_bytes(
    partition_dir: Path, scratch_dir: Path, start_offset: int, high_watermark: int
) -> bytes:
    """The raw batches of a replica's log from ``start_offset`` to ``high_watermark``, read
    from a copy."""
    copy = scratch_dir / partition_dir.name
    shutil.copytree(partition_dir, copy)
    log = PartitionLog.open(copy, LogConfig())
    try:
        chunks: list[bytes] = []
        offset = start_offset
        while offset < high_watermark:
            data = log.read(offset, READ_BYTES_MAX, max_offset=high_watermark)
            assert data.next_offset > offset, (
                f"{partition_dir}: no whole batch from offset {offset} below the high watermark "
                f"{high_watermark} (log end {data.log_end_offset})"
            )
            chunks.append(bytes(data.records))
            offset = data.next_offset
        return b"".join(chunks)
    finally:
        log.close()


def _log_start_offset(partition_dir: Path, scratch_dir: Path) -> int:
    shutil.copytree(partition_dir, scratch_dir)
    log = PartitionLog.open(scratch_dir, LogConfig())
    try:
        return log.log_start_offset
    finally:
        log.close()


def assert_replicas_identical_to_high_watermark(
    cluster: LocalCluster, topic: str, high_watermarks: Mapping[int, int]
) -> None:
    """Every storage node's replica of each partition of ``topic`` holds the same bytes up
    to the partition's high watermark (``high_watermarks``: partition -> HW)."""
    names = cluster.names(Role.STORAGE_NODE)
    with tempfile.TemporaryDirectory(prefix="brook-replicas-") as scratch:
        for partition, high_watermark in high_watermarks.items():
            dirs = {
                name: cluster.spec(name).directory / "data" / f"{topic}-{partition}"
                for name in names
            }
            # Replicas may have deleted different prefixes: compare what all of them keep.
            start = max(
                _log_start_offset(d, Path(scratch) / f"start-{n}-{partition}")
                for n, d in dirs.items()
            )
            logs: dict[str, bytes] = {}
            for name, partition_dir in dirs.items():
                scratch_dir = Path(scratch) / f"{name}-{partition}"
                scratch_dir.mkdir()
                logs[name] = committed_bytes(partition_dir, scratch_dir, start, high_watermark)
            reference = logs[names[0]]
            assert reference or high_watermark == 0, f"{topic}-{partition}: nothing committed"
            for name, content in logs.items():
                assert content == reference, (
                    f"{topic}-{partition}: {name}'s log differs from {names[0]}'s below the "
                    f"high watermark {high_watermark} ({len(content)} vs {len(reference)} bytes)"
                )
