"""Benchmark of the producer's per-record path: send() into the accumulator, no network.

Measures records/s of ``RecordAccumulator.append`` (what ``Producer.send`` runs in the
caller's thread: encode the record into its partition's open batch and hand back a future)
and of the whole client-side CPU per record, which adds what the sender does per batch
(drain, build the header and CRC, compress) and settling the futures. No gRPC: the figures
are the producer's ceiling before any network or server cost. The codec's general-purpose
``BatchBuilder.append`` is measured in the same run as the reference point.

Scenarios use the seed benchmark's 100-byte values on 6 partitions: keyless (sticky
partitioner), keyed with keys that repeat (murmur2 memo hits), keyed with unique keys (every
record pays murmur2), with two headers, and lz4-compressed.

    python bench/bench_sdk_encode.py [--records 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from types import MappingProxyType

from brook.client.accumulator import RecordAccumulator
from brook.client.metadata import ClusterView, PartitionInfo, TopicInfo
from brook.client.runtime import Notifier, Wakeup
from brook.record import BatchBuilder, Compression

TOPIC = "bench"
PARTITIONS = 6
VALUE_BYTES = 100
BATCH_BYTES = 16384  # Kafka's default batch.size
MAX_REQUEST_BYTES = 1024 * 1024
# Drain (as the sender would) after this many sends, so batches never pile up in memory.
DRAIN_EVERY_RECORDS = 2000
UNIQUE_KEYS = 1_000_000  # more than the murmur2 memo holds: every key is a miss
REPEATING_KEYS = 1000


Headers = list[tuple[str, bytes | None]]


class _StaticMetadata:
    def __init__(self, cluster: ClusterView) -> None:
        self.cluster = cluster


def _cluster() -> ClusterView:
    partitions = tuple(PartitionInfo(p, 1, 0) for p in range(PARTITIONS))
    topic = TopicInfo(TOPIC, partitions, tuple(range(PARTITIONS)))
    return ClusterView(
        MappingProxyType({1: "127.0.0.1:9101"}),
        MappingProxyType({TOPIC: topic}),
        MappingProxyType({}),
    )


def _accumulator(compression: Compression, loop: asyncio.AbstractEventLoop) -> RecordAccumulator:
    return RecordAccumulator(
        metadata=_StaticMetadata(_cluster()),
        notifier=Notifier(),
        wakeup=Wakeup(loop),
        batch_size=BATCH_BYTES,
        buffer_memory=1 << 40,
        linger_ms=5,
        max_request_size=MAX_REQUEST_BYTES,
        delivery_timeout_ms=120_000,
        compression=compression,
        partitioner_ignore_keys=False,
    )


def _drain(accumulator: RecordAccumulator, cluster: ClusterView) -> int:
    """What the sender does with ready batches, minus the network; returns batches settled."""
    settled = 0
    while True:
        requests, _, _ = accumulator.drain(cluster, time.monotonic() + 3600, lambda node: 1 << 30)
        if not requests:
            return settled
        for request in requests:
            for queue, batches in request.entries:
                for batch in batches:
                    batch.seal(accumulator.compression)
                accumulator.complete(queue, batches, 0, -1)
                settled += len(batches)


def _run(
    records: int,
    compression: Compression,
    key_of: Callable[[int], bytes | None],
    headers: Headers | None,
) -> dict[str, float]:
    loop = asyncio.new_event_loop()
    try:
        accumulator = _accumulator(compression, loop)
        cluster = _cluster()
        value = os.urandom(VALUE_BYTES // 2).hex().encode()
        keys = [key_of(i) for i in range(records)]
        append = accumulator.append
        send_s = 0.0
        drain_s = 0.0
        for start in range(0, records, DRAIN_EVERY_RECORDS):
            chunk = keys[start : start + DRAIN_EVERY_RECORDS]
            began = time.perf_counter()
            for key in chunk:
                append(TOPIC, value, key, headers, None, None)
            send_s += time.perf_counter() - began
            began = time.perf_counter()
            _drain(accumulator, cluster)
            drain_s += time.perf_counter() - began
        return {
            "send_records_per_s": records / send_s,
            "client_records_per_s": records / (send_s + drain_s),
        }
    finally:
        loop.close()


def _batch_builder(records: int) -> float:
    value = os.urandom(VALUE_BYTES // 2).hex().encode()
    builder = BatchBuilder()
    began = time.perf_counter()
    for _ in range(records):
        builder.append(None, None, value)
        if builder.size_estimate >= BATCH_BYTES:
            builder.build()
            builder = BatchBuilder()
    return records / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3, help="median of this many runs")
    args = parser.parse_args(argv)
    scenarios: dict[str, tuple[Compression, Callable[[int], bytes | None], Headers | None]] = {
        "keyless": (Compression.NONE, lambda i: None, None),
        "keyed_repeating": (
            Compression.NONE,
            lambda i: b"user-%06d" % (i % REPEATING_KEYS),
            None,
        ),
        "keyed_unique": (Compression.NONE, lambda i: b"user-%08d" % (i % UNIQUE_KEYS), None),
        "keyless_two_headers": (
            Compression.NONE,
            lambda i: None,
            [("trace-id", b"0af7651916cd43dd"), ("source", b"bench")],
        ),
        "keyless_lz4": (Compression.LZ4, lambda i: None, None),
    }
    # Rounds interleave the scenarios, so that a burst of load from elsewhere on the machine
    # does not land on one scenario alone; each figure is the median of its rounds.
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in scenarios}
    baselines: list[float] = []
    for _ in range(args.rounds):
        for name, (compression, key_of, headers) in scenarios.items():
            runs[name].append(_run(args.records, compression, key_of, headers))
        baselines.append(_batch_builder(args.records))
    results = {
        name: {
            metric: round(statistics.median(run[metric] for run in scenario_runs))
            for metric in scenario_runs[0]
        }
        for name, scenario_runs in runs.items()
    }
    baseline = statistics.median(baselines)
    report = {
        "benchmark": "sdk_encode",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "records": args.records,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "batch_size": BATCH_BYTES,
        "scenarios": results,
        "reference": {"batch_builder_append_records_per_s": round(baseline)},
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
