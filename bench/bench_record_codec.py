"""Benchmark of the RecordBatch v2 codec; prints one JSON document on stdout.

Measures what the servers do per append (header parse + CRC-32C validation, offset/epoch
patching) in MB/s and batches/s, and what clients do (build and decode) per codec, with the
seed benchmark's 100-byte records. The machine's own CRC-32C ceiling over one large buffer is
measured in the same run, so validation reads as a fraction of it.

    python bench/bench_record_codec.py [--seconds 0.5] [--record-bytes 100]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable

import crc32c

from brook.record import (
    Compression,
    assign_offsets,
    build_batch,
    iter_records,
    scan_batches,
    set_partition_leader_epoch,
    validate_batches,
)

# Kafka's producer default batch.size, and a large batch near max.message.bytes.
BATCH_BYTES_TARGETS = (16 * 1024, 1024 * 1024)
# Each measurement works on this much log data, so per-call overhead and cache effects are
# those of a realistic append, not of one tiny buffer.
LOG_BYTES = 8 * 1024 * 1024
# Same size as the benchmarked log, so the ceiling and the measurement see the same caches.
CEILING_BUFFER_BYTES = LOG_BYTES
MB = 1_000_000


def _records(
    record_bytes: int, count: int, rng: random.Random
) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    # Half random, half repeated text: compressible the way real payloads (JSON, logs) are,
    # so the codecs do real work instead of collapsing runs of one byte.
    half = record_bytes // 2
    template = (b"event=click page=/products/item user_agent=Mozilla " * 4)[: record_bytes - half]
    base_ms = 1_700_000_000_000
    return [
        (base_ms + i, None, rng.randbytes(half).hex().encode()[:half] + template, [])
        for i in range(count)
    ]


def _timed(operation: Callable[[], object], seconds: float) -> tuple[int, float]:
    """Run ``operation`` repeatedly for at least ``seconds``; return (runs, elapsed)."""
    operation()  # warm-up: imports, allocator, branch predictors
    runs = 0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds:
        operation()
        runs += 1
        elapsed = time.perf_counter() - start
    return runs, elapsed


def _crc_ceiling(seconds: float) -> dict[str, float]:
    buffer = os.urandom(CEILING_BUFFER_BYTES)
    runs, elapsed = _timed(lambda: crc32c.crc32c(buffer), seconds)
    return {"crc32c_mb_per_s": round(runs * len(buffer) / elapsed / MB, 1)}


def _server_path(batch: bytes, seconds: float) -> dict[str, object]:
    copies = max(1, LOG_BYTES // len(batch))
    log = batch * copies
    log_mb = len(log) / MB

    def rate(runs: int, elapsed: float) -> dict[str, float]:
        return {
            "mb_per_s": round(runs * log_mb / elapsed, 1),
            "batches_per_s": round(runs * copies / elapsed),
        }

    max_batch_bytes = len(batch)
    validate = rate(
        *_timed(lambda: validate_batches(log, max_batch_bytes=max_batch_bytes), seconds)
    )
    scan = rate(*_timed(lambda: sum(1 for _ in scan_batches(log)), seconds))

    writable = bytearray(log)
    positions = [pos for pos, _ in scan_batches(writable)]

    def patch() -> None:
        for pos in positions:
            assign_offsets(writable, pos, 1_000_000 + pos)
            set_partition_leader_epoch(writable, pos, 7)

    patch_rate = rate(*_timed(patch, seconds))
    return {
        "batch_bytes": len(batch),
        "batches_in_log": copies,
        "validate_header_and_crc": validate,
        "scan_headers_only": {"batches_per_s": scan["batches_per_s"]},
        "patch_offset_and_epoch": {"batches_per_s": patch_rate["batches_per_s"]},
    }


def _decode_all(batch: bytes) -> int:
    return sum(1 for _ in iter_records(batch))


def _client_path(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    seconds: float,
) -> dict[str, object]:
    uncompressed_mb = sum(len(value or b"") for _, _, value, _ in records) / MB
    uncompressed_batch_bytes = len(build_batch(records))
    results: dict[str, object] = {}
    for codec in Compression:
        runs, elapsed = _timed(functools.partial(build_batch, records, compression=codec), seconds)
        batch = build_batch(records, compression=codec)
        decode_runs, decode_elapsed = _timed(functools.partial(_decode_all, batch), seconds)
        results[codec.name.lower()] = {
            "batch_bytes": len(batch),
            "compression_ratio": round(uncompressed_batch_bytes / len(batch), 2),
            "build_records_per_s": round(runs * len(records) / elapsed),
            "build_value_mb_per_s": round(runs * uncompressed_mb / elapsed, 1),
            "decode_records_per_s": round(decode_runs * len(records) / decode_elapsed),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=0.5, help="minimum time per measurement")
    parser.add_argument("--record-bytes", type=int, default=100, help="value size of each record")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.record_bytes <= 0:
        parser.error("--seconds and --record-bytes must be positive")

    rng = random.Random(42)
    report: dict[str, object] = {
        "benchmark": "record_codec",
        "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), **_crc_ceiling(args.seconds)},
        "record_bytes": args.record_bytes,
        "server_path": [],
        "client_path": {},
    }
    server_path: list[object] = []
    for target in BATCH_BYTES_TARGETS:
        count = max(1, target // (args.record_bytes + 10))
        records = _records(args.record_bytes, count, rng)
        server_path.append(_server_path(build_batch(records), args.seconds))
        if target == BATCH_BYTES_TARGETS[0]:
            report["client_path"] = {
                "records_per_batch": count,
                **_client_path(records, args.seconds),
            }
    report["server_path"] = server_path
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
