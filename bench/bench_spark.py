"""Spark <-> Brook throughput on ``local[2]``, beside the SDK's own producer and consumer in the
same run (issue #17); prints one JSON document.

Paths, 100-byte values (no key), topics of 6 partitions, interleaved round by round:

- sdk_producer: the SDK's Producer (its defaults, the Spark writers' settings: idempotent,
  ``acks=all``) sends ``--rows`` values from this process and flushes: the writers' peer.
- spark_writer: a cached DataFrame of ``--rows`` rows written with ``df.write.format("brook")``.
- spark_produce: the same DataFrame through ``brook.spark.produce`` (``mapInArrow``), until its
  per-task summary is collected.
- sdk_consumer: the SDK's Consumer reads the sdk_producer topic from the beginning: the
  reader's peer.
- spark_reader: ``spark.read.format("brook")`` of that topic, every row materialised
  (``write.format("noop")``).

Spark's own ceilings, in the same run, say what a Python data source can do here at all:

- spark_write_ceiling: the same DataFrame through a ``mapInArrow`` that only counts its
  batches (Spark handing Arrow batches to Python workers, nothing sent).
- spark_read_ceiling: a Python data source with the Brook source's schema and partitions that
  yields the same number of rows from memory (Spark taking Arrow batches back, nothing
  fetched).

``of_ceiling`` is a Spark path's rows/s over its ceiling's in the same round.

The DataFrame is generated, cached and counted before any timing, so a Spark figure is Spark
handing Arrow batches to its Python workers (or taking them back) plus Brook's part,
including the job's fixed cost (planning, the reader or writer made in a Python worker, the
commit: about 0.5 s here), hence a million rows by default. ``of_sdk`` is the Spark path's
rows/s over its SDK peer's in the same round; figures are medians of the rounds. The issue's
target: every ``of_sdk`` at least 1.0, and 1 M rows/s the aim for the Arrow paths.

The cluster: 1 controller, 1 storage node (internal topics of one replica, so that idempotent
producers get their ids) and 1 group coordinator started by ``brook.launcher``; the Spark
session (the tests' ``spark_session``) and the SDK clients run in this process, all on the
same machine.

    python bench/bench_spark.py [--rows 1000000] [--rounds 3]
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from bench_gateway import machine_facts
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from brook.client import Consumer, Producer, TopicPartition
from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster, Role, Topology
from brook.spark import produce
from brook.spark.schema import arrow_schema, source_schema
from brook.tools.options import ToolError, topic_partition_count
from brook.tools.perf import consumer_perf

# The tests' session helper (format("brook") registered, the JVM stopped on the way out).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from spark_session import spark_session

RECORD_BYTES: Final = 100
PARTITIONS: Final = 6
SPARK_MASTER: Final = "local[2]"
STARTUP_TIMEOUT_MS: Final = 60_000
STOP_TIMEOUT_MS: Final = 10_000
TOPIC_KNOWN_TIMEOUT_S: Final = 30.0
CONSUME_IDLE_TIMEOUT_S: Final = 30.0
QUICK_ROWS: Final = 20_000
PATHS: Final = (
    "sdk_producer",
    "spark_writer",
    "spark_produce",
    "spark_write_ceiling",
    "sdk_consumer",
    "spark_reader",
    "spark_read_ceiling",
)
CEILINGS: Final = {
    "spark_writer": "spark_write_ceiling",
    "spark_produce": "spark_write_ceiling",
    "spark_reader": "spark_read_ceiling",
}
# Rows per Arrow batch the read ceiling yields: about what one 8 MiB fetch of 100-byte
# records decodes to.
CEILING_BATCH_ROWS: Final = 70_000
PEERS: Final = {
    "spark_writer": "sdk_producer",
    "spark_produce": "sdk_producer",
    "spark_reader": "sdk_consumer",
}


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


def sdk_consumer_rate(bootstrap: str, topic: str, rows: int) -> float:
    """Rows/s of the SDK's Consumer reading ``rows`` records of ``topic`` from its start."""
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        result = consumer_perf(consumer, partitions, rows, CONSUME_IDLE_TIMEOUT_S)
    if result.records < rows:
        raise RuntimeError(f"consumed {result.records} of {rows} records")
    return result.records_per_s


def reader_rate(spark: SparkSession, bootstrap: str, topic: str, rows: int) -> float:
    """Rows/s of ``spark.read.format("brook")`` of ``topic`` (``rows`` records), every row
    materialised by the noop sink."""
    started = time.perf_counter()
    (
        spark.read.format("brook")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    return rows / (time.perf_counter() - started)


def write_ceiling_rate(df: DataFrame) -> float:
    """Rows/s of ``df`` through a ``mapInArrow`` that only counts (nothing sent)."""

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = sum(batch.num_rows for batch in batches)
        yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))

    rows = df.count()
    started = time.perf_counter()
    counted = df.mapInArrow(count, "rows long").collect()
    elapsed = time.perf_counter() - started
    assert sum(row.rows for row in counted) == rows
    return rows / elapsed


