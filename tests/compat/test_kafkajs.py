"""kafkajs (npm 2.2.4, installed by tools/install-dev) against a real Brook cluster through the
gateway, driven through tests/compat/kafkajs_client.mjs in a Node subprocess.

The compatibility suite's shared cluster (conftest.py: two storage nodes, two gateways) serves
every test. kafkajs's admin client creates the topic and reads its metadata; its producer sends
keyed records with headers (a repeated header name included) with acks=-1, acks=1 and gzip.
The tests check the offsets kafkajs was told, the batches as stored (gzip really used), and
every record, key, header and offset read back exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from node_scripts import run_node_json
from test_gateway_fuzz import KafkaGateways, kafka_gateways, stored_batch_codecs
from test_kafka_clients import Consumed, confluent_poll

from brook.launcher import LocalCluster
from brook.record.batch import Compression

pytestmark = pytest.mark.integration

SCRIPT: Final = Path(__file__).with_name("kafkajs_client.mjs")
NODE_TIMEOUT_S: Final = 90.0
REQUEST_TIMEOUT_S: Final = 20.0
# What kafkajs_client.mjs produces: RECORDS per partition in three sends, record i in send
# i % 3, in order within each send.
PARTITIONS: Final = 2
RECORDS: Final = 15
SENDS: Final = ("acks=-1", "acks=1", "acks=-1 gzip")


@pytest.fixture(scope="module")
def gateway(compat_cluster: LocalCluster) -> KafkaGateways:
    return kafka_gateways(compat_cluster)


def _kafkajs(*args: str) -> Any:
    """The JSON kafkajs_client.mjs prints; fails the test with its stderr when it fails. A
    process that printed its result but did not exit has left a kafkajs client connected
    (decisions.md on one address per broker id)."""
    return run_node_json(SCRIPT, args, packages=["kafkajs"], timeout_s=NODE_TIMEOUT_S)


@dataclass(frozen=True, order=True)
class Record:
    partition: int
    offset: int
    key: str
    value: str
    headers: tuple[tuple[str, str], ...]


def _expected(topic: str) -> list[Record]:
    """Every record kafkajs_client.mjs produces, at the offset it must land on."""
    records = []
    for partition in range(PARTITIONS):
        # Sends append in turn, so a partition holds send 0's records, then send 1's, ...
        order = sorted(range(RECORDS), key=lambda i: (i % len(SENDS), i))
        for offset, i in enumerate(order):
            records.append(
                Record(
                    partition,
                    offset,
                    f"key-{partition}-{i}",
                    f"{topic} value {partition}.{i}",
                    (("index", str(i)), ("trace", "a"), ("trace", "b")),
                )
            )
    return records


def _read_back_with_confluent(bootstrap: str, topic: str) -> list[Record]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False}
    )
    consumed: Consumed = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        confluent_poll(consumer, consumed, PARTITIONS * RECORDS)
    finally:
        consumer.close()
    return sorted(
        Record(p, o, k.decode(), v.decode(), tuple((n, h.decode()) for n, h in headers))
        for p, o, k, v, headers in consumed
    )


def _produce(gateway: KafkaGateways, topic: str) -> Any:
    return _kafkajs("produce", gateway.bootstrap, topic)


def test_kafkajs_admin_creates_the_topic_and_sees_a_listed_broker_lead_every_partition(
    gateway: KafkaGateways,
) -> None:
    metadata = _produce(gateway, "kafkajs-admin")["metadata"]
    assert metadata["created"] is True
    (topic,) = metadata["topics"]
    assert topic["name"] == "kafkajs-admin"
    partitions = sorted(topic["partitions"], key=lambda p: p["partitionId"])
    assert [p["partitionId"] for p in partitions] == list(range(PARTITIONS))
    for p in partitions:
        # Replication factor 1: the one replica leads, under its storage node's id.
        assert p["partitionErrorCode"] == 0
        assert p["leader"] in gateway.brokers
        assert (p["replicas"], p["isr"]) == ([p["leader"]], [p["leader"]])


def test_kafkajs_producer_acks_all_acks_1_and_gzip_store_every_record_key_and_header(
    gateway: KafkaGateways,
) -> None:
    topic = "kafkajs-produce"
    sends = _produce(gateway, topic)["sends"]
    per_send = RECORDS // len(SENDS)
    assert [s["name"] for s in sends] == list(SENDS)
    for index, send in enumerate(sends):
        # Each send appends per_send records to every partition, after the previous sends.
        assert sorted(
            (r["partition"], r["errorCode"], r["baseOffset"]) for r in send["results"]
        ) == [(p, 0, index * per_send) for p in range(PARTITIONS)], send["name"]
    for partition in range(PARTITIONS):
        codecs = stored_batch_codecs(gateway.address, topic, partition, REQUEST_TIMEOUT_S)
        assert codecs == [Compression.NONE, Compression.NONE, Compression.GZIP]
    assert _read_back_with_confluent(gateway.bootstrap, topic) == _expected(topic)


def test_kafkajs_group_consumer_reads_every_record_back_and_commits(gateway: KafkaGateways) -> None:
    topic = "kafkajs-group"
    group = "kafkajs-readers"
    _produce(gateway, topic)
    # kafkajs reads READ_COMMITTED by default: the gateway's last stable offset must let it
    # see everything up to the high watermark.
    result = _kafkajs("consume", gateway.bootstrap, topic, group, str(PARTITIONS * RECORDS))
    consumed = sorted(
        Record(
            m["partition"],
            m["offset"],
            m["key"],
            m["value"],
            tuple((n, v) for n, values in m["headers"].items() for v in values),
        )
        for m in result["messages"]
    )
    assert consumed == _expected(topic)
    (committed,) = result["committed"]
    assert committed["topic"] == topic
    assert sorted((p["partition"], int(p["offset"])) for p in committed["partitions"]) == [
        (p, RECORDS) for p in range(PARTITIONS)
    ]
