"""kafkajs transactions through the gateway (issue #16), driven through
tests/compat/kafkajs_client.mjs (phase ``transact``) in a Node subprocess.

kafkajs's transactional producer runs four transactions over both partitions of a topic:
committed; aborted; committed with offsets for a group (``sendOffsets``); aborted with other
offsets for the group. Then:

- kafkajs's own group consumer (READ_COMMITTED, its default) reads exactly the committed
  transactions' records, in order per partition;
- confluent-kafka with read_uncommitted reads all four transactions' records (the aborts
  really wrote), and with read_committed the same as kafkajs;
- the group's committed offsets (read with confluent-kafka) are those of the committed
  transaction, not the aborted one's.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from cluster_fixture import wait_until
from test_kafkajs import PARTITIONS, REQUEST_TIMEOUT_S, _kafkajs
from txn_copy_job import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Record,
    by_partition,
    group_offsets,
    read_topics,
    wait_for_records,
)

from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

TOPIC = "kafkajs-transactions"
GROUP = "kafkajs-transactions-offsets"


def _sent(transactions: list[dict[str, Any]], commit: set[bool]) -> list[Record]:
    """The records the transactions whose outcome is in ``commit`` sent, in send order."""
    return [
        (TOPIC, m["partition"], m["key"].encode(), m["value"].encode())
        for transaction in transactions
        if transaction["commit"] in commit
        for m in transaction["sent"]
    ]


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
    committed = _sent(transactions, {True})
    # The offsets of the committed transaction, not the aborted one's (99).
    wait_until(
        lambda: group_offsets(bootstrap, GROUP, TOPIC, PARTITIONS) == [5] * PARTITIONS,
        f"{GROUP}'s offsets committed by kafkajs's transaction",
        REQUEST_TIMEOUT_S,
    )

    # kafkajs's own consumer reads exactly the committed records: were an aborted one
    # delivered, it would be among the first len(committed).
    consumed = _kafkajs("consume", bootstrap, TOPIC, f"{GROUP}-reader", str(len(committed)))
    by_offset = sorted(
        (m["partition"], m["offset"], m["key"], m["value"]) for m in consumed["messages"]
    )
    assert by_partition([(TOPIC, p, k.encode(), v.encode()) for p, _, k, v in by_offset]) == (
        by_partition(committed)
    )

    wait_for_records(
        partial(read_topics, bootstrap, [TOPIC], READ_COMMITTED, PARTITIONS), committed
    )
    wait_for_records(
        partial(read_topics, bootstrap, [TOPIC], READ_UNCOMMITTED, PARTITIONS),
        _sent(transactions, {True, False}),
    )
