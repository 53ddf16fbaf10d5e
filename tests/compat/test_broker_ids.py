"""The broker ids Kafka clients read are ones they can write back (issue #14, point 3).

Metadata lists the live storage nodes under their own ids, each at its own port of the gateway
that presents it (kafka.node.port.base + id, which the launcher sets), and names them as
leaders, replicas and ISRs. So an admin client that builds a replica assignment from the
broker ids it read gets exactly that placement, and the coordinator FindCoordinator names is
one of those brokers. Most tests run on `brook cluster up`'s default shape, one gateway in
front of three storage nodes: three broker ids, three addresses, so clients that key their
connections by address (kcat's bootstrap broker, kafkajs's pool) work, and a client that
concatenates every broker's ListGroups lists each group once. The shared two-gateway cluster
checks that every gateway gives the same answers and that groups are listed once there too.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

import pytest
from brook_gateway.protocol.kafka_messages import ApiKey
from cluster_fixture import shared_cluster, wait_until
from test_gateway_fuzz import kafka_brokers, kafka_gateways, kafka_request
from test_kafka_clients import (
    PARTITIONS,
    RECORDS,
    check_round_trip,
    confluent_produce,
    confluent_read_back,
)
from test_kafkajs import PARTITIONS as KAFKAJS_PARTITIONS
from test_kafkajs import RECORDS as KAFKAJS_RECORDS
from test_kafkajs import _kafkajs
from test_kcat import _kcat

from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S: Final = 20.0
STORAGE_NODES: Final = 3
# Groups listed in the ListGroups tests; enough that a duplicate or a miss shows.
LISTED_GROUPS: Final = 4


@pytest.fixture(scope="module")
def one_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One controller, three storage nodes, a group coordinator and one gateway."""
    with shared_cluster(
        tmp_path_factory,
        "broker-ids",
        controllers=1,
        storage_nodes=STORAGE_NODES,
        group_coordinators=1,
        gateways=1,
        config_overrides={
            "controller": {"offsets.topic.num.partitions": "4"},
            "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
        },
    ) as cluster:
        yield cluster


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def _storage_ids(cluster: LocalCluster) -> list[int]:
    return sorted(cluster.spec(n).node_id for n in cluster.names(Role.STORAGE_NODE))


def _listed_partitions(admin: Any, topic: str, count: int) -> dict[int, Any] | None:
    """partition -> confluent PartitionMetadata once ``count`` partitions all have a leader."""
    listed = admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    if listed is None or listed.error is not None or len(listed.partitions) != count:
        return None
    if any(p.error is not None or p.leader < 0 for p in listed.partitions.values()):
        return None
    return dict(listed.partitions)


def _wait_for_partitions(admin: Any, topic: str, count: int) -> dict[int, Any]:
    found: dict[int, Any] = {}

    def ready() -> bool:
        found.update(_listed_partitions(admin, topic, count) or {})
        return len(found) == count

    wait_until(ready, f"{count} led partitions of {topic}", CLIENT_TIMEOUT_S, 0.1)
    return found


