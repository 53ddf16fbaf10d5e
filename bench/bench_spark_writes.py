"""DataFrame → Brook: rows/s of 100-byte rows through ``df.write.format("brook")`` (the batch
writer) and ``brook.spark.produce`` on ``local[2]``, beside the SDK's own idempotent producer
sending the same rows from the driver process, in the same run; prints one JSON document.

The DataFrame is cached and counted before any timing, so each figure is Spark handing Arrow
batches to its Python workers plus the send, not computing the rows. Every path uses the same
producer settings (the SDK defaults: idempotent, ``acks=all``) against 1 controller, 1 storage
node and 1 group coordinator started by ``brook.launcher``, topics of 6 partitions, no
replication. Paths are interleaved round by round; figures are medians. A Spark figure
includes the job's fixed cost (about 0.5 s here: planning, creating the writer in a Python
worker, committing), hence a million rows by default.

    python bench/bench_spark_writes.py [--rows 1000000] [--rounds 3]

The functions (``dataframe_of_rows``, ``sdk_rate``, ``writer_rate``, ``produce_rate``) are
meant for bench_spark.py too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from brook.client import Producer
from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster, Role, Topology
from brook.spark import produce
from brook.tools.options import ToolError, topic_partition_count

# The tests' session helper (format("brook") registered, the JVM stopped on the way out).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from spark_session import spark_session

RECORD_BYTES = 100
PARTITIONS = 6
SPARK_MASTER = "local[2]"
STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
TOPIC_KNOWN_TIMEOUT_S = 30.0
PATHS = ("sdk_producer", "spark_writer", "spark_produce")


def dataframe_of_rows(
    spark: SparkSession, rows: int, record_bytes: int = RECORD_BYTES
) -> DataFrame:
    """``rows`` rows with a ``value`` of ``record_bytes`` bytes (binary), cached and counted."""
    df = spark.range(rows).selectExpr(
        f"CAST(LPAD(CAST(id AS STRING), {record_bytes}, 'x') AS BINARY) AS value"
    )
    df.cache()
    assert df.count() == rows
    return df


def sdk_rate(bootstrap: str, topic: str, rows: int, record_bytes: int = RECORD_BYTES) -> float:
    """Rows/s of the SDK's producer (defaults: idempotent, acks=all) sending ``rows`` values
    of ``record_bytes`` from this process, from the first send to the flush's end."""
    values = [str(i).rjust(record_bytes, "x").encode() for i in range(rows)]
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        producer.send(topic, b"warm-up").result(TOPIC_KNOWN_TIMEOUT_S)
        started = time.perf_counter()
        send = producer.send
        for value in values:
            send(topic, value)
        producer.flush()
        return rows / (time.perf_counter() - started)


def writer_rate(df: DataFrame, bootstrap: str, topic: str) -> float:
    """Rows/s of ``df`` written with ``df.write.format("brook")`` (the whole save)."""
    rows = df.count()
    started = time.perf_counter()
    (
        df.write.format("brook")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .save()
    )
    return rows / (time.perf_counter() - started)


def produce_rate(df: DataFrame, bootstrap: str, topic: str) -> float:
    """Rows/s of ``df`` sent by ``brook.spark.produce`` (until its summary is collected)."""
    rows = df.count()
    started = time.perf_counter()
    summary = produce(df, topic, bootstrap_servers=bootstrap).collect()
    elapsed = time.perf_counter() - started
    assert sum(row.records for row in summary) == rows
    return rows / elapsed


def start_cluster(root: Path, topics: list[str]) -> LocalCluster:
    """1 controller, 1 storage node (internal topics of one replica, so that idempotent
    producers get their ids) and 1 group coordinator, with ``topics`` created."""
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
        with Admin(cluster.controller_bootstrap_servers) as admin:
            admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics])
        servers = cluster.bootstrap_servers(Role.STORAGE_NODE).split(",")
        deadline = time.monotonic() + TOPIC_KNOWN_TIMEOUT_S
        for topic in topics:
            while True:
                try:
                    topic_partition_count(servers, topic, int(TOPIC_KNOWN_TIMEOUT_S * 1000))
                    break
                except ToolError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per round and path")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.rounds < 1:
        parser.error("--rows and --rounds must be >= 1")
    root = Path(tempfile.mkdtemp(prefix="bench-spark-writes-"))
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    try:
        cluster = start_cluster(root, list(PATHS))
        try:
            bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)
            with spark_session(root / "spark", master=SPARK_MASTER) as spark:
                df = dataframe_of_rows(spark, args.rows)
                # A first save and produce, untimed: Spark starts its Python workers.
                writer_rate(df.limit(1000), bootstrap, "spark_writer")
                produce_rate(df.limit(1000), bootstrap, "spark_produce")
                for _ in range(args.rounds):
                    rates["sdk_producer"].append(sdk_rate(bootstrap, "sdk_producer", args.rows))
                    rates["spark_writer"].append(writer_rate(df, bootstrap, "spark_writer"))
                    rates["spark_produce"].append(produce_rate(df, bootstrap, "spark_produce"))
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sdk = statistics.median(rates["sdk_producer"])
    report: dict[str, Any] = {
        "benchmark": "spark_writes",
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "scenario": {
            "master": SPARK_MASTER,
            "partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "rows_per_round": args.rows,
            "rounds": args.rounds,
        },
        "rows_per_s": {path: round(statistics.median(r)) for path, r in rates.items()},
        "rounds_rows_per_s": {path: [round(x) for x in r] for path, r in rates.items()},
        "vs_sdk_producer": {
            path: round(statistics.median(r) / sdk, 3) for path, r in rates.items()
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
