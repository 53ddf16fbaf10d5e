"""A consume-transform-produce job in Kafka transactions, with confluent-kafka (librdkafka)
through the gateway: the exactly-once pattern a stream job uses (issue #16).

It copies every record of topic SOURCE to the same partition of topic DESTINATION (same key,
value and headers), reading as a member of GROUP with ``isolation.level=read_committed`` and
``enable.auto.commit=false``; each batch of records goes out in one transaction together with
the group's new offsets (``send_offsets_to_transaction``), so the copy and the offsets commit
or abort together. SOURCE and DESTINATION must have the same number of partitions.

Kafka's error rules: an abortable error aborts the transaction and rewinds the consumer to the
group's committed offsets; a retriable one retries the call; a fatal one ends the job. A job
fenced by a newer instance with the same ``transactional.id`` exits with ``EXIT_FENCED``; any
other failure raises (exit status 1).

    python tests/txn_copy_job.py --bootstrap HOST:PORT --source A --destination B \\
        --group G --transactional-id T [--records-per-transaction 10] \\
        [--transactions-per-s 0] [--abort-every 0] [--pause-in-transaction 0] [--exit-at-end]

Progress, on stdout, one JSON object a line: ``{"event": "ready"}`` once
``init_transactions`` succeeded; ``{"event": "committed", "positions": {partition: offset}}``
after each commit (the consumer's positions, i.e. the offsets just committed for the group);
``{"event": "aborted", ...}`` after each abort; ``{"event": "pausing"}`` before stopping itself
(``--pause-in-transaction``); ``{"event": "done"}`` at the end of SOURCE
(with ``--exit-at-end``); ``{"event": "fenced", "error": ...}`` before exiting fenced.

``copy_in_transactions`` runs the same loop in-process (the compatibility tests).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

EXIT_FENCED: Final = 3
FENCED_CODES: Final = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
# One call of the transactional API; librdkafka retries retriable errors inside it, and the
# job retries the call itself until CALL_DEADLINE_S has passed (a coordinator failing over).
CALL_TIMEOUT_S: Final = 10.0
CALL_DEADLINE_S: Final = 90.0
POLL_S: Final = 0.2
TRANSACTION_TIMEOUT_MS: Final = 30_000
SESSION_TIMEOUT_MS: Final = 6000
HEARTBEAT_INTERVAL_MS: Final = 500

READ_COMMITTED: Final = "read_committed"
READ_UNCOMMITTED: Final = "read_uncommitted"
READ_TIMEOUT_S: Final = 60.0

Report = Callable[[dict[str, Any]], None]
Record = tuple[str, int, bytes, bytes]
"""(topic, partition, key, value)."""


class Fenced(Exception):
    """A newer producer with the same transactional.id took over: this one must stop."""


@dataclass(frozen=True)
class CopyJob:
    """What to copy, and how."""

    bootstrap: str
    source: str
    destination: str
    group: str
    transactional_id: str
    records_per_transaction: int = 10
    transactions_per_s: float = 0.0
    """At most this many transactions a second (0: as fast as it goes), so a test's faults
    land while the job is still copying."""
    abort_every: int = 0
    """Abort every n-th transaction on purpose after writing it (0: never): its records are
    written and its offsets sent, and neither must become visible."""
    pause_in_transaction: int = 0
    """Stop this process (SIGSTOP to itself) in its n-th transaction, after writing its
    records and before sending its offsets (0: never): a test makes it a zombie, starts a
    successor, and resumes it (SIGCONT) to see it fenced."""


def command_line(job: CopyJob) -> list[str]:
    """The arguments of this script that run ``job`` (without --exit-at-end)."""
    return [
        "--bootstrap", job.bootstrap,
        "--source", job.source,
        "--destination", job.destination,
        "--group", job.group,
        "--transactional-id", job.transactional_id,
        "--records-per-transaction", str(job.records_per_transaction),
        "--transactions-per-s", str(job.transactions_per_s),
        "--abort-every", str(job.abort_every),
        "--pause-in-transaction", str(job.pause_in_transaction),
    ]  # fmt: skip


def consumer_settings(job: CopyJob) -> dict[str, Any]:
    return {
        "bootstrap.servers": job.bootstrap,
        "group.id": job.group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    }


def producer_settings(job: CopyJob) -> dict[str, Any]:
    return {
        "bootstrap.servers": job.bootstrap,
        "transactional.id": job.transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        "acks": "all",
        "linger.ms": 5,
    }


def _error_of(exception: KafkaException) -> KafkaError:
    error: KafkaError = exception.args[0]
    return error


class _TransactionalCopier:
    """One job instance: a read_committed group consumer and a transactional producer."""

    def __init__(self, job: CopyJob, report: Report) -> None:
        self._job = job
        self._report = report
        self._transactions = 0
        self._fatal: list[KafkaError] = []
        self._consumer = Consumer(consumer_settings(job))
        self._producer = Producer(
            {**producer_settings(job), "error_cb": self._on_error},
        )

    def _on_error(self, error: KafkaError) -> None:
        # confluent-kafka hands the producer's fatal error over with its own code (such as
        # _FENCED); the calls that fail because of it raise a generic _FATAL.
        if error.fatal():
            self._fatal.append(error)

    def check_fatal(self, exception: KafkaException) -> None:
        """Raises Fenced when ``exception`` (or the producer's fatal error behind it) says a
        newer instance took over, ``exception`` itself when it is otherwise fatal."""
        error = _error_of(exception)
        if not error.fatal() and error.code() not in FENCED_CODES:
            return
        self._producer.poll(0)  # serves error_cb: the fatal error's own code
        if any(e.code() in FENCED_CODES for e in [error, *self._fatal]):
            raise Fenced(str(self._fatal[0] if self._fatal else error)) from exception
        raise exception

    def close(self) -> None:
        self._consumer.close()
        self._producer.flush(CALL_TIMEOUT_S)

    def _retrying(self, what: str, call: Callable[[], None]) -> bool:
        """Runs ``call`` until it succeeds (True) or needs the transaction aborted (False);
        retriable errors are retried until CALL_DEADLINE_S, fatal ones raised."""
        deadline = time.monotonic() + CALL_DEADLINE_S
        while True:
            try:
                call()
                return True
            except KafkaException as exception:
                self.check_fatal(exception)
                error = _error_of(exception)
                if error.txn_requires_abort():
                    return False
                if not error.retriable() or time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: {error}") from exception

    def start(self) -> None:
        self._retrying(
            "init_transactions", lambda: self._producer.init_transactions(CALL_TIMEOUT_S)
        )
        # Rebalances need no handling here: they happen inside consume(), between
        # transactions, and a transaction whose offsets name an old generation is refused
        # (abortable), aborted and rewound.
        self._consumer.subscribe([self._job.source])
        self._report({"event": "ready"})

    def abort(self, why: str) -> None:
        if not self._retrying(
            "abort_transaction", lambda: self._producer.abort_transaction(CALL_TIMEOUT_S)
        ):
            raise RuntimeError(f"abort_transaction ({why}) asked for an abort")
        self._report({"event": "aborted", "why": why})

    def rewind(self) -> None:
        """Every assigned partition back to the group's committed offset (the beginning when
        nothing is committed): the records of an aborted transaction are read again. The
        committed offsets are asked until CALL_DEADLINE_S has passed."""
        assigned = self._consumer.assignment()
        if not assigned:
            return
        deadline = time.monotonic() + CALL_DEADLINE_S
        while True:
            try:
                answer = self._consumer.committed(assigned, CALL_TIMEOUT_S)
                break
            except KafkaException as exception:
                # A coordinator moving: asked again (a timed-out committed() is not marked
                # retriable by confluent-kafka).
                self.check_fatal(exception)
                if time.monotonic() > deadline:
                    raise
        for committed in answer:
            offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
            self._consumer.seek(TopicPartition(committed.topic, committed.partition, offset))

    def positions(self) -> list[TopicPartition]:
        """The consumer's next offset in every assigned partition that has one."""
        assigned = self._consumer.assignment()
        return [tp for tp in self._consumer.position(assigned) if tp.offset >= 0]

    def at_end(self, ends: dict[int, int]) -> bool:
        """Whether the group's committed offsets have reached ``ends`` in every non-empty
        partition of the source (False when the question fails, a coordinator moving: it is
        asked again at the next idle round; confluent-kafka marks a timed-out committed()
        as not retriable, so every non-fatal failure counts as "not yet").

        The committed offsets, not the consumer's positions: librdkafka's position is the
        last consumed record's offset + 1 and becomes invalid at a seek, so a partition
        rewound (or newly assigned) at its end has no position until a record arrives,
        which never happens there."""
        asked = [TopicPartition(self._job.source, p) for p, end in ends.items() if end > 0]
        try:
            committed = self._consumer.committed(asked, CALL_TIMEOUT_S)
        except KafkaException as exception:
            self.check_fatal(exception)
            return False
        return all(tp.offset >= ends[tp.partition] for tp in committed)

    def copy_one_batch(self) -> int:
        """Reads up to records_per_transaction records and writes them, with the offsets, in
        one transaction; the records written (0: nothing to read, or aborted)."""
        messages = self._consumer.consume(self._job.records_per_transaction, POLL_S)
        records = []
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
            records.append(message)
        if not records:
            return 0
        self._producer.begin_transaction()
        self._transactions += 1
        every = self._job.abort_every
        deliberate_abort = every > 0 and self._transactions % every == 0
        for message in records:
            self._producer.produce(
                self._job.destination,
                message.value(),
                message.key(),
                partition=message.partition(),
                headers=message.headers(),
            )
        if self._transactions == self._job.pause_in_transaction:
            assert self._producer.flush(CALL_TIMEOUT_S) == 0, "records still unsent"
            self._report({"event": "pausing"})
            os.kill(os.getpid(), signal.SIGSTOP)
        positions = self.positions()
        written = self._retrying(
            "send_offsets_to_transaction",
            lambda: self._producer.send_offsets_to_transaction(
                positions, self._consumer.consumer_group_metadata(), CALL_TIMEOUT_S
            ),
        )
        if written and deliberate_abort:
            self.abort("deliberate")
            self.rewind()
            return 0
        if written:
            written = self._retrying(
                "commit_transaction", lambda: self._producer.commit_transaction(CALL_TIMEOUT_S)
            )
        if not written:
            self.abort("abortable error")
            self.rewind()
            return 0
        self._report(
            {"event": "committed", "positions": {tp.partition: tp.offset for tp in positions}}
        )
        return len(records)

    def run(self, stop_at_end: bool, stop: Callable[[], bool]) -> None:
        ends = source_end_offsets(self._consumer, self._job.source) if stop_at_end else {}
        interval_s = 1 / self._job.transactions_per_s if self._job.transactions_per_s else 0
        while not stop():
            began = time.monotonic()
            try:
                copied = self.copy_one_batch()
            except KafkaException as exception:
                self.check_fatal(exception)
                raise
            if copied == 0 and stop_at_end and self.at_end(ends):
                self._report({"event": "done"})
                return
            left_s = interval_s - (time.monotonic() - began)
            if left_s > 0:
                time.sleep(left_s)


