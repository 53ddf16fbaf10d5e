"""Helpers for the cleaner tests: a workload that appends keyed records, tombstones,
idempotent and transactional batches to a real log while keeping a model of what it wrote,
and a one-call cleaning pass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brook_storage_node.log import AppendOrigin, LogAppendInfo, LogConfig, PartitionLog
from brook_storage_node.log.cleaner import (
    CleanableOffsets,
    CleanerConfig,
    CleanResult,
    Throttler,
    clean_log,
)
from log_test_support import TOPIC_DIR, FakeClock, read_batches

from brook.record import (
    Compression,
    ControlType,
    build_batch,
    build_control_batch,
    iter_records,
    read_header,
)

Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


@dataclass
class WrittenRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    producer_id: int = -1
    aborted: bool = False


@dataclass
class Workload:
    """Appends to ``log`` as a leader and a coordinator would, and remembers every record."""

    log: PartitionLog
    clock: FakeClock
    records: dict[int, WrittenRecord] = field(default_factory=dict)
    sequences: dict[int, int] = field(default_factory=dict)
    open_txns: dict[int, list[int]] = field(default_factory=dict)

    def plain(
        self,
        rows: list[tuple[bytes | None, bytes | None]],
        compression: Compression = Compression.NONE,
    ) -> None:
        self._append(rows, -1, txn=False, compression=compression)

    def idempotent(self, producer_id: int, rows: list[tuple[bytes | None, bytes | None]]) -> None:
        self._append(rows, producer_id, txn=False)

    def transactional(
        self, producer_id: int, rows: list[tuple[bytes | None, bytes | None]]
    ) -> None:
        self._append(rows, producer_id, txn=True)

    def end_txn(self, producer_id: int, commit: bool) -> None:
        offsets = self.open_txns.pop(producer_id)
        marker = build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=producer_id,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=self.clock.now_ms,
        )
        self.log.append(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
        self.stamp_active_segment()
        if not commit:
            for offset in offsets:
                self.records[offset].aborted = True
        self.log.maybe_increment_high_watermark()

    def end_all_txns(self, commit: bool = True) -> None:
        for producer_id in list(self.open_txns):
            self.end_txn(producer_id, commit)

    def _append(
        self,
        rows: list[tuple[bytes | None, bytes | None]],
        producer_id: int,
        *,
        txn: bool,
        compression: Compression = Compression.NONE,
    ) -> None:
        now = self.clock.now_ms
        producer: dict[str, Any] = {}
        if producer_id >= 0:
            producer = {
                "producer_id": producer_id,
                "producer_epoch": 0,
                "base_sequence": self.sequences.get(producer_id, 0),
                "is_transactional": txn,
            }
            self.sequences[producer_id] = producer["base_sequence"] + len(rows)
        data = build_batch(
            [(now, key, value, ()) for key, value in rows], compression=compression, **producer
        )
        info = self._append_maybe_keyless(data, any(key is None for key, _ in rows))
        self.stamp_active_segment()
        for index, (key, value) in enumerate(rows):
            offset = info.first_offset + index
            self.records[offset] = WrittenRecord(offset, key, value, now, producer_id)
            if txn:
                self.open_txns.setdefault(producer_id, []).append(offset)
        self.log.maybe_increment_high_watermark()

    def stamp_active_segment(self) -> None:
        """Give the active segment's file the test clock's time as its modification time: the
        test clock stands for the node's, and the cleaner's delete horizon reads it there."""
        self.log.segments.active.set_last_modified_ms(self.clock.now_ms)

    def _append_maybe_keyless(self, data: bytes, keyless: bool) -> LogAppendInfo:
        """Append ``data``; a batch with keyless records goes in as it reaches a compacted log
        in real life: written while the topic's cleanup.policy was still delete (a compacted
        log refuses keyless records, log_validator.py)."""
        config = self.log.config
        if not keyless or not config.compact:
            return self.log.append(data, leader_epoch=0)
        self.log.update_config(dataclasses.replace(config, cleanup_policy=frozenset({"delete"})))
        try:
            return self.log.append(data, leader_epoch=0)
        finally:
            self.log.update_config(config)

    def original(self, offset: int) -> Row:
        record = self.records[offset]
        return record.offset, record.key, record.value


def open_compacted_log(
    directory: Path, clock: FakeClock, *, high_watermark: int = 0, **config: Any
) -> PartitionLog:
    config.setdefault("cleanup_policy", frozenset({"compact"}))
    return PartitionLog.open(
        directory / TOPIC_DIR,
        LogConfig(**config),
        clock_ms=clock,
        high_watermark=high_watermark,
    )


def clean(
    log: PartitionLog,
    now_ms: int,
    *,
    first_dirty: int = 0,
    map_entries: int | None = None,
    bound: int | None = None,
    **kwargs: Any,
) -> CleanResult | None:
    """One pass over everything the log lets the cleaner touch (below ``bound`` if given);
    ``map_entries`` bounds the offset map to that many keys."""
    config = CleanerConfig()
    if map_entries is not None:
        config = CleanerConfig(dedupe_buffer_bytes=map_entries * 24, load_factor=1.0)
    return clean_log(
        log,
        CleanableOffsets(first_dirty, log.log_end_offset if bound is None else bound, forced=False),
        config=config,
        throttler=Throttler(float("inf")),
        now_ms=now_ms,
        **kwargs,
    )


def rows(log: PartitionLog) -> list[Row]:
    """(offset, key, value) of every data record from the log start (markers skipped, as a
    consumer skips them)."""
    return [
        (record.offset, record.key, record.value)
        for data in read_batches(log)
        if not read_header(data).is_control
        for record in iter_records(data)
    ]


def markers(log: PartitionLog) -> list[int]:
    """The offsets of the control batches from the log start."""
    return [
        header.base_offset for header in map(read_header, read_batches(log)) if header.is_control
    ]