class _CeilingPartition(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        self.index = index
        self.rows = rows


class _CeilingReader(DataSourceReader):
    """The Brook source's schema and partitions, its rows made in memory."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        share, extra = divmod(self.rows, PARTITIONS)
        return [_CeilingPartition(i, share + (i < extra)) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _CeilingPartition)
        schema = arrow_schema(include_headers=False)
        value = b"x" * RECORD_BYTES
        for first in range(0, partition.rows, CEILING_BATCH_ROWS):
            count = min(CEILING_BATCH_ROWS, partition.rows - first)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.nulls(count, pa.binary()),
                    pa.array([value] * count, pa.binary()),
                    pa.array(["ceiling"] * count, pa.string()),
                    pa.array([partition.index] * count, pa.int32()),
                    pa.array(range(first, first + count), pa.int64()),
                    pa.array([0] * count, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.array([0] * count, pa.int32()),
                ],
                schema=schema,
            )


class _CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "brook_bench_ceiling"

    def schema(self) -> StructType:
        return source_schema(include_headers=False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _CeilingReader(int(self.options["rows"]))


def read_ceiling_rate(spark: SparkSession, rows: int) -> float:
    """Rows/s of ``rows`` rows of the Brook source's schema made in memory by a Python data
    source, materialised by the noop sink (nothing fetched)."""
    started = time.perf_counter()
    (
        spark.read.format(_CeilingSource.name())
        .option("rows", str(rows))
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    return rows / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per round and path")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument("--quick", action="store_true", help=f"1 round of {QUICK_ROWS} rows")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.rounds = QUICK_ROWS, 1
    if args.rows < 1 or args.rounds < 1:
        parser.error("--rows and --rounds must be >= 1")
    load_at_start = os.getloadavg()
    began = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    topics = {f"{path}-{n}" for n in range(args.rounds) for path in PATHS[:3]}
    try:
        cluster = start_cluster(root, sorted(topics | {"warm-up"}))
        try:
            bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)
            with spark_session(root / "spark", master=SPARK_MASTER) as spark:
                spark.dataSource.register(_CeilingSource)
                df = dataframe_of_rows(spark, args.rows)
                # Untimed: Spark starts its Python workers.
                writer_rate(df.limit(1000), bootstrap, "warm-up")
                produce_rate(df.limit(1000), bootstrap, "warm-up")
                for n in range(args.rounds):
                    sent = f"sdk_producer-{n}"
                    rates["sdk_producer"].append(sdk_rate(bootstrap, sent, args.rows))
                    rates["spark_writer"].append(writer_rate(df, bootstrap, f"spark_writer-{n}"))
                    rates["spark_produce"].append(produce_rate(df, bootstrap, f"spark_produce-{n}"))
                    rates["spark_write_ceiling"].append(write_ceiling_rate(df))
                    # sdk_rate's warm-up record is one more.
                    rates["sdk_consumer"].append(sdk_consumer_rate(bootstrap, sent, args.rows + 1))
                    rates["spark_reader"].append(reader_rate(spark, bootstrap, sent, args.rows + 1))
                    rates["spark_read_ceiling"].append(read_ceiling_rate(spark, args.rows + 1))
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rounds = [
        {path: {"rows_per_s": round(rates[path][n])} for path in PATHS} for n in range(args.rounds)
    ]
    for figures in rounds:
        for path, ceiling in CEILINGS.items():
            figures[path]["of_ceiling"] = round(
                figures[path]["rows_per_s"] / figures[ceiling]["rows_per_s"], 3
            )
        for path, peer in PEERS.items():
            figures[path]["of_sdk"] = round(
                figures[path]["rows_per_s"] / figures[peer]["rows_per_s"], 3
            )
    summary: dict[str, Any] = {}
    for path in PATHS:
        summary[path] = {"rows_per_s": round(statistics.median(rates[path]))}
        for ratio, paths in (("of_sdk", PEERS), ("of_ceiling", CEILINGS)):
            if path in paths:
                summary[path][ratio] = round(statistics.median(r[path][ratio] for r in rounds), 3)
    report: dict[str, Any] = {
        "benchmark": "spark",
        "machine": machine_facts(load_at_start),
        "scenario": {
            "master": SPARK_MASTER,
            "topic_partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "rows_per_round": args.rows,
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
