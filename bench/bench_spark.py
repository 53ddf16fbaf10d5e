"""Spark ↔ Brook throughput on ``local[2]``, beside the SDK's own producer and consumer in the
same run (issue #17); prints one JSON document.

Scenarios, 100-byte values (no key) into 6-partition topics, each round interleaving them:

- sdk_produce: one SDK Producer with the settings the Spark writers use (idempotent,
  acks=all) sends ``--records`` records and flushes: the peer of the two writes.
- spark_write: a cached DataFrame of ``--records`` rows (``spark.range`` with a 100-byte
  binary ``value``, two Spark partitions) written with ``df.write.format("brook")``.
- spark_produce: the same DataFrame through ``brook.spark.produce`` (``mapInArrow``), its
  per-task summary collected.
- sdk_consume: one SDK Consumer reads the sdk_produce topic from the beginning: the peer of
  the read.
- spark_read: ``spark.read.format("brook")`` of that topic, every row materialised
  (``write.format("noop")``).

Rows/s are from the action's start to its end, Spark's scheduling included (the DataFrame is
generated and cached before the clock starts). ``of_sdk`` is the Spark path's rows/s over the
SDK peer's in the same round; top-level figures are medians of the rounds. The issue's
target: every ``of_sdk`` at least 1.0 (and 1 M rows/s is the aim for the Arrow paths).

The cluster: 1 controller, 1 storage node and 1 group coordinator started with
``brook.launcher``; the Spark session and the SDK clients run in this process, all on the
same machine.

    python bench/bench_spark.py [--records 500000] [--rounds 3]
    python bench/bench_spark.py --quick            # a smoke run
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench_gateway import machine_facts
from bench_sdk import IDLE_TIMEOUT_S, PARTITIONS, RECORD_BYTES, STARTUP_TIMEOUT_MS, STOP_TIMEOUT_MS

from brook.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from brook.launcher import LocalCluster, Role, Topology
from brook.tools.perf import consumer_perf, make_payload, producer_perf

SPARK_MASTER: Final = "local[2]"
SPARK_PARTITIONS: Final = 2
QUICK_RECORDS: Final = 20_000
FLUSH_TIMEOUT_S: Final = 120.0


def start_cluster(root: Path) -> LocalCluster:
    cluster = LocalCluster(
        root / "cluster",
        Topology(controllers=1, storage_nodes=1, group_coordinators=1, gateways=0),
        config_overrides={
            "controller": {
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
            }
        },
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


def spark_session(scratch: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from brook.spark import register

    session = (
        SparkSession.builder.master(SPARK_MASTER)
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(scratch))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def rows_per_s(rows: int, step: Callable[[], object]) -> dict[str, Any]:
    began = time.perf_counter()
    step()
    elapsed = time.perf_counter() - began
    return {"rows": rows, "seconds": round(elapsed, 3), "rows_per_s": round(rows / elapsed)}


def sdk_produce(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        producer.send(topic, b"warm-up").result(IDLE_TIMEOUT_S)  # metadata, producer id
        result = producer_perf(
            producer, topic, records, RECORD_BYTES, -1, payload=make_payload(RECORD_BYTES)
        )
    if result.first_error is not None:
        raise RuntimeError(f"produce failed: {result.first_error}")
    return {"rows": records, "rows_per_s": round(result.records_per_s)}


def sdk_consume(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        result = consumer_perf(consumer, partitions, records, IDLE_TIMEOUT_S)
    if result.records < records:
        raise RuntimeError(f"consumed {result.records} of {records} records")
    return {"rows": result.records, "rows_per_s": round(result.records_per_s)}


def run_round(spark: Any, frame: Any, bootstrap: str, n: int, records: int) -> dict[str, Any]:
    from brook.spark import produce

    topics = {name: f"{name}-{n}" for name in ("sdk", "write", "produce")}
    results: dict[str, Any] = {}
    results["sdk_produce"] = sdk_produce(bootstrap, topics["sdk"], records)
    results["spark_write"] = rows_per_s(
        records,
        lambda: (
            frame.write.format("brook")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topics["write"])
            .mode("append")
            .save()
        ),
    )
    results["spark_produce"] = rows_per_s(
        records, lambda: produce(frame, topics["produce"], bootstrap_servers=bootstrap).collect()
    )
    results["sdk_consume"] = sdk_consume(bootstrap, topics["sdk"], records + 1)
    results["spark_read"] = rows_per_s(
        records + 1,
        lambda: (
            spark.read.format("brook")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topics["sdk"])
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        ),
    )
    for name, peer in (
        ("spark_write", "sdk_produce"),
        ("spark_produce", "sdk_produce"),
        ("spark_read", "sdk_consume"),
    ):
        results[name]["of_sdk"] = round(
            results[name]["rows_per_s"] / results[peer]["rows_per_s"], 3
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=500_000, help="rows per scenario")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument("--quick", action="store_true", help=f"1 round of {QUICK_RECORDS}")
    parser.add_argument("--dir", type=Path, default=None, help="where the cluster lives")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.rounds = QUICK_RECORDS, 1
    if args.records < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be >= 1")
    load_at_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir))
    began = time.perf_counter()
    try:
        cluster = start_cluster(root)
        try:
            bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)
            with Admin(cluster.controller_bootstrap_servers) as admin:
                names = [
                    f"{name}-{n}"
                    for n in range(args.rounds)
                    for name in ("sdk", "write", "produce")
                ]
                errors = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names])
                failed = {t: e for t, e in errors.items() if e is not None}
                if failed:
                    raise RuntimeError(f"creating topics: {failed}")
            spark = spark_session(root / "spark")
            try:
                from pyspark.sql import functions as f

                frame = (
                    spark.range(args.records, numPartitions=SPARK_PARTITIONS)
                    .select(
                        f.lpad(f.col("id").cast("string"), RECORD_BYTES, "x")
                        .cast("binary")
                        .alias("value")
                    )
                    .cache()
                )
                frame.count()
                rounds = [
                    run_round(spark, frame, bootstrap, n, args.records) for n in range(args.rounds)
                ]
            finally:
                spark.stop()
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    summary: dict[str, Any] = {}
    for name in ("sdk_produce", "spark_write", "spark_produce", "sdk_consume", "spark_read"):
        figures = {"rows_per_s": round(statistics.median(r[name]["rows_per_s"] for r in rounds))}
        if "of_sdk" in rounds[0][name]:
            figures["of_sdk"] = round(statistics.median(r[name]["of_sdk"] for r in rounds), 3)
        summary[name] = figures
    report = {
        "benchmark": "spark",
        "machine": machine_facts(load_at_start),
        "scenario": {
            "spark_master": SPARK_MASTER,
            "spark_partitions": SPARK_PARTITIONS,
            "topic_partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "rows_per_round": args.records,
            "rounds": args.rounds,
        },
        **summary,
        "rounds": rounds,
        "total_s": round(time.perf_counter() - began, 1),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
