"""The exactly-once streaming sink (df.writeStream.format("brook")): tasks write two-phase
transactions, the driver's commit decides, the batch id is recorded.

Each task attempt writes its rows in a two-phase transaction (KIP-939,
``transaction.two.phase.commit.enable``) under a transactional id of its own,
``{prefix}-p{partition}-a{attempt}-{8 hex}``, so retried and speculative attempts never fence
each other; it prepares the transaction and hands (transactional id, producer id, epoch, rows)
to the driver as its commit message. Nothing it wrote is visible yet.

The driver's ``commit(messages, batch_id)`` decides, and records the decision before acting on
it: the decision D = {batch, query, transactions} is the committed offsets' metadata of the
consumer group ``{prefix}`` (``_DecisionStore``). If D is already this batch's (Spark replays a
batch whose decision was made before the driver died, before Spark's commit log recorded it),
D is rolled forward (its transactions committed again: EndTxn is idempotent) and the replay's
own transactions are fenced (their rows are the duplicates). Otherwise D(batch) is written
first, then every transaction of ``messages`` is committed. Either way, open transactions with
the prefix that are not in the decision (failed, speculative or zombie attempts) are fenced.
``abort`` fences the batch's transactions and the strays, except those of a decision already
made for the batch (Spark calls ``abort`` when ``commit`` raised after writing it: they are
rolled forward instead, and Spark's replay of the batch is then recognised).

``transactionalIdPrefix`` defaults to ``brook-spark-`` and a hash of ``checkpointLocation``;
one of them is required. Two queries must not share a prefix.

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
)
from brook.client.admin import OffsetAndMetadata
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
# The decision's pseudo-topic in the group's committed offsets, and the metadata per chunk
# (below the coordinators' default offset.metadata.max.bytes, 4096).
_DECISION_TOPIC: Final = "brook-spark-sink-decision"
_CHUNK_CHARS: Final = 3000
_TASK_TIMEOUT_S: Final = 120.0


class DecisionError(RuntimeError):
    """The sink cannot keep its guarantee: a decided transaction was aborted (rows would be
    lost), or the recorded decision cannot be read."""


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
        return self.write_attempt(
            iterator,
            partition_id=context.partitionId(),
            attempt_number=context.attemptNumber(),
            query_id=context.getLocalProperty(_QUERY_ID_PROPERTY),
        )

    def write_attempt(
        self,
        iterator: Iterator[pa.RecordBatch],
        *,
        partition_id: int,
        attempt_number: int,
        query_id: str | None,
    ) -> TaskTransaction:
        """One task attempt's write: its rows in a two-phase transaction of its own, prepared
        (not visible) and described in the returned message. On any failure the transaction
        is aborted and the error raised. The producer is closed without ending the prepared
        transaction: the driver decides it."""
        transactional_id = f"{self.prefix}-p{partition_id}-a{attempt_number}-{uuid.uuid4().hex[:8]}"
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
            query_id = next((t.query_id for t in tasks if t.query_id is not None), None)
            if decided is not None and _is_replay(decided, batchId, query_id):
                _log.info("batch %d was decided before: rolling it forward", batchId)
                replayed = {p.transactional_id for p in decided.transactions}
                for task in tasks:
                    if task.prepared is not None and task.prepared.transactional_id not in replayed:
                        admin.fence_transactional_id(task.prepared.transactional_id)
            else:
                decided = _Decision(
                    batchId,
                    query_id,
                    tuple(t.prepared for t in tasks if t.prepared is not None),
                )
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
            query_id = next((t.query_id for t in tasks if t.query_id is not None), None)
            if decided is not None and _is_replay(decided, batchId, query_id):
                _commit_all(admin, decided)
                kept = decided
            else:
                kept = _Decision(batchId, query_id, ())
            decided_ids = {p.transactional_id for p in kept.transactions}
            for task in tasks:
                if task.prepared is not None and task.prepared.transactional_id not in decided_ids:
                    admin.fence_transactional_id(task.prepared.transactional_id)
            self._fence_strays(admin, kept)

    def _fence_strays(self, admin: Admin, decided: _Decision) -> None:
        """Fences the open transactions of this sink's attempts that ``decided`` does not
        hold: attempts that failed, lost to another (speculation) or were replayed."""
        kept = {p.transactional_id for p in decided.transactions}
        ours = f"{self.prefix}-p"
        for listed in admin.list_transactions(states=[TransactionState.ONGOING]):
            if listed.transactional_id.startswith(ours) and listed.transactional_id not in kept:
                _log.info("fencing stray transaction %s", listed.transactional_id)
                admin.fence_transactional_id(listed.transactional_id)

    def _admin(self) -> Admin:
        """The driver's admin client: it finds the coordinators through the storage nodes
        (``kafka.bootstrap.servers``, as every Brook source and sink)."""
        return Admin(self._client["bootstrap.servers"], bootstrap_role="storage_node")


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
    digest = hashlib.sha256(checkpoint.strip().encode("utf-8")).hexdigest()[:16]
    return f"brook-spark-{digest}"


def _tasks(messages: Iterable[WriterCommitMessage | None]) -> list[TaskTransaction]:
    tasks = []
    for message in messages:
        if message is None:
            continue
        if not isinstance(message, TaskTransaction):
            raise TypeError(f"not a commit message of the Brook sink: {message!r}")
        tasks.append(message)
    return tasks


def _is_replay(decided: _Decision, batch_id: int, query_id: str | None) -> bool:
    """Whether ``decided`` is this very batch's decision (Spark replays it): the same batch
    id of the same query (a checkpoint started afresh is another query, with another id)."""
    if decided.batch != batch_id:
        return False
    return decided.query_id is None or query_id is None or decided.query_id == query_id


def _commit_all(admin: Admin, decided: _Decision) -> None:
    """Commits every transaction of the decision (again: idempotent). DecisionError when
    one was aborted meanwhile: its rows are lost, which only an operator's abort can cause."""
    for prepared in decided.transactions:
        try:
            admin.complete_transaction(prepared, commit=True)
        except ApiError as error:
            if error.code in (
                ErrorCode.PRODUCER_FENCED,
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                ErrorCode.INVALID_TXN_STATE,
            ):
                raise DecisionError(
                    f"batch {decided.batch}: transaction {prepared.transactional_id} was "
                    f"decided as committed but cannot be committed ({error}); its rows are "
                    "lost unless it was committed before (was it aborted by an operator, or "
                    "did its transactional id expire?)"
                ) from error
            raise


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
    metadata ``{batch}:{i}:{chunks}:{text}``), all written by one OffsetCommit (one append to
    __consumer_offsets: all chunks or none). A group with no members takes such commits; its
    offsets are kept offsets.retention.minutes after the last batch."""

    def __init__(self, admin: Admin, group: str) -> None:
        self._admin = admin
        self._group = group

    def read(self) -> _Decision | None:
        committed = self._admin.list_consumer_group_offsets(self._group)
        chunks: dict[int, tuple[int, int, str]] = {}
        for tp, found in committed.items():
            if tp.topic != _DECISION_TOPIC:
                continue
            fields = found.metadata.split(":", 3)
            try:
                chunk_batch, index, count, text = (
                    int(fields[0]),
                    int(fields[1]),
                    int(fields[2]),
                    fields[3],
                )
            except (ValueError, IndexError):
                raise DecisionError(
                    f"group {self._group!r}: unreadable decision chunk {tp.partition}"
                ) from None
            if index != tp.partition:
                raise DecisionError(f"group {self._group!r}: misplaced decision chunk {index}")
            chunks[index] = (chunk_batch, count, text)
        if 0 not in chunks:
            return None
        batch, count, _ = chunks[0]
        parts = []
        for index in range(count):
            chunk = chunks.get(index)
            if chunk is None or chunk[:2] != (batch, count):
                raise DecisionError(
                    f"group {self._group!r}: decision of batch {batch} misses chunk {index}"
                )
            parts.append(chunk[2])
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
        results = self._admin.alter_consumer_group_offsets(
            self._group,
            {
                TopicPartition(_DECISION_TOPIC, index): OffsetAndMetadata(
                    decision.batch, f"{decision.batch}:{index}:{len(pieces)}:{piece}"
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
