"""Streaming reads (spark.readStream.format("brook")): offsets in Spark's Kafka JSON, owned by
Spark's checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

__all__ = ["StreamReader"]


class StreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        raise NotImplementedError

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError
