"""Log compaction in a real cluster (issue #18): __consumer_offsets with 10,000 commits for the
same 100 keys shrinks to about 100 records' worth and a new coordinator serves every key's
last committed offset from it; a compacted topic replicated 3 ways keeps every key's final
value, and every record its acknowledged offset, across a kill -9 of its cleaned leader, for
the SDK and for a Kafka client through the gateway.
"""

from __future__ import annotations

import time

import pytest
from cluster_fixture import ClusterFactory, wait_until
from offsets_compaction import (
    CLUSTER_CONFIG,
    CLUSTER_SHAPE,
    COMMITS,
    KEYS,
    commit_all,
    committed,
    fail_over,
    hold_cleaning,
    offsets_log_bytes,
    partition_log_bytes,
    wait_cleaned,
)

from brook.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

CLEAN_TIMEOUT_S = 120.0
WAIT_TIMEOUT_S = 60.0
TOPIC = "profiles"
TP = TopicPartition(TOPIC, 0)
UPDATES = 20_000
TOPIC_KEYS = 200
SEGMENT_BYTES = 64 * 1024


def test_consumer_offsets_shrink_to_the_last_commit_of_each_key_and_a_failover_serves_them(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(**CLUSTER_SHAPE, config_overrides=CLUSTER_CONFIG)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        hold_cleaning(admin, held=True)
        expected = commit_all(admin)
        assert committed(admin) == expected
        dirty = offsets_log_bytes(cluster)
        # One CommitOffsets of the 100 keys is one batch of 100 records: the log's bytes over
        # the number of commit rounds is about the size of 100 records.
        hundred_records = dirty / (COMMITS / KEYS)

        hold_cleaning(admin, held=False)
        wait_cleaned(cluster, int(2 * hundred_records), CLEAN_TIMEOUT_S)

        failover = fail_over(cluster, admin, expected)
        assert committed(admin) == expected
        assert failover.new_owner != failover.killed


def _leader(admin: Admin) -> int | None:
    return admin.describe_topics([TOPIC])[TOPIC].partitions[0].leader


def _partition_bytes(cluster: LocalCluster, node: str) -> int:
    return partition_log_bytes(cluster.spec(node).directory / "data" / f"{TOPIC}-0")


def _node_named(cluster: LocalCluster, node_id: int) -> str:
    return next(n for n in cluster.names(Role.STORAGE_NODE) if cluster.spec(n).node_id == node_id)


def test_a_compacted_topic_keeps_final_values_and_offsets_across_a_cleaned_leaders_death(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=3,
        group_coordinators=1,
        gateways=1,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": "2000",
                "auto.leader.rebalance.enable": "false",
                "offsets.topic.num.partitions": "1",
                "transaction.state.log.num.partitions": "1",
            },
            "storage-node": {
                "broker.session.timeout.ms": "2000",
                "broker.heartbeat.interval.ms": "200",
                "log.cleaner.backoff.ms": "100",
            },
            "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
        },
    )
    with Admin(cluster.controller_bootstrap_servers) as admin:
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(SEGMENT_BYTES),
            "min.cleanable.dirty.ratio": "0.01",
            "min.insync.replicas": "2",
        }
        assert admin.create_topics([NewTopic(TOPIC, 1, 3, configs=configs)]) == {TOPIC: None}
        wait_until(
            lambda: len(admin.describe_topics([TOPIC])[TOPIC].partitions[0].isr) == 3,
            "every replica in sync",
            WAIT_TIMEOUT_S,
        )
        leader = _leader(admin)
        assert leader is not None

    # Many updates per key, acks=all; what each record was acknowledged at.
    acknowledged: dict[int, tuple[bytes, bytes]] = {}
    final: dict[bytes, bytes] = {}
    bootstrap = cluster.grpc_address(_node_named(cluster, leader))
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as producer:
        futures = []
        for n in range(UPDATES):
            key, value = b"user-%04d" % (n % TOPIC_KEYS), b"v%06d" % n
            futures.append((key, value, producer.send(TOPIC, value, key=key, partition=0)))
            final[key] = value
        producer.flush(WAIT_TIMEOUT_S)
        for key, value, future in futures:
            acknowledged[future.result(WAIT_TIMEOUT_S).offset] = (key, value)
    assert len(acknowledged) == UPDATES

    leader_name = _node_named(cluster, leader)
    # The cleaner works while the updates go in, so the size at any moment may be cleaned
    # already: the bound is absolute. Uncleaned, 20,000 updates take several times two
    # segments; cleaned, 200 keys take a few KiB beside the active segment.
    wait_until(
        lambda: _partition_bytes(cluster, leader_name) < 2 * SEGMENT_BYTES,
        "the leader's log to be cleaned",
        CLEAN_TIMEOUT_S,
    )

    cluster.kill(leader_name)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        wait_until(
            lambda: _leader(admin) not in (None, leader),
            "a new leader",
            WAIT_TIMEOUT_S,
        )
        new_leader = _leader(admin)
    assert new_leader is not None
    new_bootstrap = cluster.grpc_address(_node_named(cluster, new_leader))

    with Consumer(bootstrap_servers=new_bootstrap) as consumer:
        end = consumer.end_offsets([TP], WAIT_TIMEOUT_S)[TP]
        assert end == max(acknowledged) + 1
        consumer.assign([TP])
        consumer.seek(TP, 0)
        read: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while consumer.position(TP, WAIT_TIMEOUT_S) < end:
            assert time.monotonic() < deadline, "the new leader's log was not read to its end"
            read += [(r.offset, r.key, r.value) for r in consumer.poll(0.5)]

    offsets = [offset for offset, _, _ in read]
    assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
    for offset, key, value in read:
        assert acknowledged[offset] == (key, value), f"offset {offset} moved or changed"
    seen = {key: value for _, key, value in read}
    assert seen == final
    assert len(read) < UPDATES, "the new leader's log shows no compaction at all"

    _read_through_the_gateway(cluster, final)


def _read_through_the_gateway(cluster: LocalCluster, final: dict[bytes, bytes]) -> None:
    """A Kafka client reading the compacted topic from the start gets every key's final
    value."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaPartition

    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": "compaction-cluster",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([KafkaPartition(TOPIC, 0, OFFSET_BEGINNING)])
        seen: dict[bytes, bytes] = {}
        last_offset = -1
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        # Read in offset order, the map holds every key's final value exactly when each key's
        # last record has been read.
        while seen != final:
            assert time.monotonic() < deadline, f"{len(seen)} of {len(final)} keys read"
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            assert message.offset() > last_offset
            last_offset = message.offset()
            key, value = message.key(), message.value()
            assert key is not None and value is not None
            seen[key] = value
    finally:
        consumer.close()
    assert seen == final
