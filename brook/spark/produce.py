"""The UDF producers: a DataFrame's rows sent to Brook from inside a Spark job, by
``produce`` (a whole DataFrame, built on ``mapInArrow``) and ``produce_udf`` (a column
function that gives each row the partition and offset its record landed at).

    from brook.spark import produce, produce_udf

    summary = produce(df, "orders", bootstrap_servers="127.0.0.1:9101", linger_ms=5)  # sent
    summary.show()      # task, topic, partition, records, bytes, first_offset, last_offset

    send = produce_udf("orders", bootstrap_servers="127.0.0.1:9101")
    placed = df.withColumn("placed", send("value", "key"))   # struct<partition, offset>

Rows are the batch sink's (``brook.spark.arrow_writes``: ``value``, ``key``, ``topic``,
``partition``, ``headers``), encoded from Arrow columns a batch at a time. Each Spark task has
its own producer (the SDK's defaults: idempotent, ``acks=all``; ``producer_config`` adds to
them, in the SDK's keyword form ``linger_ms=5``), flushed before the task returns and closed
when it ends, whether or not Spark reuses its Python worker for the next task: nothing outlives
the task, so there is nothing to close at exit.

Delivery: at least once, for both forms. A task that succeeds has had every record
acknowledged (a failed record fails the task). A task that fails or is run twice (a retry, a
speculative copy, a recomputed stage) sends its rows again, and the idempotent producer removes
duplicates only within its own session: the rows of a retried task may be written twice.
``produce_udf`` is marked non-deterministic, so Spark does not evaluate it twice for one row
of one attempt, but a job that uses its output more than once should cache that output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf
from pyspark.sql.pandas.types import to_arrow_schema

from brook.client import Producer
from brook.client.config import producer_config
from brook.spark.arrow_writes import check_write_schema, send_arrow_rows
from brook.spark.deliveries import DeliveryTally
from brook.spark.options import BOOTSTRAP_OPTION
from brook.spark.topics import require_topic

__all__ = ["PLACEMENT_TYPE", "SUMMARY_SCHEMA", "produce", "produce_udf"]

SUMMARY_SCHEMA: Final = (
    "task int, topic string, partition int, records long, bytes long, "
    "first_offset long, last_offset long"
)
"""``produce``'s output: one row per task and partition it wrote to (``task`` is the Spark
partition id; ``bytes`` are the records' key and value bytes)."""

PLACEMENT_TYPE: Final = "struct<partition:int, offset:long>"
"""``produce_udf``'s column: where a row's record landed."""

_SUMMARY_ARROW: Final = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("records", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("first_offset", pa.int64()),
        pa.field("last_offset", pa.int64()),
    ]
)


def produce(
    df: DataFrame,
    topic: str | None = None,
    *,
    bootstrap_servers: str,
    **producer_settings: object,
) -> DataFrame:
    """Sends the rows of ``df`` to Brook now (one Spark job, every task of it) and returns the
    summary: one row per (task, topic, partition) with the records and bytes written and their
    first and last offsets (``SUMMARY_SCHEMA``), a small DataFrame of what was collected, so
    looking at it (``show``, ``count``, twice) sends nothing again. (A lazy ``mapInArrow``
    would send whenever, and as much as, an action computes it: ``show()`` runs only the
    tasks its first rows need.) ``topic``, when given, wins over a ``topic`` column. Checked
    here, before any task runs: the columns (WriteSchemaError), the producer settings
    (ConfigError) and that ``topic`` exists (OptionError)."""
    check_write_schema(to_arrow_schema(df.schema, timezone="UTC"), default_topic=topic)
    _check(bootstrap_servers, topic, producer_settings)

    def produce_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        producer = Producer({"bootstrap.servers": bootstrap_servers}, **producer_settings)
        try:
            tally = DeliveryTally(producer)
            for batch in batches:
                tally.send(batch, default_topic=topic)
            delivered = tally.finish()
        finally:
            producer.close(timeout=0)
        if delivered:
            where = sorted(delivered)
            yield pa.RecordBatch.from_pydict(
                {
                    "task": [task] * len(where),
                    "topic": [tp.topic for tp in where],
                    "partition": [tp.partition for tp in where],
                    "records": [delivered[tp].records for tp in where],
                    "bytes": [delivered[tp].bytes for tp in where],
                    "first_offset": [delivered[tp].first_offset for tp in where],
                    "last_offset": [delivered[tp].last_offset for tp in where],
                },
                schema=_SUMMARY_ARROW,
            )

    summary = df.mapInArrow(produce_task, SUMMARY_SCHEMA).collect()
    return df.sparkSession.createDataFrame(summary, SUMMARY_SCHEMA)


def produce_udf(
    topic: str, *, bootstrap_servers: str, **producer_settings: object
) -> Callable[..., Column]:
    """A column function ``send(value, key=None)`` (column names or Columns; string or binary)
    that sends each row's record to ``topic`` and is the ``PLACEMENT_TYPE`` struct of where it
    landed. Records are sent an Arrow batch at a time and the batch is flushed before its
    placements are returned. Checked here: the settings (ConfigError) and that ``topic``
    exists (OptionError)."""
    _check(bootstrap_servers, topic, producer_settings)

    def send_batches(batches: Iterator[tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
        producer = Producer({"bootstrap.servers": bootstrap_servers}, **producer_settings)
        try:
            for values, keys in batches:
                rows = pa.RecordBatch.from_arrays([values, keys], names=["value", "key"])
                futures = send_arrow_rows(producer, rows, default_topic=topic)
                producer.flush()
                placed = [future.result(0) for future in futures]
                yield pa.StructArray.from_arrays(
                    [
                        pa.array([m.partition for m in placed], pa.int32()),
                        pa.array([m.offset for m in placed], pa.int64()),
                    ],
                    names=["partition", "offset"],
                )
        finally:
            producer.close(timeout=0)

    # The type hints make it an iterator UDF (one producer for all of a task's batches); the
    # stubs know only the older functionType form, which PySpark 4 warns about.
    udf = arrow_udf(send_batches, PLACEMENT_TYPE).asNondeterministic()  # type: ignore[call-overload]

    def send(value: Column | str, key: Column | str | None = None) -> Column:
        key_column = F.lit(None).cast("binary") if key is None else key
        column: Column = udf(value, key_column)
        return column

    return send


def _check(bootstrap_servers: str, topic: str | None, producer_settings: dict[str, object]) -> None:
    """On the driver: ConfigError for bad producer settings, OptionError when ``topic`` does
    not exist."""
    producer_config({"bootstrap.servers": bootstrap_servers}, **producer_settings)
    if topic is not None:
        require_topic({BOOTSTRAP_OPTION: bootstrap_servers}, topic)
