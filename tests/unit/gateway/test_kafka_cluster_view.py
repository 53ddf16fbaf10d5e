"""The gateway's Kafka view of the cluster, and the answers that need no storage node: built
from real metadata records and a real Kafka server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import RECOMMENDED_VERSIONS, Dispatcher
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import (
    KAFKA_NODES_LISTENER,
    NO_NODE,
    ClusterImage,
    node_port,
    node_port_ceiling,
    nodes_listener,
)
from brook_gateway.data_apis import data_handlers
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import decode_response
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import Upstreams
from gateway_support import RawClient, running_server

from brook.errors import ErrorCode
from brook.v1 import common_pb2, metadata_pb2

TIMEOUT_S = 10.0


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def _node(node_id: int, role: int, port: int, fenced: bool = False) -> metadata_pb2.MetadataRecord:
    listener = "PLAINTEXT" if role == common_pb2.NODE_ROLE_GATEWAY else "GRPC"
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=role,  # type: ignore[arg-type]
            endpoints=[common_pb2.Endpoint(listener=listener, host="127.0.0.1", port=port)],
            fenced=fenced,
        )
    )


def _partition(topic: str, index: int, leader: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        partition=metadata_pb2.PartitionRecord(
            topic=topic, partition=index, replicas=[leader], isr=[leader], leader=leader
        )
    )


def _image(gateways: list[int]) -> ClusterImage:
    image = ClusterImage()
    records = [_node(g, common_pb2.NODE_ROLE_GATEWAY, 9000 + g) for g in gateways]
    records += [_node(n, common_pb2.NODE_ROLE_STORAGE_NODE, 7000 + n) for n in (1, 2, 3)]
    records.append(metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="t")))
    records += [_partition("t", i, leader=1 + i % 3) for i in range(6)]
    records.append(_partition("t", 6, leader=-1))
    image.apply(True, 5, records)
    return image


def _brokers(image: ClusterImage) -> list[tuple[int, int, int]]:
    """(broker id, Kafka port, serving gateway) of every broker the image presents."""
    return [(b.node_id, b.port, b.gateway_id) for b in image.kafka_brokers()]


def test_the_brokers_are_the_storage_nodes_at_the_same_gateways_whatever_the_record_order() -> None:
    one = _image([3001, 3002])
    other = ClusterImage()
    records = [_node(3002, common_pb2.NODE_ROLE_GATEWAY, 12002)]
    records.append(_node(3001, common_pb2.NODE_ROLE_GATEWAY, 12001))
    records += [_node(n, common_pb2.NODE_ROLE_STORAGE_NODE, 7000 + n) for n in (3, 2, 1)]
    other.apply(True, 5, records)
    # Storage node n at gateways[n % 2] of the gateways in id order.
    expected = [(1, 12002, 3002), (2, 12001, 3001), (3, 12002, 3002)]
    assert _brokers(one) == _brokers(other) == expected


def test_fenced_nodes_are_not_brokers_and_without_storage_nodes_the_gateways_are() -> None:
    image = _image([3001])
    image.apply(False, 6, [_node(3002, common_pb2.NODE_ROLE_GATEWAY, 12002, fenced=True)])
    image.apply(False, 7, [_node(2, common_pb2.NODE_ROLE_STORAGE_NODE, 7002, fenced=True)])
    assert _brokers(image) == [(1, 12001, 3001), (3, 12001, 3001)]
    for n in (1, 3):
        image.apply(False, 8, [_node(n, common_pb2.NODE_ROLE_STORAGE_NODE, 7000 + n, fenced=True)])
    assert _brokers(image) == [(3001, 12001, 3001)]
    image.apply(False, 9, [_node(3001, common_pb2.NODE_ROLE_GATEWAY, 12001, fenced=True)])
    assert _brokers(image) == []


def _gateway_with_node_ports(node_id: int, port: int, base: int) -> metadata_pb2.MetadataRecord:
    """A gateway that registered per-broker ports: PLAINTEXT at ``port``, PLAINTEXT_NODES at
    ``base`` (its own host, as a gateway registers it)."""
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=common_pb2.NODE_ROLE_GATEWAY,
            endpoints=[
                common_pb2.Endpoint(listener="PLAINTEXT", host="10.0.0.1", port=port),
                common_pb2.Endpoint(listener=KAFKA_NODES_LISTENER, host="10.0.0.1", port=base),
            ],
        )
    )


def test_a_gateway_with_per_broker_ports_shows_each_node_it_presents_at_its_own_port() -> None:
    image = _image([3001, 3002])
    # 3001 (presenting storage node 2) has per-broker ports from 20000; 3002 (nodes 1 and 3)
    # has none, so it shows them at its one Kafka listener, as before.
    image.apply(False, 6, [_gateway_with_node_ports(3001, 12001, 20000)])
    shown = [(b.node_id, b.host, b.port, b.gateway_id) for b in image.kafka_brokers()]
    assert shown == [
        (1, "127.0.0.1", 12002, 3002),
        (2, "10.0.0.1", 20002, 3001),
        (3, "127.0.0.1", 12002, 3002),
    ]
    assert image.presented_storage_nodes(3001) == [2]
    assert image.presented_storage_nodes(3002) == [1, 3]
    assert image.presented_storage_nodes(3003) == []
    # Both with per-broker ports: every broker id has an address of its own.
    image.apply(False, 7, [_gateway_with_node_ports(3002, 12002, 21000)])
    assert [(b.node_id, b.port) for b in image.kafka_brokers()] == [
        (1, 21001),
        (2, 20002),
        (3, 21003),
    ]
    # Without storage nodes the gateways are the brokers, at their Kafka listeners, and
    # present no storage node (so they open no per-broker port).
    for n in (1, 2, 3):
        image.apply(False, 8, [_node(n, common_pb2.NODE_ROLE_STORAGE_NODE, 7000 + n, fenced=True)])
    assert [(b.node_id, b.port) for b in image.kafka_brokers()] == [(3001, 12001), (3002, 12002)]
    assert image.presented_storage_nodes(3001) == image.presented_storage_nodes(3002) == []


def test_a_node_whose_own_port_would_pass_65535_is_shown_at_the_shared_address() -> None:
    assert node_port(0, 1) is None  # off
    assert node_port(65534, 1) == 65535
    assert node_port(65534, 2) is None
    image = _image([3001])
    image.apply(False, 6, [_gateway_with_node_ports(3001, 12001, 65533)])
    assert [(b.node_id, b.port) for b in image.kafka_brokers()] == [
        (1, 65534),
        (2, 65535),
        (3, 12001),
    ]


def test_each_kafka_listener_shows_the_brokers_at_its_own_addresses() -> None:
    image = _image([3001])
    endpoints = [
        ("PLAINTEXT", 12001),
        ("SASL_SSL", 12002),
        (nodes_listener("PLAINTEXT"), 20000),
        (nodes_listener("SASL_SSL"), 20002),
    ]
    image.apply(
        False,
        6,
        [
            metadata_pb2.MetadataRecord(
                broker=metadata_pb2.BrokerRecord(
                    node_id=3001,
                    role=common_pb2.NODE_ROLE_GATEWAY,
                    endpoints=[
                        common_pb2.Endpoint(listener=name, host="127.0.0.1", port=port)
                        for name, port in endpoints
                    ],
                )
            )
        ],
    )
    # PLAINTEXT's per-broker ports end where SASL_SSL's begin: node 2 (20002) and 3 would
    # collide with them, so they are shown at PLAINTEXT's shared address.
    assert [(b.node_id, b.port) for b in image.kafka_brokers("PLAINTEXT")] == [
        (1, 20001),
        (2, 12001),
        (3, 12001),
    ]
    assert [(b.node_id, b.port) for b in image.kafka_brokers("SASL_SSL")] == [
        (1, 20003),
        (2, 20004),
        (3, 20005),
    ]
    assert image.kafka_brokers("SSL") == []  # no gateway has it
    assert image.presented_storage_nodes(3001, "SASL_SSL") == [1, 2, 3]
    assert image.presented_storage_nodes(3001, "SSL") == []
    assert node_port_ceiling([20000, 20002], 20000) == 20002
    assert node_port_ceiling([20000, 20002], 20002) == 65536


def test_a_coordinator_is_shown_as_a_broker_picked_by_its_id() -> None:
    image = _image([3001, 3002])
    brokers = image.kafka_brokers()
    picked = {c: image.coordinator_broker(brokers, c) for c in (2001, 2002, 2003)}
    assert {c: b.node_id for c, b in picked.items() if b is not None} == {
        2001: 1,  # 2001 % 3 == 0
        2002: 2,
        2003: 3,
    }
    assert image.coordinator_broker(brokers, -1) is None
    assert image.coordinator_broker([], 2001) is None


def _server_backend(image: ClusterImage) -> tuple[Dispatcher, Upstreams]:
    upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=2000)
    backend = Backend(node_id=3001, image=image, upstreams=upstreams, controllers=())
    dispatcher = Dispatcher()
    dispatcher.register(api_versions_handler(dispatcher))
    for handler in data_handlers(backend):
        dispatcher.register(handler)
    return dispatcher, upstreams


def test_metadata_shows_storage_node_ids_everywhere_and_a_leaderless_partition_as_unavailable() -> (
    None
):
    async def scenario() -> None:
        image = _image([3001, 3002])
        # Partition 7: replicas 2 and 3, led by 3, which is then fenced.
        image.apply(
            False,
            6,
            [
                metadata_pb2.MetadataRecord(
                    partition=metadata_pb2.PartitionRecord(
                        topic="t", partition=7, replicas=[3, 2], isr=[3, 2], leader=3
                    )
                ),
                _node(3, common_pb2.NODE_ROLE_STORAGE_NODE, 7003, fenced=True),
            ],
        )
        dispatcher, upstreams = _server_backend(image)
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.METADATA, 5, 1, {"topics": None})
            _, response = await client.receive(ApiKey.METADATA, 5)
            await client.close()
        await upstreams.close()
        assert [(b["node_id"], b["port"]) for b in response["brokers"]] == [
            (1, 12002),
            (2, 12001),
        ]
        assert response["controller_id"] == 1
        (topic,) = response["topics"]
        by_index = {p["partition_index"]: p for p in topic["partitions"]}
        for i in range(6):
            replica = 1 + i % 3
            assert by_index[i]["replica_nodes"] == [replica]
            if replica != 3:
                assert (by_index[i]["leader_id"], by_index[i]["error_code"]) == (replica, 0)
                assert by_index[i]["offline_replicas"] == []
        # Led by a fenced node or by none: no leader the client could reach, so it retries;
        # the replicas stay the storage nodes' ids, the unlisted one offline.
        for i in (2, 5, 6):
            assert by_index[i]["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
            assert by_index[i]["leader_id"] == NO_NODE
        assert by_index[2]["offline_replicas"] == [3]
        assert (by_index[7]["leader_id"], by_index[7]["error_code"]) == (
            NO_NODE,
            ErrorCode.LEADER_NOT_AVAILABLE,
        )
        assert (by_index[7]["replica_nodes"], by_index[7]["isr_nodes"]) == ([3, 2], [3, 2])
        assert by_index[7]["offline_replicas"] == [3]

    run(scenario())


def test_produce_to_an_unknown_topic_is_answered_retriably_and_acks_0_gets_no_answer() -> None:
    async def scenario() -> None:
        dispatcher, upstreams = _server_backend(_image([3001]))
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            body = {
                "acks": -1,
                "timeout_ms": 1000,
                "topic_data": [{"name": "nope", "partition_data": [{"index": 0, "records": b""}]}],
            }
            await client.send(ApiKey.PRODUCE, 8, 1, body)
            _, response = await client.receive(ApiKey.PRODUCE, 8)
            (partition,) = response["responses"][0]["partition_responses"]
            assert partition["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            # acks=0: nothing comes back, so the next answer is the Metadata one.
            await client.send(ApiKey.PRODUCE, 8, 2, {**body, "acks": 0})
            await client.send(ApiKey.METADATA, 5, 3, {"topics": []})
            correlation_id, _ = await client.receive(ApiKey.METADATA, 5)
            assert correlation_id == 3
            await client.send(ApiKey.PRODUCE, 8, 4, {**body, "acks": 2})
            _, response = await client.receive(ApiKey.PRODUCE, 8)
            (partition,) = response["responses"][0]["partition_responses"]
            assert partition["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS
            await client.close()
        await upstreams.close()

    run(scenario())


def test_produce_of_an_empty_old_message_set_is_refused_not_dropped() -> None:
    async def scenario() -> None:
        dispatcher, upstreams = _server_backend(_image([3001]))
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            body = {
                "acks": 1,
                "timeout_ms": 1000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}],
            }
            await client.send(ApiKey.PRODUCE, 2, 1, body)
            _, response = await client.receive(ApiKey.PRODUCE, 2)
            (partition,) = response["responses"][0]["partition_responses"]
            # Produce v0-2 is converted to a v2 batch; an empty message set has none to make.
            assert partition["error_code"] == ErrorCode.INVALID_RECORD
            await client.close()
        await upstreams.close()

    run(scenario())


def test_a_storage_node_that_does_not_answer_gives_a_retriable_error() -> None:
    async def scenario() -> None:
        # The image says storage node 1 leads partition 0 at a port where nothing listens.
        dispatcher, upstreams = _server_backend(_image([3001]))
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            await client.send(
                ApiKey.LIST_OFFSETS,
                3,
                1,
                {
                    "replica_id": -1,
                    "topics": [
                        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    ],
                },
            )
            _, response = await client.receive(ApiKey.LIST_OFFSETS, 3)
            (partition,) = response["topics"][0]["partitions"]
            assert ErrorCode(partition["error_code"]).retriable
            assert partition["offset"] == -1
            await client.close()
        await upstreams.close()

    run(scenario())


_TOPIC_ID = bytes(range(1, 17))
_RECREATED_ID = bytes(range(101, 117))


def _versioned_image() -> ClusterImage:
    """Topic "v" (id _TOPIC_ID): partition i led by storage node 1 + i % 2 in leader epoch
    10 + i, replicated on nodes 1-3; node 3 is fenced."""
    image = ClusterImage()
    records = [_node(3001, common_pb2.NODE_ROLE_GATEWAY, 9001)]
    records += [_node(n, common_pb2.NODE_ROLE_STORAGE_NODE, 7000 + n) for n in (1, 2)]
    records.append(_node(3, common_pb2.NODE_ROLE_STORAGE_NODE, 7003, fenced=True))
    records.append(
        metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="v", topic_id=_TOPIC_ID))
    )
    records += [
        metadata_pb2.MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                topic_id=_TOPIC_ID,
                topic="v",
                partition=i,
                replicas=[1, 2, 3],
                isr=[1, 2],
                leader=1 + i % 2,
                leader_epoch=10 + i,
            )
        )
        for i in range(3)
    ]
    image.apply(True, 5, records)
    return image


def _metadata_request(version: int, topics: list[Message] | None) -> Message:
    return {"topics": topics, "allow_auto_topic_creation": False}


async def _metadata_frames(
    image: ClusterImage, requests: list[tuple[int, Message]]
) -> list[tuple[Message, bytes]]:
    """(decoded response, raw frame) of each (version, body) sent to a real server."""
    dispatcher, upstreams = _server_backend(image)
    answers = []
    async with running_server(dispatcher) as server:
        client = await RawClient.connect(server.port)
        for correlation_id, (version, body) in enumerate(requests):
            await client.send(ApiKey.METADATA, version, correlation_id, body)
            frame = await client.read_frame()
            received_id, response = decode_response(ApiKey.METADATA, version, frame)
            assert received_id == correlation_id
            answers.append((response, frame))
        await client.close()
    await upstreams.close()
    return answers


def test_metadata_in_every_served_version_carries_its_fields_as_kafka_python_reads_them() -> None:
    """Each version's answer decoded by kafka-python's own protocol classes (written from
    Kafka's schemas independently of Brook's codec): topic ids from v10, leader epochs from
    v7, offline replicas from v5, authorized operations at "not requested" from v8."""
    from kafka.protocol.metadata import MetadataResponse

    low, high = RECOMMENDED_VERSIONS[ApiKey.METADATA]
    assert (low, high) == (0, 12)
    versions = list(range(low, high + 1))
    requests = [(v, _metadata_request(v, [{"name": "v"}] if v == 0 else None)) for v in versions]

    async def scenario() -> None:
        answers = await _metadata_frames(_versioned_image(), requests)
        for version, (ours, frame) in zip(versions, answers, strict=True):
            theirs = MetadataResponse.decode(frame, version=version, header=True)
            (topic,) = theirs.topics
            assert topic.name == "v" and topic.error_code == 0
            (mine,) = ours["topics"]
            if version >= 10:
                assert topic.topic_id.bytes == _TOPIC_ID
            partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
            assert [p.partition_index for p in partitions] == [0, 1, 2]
            for p, m in zip(
                partitions,
                sorted(mine["partitions"], key=lambda p: p["partition_index"]),
                strict=True,
            ):
                # The storage nodes' own ids, as listed among the brokers.
                assert p.leader_id == m["leader_id"] == 1 + p.partition_index % 2
                assert p.replica_nodes == m["replica_nodes"] == [1, 2, 3]
                if version >= 7:
                    assert p.leader_epoch == 10 + p.partition_index
                if version >= 5:
                    # Node 3 is fenced: not listed, so its replica is offline.
                    assert p.offline_replicas == [3]
            if version >= 8:
                # Kafka's "not requested" value, which kafka-python reads as no bitfield.
                assert mine["topic_authorized_operations"] == -(2**31)
                assert topic.authorized_operations is None
            if 8 <= version <= 10:
                assert ours["cluster_authorized_operations"] == -(2**31)
                assert theirs.authorized_operations is None

    run(scenario())


def test_metadata_v12_answers_topics_by_id_and_unknown_ids_with_unknown_topic_id() -> None:
    unknown = bytes([7]) * 16
    by_id = [{"topic_id": _TOPIC_ID, "name": None}, {"topic_id": unknown, "name": None}]
    # v10-11 carry the fields but, as in Kafka, may not use them.
    requests = [(v, _metadata_request(v, by_id)) for v in (12, 10, 11)]

    async def scenario() -> None:
        v12, v10, v11 = [r for r, _ in await _metadata_frames(_versioned_image(), requests)]
        known, missing = v12["topics"]
        assert (known["error_code"], known["name"], known["topic_id"]) == (0, "v", _TOPIC_ID)
        assert len(known["partitions"]) == 3
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
        assert (missing["name"], missing["topic_id"], missing["partitions"]) == (None, unknown, [])
        for refused in (v10, v11):
            assert [t["error_code"] for t in refused["topics"]] == [ErrorCode.INVALID_REQUEST] * 2

    run(scenario())


def test_metadata_of_a_recreated_topic_shows_the_new_id_and_its_partitions_only() -> None:
    image = _versioned_image()
    image.apply(
        False,
        6,
        [
            metadata_pb2.MetadataRecord(
                remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=_TOPIC_ID, name="v")
            ),
            metadata_pb2.MetadataRecord(
                topic=metadata_pb2.TopicRecord(name="v", topic_id=_RECREATED_ID)
            ),
            metadata_pb2.MetadataRecord(
                partition=metadata_pb2.PartitionRecord(
                    topic_id=_RECREATED_ID, topic="v", partition=0, replicas=[1], isr=[1], leader=1
                )
            ),
        ],
    )
    requests = [
        (12, _metadata_request(12, [{"name": "v"}])),
        (12, _metadata_request(12, [{"topic_id": _TOPIC_ID, "name": None}])),
        (9, _metadata_request(9, [{"name": "v"}])),
    ]

    async def scenario() -> None:
        by_name, old_id, v9 = [r for r, _ in await _metadata_frames(image, requests)]
        (topic,) = by_name["topics"]
        assert topic["topic_id"] == _RECREATED_ID
        assert [(p["partition_index"], p["leader_epoch"]) for p in topic["partitions"]] == [(0, 0)]
        assert old_id["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
        assert [p["partition_index"] for p in v9["topics"][0]["partitions"]] == [0]

    run(scenario())


def test_metadata_for_an_unknown_topic_name_has_the_zero_topic_id() -> None:
    async def scenario() -> None:
        ((response, _),) = await _metadata_frames(
            _versioned_image(), [(12, _metadata_request(12, [{"name": "nope"}]))]
        )
        (topic,) = response["topics"]
        assert topic["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert (topic["name"], topic["topic_id"]) == ("nope", bytes(16))

    run(scenario())


def test_an_ipv6_node_is_routed_to_bracketed_and_shown_to_kafka_clients_unbracketed() -> None:
    image = ClusterImage()
    ipv6 = [
        metadata_pb2.MetadataRecord(
            broker=metadata_pb2.BrokerRecord(
                node_id=node_id,
                role=role,  # type: ignore[arg-type]
                endpoints=[common_pb2.Endpoint(listener=listener, host="::1", port=port)],
            )
        )
        for node_id, role, listener, port in [
            (1, common_pb2.NODE_ROLE_STORAGE_NODE, "GRPC", 7001),
            (3001, common_pb2.NODE_ROLE_GATEWAY, "PLAINTEXT", 9092),
        ]
    ]
    image.apply(True, 1, ipv6)
    # gRPC reads an unbracketed "::1:7001" as a host name; the gateway must dial "[::1]:7001".
    assert image.storage_address(1) == "[::1]:7001"
    # Kafka's Metadata carries host and port apart: the host stays a bare IPv6 literal.
    assert [(b.node_id, b.host, b.port) for b in image.kafka_brokers()] == [(1, "::1", 9092)]
