"""The gateway's group APIs: their messages against kafka-python's independent protocol classes
and hand-built bytes, and the handlers over a real Kafka-protocol server in front of two real
group coordinators (GroupCoordinatorService in-process over gRPC, __consumer_offsets in memory).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from brook_gateway.apis import RECOMMENDED_VERSIONS
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.coordinator_routing import Routers
from brook_gateway.group_apis import group_handlers
from brook_gateway.protocol.codec import Message, codec_for
from brook_gateway.protocol.frames import decode_request
from brook_gateway.protocol.kafka_messages import REQUESTS, RESPONSES, ApiKey
from brook_gateway.server import KafkaServer
from brook_gateway.txn_apis import txn_handlers
from brook_gateway.upstream import Upstreams
from brook_group_coordinator.coordinator_service import GroupCoordinatorServicer
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.group import GroupLimits
from brook_group_coordinator.group_manager import GroupManager
from brook_group_coordinator.offsets import OffsetLimits
from brook_group_coordinator.ownership import offsets_partition_for
from brook_group_coordinator.timers import LoopTimers
from gateway_support import (
    RawClient,
    assert_same_bytes_as_kafka_python,
    dispatcher_with_api_versions,
    running_server,
)
from kafka.protocol.admin import groups as kafka_groups
from kafka.protocol.consumer import group as kafka_group
from kafka.protocol.metadata import find_coordinator as kafka_find_coordinator
from kafka.protocol.producer import transaction as kafka_transaction
from memory_offsets_log import MemoryOffsetsLog

from brook.errors import ErrorCode
from brook.metadata.info import EndpointInfo
from brook.v1 import common_pb2, group_pb2_grpc, metadata_pb2

TIMEOUT_S = 30.0
OFFSETS_PARTITIONS = 4
OWNER = 7
OTHER = 8
GATEWAYS = (1, 2)
STORAGE_IDS = (100, 101, 102)
PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"
SUBSCRIPTION = b"\x00\x01subscription"
ASSIGNMENT = b"\x00\x01assignment"
CLIENT_ID = "raw-test"  # what gateway_support's RawClient sends in every request header


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def group_on(partition: int, prefix: str) -> str:
    """A group id whose __consumer_offsets partition is ``partition``."""
    return next(
        g
        for g in (f"{prefix}-{i}" for i in itertools.count())
        if offsets_partition_for(g, OFFSETS_PARTITIONS) == partition
    )


OWNED_PARTITION = offsets_partition_for("owned", OFFSETS_PARTITIONS)
NOT_OWNED_PARTITION = (OWNED_PARTITION + 1) % OFFSETS_PARTITIONS

# -- messages against kafka-python -----------------------------------------------------------

_FETCHED_PARTITION: Message = {
    "partition_index": 1,
    "committed_offset": 42,
    "committed_leader_epoch": 3,
    "metadata": "md",
    "error_code": 0,
}

_SAMPLES: dict[ApiKey, tuple[Any, Message, Any, Message]] = {
    ApiKey.FIND_COORDINATOR: (
        kafka_find_coordinator.FindCoordinatorRequest,
        {"key": "orders-app", "key_type": 0, "coordinator_keys": ["orders-app", "billing"]},
        kafka_find_coordinator.FindCoordinatorResponse,
        {
            "throttle_time_ms": 3,
            "error_code": 15,
            "error_message": "none yet",
            "node_id": 2,
            "host": "gw",
            "port": 9092,
            "coordinators": [
                {
                    "key": "orders-app",
                    "node_id": 2,
                    "host": "gw",
                    "port": 9092,
                    "error_code": 0,
                    "error_message": None,
                },
                {
                    "key": "billing",
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                    "error_code": 15,
                    "error_message": "none yet",
                },
            ],
        },
    ),
    ApiKey.JOIN_GROUP: (
        kafka_group.JoinGroupRequest,
        {
            "group_id": "g",
            "session_timeout_ms": 6000,
            "rebalance_timeout_ms": 9000,
            "member_id": "m-1",
            "group_instance_id": "i-1",
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": ASSIGNOR, "metadata": b"sub"}],
        },
        kafka_group.JoinGroupResponse,
        {
            "throttle_time_ms": 1,
            "error_code": 0,
            "generation_id": 4,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": ASSIGNOR,
            "leader": "m-1",
            "member_id": "m-1",
            "members": [{"member_id": "m-1", "group_instance_id": "i-1", "metadata": b"sub"}],
        },
    ),
    ApiKey.SYNC_GROUP: (
        kafka_group.SyncGroupRequest,
        {
            "group_id": "g",
            "generation_id": 4,
            "member_id": "m-1",
            "group_instance_id": "i-1",
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": ASSIGNOR,
            "assignments": [{"member_id": "m-1", "assignment": b"asg"}],
        },
        kafka_group.SyncGroupResponse,
        {
            "throttle_time_ms": 1,
            "error_code": 27,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": ASSIGNOR,
            "assignment": b"asg",
        },
    ),
    ApiKey.HEARTBEAT: (
        kafka_group.HeartbeatRequest,
        {"group_id": "g", "generation_id": 4, "member_id": "m-1", "group_instance_id": "i-1"},
        kafka_group.HeartbeatResponse,
        {"throttle_time_ms": 1, "error_code": 27},
    ),
    ApiKey.LEAVE_GROUP: (
        kafka_group.LeaveGroupRequest,
        {
            "group_id": "g",
            "member_id": "m-1",
            "members": [
                {"member_id": "m-1", "group_instance_id": None, "reason": "closing"},
                {"member_id": "", "group_instance_id": "i-2", "reason": None},
            ],
        },
        kafka_group.LeaveGroupResponse,
        {
            "throttle_time_ms": 1,
            "error_code": 25,
            "members": [
                {"member_id": "m-1", "group_instance_id": None, "error_code": 0},
                {"member_id": "", "group_instance_id": "i-2", "error_code": 82},
            ],
        },
    ),
    ApiKey.OFFSET_COMMIT: (
        kafka_group.OffsetCommitRequest,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": 4,
            "member_id": "m-1",
            "group_instance_id": "i-1",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "committed_offset": 42,
                            "committed_leader_epoch": 3,
                            "committed_metadata": "md",
                        }
                    ],
                }
            ],
        },
        kafka_group.OffsetCommitResponse,
        {
            "throttle_time_ms": 1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 1, "error_code": 22}]}],
        },
    ),
    ApiKey.OFFSET_FETCH: (
        kafka_group.OffsetFetchRequest,
        {
            "group_id": "g",
            "topics": [{"name": "t", "partition_indexes": [0, 1]}],
            "groups": [
                {
                    "group_id": "g",
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": "t", "partition_indexes": [0, 1]}],
                },
                {"group_id": "h", "member_id": "m-1", "member_epoch": 5, "topics": None},
            ],
            "require_stable": True,
        },
        kafka_group.OffsetFetchResponse,
        {
            "throttle_time_ms": 1,
            "topics": [{"name": "t", "partitions": [_FETCHED_PARTITION]}],
            "error_code": 14,
            "groups": [
                {
                    "group_id": "g",
                    "topics": [{"name": "t", "partitions": [_FETCHED_PARTITION]}],
                    "error_code": 0,
                },
                {"group_id": "h", "topics": [], "error_code": 14},
            ],
        },
    ),
    ApiKey.DESCRIBE_GROUPS: (
        kafka_groups.DescribeGroupsRequest,
        {"groups": ["g", "h"], "include_authorized_operations": False},
        kafka_groups.DescribeGroupsResponse,
        {
            "throttle_time_ms": 1,
            "groups": [
                {
                    "error_code": 0,
                    "group_id": "g",
                    "group_state": "Stable",
                    "protocol_type": PROTOCOL_TYPE,
                    "protocol_data": ASSIGNOR,
                    "members": [
                        {
                            "member_id": "m-1",
                            "group_instance_id": "i-1",
                            "client_id": "c",
                            "client_host": "/127.0.0.1",
                            "member_metadata": b"sub",
                            "member_assignment": b"asg",
                        }
                    ],
                    "authorized_operations": 0b1000,
                }
            ],
        },
    ),
    ApiKey.LIST_GROUPS: (
        kafka_groups.ListGroupsRequest,
        {"states_filter": ["Stable", "Empty"], "types_filter": ["classic"]},
        kafka_groups.ListGroupsResponse,
        {
            "throttle_time_ms": 1,
            "error_code": 0,
            "groups": [
                {
                    "group_id": "g",
                    "protocol_type": PROTOCOL_TYPE,
                    "group_state": "Stable",
                    "group_type": "classic",
                }
            ],
        },
    ),
    ApiKey.DELETE_GROUPS: (
        kafka_groups.DeleteGroupsRequest,
        {"groups_names": ["g", "h"]},
        kafka_groups.DeleteGroupsResponse,
        {"throttle_time_ms": 1, "results": [{"group_id": "g", "error_code": 68}]},
    ),
    ApiKey.INIT_PRODUCER_ID: (
        kafka_transaction.InitProducerIdRequest,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60000,
            "producer_id": 4000,
            "producer_epoch": 2,
        },
        kafka_transaction.InitProducerIdResponse,
        {"throttle_time_ms": 1, "error_code": 0, "producer_id": 4000, "producer_epoch": 3},
    ),
}


_CASES = [
    pytest.param(api, version, direction, id=f"{api.name}-v{version}-{direction}")
    for api in _SAMPLES
    for version in range(RECOMMENDED_VERSIONS[api][0], RECOMMENDED_VERSIONS[api][1] + 1)
    for direction in ("request", "response")
]


@pytest.mark.parametrize(("api", "version", "direction"), _CASES)
def test_group_api_messages_are_byte_identical_to_kafka_pythons(
    api: ApiKey, version: int, direction: str
) -> None:
    request_class, request, response_class, response = _SAMPLES[api]
    kafka_class, sample, spec = (
        (request_class, request, REQUESTS[api])
        if direction == "request"
        else (response_class, response, RESPONSES[api])
    )
    assert_same_bytes_as_kafka_python(kafka_class, spec, version, sample)


def test_join_group_v0_request_decodes_from_hand_built_bytes() -> None:
    body = (
        b"\x00\x01g"  # group_id
        b"\x00\x00\x17\x70"  # session_timeout_ms 6000
        b"\x00\x00"  # member_id ""
        b"\x00\x08consumer"  # protocol_type
        b"\x00\x00\x00\x01"  # one protocol
        b"\x00\x05range"
        b"\x00\x00\x00\x03sub"
    )
    header = b"\x00\x0b\x00\x00\x00\x00\x00\x09\x00\x01c"  # JoinGroup v0, id 9, client "c"
    decoded_header, request = decode_request(header + body)
    assert (decoded_header.api_key, decoded_header.correlation_id) == (ApiKey.JOIN_GROUP, 9)
    assert request["session_timeout_ms"] == 6000
    # v0 has no rebalance timeout: the schema default stands for "use the session timeout".
    assert request["rebalance_timeout_ms"] == -1
    assert request["protocols"] == [{"name": ASSIGNOR, "metadata": b"sub"}]


def test_find_coordinator_v0_response_encodes_to_hand_built_bytes() -> None:
    codec = codec_for(RESPONSES[ApiKey.FIND_COORDINATOR], 0)
    encoded = codec.encode(
        {
            "error_code": 0,
            "error_message": "ignored in v0",
            "node_id": 2,
            "host": "gw",
            "port": 9092,
        }
    )
    assert encoded == b"\x00\x00\x00\x00\x00\x02\x00\x02gw\x00\x00\x23\x84"


# -- handlers against real coordinators ------------------------------------------------------


@dataclass
class Coordinator:
    node_id: int
    manager: GroupManager
    directory: CoordinatorDirectory
    server: grpc.aio.Server
    port: int


@dataclass
class Gateway:
    client: RawClient
    port: int
    server: KafkaServer
    coordinators: dict[int, Coordinator]
    image: ClusterImage
    _correlation_ids: itertools.count[int]

    async def call(
        self, api: ApiKey, version: int, body: Message, client: RawClient | None = None
    ) -> Message:
        client = client or self.client
        correlation_id = next(self._correlation_ids)
        await client.send(api, version, correlation_id, body)
        answered, response = await client.receive(api, version)
        assert answered == correlation_id
        return response

    def move(self, partition: int, to: int, epoch: int) -> None:
        """Every coordinator learns that ``to`` owns ``partition`` from now on."""
        for coordinator in self.coordinators.values():
            coordinator.directory.assign(partition, to, epoch)


def _node(node_id: int, role: int, listener: str, port: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=role,  # type: ignore[arg-type]
            endpoints=[common_pb2.Endpoint(listener=listener, host="127.0.0.1", port=port)],
        )
    )


def _gateway_port(node_id: int) -> int:
    return 9000 + node_id


@asynccontextmanager
async def gateway(
    *,
    with_coordinators: bool = True,
    request_timeout_ms: int = 5_000,
    storage_ports: tuple[int, ...] = (),
) -> AsyncIterator[Gateway]:
    """A gateway (the one serving the broker FindCoordinator names for OWNER) in front of
    coordinators OWNER (owning OWNED_PARTITION) and OTHER (owning the rest), which share one
    __consumer_offsets. Storage nodes STORAGE_IDS[i] at ``storage_ports[i]``; without any, the
    gateways are the brokers."""
    log = MemoryOffsetsLog()
    coordinators: dict[int, Coordinator] = {}
    for node_id in (OWNER, OTHER) if with_coordinators else ():
        manager = GroupManager(
            limits=GroupLimits(100, 60_000, initial_rebalance_delay_ms=0, members_max=100),
            offset_limits=OffsetLimits(metadata_bytes_max=1024, retention_ms=60_000),
            timers=LoopTimers(asyncio.get_running_loop()),
            log=log,
            partition_count=OFFSETS_PARTITIONS,
        )
        directory = CoordinatorDirectory()
        server = grpc.aio.server()
        group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
            GroupCoordinatorServicer(manager, directory), server
        )
        port = server.add_insecure_port("127.0.0.1:0")
        coordinators[node_id] = Coordinator(node_id, manager, directory, server, port)
    for c in coordinators.values():
        for other in coordinators.values():
            endpoint = EndpointInfo("GRPC", "127.0.0.1", other.port)
            c.directory.set_endpoints(other.node_id, (endpoint,))
        for partition in range(OFFSETS_PARTITIONS):
            c.directory.assign(partition, OWNER if partition == OWNED_PARTITION else OTHER, 1)
    for partition in range(OFFSETS_PARTITIONS) if with_coordinators else ():
        owner = OWNER if partition == OWNED_PARTITION else OTHER
        await coordinators[owner].manager.load_partition(partition, 1)
    image = ClusterImage()
    records = [
        _node(g, common_pb2.NODE_ROLE_GATEWAY, "PLAINTEXT", _gateway_port(g)) for g in GATEWAYS
    ]
    records += [
        _node(c.node_id, common_pb2.NODE_ROLE_GROUP_COORDINATOR, "GRPC", c.port)
        for c in coordinators.values()
    ]
    records += [
        _node(STORAGE_IDS[i], common_pb2.NODE_ROLE_STORAGE_NODE, "GRPC", port)
        for i, port in enumerate(storage_ports)
    ]
    # The topic the tests commit offsets for: OffsetCommit answers a partition the metadata
    # lacks UNKNOWN_TOPIC_OR_PARTITION (one partition per OffsetCommit version, which some
    # tests commit to).
    records.append(metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="t")))
    records += [
        metadata_pb2.MetadataRecord(
            partition=metadata_pb2.PartitionRecord(topic="t", partition=p, leader=-1)
        )
        for p in range(RECOMMENDED_VERSIONS[ApiKey.OFFSET_COMMIT][1] + 1)
    ]
    image.apply(True, 1, records)
    upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=request_timeout_ms)
    owner_broker = image.coordinator_broker(image.kafka_brokers(), OWNER)
    assert owner_broker is not None
    backend = Backend(
        node_id=owner_broker.gateway_id, image=image, upstreams=upstreams, controllers=()
    )
    dispatcher = dispatcher_with_api_versions()
    routers = Routers.of(backend)
    for handler in (*group_handlers(backend, routers), *txn_handlers(backend, routers)):
        dispatcher.register(handler)
    try:
        for c in coordinators.values():
            await c.server.start()
        async with running_server(dispatcher, request_timeout_ms=request_timeout_ms) as server:
            client = await RawClient.connect(server.port)
            try:
                yield Gateway(client, server.port, server, coordinators, image, itertools.count(1))
            finally:
                await client.close()
    finally:
        await upstreams.close()
        for c in coordinators.values():
            await c.server.stop(None)
            await c.manager.close()


def _join_body(group: str, member_id: str = "", instance: str | None = None) -> Message:
    return {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": PROTOCOL_TYPE,
        "protocols": [{"name": ASSIGNOR, "metadata": SUBSCRIPTION}],
    }


def test_find_coordinator_names_a_listed_broker_picked_by_the_owning_coordinators_id() -> None:
    async def scenario() -> None:
        owned = {OWNER: OWNED_PARTITION, OTHER: NOT_OWNED_PARTITION}
        # Without storage nodes the gateways are the brokers; with them, the storage nodes,
        # each at the gateway STORAGE_IDS[i] % len(GATEWAYS) picks.
        for storage_ports, brokers in (
            ((), GATEWAYS),
            ((_closed_port(), _closed_port(), _closed_port()), STORAGE_IDS),
        ):

            def port_of(broker: int, brokers: tuple[int, ...] | list[int] = brokers) -> int:
                at = broker if brokers == GATEWAYS else GATEWAYS[broker % len(GATEWAYS)]
                return _gateway_port(at)

            async with gateway(storage_ports=storage_ports) as gw:
                for owner, partition in owned.items():
                    group = group_on(partition, "found")
                    broker = brokers[owner % len(brokers)]
                    for version in range(4):
                        answer = await gw.call(
                            ApiKey.FIND_COORDINATOR, version, {"key": group, "key_type": 0}
                        )
                        assert answer["error_code"] == ErrorCode.NONE
                        assert (answer["node_id"], answer["host"], answer["port"]) == (
                            broker,
                            "127.0.0.1",
                            port_of(broker),
                        )
                # v4 looks several keys up at once, each answered on its own.
                keys = [group_on(OWNED_PARTITION, "batch"), group_on(NOT_OWNED_PARTITION, "batch")]
                answer = await gw.call(
                    ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": keys}
                )
                expected = [brokers[o % len(brokers)] for o in (OWNER, OTHER)]
                assert [
                    (c["key"], c["error_code"], c["node_id"], c["port"])
                    for c in answer["coordinators"]
                ] == [(key, 0, b, port_of(b)) for key, b in zip(keys, expected, strict=True)]

    run(scenario())


def test_find_coordinator_of_an_unknown_key_type_or_without_coordinators_is_refused() -> None:
    # Transactional ids (key type 1) are tests/unit/gateway/test_txn_apis.py's.
    async def scenario() -> None:
        async with gateway() as gw:
            answer = await gw.call(ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 5})
            assert answer["error_code"] == ErrorCode.INVALID_REQUEST
        async with gateway(with_coordinators=False) as gw:
            answer = await gw.call(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})
            assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(scenario())


async def _join(gw: Gateway, version: int, group: str, instance: str | None = None) -> Message:
    """A single member's join at ``version``, through the MEMBER_ID_REQUIRED step when the
    version has it."""
    joined = await gw.call(ApiKey.JOIN_GROUP, version, _join_body(group, instance=instance))
    if version < 4:
        assert joined["error_code"] == ErrorCode.NONE, "v0-3 clients never see MEMBER_ID_REQUIRED"
    elif joined["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
        assert joined["member_id"]
        joined = await gw.call(
            ApiKey.JOIN_GROUP, version, _join_body(group, joined["member_id"], instance)
        )
    assert joined["error_code"] == ErrorCode.NONE
    return joined


@pytest.mark.parametrize("version", range(RECOMMENDED_VERSIONS[ApiKey.JOIN_GROUP][1] + 1))
def test_member_joins_syncs_heartbeats_and_leaves_at_each_join_group_version(
    version: int,
) -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            group = group_on(OWNED_PARTITION, f"join-v{version}")
            instance = "instance-1" if version >= 5 else None
            joined = await _join(gw, version, group, instance)
            member = joined["member_id"]
            assert joined["leader"] == member and joined["protocol_name"] == ASSIGNOR
            assert joined["members"] == [
                {"member_id": member, "group_instance_id": instance, "metadata": SUBSCRIPTION}
            ]
            synced = await gw.call(
                ApiKey.SYNC_GROUP,
                min(version, 5),
                {
                    "group_id": group,
                    "generation_id": joined["generation_id"],
                    "member_id": member,
                    "group_instance_id": instance,
                    "assignments": [{"member_id": member, "assignment": ASSIGNMENT}],
                },
            )
            assert (synced["error_code"], synced["assignment"]) == (0, ASSIGNMENT)
            beat = {"group_id": group, "generation_id": joined["generation_id"]}
            beat["group_instance_id"] = instance
            answer = await gw.call(ApiKey.HEARTBEAT, min(version, 4), beat | {"member_id": member})
            assert answer["error_code"] == ErrorCode.NONE
            [described] = (await gw.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group]}))["groups"]
            assert (described["error_code"], described["group_state"]) == (0, "Stable")
            assert (described["protocol_type"], described["protocol_data"]) == (
                PROTOCOL_TYPE,
                ASSIGNOR,
            )
            [shown] = described["members"]
            assert shown["group_instance_id"] == instance
            assert (shown["member_id"], shown["client_id"], shown["client_host"]) == (
                member,
                CLIENT_ID,
                "/127.0.0.1",
            )
            assert (shown["member_metadata"], shown["member_assignment"]) == (
                SUBSCRIPTION,
                ASSIGNMENT,
            )
            leaving = {"member_id": member, "group_instance_id": instance, "reason": None}
            answer = await gw.call(
                ApiKey.LEAVE_GROUP,
                min(version, 5),
                {"group_id": group, "member_id": member, "members": [leaving]},
            )
            assert answer["error_code"] == ErrorCode.NONE
            if version >= 3:
                assert answer["members"] == [
                    {"member_id": member, "group_instance_id": instance, "error_code": 0}
                ]
            answer = await gw.call(ApiKey.HEARTBEAT, min(version, 4), beat | {"member_id": member})
            assert answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

    run(scenario())


def test_a_replaced_static_member_is_fenced_in_every_version_that_names_its_instance() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            group = group_on(OWNED_PARTITION, "static")
            instance = "instance-x"
            old = await _join(gw, 5, group, instance)
            generation = old["generation_id"]
            own = {"member_id": old["member_id"], "assignment": ASSIGNMENT}
            sync = {"group_id": group, "generation_id": generation, "group_instance_id": instance}
            await gw.call(
                ApiKey.SYNC_GROUP, 3, sync | {"member_id": old["member_id"], "assignments": [own]}
            )
            # The same instance starts again elsewhere: it takes the old member's place, in the
            # same generation, and (a v5 client cannot be told to skip the assignment) as a
            # follower that receives the stored assignment.
            new_client = await RawClient.connect(gw.port)
            try:
                new = await gw.call(
                    ApiKey.JOIN_GROUP, 5, _join_body(group, instance=instance), new_client
                )
            finally:
                await new_client.close()
            assert (new["error_code"], new["generation_id"]) == (0, generation)
            assert new["member_id"] != old["member_id"]
            assert (new["leader"], new["members"]) == ("", [])
            synced = await gw.call(
                ApiKey.SYNC_GROUP, 3, sync | {"member_id": new["member_id"], "assignments": []}
            )
            assert (synced["error_code"], synced["assignment"]) == (0, ASSIGNMENT)

            stale = {"group_id": group, "generation_id": generation, "member_id": old["member_id"]}
            fenced = ErrorCode.FENCED_INSTANCE_ID
            for version in (3, 4):
                answer = await gw.call(
                    ApiKey.HEARTBEAT, version, stale | {"group_instance_id": instance}
                )
                assert answer["error_code"] == fenced, version
            # Heartbeat v0-2 cannot carry the instance id: the old id is merely unknown.
            answer = await gw.call(ApiKey.HEARTBEAT, 2, stale)
            assert answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
            for version in (3, 4, 5):
                answer = await gw.call(
                    ApiKey.SYNC_GROUP,
                    version,
                    stale | {"group_instance_id": instance, "assignments": []},
                )
                assert answer["error_code"] == fenced, version
            for version in (5, 6, 7):
                answer = await gw.call(
                    ApiKey.JOIN_GROUP, version, _join_body(group, old["member_id"], instance)
                )
                assert answer["error_code"] == fenced, version
            commit = _commit_body(group, {0: (9, None)}) | {
                "generation_id_or_member_epoch": generation,
                "member_id": old["member_id"],
                "group_instance_id": instance,
            }
            for version in (7, 8, 9):
                answer = await gw.call(ApiKey.OFFSET_COMMIT, version, commit)
                assert _fetched_codes(answer) == [fenced], version
            answer = await gw.call(ApiKey.OFFSET_COMMIT, 6, commit)
            assert _fetched_codes(answer) == [ErrorCode.UNKNOWN_MEMBER_ID]
            leaving = {"member_id": old["member_id"], "group_instance_id": instance, "reason": None}
            for version in (3, 4, 5):
                answer = await gw.call(
                    ApiKey.LEAVE_GROUP, version, {"group_id": group, "members": [leaving]}
                )
                assert answer["error_code"] == ErrorCode.NONE
                assert [m["error_code"] for m in answer["members"]] == [fenced], version
            # Nothing of that disturbed the new member.
            answer = await gw.call(
                ApiKey.HEARTBEAT,
                4,
                stale | {"member_id": new["member_id"], "group_instance_id": instance},
            )
            assert answer["error_code"] == ErrorCode.NONE
            wanted = {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]}
            assert _fetched(await gw.call(ApiKey.OFFSET_FETCH, 3, wanted)) == {
                ("t", 0): (-1, "", 0)
            }

    run(scenario())


def test_groups_are_listed_by_the_gateway_they_map_to_described_and_deleted() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            mine = group_on(OWNED_PARTITION, "listed")
            elsewhere = group_on(NOT_OWNED_PARTITION, "unlisted")
            for group in (mine, elsewhere):
                await _join(gw, 5, group)
            for version in range(6):
                listed = await gw.call(ApiKey.LIST_GROUPS, version, {})
                # OTHER's groups are listed by the gateway OTHER maps onto, not this one.
                assert listed["error_code"] == ErrorCode.NONE
                assert [(g["group_id"], g["protocol_type"]) for g in listed["groups"]] == [
                    (mine, PROTOCOL_TYPE)
                ]
            # v4 filters by state, v5 by group type (case-insensitively).
            for version, body, expected in (
                (4, {"states_filter": ["completingrebalance"]}, [mine]),
                (4, {"states_filter": ["Empty"]}, []),
                (5, {"states_filter": [], "types_filter": ["Classic"]}, [mine]),
                (5, {"states_filter": [], "types_filter": ["consumer"]}, []),
            ):
                listed = await gw.call(ApiKey.LIST_GROUPS, version, body)
                assert [g["group_id"] for g in listed["groups"]] == expected
                if expected and version == 5:
                    [shown] = listed["groups"]
                    assert (shown["group_state"], shown["group_type"]) == (
                        "CompletingRebalance",
                        "classic",
                    )
            answer = await gw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [mine, elsewhere]})
            assert [r["error_code"] for r in answer["results"]] == [ErrorCode.NON_EMPTY_GROUP] * 2
            [described] = (await gw.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [elsewhere]}))[
                "groups"
            ]
            [member] = described["members"]
            await gw.call(
                ApiKey.LEAVE_GROUP, 0, {"group_id": elsewhere, "member_id": member["member_id"]}
            )
            answer = await gw.call(ApiKey.DELETE_GROUPS, 0, {"groups_names": [elsewhere]})
            assert answer["results"] == [{"group_id": elsewhere, "error_code": 0}]
            [described] = (await gw.call(ApiKey.DESCRIBE_GROUPS, 1, {"groups": [elsewhere]}))[
                "groups"
            ]
            assert (described["error_code"], described["group_state"]) == (0, "Dead")

    run(scenario())


def test_on_a_brokers_own_port_list_groups_lists_the_groups_whose_coordinator_is_that_broker() -> (
    None
):
    async def scenario() -> None:
        storage_ports = (_closed_port(), _closed_port(), _closed_port())
        async with gateway(storage_ports=storage_ports) as gw:
            mine = group_on(OWNED_PARTITION, "listed")
            elsewhere = group_on(NOT_OWNED_PARTITION, "unlisted")
            for group in (mine, elsewhere):
                await _join(gw, 5, group)
            brokers = gw.image.kafka_brokers()
            owner = gw.image.coordinator_broker(brokers, OWNER)
            other = gw.image.coordinator_broker(brokers, OTHER)
            assert owner is not None and other is not None and owner.node_id != other.node_id
            # This gateway presents OWNER's broker, another gateway OTHER's; a port for any
            # broker id lists that broker's groups, the bootstrap port those of the brokers
            # this gateway presents.
            assert other.gateway_id != owner.gateway_id
            expected = {owner.node_id: [mine], other.node_id: [elsewhere]}
            unlisted = next(b.node_id for b in brokers if b.node_id not in expected)
            expected[unlisted] = []
            for broker_id in expected:
                await gw.server.open_node_listener(broker_id, 0)
            listed: dict[int | None, list[str]] = {}
            for broker_id, port in [(None, gw.port), *gw.server.node_ports.items()]:
                client = await RawClient.connect(port)
                try:
                    answer = await gw.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []}, client)
                finally:
                    await client.close()
                assert answer["error_code"] == ErrorCode.NONE
                listed[broker_id] = sorted(g["group_id"] for g in answer["groups"])
            assert listed == {None: [mine], **expected}

    run(scenario())


def _commit_body(group: str, offsets: dict[int, tuple[int, str | None]]) -> Message:
    """A commit outside group management (generation -1, no member), as with manual
    assignment."""
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": 86_400_000,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_metadata": m}
                    for p, (o, m) in offsets.items()
                ],
            }
        ],
    }


def _fetched(response: Message) -> dict[tuple[str, int], tuple[int, str, int]]:
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["error_code"])
        for t in response["topics"]
        for p in t["partitions"]
    }


def test_offsets_committed_at_each_version_are_fetched_back_per_partition_and_all_at_once() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            group = "offsets"
            for version, offsets in ((2, {0: (5, "five")}), (3, {1: (7, None)})):
                answer = await gw.call(ApiKey.OFFSET_COMMIT, version, _commit_body(group, offsets))
                assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [0]
            wanted = {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0, 1, 2]}]}
            expected = {("t", 0): (5, "five", 0), ("t", 1): (7, "", 0), ("t", 2): (-1, "", 0)}
            for version in (1, 2, 3):
                answer = await gw.call(ApiKey.OFFSET_FETCH, version, wanted)
                assert _fetched(answer) == expected
                assert answer["error_code"] == ErrorCode.NONE
            for version in (2, 3):
                # Null topics: every partition the group has an offset for.
                answer = await gw.call(
                    ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": None}
                )
                assert _fetched(answer) == {k: v for k, v in expected.items() if v[0] >= 0}

    run(scenario())


def test_offsets_committed_at_later_versions_are_fetched_back_one_group_or_several_at_once() -> (
    None
):
    async def scenario() -> None:
        async with gateway() as gw:
            groups = [group_on(OWNED_PARTITION, "batch"), group_on(NOT_OWNED_PARTITION, "batch")]
            for version in range(4, RECOMMENDED_VERSIONS[ApiKey.OFFSET_COMMIT][1] + 1):
                for n, group in enumerate(groups):
                    body = _commit_body(group, {version: (10 * version + n, f"v{version}")})
                    answer = await gw.call(ApiKey.OFFSET_COMMIT, version, body)
                    assert _fetched_codes(answer) == [0], version
            written = range(4, RECOMMENDED_VERSIONS[ApiKey.OFFSET_COMMIT][1] + 1)
            expected = [
                {("t", v): (10 * v + n, f"v{v}", 0) for v in written} for n in range(len(groups))
            ]
            wanted = [{"name": "t", "partition_indexes": list(written)}]
            for version in range(4, 8):
                for group, offsets in zip(groups, expected, strict=True):
                    body = {"group_id": group, "topics": wanted, "require_stable": True}
                    answer = await gw.call(ApiKey.OFFSET_FETCH, version, body)
                    assert (answer["error_code"], _fetched(answer)) == (0, offsets), version
            # v8+ fetch several groups in one request, each answered on its own (null topics:
            # every committed partition).
            for version in (8, 9):
                body = {
                    "groups": [
                        {
                            "group_id": groups[0],
                            "member_id": None,
                            "member_epoch": -1,
                            "topics": wanted,
                        },
                        {
                            "group_id": groups[1],
                            "member_id": None,
                            "member_epoch": -1,
                            "topics": None,
                        },
                        {"group_id": "", "member_id": None, "member_epoch": -1, "topics": None},
                    ],
                    "require_stable": False,
                }
                answer = await gw.call(ApiKey.OFFSET_FETCH, version, body)
                got = answer["groups"]
                assert [g["group_id"] for g in got] == [groups[0], groups[1], ""]
                assert [g["error_code"] for g in got[:2]] == [0, 0]
                assert [_fetched(g) for g in got[:2]] == expected
                assert _fetched(got[2]) == {}

    run(scenario())


def test_requests_follow_a_moved_group_to_its_new_coordinator_unseen_by_the_client() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            group = group_on(OWNED_PARTITION, "moving")
            await gw.call(ApiKey.OFFSET_COMMIT, 3, _commit_body(group, {0: (11, "m")}))
            # The hand-over: OWNER gives the partition up, OTHER loads it from the shared log.
            gw.coordinators[OWNER].manager.unload_partition(OWNED_PARTITION)
            gw.move(OWNED_PARTITION, OTHER, epoch=2)
            await gw.coordinators[OTHER].manager.load_partition(OWNED_PARTITION, 2)
            wanted = {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]}
            answer = await gw.call(ApiKey.OFFSET_FETCH, 3, wanted)
            assert (answer["error_code"], _fetched(answer)) == (0, {("t", 0): (11, "m", 0)})
            found = await gw.call(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
            assert found["node_id"] == GATEWAYS[OTHER % len(GATEWAYS)]  # no storage nodes

    run(scenario())


def test_an_unreachable_owner_is_answered_not_coordinator_in_each_versions_shape() -> None:
    async def scenario() -> None:
        async with gateway() as gw:
            group = group_on(OWNED_PARTITION, "orphan")
            await gw.coordinators[OWNER].server.stop(None)
            wanted = {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]}
            answer = await gw.call(ApiKey.OFFSET_FETCH, 1, wanted)
            # v1 has no group-level error code: the partitions carry it.
            assert _fetched(answer) == {("t", 0): (-1, "", ErrorCode.NOT_COORDINATOR)}
            answer = await gw.call(ApiKey.OFFSET_FETCH, 2, wanted)
            assert (answer["error_code"], answer["topics"]) == (ErrorCode.NOT_COORDINATOR, [])
            answer = await gw.call(ApiKey.OFFSET_COMMIT, 2, _commit_body(group, {0: (1, None)}))
            assert _fetched_codes(answer) == [ErrorCode.NOT_COORDINATOR]
            answer = await gw.call(ApiKey.JOIN_GROUP, 5, _join_body(group))
            assert (answer["error_code"], answer["generation_id"]) == (
                ErrorCode.NOT_COORDINATOR,
                -1,
            )
            beat = {"group_id": group, "generation_id": 1, "member_id": "m"}
            for api in (ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
                answer = await gw.call(api, 1, beat)
                assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
            # Groups of the reachable coordinator are unaffected.
            elsewhere = group_on(NOT_OWNED_PARTITION, "elsewhere")
            answer = await gw.call(ApiKey.OFFSET_FETCH, 2, wanted | {"group_id": elsewhere})
            assert answer["error_code"] == ErrorCode.NONE

    run(scenario())


def _fetched_codes(response: Message) -> list[int]:
    return [p["error_code"] for t in response["topics"] for p in t["partitions"]]


def test_join_waits_for_the_group_to_rejoin_beyond_the_request_timeout() -> None:
    request_timeout_ms = 300
    rejoin_after_s = 1.0

    async def scenario() -> None:
        async with gateway(request_timeout_ms=request_timeout_ms) as gw:
            group = group_on(OWNED_PARTITION, "slow-rejoin")
            first = await _join(gw, 5, group)
            second_client = await RawClient.connect(gw.port)
            try:
                required = await gw.call(ApiKey.JOIN_GROUP, 5, _join_body(group), second_client)
                assert required["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
                # Blocks until the first member rejoins, well after request.timeout.ms.
                second = asyncio.create_task(
                    gw.call(
                        ApiKey.JOIN_GROUP,
                        5,
                        _join_body(group, required["member_id"]),
                        second_client,
                    )
                )
                await asyncio.sleep(rejoin_after_s)
                assert not second.done()
                rejoined = await gw.call(
                    ApiKey.JOIN_GROUP, 5, _join_body(group, first["member_id"])
                )
                assert rejoined["error_code"] == ErrorCode.NONE
                assert (await second)["error_code"] == ErrorCode.NONE
                assert len(rejoined["members"]) == 2
            finally:
                await second_client.close()

    run(scenario())


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("version", range(5))
def test_init_producer_id_without_a_reachable_storage_node_is_a_retriable_error(
    version: int,
) -> None:
    body = {"transactional_id": None, "transaction_timeout_ms": 60_000}

    async def scenario() -> None:
        for storage_ports in ((), (_closed_port(), _closed_port())):
            async with gateway(storage_ports=storage_ports) as gw:
                answer = await gw.call(ApiKey.INIT_PRODUCER_ID, version, body)
                assert answer == {
                    "throttle_time_ms": 0,
                    "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "producer_id": -1,
                    "producer_epoch": -1,
                }
        assert ErrorCode.COORDINATOR_NOT_AVAILABLE.retriable

    run(scenario())
