"""The exactly-once streaming sink (df.writeStream.format("brook")): tasks write two-phase
transactions, the driver's commit decides, the batch id is recorded.

Each task attempt writes its rows in a two-phase transaction (KIP-939,
``transaction.two.phase.commit.enable``) under the transactional id
``{prefix}-r{run}-p{partition}-a{attempt}-b{batch % 2}`` (run: a hash of the query run's id,
new at every start of the query): concurrent attempts of a partition have distinct attempt
numbers, so retried and speculative attempts never fence each other; a replay after a restart
is another run, so it never touches the ids of the decision it replays; within a run the ids
are a bounded pool, reused two batches later, when Spark has the earlier batch in its commit
log and its decision is no longer needed (the reuse's InitProducerId fences whatever is still
open under the id and keeps its producer id). It prepares the transaction and hands
(transactional id, producer id, epoch, rows) to the driver as its commit message. Nothing it
wrote is visible yet.

The driver's ``commit(messages, batch_id)`` decides, and records the decision before acting on
it: the decision D = {batch, query, transactions} is the committed offsets' metadata of the
consumer group ``{prefix}`` (``_DecisionStore``). If D is already this batch's (Spark replays a
batch whose decision was made before the driver died, before Spark's commit log recorded it),
D is rolled forward (its transactions committed again: EndTxn is idempotent; an id expired
since was committed) and the replay's own transactions are fenced (their rows are the
duplicates) — unless every transaction of D was fenced (D was recorded late, after ``abort``
had found no decision and fenced the batch): then none was committed, and D is replaced.
Otherwise D(batch) is written first, then every transaction of ``messages`` is committed.
Either way, open transactions of the sink's id shape that are not in the decision (failed,
speculative or zombie attempts) are then fenced, best effort (the next batch sweeps again).
``abort`` fences the batch's transactions and the strays, except those of a decision already
made for the batch (Spark calls ``abort`` when ``commit`` raised after writing it: they are
rolled forward instead, and Spark's replay of the batch is then recognised).

``transactionalIdPrefix`` defaults to ``brook-spark-`` and a hash of ``checkpointLocation``
(normalised); one of them is required. Two queries must not share a prefix.

Test-only failpoint: when the environment variable ``BROOK_SPARK_SINK_FAILPOINT`` names a
directory, ``commit`` writes ``committed-{batch_id}`` there once the batch is committed in
Brook, then blocks (at most ``FAILPOINT_BLOCK_S``), so a test can kill the driver between the
Brook commit and Spark's commit log. Unset, it does nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from brook.client import (
    Admin,
    ApiError,
    PreparedTransaction,
    Producer,
    TopicPartition,
    TransactionState,
    channel_security,
)
from brook.client.admin import OffsetAndMetadata
from brook.client.security import SECURITY_KEY_NAMES
from brook.errors import ErrorCode
from brook.spark.arrow_writes import check_write_schema, send_arrow_batch
from brook.spark.options import OptionError, client_config, option

__all__ = [
    "FAILPOINT_BLOCK_S",
    "FAILPOINT_ENV",
    "DecisionError",
    "ExactlyOnceStreamWriter",
    "TaskTransaction",
]

_log = logging.getLogger(__name__)

PREFIX_OPTION: Final = "transactionalIdPrefix"
FAILPOINT_ENV: Final = "BROOK_SPARK_SINK_FAILPOINT"
FAILPOINT_BLOCK_S: Final = 120.0
# Spark's local properties of a streaming query's jobs (StreamExecution.QUERY_ID_KEY): the
# query's id, kept in its checkpoint, so the same across restarts.
_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
# The run's id (StreamExecution sets the job group of each of a run's jobs to its runId, new
# at every start of the query) and the micro-batch's id (MicroBatchExecution.BATCH_ID_KEY).
_RUN_ID_PROPERTY: Final = "spark.jobGroup.id"
_BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
# What write_attempt appends to the prefix: run, partition, attempt, batch parity.
_ID_SUFFIX: Final = r"-r[0-9a-f]{8}-p[0-9]+-a[0-9]+-b[01]"
# The decision's pseudo-topic in the group's committed offsets, and the JSON characters per
# chunk: with its header (decision id, batch, index, count: under 100 characters), a chunk's
# metadata stays below the coordinators' default offset.metadata.max.bytes, 4096 (the JSON
# is ASCII: json.dumps escapes the rest).
_DECISION_TOPIC: Final = "brook-spark-sink-decision"
_CHUNK_CHARS: Final = 3000
_TASK_TIMEOUT_S: Final = 120.0


class DecisionError(RuntimeError):
    """The sink cannot keep its guarantee: a decided transaction was aborted (rows would be
    lost), a batch's transaction was aborted before the decision (the batch is not decided:
    it fails, and is replayed), or the recorded decision cannot be read or written."""


@dataclass(frozen=True)
class TaskTransaction(WriterCommitMessage):
    """A task attempt's commit message: its prepared transaction (None: it wrote no rows),
    how many rows it holds, and the streaming query's id (None outside a query)."""

    prepared: PreparedTransaction | None
    rows: int
    query_id: str | None


