"""ACLs enforced end to end, on the cluster ``brook cluster up --tls`` runs: mutual TLS between
every process, the authorizer on in every process (``User:brook`` and ``User:admin`` super
users, nobody else allowed anything without an ACL), the gateway's Kafka port SASL_SSL.

Real clients as real principals: confluent-kafka as the SCRAM user ``alice`` through the
gateway, and the SDK straight to the storage node over gRPC with a client certificate whose
common name is ``carol``. Each denial is checked to have changed nothing (end offsets, topics,
groups), and an ACL granted while clients run takes effect without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_fixture import shared_cluster, wait_until
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tls_cluster import cluster_tls, operator_admin, operator_settings

from brook.client import Admin, NewTopic
from brook.client import Producer as BrookProducer
from brook.client.admin import UserScramCredentialUpsertion
from brook.errors import BrookError, ErrorCode
from brook.launcher import LocalCluster
from brook.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from brook.security.certificates import CertificateAuthority

ALICE = ("alice", "alice-secret")
ORDERS = "orders-eu"
PAYMENTS = "payments"
RECORDS = 20
CLIENT_TIMEOUT_S = 30.0
DENIAL_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with shared_cluster(
        tmp_path_factory,
        "acl-enforcement",
        controllers=1,
        storage_nodes=1,
        group_coordinators=1,
        gateways=1,
        tls=True,
        config_overrides={
            "controller": {
                "offsets.topic.num.partitions": "1",
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
            },
            "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
        },
    ) as started:
        with operator_admin(started) as admin:
            name, password = ALICE
            upsertion = UserScramCredentialUpsertion(name, password, "SCRAM-SHA-512")
            assert admin.alter_user_scram_credentials([upsertion]) == {name: None}
            for topic in (ORDERS, PAYMENTS):
                assert admin.create_topics([NewTopic(topic, 1, 1)]) == {topic: None}
            _grant(admin, "User:alice", Operation.WRITE, ResourceType.TOPIC, "orders-")
        yield started


def _grant(
    admin: Admin,
    principal: str,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
) -> None:
    pattern = PatternType.PREFIXED if name.endswith("-") else PatternType.LITERAL
    binding = AclBinding(resource_type, name, pattern, principal, "*", operation, Permission.ALLOW)
    assert admin.create_acls([binding]) == {binding: None}


def _alice(cluster: LocalCluster) -> dict[str, Any]:
    name, password = ALICE
    return {
        "bootstrap.servers": cluster.kafka_bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": name,
        "sasl.password": password,
        "ssl.ca.location": str(cluster_tls(cluster).truststore),
    }


def _produce(settings: dict[str, Any], topic: str, count: int) -> list[KafkaError | None]:
    """Produces ``count`` records to partition 0; each one's delivery error (None: written)."""
    outcomes: list[KafkaError | None] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        outcomes.append(error)

    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 10_000})
    for i in range(count):
        producer.produce(topic, value=f"{topic}-{i}".encode(), partition=0, on_delivery=on_delivery)
    producer.flush(CLIENT_TIMEOUT_S)
    return outcomes


