"""Two-phase transactions (KIP-939) on a real cluster: the coordinator's enable2Pc and the
SDK's prepare_transaction / Admin.complete_transaction / Admin.fence_transactional_id
(a controller, a storage node and two coordinators as processes, shared by the module).

- a prepared two-phase transaction outlives transaction.timeout.ms while an ordinary one
  begun after it on the same coordinator is aborted (the witness that the timeout sweeps
  went past it: no sleeping past the deadline); the partition's leader still takes its
  records after the timeout (its KIP-890 verification asks the coordinator, which still has
  it Ongoing); the producer's close leaves it open; another process commits it with EndTxn
  under its producer id and epoch, and read_committed then sees its records; the commit
  repeated succeeds (a driver may retry);
- fence_transactional_id aborts a prepared transaction: its records are never visible, and a
  commit under the old epoch is PRODUCER_FENCED;
- the flag survives the coordinator's failover: the successor (which replays
  __transaction_state) does not abort it for its timeout either.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Final

import pytest
from cluster_fixture import one_node_transactions_cluster, wait_until

from brook.client import (
    Admin,
    ApiError,
    Consumer,
    PreparedTransaction,
    Producer,
    TopicPartition,
    TransactionState,
)
from brook.client.admin import NewTopic
from brook.client.errors import TransactionStateError
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

WAIT_TIMEOUT_S: Final = 60.0
CLIENT_TIMEOUT_S: Final = 30.0
TXN_TIMEOUT_MS: Final = 1000
# The coordinators look for timed-out transactions this often.
ABORT_CHECK_MS: Final = 200
# Ids tried for a witness transaction on a given coordinator (of two: each lands on it with
# probability about 1/2).
WITNESS_IDS_MAX: Final = 20
SESSION_TIMEOUT_MS: Final = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    session = {
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "broker.heartbeat.interval.ms": "200",
    }
    with one_node_transactions_cluster(
        tmp_path_factory,
        "two-phase",
        controller={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)},
        storage_node=session,
        group_coordinator={
            **session,
            "retry.backoff.max.ms": "500",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS),
        },
    ) as started:
        yield started


def _admin(cluster: LocalCluster) -> Admin:
    return Admin(cluster.controller_bootstrap_servers)


def _create_topic(cluster: LocalCluster, topic: str) -> None:
    with _admin(cluster) as admin:
        assert admin.create_topics([NewTopic(topic, 1, 1)]) == {topic: None}


def _producer(cluster: LocalCluster, transactional_id: str, *, two_phase: bool) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(Role.STORAGE_NODE),
            "transactional.id": transactional_id,
            "transaction.two.phase.commit.enable": two_phase,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "max.block.ms": int(CLIENT_TIMEOUT_S * 1000),
            "linger.ms": 0,
        }
    )


def _committed_values(cluster: LocalCluster, topic: str, marker: bytes) -> list[bytes]:
    """The values read_committed reads from ``topic`` up to ``marker`` (a record the caller
    committed last: once it is read, everything before it that will ever be visible is)."""
    with Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(Role.STORAGE_NODE),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while marker not in values:
            assert time.monotonic() < deadline, f"{marker!r} never became visible in {topic}"
            values += [r.value for r in consumer.poll(0.5) if r.value is not None]
        return values


def _commit_marker(cluster: LocalCluster, topic: str, marker: bytes) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers(Role.STORAGE_NODE)) as producer:
        producer.send(topic, marker, partition=0)
        producer.flush(CLIENT_TIMEOUT_S)


def _state(cluster: LocalCluster, transactional_id: str) -> TransactionState:
    with _admin(cluster) as admin:
        return admin.describe_transactions([transactional_id])[transactional_id].state


def _sweep_past(cluster: LocalCluster, topic: str, transactional_id: str) -> None:
    """Returns once the coordinator holding ``transactional_id`` has aborted, for its timeout,
    an ordinary transaction that began after ``transactional_id``'s with the same timeout: its
    timeout sweeps have then gone past that transaction's deadline too (a witness, instead of
    sleeping past the deadline and hoping a sweep ran). Witnesses that land on another
    coordinator are aborted and another id is tried."""
    with _admin(cluster) as admin:
        holder = admin.describe_transactions([transactional_id])[transactional_id].coordinator
        for n in range(WITNESS_IDS_MAX):
            witness = f"{transactional_id}-witness-{n}"
            with _producer(cluster, witness, two_phase=False) as producer:
                producer.init_transactions()
                producer.begin_transaction()
                producer.send(topic, b"witness", partition=0).result(CLIENT_TIMEOUT_S)
                if admin.describe_transactions([witness])[witness].coordinator != holder:
                    producer.abort_transaction()
                    continue
                wait_until(
                    lambda w=witness: _state(cluster, w) is TransactionState.COMPLETE_ABORT,  # type: ignore[misc]
                    f"{witness}, an ordinary transaction, to be aborted for its timeout",
                    WAIT_TIMEOUT_S,
                )
                return
    raise AssertionError(f"no witness id of {WITNESS_IDS_MAX} landed on coordinator {holder}")


def _complete_elsewhere(cluster: LocalCluster, prepared: PreparedTransaction) -> None:
    """Admin.complete_transaction(commit) in another process, from the three ids alone."""
    script = (
        "import sys\n"
        "from brook.client import Admin, PreparedTransaction\n"
        "with Admin(sys.argv[1]) as admin:\n"
        "    prepared = PreparedTransaction(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))\n"
        "    admin.complete_transaction(prepared, commit=True)\n"
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            cluster.controller_bootstrap_servers,
            prepared.transactional_id,
            str(prepared.producer_id),
            str(prepared.producer_epoch),
        ],
        check=True,
        timeout=WAIT_TIMEOUT_S,
    )


def _prepare(cluster: LocalCluster, topic: str, transactional_id: str) -> PreparedTransaction:
    """A two-phase transaction with one record, prepared, its producer closed."""
    with _producer(cluster, transactional_id, two_phase=True) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, f"{transactional_id}-1".encode(), partition=0)
        return producer.prepare_transaction()


def test_a_prepared_transaction_outlives_its_timeout_and_another_process_commits_it(
    cluster: LocalCluster,
) -> None:
    topic = "two-phase-commit"
    _create_topic(cluster, topic)
    with _producer(cluster, "prepared", two_phase=True) as two_phase:
        two_phase.init_transactions()
        two_phase.begin_transaction()
        two_phase.send(topic, b"before-timeout", partition=0).result(CLIENT_TIMEOUT_S)
        _sweep_past(cluster, topic, "prepared")
        # Past its timeout and swept: still Ongoing, and still written to.
        assert _state(cluster, "prepared") is TransactionState.ONGOING
        two_phase.send(topic, b"after-timeout", partition=0).result(CLIENT_TIMEOUT_S)
        prepared = two_phase.prepare_transaction()
        with pytest.raises(TransactionStateError):
            two_phase.begin_transaction()
    assert _state(cluster, "prepared") is TransactionState.ONGOING, "close leaves it open"
    assert prepared.transactional_id == "prepared"

    _complete_elsewhere(cluster, prepared)
    with _admin(cluster) as admin:
        admin.complete_transaction(prepared, commit=True)  # repeated: still success
        with pytest.raises(ApiError) as opposite:
            admin.complete_transaction(prepared, commit=False)
    assert opposite.value.code is ErrorCode.INVALID_TXN_STATE
    _commit_marker(cluster, topic, b"end")
    visible = _committed_values(cluster, topic, b"end")
    assert visible == [b"before-timeout", b"after-timeout", b"end"]


def test_fencing_the_transactional_id_aborts_the_prepared_transaction(
    cluster: LocalCluster,
) -> None:
    topic = "two-phase-fenced"
    _create_topic(cluster, topic)
    prepared = _prepare(cluster, topic, "to-fence")
    with _admin(cluster) as admin:
        admin.fence_transactional_id("to-fence")
        assert _state(cluster, "to-fence") in (
            TransactionState.COMPLETE_ABORT,
            TransactionState.EMPTY,
        )
        with pytest.raises(ApiError) as fenced:
            admin.complete_transaction(prepared, commit=True)
        assert fenced.value.code is ErrorCode.PRODUCER_FENCED
        admin.fence_transactional_id("to-fence")  # nothing open: a bump, no error
    _commit_marker(cluster, topic, b"end")
    assert _committed_values(cluster, topic, b"end") == [b"end"]


def test_a_prepared_transaction_outlives_its_timeout_across_a_coordinator_failover(
    cluster: LocalCluster,
) -> None:
    """Last in the module: one coordinator is killed (and started again at the end)."""
    topic = "two-phase-failover"
    _create_topic(cluster, topic)
    prepared = _prepare(cluster, topic, "failover")
    with _admin(cluster) as admin:
        owner = admin.describe_transactions(["failover"])["failover"].coordinator
    victim = next(
        n for n in cluster.names(Role.GROUP_COORDINATOR) if cluster.spec(n).node_id == owner
    )
    cluster.kill(victim)
    try:
        cluster.wait(victim, 10_000)

        def moved() -> bool:
            with _admin(cluster) as admin:
                described = admin.describe_transactions(["failover"])["failover"]
            return described.coordinator != owner

        wait_until(moved, "the other coordinator to take the transaction over", WAIT_TIMEOUT_S)
        _sweep_past(cluster, topic, "failover")
        assert _state(cluster, "failover") is TransactionState.ONGOING
        with _admin(cluster) as admin:
            admin.complete_transaction(prepared, commit=True)
    finally:
        cluster.start(victim)
    _commit_marker(cluster, topic, b"end")
    assert _committed_values(cluster, topic, b"end") == [b"failover-1", b"end"]
