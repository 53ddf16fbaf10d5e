"""Batch writes (``df.write.format("brook")``): idempotent, at least once, like Spark's Kafka
sink.

    (df.selectExpr("CAST(id AS STRING) AS key", "payload AS value")
       .write.format("brook")
       .mode("append")        # PySpark's Python data sources take append or overwrite
       .option("kafka.bootstrap.servers", "127.0.0.1:9101")
       .option("topic", "orders")
       .save())

On the driver, the constructor checks the options (the producer's settings among them), the
DataFrame's columns (``brook.spark.arrow_writes``) and, when the ``topic`` option names one,
that the topic exists: a bad write fails before any task runs. Each task sends its rows through one
idempotent producer (``enable.idempotence``, ``acks=all``; every ``kafka.*`` option is passed
to it), flushes before it returns and fails when any record failed, so a job that succeeds has
every row written. The guarantee is at least once: a task that fails after some of its records
were written, or a speculative copy, writes them again when it is retried (idempotence removes
duplicates only within one producer session). ``commit`` and ``abort`` have nothing to do:
records are visible once acknowledged, and nothing can be taken back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from brook.client import Producer, TopicPartition
from brook.client.config import producer_config
from brook.spark.arrow_writes import check_write_schema
from brook.spark.deliveries import DeliveryTally, PartitionDelivery
from brook.spark.options import OptionError, client_config, option
from brook.spark.topics import require_topic

__all__ = ["BatchWriter", "TaskWritten"]

# The batch sink's producer: what makes a retried send harmless within one task.
_IDEMPOTENT: dict[str, str] = {"enable.idempotence": "true", "acks": "all"}


@dataclass
class TaskWritten(WriterCommitMessage):
    """One task's commit message: the records it delivered, per partition."""

    partitions: dict[TopicPartition, PartitionDelivery]


class BatchWriter(DataSourceArrowWriter):
    """The batch sink (see the module docstring); constructed on the driver, pickled to the
    tasks."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        config = client_config(options)
        for name, wanted in _IDEMPOTENT.items():
            given = config.get(name)
            if given is not None and given.strip().lower() != wanted:
                raise OptionError(
                    f"Option 'kafka.{name}' must be '{wanted}' (or not set): the batch sink's "
                    "producer is idempotent"
                )
        self._settings = {**config, **_IDEMPOTENT}
        producer_config(self._settings)  # ConfigError here rather than in every task
        self._topic = option(options, "topic")
        check_write_schema(to_arrow_schema(schema, timezone="UTC"), default_topic=self._topic)
        if self._topic is not None:
            require_topic(options, self._topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWritten:
        """Send every row, flush, and report what was delivered; raises when a record was not
        written (the task fails, and Spark retries it)."""
        producer = Producer(self._settings)
        try:
            tally = DeliveryTally(producer)
            for batch in iterator:
                tally.send(batch, default_topic=self._topic)
            return TaskWritten(tally.finish())
        finally:
            # Flushed on success; on a failure the rest is not waited for (the task is
            # retried whole).
            producer.close(timeout=0)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Every task succeeded: its records are already visible; nothing to do."""

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """A task failed: records already written stay (at least once, as Spark's Kafka
        sink); nothing can be undone."""