def test_a_replica_assignment_built_from_the_listed_broker_ids_is_the_placement_metadata_reports(
    one_gateway: LocalCluster,
) -> None:
    from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

    bootstrap = one_gateway.kafka_bootstrap_servers
    admin = _admin(bootstrap)
    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    ids = sorted(metadata.brokers)
    assert metadata.controller_id in ids

    topic = "assigned-by-broker-id"
    replicas = min(2, len(ids))
    assignment = [[ids[(p + r) % len(ids)] for r in range(replicas)] for p in range(PARTITIONS)]
    created = admin.create_topics([NewTopic(topic, PARTITIONS, replica_assignment=assignment)])
    assert created[topic].result(CLIENT_TIMEOUT_S) is None
    partitions = _wait_for_partitions(admin, topic, PARTITIONS)
    for index, replicas in enumerate(assignment):
        assert list(partitions[index].replicas) == replicas
        assert partitions[index].leader in replicas
        assert set(partitions[index].isrs) <= set(replicas)

    offsets = confluent_produce(bootstrap, topic, {"acks": "all"})
    assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))
    check_round_trip(topic, confluent_read_back(bootstrap, topic))
    # The brokers are the storage nodes, each at its own port of the one gateway.
    assert ids == _storage_ids(one_gateway)
    assert {i: (b.host, b.port) for i, b in metadata.brokers.items()} == kafka_brokers(one_gateway)

    # Growing the topic with an explicit assignment takes the same ids.
    added = [ids[-1], ids[0]]
    grown = admin.create_partitions([NewPartitions(topic, PARTITIONS + 1, [added])])
    assert grown[topic].result(CLIENT_TIMEOUT_S) is None
    partitions = _wait_for_partitions(admin, topic, PARTITIONS + 1)
    assert list(partitions[PARTITIONS].replicas) == added

    # A broker id read from Metadata names that storage node's configs (librdkafka sends a
    # BROKER resource to the broker it names, so each id is also a broker it can reach).
    for broker_id in ids:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        configs = admin.describe_configs([resource])[resource].result(CLIENT_TIMEOUT_S)
        assert "log.retention.ms" in configs, broker_id


def _make_groups(bootstrap: str, topic: str, groups: list[str]) -> None:
    """Each group commits an offset (outside group management), which makes it exist."""
    from confluent_kafka import Consumer, TopicPartition

    for group in groups:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        finally:
            consumer.close()


def _listings(bootstrap: str) -> dict[str, Counter[str]]:
    """client -> how many times each group id is in its admin client's group listing."""
    from aiokafka.admin import AIOKafkaAdminClient
    from kafka import KafkaAdminClient

    admin = _admin(bootstrap)  # kept alive until its answer is in
    confluent = admin.list_consumer_groups().result(CLIENT_TIMEOUT_S)
    assert confluent.errors == []
    kafka_python = KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000)
    )
    try:
        kafka_python_groups = [g["group_id"] for g in kafka_python.list_groups()]
    finally:
        kafka_python.close()

    async def aiokafka_groups() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return [g[0] for g in await admin.list_consumer_groups()]
        finally:
            await admin.close()

    return {
        "confluent-kafka": Counter(g.group_id for g in confluent.valid),
        "kafka-python": Counter(kafka_python_groups),
        "aiokafka": Counter(asyncio.run(aiokafka_groups())),
    }


