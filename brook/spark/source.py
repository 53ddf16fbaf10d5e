"""``format("brook")``: the PySpark Data Source that hands each kind of read and write to its
module.

Spark calls ``reader``/``streamReader``/``writer``/``streamWriter`` on the driver side while it
plans a query, so every option is checked there and a bad one fails the query before any task
runs (``brook.spark.options.OptionError``). The readers and writers are pickled to the tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from brook.spark.options import OptionError, flag
from brook.spark.schema import source_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BrookDataSource", "register"]


class BrookDataSource(DataSource):
    """Brook topics as DataFrames: Spark's Kafka connector's options and schema."""

    @classmethod
    def name(cls) -> str:
        return "brook"

    def schema(self) -> StructType:
        return source_schema(include_headers=flag(self.options, "includeHeaders"))

    def reader(self, schema: StructType) -> DataSourceReader:
        from brook.spark.batch_reader import BatchReader

        return BatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from brook.spark.stream_reader import StreamReader

        return StreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from brook.spark.writer import BatchWriter

        if overwrite:
            # A log cannot be overwritten (Spark's Kafka sink refuses the mode too).
            raise OptionError("Save mode Overwrite is not allowed for Brook: use append")

        return BatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from brook.spark.stream_writer import ExactlyOnceStreamWriter

        return ExactlyOnceStreamWriter(dict(self.options), schema)


def register(spark: SparkSession) -> None:
    """Makes ``format("brook")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(BrookDataSource)
