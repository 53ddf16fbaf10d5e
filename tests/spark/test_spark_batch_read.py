"""Batch reads through format("brook") on a real cluster and a real Spark: what the SDK wrote
is what a read of its offsets returns, every record once.

- exact offset ranges (JSON, -2/-1, defaults) return exactly the SDK's records with their
  keys, values, headers, timestamps, partitions and offsets, compressed batches included;
- minPartitions splits the ranges into more Spark partitions with the same rows;
- the timestamp options start and end where the records' timestamps say;
- read_committed hides an aborted transaction (read_uncommitted shows it), no marker is a row;
- records deleted below the range's start fail the read (failOnDataLoss) or are skipped;
- bad options fail while Spark plans the query, with Spark's message, before any task.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Final

import pytest
from brook_topics import create_topic, storage_bootstrap
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from read_helpers import Row, read_cluster, reader, rows, write
from storage_rpc import delete_records

from brook.client import Producer
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

BASE_MS: Final = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with read_cluster(tmp_path_factory, "spark-batch-read") as started:
        yield started


def _records(topic: str, partitions: int, count: int, first: int = 0) -> list[dict[str, object]]:
    return [
        {
            "topic": topic,
            "value": f"value-{n}".encode() * (1 + n % 3),
            "key": None if n % 5 == 0 else f"key-{n}".encode(),
            "headers": [("n", str(n).encode()), ("none", None)] if n % 2 else [],
            "partition": n % partitions,
            "timestamp": BASE_MS + n * 1000,
        }
        for n in range(first, first + count)
    ]


@pytest.fixture(scope="module")
def written(cluster: LocalCluster) -> list[Row]:
    """300 records on the three partitions of 'exact': half plain, half lz4-compressed."""
    create_topic(cluster, "exact", 3)
    records = _records("exact", 3, 300)
    return write(cluster, records[:150]) + write(cluster, records[150:], compression_type="lz4")


def _by_partition(written: list[Row], partition: int) -> list[Row]:
    return [row for row in written if row[3] == partition]


def test_exact_offset_ranges_return_exactly_what_the_sdk_wrote(
    spark: SparkSession, cluster: LocalCluster, written: list[Row]
) -> None:
    assert rows(reader(spark, cluster, subscribe="exact", includeHeaders="true").load()) == sorted(
        written, key=lambda r: (r[3], r[4])
    )
    starting = {"exact": {"0": 10, "1": -2, "2": 30}}
    ending = {"exact": {"0": 90, "1": 55, "2": -1}}
    frame = reader(
        spark,
        cluster,
        subscribe="exact",
        includeHeaders="true",
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    ).load()
    expected = (
        [r for r in _by_partition(written, 0) if 10 <= r[4] < 90]
        + [r for r in _by_partition(written, 1) if r[4] < 55]
        + [r for r in _by_partition(written, 2) if r[4] >= 30]
    )
    assert rows(frame) == sorted(expected, key=lambda r: (r[3], r[4]))
    without_headers = reader(spark, cluster, assign=json.dumps({"exact": [2]})).load()
    assert without_headers.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert [r[:7] for r in rows(without_headers)] == [r[:7] for r in _by_partition(written, 2)]


def test_min_partitions_splits_the_ranges_with_the_same_rows(
    spark: SparkSession, cluster: LocalCluster, written: list[Row]
) -> None:
    plain = reader(spark, cluster, subscribe="exact")
    split = reader(spark, cluster, subscribe="exact", minPartitions="6")
    assert plain.load().rdd.getNumPartitions() == 3
    assert split.load().rdd.getNumPartitions() == 6
    assert rows(split.load()) == rows(plain.load())
    assert len(rows(split.load())) == len(written)


def test_timestamp_options_pick_the_offsets_of_those_timestamps(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "times", 1)
    write(cluster, _records("times", 1, 40))  # record n: offset n, timestamp BASE + n s
    frame = reader(
        spark,
        cluster,
        subscribe="times",
        startingTimestamp=str(BASE_MS + 10_000),
        endingTimestamp=str(BASE_MS + 19_500),
        # startingTimestamp wins over both (Spark's precedence).
        startingOffsetsByTimestamp=json.dumps({"times": {"0": BASE_MS}}),
        startingOffsets="earliest",
    ).load()
    assert [r[4] for r in rows(frame)] == list(range(10, 20))
    by_partition = reader(
        spark,
        cluster,
        subscribe="times",
        startingOffsetsByTimestamp=json.dumps({"times": {"0": BASE_MS + 35_000}}),
    ).load()
    assert [r[4] for r in rows(by_partition)] == list(range(35, 40))
    future = str(BASE_MS + 10**9)
    with pytest.raises(PySparkException, match="No offset matched the timestamp"):
        reader(spark, cluster, subscribe="times", startingTimestamp=future).load().collect()
    latest = reader(
        spark,
        cluster,
        subscribe="times",
        startingTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    ).load()
    assert latest.count() == 0


def test_read_committed_hides_an_aborted_transaction(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "txn", 1)
    with Producer(
        {
            "bootstrap.servers": storage_bootstrap(cluster),
            "transactional.id": "spark-read",
            "linger.ms": 0,
        }
    ) as producer:
        producer.init_transactions(30)
        for outcome in ("commit", "abort", "commit"):
            producer.begin_transaction()
            for n in range(5):
                producer.send("txn", f"{outcome}-{n}".encode(), partition=0)
            producer.flush(30)  # the aborted records are in the log, not dropped unsent
            if outcome == "commit":
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    committed = reader(
        spark, cluster, subscribe="txn", **{"kafka.isolation.level": "read_committed"}
    )
    assert [r[1] for r in rows(committed.load())] == [f"commit-{n}".encode() for n in range(5)] * 2
    everything = rows(reader(spark, cluster, subscribe="txn").load())
    assert [r[1] for r in everything] == [
        f"{outcome}-{n}".encode() for outcome in ("commit", "abort", "commit") for n in range(5)
    ]
    # Three markers among the offsets, none of them a row.
    assert [r[4] for r in everything] == [*range(5), *range(6, 11), *range(12, 17)]
    with Producer(
        {
            "bootstrap.servers": storage_bootstrap(cluster),
            "transactional.id": "spark-open",
            "linger.ms": 0,
        }
    ) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        for n in range(3):
            producer.send("txn", f"open-{n}".encode(), partition=0)
        producer.flush(30)
        # read_committed ends at the last stable offset, before the open transaction.
        assert len(rows(committed.load())) == 10
        assert len(rows(reader(spark, cluster, subscribe="txn").load())) == 18
        producer.abort_transaction(30)


def test_deleted_records_fail_the_read_or_are_skipped(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "deleted", 1)
    write(cluster, _records("deleted", 1, 20))
    assert delete_records(cluster, "deleted", 0, 12) == 12
    from_zero = json.dumps({"deleted": {"0": 0}})
    with pytest.raises(
        PySparkException, match=r"deleted-0: offsets 0 to 11 are no longer in Brook"
    ):
        reader(spark, cluster, subscribe="deleted", startingOffsets=from_zero).load().collect()
    lenient = reader(
        spark, cluster, subscribe="deleted", startingOffsets=from_zero, failOnDataLoss="false"
    ).load()
    assert [r[4] for r in rows(lenient)] == list(range(12, 20))
    assert [r[4] for r in rows(reader(spark, cluster, subscribe="deleted").load())] == list(
        range(12, 20)
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "exact", "assign": '{"exact":[0]}'}, 'Only one of "assign", "subscribe"'),
        ({}, "One of the following options must be specified"),
        ({"subscribe": "no-such-topic"}, r"Topic\(s\) no-such-topic do not exist"),
        ({"assign": '{"exact":[0,7]}'}, "names partitions that do not exist: exact-7"),
        ({"subscribe": "exact", "startingOffsets": '{"exact":{"0":'}, "Expected e.g."),
        ({"subscribe": "exact", "endingOffsets": "earliest"}, "can't be earliest"),
        ({"subscribe": "exact", "startingOffsets": "latest"}, "can't be latest"),
        (
            {"subscribe": "exact", "startingOffsets": '{"exact":{"0":1}}'},
            "must name every subscribed partition",
        ),
        ({"subscribe": "exact", "kafka.isolation.level": "dirty"}, "isolation.level"),
        ({"subscribe": "exact", "minPartitions": "0"}, "must be a positive integer"),
        ({"subscribe": "exact", "kafka.auto.offset.reset": "earliest"}, "is not supported"),
    ],
)
def test_bad_options_fail_before_any_task_runs(
    spark: SparkSession,
    cluster: LocalCluster,
    written: list[Row],
    options: dict[str, str],
    message: str,
) -> None:
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup())
    started = time.monotonic()
    with pytest.raises(PySparkException, match=message) as raised:
        reader(spark, cluster, **options).load().collect()
    assert "OptionError" in str(raised.value)
    assert len(tracker.getJobIdsForGroup()) == jobs_before, "a Spark job ran"
    assert time.monotonic() - started < 30
