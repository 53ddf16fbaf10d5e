"""Records through a cluster's gateway and back with a consumer group, as a smoke test of the
Kafka path (confluent-kafka)."""

from __future__ import annotations

from cluster_fixture import wait_until
from confluent_kafka import Consumer, Producer

from brook.client import Admin, NewTopic
from brook.launcher import LocalCluster

__all__ = ["produce_and_consume"]


def produce_and_consume(
    cluster: LocalCluster, topic: str, partitions: int, records: int, group: str, timeout_s: float
) -> None:
    """Creates ``topic`` (``partitions`` partitions, two replicas), produces ``records``
    records spread over its partitions through the gateway, reads them all back as ``group``
    within ``timeout_s`` and commits."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, partitions, 2)]) == {topic: None}
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all"})
    for i in range(records):
        producer.produce(topic, value=f"record-{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        received = 0

        def read() -> bool:
            nonlocal received
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received += 1
            return received >= records

        wait_until(read, f"{records} records consumed", timeout_s, poll_s=0)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
