"""auto.create.topics.enable through the gateway, with real Kafka clients (confluent-kafka,
kcat) and raw Metadata/Produce requests where the exact request matters.

On: a producer's first record to a new topic creates it with the controllers' num.partitions and
default.replication.factor and is delivered quickly (not after librdkafka's 30 s wait for a topic
to appear); it can be read back; a consumer's Metadata (allow_auto_topic_creation false) creates
nothing; the cluster's own ``__`` names are never created; an invalid name is refused at once.
Off: nothing is created, the gateway answers UNKNOWN_TOPIC_OR_PARTITION to Metadata and Produce
at once, and librdkafka reports the failure once its own topic.metadata.propagation.max.ms has
passed (30 s by default, the same against Kafka: librdkafka waits that long for any topic a
broker calls unknown, and fails at once only for an invalid one).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from typing import Any

import pytest
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import decode_response, encode_request
from brook_gateway.protocol.kafka_messages import ApiKey
from cluster_fixture import ClusterFactory, wait_until

from brook.client.admin import Admin
from brook.errors import ErrorCode
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 3
REPLICATION_FACTOR = 2
RECORDS = 5
# Generous for a loaded 2-core box, and still far below librdkafka's 30 s wait for a topic
# a broker calls unknown: a delivery within it did not sit out that wait.
DELIVERY_BOUND_S = 15.0
# The gateway's own answer to a request about an unknown topic.
ANSWER_BOUND_S = 5.0
# Lowered so that the "off" producer test does not wait 30 s for librdkafka's verdict.
PROPAGATION_MAX_MS = 2000
CLIENT_TIMEOUT_S = 20.0


def _cluster(cluster_factory: ClusterFactory, enabled: bool) -> LocalCluster:
    return cluster_factory(
        controllers=1,
        storage_nodes=2,
        group_coordinators=1,
        gateways=1,
        config_overrides={
            "controller": {
                "auto.create.topics.enable": "true" if enabled else "false",
                "num.partitions": str(PARTITIONS),
                "default.replication.factor": str(REPLICATION_FACTOR),
                "offsets.topic.num.partitions": "1",
                "offsets.topic.replication.factor": "1",
            }
        },
    )


def _produce(bootstrap: str, topic: str, values: list[bytes], **config: Any) -> list[Any]:
    """(error or None, seconds since the first produce) per record, once all are reported."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 60_000, **config})
    reports: list[Any] = []
    started = time.monotonic()
    for value in values:
        producer.produce(
            topic,
            value,
            on_delivery=lambda err, _msg: reports.append((err, time.monotonic() - started)),
        )
    deadline = started + 90
    while len(reports) < len(values) and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.flush(5)
    assert len(reports) == len(values), f"only {len(reports)} delivery reports within 90 s"
    return reports


def _listed(bootstrap: str, topic: str) -> Any:
    """The topic as a consumer's Metadata (allow_auto_topic_creation false) lists it: None if
    it does not exist."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "auto-create-probe"})
    try:
        listed = consumer.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    finally:
        consumer.close()
    return None if listed is None or listed.error is not None else listed


def _all_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics)


def _raw(bootstrap: str, api_key: int, version: int, body: Message) -> tuple[Message, float]:
    """One request on a fresh connection: the response and how long it took."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S) as sock:
        started = time.monotonic()
        sock.sendall(encode_request(api_key, version, 7, "auto-create-test", body))
        size = int.from_bytes(_read(sock, 4), "big")
        _, response = decode_response(api_key, version, _read(sock, size))
        return response, time.monotonic() - started


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the gateway closed the connection"
        data += chunk
    return data


def _metadata(bootstrap: str, topic: str, version: int, allow: bool) -> tuple[int, float]:
    body: Message = {"topics": [{"name": topic}], "allow_auto_topic_creation": allow}
    response, elapsed_s = _raw(bootstrap, ApiKey.METADATA, version, body)
    [answer] = response["topics"]
    return answer["error_code"], elapsed_s


