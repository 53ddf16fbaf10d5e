"""The gateway's client quotas (the engine's arithmetic and precedence are
tests/unit/security/test_quota_engine.py's): what each request is measured by, and enforcement
by a real server: throttle_time_ms in the response and the connection muted for that long,
other clients untouched."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import time
from collections.abc import Coroutine
from typing import Any

import pytest
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import NO_AUTHORIZATION
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import (
    RequestHeader,
    decode_response,
    encode_request,
    encode_response,
)
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.quotas import ClientQuotas
from brook_gateway.server import KafkaServer
from gateway_support import (
    LIMITS,
    LOOPBACK_LISTENERS,
    READ_TIMEOUT_S,
    RawClient,
    dispatcher_with_api_versions,
)
from test_kafka_server import _heartbeat, _heartbeat_handler

from brook.metadata.image import QuotaEntity
from brook.security.principal import user

MB = 1_000_000


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


# ---------------------------------------------------------------- arithmetic


def test_a_greedy_client_is_held_to_its_quota_over_time() -> None:
    """A client that sends 100 KB whenever it is not throttled, through ClientQuotas with a
    simulated clock: over a minute it gets its quota, within 5 % (2 samples: the burst a new
    rate allows is one window's worth)."""
    now = [0.0]
    entity: QuotaEntity = (("client-id", "greedy"),)
    quotas = ClientQuotas(lambda: {entity: {"producer_byte_rate": 1 * MB}}, 2, 1, lambda: now[0])
    context = _context(ApiKey.PRODUCE, "greedy")
    sent = 0
    while now[0] < 60.0:
        usage = quotas.usage(context)
        assert usage is not None
        _, throttle_ms = usage.answer(100_000, None, bytearray)
        sent += 100_000
        now[0] += 0.001 + throttle_ms / 1000
    assert sent / now[0] == pytest.approx(1 * MB, rel=0.05)


def _context(api_key: int, client_id: str | None, name: str = "ANONYMOUS") -> RequestContext:
    return RequestContext(RequestHeader(api_key, 7, 1, client_id), "127.0.0.1:1", None, user(name))


def test_a_default_quota_is_measured_per_client_and_a_users_across_its_clients() -> None:
    now = [0.0]
    quotas = ClientQuotas(
        lambda: {
            (("client-id", None),): {"producer_byte_rate": 1 * MB},
            (("user", "alice"),): {"producer_byte_rate": 1 * MB},
        },
        11,
        1,
        lambda: now[0],
    )

    def throttle(client_id: str, name: str = "ANONYMOUS") -> int:
        usage = quotas.usage(_context(ApiKey.PRODUCE, client_id, name))
        assert usage is not None
        return usage.answer(8 * MB, None, bytearray)[1]

    # Each client id has its own default quota: 8 MB each is within 10 s x 1 MB/s.
    assert throttle("a") == 0 and throttle("b") == 0
    # Alice's two client ids share hers: 16 MB is over.
    assert throttle("a", "alice") == 0
    assert throttle("b", "alice") > 0


def test_no_quota_means_nothing_is_measured() -> None:
    quotas = ClientQuotas(lambda: {(("user", "bob"),): {"producer_byte_rate": 1.0}}, 11, 1)
    assert quotas.usage(_context(ApiKey.PRODUCE, "loader")) is None
    assert quotas.usage(_context(ApiKey.METADATA, "loader")) is None
    assert ClientQuotas(dict, 11, 1).usage(_context(ApiKey.PRODUCE, "x")) is None


# ---------------------------------------------------------------- enforcement by the server


def _produce_handler() -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        return {"responses": [], "throttle_time_ms": 0}

    return ApiHandler(ApiKey.PRODUCE, handle, versions=(3, 7), authorization=NO_AUTHORIZATION)


def _produce(size: int) -> Message:
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * size}]}],
    }


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str):
        self.reader, self.writer, self.name = reader, writer, name
        self.correlation_ids = itertools.count()

    async def produce(self, size: int) -> tuple[Message, float]:
        """Sends a Produce; its answer and when it came (loop time)."""
        self.writer.write(
            encode_request(ApiKey.PRODUCE, 7, next(self.correlation_ids), self.name, _produce(size))
        )
        await self.writer.drain()
        async with asyncio.timeout(READ_TIMEOUT_S):
            length = int.from_bytes(await self.reader.readexactly(4), "big")
            frame = await self.reader.readexactly(length)
        return decode_response(ApiKey.PRODUCE, 7, frame)[1], asyncio.get_running_loop().time()


