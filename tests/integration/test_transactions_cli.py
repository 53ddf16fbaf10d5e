"""``brook transactions`` run as a subprocess against a real cluster (a controller, a storage
node and two coordinators as processes; one cluster shared by the module, each test on topics
and ids of its own):

- ``list`` and ``describe`` show an SDK transaction as the coordinator holds it: Ongoing with
  its partition while open, CompleteCommit once committed;
- ``fence`` aborts a prepared two-phase transaction (which no timeout ends) and fences its
  holder;
- a hanging transaction (a transactional batch from a producer id no coordinator knows) holds
  the partition's last stable offset; ``find-hanging`` lists it and ``abort --start-offset``
  ends it: the last stable offset reaches the high watermark, and the batch is aborted
  (READ_COMMITTED skips it, READ_UNCOMMITTED still has it).

Without a coordinator behind the hanging batch there is nothing to verify it with, so the
storage node runs with transaction.partition.verification.enable=false.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from cluster_fixture import one_node_transactions_cluster, wait_until
from storage_rpc import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    batch,
    code_of,
    fetch,
    leader_address,
    produce,
    values,
)

from brook.client import Admin, ApiError, Producer
from brook.client.admin import NewTopic
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

BROOK: Final = str(Path(sys.executable).with_name("brook"))
# A `brook` process imports gRPC before it does anything; on a busy machine that takes seconds.
COMMAND_TIMEOUT_S: Final = 60.0
WAIT_TIMEOUT_S: Final = 60.0
# No coordinator has handed this producer id out.
UNKNOWN_PRODUCER_ID: Final = 1_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with one_node_transactions_cluster(
        tmp_path_factory,
        "txn-cli",
        storage_node={"transaction.partition.verification.enable": "false"},
    ) as started:
        yield started


def _output(cluster: LocalCluster, *args: str) -> str:
    """What ``brook transactions ARGS`` prints; it must exit 0."""
    done = subprocess.run(
        [BROOK, "transactions", *args, "--bootstrap-server", cluster.controller_bootstrap_servers],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def _brook(cluster: LocalCluster, *args: str) -> list[list[str]]:
    """The rows (whitespace-split lines) ``brook transactions ARGS`` prints; it must exit 0."""
    return [line.split() for line in _output(cluster, *args).splitlines()]


def _table(cluster: LocalCluster, *args: str) -> list[dict[str, str]]:
    """The rows of a table ``brook transactions ARGS`` prints, by column name."""
    header, *rows = _brook(cluster, *args)
    return [dict(zip(header, row, strict=True)) for row in rows]


def _create_topic(cluster: LocalCluster, topic: str) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, 1, 1)]) == {topic: None}


def test_list_and_describe_show_an_sdk_transaction_open_then_committed(
    cluster: LocalCluster,
) -> None:
    topic, transactional_id = "cli-txn-out", "cli-writer"
    _create_topic(cluster, topic)
    with Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(Role.STORAGE_NODE),
            "transactional.id": transactional_id,
            "max.block.ms": int(WAIT_TIMEOUT_S * 1000),
            "linger.ms": 0,
        }
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open", partition=0).result(WAIT_TIMEOUT_S)

        (listed,) = [
            row for row in _table(cluster, "list") if row["TRANSACTIONAL-ID"] == transactional_id
        ]
        assert listed["STATE"] == "Ongoing"
        (open_row,) = _table(cluster, "describe", "--transactional-id", transactional_id)
        assert open_row["TRANSACTIONAL-ID"] == transactional_id
        assert open_row["STATE"] == "Ongoing"
        assert open_row["PRODUCER-ID"] == listed["PRODUCER-ID"]
        assert open_row["COORDINATOR"] == listed["COORDINATOR"]
        assert open_row["PARTITIONS"] == f"{topic}-0"
        assert int(open_row["START-TIME-MS"]) > 0

        producer.commit_transaction()

    (committed,) = _table(cluster, "describe", "--transactional-id", transactional_id)
    assert committed["STATE"] == "CompleteCommit"
    assert committed["PRODUCER-ID"] == listed["PRODUCER-ID"]
    assert committed["PARTITIONS"] == "-"
    (listed_after,) = [
        row for row in _table(cluster, "list") if row["TRANSACTIONAL-ID"] == transactional_id
    ]
    assert listed_after["STATE"] == "CompleteCommit"

    # --json: the same, one document with stable keys.
    (listed_json,) = [
        t
        for t in json.loads(_output(cluster, "list", "--json"))["transactions"]
        if t["transactionalId"] == transactional_id
    ]
    assert listed_json == {
        "transactionalId": transactional_id,
        "coordinator": int(listed["COORDINATOR"]),
        "producerId": int(listed["PRODUCER-ID"]),
        "state": "CompleteCommit",
    }
    described = json.loads(
        _output(cluster, "describe", "--transactional-id", transactional_id, "--json")
    )
    assert described["state"] == "CompleteCommit"
    assert described["producerId"] == int(listed["PRODUCER-ID"])
    assert described["topicPartitions"] == [] and described["transactionStartTimeMs"] is None
    assert set(described) == {
        "transactionalId",
        "coordinator",
        "producerId",
        "producerEpoch",
        "state",
        "transactionTimeoutMs",
        "transactionStartTimeMs",
        "topicPartitions",
        "groups",
    }


def test_a_hanging_transaction_is_found_and_aborted(cluster: LocalCluster) -> None:
    topic = "cli-hanging"
    _create_topic(cluster, topic)
    leader = leader_address(cluster, topic, 0)

    def produced(records: bytes) -> int:
        answer = produce(leader, topic, 0, records)
        assert code_of(answer) is ErrorCode.NONE, answer.error_message
        return int(answer.base_offset)

    before = produced(batch([b"before"]))
    start = produced(batch([b"hanging-a", b"hanging-b"], UNKNOWN_PRODUCER_ID, 0, txn=True))
    after = produced(batch([b"after"]))
    assert before < start < after
    stuck = fetch(leader, topic, 0, 0, READ_COMMITTED, decode=True)
    assert stuck.last_stable_offset == start
    assert values(stuck) == [b"before"]

    # A candidate once its producer has been silent longer than the timeout: 0 minutes here,
    # so from the next millisecond on.
    def hanging_rows() -> list[dict[str, str]]:
        return _table(cluster, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")

    found: list[dict[str, str]] = []

    def listed() -> bool:
        found[:] = hanging_rows()
        return bool(found)

    wait_until(listed, "find-hanging to list the hanging transaction", WAIT_TIMEOUT_S, 0.2)
    (row,) = found
    assert (row["TOPIC"], row["PARTITION"]) == (topic, "0")
    assert (row["PRODUCER-ID"], row["PRODUCER-EPOCH"]) == (str(UNKNOWN_PRODUCER_ID), "0")
    assert row["START-OFFSET"] == str(start)
    assert row["COORDINATOR-EPOCH"] == "-"

    aborted = _brook(
        cluster, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start)
    )
    assert [" ".join(line) for line in aborted] == [
        f"Aborted the transaction of producer {UNKNOWN_PRODUCER_ID} (epoch 0) on {topic}-0."
    ]

    def stable() -> bool:
        answer = fetch(leader, topic, 0, 0, READ_COMMITTED)
        return bool(answer.last_stable_offset == answer.high_watermark)

    wait_until(stable, "the last stable offset to reach the high watermark", WAIT_TIMEOUT_S)
    committed = fetch(leader, topic, 0, 0, READ_COMMITTED, decode=True)
    assert values(committed) == [b"before", b"after"]
    uncommitted = fetch(leader, topic, 0, 0, READ_UNCOMMITTED, decode=True)
    assert values(uncommitted) == [b"before", b"hanging-a", b"hanging-b", b"after"]
    assert hanging_rows() == []


def test_fence_aborts_a_prepared_two_phase_transaction_that_no_timeout_ends(
    cluster: LocalCluster,
) -> None:
    """What an operator does for a Spark task that died after preparing its transaction: the
    records never become visible, the partition's last stable offset moves on, and the old
    holder can no longer commit."""
    topic, transactional_id = "cli-fenced-out", "cli-prepared"
    _create_topic(cluster, topic)
    bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)
    with Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.two.phase.commit.enable": True,
            "max.block.ms": int(WAIT_TIMEOUT_S * 1000),
            "linger.ms": 0,
        }
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"prepared", partition=0).result(WAIT_TIMEOUT_S)
        prepared = producer.prepare_transaction()
    (open_row,) = _table(cluster, "describe", "--transactional-id", transactional_id)
    assert open_row["STATE"] == "Ongoing"

    (printed,) = _brook(cluster, "fence", "--transactional-id", transactional_id)
    assert printed[:2] == ["fenced", f"{transactional_id}:"]

    (fenced,) = _table(cluster, "describe", "--transactional-id", transactional_id)
    assert fenced["STATE"] == "Empty"  # aborted, then held by no one (as after InitProducerId)
    assert int(fenced["PRODUCER-EPOCH"]) > prepared.producer_epoch
    leader = leader_address(cluster, topic, 0)

    def ended() -> bool:
        answer = fetch(leader, topic, 0, 0, READ_COMMITTED)
        return bool(answer.last_stable_offset == answer.high_watermark)

    wait_until(ended, "the fenced transaction's abort marker at the partition", WAIT_TIMEOUT_S)
    assert values(fetch(leader, topic, 0, 0, READ_COMMITTED, decode=True)) == []
    assert values(fetch(leader, topic, 0, 0, READ_UNCOMMITTED, decode=True)) == [b"prepared"]
    with Admin(cluster.controller_bootstrap_servers) as admin:
        with pytest.raises(ApiError) as refused:
            admin.complete_transaction(prepared, commit=True)
    assert refused.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
