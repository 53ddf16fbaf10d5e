"""The log cleaner (issue #18): how fast it cleans, and what it costs producers; prints one
JSON document.

- clean: a partition log in a temporary directory filled with a dirty compacted log (keyed
  100-byte records, ``--keys`` distinct keys each updated many times, 1 MiB segments, the
  active segment rolled past them and the high watermark at the end), then cleaned with
  ``clean_log`` and a 64 MiB dedupe buffer (``--dedupe-mib``) until its dirty section is
  clean (one pass, or several when the keys do not fit the map). MB/s of dirty log (the
  dirty bytes ``clean_sizes`` counts before cleaning, over the passes' wall time). Its
  ceiling, measured in the same round on the same bytes: reading the dirty section with
  ``PartitionLog.read`` and writing it to a file beside it (``bench_log.plain_write``), what
  a cleaner that kept every byte would at least do. ``of_copy`` is the ratio.
- produce: a real storage node with the cleaner on (``log.cleaner.enable``, the 64 MiB
  buffer, ``log.cleaner.backoff.ms`` 100) and one with it off, started side by side
  (``brook.launcher``, ``static.topics``); each round one SDK producer sends ``--records``
  keyed records (``--keys`` keys, acks=1, no idempotence) to a compacted topic with 1 MiB
  segments and ``min.cleanable.dirty.ratio`` 0.01 on each node, alternating which goes first,
  so that on the first node the cleaner works while the producer sends. records/s; medians;
  ``with_cleaner_of_without`` is the ratio. ``partition_bytes_after`` shows the cleaner ran.

The machine is shared: read the ratios, not the absolute figures.

    python bench/bench_cleaner.py [--dirty-mib 256] [--records 300000] [--rounds 3]
    python bench/bench_cleaner.py --quick     # under 2 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_gateway import machine_facts
from bench_log import plain_write

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brook_storage_node.log import LogConfig, PartitionLog
from brook_storage_node.log.cleaner import CleanerConfig, Throttler, clean_log
from brook_storage_node.log.log_cleaner_manager import clean_sizes, cleanable_offsets
from offsets_compaction import partition_log_bytes

from brook.client import Producer
from brook.launcher import LocalCluster, Topology
from brook.record import build_batch
from brook.tools.perf import make_payload
from brook.topic_config import CLEANUP_COMPACT

MIB = 1 << 20
RECORD_BYTES = 100
RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 1 * MIB
READ_CHUNK_BYTES = 1 * MIB
T0_MS = 1_700_000_000_000
WITH, WITHOUT = "storage-node-1", "storage-node-2"
TOPIC = "churn"
STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
SEND_TIMEOUT_S = 60.0
PRODUCER_SETTINGS = {
    "acks": "1",
    "enable.idempotence": False,
    "batch.size": 16384,
    "linger.ms": 5,
    "buffer.memory": 64 * MIB,
}


def _keys(count: int) -> list[bytes]:
    return [b"key-%08d" % n for n in range(count)]


def dirty_log(directory: Path, dirty_bytes: int, keys: list[bytes]) -> PartitionLog:
    """A compacted log of at least ``dirty_bytes`` in sealed segments, cleanable to its end."""
    config = LogConfig(segment_bytes=SEGMENT_BYTES, cleanup_policy=frozenset({CLEANUP_COMPACT}))
    log = PartitionLog.open(directory, config)
    value = make_payload(RECORD_BYTES)
    written = 0
    n = 0
    while written < dirty_bytes:
        batch = build_batch(
            [
                (T0_MS + n + i, keys[(n + i) % len(keys)], value, ())
                for i in range(RECORDS_PER_BATCH)
            ]
        )
        log.append(batch, leader_epoch=0)
        written += len(batch)
        n += RECORDS_PER_BATCH
    # Roll: append until a new segment starts past the dirty data, so that all of it is in
    # sealed segments (the cleaner never touches the active one).
    dirty_end = n
    while log.segment_base_offsets[-1] < dirty_end:
        log.append(
            build_batch([(T0_MS + n + i, b"roll", value, ()) for i in range(RECORDS_PER_BATCH)]),
            leader_epoch=0,
        )
        n += RECORDS_PER_BATCH
    log.update_high_watermark(log.log_end_offset)
    return log


def copy_ceiling(log: PartitionLog, end_offset: int, scratch: Path) -> float:
    """Seconds to read [log start, ``end_offset``) through the log and write it to a file."""
    began = time.perf_counter()
    chunks: list[bytes] = []
    offset = log.log_start_offset
    while offset < end_offset:
        data = log.read(offset, READ_CHUNK_BYTES, max_offset=end_offset)
        if data.next_offset <= offset:
            break
        chunks.append(bytes(data.records))
        offset = data.next_offset
    plain_write(scratch, b"".join(chunks), 1)
    return time.perf_counter() - began


def clean_round(
    root: Path, dirty_bytes: int, keys: list[bytes], dedupe_bytes: int
) -> dict[str, Any]:
    directory = root / f"dirty-{time.monotonic_ns()}" / "dirty-0"
    directory.parent.mkdir()
    log = dirty_log(directory, dirty_bytes, keys)
    try:
        now_ms = int(time.time() * 1000)
        offsets = cleanable_offsets(log, None, now_ms)
        sizes = clean_sizes(log, offsets)
        ceiling_s = copy_ceiling(log, offsets.first_uncleanable_offset, directory.parent / "copy")
        config = CleanerConfig(dedupe_buffer_bytes=dedupe_bytes)
        throttler = Throttler(float("inf"))
        passes = 0
        retained = read = 0
        began = time.perf_counter()
        while offsets.first_dirty_offset < offsets.first_uncleanable_offset:
            result = clean_log(log, offsets, config=config, throttler=throttler, now_ms=now_ms)
            if result is None:
                break
            passes += 1
            read += result.records_read
            retained += result.records_retained
            offsets = cleanable_offsets(log, result.end_offset, now_ms)
        elapsed = time.perf_counter() - began
        dirty_mib = sizes.dirty_bytes / MIB
        return {
            "dirty_mib": round(dirty_mib, 1),
            "passes": passes,
            "records_read": read,
            "records_retained": retained,
            "size_after_mib": round(log.size_bytes / MIB, 2),
            "seconds": round(elapsed, 3),
            "mb_per_s": round(dirty_mib / elapsed, 1),
            "copy_mb_per_s": round(dirty_mib / ceiling_s, 1),
            "of_copy": round(ceiling_s / elapsed, 3),
        }
    finally:
        log.close()
        shutil.rmtree(directory.parent, ignore_errors=True)


def start_nodes(root: Path, dedupe_bytes: int) -> LocalCluster:
    topic = (
        f"{TOPIC}:1:cleanup.policy=compact:segment.bytes={SEGMENT_BYTES}"
        ":min.cleanable.dirty.ratio=0.01:min.compaction.lag.ms=0"
    )
    cleaner = {
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(dedupe_bytes),
        "log.cleaner.backoff.ms": "100",
    }
    cluster = LocalCluster(
        root / "cluster",
        Topology(controllers=1, storage_nodes=2, group_coordinators=0, gateways=0),
        config_overrides={
            WITH: {"static.topics": topic, "log.cleaner.enable": "true", **cleaner},
            WITHOUT: {"static.topics": topic, "log.cleaner.enable": "false", **cleaner},
        },
        log_level="WARNING",
        startup_timeout_ms=STARTUP_TIMEOUT_MS,
        stop_timeout_ms=STOP_TIMEOUT_MS,
    )
    cluster.start()  # stops what it started if it fails
    return cluster


def produce_round(bootstrap: str, records: int, keys: list[bytes]) -> float:
    """records/s of one producer sending ``records`` keyed records to TOPIC."""
    value = make_payload(RECORD_BYTES)
    with Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS}) as producer:
        producer.send(TOPIC, value, key=b"warm-up").result(SEND_TIMEOUT_S)
        began = time.perf_counter()
        last = None
        for n in range(records):
            last = producer.send(TOPIC, value, key=keys[n % len(keys)])
        producer.flush(SEND_TIMEOUT_S)
        assert last is not None
        last.result(SEND_TIMEOUT_S)
        return records / (time.perf_counter() - began)


def _partition_bytes(cluster: LocalCluster, node: str) -> int:
    return partition_log_bytes(cluster.spec(node).directory / "data" / f"{TOPIC}-0")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dirty-mib", type=int, default=256, help="dirty log per clean round")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    parser.add_argument("--dedupe-mib", type=int, default=64, help="log.cleaner.dedupe.buffer.size")
    parser.add_argument("--records", type=int, default=300_000, help="records per produce round")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument("--quick", action="store_true", help="a smoke run (under 2 minutes)")
    parser.add_argument("--dir", type=Path, default=None, help="where the logs and nodes live")
    args = parser.parse_args(argv)
    if args.quick:
        args.dirty_mib, args.records, args.rounds = 24, 60_000, 2
    if min(args.dirty_mib, args.keys, args.dedupe_mib, args.records, args.rounds) < 1:
        parser.error("every size and count must be >= 1")

    keys = _keys(args.keys)
    dedupe_bytes = args.dedupe_mib * MIB
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-", dir=args.dir))
    load_at_start = os.getloadavg()
    began = time.perf_counter()
    cleaned: list[dict[str, Any]] = []
    with_cleaner: list[float] = []
    without_cleaner: list[float] = []
    try:
        for _ in range(args.rounds):
            cleaned.append(clean_round(root, args.dirty_mib * MIB, keys, dedupe_bytes))
        cluster = start_nodes(root, dedupe_bytes)
        try:
            # Interleaved, alternating which node goes first.
            for n in range(args.rounds):
                order = [(WITH, with_cleaner), (WITHOUT, without_cleaner)]
                for node, figures in order if n % 2 == 0 else order[::-1]:
                    figures.append(produce_round(cluster.grpc_address(node), args.records, keys))
            after = {node: _partition_bytes(cluster, node) for node in (WITH, WITHOUT)}
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    clean_mbps = statistics.median(r["mb_per_s"] for r in cleaned)
    with_rps = statistics.median(with_cleaner)
    without_rps = statistics.median(without_cleaner)
    report = {
        "benchmark": "cleaner",
        "machine": machine_facts(load_at_start),
        "scenario": {
            "record_bytes": RECORD_BYTES,
            "keys": args.keys,
            "dedupe_buffer_mib": args.dedupe_mib,
            "segment_bytes": SEGMENT_BYTES,
            "dirty_mib_per_round": args.dirty_mib,
            "records_per_produce_round": args.records,
            "rounds": args.rounds,
            "producer_settings": PRODUCER_SETTINGS,
        },
        "clean": {
            "mb_per_s": round(clean_mbps, 1),
            "of_copy": statistics.median(r["of_copy"] for r in cleaned),
            "rounds": cleaned,
        },
        "produce": {
            "with_cleaner_records_per_s": round(with_rps),
            "without_cleaner_records_per_s": round(without_rps),
            "with_cleaner_of_without": round(with_rps / without_rps, 3),
            "partition_bytes_after": after,
            "rounds": {
                "with_cleaner": [round(r) for r in with_cleaner],
                "without_cleaner": [round(r) for r in without_cleaner],
            },
        },
        "seconds": round(time.perf_counter() - began, 1),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
