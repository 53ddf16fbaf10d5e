"""kcat with ``-X isolation.level=read_committed`` through the gateway sees only committed
records (issue #16).

A confluent-kafka transactional producer commits a transaction, aborts one, commits another,
and leaves a fourth open. kcat reading from the beginning to the end (``-e``) with
read_committed prints exactly the two committed transactions' records, in order per
partition, and stops at the open transaction (the last stable offset); with read_uncommitted
it prints all four. Once the fourth commits, read_committed prints it too.
"""

from __future__ import annotations

from functools import partial
from typing import Final

import pytest
from test_gateway_fuzz import KafkaGateways, kafka_gateways
from test_kcat import _kcat
from test_transactions_confluent import (
    TIMEOUT_S,
    create_topics,
    records_for,
    transactional_producer,
)
from txn_copy_job import Record, produce_all, wait_for_records

from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

TOPIC: Final = "kcat-transactions"
FORMAT: Final = r"%t\t%p\t%k\t%s\n"


@pytest.fixture(scope="module")
def gateway(compat_cluster: LocalCluster) -> KafkaGateways:
    return kafka_gateways(compat_cluster)


def _kcat_read(gateway: KafkaGateways, isolation: str) -> list[Record]:
    output = _kcat(
        gateway,
        "-C",
        "-t",
        TOPIC,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-X",
        f"isolation.level={isolation}",
        "-f",
        FORMAT,
    )
    records = []
    for line in output.splitlines():
        topic, partition, key, value = line.split("\t")
        records.append((topic, int(partition), key.encode(), value.encode()))
    return records


def test_kcat_read_committed_sees_only_committed_records(gateway: KafkaGateways) -> None:
    create_topics(gateway.bootstrap, [TOPIC])
    producer = transactional_producer(gateway.bootstrap, "kcat-transactions")
    first = records_for([TOPIC], "first", 2)
    aborted = records_for([TOPIC], "aborted", 2)
    second = records_for([TOPIC], "second", 2)
    pending = records_for([TOPIC], "pending", 2)
    for records, commit in ((first, True), (aborted, False), (second, True), (pending, None)):
        producer.begin_transaction()
        produce_all(producer, records)
        if commit is True:
            producer.commit_transaction(TIMEOUT_S)
        elif commit is False:
            producer.abort_transaction(TIMEOUT_S)
    committed = partial(_kcat_read, gateway, "read_committed")
    wait_for_records(
        partial(_kcat_read, gateway, "read_uncommitted"), first + aborted + second + pending
    )
    wait_for_records(committed, first + second)
    producer.commit_transaction(TIMEOUT_S)
    wait_for_records(committed, first + second + pending)
