"""Offset commit throughput and latency of one group: N concurrent committers against the group
coordinator, every commit written to __consumer_offsets with acks=all on RF 3.

    python bench/bench_offsets_commit.py [--committers 1,8,32] [--seconds 8] [--rounds 3]
        [--before /tmp/l_before/services/group-coordinator]

Starts, with brook.launcher, 1 controller, 3 storage nodes (__consumer_offsets with
replication factor 3) and 1 group coordinator. Each committer is a gRPC client of its own (its
own channel) committing one partition of a topic for ONE group, one commit at a time, as fast
as the answers come, for ``--seconds``: generation -1 and no member id, which the coordinator
accepts for a group without members. Every group hashes to one __consumer_offsets partition,
so all the commits queue on that partition's appends.

``--before DIR``: also measures the group coordinator imported from DIR (put first on the
coordinator's PYTHONPATH; e.g. the services/group-coordinator of a ``git worktree`` of an
older commit), on a cluster of its own; the variants alternate within each round, a fresh
cluster each, and the figures are medians of the rounds, with ratios of this tree's to the
other's. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role, Topology
from brook.v1 import group_pb2, group_pb2_grpc

GROUP = "bench-offsets-commit"
TOPIC = "bench-orders"
# One __consumer_offsets partition serves the group; a few keep the coordinator's start quick.
OFFSETS_PARTITIONS = 4
REPLICATION_FACTOR = 3
STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
RPC_TIMEOUT_S = 10.0
# The coordinator loads __consumer_offsets after it starts; commits are refused meanwhile.
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.2
WARMUP_S = 1.0
# Kafka's consumers commit a small metadata string or none.
METADATA = ""
THIS_TREE = "after"
OTHER_TREE = "before"


def start_cluster(root: Path, coordinator_path: Path | None) -> LocalCluster:
    env = {} if coordinator_path is None else {"PYTHONPATH": str(coordinator_path)}
    cluster = LocalCluster(
        root / "cluster",
        Topology(controllers=1, storage_nodes=3, group_coordinators=1, gateways=0),
        config_overrides={
            "controller": {
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "offsets.topic.replication.factor": str(REPLICATION_FACTOR),
            }
        },
        log_level="WARNING",
        startup_timeout_ms=STARTUP_TIMEOUT_MS,
        stop_timeout_ms=STOP_TIMEOUT_MS,
        env=env,
    )
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _request(partition: int, offset: int) -> group_pb2.CommitOffsetsRequest:
    return group_pb2.CommitOffsetsRequest(
        group_id=GROUP,
        generation_id=-1,
        member_id="",
        partitions=[
            group_pb2.OffsetCommitPartition(
                topic=TOPIC,
                partition=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                metadata=METADATA,
            )
        ],
    )


async def _commit(
    stub: group_pb2_grpc.GroupCoordinatorServiceStub, partition: int, offset: int
) -> ErrorCode:
    response = await stub.CommitOffsets(_request(partition, offset), timeout=RPC_TIMEOUT_S)
    return error_code(response.partitions[0].error_code)


async def wait_ready(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = group_pb2_grpc.GroupCoordinatorServiceStub(channel)  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                if await _commit(stub, 0, 0) is ErrorCode.NONE:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no commit accepted by {address} in {READY_TIMEOUT_S} s")
            await asyncio.sleep(READY_POLL_S)


async def measure(address: str, committers: int, seconds: float) -> dict[str, Any]:
    """``committers`` clients committing for WARMUP_S (not counted), then for ``seconds``."""
    latencies_s: list[float] = []
    errors: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    start = loop.time() + WARMUP_S
    end = start + seconds

    async def committer(partition: int) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = group_pb2_grpc.GroupCoordinatorServiceStub(channel)  # type: ignore[no-untyped-call]
            offset = 0
            while (sent_at := loop.time()) < end:
                offset += 1
                code = await _commit(stub, partition, offset)
                if sent_at < start:
                    continue
                if code is ErrorCode.NONE:
                    latencies_s.append(loop.time() - sent_at)
                else:
                    errors[code.name] = errors.get(code.name, 0) + 1

    await asyncio.gather(*(committer(p) for p in range(committers)))
    latencies_s.sort()
    count = len(latencies_s)
    return {
        "committers": committers,
        "commits": count,
        "commits_per_s": round(count / seconds, 1),
        "p50_ms": round(latencies_s[count // 2] * 1000, 2) if count else None,
        "p99_ms": round(latencies_s[min(count - 1, count * 99 // 100)] * 1000, 2)
        if count
        else None,
        "errors": errors,
    }


def run_variant(
    coordinator_path: Path | None, committer_counts: list[int], seconds: float
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-offsets-commit-") as tmp:
        cluster = start_cluster(Path(tmp), coordinator_path)
        try:
            address = cluster.grpc_address(cluster.names(Role.GROUP_COORDINATOR)[0])
            asyncio.run(wait_ready(address))
            return [asyncio.run(measure(address, n, seconds)) for n in committer_counts]
        finally:
            cluster.stop()


def _median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r[key] is not None]
    return round(statistics.median(values), 2) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--committers", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        committer_counts = [int(n) for n in args.committers.split(",")]
    except ValueError:
        parser.error(f"--committers must be a comma-separated list of integers: {args.committers}")
    if any(n < 1 for n in committer_counts) or args.seconds <= 0 or args.rounds < 1:
        parser.error("--committers, --seconds and --rounds must be positive")
    if args.before is not None and not (args.before / "brook_group_coordinator").is_dir():
        parser.error(f"--before {args.before} has no brook_group_coordinator package")

    variants: dict[str, Path | None] = {THIS_TREE: None}
    if args.before is not None:
        variants[OTHER_TREE] = args.before.resolve()
    # variant -> committers -> the rounds' results
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {
        name: {n: [] for n in committer_counts} for name in variants
    }
    for round_index in range(args.rounds):
        # Alternate which variant goes first, so neither always meets a warmer machine.
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for name in order:
            for result in run_variant(variants[name], committer_counts, args.seconds):
                rounds[name][result["committers"]].append(result)

    figures: dict[str, dict[str, Any]] = {}
    for name, by_count in rounds.items():
        figures[name] = {
            str(n): {
                "commits_per_s": _median(results, "commits_per_s"),
                "p50_ms": _median(results, "p50_ms"),
                "p99_ms": _median(results, "p99_ms"),
                "rounds": results,
            }
            for n, results in by_count.items()
        }
    document: dict[str, Any] = {
        "benchmark": "offsets_commit",
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "seconds": args.seconds,
        "rounds": args.rounds,
        "offsets_replication_factor": REPLICATION_FACTOR,
        "variants": {name: str(path) if path else "this tree" for name, path in variants.items()},
        "results": figures,
    }
    if args.before is not None:
        document["after_over_before"] = {
            str(n): {
                key: _ratio(figures[THIS_TREE][str(n)][key], figures[OTHER_TREE][str(n)][key])
                for key in ("commits_per_s", "p50_ms", "p99_ms")
            }
            for n in committer_counts
        }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _ratio(after: float | None, before: float | None) -> float | None:
    return round(after / before, 2) if after is not None and before else None


if __name__ == "__main__":
    sys.exit(main())
