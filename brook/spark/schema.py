"""The schema of a Brook source: exactly Spark's Kafka source's, in Spark's and Arrow's types.

``key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int``, and ``headers array<struct<key: string, value: binary>>`` after them when
``includeHeaders`` is true. The Arrow twin is what readers build their record batches in:
Spark takes a batch only when its types match the declared schema exactly.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["ARROW_HEADERS_TYPE", "arrow_schema", "source_schema"]

_HEADERS_TYPE: Final = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
ARROW_HEADERS_TYPE: Final = pa.list_(
    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
)


def source_schema(*, include_headers: bool) -> StructType:
    """The DataFrame schema of a read (Spark's Kafka source's)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(*, include_headers: bool) -> pa.Schema:
    """``source_schema`` in the Arrow types Spark accepts for it (timestamps in microseconds,
    UTC)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", ARROW_HEADERS_TYPE))
    return pa.schema(fields)
