"""Where the storage node should run log appends and reads: on the event loop, or on a thread.

The brief says never to block the event loop with disk or CPU work that can be moved off it,
but a thread hop (``run_in_executor`` and back) has a fixed cost of its own. This measures
both for the work the hot path does, so the choice in brook_storage_node/partition.py rests
on figures from this machine:

- ``append``: ``PartitionLog.append`` of one batch of 100-byte records (CRC, copy, offset
  patch, write to the page cache, index upkeep) called directly on the loop, against the same
  call through a one-thread executor, awaited one at a time (latency of a produce).
- ``read``: ``PartitionLog.read`` of one batch's worth of bytes at a random offset, same two
  ways (latency of a fetch).
- ``hop``: the bare cost of a round trip through the executor with no work.

Prints one JSON document (microseconds per operation, median of ``--rounds`` rounds).
Run: ``python bench/bench_storage_dispatch.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from brook_storage_node.log import LogConfig, PartitionLog

from brook.record import BATCH_OVERHEAD, build_batch

KIB = 1024
MIB = 1024 * KIB
RECORD_VALUE_BYTES = 100
BATCH_SIZES_BYTES = (1 * KIB, 16 * KIB, 256 * KIB, 1 * MIB)
LOG_CONFIG = LogConfig(max_message_bytes=2 * MIB)


def make_batch(target_bytes: int) -> bytes:
    payload = os.urandom(RECORD_VALUE_BYTES)
    per_record = RECORD_VALUE_BYTES + 8
    count = max((target_bytes - BATCH_OVERHEAD) // per_record, 1)
    return build_batch([(1_700_000_000_000 + i, None, payload, ()) for i in range(count)])


async def per_op_us(
    op: Callable[[], Any], operations: int, *, hop: ThreadPoolExecutor | None
) -> float:
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    for _ in range(operations):
        if hop is None:
            op()
        else:
            await loop.run_in_executor(hop, op)
    return (time.perf_counter() - start) / operations * 1e6


async def bench_size(
    root: Path, size: int, pool: ThreadPoolExecutor, operations: int, rounds: int
) -> dict[str, Any]:
    batch = make_batch(size)
    log = PartitionLog.open(root / f"bench-{size}", LOG_CONFIG)
    try:
        count = max(operations * 16 * KIB // size, 20)

        def append() -> None:
            log.append(batch, leader_epoch=0)

        inline = [await per_op_us(append, count, hop=None) for _ in range(rounds)]
        hopped = [await per_op_us(append, count, hop=pool) for _ in range(rounds)]
        end = log.log_end_offset

        def read() -> None:
            log.read(random.randrange(end), len(batch), max_offset=end)

        read_inline = [await per_op_us(read, count, hop=None) for _ in range(rounds)]
        read_hopped = [await per_op_us(read, count, hop=pool) for _ in range(rounds)]
    finally:
        log.close()
    return {
        "batch_bytes": len(batch),
        "append_inline_us": round(statistics.median(inline), 1),
        "append_thread_us": round(statistics.median(hopped), 1),
        "read_inline_us": round(statistics.median(read_inline), 1),
        "read_thread_us": round(statistics.median(read_hopped), 1),
    }


async def bench(root: Path, operations: int, rounds: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with ThreadPoolExecutor(1) as pool:
        hops = [await per_op_us(lambda: None, operations, hop=pool) for _ in range(rounds)]
        results["hop_us"] = round(statistics.median(hops), 1)
        for size in BATCH_SIZES_BYTES:
            results[f"{size // KIB}KiB"] = await bench_size(root, size, pool, operations, rounds)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1000, help="16 KiB-equivalents per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few operations")
    args = parser.parse_args(argv)
    operations, rounds = (100, 1) if args.quick else (args.operations, args.rounds)
    with tempfile.TemporaryDirectory(prefix="brook-bench-dispatch-") as tmp:
        figures = asyncio.run(bench(Path(tmp), operations, rounds))
    report = {
        "benchmark": "storage_dispatch",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "unit": "microseconds per operation (median of rounds)",
        "figures": figures,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
