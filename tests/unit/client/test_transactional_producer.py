"""The transactional producer's protocol against a scripted transaction and group coordinator
(served beside the storage double, which stores the batches): the order of its requests, what
they carry, and how each kind of error answer ends (retried, abortable, fatal)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from threading import Event, Thread
from typing import Any

import grpc
import pytest
from storage_double import RunningDouble
from transaction_doubles import (
    FAST,
    GROUP,
    PRODUCER_ID,
    RESULT_TIMEOUT_S,
    TXN_ID,
    Cluster,
    answer_all,
)

import brook.client.accumulator as accumulator_module
from brook.client import AsyncProducer, Producer
from brook.client.admin import OffsetAndMetadata
from brook.client.errors import (
    ApiError,
    ClientTimeoutError,
    ConfigError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
)
from brook.client.transactions import TxnState
from brook.client.types import TopicPartition
from brook.errors import ErrorCode
from brook.record import read_header
from brook.v1 import group_pb2


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    running = Cluster()
    try:
        yield running
    finally:
        running.running.stop()


def test_a_transaction_adds_each_partition_before_its_first_batch_and_commits_after_the_last(
    cluster: Cluster,
) -> None:
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.send("events", b"a", partition=p) for p in range(3)]
        futures.append(producer.send("single", b"b"))
        producer.send_offsets_to_transaction({TopicPartition("in", 0): 42}, GROUP)
        producer.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futures)

    methods = cluster.methods()
    finds = cluster.coordinator.calls("FindCoordinator")
    assert finds[0].key_type == group_pb2.COORDINATOR_TYPE_TRANSACTION
    assert list(finds[0].keys) == [TXN_ID]
    [init] = cluster.coordinator.calls("InitProducerId")
    assert (init.transactional_id, init.transaction_timeout_ms) == (TXN_ID, 3000)
    assert (init.producer_id, init.producer_epoch) == (-1, -1)
    # Every batch went out after its partition's AddPartitionsToTxn, marked transactional,
    # under the coordinator's producer id and epoch.
    added: set[tuple[str, int]] = set()
    for name, request in cluster.log:
        if name == "AddPartitionsToTxn":
            assert (request.producer_id, request.producer_epoch) == (PRODUCER_ID, 0)
            added |= {(p.topic, p.partition) for p in request.partitions}
        elif name == "Produce":
            for data in request.partitions:
                assert (data.topic, data.partition) in added
    assert added == {("events", 0), ("events", 1), ("events", 2), ("single", 0)}
    batches = cluster.produced_batches()
    assert len(batches) == 4
    for _, _, header in batches:
        assert header.is_transactional
        assert (header.producer_id, header.producer_epoch) == (PRODUCER_ID, 0)
    # The offsets: AddOffsetsToTxn, then TxnCommitOffsets at the group's coordinator with
    # the consumer's generation and member (KIP-447); EndTxn(commit) after the last batch.
    [add_offsets] = cluster.coordinator.calls("AddOffsetsToTxn")
    assert add_offsets.group_id == "billing"
    assert any(
        f.key_type == group_pb2.COORDINATOR_TYPE_GROUP and list(f.keys) == ["billing"]
        for f in finds
    )
    [commit_offsets] = cluster.coordinator.calls("TxnCommitOffsets")
    assert (commit_offsets.generation_id, commit_offsets.member_id) == (7, "member-1")
    assert (commit_offsets.producer_id, commit_offsets.transactional_id) == (PRODUCER_ID, TXN_ID)
    assert [(p.topic, p.partition, p.committed_offset) for p in commit_offsets.partitions] == [
        ("in", 0, 42)
    ]
    assert methods.index("AddOffsetsToTxn") < methods.index("TxnCommitOffsets")
    [end] = cluster.coordinator.calls("EndTxn")
    assert end.committed
    last_produce = max(i for i, name in enumerate(methods) if name == "Produce")
    assert methods.index("EndTxn") > last_produce


def test_an_empty_transaction_commits_without_asking_the_coordinator(cluster: Cluster) -> None:
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.commit_transaction()
        producer.begin_transaction()
        producer.abort_transaction()
    assert "EndTxn" not in cluster.methods()


def test_retriable_coordinator_answers_are_retried_and_a_moved_coordinator_found_again(
    cluster: Cluster,
) -> None:
    cluster.coordinator.scripts["InitProducerId"] = [
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
    ]
    cluster.coordinator.scripts["AddPartitionsToTxn"] = [ErrorCode.CONCURRENT_TRANSACTIONS]
    cluster.coordinator.scripts["EndTxn"] = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert cluster.commit_one().offset == 0
    assert len(cluster.coordinator.calls("InitProducerId")) == 4
    # Looked up again after NOT_COORDINATOR and after COORDINATOR_NOT_AVAILABLE.
    assert len(cluster.coordinator.calls("FindCoordinator")) == 3
    assert len(cluster.coordinator.calls("AddPartitionsToTxn")) == 2
    assert len(cluster.coordinator.calls("EndTxn")) == 2


def test_init_transactions_is_bounded_by_its_timeout_and_can_be_called_again(
    cluster: Cluster,
) -> None:
    cluster.coordinator.scripts["InitProducerId"] = [ErrorCode.CONCURRENT_TRANSACTIONS] * 20
    with cluster.producer() as producer:
        with pytest.raises(ClientTimeoutError, match="call init_transactions again"):
            producer.init_transactions(timeout=0.2)
        cluster.running.call(lambda: cluster.coordinator.scripts["InitProducerId"].clear())
        producer.init_transactions()
        producer.begin_transaction()


@pytest.mark.parametrize("code", [ErrorCode.INVALID_RECORD, ErrorCode.UNKNOWN_PRODUCER_ID])
def test_a_failed_send_makes_commit_raise_and_abort_bumps_the_epoch(
    cluster: Cluster, code: ErrorCode
) -> None:
    cluster.produce_errors = [code]
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        failed = producer.send("single", b"lost")
        with pytest.raises(TransactionAbortableError) as raised:
            producer.commit_transaction()
        assert failed.exception() is not None
        assert raised.value.__cause__ is not None
        # Until the abort, the transaction refuses more work with the same error.
        with pytest.raises(TransactionAbortableError):
            producer.send("single", b"more")
        with pytest.raises(TransactionAbortableError):
            producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, GROUP)
        producer.abort_transaction()
        producer.begin_transaction()
        kept = producer.send("single", b"kept")
        producer.commit_transaction()
        assert kept.result(RESULT_TIMEOUT_S).offset >= 0
    ends = cluster.coordinator.calls("EndTxn")
    assert [end.committed for end in ends] == [False, True]
    inits = cluster.coordinator.calls("InitProducerId")
    # KIP-360: the abort bumps the epoch with the producer's id and epoch.
    assert [(i.producer_id, i.producer_epoch) for i in inits] == [(-1, -1), (PRODUCER_ID, 0)]
    last = cluster.produced_batches()[-1][2]
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


def test_abort_drops_the_records_not_yet_sent(cluster: Cluster) -> None:
    cluster.coordinator.add_delay_s = 0.5
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.send("events", b"never", partition=p) for p in range(3)]
        producer.abort_transaction()
        for future in futures:
            assert isinstance(future.exception(RESULT_TIMEOUT_S), TransactionAbortedError)
    assert "Produce" not in cluster.methods()
    # The coordinator had the partitions (the add was in flight): the abort tells it.
    assert [end.committed for end in cluster.coordinator.calls("EndTxn")] == [False]


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("EndTxn", ErrorCode.PRODUCER_FENCED),
        ("AddPartitionsToTxn", ErrorCode.INVALID_PRODUCER_EPOCH),
        ("AddOffsetsToTxn", ErrorCode.PRODUCER_FENCED),
    ],
)
def test_fencing_is_fatal(cluster: Cluster, method: str, code: ErrorCode) -> None:
    cluster.coordinator.scripts[method] = [code]
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("single", b"x")
        with pytest.raises(ProducerFencedError):
            producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "billing")
            producer.commit_transaction()
        with pytest.raises(ProducerFencedError):
            producer.abort_transaction()
        with pytest.raises(ProducerFencedError):
            producer.begin_transaction()
        with pytest.raises(ProducerFencedError):
            producer.send("single", b"y")


def test_an_authorization_failure_is_fatal(cluster: Cluster) -> None:
    cluster.coordinator.scripts["InitProducerId"] = [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ]
    with cluster.producer() as producer:
        with pytest.raises(Exception, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED") as raised:
            producer.init_transactions()
        code = getattr(raised.value, "code", None)
        assert code is ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        with pytest.raises(Exception, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
            producer.begin_transaction()


def test_a_stale_consumer_generation_makes_the_transaction_abortable(cluster: Cluster) -> None:
    cluster.coordinator.scripts["TxnCommitOffsets"] = [ErrorCode.ILLEGAL_GENERATION]
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        with pytest.raises(TransactionAbortableError, match="generation"):
            producer.send_offsets_to_transaction(
                {TopicPartition("in", 0): OffsetAndMetadata(5, "m")}, GROUP
            )
        producer.abort_transaction()
    assert [end.committed for end in cluster.coordinator.calls("EndTxn")] == [False]


def test_calls_in_the_wrong_state_raise_at_once(cluster: Cluster) -> None:
    with cluster.producer() as producer:
        with pytest.raises(TransactionStateError, match="init_transactions"):
            producer.send("single", b"x")
        with pytest.raises(TransactionStateError, match="init_transactions"):
            producer.begin_transaction()
        with pytest.raises(TransactionStateError):
            producer.commit_transaction()
        producer.init_transactions()
        with pytest.raises(TransactionStateError):
            producer.init_transactions()
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send("single", b"x")
        with pytest.raises(TransactionStateError):
            producer.abort_transaction()
        producer.begin_transaction()
        with pytest.raises(TransactionStateError):
            producer.begin_transaction()
        producer.abort_transaction()
    assert "Produce" not in cluster.methods()


def test_a_producer_without_transactional_id_has_no_transactions(double: RunningDouble) -> None:
    with Producer(bootstrap_servers=double.address) as producer:
        with pytest.raises(TransactionStateError, match=r"transactional\.id"):
            producer.init_transactions()
        with pytest.raises(TransactionStateError, match=r"transactional\.id"):
            producer.begin_transaction()


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"acks": "1"}, "acks=1"),
        ({"enable.idempotence": False}, "enable.idempotence=true"),
        ({"max.in.flight.requests.per.connection": 6}, "max.in.flight"),
    ],
)
def test_transactional_id_needs_idempotence(settings: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        Producer({"transactional.id": TXN_ID, **settings})


def test_batches_are_marked_transactional_only_in_a_transactional_producer(
    double: RunningDouble,
) -> None:
    with Producer(bootstrap_servers=double.address, linger_ms=0) as producer:
        producer.send("single", b"plain").result(RESULT_TIMEOUT_S)
    [batch] = double.call(lambda: list(double.double.partitions[("single", 0)].batches))
    assert not read_header(batch).is_transactional


def test_a_partition_the_coordinator_cannot_add_yet_is_asked_again(cluster: Cluster) -> None:
    cluster.coordinator.scripts["AddPartitionsToTxn"] = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert cluster.commit_one().offset == 0
    assert len(cluster.coordinator.calls("AddPartitionsToTxn")) == 2
    methods = cluster.methods()
    assert methods.index("Produce") > max(
        i for i, name in enumerate(methods) if name == "AddPartitionsToTxn"
    )


def test_a_partition_the_coordinator_refuses_makes_the_transaction_abortable(
    cluster: Cluster,
) -> None:
    cluster.coordinator.scripts["AddPartitionsToTxn"] = [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        future = producer.send("single", b"x")
        with pytest.raises(TransactionAbortableError, match="TOPIC_AUTHORIZATION_FAILED"):
            producer.commit_transaction()
        assert future.exception(RESULT_TIMEOUT_S) is not None
        producer.abort_transaction()
    assert "Produce" not in cluster.methods()


def test_the_async_producer_runs_the_same_transaction(cluster: Cluster) -> None:
    async def main() -> None:
        async with AsyncProducer(
            {"bootstrap.servers": cluster.running.address, **FAST}
        ) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            future = await producer.send("single", b"x")
            await producer.send_offsets_to_transaction({TopicPartition("in", 0): 3}, GROUP)
            await producer.commit_transaction()
            assert (await future).offset == 0

    asyncio.run(asyncio.wait_for(main(), RESULT_TIMEOUT_S))
    [end] = cluster.coordinator.calls("EndTxn")
    assert end.committed
    assert len(cluster.coordinator.calls("TxnCommitOffsets")) == 1


@pytest.mark.parametrize("failure", ["unknown topic", "too large", "no memory"])
def test_a_send_failing_before_its_batch_makes_the_transaction_abortable(
    cluster: Cluster, failure: str
) -> None:
    """A record that never reaches a batch (no metadata or memory within max.block.ms, or too
    large) is missing from the transaction: commit raises, nothing is committed, and the abort
    recovers (Kafka's doSend makes the transaction abortable)."""
    cluster.coordinator.add_delay_s = 1.0  # the batches wait (and hold memory) meanwhile
    with cluster.producer(max_block_ms=300, buffer_memory=64 * 1024) as producer:
        producer.init_transactions(RESULT_TIMEOUT_S)
        producer.begin_transaction()
        producer.send("single", b"kept")
        if failure == "unknown topic":
            assert producer.send("no-such-topic", b"lost").exception(RESULT_TIMEOUT_S) is not None
        else:
            value = b"x" * (100 * 1024 if failure == "too large" else 40 * 1024)
            with pytest.raises((RecordTooLargeError, ClientTimeoutError)):
                # "no memory": the second 40 KiB record finds no room while the first waits.
                for partition in range(3):
                    producer.send("events", value, partition=partition)
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction(RESULT_TIMEOUT_S)
        producer.abort_transaction(RESULT_TIMEOUT_S)
    assert [end.committed for end in cluster.coordinator.calls("EndTxn")] in ([], [False])


def _hold_encoding(monkeypatch: pytest.MonkeyPatch, value: bytes) -> tuple[Event, Event]:
    """Make send of ``value`` stop between its state check and its batch (while encoding);
    returns (entered, release)."""
    entered, release = Event(), Event()
    encode = accumulator_module.encode_record_tail

    def held(key: bytes | None, data: bytes | None, headers: Any) -> bytes:
        if data == value:
            entered.set()
            release.wait(RESULT_TIMEOUT_S)
        return encode(key, data, headers)

    monkeypatch.setattr(accumulator_module, "encode_record_tail", held)
    return entered, release


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_send_racing_the_end_of_its_transaction_is_in_it_or_fails(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """A send that started in a transaction while another thread commits or aborts it: its
    record is never written after that transaction's EndTxn (in the next transaction, or
    after the abort markers); the send raises instead."""
    entered, release = _hold_encoding(monkeypatch, b"late")
    outcome: dict[str, object] = {}

    def late_send(producer: Producer) -> None:
        try:
            outcome["future"] = producer.send("single", b"late")
        except TransactionStateError as error:
            outcome["error"] = error

    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("single", b"first").result(RESULT_TIMEOUT_S)
        sender = Thread(target=late_send, args=(producer,))
        sender.start()
        assert entered.wait(RESULT_TIMEOUT_S)
        ending = Thread(
            target=producer.commit_transaction if end == "commit" else producer.abort_transaction
        )
        ending.start()
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while producer._core.transactions.state.state is TxnState.IN_TRANSACTION:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.005)
        release.set()
        sender.join(RESULT_TIMEOUT_S)
        ending.join(RESULT_TIMEOUT_S)
        assert not ending.is_alive()
        producer.begin_transaction()
        producer.send("events", b"next", partition=0).result(RESULT_TIMEOUT_S)
        producer.commit_transaction()
    assert "error" in outcome, "the late record went into another transaction"
    late = [
        name
        for name, request in cluster.log
        if name == "Produce" and any(b"late" in data.records for data in request.partitions)
    ]
    assert late == []


def test_an_abort_that_ran_out_of_time_is_resumed_by_calling_it_again(cluster: Cluster) -> None:
    """EndTxn(abort) unanswered (CONCURRENT_TRANSACTIONS) past the operation's bound: the
    abort fails, and calling abort_transaction again finishes it; the producer goes on."""
    with cluster.producer(transaction_timeout_ms=300) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("single", b"x").result(RESULT_TIMEOUT_S)
        scripts = cluster.coordinator.scripts
        cluster.running.call(
            lambda: scripts.update(EndTxn=[ErrorCode.CONCURRENT_TRANSACTIONS] * 10_000)
        )
        with pytest.raises(ClientTimeoutError, match="call abort_transaction again"):
            producer.abort_transaction(RESULT_TIMEOUT_S)
        cluster.running.call(lambda: scripts.update(EndTxn=[]))
        producer.abort_transaction()
        producer.begin_transaction()
        kept = producer.send("single", b"kept")
        producer.commit_transaction()
        assert kept.result(RESULT_TIMEOUT_S).offset >= 0
    assert [end.committed for end in cluster.coordinator.calls("EndTxn")][-2:] == [False, True]


def test_a_commit_that_ran_out_of_time_is_resumed_by_calling_it_again(cluster: Cluster) -> None:
    """EndTxn(commit) unanswered past the operation's bound: the outcome is unknown, so the
    transaction is not made abortable; calling commit_transaction again finishes it."""
    with cluster.producer(transaction_timeout_ms=300) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        committed = producer.send("single", b"x")
        scripts = cluster.coordinator.scripts
        cluster.running.call(
            lambda: scripts.update(EndTxn=[ErrorCode.CONCURRENT_TRANSACTIONS] * 10_000)
        )
        with pytest.raises(ClientTimeoutError, match="may or may not have committed"):
            producer.commit_transaction(RESULT_TIMEOUT_S)
        with pytest.raises(TransactionStateError):
            producer.abort_transaction()
        cluster.running.call(lambda: scripts.update(EndTxn=[]))
        producer.commit_transaction()
        assert committed.result(RESULT_TIMEOUT_S).offset >= 0
        producer.begin_transaction()
        producer.send("single", b"next")
        producer.commit_transaction()
    ends = cluster.coordinator.calls("EndTxn")
    assert {end.committed for end in ends} == {True}


def test_a_batch_failing_during_the_abort_bumps_the_epoch(cluster: Cluster) -> None:
    """A batch in flight when the abort starts fails afterwards: its sequence may be a gap,
    so the abort bumps the epoch and the next transaction numbers the partition from 0."""

    aborting: list[Any] = []  # the producer, once made

    async def produce(request: Any, context: Any) -> Any:
        # Answered (a failure) only once the abort has started: the batch is in flight then.
        cluster.log.append(("Produce", request))
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while aborting[0]._core.transactions.state.state is TxnState.IN_TRANSACTION:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        return answer_all(request, ErrorCode.INVALID_RECORD)

    faults = cluster.storage.faults
    answered = faults["Produce"]
    faults["Produce"] = produce
    with cluster.producer() as producer:
        aborting.append(producer)
        producer.init_transactions()
        producer.begin_transaction()
        failed = producer.send("single", b"x")
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while "Produce" not in cluster.methods():  # in flight
            assert time.monotonic() < deadline
            time.sleep(0.005)
        producer.abort_transaction()
        assert failed.exception() is not None
        faults["Produce"] = answered
        producer.begin_transaction()
        producer.send("single", b"next").result(RESULT_TIMEOUT_S)
        producer.commit_transaction()
    inits = cluster.coordinator.calls("InitProducerId")
    assert [(i.producer_id, i.producer_epoch) for i in inits] == [(-1, -1), (PRODUCER_ID, 0)]
    last = cluster.produced_batches()[-1][2]
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


def test_invalid_producer_epoch_from_a_partition_is_abortable_and_the_abort_recovers(
    cluster: Cluster,
) -> None:
    """KIP-588: a partition answering INVALID_PRODUCER_EPOCH means the coordinator aborted the
    transaction with a bumped epoch (it timed out). The transaction must be aborted; the abort
    sends no EndTxn (its old epoch would be fenced) but InitProducerId with the producer's id
    and epoch, and the producer goes on under the answer."""
    cluster.produce_errors = [ErrorCode.INVALID_PRODUCER_EPOCH]
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        failed = producer.send("single", b"late")
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        assert not isinstance(failed.exception(), ProducerFencedError)
        producer.abort_transaction()
        producer.begin_transaction()
        kept = producer.send("single", b"kept")
        producer.commit_transaction()
        assert kept.result(RESULT_TIMEOUT_S).offset >= 0
    assert [end.committed for end in cluster.coordinator.calls("EndTxn")] == [True]
    inits = cluster.coordinator.calls("InitProducerId")
    assert [(i.producer_id, i.producer_epoch) for i in inits] == [(-1, -1), (PRODUCER_ID, 0)]


def test_a_refused_group_coordinator_lookup_makes_the_transaction_abortable(
    cluster: Cluster,
) -> None:
    """send_offsets_to_transaction whose group FindCoordinator is refused (not authorized for
    the group): that transaction cannot commit, the producer is not dead."""
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        scripts = cluster.coordinator.scripts
        cluster.running.call(
            lambda: scripts.update(FindCoordinator=[ErrorCode.GROUP_AUTHORIZATION_FAILED])
        )
        with pytest.raises(TransactionAbortableError, match="GROUP_AUTHORIZATION_FAILED"):
            producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, GROUP)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("single", b"kept")
        producer.commit_transaction()


