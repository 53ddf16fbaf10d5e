"""The gateway's per-broker Kafka ports: a real KafkaServer on loopback whose listeners follow
real metadata records (brook_gateway.node_listeners), and what a connection to one knows."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Coroutine
from typing import Any

import pytest
from brook_gateway import node_listeners
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import NO_AUTHORIZATION
from brook_gateway.cluster_view import KAFKA_NODES_LISTENER, ClusterImage
from brook_gateway.node_listeners import NodeListeners
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from gateway_support import RawClient, dispatcher_with_api_versions, running_server

from brook.ports import allocate_free_port_block
from brook.v1 import common_pb2, metadata_pb2

TIMEOUT_S = 10.0
GATEWAY = 3001
OTHER_GATEWAY = 3002
# Storage node ids 1..IDS_MAX get ports base + id.
IDS_MAX = 6


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def _gateway(node_id: int, base: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=common_pb2.NODE_ROLE_GATEWAY,
            endpoints=[
                common_pb2.Endpoint(listener="PLAINTEXT", host="127.0.0.1", port=9092),
                common_pb2.Endpoint(listener=KAFKA_NODES_LISTENER, host="127.0.0.1", port=base),
            ],
        )
    )


def _storage_node(node_id: int, fenced: bool = False) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=common_pb2.NODE_ROLE_STORAGE_NODE,
            endpoints=[common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=1)],
            fenced=fenced,
        )
    )


def _base() -> int:
    """A kafka.node.port.base whose ports for ids 1..IDS_MAX are free now."""
    return allocate_free_port_block(IDS_MAX) - 1


def _broker_id_handler() -> ApiHandler:
    """ListGroups answering one group named for the broker the connection was made to."""

    async def handle(request: Message, context: RequestContext) -> Message:
        del request
        group = f"broker-{context.broker_id}"
        return {"error_code": 0, "groups": [{"group_id": group, "protocol_type": ""}]}

    return ApiHandler(ApiKey.LIST_GROUPS, handle, versions=(0, 0), authorization=NO_AUTHORIZATION)


async def _asked_broker(port: int) -> str:
    client = await RawClient.connect(port)
    try:
        await client.send(ApiKey.LIST_GROUPS, 0, 1, {})
        _, answer = await client.receive(ApiKey.LIST_GROUPS, 0)
    finally:
        await client.close()
    [group] = answer["groups"]
    name: str = group["group_id"]
    return name


async def _refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


def test_listeners_open_and_close_as_presented_storage_nodes_come_and_go() -> None:
    async def scenario() -> None:
        base = _base()
        dispatcher = dispatcher_with_api_versions()
        dispatcher.register(_broker_id_handler())
        async with running_server(dispatcher) as server:
            image = ClusterImage()
            listeners = NodeListeners(server, image, GATEWAY, base)

            async def apply(*records: metadata_pb2.MetadataRecord) -> None:
                image.apply(False, image.offset + 1, records)
                await listeners.sync()

            await apply(_gateway(GATEWAY, base), _storage_node(1), _storage_node(2))
            assert server.node_ports == {1: base + 1, 2: base + 2}
            # A connection knows the broker whose port took it; the bootstrap port none.
            assert await _asked_broker(base + 1) == "broker-1"
            assert await _asked_broker(base + 2) == "broker-2"
            assert await _asked_broker(server.port) == "broker-None"

            # A second gateway takes the odd ids (gateways[id % 2]); a fenced node goes.
            await apply(_gateway(OTHER_GATEWAY, base + 100), _storage_node(3))
            assert server.node_ports == {2: base + 2}
            assert await _refused(base + 1) and await _refused(base + 3)
            await apply(_storage_node(2, fenced=True), _storage_node(4))
            assert server.node_ports == {4: base + 4}
            assert await _refused(base + 2)

            # Back to one gateway: it presents every live node again.
            await apply(
                metadata_pb2.MetadataRecord(
                    remove_broker=metadata_pb2.RemoveBrokerRecord(node_id=OTHER_GATEWAY)
                ),
                _storage_node(2),
            )
            assert server.node_ports == {n: base + n for n in (1, 2, 3, 4)}
            assert await _asked_broker(base + 2) == "broker-2"
        # Stopping the server closes every listener.
        for n in (1, 2, 3, 4):
            assert await _refused(base + n)

    run(scenario())


def test_a_port_that_cannot_be_bound_is_logged_and_tried_again_at_the_next_update(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        base = _base()
        async with running_server() as server:
            image = ClusterImage()
            listeners = NodeListeners(server, image, GATEWAY, base)
            with socket.socket() as squatter:
                squatter.bind(("127.0.0.1", base + 2))
                squatter.listen()
                image.apply(True, 1, [_gateway(GATEWAY, base), _storage_node(1), _storage_node(2)])
                with caplog.at_level(logging.ERROR, "brook_gateway.node_listeners"):
                    await listeners.sync()
                assert server.node_ports == {1: base + 1}
                [logged] = [r for r in caplog.records if r.levelno == logging.ERROR]
                assert getattr(logged, "broker_id", None) == 2
            # The port is free again; the next metadata update opens it.
            image.apply(False, 2, [_storage_node(3)])
            await listeners.sync()
            assert server.node_ports == {n: base + n for n in (1, 2, 3)}

    run(scenario())


def test_a_port_that_could_not_be_bound_is_tried_again_without_a_metadata_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A quiet cluster sends no metadata updates: the retry timer must open the port.
    monkeypatch.setattr(node_listeners, "BIND_RETRY_S", 0.05)

    async def scenario() -> None:
        base = _base()
        async with running_server() as server:
            image = ClusterImage()
            listeners = NodeListeners(server, image, GATEWAY, base)
            retries = asyncio.create_task(listeners.retry_failed_binds())
            try:
                with socket.socket() as squatter:
                    squatter.bind(("127.0.0.1", base + 1))
                    squatter.listen()
                    image.apply(True, 1, [_gateway(GATEWAY, base), _storage_node(1)])
                    await listeners.sync()
                    assert server.node_ports == {}
                loop = asyncio.get_running_loop()
                deadline = loop.time() + TIMEOUT_S / 2
                while server.node_ports != {1: base + 1}:
                    assert loop.time() < deadline, "the freed port was never bound"
                    await asyncio.sleep(0.02)
            finally:
                retries.cancel()

    run(scenario())


def test_connections_on_every_port_share_the_connection_limit() -> None:
    async def scenario() -> None:
        base = _base()
        async with running_server(connections_max=2) as server:
            image = ClusterImage()
            image.apply(True, 1, [_gateway(GATEWAY, base), _storage_node(1), _storage_node(2)])
            await NodeListeners(server, image, GATEWAY, base).sync()
            clients = []
            try:
                # One on the bootstrap port, one on a broker's, each answered (so counted)
                # before the next connects.
                for port in (server.port, base + 1):
                    client = await RawClient.connect(port)
                    clients.append(client)
                    await client.send(ApiKey.API_VERSIONS, 0, 1, {})
                    await client.receive(ApiKey.API_VERSIONS, 0)
                third = await RawClient.connect(base + 2)
                clients.append(third)
                assert await third.closed_by_server()
                assert server.connection_count == 2
            finally:
                for client in clients:
                    await client.close()

    run(scenario())
