"""The seed's replication scenarios through the SDK: RF 3 with acks=1 and with acks=all, beside
RF 1 measured in the same run (seed 003: 786,980 and 421,823 records/s against 821,557 — ratios
0.96 and 0.51 to RF 1).

The seed's 2014 Kafka had no idempotent producer, so the seed's scenarios run with
enable.idempotence=false; ``rf3_acks_all_idempotent`` is the same as ``rf3_acks_all`` with the
producer's default since Kafka 3.0 (idempotence on), compared with the same seed figure.

    python bench/bench_replication.py [--records 300000] [--rounds 3]

Starts, with brook.launcher, 1 controller and 3 storage nodes (topics created through the
controller, so replication is real: followers fetch over ReplicaFetch streams), creates one
6-partition topic per scenario and round (RF 3 topics with min.insync.replicas=2), and sends
100-byte records from one producer as fast as it goes (`brook.tools.perf.producer_perf`, what
`brook producer-perf-test` runs). Scenarios alternate within each round; the figures are medians
of the rounds, with the producer's CPU time (this process: the nodes are processes of their
own) per million records, which the shared machine's noise moves less. Prints one JSON
document. All three storage nodes share this machine's two cores
with the producer, so RF 3 costs CPU that the seed's three machines did not share.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from brook.client import Admin, NewTopic, Producer
from brook.launcher import LocalCluster, Role, Topology
from brook.tools.perf import make_payload, producer_perf

PARTITIONS = 6
RECORD_BYTES = 100
# The seed's ProducerPerformance settings (bench_sdk.py uses the same).
PRODUCER_SETTINGS = {"batch.size": 8196, "buffer.memory": 67108864}
SCENARIOS = {
    # name: (replication factor, acks, enable.idempotence)
    "rf1_acks1": (1, "1", False),
    "rf3_acks1": (3, "1", False),
    "rf3_acks_all": (3, "all", False),
    "rf3_acks_all_idempotent": (3, "all", True),
}
# The seed ran without idempotence: the idempotent scenario is held against the same figure.
SEED_RECORDS_PER_S = {
    "rf1_acks1": 821_557,
    "rf3_acks1": 786_980,
    "rf3_acks_all": 421_823,
    "rf3_acks_all_idempotent": 421_823,
}
STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
WARMUP_TIMEOUT_S = 30.0


def start_cluster(root: Path) -> LocalCluster:
    cluster = LocalCluster(
        root / "cluster",
        Topology(controllers=1, storage_nodes=3, group_coordinators=0, gateways=0),
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


def produce_round(
    bootstrap: str, topic: str, acks: str, idempotence: bool, records: int
) -> dict[str, Any]:
    settings = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": "true" if idempotence else "false",
        **PRODUCER_SETTINGS,
    }
    with Producer(settings) as producer:
        # Metadata and connections to every leader, outside the timing.
        for partition in range(PARTITIONS):
            producer.send(topic, b"warm-up", partition=partition).result(WARMUP_TIMEOUT_S)
        cpu_start_s = time.process_time()
        result = producer_perf(
            producer, topic, records, RECORD_BYTES, -1, payload=make_payload(RECORD_BYTES)
        )
        cpu_s = time.process_time() - cpu_start_s
    if result.first_error is not None:
        raise RuntimeError(f"produce to {topic} failed: {result.first_error}")
    return {**result.as_dict(), "client_cpu_s_per_million_records": cpu_s / records * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.records < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be at least 1")

    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in SCENARIOS}
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        cluster = start_cluster(Path(tmp))
        try:
            bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE, "GRPC")
            with Admin(cluster.controller_bootstrap_servers) as admin:
                for round_index in range(args.rounds):
                    for name, (replication_factor, acks, idempotence) in SCENARIOS.items():
                        topic = f"{name}-{round_index}"
                        configs = {"min.insync.replicas": "2"} if replication_factor > 1 else {}
                        errors = admin.create_topics(
                            [NewTopic(topic, PARTITIONS, replication_factor, configs=configs)]
                        )
                        if errors[topic] is not None:
                            raise RuntimeError(f"cannot create {topic}: {errors[topic]}")
                        rounds[name].append(
                            produce_round(bootstrap, topic, acks, idempotence, args.records)
                        )
        finally:
            cluster.stop()

    scenarios: dict[str, Any] = {}
    for name, results in rounds.items():
        records_per_s = statistics.median(r["records_per_s"] for r in results)
        mb_per_s = statistics.median(r["mb_per_s"] for r in results)
        cpu_s = statistics.median(r["client_cpu_s_per_million_records"] for r in results)
        scenarios[name] = {
            "replication_factor": SCENARIOS[name][0],
            "acks": SCENARIOS[name][1],
            "enable_idempotence": SCENARIOS[name][2],
            "records_per_s": round(records_per_s),
            "mb_per_s": round(mb_per_s, 1),
            "client_cpu_s_per_million_records": round(cpu_s, 2),
            "seed_records_per_s": SEED_RECORDS_PER_S[name],
            "of_seed": round(records_per_s / SEED_RECORDS_PER_S[name], 3),
            "rounds": results,
        }
    base = scenarios["rf1_acks1"]["records_per_s"]
    for name, figures in scenarios.items():
        figures["of_rf1"] = round(figures["records_per_s"] / base, 3) if base else None
        figures["seed_of_rf1"] = round(
            SEED_RECORDS_PER_S[name] / SEED_RECORDS_PER_S["rf1_acks1"], 3
        )
    json.dump(
        {
            "benchmark": "replication",
            "machine": {
                "cpus": len(os.sched_getaffinity(0)),
                "python": platform.python_version(),
            },
            "records": args.records,
            "record_bytes": RECORD_BYTES,
            "partitions": PARTITIONS,
            "scenarios": scenarios,
        },
        sys.stdout,
        indent=2,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