@dataclass(frozen=True)
class _Decision:
    batch: int
    query_id: str | None
    transactions: tuple[PreparedTransaction, ...]


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """Options: ``kafka.bootstrap.servers`` (and ``kafka.*`` producer settings), ``topic``,
    ``transactionalIdPrefix`` or ``checkpointLocation``. Checked here, on the driver."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self._client = client_config(options)
        self._topic = option(options, "topic")
        check_write_schema(to_arrow_schema(schema), default_topic=self._topic)
        self.prefix = _prefix(options)

    # -- tasks ------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskTransaction:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("ExactlyOnceStreamWriter.write runs in a Spark task")
        run_id = context.getLocalProperty(_RUN_ID_PROPERTY)
        batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY)
        if run_id is None or batch_id is None:
            # Not a micro-batch of a streaming query run as Spark runs them: an id of this
            # attempt's own (never shared, never reused).
            _log.warning("no streaming run or batch id in the task: a transactional id of its own")
            run_id, batch_id = uuid.uuid4().hex, "0"
        return self.write_attempt(
            iterator,
            run=hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:8],
            partition_id=context.partitionId(),
            attempt_number=context.attemptNumber(),
            batch_id=int(batch_id),
            query_id=context.getLocalProperty(_QUERY_ID_PROPERTY),
        )

    def write_attempt(
        self,
        iterator: Iterator[pa.RecordBatch],
        *,
        run: str,
        partition_id: int,
        attempt_number: int,
        batch_id: int,
        query_id: str | None,
    ) -> TaskTransaction:
        """One task attempt's write: its rows in a two-phase transaction, prepared (not
        visible) and described in the returned message. On any failure the transaction is
        aborted and the error raised. The producer is closed without ending the prepared
        transaction: the driver decides it. ``run`` (8 hex digits) names the query's run;
        the transactional id is ``{prefix}-r{run}-p{partition}-a{attempt}-b{batch % 2}``
        (see the module's docstring)."""
        if not re.fullmatch("[0-9a-f]{8}", run):
            raise ValueError(f"run must be 8 hex digits, not {run!r}")
        transactional_id = f"{self.prefix}-r{run}-p{partition_id}-a{attempt_number}-b{batch_id % 2}"
        producer: Producer | None = None
        rows = 0
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                if producer is None:
                    producer = self._producer(transactional_id)
                    producer.init_transactions()
                    producer.begin_transaction()
                rows += send_arrow_batch(producer, batch, default_topic=self._topic)
            prepared = None if producer is None else producer.prepare_transaction()
        except BaseException:
            if producer is not None:
                try:
                    producer.abort_transaction()
                except Exception:  # the coordinator or the next commit's sweep ends it
                    _log.warning("aborting %s failed", transactional_id, exc_info=True)
                producer.close(0)
            raise
        if producer is not None:
            producer.close(_TASK_TIMEOUT_S)
        return TaskTransaction(prepared, rows, query_id)

    def _producer(self, transactional_id: str) -> Producer:
        """A two-phase transactional producer for one task attempt."""
        return Producer(
            {
                **self._client,
                "transactional.id": transactional_id,
                "transaction.two.phase.commit.enable": True,
            }
        )

    # -- the driver ---------------------------------------------------------------------------

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Decides batch ``batchId``: its transactions committed, exactly once across replays
        (see the module's docstring)."""
        tasks = _tasks(messages)
        with self._admin() as admin:
            store = _DecisionStore(admin, self.prefix)
            decided = store.read()
            query_id = _query_id(tasks)
            if (
                decided is not None
                and _is_replay(decided, batchId, query_id)
                and _roll_forward(admin, decided)
            ):
                _log.info("batch %d was decided before: rolled it forward", batchId)
                replayed = {p.transactional_id for p in decided.transactions}
                for task in tasks:
                    if task.prepared is not None and task.prepared.transactional_id not in replayed:
                        admin.fence_transactional_id(task.prepared.transactional_id)
            else:
                # A batch whose tasks report no query id (none of them ran) keeps the id
                # recorded before: a known id is never replaced by None.
                if query_id is None and decided is not None:
                    query_id = decided.query_id
                decided = _Decision(
                    batchId,
                    query_id,
                    tuple(t.prepared for t in tasks if t.prepared is not None),
                )
                _check_open(admin, decided)
                store.write(decided)
                _commit_all(admin, decided)
            _failpoint(batchId)
            self._fence_strays(admin, decided)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """The batch failed: its transactions and the strays are fenced, except those of a
        decision already recorded for it (``commit`` failed after writing it), which are
        committed."""
        tasks = _tasks(messages)
        with self._admin() as admin:
            decided = _DecisionStore(admin, self.prefix).read()
            query_id = _query_id(tasks)
            if (
                decided is not None
                and _is_replay(decided, batchId, query_id)
                and _roll_forward(admin, decided)
            ):
                kept = decided
            else:
                kept = _Decision(batchId, query_id, ())
            decided_ids = {p.transactional_id for p in kept.transactions}
            for task in tasks:
                if task.prepared is not None and task.prepared.transactional_id not in decided_ids:
                    admin.fence_transactional_id(task.prepared.transactional_id)
            self._fence_strays(admin, kept)

    def _fence_strays(self, admin: Admin, decided: _Decision) -> None:
        """Fences the open transactions of this sink's attempts (ids of exactly the shape
        ``write_attempt`` makes) that ``decided`` does not hold: attempts that failed, lost
        to another (speculation) or were replayed. Best effort: the batch is decided and
        committed by now, so a failure is logged and the next batch's sweep tries again."""
        kept = {p.transactional_id for p in decided.transactions}
        ours = re.compile(re.escape(self.prefix) + _ID_SUFFIX)
        try:
            for listed in admin.list_transactions(states=[TransactionState.ONGOING]):
                if ours.fullmatch(listed.transactional_id) and listed.transactional_id not in kept:
                    _log.info("fencing stray transaction %s", listed.transactional_id)
                    admin.fence_transactional_id(listed.transactional_id)
        except Exception:  # the next batch sweeps again
            _log.warning(
                "batch %d: fencing the stray transactions of %r failed; the next batch "
                "sweeps again",
                decided.batch,
                self.prefix,
                exc_info=True,
            )

    def _admin(self) -> Admin:
        """The driver's admin client: it finds the coordinators through the storage nodes
        (``kafka.bootstrap.servers``, as every Brook source and sink), as securely as the
        sink's producers (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``)."""
        security = channel_security(
            {name: value for name, value in self._client.items() if name in SECURITY_KEY_NAMES}
        )
        return Admin(
            self._client["bootstrap.servers"], bootstrap_role="storage_node", security=security
        )


def _prefix(options: Mapping[str, str]) -> str:
    given = option(options, PREFIX_OPTION)
    if given is not None:
        if not given.strip():
            raise OptionError(f"Option '{PREFIX_OPTION}' must not be empty")
        return given.strip()
    checkpoint = option(options, "checkpointLocation")
    if checkpoint is None or not checkpoint.strip():
        raise OptionError(
            f"The exactly-once Brook sink needs option '{PREFIX_OPTION}' or "
            "'checkpointLocation' (its transactional ids and recorded decisions are named "
            "after one of them)"
        )
    digest = hashlib.sha256(_normal_location(checkpoint).encode("utf-8")).hexdigest()[:16]
    return f"brook-spark-{digest}"


def _normal_location(location: str) -> str:
    """``location`` spelled one way: a local path (plain or ``file:``/``file://``) made
    absolute and normalised; any other URI kept; no trailing slash."""
    text = location.strip()
    for scheme in ("file://", "file:"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
            break
    else:
        if "://" in text:
            return text.rstrip("/")
    return os.path.normpath(os.path.abspath(text))


def _tasks(messages: Iterable[WriterCommitMessage | None]) -> list[TaskTransaction]:
    tasks = []
    for message in messages:
        if message is None:
            continue
        if not isinstance(message, TaskTransaction):
            raise TypeError(f"not a commit message of the Brook sink: {message!r}")
        tasks.append(message)
    return tasks


def _query_id(tasks: Sequence[TaskTransaction]) -> str | None:
    """The streaming query's id, as the tasks report it (None: none of them does)."""
    return next((t.query_id for t in tasks if t.query_id is not None), None)


def _is_replay(decided: _Decision, batch_id: int, query_id: str | None) -> bool:
    """Whether ``decided`` is this very batch's decision (Spark replays it): the same batch
    id of the same query (a checkpoint started afresh is another query, with another id).
    Ids must be equal; two missing ids (outside a streaming query) are equal."""
    return decided.batch == batch_id and decided.query_id == query_id


def _roll_forward(admin: Admin, decided: _Decision) -> bool:
    """Commits every transaction of the recorded decision (again: idempotent); False when
    the decision is void: every one of its transactions was fenced, so none was committed
    (commits start only after the decision is acknowledged, and a fence of a decided
    transaction only before it is visible: ``abort`` found no decision while its
    OffsetCommit was still in flight). The caller then decides anew. An abort that stopped
    midway fenced a prefix of the batch's transactions in the decision's order, so the
    first transaction tells: fenced, the remaining ones are fenced too and the decision is
    void; committed or prepared, every fenced one after it is a lost transaction
    (DecisionError)."""
    if not decided.transactions:
        return True
    first, *rest = decided.transactions
    if not _commit(admin, decided.batch, first):
        for prepared in rest:
            admin.fence_transactional_id(prepared.transactional_id)
        _log.warning(
            "batch %d: the recorded decision's transactions were fenced before it was "
            "visible (a late decision): none was committed, deciding anew",
            decided.batch,
        )
        return False
    _commit_all(admin, _Decision(decided.batch, decided.query_id, tuple(rest)))
    return True


def _check_open(admin: Admin, deciding: _Decision) -> None:
    """DecisionError, before anything is decided, unless every transaction of ``deciding``
    is still open under its producer id and epoch: one that is not was fenced (an attempt
    of an earlier stage attempt, or a zombie task, reusing its id) and its rows are gone, so
    the batch must fail and be replayed rather than be decided half lost."""
    if not deciding.transactions:
        return
    described = admin.describe_transactions([p.transactional_id for p in deciding.transactions])
    for prepared in deciding.transactions:
        found = described[prepared.transactional_id]
        if found.state is not TransactionState.ONGOING or (
            found.producer_id,
            found.producer_epoch,
        ) != (prepared.producer_id, prepared.producer_epoch):
            raise DecisionError(
                f"batch {deciding.batch}: transaction {prepared.transactional_id} is no longer "
                f"open (now {found.state.name}, producer {found.producer_id} epoch "
                f"{found.producer_epoch}): another attempt took its id; the batch is not "
                "decided"
            )


def _commit_all(admin: Admin, decided: _Decision) -> None:
    """Commits every transaction of the decision (again: idempotent). DecisionError when
    one was fenced: its rows are lost, which only an operator's abort can cause."""
    for prepared in decided.transactions:
        if not _commit(admin, decided.batch, prepared):
            raise DecisionError(
                f"batch {decided.batch}: transaction {prepared.transactional_id} was "
                "decided as committed but was aborted (by an operator?): its rows are lost"
            )


def _commit(admin: Admin, batch: int, prepared: PreparedTransaction) -> bool:
    """Commits one decided transaction; False when it was fenced (aborted, epoch bumped).
    An id the coordinator no longer knows (transactional.id.expiration.ms passed since its
    last transaction) was committed: a decided transaction is never fenced once its
    decision is visible, and a two-phase transaction neither times out nor expires while
    open."""
    try:
        admin.complete_transaction(prepared, commit=True)
    except ApiError as error:
        if error.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_TXN_STATE):
            return False
        if error.code in (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
        ):
            _log.info(
                "batch %d: transaction %s expired since: it was committed (%s)",
                batch,
                prepared.transactional_id,
                error,
            )
            return True
        raise
    return True


def _failpoint(batch_id: int) -> None:
    """Test-only (see the module's docstring): inert unless BROOK_SPARK_SINK_FAILPOINT is set."""
    directory = os.environ.get(FAILPOINT_ENV)
    if not directory:
        return
    Path(directory, f"committed-{batch_id}").write_text(str(os.getpid()))
    time.sleep(FAILPOINT_BLOCK_S)


class _DecisionStore:
    """The sink's last decision, as the committed offsets of consumer group ``prefix``: the
    JSON {"batch", "query", "transactions": [[id, producer id, epoch], ...]} cut into chunks,
    chunk i the metadata of partition i of a pseudo-topic (committed offset: the batch id;
    metadata ``{decision id}:{batch}:{i}:{chunks}:{text}``, the decision id random per
    write). One OffsetCommit writes them all, but the coordinator checks each partition's
    metadata on its own and may keep some chunks only: a set whose chunks 0..count-1 do not
    all carry chunk 0's decision id is no decision (``read`` gives None), which is right
    because commits start only after a write is acknowledged whole. A group with no members
    takes such commits; its offsets are kept offsets.retention.minutes after the last
    batch."""

    def __init__(self, admin: Admin, group: str) -> None:
        self._admin = admin
        self._group = group

    def read(self) -> _Decision | None:
        committed = self._admin.list_consumer_group_offsets(self._group)
        chunks: dict[int, tuple[str, int, int, str]] = {}
        for tp, found in committed.items():
            if tp.topic != _DECISION_TOPIC:
                continue
            fields = found.metadata.split(":", 4)
            try:
                decision_id, chunk_batch, index, count, text = (
                    fields[0],
                    int(fields[1]),
                    int(fields[2]),
                    int(fields[3]),
                    fields[4],
                )
            except (ValueError, IndexError):
                raise DecisionError(
                    f"group {self._group!r}: unreadable decision chunk {tp.partition}"
                ) from None
            if index != tp.partition:
                raise DecisionError(f"group {self._group!r}: misplaced decision chunk {index}")
            chunks[index] = (decision_id, chunk_batch, count, text)
        if 0 not in chunks:
            return None
        identity = chunks[0][:3]
        parts = []
        for index in range(identity[2]):
            chunk = chunks.get(index)
            if chunk is None or chunk[:3] != identity:
                _log.warning(
                    "group %r: the decision of batch %d lacks chunk %d (a write kept in "
                    "part): no decision",
                    self._group,
                    identity[1],
                    index,
                )
                return None
            parts.append(chunk[3])
        value = json.loads("".join(parts))
        return _Decision(
            int(value["batch"]),
            value.get("query"),
            tuple(PreparedTransaction(str(t), int(p), int(e)) for t, p, e in value["transactions"]),
        )

    def write(self, decision: _Decision) -> None:
        text = json.dumps(
            {
                "batch": decision.batch,
                "query": decision.query_id,
                "transactions": [
                    [p.transactional_id, p.producer_id, p.producer_epoch]
                    for p in decision.transactions
                ],
            },
            separators=(",", ":"),
        )
        pieces = [text[i : i + _CHUNK_CHARS] for i in range(0, len(text), _CHUNK_CHARS)]
        decision_id = uuid.uuid4().hex
        results = self._admin.alter_consumer_group_offsets(
            self._group,
            {
                TopicPartition(_DECISION_TOPIC, index): OffsetAndMetadata(
                    decision.batch,
                    f"{decision_id}:{decision.batch}:{index}:{len(pieces)}:{piece}",
                )
                for index, piece in enumerate(pieces)
            },
        )
        failed = {tp: error for tp, error in results.items() if error is not None}
        if failed:
            raise DecisionError(
                f"group {self._group!r}: the decision of batch {decision.batch} was not "
                f"recorded: {failed}"
            )
