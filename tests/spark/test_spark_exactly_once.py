"""The exactly-once streaming sink (brook/spark/stream_writer.py) on a real cluster (a
controller, a storage node and two coordinators, shared by the module); the output is read
with a read_committed SDK consumer, which must hold every input row exactly once.

- Without Spark: two attempts of the same partition write, the driver commits one: the
  other's rows are never visible and its transaction is fenced (nothing of the sink left
  open); a batch committed twice (Spark replaying a batch decided before the driver died) with
  other attempts' messages: its rows once, the replay's fenced. The decision, cut into
  chunks when large, reads back as written, and a write kept only in part reads as none; a
  commit that failed after recording the decision is rolled forward by Spark's abort, not
  undone; a decision recorded after abort fenced the batch, or whose ids expired, does not
  wedge the replay; a transaction aborted by an attempt reusing its id fails the batch
  undecided; another sink whose prefix begins with this one's keeps its transactions; a
  failed stray sweep does not fail the committed batch; a decision of another query (or of
  none) is no replay; spellings of one checkpoint location give one prefix.
- Real Spark (local[2,4]: a failed task is retried): a streaming query whose UDF fails the
  first attempt of one task after rows of it went through the writer; its transactional ids
  come from the run's pool (Spark's run and batch ids reach the tasks).
- The driver killed -9 between the Brook commit and Spark's commit log (the sink's test-only
  failpoint), then the same query restarted from its checkpoint: the replayed batch is
  recognised, none of its rows missing or duplicated.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Final, NoReturn

import pyarrow as pa
import pytest
from cluster_fixture import one_node_transactions_cluster, wait_until
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, StructField, StructType

from brook.client import Admin, Consumer, PreparedTransaction, Producer, TopicPartition
from brook.client import TransactionState as State
from brook.client.admin import NewTopic
from brook.client.errors import ApiError
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.spark.options import OptionError
from brook.spark.stream_writer import (
    FAILPOINT_ENV,
    DecisionError,
    ExactlyOnceStreamWriter,
    TaskTransaction,
    _Decision,
    _DecisionStore,
)

pytestmark = pytest.mark.integration

WAIT_TIMEOUT_S: Final = 120.0
VALUE_SCHEMA: Final = StructType([StructField("value", BinaryType())])
DRIVER_SCRIPT: Final = Path(__file__).with_name("eos_driver.py")
# The query runs of the tests without Spark: a replay after a restart is another run.
RUN: Final = "0000a000"
RESTARTED: Final = "0000b000"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with one_node_transactions_cluster(tmp_path_factory, "spark-eos") as started:
        yield started


@pytest.fixture(scope="module")
def expiring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Coordinators that forget a transactional id 3 s after its last transaction and keep
    at most 2000 bytes of metadata per committed offset."""
    with one_node_transactions_cluster(
        tmp_path_factory,
        "spark-eos-expiring",
        group_coordinator={
            "transactional.id.expiration.ms": "3000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
            "offset.metadata.max.bytes": "2000",
        },
    ) as started:
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
    writer: ExactlyOnceStreamWriter,
    attempt: int,
    *values: str,
    partition: int = 0,
    batch: int = 0,
    run: str = RUN,
    query: str | None = "query-1",
) -> TaskTransaction:
    return writer.write_attempt(
        _rows(*values),
        run=run,
        partition_id=partition,
        attempt_number=attempt,
        batch_id=batch,
        query_id=query,
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
    replayed = _attempt(writer, 0, "row-1", "row-2", run=RESTARTED)
    writer.commit([replayed], 0)
    writer.commit([_attempt(writer, 0, "row-3", batch=1, run=RESTARTED)], 1)
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
    writer.commit(
        [
            _attempt(writer, 0, "a", run=RESTARTED),
            _attempt(writer, 0, "b", partition=1, run=RESTARTED),
        ],
        0,
    )
    writer.abort([_attempt(writer, 0, "never", batch=1, run=RESTARTED)], 1)
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


def test_a_prefix_that_begins_another_sinks_prefix_leaves_its_transactions_alone(
    cluster: LocalCluster,
) -> None:
    """Queries with prefixes 'totals' and 'totals-prod': the first one's stray sweep must not
    fence the second one's prepared transactions."""
    _create_topic(cluster, "eos-totals", 1)
    _create_topic(cluster, "eos-totals-prod", 1)
    short = _writer(cluster, "eos-totals", "totals")
    longer = _writer(cluster, "eos-totals-prod", "totals-prod")
    waiting = _attempt(longer, 0, "prod-1", "prod-2")  # prepared; its driver not yet called
    short.commit([_attempt(short, 0, "short")], 0)
    longer.commit([waiting], 0)
    assert _committed_values(cluster, "eos-totals-prod", 1) == Counter({b"prod-1": 1, b"prod-2": 1})


def test_a_decision_recorded_after_abort_fenced_the_batch_is_replaced_by_the_replay(
    cluster: LocalCluster,
) -> None:
    """commit's OffsetCommit lands after its client gave up: Spark's abort found no decision
    and fenced the batch, then the decision appeared. The replay decides anew: its rows once."""
    topic, prefix = "eos-late", "eos-late"
    _create_topic(cluster, topic, 2)
    writer = _writer(cluster, topic, prefix)
    tasks = [_attempt(writer, 0, "late-0"), _attempt(writer, 0, "late-1", partition=1)]
    writer.abort(tasks, 0)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        _DecisionStore(admin, prefix).write(
            _Decision(0, "query-1", tuple(t.prepared for t in tasks if t.prepared is not None))
        )
    writer.commit(
        [
            _attempt(writer, 0, "late-0", run=RESTARTED),
            _attempt(writer, 0, "late-1", partition=1, run=RESTARTED),
        ],
        0,
    )
    assert _open_transactions(cluster, prefix) == []
    assert _committed_values(cluster, topic, 2) == Counter({b"late-0": 1, b"late-1": 1})


def test_a_replay_after_the_decided_ids_expired_counts_them_committed(
    expiring: LocalCluster,
) -> None:
    """The driver died after the Brook commit, before Spark's commit log, and the query is
    restarted after transactional.id.expiration.ms: the replay is recognised, its rows not
    written again."""
    topic, prefix = "eos-expired", "eos-expired"
    _create_topic(expiring, topic, 1)
    writer = _writer(expiring, topic, prefix)
    task = _attempt(writer, 0, "once")
    assert task.prepared is not None
    decided = task.prepared.transactional_id
    writer.commit([task], 0)

    def expired() -> bool:
        with Admin(expiring.controller_bootstrap_servers) as admin:
            try:
                admin.describe_transactions([decided])
            except ApiError as error:
                return error.code is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        return False

    wait_until(expired, "the decided transactional id to expire", WAIT_TIMEOUT_S, poll_s=0.5)
    writer.commit([_attempt(writer, 0, "once", run=RESTARTED)], 0)
    assert _open_transactions(expiring, prefix) == []
    assert _committed_values(expiring, topic, 1) == Counter({b"once": 1})


def test_a_decision_kept_only_in_part_is_no_decision(expiring: LocalCluster) -> None:
    """The coordinator checks each chunk's metadata on its own (2000 bytes at most here): a
    write whose full chunks are refused and whose last one is kept reads back as nothing."""
    # 6229 characters of JSON: two full chunks, and a last one of 229.
    decision = _Decision(
        7,
        "query-1",
        tuple(PreparedTransaction(f"eos-part-p{n}-a0", 10_000 + n, 3) for n in range(217)),
    )
    with Admin(expiring.controller_bootstrap_servers) as admin:
        store = _DecisionStore(admin, "eos-part")
        with pytest.raises(DecisionError, match="not recorded"):
            store.write(decision)
        kept = admin.list_consumer_group_offsets("eos-part")
        assert [tp.partition for tp in kept] == [2]
        assert store.read() is None
        # Now a complete decision of one chunk: its chunk 0 and the stale chunk of the
        # partial write do not make a decision of two chunks.
        small = _Decision(8, "query-1", decision.transactions[:2])
        store.write(small)
        assert store.read() == small


def test_a_failed_stray_sweep_does_not_fail_the_committed_batch(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep runs after the batch is committed: listing transactions failing (a
    coordinator not answering) is logged, and the next batch's sweep fences the stray."""
    topic, prefix = "eos-sweep", "eos-sweep"
    _create_topic(cluster, topic, 1)
    writer = _writer(cluster, topic, prefix)
    stray = _attempt(writer, 0, "stray")
    kept = _attempt(writer, 1, "kept")

    def unavailable(self: Admin, **_: object) -> NoReturn:
        raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "a coordinator did not answer")

    with monkeypatch.context() as patched:
        patched.setattr(Admin, "list_transactions", unavailable)
        writer.commit([kept], 0)
    assert stray.prepared is not None
    assert _open_transactions(cluster, prefix) == [stray.prepared.transactional_id]
    writer.commit([_attempt(writer, 0, "next", batch=1)], 1)
    assert _open_transactions(cluster, prefix) == []
    assert _committed_values(cluster, topic, 1) == Counter({b"kept": 1, b"next": 1})


def test_a_decision_of_another_query_is_no_replay_even_without_a_recorded_query_id(
    cluster: LocalCluster,
) -> None:
    """A decision of batch 0 recorded without a query id, then batch 0 of a query with an
    id: a new decision (its rows visible), not a roll-forward of the old one; the id, once
    known, is never recorded as None."""
    topic, prefix = "eos-query", "eos-query"
    _create_topic(cluster, topic, 1)
    writer = _writer(cluster, topic, prefix)
    old = _attempt(writer, 0, "old", query=None)
    assert old.prepared is not None
    with Admin(cluster.controller_bootstrap_servers) as admin:
        _DecisionStore(admin, prefix).write(_Decision(0, None, (old.prepared,)))
    writer.commit([_attempt(writer, 0, "new", run=RESTARTED)], 0)
    assert _open_transactions(cluster, prefix) == []
    assert _committed_values(cluster, topic, 1) == Counter({b"new": 1})
    # A batch none of whose tasks reported (no message) keeps the known query id.
    writer.commit([None], 1)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        recorded = _DecisionStore(admin, prefix).read()
    assert recorded == _Decision(1, "query-1", ())


def test_a_transaction_aborted_by_an_attempt_reusing_its_id_fails_the_batch_undecided(
    cluster: LocalCluster,
) -> None:
    """Two attempts with one id (a task of a resubmitted stage beside one of the previous
    stage attempt, both attempt 0): the later one's start aborts the earlier one's prepared
    transaction. The driver, handed the earlier one, decides nothing; Spark's replay writes
    the batch once."""
    topic, prefix = "eos-shared", "eos-shared"
    _create_topic(cluster, topic, 1)
    writer = _writer(cluster, topic, prefix)
    earlier = _attempt(writer, 0, "earlier")
    later = _attempt(writer, 0, "later")
    assert earlier.prepared is not None and later.prepared is not None
    assert earlier.prepared.transactional_id == later.prepared.transactional_id
    with pytest.raises(DecisionError, match="no longer open"):
        writer.commit([earlier], 0)
    writer.abort([earlier], 0)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert _DecisionStore(admin, prefix).read() is None
    writer.commit([_attempt(writer, 0, "replayed", run=RESTARTED)], 0)
    assert _open_transactions(cluster, prefix) == []
    assert _committed_values(cluster, topic, 1) == Counter({b"replayed": 1})


def test_spellings_of_one_checkpoint_location_give_one_prefix(tmp_path: Path) -> None:
    def prefix(location: str) -> str:
        options = {"kafka.bootstrap.servers": "-", "topic": "t", "checkpointLocation": location}
        return ExactlyOnceStreamWriter(options, VALUE_SCHEMA).prefix

    spellings = [
        str(tmp_path / "cp"),
        f"{tmp_path}/cp/",
        f"{tmp_path}/x/../cp",
        f"file:{tmp_path}/cp",
        f"file://{tmp_path}/cp/",
        os.path.relpath(tmp_path / "cp"),
    ]
    assert {prefix(s) for s in spellings} == {prefix(str(tmp_path / "cp"))}
    assert prefix("hdfs://nn/cp/") == prefix("hdfs://nn/cp") != prefix(str(tmp_path / "cp"))


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
        every = [t for t in admin.list_transactions() if t.transactional_id.startswith(prefix)]
    # The ids come from the run's pool: the tasks read the run's and the batch's ids from
    # Spark (one run; the two batches' parities).
    assert len({t.transactional_id.split("-")[-4] for t in every}) == 1, every
    assert {t.transactional_id.split("-")[-1] for t in every} == {"b0", "b1"}, every
    ours = [
        t
        for t in every
        if re.fullmatch(rf"{prefix}-r[0-9a-f]{{8}}-p{failed}-a[0-9]+-b[01]", t.transactional_id)
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