def _end_offset(cluster: LocalCluster, topic: str) -> int:
    """The partition's end offset, read as the operator."""
    settings = operator_settings(cluster, "storage-node-1")
    from brook.client import Consumer as BrookConsumer
    from brook.client import TopicPartition as BrookTopicPartition

    with BrookConsumer(settings) as consumer:
        offsets = consumer.end_offsets([BrookTopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
    return int(next(iter(offsets.values())))


def _sees_error(consumer: Consumer, code: int, timeout_s: float) -> set[int]:
    """Polls until the consumer reports an error with ``code`` or ``timeout_s`` passes; every
    error code it reported (librdkafka reports each refusal it meets: a group's coordinator
    lookup may be refused before a fetch is)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while code not in seen and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            error = message.error()
            if error is not None:
                seen.add(error.code())
    return seen


def test_a_principal_may_produce_to_its_prefixed_topics_and_nowhere_else(
    cluster: LocalCluster,
) -> None:
    before = _end_offset(cluster, PAYMENTS)
    assert _produce(_alice(cluster), ORDERS, RECORDS) == [None] * RECORDS
    denied = _produce(_alice(cluster), PAYMENTS, 1)
    assert [e.code() if e else None for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _end_offset(cluster, PAYMENTS) == before


def test_writing_is_not_reading_and_reading_is_not_joining_a_group(cluster: LocalCluster) -> None:
    assert _end_offset(cluster, ORDERS) > 0
    reader = Consumer({**_alice(cluster), "group.id": "alice-reader", "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(ORDERS, 0, 0)])
        seen = _sees_error(reader, KafkaError.TOPIC_AUTHORIZATION_FAILED, DENIAL_TIMEOUT_S)
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in seen, seen
    finally:
        reader.close()

    # READ on the topics now (granted while the cluster runs), but none on the group.
    with operator_admin(cluster) as admin:
        _grant(admin, "User:alice", Operation.READ, ResourceType.TOPIC, "orders-")
    member = Consumer(
        {
            **_alice(cluster),
            "group.id": "billing",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        member.subscribe([ORDERS])
        seen = _sees_error(member, KafkaError.GROUP_AUTHORIZATION_FAILED, DENIAL_TIMEOUT_S)
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in seen, seen
    finally:
        member.close()
    with operator_admin(cluster) as admin:
        assert "billing" not in {group.group_id for group in admin.list_consumer_groups()}

    # Reading without a group needs no group ACL: every record alice wrote comes back.
    reader = Consumer({**_alice(cluster), "group.id": "unused", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        reader.assign([TopicPartition(ORDERS, 0, 0)])

        def read() -> bool:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                value = message.value()
                assert value is not None
                values.append(value)
            return len(values) >= RECORDS

        wait_until(read, f"{RECORDS} records read back", CLIENT_TIMEOUT_S, poll_s=0)
    finally:
        reader.close()
    assert values == [f"{ORDERS}-{i}".encode() for i in range(RECORDS)]


def test_a_principal_without_delete_cannot_delete_a_topic(cluster: LocalCluster) -> None:
    admin_client = AdminClient(_alice(cluster))
    futures = admin_client.delete_topics([ORDERS], operation_timeout=10)
    with pytest.raises(Exception) as refused:
        futures[ORDERS].result(timeout=CLIENT_TIMEOUT_S)
    error = refused.value.args[0]
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    with operator_admin(cluster) as admin:
        assert ORDERS in admin.list_topics()


def test_a_certificate_principal_on_grpc_is_authorized_by_its_acls(
    cluster: LocalCluster, tmp_path: Any
) -> None:
    tls = cluster_tls(cluster)
    authority = CertificateAuthority.load(tls.folder / "ca.key", tls.truststore)
    keystore = authority.issue(tmp_path / "carol.pem", "carol")
    settings = {
        "bootstrap.servers": cluster.grpc_address("storage-node-1"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.truststore),
        "ssl.certificate.location": str(keystore),
        "ssl.key.location": str(keystore),
    }
    before = _end_offset(cluster, ORDERS)
    with BrookProducer(settings) as producer:
        with pytest.raises(BrookError) as refused:
            producer.send(ORDERS, b"carol-0", partition=0).result(CLIENT_TIMEOUT_S)
    # Refused at once (not after max.block.ms), as Kafka's producer is.
    assert refused.value.code is ErrorCode.TOPIC_AUTHORIZATION_FAILED, refused.value
    assert _end_offset(cluster, ORDERS) == before

    with operator_admin(cluster) as admin:
        _grant(admin, "User:carol", Operation.WRITE, ResourceType.TOPIC, ORDERS)
    with BrookProducer(settings) as producer:
        metadata = producer.send(ORDERS, b"carol-1", partition=0).result(CLIENT_TIMEOUT_S)
    assert metadata.offset == before
    assert _end_offset(cluster, ORDERS) == before + 1
