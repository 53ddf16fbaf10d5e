"""Streaming reads through format("brook") on a real cluster and a real Spark: offsets live in
Spark's checkpoint, so a stopped and restarted query reads on with no gap and no duplicate.

- a query stopped and restarted from its checkpoint reads exactly the records written in
  between (offsets per partition contiguous, every record once); startingOffsets defaults to
  latest;
- maxOffsetsPerTrigger bounds every micro-batch; Trigger.AvailableNow stops at the offsets
  that were latest when it started, even while records keep arriving;
- a partition added to a topic and a new topic matching subscribePattern while the query
  runs are read from their first offset;
- records deleted before the query read them fail it (failOnDataLoss), and with
  failOnDataLoss=false the query goes on from the log start;
- ending options are refused in a streaming read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from brook_topics import create_topic, storage_bootstrap
from cluster_fixture import wait_until
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable
from read_helpers import add_partitions, read_cluster, write
from storage_rpc import delete_records

from brook.launcher import LocalCluster
from brook.spark.offset_ranges import DataLossError
from brook.spark.schema import source_schema
from brook.spark.stream_reader import StreamReader

pytestmark = pytest.mark.integration

QUERY_TIMEOUT_S: Final = 120
# (topic, partition, offset, value) of one row read.
Read = tuple[str, int, int, bytes]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with read_cluster(tmp_path_factory, "spark-stream-read") as started:
        yield started


def _send(cluster: LocalCluster, topic: str, partition: int, values: range) -> None:
    write(
        cluster,
        [
            {"topic": topic, "value": f"{topic}-{n}".encode(), "partition": partition}
            for n in values
        ],
    )


def _run(
    spark: SparkSession,
    cluster: LocalCluster,
    checkpoint: Path,
    on_batch: Any = None,
    **options: str,
) -> list[list[Read]]:
    """One Trigger.AvailableNow run of a query from ``checkpoint``: the rows of each of its
    micro-batches (``on_batch(batch_id)`` called after each)."""
    batches: list[list[Read]] = []

    def collect(frame: DataFrame, batch_id: int) -> None:
        batches.append(
            sorted((r.topic, r.partition, r.offset, bytes(r.value)) for r in frame.collect())
        )
        if on_batch is not None:
            on_batch(batch_id)

    stream = (
        spark.readStream.format("brook")
        .option("kafka.bootstrap.servers", storage_bootstrap(cluster))
        .options(**options)
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not stop"
    finally:
        query.stop()
    return [batch for batch in batches if batch]


def _rows(batches: list[list[Read]]) -> list[Read]:
    return sorted(row for batch in batches for row in batch)


def _expected(topic: str, partition: int, offsets: range) -> list[Read]:
    return [(topic, partition, n, f"{topic}-{n}".encode()) for n in offsets]


def test_a_restarted_query_reads_on_with_no_gap_or_duplicate(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "events", 2)
    for partition in (0, 1):
        _send(cluster, "events", partition, range(20))
    checkpoint = tmp_path / "events"
    first = _run(spark, cluster, checkpoint, subscribe="events", startingOffsets="earliest")
    assert _rows(first) == _expected("events", 0, range(20)) + _expected("events", 1, range(20))
    latest = tmp_path / "latest"
    assert _run(spark, cluster, latest, subscribe="events") == []  # startingOffsets: latest
    _send(cluster, "events", 0, range(20, 35))
    _send(cluster, "events", 1, range(20, 22))
    # startingOffsets is ignored on restart: the checkpoint says where to go on.
    second = _run(spark, cluster, checkpoint, subscribe="events", startingOffsets="earliest")
    new = _expected("events", 0, range(20, 35)) + _expected("events", 1, range(20, 22))
    assert _rows(second) == new
    assert _rows(_run(spark, cluster, latest, subscribe="events")) == new
    assert _run(spark, cluster, checkpoint, subscribe="events") == []


def test_max_offsets_per_trigger_bounds_batches_and_available_now_stops_at_its_target(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "limited", 2)
    _send(cluster, "limited", 0, range(70))
    _send(cluster, "limited", 1, range(30))
    arrived: list[int] = []

    def more_records(batch_id: int) -> None:
        # Records arriving while the query runs are past its target: not read by this run.
        _send(cluster, "limited", 0, range(70 + 5 * batch_id, 75 + 5 * batch_id))
        arrived.append(batch_id)

    batches = _run(
        spark,
        cluster,
        tmp_path / "limited",
        on_batch=more_records,
        subscribe="limited",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="25",
    )
    # Split by lag, each share rounded down as Spark does: partition 0 has 70 of the 100
    # offsets, so 17 of the first 25 (17.5), partition 1 7 (7.5).
    assert [len(batch) for batch in batches] == [24, 24, 24, 24, 4]
    assert sum(1 for row in batches[0] if row[1] == 0) == 17
    assert _rows(batches) == _expected("limited", 0, range(70)) + _expected("limited", 1, range(30))
    later = _run(spark, cluster, tmp_path / "limited", subscribe="limited")
    assert _rows(later) == _expected("limited", 0, range(70, 70 + 5 * len(arrived)))


def test_partitions_and_topics_added_while_the_query_runs_are_read_from_their_start(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "grow-a", 1)
    _send(cluster, "grow-a", 0, range(5))
    read: list[Read] = []

    def collect(frame: DataFrame, batch_id: int) -> None:
        read.extend((r.topic, r.partition, r.offset, bytes(r.value)) for r in frame.collect())

    stream = (
        spark.readStream.format("brook")
        .option("kafka.bootstrap.servers", storage_bootstrap(cluster))
        .option("subscribePattern", "grow-.*")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "grow"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(read) >= 5, "the first records", QUERY_TIMEOUT_S)
        add_partitions(cluster, "grow-a", 2)
        _send(cluster, "grow-a", 1, range(3))
        create_topic(cluster, "grow-b", 1)
        _send(cluster, "grow-b", 0, range(4))
        create_topic(cluster, "other", 1)
        _send(cluster, "other", 0, range(2))
        wait_until(lambda: len(read) >= 12, "the new partitions' records", QUERY_TIMEOUT_S)
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted(read) == _expected("grow-a", 0, range(5)) + _expected(
        "grow-a", 1, range(3)
    ) + _expected("grow-b", 0, range(4))


def test_deleted_records_fail_the_query_or_are_skipped(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "retention"
    options = {"subscribe": "retention", "startingOffsets": "earliest"}
    create_topic(cluster, "retention", 1)
    _send(cluster, "retention", 0, range(10))
    first = _run(spark, cluster, checkpoint, **options)
    assert _rows(first) == _expected("retention", 0, range(10))
    _send(cluster, "retention", 0, range(10, 30))
    assert delete_records(cluster, "retention", 0, 20) == 20
    with pytest.raises(PySparkException, match="retention-0: offsets 10 to 19 are no longer"):
        _run(spark, cluster, checkpoint, **options)
    lenient = _run(spark, cluster, checkpoint, failOnDataLoss="false", **options)
    assert _rows(lenient) == _expected("retention", 0, range(20, 30))


def test_ending_options_are_refused_in_a_streaming_read(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "ending", 1)
    with pytest.raises(PySparkException, match="endingOffsets is not valid in streaming"):
        _run(spark, cluster, tmp_path / "ending", subscribe="ending", endingOffsets="latest")


def test_offsets_that_went_back_fail_the_query_or_are_read_again_from_the_log_start(
    cluster: LocalCluster,
) -> None:
    """A checkpoint past a partition's latest offset (the topic was recreated, or its log
    truncated): Spark's data loss, not a query that silently waits for the old offset."""
    create_topic(cluster, "went-back", 1)
    _send(cluster, "went-back", 0, range(5))
    options = {"kafka.bootstrap.servers": storage_bootstrap(cluster), "subscribe": "went-back"}
    schema = source_schema(include_headers=False)
    start = {"went-back": {"0": 100}}
    strict = StreamReader(options, schema)
    try:
        with pytest.raises(DataLossError, match="went-back-0's offset was changed from 100 to 5"):
            strict.latestOffset(start, ReadAllAvailable())
    finally:
        strict.stop()
    lenient = StreamReader({**options, "failOnDataLoss": "false"}, schema)
    try:
        end = lenient.latestOffset(start, ReadAllAvailable())
        assert end == {"went-back": {"0": 5}}
        [whole] = lenient.partitions(start, end)
        batches = list(lenient.read(whole))
    finally:
        lenient.stop()
    offsets = [o for batch in batches for o in batch.column("offset").to_pylist()]
    assert offsets == [0, 1, 2, 3, 4]