def test_a_client_over_its_quota_gets_throttle_time_and_is_not_read_for_that_long() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        dispatcher.register(_produce_handler())
        # 2 windows of 1 s: 40 KB/s over at least 1 s allows 40 KB before throttling, and a
        # throttle lasts 1 s at most.
        quotas = ClientQuotas(
            lambda: {(("client-id", "limited"),): {"producer_byte_rate": 40_000.0}}, 2, 1
        )
        limits = dataclasses.replace(LIMITS, request_bytes_max=1 << 20)
        server = KafkaServer(dispatcher, limits, LOOPBACK_LISTENERS, quotas=quotas)
        await server.start()
        try:
            limited = _Client(*await asyncio.open_connection("127.0.0.1", server.port), "limited")
            other = _Client(*await asyncio.open_connection("127.0.0.1", server.port), "other")

            first, _ = await limited.produce(20_000)
            assert first["throttle_time_ms"] == 0
            sent_at = asyncio.get_running_loop().time()
            throttled, _ = await limited.produce(100_000)
            # 120 KB over at most 2 s against 40 KB/s: more than the bound of one window.
            assert throttled["throttle_time_ms"] == 1000
            # Another client is served meanwhile, well before the throttle ends.
            answer, answered_at = await other.produce(40_000)
            assert answer["throttle_time_ms"] == 0
            assert answered_at - sent_at < 0.5
            # The throttled connection is not read until its throttle time has passed.
            _, next_at = await limited.produce(10)
            assert next_at - sent_at >= 1.0 - 0.005
        finally:
            await server.stop()

    run(scenario())


def _fetch_response(records: bytes) -> Message:
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 10,
                        "last_stable_offset": 10,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": records,
                    }
                ],
            }
        ],
    }


def test_a_throttled_fetch_is_answered_without_data_which_is_not_counted() -> None:
    now = [0.0]
    quotas = ClientQuotas(
        lambda: {(("client-id", "reader"),): {"consumer_byte_rate": 100_000.0}},
        2,
        1,
        lambda: now[0],
    )
    encode = functools.partial(encode_response, ApiKey.FETCH, 11, 1)

    def fetch(size: int) -> tuple[Message, int]:
        usage = quotas.usage(_context(ApiKey.FETCH, "reader"))
        assert usage is not None
        frame, throttle_ms = usage.answer(100, _fetch_response(b"r" * size), encode)
        assert frame is not None
        return decode_response(ApiKey.FETCH, 11, bytes(frame[4:]))[1], throttle_ms

    answer, throttle_ms = fetch(60_000)
    assert throttle_ms == 0 and answer["responses"][0]["partitions"][0]["records"]
    answer, throttle_ms = fetch(60_000)
    assert throttle_ms > 0
    assert answer["throttle_time_ms"] == throttle_ms and answer["responses"] == []
    # The data not sent was not counted: 60 KB more fits the quota again.
    assert fetch(30_000)[1] == 0


def test_request_time_counts_only_the_handlers_time_on_the_event_loop() -> None:
    async def handling() -> str:
        busy_until_s = time.perf_counter() + 0.05
        while time.perf_counter() < busy_until_s:  # the gateway's own work, on its loop
            pass
        await asyncio.sleep(0.2)  # a wait for another service: not the gateway's work
        return "done"

    async def scenario() -> None:
        quotas = ClientQuotas(lambda: {(("client-id", None),): {"request_percentage": 5.0}}, 2, 1)
        usage = quotas.usage(_context(ApiKey.METADATA, "a"))
        assert usage is not None
        assert await usage.timed(handling()) == "done"
        assert 0.05 <= usage.busy_s < 0.15
        # 5 percent-seconds over 1 + 0.25 s (a new rate counts one whole window at least)
        # against 5 %: not throttled (with the wait it would be 25 over 1.25).
        assert usage.answer(100, None, bytearray)[1] == 0
        usage = quotas.usage(_context(ApiKey.METADATA, "a"))
        assert usage is not None
        await usage.timed(handling())
        await usage.timed(handling())
        # 15 percent-seconds over 1.75 s against 5 %.
        assert usage.answer(100, None, bytearray)[1] > 0
        # ApiVersions, answered before SASL authentication, is not charged.
        assert quotas.usage(_context(ApiKey.API_VERSIONS, "a")) is None

    run(scenario())


def test_once_a_quota_applies_the_connections_requests_are_handled_one_at_a_time() -> None:
    """As Kafka reads a channel: requests pipelined behind a throttled one would otherwise
    pass by its throttle."""

    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, peak = _heartbeat_handler({"slow": 0.05})
        dispatcher.register(handler)
        quotas = ClientQuotas(lambda: {(("client-id", None),): {"request_percentage": 1e6}}, 2, 1)
        server = KafkaServer(dispatcher, LIMITS, LOOPBACK_LISTENERS, quotas=quotas)
        await server.start()
        try:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.HEARTBEAT, 1, 0, _heartbeat("slow"))
            await client.receive(ApiKey.HEARTBEAT, 1)
            for correlation_id in range(1, 4):
                await client.send(ApiKey.HEARTBEAT, 1, correlation_id, _heartbeat("slow"))
            answered = [(await client.receive(ApiKey.HEARTBEAT, 1))[0] for _ in range(3)]
            assert answered == [1, 2, 3]
            assert peak[0] == 1
            await client.close()
        finally:
            await server.stop()

    run(scenario())