def _kcat_values(bootstrap: str, topic: str) -> list[str]:
    assert shutil.which("kcat"), "kcat is not installed: run tools/install-dev"
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def test_auto_create_on_creates_a_produced_topic_with_the_defaults(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory, enabled=True)
    bootstrap = cluster.kafka_bootstrap_servers
    topic = "auto-orders"

    # A consumer's Metadata does not allow creation: nothing is created.
    assert _listed(bootstrap, topic) is None
    assert topic not in _all_topics(bootstrap)

    values = [f"v{i}".encode() for i in range(RECORDS)]
    reports = _produce(bootstrap, topic, values)
    errors = [err for err, _ in reports if err is not None]
    assert not errors, f"delivery failed: {errors}"
    slowest_s = max(elapsed for _, elapsed in reports)
    print(f"first produce to a new topic delivered in {slowest_s:.2f} s")
    assert slowest_s < DELIVERY_BOUND_S

    listed = _listed(bootstrap, topic)
    assert listed is not None, f"{topic} was not created"
    assert len(listed.partitions) == PARTITIONS
    # The replicas as the controllers place them (Kafka's Metadata shows them per gateway).
    with Admin(cluster.controller_bootstrap_servers) as admin:
        described = admin.describe_topics([topic])[topic]
    assert {len(p.replicas) for p in described.partitions} == {REPLICATION_FACTOR}
    assert sorted(_kcat_values(bootstrap, topic)) == sorted(v.decode() for v in values)

    # Metadata v0-3 has no allow_auto_topic_creation: it always allows, as in Kafka.
    code, _ = _metadata(bootstrap, "auto-by-v1", 1, allow=False)
    assert code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    wait_until(lambda: _listed(bootstrap, "auto-by-v1") is not None, "auto-by-v1", 30)
    # v4+ with the flag off creates nothing.
    code, _ = _metadata(bootstrap, "not-by-v5", 5, allow=False)
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # The cluster's own names are never created on demand; invalid names are refused at once.
    for name in ("__transaction_state", "__brook_internal"):
        code, _ = _metadata(bootstrap, name, 5, allow=True)
        assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name
    code, _ = _metadata(bootstrap, "bad name!", 5, allow=True)
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION
    [(err, elapsed_s)] = _produce(bootstrap, "bad name!", [b"x"])
    print(f"produce to an invalid name failed in {elapsed_s:.2f} s: {err}")
    assert err is not None and elapsed_s < DELIVERY_BOUND_S
    [(err, _)] = _produce(
        bootstrap, "__brook_internal", [b"x"], **{"topic.metadata.propagation.max.ms": 1000}
    )
    assert err is not None

    topics = _all_topics(bootstrap)
    assert {"auto-orders", "auto-by-v1"} <= topics
    assert not topics & {"not-by-v5", "__transaction_state", "__brook_internal", "bad name!"}


def test_auto_create_off_fails_fast_and_creates_nothing(cluster_factory: ClusterFactory) -> None:
    cluster = _cluster(cluster_factory, enabled=False)
    bootstrap = cluster.kafka_bootstrap_servers
    topic = "no-such-topic"

    code, elapsed_s = _metadata(bootstrap, topic, 5, allow=True)
    print(f"Metadata for an unknown topic answered {code} in {elapsed_s:.3f} s")
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and elapsed_s < ANSWER_BOUND_S
    code, _ = _metadata(bootstrap, topic, 1, allow=True)
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    produce: Message = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": b""}]},
        ],
    }
    response, elapsed_s = _raw(bootstrap, ApiKey.PRODUCE, 8, produce)
    [answer] = response["responses"][0]["partition_responses"]
    print(f"Produce to an unknown topic answered {answer['error_code']} in {elapsed_s:.3f} s")
    assert answer["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert elapsed_s < ANSWER_BOUND_S

    # librdkafka reports the unknown topic once its propagation wait is over, no later.
    [(err, elapsed_s)] = _produce(
        bootstrap, topic, [b"x"], **{"topic.metadata.propagation.max.ms": PROPAGATION_MAX_MS}
    )
    print(f"librdkafka reported {err} after {elapsed_s:.2f} s")
    assert err is not None and "Unknown topic" in err.str()
    assert elapsed_s < DELIVERY_BOUND_S

    assert topic not in _all_topics(bootstrap)
