"""Benchmark of the controller quorum: metadata writes per second, and failover time.

Starts three controller processes on loopback (the local launcher, in a temporary directory)
and a fake storage node (a registration and one heartbeat), then measures:

- writes: ``--writers`` threads, each with its own admin client, create one-partition topics
  (one CreateTopics request per topic: two metadata records, one Raft command) for
  ``--seconds``. Reported: acknowledged creations per second and their latency percentiles.
  Every creation also waits for the leader's checks and one commit in the quorum.
- failover: while one thread keeps creating topics, the Raft leader is killed with SIGKILL;
  the time from the kill to the acknowledgement of the first creation sent after it,
  ``--failovers`` times (the killed controller is restarted and the quorum converges in
  between).

Prints one JSON document, with the machine's core count: every process shares those cores.

Run: ``python bench/bench_controller.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from brook.client.admin import Admin, NewTopic
from brook.controller_probe import wait_for_convergence, wait_for_leader
from brook.launcher import LocalCluster, Role, Topology
from brook.v1 import common_pb2, controller_pb2, controller_pb2_grpc

LEADER_TIMEOUT_S = 30
CONVERGENCE_TIMEOUT_S = 30
FAILOVER_GIVE_UP_S = 30


def _register_node(leader_address: str) -> None:
    import grpc

    with grpc.insecure_channel(leader_address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)  # type: ignore[no-untyped-call]
        registration = stub.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                node_id=1,
                incarnation_id="bench",
                role=common_pb2.NODE_ROLE_STORAGE_NODE,
                endpoints=[common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=19001)],
            ),
            timeout=10,
        )
        assert registration.error_code == 0, registration
        heartbeat = stub.BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(
                node_id=1, broker_epoch=registration.broker_epoch, current_metadata_offset=2**62
            ),
            timeout=10,
        )
        assert heartbeat.error_code == 0 and not heartbeat.is_fenced, heartbeat


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure_writes(bootstrap: str, writers: int, seconds: float, prefix: str) -> dict[str, Any]:
    latencies: list[list[float]] = [[] for _ in range(writers)]
    failures = [0] * writers
    stop_at = time.monotonic() + seconds

    def write(index: int) -> None:
        with Admin(bootstrap, default_api_timeout_ms=30_000) as admin:
            sequence = 0
            while time.monotonic() < stop_at:
                name = f"{prefix}{index}-{sequence}"
                sequence += 1
                started = time.monotonic()
                if admin.create_topics([NewTopic(name, 1, 1)])[name] is None:
                    latencies[index].append((time.monotonic() - started) * 1000)
                else:
                    failures[index] += 1

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    all_latencies = [value for per_writer in latencies for value in per_writer]
    return {
        "writers": writers,
        "seconds": round(elapsed, 2),
        "topics_created": len(all_latencies),
        "failed": sum(failures),
        "writes_per_s": round(len(all_latencies) / elapsed, 1),
        "records_per_s": round(2 * len(all_latencies) / elapsed, 1),
        "latency_ms": {
            "p50": round(_percentile(all_latencies, 0.5), 2),
            "p99": round(_percentile(all_latencies, 0.99), 2),
            "max": round(max(all_latencies), 2),
        },
    }


def measure_failover(cluster: LocalCluster, bootstrap: str, round_index: int) -> float:
    addresses = [cluster.grpc_address(n) for n in cluster.names(Role.CONTROLLER)]
    leader = wait_for_leader(addresses, LEADER_TIMEOUT_S)
    victim = next(
        n for n in cluster.names(Role.CONTROLLER) if cluster.spec(n).node_id == leader.leader_id
    )
    killed_at: list[float] = []
    first_commit: list[float] = []
    done = threading.Event()

    def write() -> None:
        with Admin(
            bootstrap, request_timeout_ms=500, default_api_timeout_ms=30_000, retry_backoff_ms=10
        ) as admin:
            sequence = 0
            while not done.is_set():
                name = f"f{round_index}-{sequence}"
                sequence += 1
                started = time.monotonic()
                created = admin.create_topics([NewTopic(name, 1, 1)])[name] is None
                # Only a creation sent after the kill proves the new leader commits: one in
                # flight at the kill may have been committed by the old one.
                if created and killed_at and started > killed_at[0]:
                    first_commit.append(time.monotonic())
                    return

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.5)
    cluster.kill(victim, signal.SIGKILL)
    killed_at.append(time.monotonic())
    writer.join(FAILOVER_GIVE_UP_S)
    done.set()
    writer.join()
    cluster.wait(victim, timeout_ms=10_000)
    cluster.start(victim)
    wait_for_convergence(addresses, CONVERGENCE_TIMEOUT_S)
    if not first_commit:
        raise RuntimeError(f"no write committed within {FAILOVER_GIVE_UP_S} s of the kill")
    return (first_commit[0] - killed_at[0]) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 s of writes, 1 failover")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.failovers = 2.0, 1
    base = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    cluster = LocalCluster(
        base,
        Topology(controllers=3, storage_nodes=0, group_coordinators=0, gateways=0),
        config_overrides={"controller": {"broker.session.timeout.ms": "600000"}},
        log_level="WARNING",
    )
    try:
        cluster.start()
        addresses = [cluster.grpc_address(n) for n in cluster.names(Role.CONTROLLER)]
        bootstrap = ",".join(addresses)
        leader = wait_for_leader(addresses, LEADER_TIMEOUT_S)
        leader_address = next(
            cluster.grpc_address(n)
            for n in cluster.names(Role.CONTROLLER)
            if cluster.spec(n).node_id == leader.leader_id
        )
        _register_node(leader_address)
        sequential = measure_writes(bootstrap, 1, args.seconds / 2, "s")
        concurrent = measure_writes(bootstrap, args.writers, args.seconds, "c")
        failovers_ms = [measure_failover(cluster, bootstrap, i) for i in range(args.failovers)]
        states = wait_for_convergence(addresses, CONVERGENCE_TIMEOUT_S)
        result = {
            "benchmark": "controller",
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "controllers": 3,
            "metadata_writes_sequential": sequential,
            "metadata_writes_concurrent": concurrent,
            "failover_ms": {
                "runs": [round(value, 1) for value in failovers_ms],
                "median": round(statistics.median(failovers_ms), 1),
            },
            "replicas_equal_after": len({s.digest for s in states}) == 1,
            "final_metadata_offset": states[0].offset,
        }
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