def test_offsets_that_ran_out_of_time_make_the_transaction_abortable(cluster: Cluster) -> None:
    """TxnCommitOffsets unanswered past the operation's bound: the offsets may be missing
    from the transaction, so it cannot commit."""
    with cluster.producer(transaction_timeout_ms=300) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        scripts = cluster.coordinator.scripts
        cluster.running.call(
            lambda: scripts.update(
                TxnCommitOffsets=[ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 10_000
            )
        )
        with pytest.raises(ClientTimeoutError):
            producer.send_offsets_to_transaction(
                {TopicPartition("in", 0): 1}, GROUP, timeout=RESULT_TIMEOUT_S
            )
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        producer.abort_transaction()
    assert [end.committed for end in cluster.coordinator.calls("EndTxn")] == [False]


@pytest.mark.parametrize(
    "status", [grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT]
)
def test_a_coordinator_call_failing_for_good_is_not_retried(
    cluster: Cluster, status: grpc.StatusCode
) -> None:
    """A gRPC status no retry can change is an unexpected answer (fatal) at once, not retried
    until the operation's bound."""
    cluster.coordinator.statuses["EndTxn"] = status
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("single", b"x")
        started = time.monotonic()
        with pytest.raises(ApiError, match=status.name):
            producer.commit_transaction()
        assert time.monotonic() - started < 2.0  # the bound is 3 s + 2 s
        with pytest.raises(ApiError):
            producer.begin_transaction()
    assert len(cluster.coordinator.calls("EndTxn")) == 1


def test_two_phase_is_asked_in_init_and_prepare_leaves_the_transaction_to_another_party(
    cluster: Cluster,
) -> None:
    """KIP-939: InitProducerId carries enable_two_phase_commit; prepare_transaction sends the
    records, answers the producer id and epoch, and ends nothing (no EndTxn, also not on
    close); only commit or abort may follow it."""
    with cluster.producer(transaction_two_phase_commit_enable=True) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent = producer.send("single", b"x")
        prepared = producer.prepare_transaction()
        assert sent.done() and sent.exception() is None
        assert (prepared.transactional_id, prepared.producer_id) == (TXN_ID, PRODUCER_ID)
        assert prepared.producer_epoch == 0
        with pytest.raises(TransactionStateError):
            producer.send("single", b"y")
        with pytest.raises(TransactionStateError):
            producer.begin_transaction()
    [init] = cluster.coordinator.calls("InitProducerId")
    assert init.enable_two_phase_commit
    assert "EndTxn" not in cluster.methods()


def test_prepare_needs_two_phase_and_two_phase_needs_a_transactional_id(cluster: Cluster) -> None:
    with cluster.producer() as producer:
        producer.init_transactions()
        producer.begin_transaction()
        with pytest.raises(TransactionStateError, match=r"two\.phase"):
            producer.prepare_transaction()
        producer.abort_transaction()
    [init] = cluster.coordinator.calls("InitProducerId")
    assert not init.enable_two_phase_commit
    with pytest.raises(ConfigError, match=r"needs a transactional\.id"):
        Producer({"transaction.two.phase.commit.enable": True})
