"""What the Spark write tests need of a real cluster: topics made for a test, and every record
of a topic read back with the SDK Consumer (bounded waits)."""

from __future__ import annotations

import time

from cluster_fixture import wait_until

from brook.client import Consumer, ConsumerRecord, TopicPartition
from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster, Role
from brook.tools.options import ToolError, topic_partition_count

__all__ = ["READ_TIMEOUT_S", "create_topic", "read_back", "storage_bootstrap"]

READ_TIMEOUT_S = 30.0
_TOPIC_KNOWN_TIMEOUT_MS = 5_000


def storage_bootstrap(cluster: LocalCluster) -> str:
    """The SDK's (and ``kafka.bootstrap.servers``') addresses: the storage nodes' gRPC."""
    return cluster.bootstrap_servers(Role.STORAGE_NODE)


def create_topic(cluster: LocalCluster, topic: str, partitions: int) -> None:
    """Create ``topic`` (one replica) and wait until the storage nodes know all its
    partitions."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, partitions, 1)]) == {topic: None}
    servers = storage_bootstrap(cluster).split(",")

    def known() -> bool:
        try:
            return topic_partition_count(servers, topic, _TOPIC_KNOWN_TIMEOUT_MS) == partitions
        except ToolError:  # not yet in the storage nodes' metadata
            return False

    wait_until(known, f"the storage nodes know {topic}", READ_TIMEOUT_S)


def read_back(cluster: LocalCluster, topic: str, partitions: int) -> list[ConsumerRecord]:
    """Every record of ``topic``, from the beginning to the end of each partition as it is
    now, in offset order per partition."""
    every = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer({"bootstrap.servers": storage_bootstrap(cluster)}) as consumer:
        ends = consumer.end_offsets(every, timeout=READ_TIMEOUT_S)
        consumer.assign(every)
        consumer.seek_to_beginning(every)
        records: list[ConsumerRecord] = []
        remaining = sum(ends.values())
        deadline = time.monotonic() + READ_TIMEOUT_S
        while remaining > 0:
            assert time.monotonic() < deadline, f"{remaining} records of {topic} not read"
            for record in consumer.poll(1.0):
                if record.offset < ends[TopicPartition(topic, record.partition)]:
                    records.append(record)
                    remaining -= 1
    return sorted(records, key=lambda r: (r.partition, r.offset))
