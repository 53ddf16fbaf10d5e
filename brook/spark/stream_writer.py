"""The exactly-once streaming sink (df.writeStream.format("brook")): tasks write two-phase
transactions, the driver's commit decides, the batch id is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

__all__ = ["ExactlyOnceStreamWriter"]


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        raise NotImplementedError

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        raise NotImplementedError
