"""brook.rpc.channels: the one options builder and the pools every process opens channels with."""

from __future__ import annotations

import asyncio
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from brook.rpc.channels import (
    ENVELOPE_BYTES_MAX,
    ChannelPool,
    ChannelPoolClosedError,
    SyncChannelPool,
    channel_options,
    sync_channel,
)

SCENARIO_TIMEOUT_S = 30.0


def test_options_bound_messages_and_reconnects_and_name_the_client() -> None:
    options = dict(
        channel_options(
            client_id="app-1",
            send_bytes_max=1000,
            receive_bytes_max=-1,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=20,
        )
    )

    assert options["grpc.max_send_message_length"] == 1000 + ENVELOPE_BYTES_MAX
    assert options["grpc.max_receive_message_length"] == -1
    assert options["grpc.initial_reconnect_backoff_ms"] == 50
    # A maximum below the base would let gRPC back off less than asked.
    assert options["grpc.max_reconnect_backoff_ms"] == 50
    assert options["grpc.keepalive_permit_without_calls"] == 0
    assert str(options["grpc.primary_user_agent"]).endswith("(app-1)")
    assert "grpc.max_send_message_length" not in dict(channel_options())


def test_a_negative_back_off_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        channel_options(reconnect_backoff_ms=-1)


def test_a_pool_reuses_one_channel_per_address_and_refuses_after_close() -> None:
    async def scenario() -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        pool = ChannelPool(channel_options())
        try:
            address = f"127.0.0.1:{port}"
            assert pool.channel(address) is pool.channel(address)
            assert pool.storage(address) is pool.storage(address)
            stub: Any = health_pb2_grpc.HealthStub(pool.channel(address))
            answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await pool.close()
            await server.stop(None)
        with pytest.raises(ChannelPoolClosedError):
            pool.channel(address)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))


def test_a_blocking_pool_refuses_after_close() -> None:
    pool = SyncChannelPool()
    with pool:
        assert pool.channel("127.0.0.1:1") is pool.channel("127.0.0.1:1")
    with pytest.raises(ChannelPoolClosedError):
        pool.channel("127.0.0.1:1")


def test_an_empty_option_list_is_used_as_given_not_replaced_by_the_defaults() -> None:
    agents: list[str] = []

    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        agents.append(dict(context.invocation_metadata()).get("user-agent", ""))
        return request

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "test.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
            ),
        )
    )
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        no_options: list[tuple[str, Any]] = []
        for options in (None, no_options):
            with SyncChannelPool(options) as pool:
                pool.channel(address).unary_unary("/test.Echo/Echo")(b"", timeout=5)
            with sync_channel(address, options) as channel:
                channel.unary_unary("/test.Echo/Echo")(b"", timeout=5)
    finally:
        server.stop(None)

    # channel_options() names Brook in the user agent; gRPC's own defaults do not.
    assert ["brook-python/" in agent for agent in agents] == [True, True, False, False]
