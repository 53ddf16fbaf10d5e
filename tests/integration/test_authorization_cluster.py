"""Authorization in a real cluster: a gateway and a storage node with the authorizer on and no
ACL refuse a client (User:ANONYMOUS, the only principal there is until SASL/TLS identities are
wired) everything it asks, with Kafka's errors, and nothing changes.

The controller runs without the authorizer, so the test creates its topic and checks the
outcome through it (and the storage node's log on disk), as an operator would.

Left for after the merge with the ACL administration (CreateAcls) and the identities (SASL on
the gateway, grpc_identity on gRPC), see the report of issue #21's part F:
- ACL'd principals through real clients: ``orders-*`` WRITE allowed, READ denied
  (confluent-kafka producer succeeds, consumer gets TOPIC_AUTHORIZATION_FAILED); group join
  denied without READ on the group; topic deletion denied without DELETE; each with the
  records/groups/topics checked unchanged;
- the same through the SDK over gRPC with a principal from a client certificate, and the
  cluster's own processes (User:brook, a super user) unaffected with the authorizer on
  everywhere;
- an ACL created while clients are connected takes effect without a restart (the index
  follows the metadata).
"""

from __future__ import annotations

import grpc
import pytest
from cluster_fixture import ClusterFactory, wait_until
from kafka_round_trip import produce_and_consume
from offsets_compaction import partition_log_bytes

from brook.client import Admin, NewTopic
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.rpc.channels import sync_channel
from brook.rpc.errors import rpc_error
from brook.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

TOPIC = "orders"
KAFKA_TIMEOUT_S = 20.0
RECORDS = 50
AUTHORIZED = {"authorizer.class.name": "brook"}


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    return cluster_factory(
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=1,
        config_overrides={
            "controller": {
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
            },
            "gateway": AUTHORIZED,
            "storage-node": AUTHORIZED,
        },
    )


def _log_bytes(cluster: LocalCluster) -> int:
    (node,) = cluster.names(Role.STORAGE_NODE)
    return partition_log_bytes(cluster.spec(node).directory / "data" / f"{TOPIC}-0")


def test_a_principal_without_acls_is_refused_everything_and_nothing_changes(
    cluster: LocalCluster,
) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as KafkaNewTopic

    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC] is None
        wait_until(lambda: TOPIC in admin.list_topics(), "the topic", KAFKA_TIMEOUT_S)
    bootstrap = cluster.kafka_bootstrap_servers
    empty = _log_bytes(cluster)

    # Produce: WRITE on the topic.
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000})
    outcomes: list[KafkaError | None] = []
    producer.produce(TOPIC, b"refused", on_delivery=lambda error, _: outcomes.append(error))
    producer.flush(KAFKA_TIMEOUT_S)
    assert len(outcomes) == 1 and outcomes[0] is not None
    assert outcomes[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Metadata: a topic the principal may not describe is not listed.
    kafka_admin = AdminClient({"bootstrap.servers": bootstrap})
    assert TOPIC not in kafka_admin.list_topics(timeout=KAFKA_TIMEOUT_S).topics

    # DeleteTopics: DELETE on the topic; CreateTopics: CREATE on the cluster or the topic.
    deleted = kafka_admin.delete_topics([TOPIC], operation_timeout=10)[TOPIC]
    with pytest.raises(KafkaException) as refused_deletion:
        deleted.result(KAFKA_TIMEOUT_S)
    assert refused_deletion.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    created = kafka_admin.create_topics([KafkaNewTopic("intruder", 1, 1)])["intruder"]
    with pytest.raises(KafkaException) as refused_creation:
        created.result(KAFKA_TIMEOUT_S)
    assert refused_creation.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # A consumer group: DESCRIBE (FindCoordinator) and READ (JoinGroup) on the group.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "thieves", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([TOPIC])
        errors: list[int] = []
        for _ in range(int(KAFKA_TIMEOUT_S)):
            try:
                message = consumer.poll(1.0)
            except KafkaException as e:
                errors.append(e.args[0].code())
                break
            failure = None if message is None else message.error()
            if failure is not None:
                errors.append(failure.code())
                break
        assert errors and errors[0] in (
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
        )
    finally:
        consumer.close()

    # gRPC straight to the storage node: the same rule, PERMISSION_DENIED with the Kafka code.
    (node,) = cluster.names(Role.STORAGE_NODE)
    with sync_channel(cluster.grpc_address(node)) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as refused_rpc:
            stub.Produce(
                storage_pb2.ProduceRequest(
                    partitions=[storage_pb2.PartitionProduceData(topic=TOPIC, partition=0)]
                ),
                timeout=KAFKA_TIMEOUT_S,
            )
    assert refused_rpc.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert rpc_error(refused_rpc.value)[0] is ErrorCode.TOPIC_AUTHORIZATION_FAILED

    # Nothing changed: the topic is there, the intruder is not, its log holds nothing new.
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert sorted(admin.list_topics()) == [TOPIC]
    assert _log_bytes(cluster) == empty


def test_a_cluster_with_the_authorizer_on_everywhere_and_no_acl_found_open_serves_clients(
    cluster_factory: ClusterFactory,
) -> None:
    """Every process authorizes every gRPC call (replica fetching, registration, heartbeats,
    WatchMetadata, the coordinators' writes) and the gateway every Kafka API; with
    allow.everyone.if.no.acl.found and no ACL they all pass, so a producer and a consumer group
    work end to end through the authorizing paths (the SDK's Admin creates the topic through the
    controller's)."""

    open_everything = {**AUTHORIZED, "allow.everyone.if.no.acl.found": "true"}
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=2,
        group_coordinators=1,
        gateways=1,
        config_overrides={
            "controller": {
                **open_everything,
                "offsets.topic.num.partitions": "2",
                "offsets.topic.replication.factor": "2",
                "transaction.state.log.num.partitions": "2",
            },
            "storage-node": open_everything,
            "group-coordinator": {**open_everything, "group.initial.rebalance.delay.ms": "0"},
            "gateway": open_everything,
        },
    )
    produce_and_consume(cluster, TOPIC, 2, RECORDS, "readers", KAFKA_TIMEOUT_S * 2)
