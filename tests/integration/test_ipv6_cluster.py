"""A cluster on the IPv6 loopback (``::1``): every process binds and advertises ``[::1]``, and
records go through it with a real Kafka client (kafka-python, through the gateway) and with the
Brook SDK (gRPC to the storage nodes, groups through the coordinators). Every acknowledged
record is read back exactly once, in order per partition.

This is the test of ``brook.rpc.addresses`` in the whole system: an address written without
brackets, a host:port split at the first colon, or a Kafka Metadata host string with brackets
breaks one of the hops (controller hints, the gateway's routing, the SDK's coordinator look-up).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from cluster_fixture import ClusterFactory, require_ipv6_loopback

from brook.client import Consumer, Producer, TopicPartition
from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster, Role
from brook.rpc.addresses import parse_address

pytestmark = pytest.mark.integration

HOST = "::1"
PARTITIONS = 3
RECORDS_PER_CLIENT = 300
TIMEOUT_S = 60.0
POLL_S = 0.5
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    require_ipv6_loopback()
    return cluster_factory(
        controllers=3,
        storage_nodes=2,
        group_coordinators=1,
        gateways=1,
        host=HOST,
        config_overrides={
            "controller": {
                "offsets.topic.num.partitions": "3",
                "offsets.topic.replication.factor": "2",
            },
            "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
        },
    )


def _wait_for(
    step: Callable[[], bool], what: str, describe: Callable[[], str] = lambda: ""
) -> None:
    """Runs ``step`` until it returns True; fails naming ``what`` after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while not step():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {TIMEOUT_S} s waiting for {what} {describe()}")


def _check_in_order_exactly_once(
    acknowledged: dict[int, list[bytes]], read: dict[int, list[tuple[int, bytes]]]
) -> None:
    """Per partition, the records read are the acknowledged ones, once each, in offset order."""
    for partition, values in acknowledged.items():
        got = read.get(partition, [])
        assert [offset for offset, _ in got] == sorted({offset for offset, _ in got}), (
            f"partition {partition}: offsets out of order or repeated"
        )
        assert [value for _, value in got] == values, f"partition {partition}"
    assert set(read) <= set(acknowledged)


def test_records_go_through_an_ipv6_cluster_exactly_once_in_order(cluster: LocalCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    for name in cluster.names():
        host, _ = parse_address(cluster.grpc_address(name))
        assert host == HOST, cluster.grpc_address(name)
    gateway = cluster.kafka_bootstrap_servers
    assert gateway.startswith("[::1]:"), gateway
    storage_nodes = cluster.bootstrap_servers(Role.STORAGE_NODE)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic("v6", PARTITIONS, 2)]) == {"v6": None}
        described = admin.describe_cluster()
    assert all(
        endpoint.startswith("[::1]:")
        for node in described.nodes
        for endpoint in node.endpoints.values()
    ), described.nodes

    # A real Kafka client through the gateway: Metadata must name hosts it can dial.
    acknowledged: dict[int, list[bytes]] = {}
    kafka_producer = KafkaProducer(bootstrap_servers=gateway, acks="all", linger_ms=5)
    try:
        futures = [
            kafka_producer.send("v6", b"kafka-%04d" % n, partition=n % PARTITIONS)
            for n in range(RECORDS_PER_CLIENT)
        ]
        kafka_producer.flush(TIMEOUT_S)
        for n, future in enumerate(futures):
            metadata = future.get(TIMEOUT_S)
            acknowledged.setdefault(metadata.partition, []).append(b"kafka-%04d" % n)
    finally:
        kafka_producer.close(TIMEOUT_S)

    # The Brook SDK over gRPC to the storage nodes at [::1].
    with Producer(bootstrap_servers=storage_nodes, acks="all", linger_ms=5) as producer:
        sdk_futures = [
            (producer.send("v6", b"sdk-%04d" % n, partition=n % PARTITIONS), b"sdk-%04d" % n)
            for n in range(RECORDS_PER_CLIENT)
        ]
        producer.flush(TIMEOUT_S)
        by_offset: dict[int, list[tuple[int, bytes]]] = {}
        for future, value in sdk_futures:
            metadata = future.result(0)
            by_offset.setdefault(metadata.partition, []).append((metadata.offset, value))
    for partition, records in by_offset.items():
        acknowledged.setdefault(partition, []).extend(v for _, v in sorted(records))
    total = sum(len(values) for values in acknowledged.values())
    assert total == 2 * RECORDS_PER_CLIENT

    # Read back in a group by each client: the gateway routes the Kafka client's group to the
    # coordinator at [::1], the SDK finds it through the storage nodes' metadata.
    kafka_read: dict[int, list[tuple[int, bytes]]] = {}
    kafka_consumer = KafkaConsumer(
        "v6",
        bootstrap_servers=gateway,
        group_id="v6-kafka",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
    )
    try:

        def kafka_poll() -> bool:
            for tp, batch in kafka_consumer.poll(timeout_ms=int(POLL_S * 1000)).items():
                kafka_read.setdefault(tp.partition, []).extend((r.offset, r.value) for r in batch)
            return sum(len(r) for r in kafka_read.values()) >= total

        _wait_for(kafka_poll, "the Kafka client to read every record", lambda: _count(kafka_read))
        kafka_consumer.commit()
    finally:
        kafka_consumer.close()
    _check_in_order_exactly_once(acknowledged, kafka_read)

    sdk_read: dict[int, list[tuple[int, bytes]]] = {}
    settings: dict[str, Any] = {
        "bootstrap.servers": storage_nodes,
        "group.id": "v6-sdk",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    }
    with Consumer(settings) as consumer:
        consumer.subscribe(["v6"])

        def sdk_poll() -> bool:
            for record in consumer.poll(POLL_S):
                sdk_read.setdefault(record.partition, []).append((record.offset, record.value))
            return sum(len(r) for r in sdk_read.values()) >= total

        _wait_for(sdk_poll, "the Brook consumer to read every record", lambda: _count(sdk_read))
        consumer.commit()
        assert consumer.poll(POLL_S) == []
        committed = {
            tp.partition: offset.offset
            for tp, offset in consumer.committed(
                [TopicPartition("v6", p) for p in range(PARTITIONS)]
            ).items()
            if offset is not None
        }
    _check_in_order_exactly_once(acknowledged, sdk_read)
    assert committed == {p: len(values) for p, values in acknowledged.items()}

    # The Kafka client's group committed through the gateway, read back through Admin.
    with Admin(cluster.controller_bootstrap_servers) as admin:
        offsets = admin.list_consumer_group_offsets("v6-kafka")
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {
        p: len(values) for p, values in acknowledged.items()
    }


def _count(read: dict[int, list[tuple[int, bytes]]]) -> str:
    return f"(read {sum(len(r) for r in read.values())} records)"
