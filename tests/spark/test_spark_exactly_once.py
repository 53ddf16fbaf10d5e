"""The exactly-once streaming sink (brook/spark/stream_writer.py) on a real cluster (a
controller, a storage node and two coordinators, shared by the module); the output is read
with a read_committed SDK consumer, which must hold every input row exactly once.

- Without Spark: two attempts of the same partition write, the driver commits one: the
  other's rows are never visible and its transaction is fenced (nothing of the sink left
  open); a batch committed twice (Spark replaying a batch decided before the driver died) with
  other attempts' messages: its rows once, the replay's fenced. The decision, cut into
  chunks when large, reads back as written; a commit that failed after recording the decision
  is rolled forward by Spark's abort, not undone.
- Real Spark (local[2,4]: a failed task is retried): a streaming query whose UDF fails the
  first attempt of one task after rows of it went through the writer.
- The driver killed -9 between the Brook commit and Spark's commit log (the sink's test-only
  failpoint), then the same query restarted from its checkpoint: the replayed batch is
  recognised, none of its rows missing or duplicated.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pyarrow as pa
import pytest
from cluster_fixture import one_node_transactions_cluster, wait_until
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, StructField, StructType

from brook.client import Admin, Consumer, PreparedTransaction, Producer, TopicPartition
from brook.client import TransactionState as State
from brook.client.admin import NewTopic
from brook.launcher import LocalCluster, Role
from brook.spark.options import OptionError
from brook.spark.stream_writer import (
    FAILPOINT_ENV,
    ExactlyOnceStreamWriter,
    TaskTransaction,
    _Decision,
    _DecisionStore,
)

pytestmark = pytest.mark.integration

WAIT_TIMEOUT_S: Final = 120.0
VALUE_SCHEMA: Final = StructType([StructField("value", BinaryType())])
DRIVER_SCRIPT: Final = Path(__file__).with_name("eos_driver.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with one_node_transactions_cluster(tmp_path_factory, "spark-eos") as started:
        yield started


def _create_topic(cluster: LocalCluster, topic: str, partitions: int) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, partitions, 1)]) == {topic: None}


def _committed_values(cluster: LocalCluster, topic: str, partitions: int) -> Counter[bytes]:
    """Every value read_committed reads from ``topic``: a plain "end" record is appended to
    each partition first, and read up to it (anything before it that will ever be visible
    is then)."""
    storage = cluster.bootstrap_servers(Role.STORAGE_NODE)
    with Producer(bootstrap_servers=storage) as producer:
        for partition in range(partitions):
            producer.send(topic, b"end", partition=partition)
        producer.flush(30)
    values: Counter[bytes] = Counter()
    with Consumer(
        {
            "bootstrap.servers": storage,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while values[b"end"] < partitions:
            assert time.monotonic() < deadline, f"the end of {topic} was never read"
            values.update(r.value for r in consumer.poll(0.5) if r.value is not None)
    del values[b"end"]
    return values


def _open_transactions(cluster: LocalCluster, prefix: str) -> list[str]:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        return [
            t.transactional_id
            for t in admin.list_transactions(states=[State.ONGOING])
            if t.transactional_id.startswith(prefix)
        ]


def _writer(cluster: LocalCluster, topic: str, prefix: str) -> ExactlyOnceStreamWriter:
    return ExactlyOnceStreamWriter(
        {
            "kafka.bootstrap.servers": cluster.bootstrap_servers(Role.STORAGE_NODE),
            "topic": topic,
            "transactionalIdPrefix": prefix,
        },
        VALUE_SCHEMA,
    )


def _rows(*values: str) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"value": [v.encode() for v in values]})


def _attempt(
    writer: ExactlyOnceStreamWriter, attempt: int, *values: str, partition: int = 0
) -> TaskTransaction:
    return writer.write_attempt(
        _rows(*values), partition_id=partition, attempt_number=attempt, query_id="query-1"
    )


def test_the_sink_needs_a_prefix_or_a_checkpoint_location() -> None:
    with pytest.raises(OptionError, match="transactionalIdPrefix"):
        ExactlyOnceStreamWriter(
            {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}, VALUE_SCHEMA
        )
    named = ExactlyOnceStreamWriter(
        {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", "checkpointLocation": "/cp"},
        VALUE_SCHEMA,
    )
    assert named.prefix.startswith("brook-spark-")


def test_only_the_committed_attempt_is_visible_and_a_replayed_batch_is_written_once(
    cluster: LocalCluster,
) -> None:
    topic, prefix = "eos-attempts", "eos-attempts"
    _create_topic(cluster, topic, 1)
    writer = _writer(cluster, topic, prefix)

    lost = _attempt(writer, 0, "lost-1", "lost-2")  # an attempt whose message Spark drops
    kept = _attempt(writer, 1, "row-1", "row-2")
    assert _open_transactions(cluster, prefix) != []
    writer.commit([kept, None], 0)
    assert _open_transactions(cluster, prefix) == []
    assert lost.prepared is not None
    with Admin(cluster.controller_bootstrap_servers) as admin:
        fenced = admin.describe_transactions([lost.prepared.transactional_id])
        assert fenced[lost.prepared.transactional_id].producer_epoch > lost.prepared.producer_epoch

    # Spark replays batch 0 (its decision was made, the driver died before its commit log).
    replayed = _attempt(writer, 0, "row-1", "row-2")
    writer.commit([replayed], 0)
    writer.commit([_attempt(writer, 0, "row-3")], 1)
    assert _open_transactions(cluster, prefix) == []
    assert _committed_values(cluster, topic, 1) == Counter({b"row-1": 1, b"row-2": 1, b"row-3": 1})


def test_an_abort_after_the_decision_was_recorded_rolls_it_forward(
    cluster: LocalCluster,
) -> None:
    """Spark calls abort when commit raised; if the decision was recorded by then, the batch
    is committed (and its replay recognised), never half undone."""
    topic, prefix = "eos-abort", "eos-abort"
    _create_topic(cluster, topic, 1)
    writer = _writer(cluster, topic, prefix)
    first, second = _attempt(writer, 0, "a"), _attempt(writer, 0, "b", partition=1)
    assert first.prepared is not None and second.prepared is not None
    with Admin(cluster.controller_bootstrap_servers) as admin:
        # commit got as far as the decision and the first transaction, then failed.
        _DecisionStore(admin, prefix).write(
            _Decision(0, "query-1", (first.prepared, second.prepared))
        )
        admin.complete_transaction(first.prepared, commit=True)
    writer.abort([first, second], 0)
    writer.commit([_attempt(writer, 0, "a"), _attempt(writer, 0, "b", partition=1)], 0)
    writer.abort([_attempt(writer, 0, "never")], 1)
    assert _open_transactions(cluster, prefix) == []
    assert _committed_values(cluster, topic, 1) == Counter({b"a": 1, b"b": 1})


def test_a_large_decision_is_recorded_in_chunks_and_read_back(cluster: LocalCluster) -> None:
    decision = _Decision(
        41,
        "query-9",
        tuple(PreparedTransaction(f"eos-big-p{n}-a0-{n:08x}", 10_000 + n, 3) for n in range(300)),
    )
    with Admin(cluster.controller_bootstrap_servers) as admin:
        store = _DecisionStore(admin, "eos-big")
        assert store.read() is None
        store.write(decision)
        assert store.read() == decision
        smaller = _Decision(42, "query-9", decision.transactions[:2])
        store.write(smaller)  # fewer chunks than before: the old ones are not read
        assert store.read() == smaller
        chunks = admin.list_consumer_group_offsets("eos-big")
        assert len(chunks) > 1


# -- real Spark ------------------------------------------------------------------------------


def _input_files(directory: Path, files: int, rows_per_file: int) -> set[bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    values = set()
    for f in range(files):
        lines = [f"row-{f}-{n}" for n in range(rows_per_file)]
        (directory / f"part-{f}.txt").write_text("\n".join(lines) + "\n")
        values |= {line.encode() for line in lines}
    return values


def test_a_task_failing_on_its_first_attempt_leaves_every_row_exactly_once(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = "eos-spark-retry"
    _create_topic(cluster, topic, 2)
    expected = _input_files(tmp_path / "in", 4, 50)
    marks = tmp_path / "failed-once"
    marks.mkdir()

    def fail_first_attempt(value: str) -> bytes:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        # Row 30 of part 1: the task's writer has sent the rows before it by then.
        if value == "row-1-30" and context.attemptNumber() == 0:
            (marks / f"p{context.partitionId()}").touch()
            raise RuntimeError("the first attempt of this task fails")
        return value.encode()

    from pyspark.sql.functions import udf

    # A lambda: no type hints for PySpark to try inferring a pandas UDF from.
    failing = udf(lambda value: fail_first_attempt(value), BinaryType())
    checkpoint = str(tmp_path / "checkpoint")
    # Small Arrow batches, so that the writer has sent rows when the UDF fails.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    query = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 2)
        .load(str(tmp_path / "in"))
        .select(failing("value").alias("value"))
        .writeStream.format("brook")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers(Role.STORAGE_NODE))
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(int(WAIT_TIMEOUT_S)), "the query did not finish in time"
        assert query.exception() is None
    finally:
        query.stop()
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    [failed] = [int(mark.name[1:]) for mark in marks.iterdir()]
    # The failed attempt had opened its transaction (rows went through its writer); the
    # retry's is the one committed, the failed one was fenced.
    prefix = ExactlyOnceStreamWriter(
        {"kafka.bootstrap.servers": "-", "topic": topic, "checkpointLocation": checkpoint},
        VALUE_SCHEMA,
    ).prefix
    with Admin(cluster.controller_bootstrap_servers) as admin:
        ours = [
            t
            for t in admin.list_transactions()
            if t.transactional_id.startswith(f"{prefix}-p{failed}-")
        ]
    attempts = {t.transactional_id.split("-")[-2]: t.state for t in ours}
    assert set(attempts) >= {"a0", "a1"}, attempts
    assert State.ONGOING not in attempts.values()
    _assert_exactly_once(cluster, topic, expected)


def test_a_driver_killed_after_the_brook_commit_resumes_without_loss_or_duplicates(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = "eos-spark-driver"
    _create_topic(cluster, topic, 2)
    expected = _input_files(tmp_path / "in", 3, 40)
    failpoint = tmp_path / "failpoint"
    failpoint.mkdir()
    arguments = [
        sys.executable,
        str(DRIVER_SCRIPT),
        cluster.bootstrap_servers(Role.STORAGE_NODE),
        topic,
        str(tmp_path / "in"),
        str(tmp_path / "checkpoint"),
        str(tmp_path / "scratch"),
    ]

    first = subprocess.Popen(
        arguments, env={**os.environ, FAILPOINT_ENV: str(failpoint)}, start_new_session=True
    )
    try:
        wait_until(
            lambda: any(failpoint.iterdir()) or first.poll() is not None,
            "the driver to reach the failpoint after its first Brook commit",
            WAIT_TIMEOUT_S,
            poll_s=0.2,
        )
        assert first.poll() is None, f"the driver exited with {first.returncode}"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        _kill_group(first)
    assert [p.name for p in failpoint.iterdir()] == ["committed-0"]

    second = subprocess.Popen(arguments, start_new_session=True)
    try:
        assert second.wait(WAIT_TIMEOUT_S * 2) == 0
    finally:
        _kill_group(second)
    _assert_exactly_once(cluster, topic, expected)


def _assert_exactly_once(cluster: LocalCluster, topic: str, expected: set[bytes]) -> None:
    written = _committed_values(cluster, topic, 2)
    assert set(written) == expected, "rows missing or foreign"
    assert set(written.values()) == {1}, "rows duplicated"


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)
