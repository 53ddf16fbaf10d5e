"""An exactly-once streaming pipeline on Spark: order totals per customer per minute.

Reads the ``orders`` topic as a stream (``format("brook")``, Spark's Kafka source options),
parses each order's JSON value, sums the amounts per customer over one-minute event-time
windows, and writes each window's final total, once the watermark (the latest order time seen
less ``WATERMARK_DELAY``) has passed the window's end, to ``order-totals`` through Brook's
exactly-once sink: every window's total is one record for ``read_committed`` consumers, even
when tasks are retried or the driver is killed and restarted on the same checkpoint. (Append
mode: Spark's Python data sources take Append and Complete, not Update.)

With a local cluster running (``brook cluster up``), one command creates the topics, writes
sample orders and runs the job until Ctrl-C:

    .venv/bin/python examples/order_totals.py --sample-orders 1000

``--available-now`` processes what the topic holds and exits (Trigger.AvailableNow), printing
the totals read back with read_committed. The checkpoint directory (``--checkpoint``) is what
makes a restart resume exactly where the last run stopped. Needs the ``[spark]`` extra and
Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

DEFAULT_BOOTSTRAP = "127.0.0.1:9101"  # the storage nodes' gRPC ports of `brook cluster up`
DEFAULT_CONTROLLERS = "127.0.0.1:9201"
ORDERS = "orders"
TOTALS = "order-totals"
CUSTOMERS = ("ada", "grace", "linus", "barbara", "edsger", "margaret")
ORDER_SCHEMA = "order_id string, customer string, amount double, ordered_at timestamp"
READ_BACK_TIMEOUT_S = 30.0
WINDOW = "1 minute"
WATERMARK_DELAY = "1 minute"
WATERMARK_DELAY_MS = 60_000


def create_topics(controllers: str, partitions: int) -> None:
    """``orders`` and ``order-totals`` (compacted: the last total of a window is what counts),
    unless they exist."""
    from brook.client import Admin, NewTopic

    with Admin(controllers) as admin:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(ORDERS, num_partitions=partitions),
            NewTopic(TOTALS, num_partitions=partitions, configs={"cleanup.policy": "compact"}),
        ]
        errors = admin.create_topics([t for t in wanted if t.name not in existing])
        for name, error in errors.items():
            if error is not None:
                raise SystemExit(f"creating {name}: {error}")


def write_sample_orders(bootstrap: str, count: int, seed: int) -> list[dict[str, object]]:
    """``count`` orders spread over the last five minutes, keyed by customer; returns them."""
    from brook.client import Producer

    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    orders: list[dict[str, object]] = []
    with Producer(bootstrap_servers=bootstrap) as producer:
        for n in range(count):
            customer = rng.choice(CUSTOMERS)
            ordered_ms = now_ms - rng.randrange(5 * 60_000)
            order: dict[str, object] = {
                "order_id": f"{seed}-{n}",
                "customer": customer,
                "amount": rng.randrange(100, 10_000) / 100,
                "ordered_at": _iso(ordered_ms),
                "ordered_ms": ordered_ms,
            }
            orders.append(order)
            producer.send(ORDERS, json.dumps(order).encode(), key=customer.encode())
        producer.flush()
    return orders


def closed_window_totals(orders: list[dict[str, object]]) -> dict[tuple[str, str], float]:
    """The totals the job emits for ``orders``: per (customer, window start), rounded to cents,
    of every one-minute window that the watermark (latest order less WATERMARK_DELAY) has
    passed."""
    watermark_ms = max(int(str(o["ordered_ms"])) for o in orders) - WATERMARK_DELAY_MS
    totals: dict[tuple[str, str], float] = {}
    for order in orders:
        start_ms = int(str(order["ordered_ms"])) // 60_000 * 60_000
        if start_ms + 60_000 <= watermark_ms:
            key = (str(order["customer"]), _iso(start_ms)[:19])
            totals[key] = totals.get(key, 0.0) + float(str(order["amount"]))
    return {key: round(total, 2) for key, total in totals.items()}


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def run_job(bootstrap: str, checkpoint: Path, *, available_now: bool) -> None:
    """The streaming job itself; returns when the query ends (AvailableNow) or on Ctrl-C."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    from brook.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("order-totals")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    try:
        orders = (
            spark.readStream.format("brook")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", ORDERS)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 10_000)
            .load()
            .select(f.from_json(f.col("value").cast("string"), ORDER_SCHEMA).alias("order"))
            .select("order.*")
        )
        totals = (
            orders.withWatermark("ordered_at", WATERMARK_DELAY)
            .groupBy(f.window("ordered_at", WINDOW), "customer")
            .agg(f.round(f.sum("amount"), 2).alias("total"), f.count("*").alias("orders"))
            .select(
                f.concat_ws(
                    "|", "customer", f.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss")
                ).alias("key"),
                f.to_json(
                    f.struct(
                        "customer",
                        f.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss").alias("window"),
                        "total",
                        "orders",
                    )
                ).alias("value"),
            )
        )
        writer = (
            totals.writeStream.format("brook")
            .outputMode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", TOTALS)
            .option("checkpointLocation", str(checkpoint))
        )
        query = (
            writer.trigger(availableNow=True).start()
            if available_now
            else writer.trigger(processingTime="2 seconds").start()
        )
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    finally:
        spark.stop()


def read_totals(bootstrap: str, controllers: str) -> list[dict[str, object]]:
    """Every committed record of ``order-totals``, in order per partition."""
    from brook.client import Admin, Consumer, TopicPartition

    with Admin(controllers) as admin:
        count = len(admin.describe_topics([TOTALS])[TOTALS].partitions)
    totals: list[dict[str, object]] = []
    with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        partitions = [TopicPartition(TOTALS, p) for p in range(count)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        deadline = time.monotonic() + READ_BACK_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise SystemExit(f"{TOTALS} could not be read back in {READ_BACK_TIMEOUT_S} s")
            totals.extend(json.loads(r.value or b"{}") for r in consumer.poll(timeout=1.0))
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP)
    parser.add_argument("--controllers", default=DEFAULT_CONTROLLERS)
    parser.add_argument("--checkpoint", type=Path, default=Path(".brook/checkpoints/order-totals"))
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--sample-orders", type=int, default=0, help="write this many first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)
    create_topics(args.controllers, args.partitions)
    if args.sample_orders:
        write_sample_orders(args.bootstrap_servers, args.sample_orders, args.seed)
    run_job(args.bootstrap_servers, args.checkpoint.resolve(), available_now=args.available_now)
    if args.available_now:
        for total in read_totals(args.bootstrap_servers, args.controllers):
            print(json.dumps(total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
