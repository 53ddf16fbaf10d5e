"""kafkajs transactions through the gateway (issue #16), driven through
tests/compat/kafkajs_client.mjs (phase ``transact``) in a Node subprocess.

kafkajs's transactional producer runs four transactions over both partitions of a topic:
committed; aborted; committed with offsets for a group (``sendOffsets``); aborted with other
offsets for the group. Then:

- kafkajs's own group consumer (READ_COMMITTED, its default) reads exactly the committed
  transactions' records, in order per partition;
- confluent-kafka with read_uncommitted reads all four transactions' records (the aborts
  really wrote), and with read_committed the same as kafkajs;
- the group's committed offsets are those of the committed transaction, not the aborted one's.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_kafkajs import PARTITIONS, _kafkajs
from txn_copy_job import READ_COMMITTED, READ_UNCOMMITTED, read_topics

from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

TOPIC = "kafkajs-transactions"
GROUP = "kafkajs-transactions-offsets"


def _sent(transactions: list[dict[str, Any]], names: set[str]) -> dict[int, list[str]]:
    """partition -> values the named transactions sent to it, in send order."""
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for transaction in transactions:
        if transaction["name"] in names:
            for message in transaction["sent"]:
                out[message["partition"]].append(message["value"])
    return out


def _values(records: list[tuple[str, int, bytes, bytes]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for _topic, partition, _key, value in records:
        out[partition].append(value.decode())
    return out


def test_kafkajs_transactions_commit_abort_and_send_offsets(compat_cluster: LocalCluster) -> None:
    bootstrap = compat_cluster.kafka_bootstrap_servers
    result = _kafkajs("transact", bootstrap, TOPIC, GROUP)
    transactions = result["transactions"]
    assert [(t["name"], t["commit"]) for t in transactions] == [
        ("committed", True),
        ("aborted", False),
        ("committed-with-offsets", True),
        ("aborted-with-offsets", False),
    ]
    committed = _sent(transactions, {t["name"] for t in transactions if t["commit"]})
    everything = _sent(transactions, {t["name"] for t in transactions})

    (offsets,) = result["committed"]
    assert sorted((p["partition"], int(p["offset"])) for p in offsets["partitions"]) == [
        (p, 5) for p in range(PARTITIONS)
    ]

    count = sum(map(len, committed.values()))
    consumed = _kafkajs("consume", bootstrap, TOPIC, f"{GROUP}-reader", str(count))
    by_partition: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    for message in consumed["messages"]:
        by_partition[message["partition"]].append((message["offset"], message["value"]))
    assert {p: [v for _, v in sorted(m)] for p, m in by_partition.items()} == committed

    topics = [TOPIC]
    read = read_topics(bootstrap, topics, READ_COMMITTED, PARTITIONS)
    assert _values(read) == committed
    assert _values(read_topics(bootstrap, topics, READ_UNCOMMITTED, PARTITIONS)) == everything
