"""df.write.format("brook") against a real cluster: every row is written once, as Spark's Kafka
sink would write it, and a write that cannot succeed fails on the driver before any task runs.

Every test reads its topic back with the SDK Consumer. One cluster (with a gateway, for the
confluent-kafka partitioner parity test) serves the module; each test owns its topics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from brook_topics import create_topic, read_back, storage_bootstrap
from cluster_fixture import one_node_transactions_cluster
from pyspark.sql import DataFrame, SparkSession

from brook.client.partitioner import partition_for_key
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

ROWS = 300
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # A gateway for confluent-kafka; internal topics of one replica, so that the idempotent
    # producer gets its producer id from the one storage node.
    with one_node_transactions_cluster(tmp_path_factory, "spark-write", gateways=1) as started:
        yield started


def save(df: DataFrame, cluster: LocalCluster, **options: str) -> None:
    """``df`` written with format("brook") and ``options`` (``kafka_x_y`` is ``kafka.x.y``)."""
    writer = df.write.format("brook").mode("append")
    writer = writer.option("kafka.bootstrap.servers", storage_bootstrap(cluster))
    for name, value in options.items():
        writer = writer.option(name.replace("_", "."), value)
    writer.save()


def error_text(error: BaseException) -> str:
    """The message of an exception Spark raised (its own str() needs the JVM's config)."""
    message = getattr(error, "getMessage", None)
    return str(message()) if callable(message) else str(error)


def test_every_row_is_written_once_with_its_key_value_headers_and_partition(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "rows", PARTITIONS)
    df = spark.range(ROWS).selectExpr(
        "CONCAT('key-', id) AS key",  # a string key
        "CAST(CONCAT('value-', id) AS BINARY) AS value",  # a binary value
        "CAST(id % 3 AS INT) AS partition",
        "ARRAY(NAMED_STRUCT('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers",
    )
    save(df, cluster, topic="rows")

    records = read_back(cluster, "rows", PARTITIONS)
    assert sorted((r.key, r.value, r.partition, r.headers) for r in records) == sorted(
        (f"key-{i}".encode(), f"value-{i}".encode(), i % 3, (("id", str(i).encode()),))
        for i in range(ROWS)
    )
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(ROWS // PARTITIONS))


def test_the_topic_column_routes_rows_and_the_topic_option_overrides_it(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    for topic in ("routed-even", "routed-odd", "routed-override"):
        create_topic(cluster, topic, PARTITIONS)
    df = spark.range(ROWS).selectExpr(
        "IF(id % 2 = 0, 'routed-even', 'routed-odd') AS topic",
        "CAST(id AS STRING) AS value",  # a string value, no key
    )
    save(df, cluster)
    save(df, cluster, topic="routed-override")

    def values(topic: str) -> Counter[bytes | None]:
        return Counter(r.value for r in read_back(cluster, topic, PARTITIONS))

    assert values("routed-even") == Counter(str(i).encode() for i in range(0, ROWS, 2))
    assert values("routed-odd") == Counter(str(i).encode() for i in range(1, ROWS, 2))
    overridden = read_back(cluster, "routed-override", PARTITIONS)
    assert Counter(r.value for r in overridden) == Counter(str(i).encode() for i in range(ROWS))
    assert all(r.key is None for r in overridden)


def test_keyed_rows_without_a_partition_land_where_kafkas_partitioner_puts_them(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "keyed", 6)
    df = spark.range(ROWS).selectExpr("CONCAT('k', id) AS key", "CAST(id AS STRING) AS value")
    save(df, cluster, topic="keyed")

    records = read_back(cluster, "keyed", 6)
    assert len(records) == ROWS
    assert {r.key: r.partition for r in records} == {
        f"k{i}".encode(): partition_for_key(f"k{i}".encode(), 6) for i in range(ROWS)
    }


def test_keys_land_on_the_partitions_confluent_kafka_murmur2_random_chooses(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    from confluent_kafka import Producer

    keys = [f"user-{i}".encode() for i in range(ROWS)]
    create_topic(cluster, "parity-brook", 6)
    create_topic(cluster, "parity-librdkafka", 6)
    spark_rows = spark.createDataFrame([(k, b"v") for k in keys], "key binary, value binary")
    save(spark_rows, cluster, topic="parity-brook")
    # The Java client's default partitioner (librdkafka's default is consistent_random).
    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap_servers, "partitioner": "murmur2_random"}
    )
    errors: list[Any] = []
    for key in keys:
        producer.produce(
            "parity-librdkafka", value=b"v", key=key, on_delivery=lambda e, _: errors.append(e)
        )
    assert producer.flush(30) == 0
    assert errors == [None] * ROWS

    by_spark = {r.key: r.partition for r in read_back(cluster, "parity-brook", 6)}
    by_librdkafka = {r.key: r.partition for r in read_back(cluster, "parity-librdkafka", 6)}
    assert len(by_spark) == ROWS
    assert by_spark == by_librdkafka
    assert len(set(by_spark.values())) == 6


def test_a_record_that_cannot_be_written_fails_the_job(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "three-partitions", PARTITIONS)
    df = spark.range(10).selectExpr("CAST(id AS STRING) AS value", "7 AS partition")
    with pytest.raises(Exception) as raised:
        save(df, cluster, topic="three-partitions", kafka_max_block_ms="500")
    assert "partition 7 of topic 'three-partitions' does not exist" in error_text(raised.value)
    assert read_back(cluster, "three-partitions", PARTITIONS) == []


def test_a_batch_with_a_null_topic_fails_the_job_and_sends_none_of_its_rows(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "some-rows-null", 1)
    # One Spark partition, so one Arrow batch holds every row.
    df = spark.range(0, 10, 1, 1).selectExpr(
        "IF(id = 5, NULL, 'some-rows-null') AS topic", "CAST(id AS STRING) AS value"
    )
    with pytest.raises(Exception) as raised:
        save(df, cluster)
    assert "null topic present in the data" in error_text(raised.value)
    assert read_back(cluster, "some-rows-null", 1) == []


@pytest.fixture(scope="module")
def refused(cluster: LocalCluster) -> LocalCluster:
    """The cluster, with the topic ``refused`` that refused writes must leave empty."""
    create_topic(cluster, "refused", 1)
    return cluster


# A column computed in the tasks, by each row: were any task to run, the job would fail with
# this error instead of the one expected.
TRIPWIRE = "IF(id >= 0, RAISE_ERROR('a task ran'), NULL) AS tripwire"


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (
            ["CAST(id AS STRING) AS key"],
            {"topic": "refused"},
            "Required attribute 'value' not found",
        ),
        (
            ["id AS value"],
            {"topic": "refused"},
            "value attribute type must be a string or binary, not int64",
        ),
        (
            ["CAST(id AS STRING) AS value", "CAST(id AS STRING) AS partition"],
            {"topic": "refused"},
            "partition attribute type must be a int",
        ),
        (["CAST(id AS STRING) AS value"], {}, "topic option required when no 'topic' attribute"),
        (["CAST(id AS STRING) AS value"], {"topic": "no-such-topic"}, "Topic 'no-such-topic'"),
        (
            ["CAST(id AS STRING) AS value"],
            {"topic": "refused", "kafka_acks": "1"},
            "Option 'kafka.acks' must be 'all'",
        ),
    ],
    ids=["no-value", "value-not-bytes", "partition-not-int", "no-topic", "unknown-topic", "acks"],
)
def test_a_write_that_cannot_succeed_fails_before_any_task_runs(
    spark: SparkSession,
    refused: LocalCluster,
    columns: list[str],
    options: dict[str, str],
    message: str,
) -> None:
    df = spark.range(5).selectExpr(*columns, TRIPWIRE)
    with pytest.raises(Exception) as raised:
        save(df, refused, **options)
    text = error_text(raised.value)
    assert message in text
    assert "a task ran" not in text
    assert read_back(refused, "refused", 1) == []


def test_overwrite_and_a_missing_bootstrap_fail_before_any_task_runs(
    spark: SparkSession, refused: LocalCluster
) -> None:
    df = spark.range(5).selectExpr("CAST(id AS STRING) AS value", TRIPWIRE)
    writer = df.write.format("brook").option("topic", "refused")
    with pytest.raises(Exception) as raised:
        writer.option("kafka.bootstrap.servers", storage_bootstrap(refused)).mode(
            "overwrite"
        ).save()
    assert "Save mode Overwrite is not allowed for Brook" in error_text(raised.value)
    with pytest.raises(Exception) as raised:
        df.write.format("brook").option("topic", "refused").mode("append").save()
    assert "Option 'kafka.bootstrap.servers' must be specified" in error_text(raised.value)
    assert read_back(refused, "refused", 1) == []
