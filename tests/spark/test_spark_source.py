"""format("brook")'s schema is Spark's Kafka source's, in Spark's types and in Arrow's."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from brook.spark.schema import arrow_schema, source_schema

KAFKA_SOURCE_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
HEADERS = "headers array<struct<key: string, value: binary>>"


def test_the_schema_is_spark_kafka_sources(spark: SparkSession) -> None:
    assert (
        source_schema(include_headers=False)
        == spark.createDataFrame([], KAFKA_SOURCE_SCHEMA).schema
    )
    with_headers = spark.createDataFrame([], f"{KAFKA_SOURCE_SCHEMA}, {HEADERS}").schema
    assert source_schema(include_headers=True) == with_headers


def test_the_arrow_schema_is_what_spark_converts_the_schema_to() -> None:
    for headers in (False, True):
        converted = to_arrow_schema(source_schema(include_headers=headers), timezone="UTC")
        assert pa.schema(arrow_schema(include_headers=headers)).types == converted.types
