"""The UDF producers against a real cluster: ``produce``'s per-task summary is exactly what
the consumer reads, and ``produce_udf`` says where each row's record really landed.

One cluster serves the module; each test owns its topics and reads them back with the SDK
Consumer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from brook_topics import create_topic, read_back, storage_bootstrap
from cluster_fixture import one_node_transactions_cluster
from pyspark.sql import SparkSession

from brook.client import ConfigError
from brook.client.partitioner import partition_for_key
from brook.launcher import LocalCluster
from brook.spark import produce, produce_udf
from brook.spark.arrow_writes import WriteSchemaError
from brook.spark.options import OptionError

pytestmark = pytest.mark.integration

ROWS = 400
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with one_node_transactions_cluster(tmp_path_factory, "spark-produce") as started:
        yield started


def test_the_summary_of_each_task_is_what_the_consumer_reads(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "summarized", PARTITIONS)
    # Each value names the Spark partition (the task) that sends it.
    df = (
        spark.range(ROWS)
        .repartition(2)
        .selectExpr("CONCAT('key-', id) AS key", "CONCAT(SPARK_PARTITION_ID(), ':', id) AS value")
    )
    summary = produce(df, "summarized", bootstrap_servers=storage_bootstrap(cluster)).collect()

    records = read_back(cluster, "summarized", PARTITIONS)
    assert sorted(r.key or b"" for r in records) == sorted(f"key-{i}".encode() for i in range(ROWS))
    assert sum(row.records for row in summary) == ROWS
    assert {row.task for row in summary} == {0, 1}
    assert len({(row.task, row.partition) for row in summary}) == len(summary)
    for row in summary:
        assert row.topic == "summarized"
        sent = [
            r
            for r in records
            if r.partition == row.partition and (r.value or b"").startswith(f"{row.task}:".encode())
        ]
        assert row.records == len(sent)
        assert row.first_offset == sent[0].offset
        assert row.last_offset == sent[-1].offset
        assert row.bytes == sum(len(r.key or b"") + len(r.value or b"") for r in sent)


def test_produce_sends_every_row_once_however_the_summary_is_looked_at(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    """The call sends (every task); looking at the summary partially (``show`` takes the
    first rows), fully or twice sends nothing more."""
    create_topic(cluster, "eager", PARTITIONS)
    df = spark.range(ROWS, numPartitions=8).selectExpr("CAST(id AS STRING) AS value")
    summary = produce(df, "eager", bootstrap_servers=storage_bootstrap(cluster))
    assert len(read_back(cluster, "eager", PARTITIONS)) == ROWS
    summary.show(1)
    assert summary.count() == summary.count() == len(summary.collect())
    values = sorted(int(r.value or b"") for r in read_back(cluster, "eager", PARTITIONS))
    assert values == list(range(ROWS))


def test_the_summary_counts_each_topic_of_the_topic_column(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    for topic in ("column-a", "column-b"):
        create_topic(cluster, topic, PARTITIONS)
    df = spark.range(0, 90, 1, 1).selectExpr(
        "IF(id % 3 = 0, 'column-a', 'column-b') AS topic", "CAST(id AS STRING) AS value"
    )
    summary = produce(df, bootstrap_servers=storage_bootstrap(cluster)).collect()

    for topic, rows in (("column-a", 30), ("column-b", 60)):
        records = read_back(cluster, topic, PARTITIONS)
        assert len(records) == rows
        assert {
            (row.partition, row.records, row.first_offset, row.last_offset)
            for row in summary
            if row.topic == topic
        } == {
            (p, len(got), got[0].offset, got[-1].offset)
            for p in range(PARTITIONS)
            if (got := [r for r in records if r.partition == p])
        }


def test_produce_udf_gives_each_row_the_partition_and_offset_its_record_landed_at(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "placed", PARTITIONS)
    send = produce_udf("placed", bootstrap_servers=storage_bootstrap(cluster))
    df = spark.range(ROWS).selectExpr(
        "CAST(CONCAT('key-', id) AS BINARY) AS key", "CONCAT('value-', id) AS value"
    )
    rows = df.withColumn("placed", send("value", "key")).collect()

    landed = {(r.partition, r.offset): (r.key, r.value) for r in read_back(cluster, "placed", 3)}
    assert len(landed) == ROWS
    assert {
        (row.placed.partition, row.placed.offset): (bytes(row.key), row.value.encode())
        for row in rows
    } == landed
    assert all(
        row.placed.partition == partition_for_key(bytes(row.key), PARTITIONS) for row in rows
    )


def test_produce_udf_without_a_key(spark: SparkSession, cluster: LocalCluster) -> None:
    create_topic(cluster, "unkeyed", PARTITIONS)
    send = produce_udf("unkeyed", bootstrap_servers=storage_bootstrap(cluster))
    rows = (
        spark.range(50)
        .selectExpr("CAST(id AS STRING) AS value")
        .select("value", send("value").alias("placed"))
        .collect()
    )

    landed = {(r.partition, r.offset): r.value for r in read_back(cluster, "unkeyed", PARTITIONS)}
    assert {(r.placed.partition, r.placed.offset): r.value.encode() for r in rows} == landed
    assert all(r.key is None for r in read_back(cluster, "unkeyed", PARTITIONS))


def test_bad_columns_settings_and_topics_are_refused_on_the_driver(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    servers = storage_bootstrap(cluster)
    create_topic(cluster, "untouched", 1)
    keys_only = spark.range(3).selectExpr("CAST(id AS STRING) AS key")
    with pytest.raises(WriteSchemaError, match="Required attribute 'value' not found"):
        produce(keys_only, "untouched", bootstrap_servers=servers)
    values = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(WriteSchemaError, match="topic option required"):
        produce(values, bootstrap_servers=servers)
    with pytest.raises(OptionError, match="Topic 'missing' cannot be written"):
        produce(values, "missing", bootstrap_servers=servers)
    with pytest.raises(OptionError, match="Topic 'missing' cannot be written"):
        produce_udf("missing", bootstrap_servers=servers)
    with pytest.raises(ConfigError, match="linger"):
        produce(values, "untouched", bootstrap_servers=servers, linger_ms=-1)
    assert read_back(cluster, "untouched", 1) == []