def source_end_offsets(consumer: Consumer, topic: str) -> dict[int, int]:
    """partition -> high watermark of every partition of ``topic`` (a topic no one writes to
    any more: the end the copy must reach)."""
    metadata = consumer.list_topics(topic, timeout=CALL_TIMEOUT_S)
    partitions = sorted(metadata.topics[topic].partitions)
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), CALL_TIMEOUT_S)[1]
        for p in partitions
    }


def produce_all(producer: Any, records: Sequence[Record]) -> None:
    """Produces ``records`` with a confluent-kafka Producer and waits until each is
    delivered (in a transaction: written, not yet committed)."""
    errors: list[Any] = []
    for topic, partition, key, value in records:
        producer.produce(
            topic,
            value,
            key,
            partition=partition,
            on_delivery=lambda error, _message: errors.append(error) if error else None,
        )
    assert producer.flush(CALL_DEADLINE_S) == 0, "records neither delivered nor failed"
    assert errors == []


def read_topics(
    bootstrap: str, topics: Sequence[str], isolation: str, partitions: int
) -> list[Record]:
    """Every record of ``topics`` that a consumer with ``isolation`` reads from the beginning
    up to the end of each partition (the last stable offset for read_committed), in order per
    partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"transactions-reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    records: list[Record] = []
    pending = {(t, p) for t in topics for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(pending)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while pending:
            assert time.monotonic() < deadline, f"never reached the end of {sorted(pending)}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                pending.discard((message.topic(), message.partition()))
                continue
            assert error is None, error
            records.append((message.topic(), message.partition(), message.key(), message.value()))
    finally:
        consumer.close()
    return records


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """``group``'s committed offsets of ``topic``'s partitions, asked as a read_committed
    consumer does (require_stable: offsets of an undecided transaction are not answered);
    [] when the question fails (a coordinator moving: the callers poll)."""
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": READ_COMMITTED}
    )
    try:
        asked = [TopicPartition(topic, p) for p in range(partitions)]
        return [c.offset for c in reader.committed(asked, timeout=CALL_TIMEOUT_S)]
    except KafkaException:
        return []
    finally:
        reader.close()


def by_partition(records: Iterable[Record]) -> dict[tuple[str, int], list[tuple[bytes, bytes]]]:
    """(topic, partition) -> [(key, value)] in the order given."""
    out: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
    for topic, partition, key, value in records:
        out.setdefault((topic, partition), []).append((key, value))
    return out


def wait_for_records(read: Callable[[], Sequence[Record]], want: Sequence[Record]) -> None:
    """Until ``read()`` returns ``want``: the same records in each partition, in the same
    order (partitions may interleave); fails with the difference after READ_TIMEOUT_S.

    Kafka answers a commit or an abort once it is decided, and writes the markers after:
    a read_committed reader sees a committed transaction a moment later, never sooner."""
    import pytest
    from cluster_fixture import wait_until

    last: list[Record] = []

    def matches() -> bool:
        last[:] = read()
        return by_partition(last) == by_partition(want)

    try:
        wait_until(matches, "the records expected", READ_TIMEOUT_S, 0.2)
    except pytest.fail.Exception:
        assert by_partition(last) == by_partition(want)


def assert_copied_exactly_once(
    job: CopyJob, source_records: Sequence[Record], partitions: int
) -> None:
    """``job.destination`` read with read_committed holds ``source_records`` (all of the
    source) exactly once, in order, per partition; read with read_uncommitted it holds more
    (copies written in aborted transactions); the group's committed offsets equal the
    source's end offsets. Waits, bounded, for the markers of the last transactions."""
    from cluster_fixture import wait_until

    copies = [(job.destination, p, k, v) for _, p, k, v in source_records]
    wait_for_records(
        partial(read_topics, job.bootstrap, [job.destination], READ_COMMITTED, partitions), copies
    )
    everything = read_topics(job.bootstrap, [job.destination], READ_UNCOMMITTED, partitions)
    assert len(everything) > len(source_records), "no aborted copy was written"
    ends = [sum(1 for r in source_records if r[1] == p) for p in range(partitions)]
    wait_until(
        lambda: group_offsets(job.bootstrap, job.group, job.source, partitions) == ends,
        f"{job.group}'s committed offsets to reach the source's end offsets {ends}",
        READ_TIMEOUT_S,
    )


