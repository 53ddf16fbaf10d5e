"""Batch reads (spark.read.format("brook")): offset ranges of topic partitions planned on the
driver, read by tasks as Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

__all__ = ["BatchReader"]


class BatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        raise NotImplementedError

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError
