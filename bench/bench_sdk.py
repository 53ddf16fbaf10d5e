"""The seed benchmark's single-producer and single-consumer scenarios through the Python SDK,
against a real storage node process; prints one JSON document.

Scenarios (seed 003, "2 million writes per second on three cheap machines"):

- produce: 1 producer thread, a topic of 6 partitions, no replication, 100-byte records,
  acks=1, batch.size=8196 and buffer.memory=64 MiB as in the seed's ProducerPerformance
  command, without idempotence as the seed's 2014 Kafka (and as acks=1 requires; a node
  serving ``static.topics`` grants no producer ids either: bench_replication.py measures the
  idempotent producer); records/s and MB/s (2^20 bytes of values) from the first send to the last
  acknowledgement (``brook.tools.perf.producer_perf``, what ``brook producer-perf-test`` runs).
- consume: 1 consumer reading those records from the beginning of the 6 partitions
  (``brook.tools.perf.consumer_perf``, what ``brook consumer-perf-test`` runs).
- end-to-end latency: one record at a time, from ``send`` to the moment ``poll`` returns it
  on a consumer waiting at the end of a 1-partition topic (the seed's TestEndToEndLatency).

The cluster is what ``brook.launcher`` starts: 1 controller and 1 storage node that serves the
topics from ``static.topics``. Ceilings measured in the same run, so that each figure reads as a
ratio on this machine: sequential write() of the same number of bytes to a file next to the
node's data (``bench_log.plain_write``, the log benchmark's raw-disk figure, page cache, no
fsync, as the node itself), and TCP throughput over loopback between two processes.

Each figure is the median of ``--rounds`` runs (the machine is shared).

    python bench/bench_sdk.py [--records 500000] [--rounds 3] [--e2e-records 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_log import plain_write, settle
from targets import target

from brook.client import Consumer, Producer, TopicPartition
from brook.launcher import LocalCluster, Topology
from brook.tools.perf import (
    MB,
    consumer_perf,
    make_payload,
    producer_perf,
    summarize_latencies,
)

NODE = "storage-node-1"
PARTITIONS = 6
RECORD_BYTES = 100
# The seed's producer command: acks=1 buffer.memory=67108864 batch.size=8196.
PRODUCER_SETTINGS = {
    "acks": "1",
    "batch.size": 8196,
    "buffer.memory": 67108864,
    "enable.idempotence": "false",
}
SEED = {
    "produce_records_per_s": 821_557,
    "produce_mb_per_s": 78.3,
    "consume_records_per_s": 940_521,
    "consume_mb_per_s": 89.7,
    "end_to_end_p50_ms": 2.0,
    "end_to_end_p99_ms": 3.0,
    "end_to_end_p99_9_ms": 14.0,
}
STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
IDLE_TIMEOUT_S = 30.0
E2E_RECORD_TIMEOUT_S = 10.0
DISK_CHUNK_BYTES = 1 * MB
DISK_BYTES_MIN = 64 * MB
LOOPBACK_CHUNK_BYTES = 1 * MB
LOOPBACK_SECONDS = 0.5
CEILING_ROUNDS = 3
LOOPBACK_SINK_TIMEOUT_S = 30.0
# Reads everything sent to the port it prints, then prints the byte count.
_LOOPBACK_SINK = """
import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
server.settimeout(float(sys.argv[1]))
conn, _ = server.accept()
buffer = bytearray(1 << 20)
total = 0
while (n := conn.recv_into(buffer)):
    total += n