def _groups_made(bootstrap: str, topic: str) -> tuple[Any, list[str]]:
    """(an admin client, LISTED_GROUPS groups that committed an offset of the new ``topic``)."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(CLIENT_TIMEOUT_S)
    _wait_for_partitions(admin, topic, 1)
    groups = [f"{topic}-{i}" for i in range(LISTED_GROUPS)]
    _make_groups(bootstrap, topic, groups)
    return admin, groups


def test_find_coordinator_names_a_listed_broker_and_merging_clients_list_each_group_once(
    one_gateway: LocalCluster,
) -> None:
    from confluent_kafka import ConsumerGroupState

    bootstrap = one_gateway.kafka_bootstrap_servers
    admin, groups = _groups_made(bootstrap, "listed-groups-one-gateway")

    brokers = {i: (b.host, b.port) for i, b in admin.list_topics(timeout=10).brokers.items()}
    described = admin.describe_consumer_groups(groups)
    for group in groups:
        answer = described[group].result(CLIENT_TIMEOUT_S)
        assert answer.state == ConsumerGroupState.EMPTY
        coordinator = answer.coordinator
        assert brokers[coordinator.id] == (coordinator.host, coordinator.port)

    listings = _listings(bootstrap)
    # librdkafka and aiokafka merge the answers of the three broker ids by group id;
    # kafka-python concatenates them, so it lists each group once only because each broker id
    # answers for its own groups, known from the port it was asked on (on one shared address
    # it listed each group three times).
    for client, listing in listings.items():
        assert {g: listing[g] for g in groups} == dict.fromkeys(groups, 1), client


def test_every_gateway_names_the_same_listed_coordinator_and_lists_each_group_once(
    compat_cluster: LocalCluster,
) -> None:
    bootstrap = compat_cluster.kafka_bootstrap_servers
    _, groups = _groups_made(bootstrap, "listed-groups-two-gateways")

    gateways = sorted(set(kafka_brokers(compat_cluster).values()))
    assert len(gateways) == 2
    for group in groups:
        answers = []
        for address in gateways:
            found = kafka_request(
                address, ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0}, 10.0
            )
            assert found["error_code"] == 0, found
            answers.append((found["node_id"], found["host"], found["port"]))
            listed = kafka_request(address, ApiKey.METADATA, 5, {"topics": []}, 10.0)
            brokers = {b["node_id"]: (b["host"], b["port"]) for b in listed["brokers"]}
            assert brokers[found["node_id"]] == (found["host"], found["port"])
        assert answers[0] == answers[1]

    # One broker id per gateway here, so even a client that concatenates lists each once.
    for client, listing in _listings(bootstrap).items():
        assert {g: listing[g] for g in groups} == dict.fromkeys(groups, 1), client


def test_kcat_sees_each_broker_at_an_address_of_its_own_and_reads_a_topic_to_the_end(
    one_gateway: LocalCluster,
) -> None:
    """On one shared address librdkafka's bootstrap broker took the id of a broker listed
    there, a different one at each metadata refresh, moving the partitions back and forth:
    kcat -C -e never fetched and never reached the end."""
    from confluent_kafka.admin import NewTopic

    gateway = kafka_gateways(one_gateway)
    listing = json.loads(_kcat(gateway, "-L", "-J"))
    brokers = {b["id"]: b["name"] for b in listing["brokers"]}
    assert sorted(brokers) == _storage_ids(one_gateway)
    assert len(set(brokers.values())) == STORAGE_NODES, brokers
    expected = kafka_brokers(one_gateway)
    assert brokers == {i: f"{host}:{port}" for i, (host, port) in expected.items()}

    topic = "kcat-reads-to-the-end"
    bootstrap = one_gateway.kafka_bootstrap_servers
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 2)])[topic].result(CLIENT_TIMEOUT_S)
    _wait_for_partitions(admin, topic, PARTITIONS)
    confluent_produce(bootstrap, topic, {"acks": "all"})
    output = _kcat(gateway, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p %o\\n")
    read = sorted(tuple(int(field) for field in line.split()) for line in output.splitlines())
    per_partition = RECORDS // PARTITIONS
    assert read == [(p, o) for p in range(PARTITIONS) for o in range(per_partition)]


def test_kafkajs_produces_consumes_and_exits_after_disconnecting(
    one_gateway: LocalCluster,
) -> None:
    """kafkajs shares one connection object among the ids listed at its bootstrap address;
    on one shared address its process stayed alive after every client disconnected (3 of 4
    runs), and its group consumer read one partition of two (15 of 30 records in 45 s).
    Each phase must print its result and exit within test_kafkajs's NODE_TIMEOUT_S."""
    bootstrap = one_gateway.kafka_bootstrap_servers
    topic = "kafkajs-exits"
    produced = _kafkajs("produce", bootstrap, topic)
    assert all(r["errorCode"] == 0 for send in produced["sends"] for r in send["results"])
    count = KAFKAJS_PARTITIONS * KAFKAJS_RECORDS
    consumed = _kafkajs("consume", bootstrap, topic, f"{topic}-group", str(count))
    read = sorted((m["partition"], m["offset"]) for m in consumed["messages"])
    assert read == [(p, o) for p in range(KAFKAJS_PARTITIONS) for o in range(KAFKAJS_RECORDS)]
