"""Helpers for the partition log tests: build batches, read a whole log back, inspect files."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from brook_storage_node.log import LogConfig, PartitionLog

from brook.record import Compression, Record, build_batch, iter_records, scan_batches

TOPIC_DIR = "events-0"


class FakeClock:
    """A settable clock in ms, so roll, retention and flush timing are exact in tests."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def batch(
    count: int = 1,
    *,
    timestamp: int = 1_700_000_000_000,
    value_bytes: int = 20,
    key: bytes | None = b"key",
    compression: Compression = Compression.NONE,
) -> bytes:
    """A batch of ``count`` records with distinct values and timestamps ``timestamp + i``."""
    records = [
        (timestamp + i, key, f"value-{i}-".encode().ljust(value_bytes, b"x"), ())
        for i in range(count)
    ]
    return build_batch(records, compression=compression)


def open_log(directory: Path, clock: FakeClock | None = None, **config: Any) -> PartitionLog:
    return PartitionLog.open(
        directory / TOPIC_DIR, LogConfig(**config), clock_ms=clock or FakeClock()
    )


def open_log_append_time_log(directory: Path, clock: FakeClock, **config: Any) -> PartitionLog:
    """A log of a topic with message.timestamp.type=LogAppendTime."""
    return PartitionLog.open(
        directory / TOPIC_DIR,
        LogConfig(**config).with_overrides({"message.timestamp.type": "LogAppendTime"}),
        clock_ms=clock,
    )


def read_batches(
    log: PartitionLog, *, start: int | None = None, max_bytes: int = 1 << 20
) -> list[bytes]:
    """Every batch from ``start`` (default: log start) to the log end, fetch by fetch."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        fetched = log.read(offset, max_bytes)
        assert fetched.next_offset > offset, f"no progress reading at {offset}"
        out.extend(split_batches(fetched.records))
        offset = fetched.next_offset
    return out


def split_batches(data: bytes | memoryview) -> list[bytes]:
    view = memoryview(data)
    batches = []
    end = 0
    for position, header in scan_batches(view):
        batches.append(bytes(view[position : position + header.size]))
        end = position + header.size
    assert end == len(view), "a read returned a partial batch"
    return batches


def read_records(
    log: PartitionLog, *, start: int | None = None, max_bytes: int = 1 << 20
) -> list[Record]:
    return [
        record
        for data in read_batches(log, start=start, max_bytes=max_bytes)
        for record in iter_records(data)
    ]


def segment_files(directory: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in (directory / TOPIC_DIR).iterdir() if p.name.endswith(suffix))


def iter_record_offsets(batches: Sequence[bytes]) -> Iterator[int]:
    for data in batches:
        for record in iter_records(data):
            yield record.offset