print(total, flush=True)
"""


def disk_ceiling(directory: Path, total_bytes: int) -> dict[str, float]:
    """Sequential write() of ``total_bytes`` in 1 MiB chunks (no fsync), as bench_log does;
    best of CEILING_ROUNDS (noise on a shared machine only slows a run)."""
    path = directory / "disk-ceiling"
    chunk = os.urandom(DISK_CHUNK_BYTES)
    count = max(total_bytes // len(chunk), 1)
    best_s = float("inf")
    try:
        for _ in range(CEILING_ROUNDS):
            settle()
            began = time.perf_counter()
            plain_write(path, chunk, count)
            best_s = min(best_s, time.perf_counter() - began)
    finally:
        path.unlink(missing_ok=True)
    return {"bytes": count * len(chunk), "mb_per_s": round(count * len(chunk) / MB / best_s, 1)}


def loopback_ceiling(seconds: float) -> dict[str, float]:
    """Best of CEILING_ROUNDS runs of ``loopback_once``."""
    runs = [loopback_once(seconds) for _ in range(CEILING_ROUNDS)]
    return max(runs, key=lambda run: run["mb_per_s"])


def loopback_once(seconds: float) -> dict[str, float]:
    """TCP over 127.0.0.1 into another process that only reads: what one connection between
    two processes on this machine can carry at most."""
    sink = subprocess.Popen(
        [sys.executable, "-c", _LOOPBACK_SINK, str(LOOPBACK_SINK_TIMEOUT_S)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        chunk = b"\0" * LOOPBACK_CHUNK_BYTES
        sent = 0
        with socket.create_connection(("127.0.0.1", port), timeout=LOOPBACK_SINK_TIMEOUT_S) as conn:
            began = time.perf_counter()
            while time.perf_counter() - began < seconds:
                conn.sendall(chunk)
                sent += len(chunk)
            conn.shutdown(socket.SHUT_WR)
            received = int(sink.stdout.readline())
            elapsed = time.perf_counter() - began
        assert received == sent, (received, sent)
        sink.wait(LOOPBACK_SINK_TIMEOUT_S)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return {"bytes": sent, "mb_per_s": round(sent / MB / elapsed, 1)}


def start_cluster(root: Path, topics: list[str]) -> LocalCluster:
    cluster = LocalCluster(
        root / "cluster",
        Topology(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0),
        config_overrides={NODE: {"static.topics": ",".join(topics)}},
        log_level="WARNING",
        startup_timeout_ms=STARTUP_TIMEOUT_MS,
        stop_timeout_ms=STOP_TIMEOUT_MS,
    )
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def produce_round(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    with Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS}) as producer:
        # Metadata for the topic and the connection to the node, outside the timing.
        producer.send("bench-warmup", b"warm-up").result(IDLE_TIMEOUT_S)
        result = producer_perf(
            producer, topic, records, RECORD_BYTES, -1, payload=make_payload(RECORD_BYTES)
        )
    if result.first_error is not None:
        raise RuntimeError(f"produce failed: {result.first_error}")
    return result.as_dict()


def consume_round(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        result = consumer_perf(consumer, partitions, records, IDLE_TIMEOUT_S)
    if result.records != records:
        raise RuntimeError(f"consumed {result.records} of {records} records")
    return result.as_dict()


def end_to_end_latency(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    """Send one record, wait until a consumer at the end of the topic gets it; repeat."""
    tp = TopicPartition(topic, 0)
    latencies_ms: list[float] = []
    with (
        Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0}) as producer,
        Consumer({"bootstrap.servers": bootstrap}) as consumer,
    ):
        consumer.assign([tp])
        consumer.seek_to_end([tp])
        consumer.position(tp)
        value = make_payload(RECORD_BYTES)
        for _ in range(records):
            began = time.perf_counter()
            producer.send(topic, value, partition=0)
            deadline = began + E2E_RECORD_TIMEOUT_S
            while not consumer.poll(max(deadline - time.perf_counter(), 0.0)):
                if time.perf_counter() >= deadline:
                    raise RuntimeError(f"a record did not arrive within {E2E_RECORD_TIMEOUT_S} s")
            latencies_ms.append((time.perf_counter() - began) * 1000)
    return summarize_latencies(latencies_ms).as_dict()


def _median_of(rounds: list[dict[str, Any]], key: str) -> float:
    return round(float(statistics.median(run[key] for run in rounds)), 1)


def _ratios(mb_per_s: float, records_per_s: float, ceilings: dict[str, Any], seed: str) -> Any:
    return {
        "of_seed_records_per_s": round(records_per_s / SEED[f"{seed}_records_per_s"], 3),
        "of_disk_write_mb_per_s": round(mb_per_s / ceilings["disk_write"]["mb_per_s"], 4),
        "of_loopback_mb_per_s": round(mb_per_s / ceilings["loopback_tcp"]["mb_per_s"], 4),
    }


def _timed(step: Callable[[], Any]) -> tuple[Any, float]:
    began = time.perf_counter()
    result = step()
    return result, round(time.perf_counter() - began, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=500_000, help="records per round")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument("--e2e-records", type=int, default=1000, help="0 skips the latency test")
    parser.add_argument("--dir", type=Path, default=None, help="where the cluster lives")
    args = parser.parse_args(argv)
    if args.records < 1 or args.rounds < 1 or args.e2e_records < 0:
        parser.error("--records and --rounds must be >= 1, --e2e-records >= 0")

    root = Path(tempfile.mkdtemp(prefix="bench-sdk-", dir=args.dir))
    topics = [f"bench-{n}:{PARTITIONS}" for n in range(args.rounds)]
    topics += ["bench-warmup:1", "bench-e2e:1"]
    began = time.perf_counter()
    try:
        total_bytes = args.records * RECORD_BYTES
        ceilings = {
            "disk_write": disk_ceiling(root, max(total_bytes, DISK_BYTES_MIN)),
            "loopback_tcp": loopback_ceiling(LOOPBACK_SECONDS),
        }
        cluster, startup_s = _timed(lambda: start_cluster(root, topics))
        try:
            bootstrap = cluster.grpc_address(NODE)
            produced: list[dict[str, Any]] = []
            consumed: list[dict[str, Any]] = []
            # Interleaved, so that a burst of load from elsewhere does not land on one
            # scenario alone.
            for n in range(args.rounds):
                produced.append(produce_round(bootstrap, f"bench-{n}", args.records))
                consumed.append(consume_round(bootstrap, f"bench-{n}", args.records))
            latency = (
                end_to_end_latency(bootstrap, "bench-e2e", args.e2e_records)
                if args.e2e_records
                else None
            )
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    produce_rps = _median_of(produced, "records_per_s")
    produce_mbps = _median_of(produced, "mb_per_s")
    consume_rps = _median_of(consumed, "records_per_s")
    consume_mbps = _median_of(consumed, "mb_per_s")
    report = {
        "benchmark": "sdk",
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "scenario": {
            "partitions": PARTITIONS,
            "replication_factor": 1,
            "record_bytes": RECORD_BYTES,
            "records_per_round": args.records,
            "rounds": args.rounds,
            "producer_settings": PRODUCER_SETTINGS,
        },
        "ceilings": ceilings,
        "produce": {
            "records_per_s": produce_rps,
            "mb_per_s": produce_mbps,
            **_ratios(produce_mbps, produce_rps, ceilings, "produce"),
            "rounds": produced,
        },
        "consume": {
            "records_per_s": consume_rps,
            "mb_per_s": consume_mbps,
            **_ratios(consume_mbps, consume_rps, ceilings, "consume"),
            "rounds": consumed,
        },
        "end_to_end_latency_ms": latency,
        "seed": SEED,
        "cluster_startup_s": startup_s,
        "total_s": round(time.perf_counter() - began, 1),
    }
    # Issue #19's targets: the seed's figures, on this machine with client and node sharing it.
    report["targets"] = {
        "produce_records_per_s_of_seed": target(
            produce_rps / SEED["produce_records_per_s"], 1.0, at_least=True
        ),
        "consume_records_per_s_of_seed": target(
            consume_rps / SEED["consume_records_per_s"], 1.0, at_least=True
        ),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