def copy_in_transactions(
    job: CopyJob,
    *,
    report: Report = lambda event: None,
    stop: Callable[[], bool] = lambda: False,
    stop_at_end: bool = True,
) -> None:
    """Copies ``job.source`` to ``job.destination`` until ``stop()`` or, with
    ``stop_at_end``, until every source partition has been copied and committed up to the
    high watermark it had when the job started. Raises Fenced when a newer instance took
    over, KafkaException or RuntimeError on any other failure."""
    copier = _TransactionalCopier(job, report)
    try:
        copier.start()
        copier.run(stop_at_end, stop)
    finally:
        copier.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--destination", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--records-per-transaction", type=int, default=10)
    parser.add_argument("--transactions-per-s", type=float, default=0.0)
    parser.add_argument("--abort-every", type=int, default=0)
    parser.add_argument("--pause-in-transaction", type=int, default=0)
    parser.add_argument("--exit-at-end", action="store_true", help="stop at the source's end")
    args = parser.parse_args(argv)
    job = CopyJob(
        args.bootstrap,
        args.source,
        args.destination,
        args.group,
        args.transactional_id,
        args.records_per_transaction,
        args.transactions_per_s,
        args.abort_every,
        args.pause_in_transaction,
    )

    def report(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    try:
        copy_in_transactions(job, report=report, stop_at_end=args.exit_at_end)
    except Fenced as fenced:
        report({"event": "fenced", "error": str(fenced)})
        return EXIT_FENCED
    return 0


if __name__ == "__main__":
    sys.exit(main())
