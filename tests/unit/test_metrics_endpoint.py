"""/metrics over HTTP (brook/metrics_endpoint.py): the registry's text for GET and HEAD of
/metrics, an error status for anything else, bounded request heads, and a stop that closes
the connections it holds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from prometheus_client import CollectorRegistry, Counter

from brook.config import Listener
from brook.metrics_endpoint import REQUEST_HEAD_BYTES_MAX, MetricsEndpoint
from brook.ports import allocate_free_ports

STOP_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 5.0


@asynccontextmanager
async def _endpoint() -> AsyncIterator[tuple[MetricsEndpoint, int]]:
    registry = CollectorRegistry()
    Counter("brook_test_things", "Things counted", registry=registry).inc(3)
    port = allocate_free_ports(1)[0]
    endpoint = MetricsEndpoint(registry, Listener("METRICS", "127.0.0.1", port))
    await endpoint.start()
    try:
        yield endpoint, port
    finally:
        await endpoint.stop(STOP_TIMEOUT_S)


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), READ_TIMEOUT_S)
    finally:
        writer.close()


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_get_metrics_answers_the_registry_in_the_text_format() -> None:
    async def test() -> None:
        async with _endpoint() as (_, port):
            answer = await _exchange(port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"Content-Type: text/plain; version=0.0.4" in head
            assert b"brook_test_things_total 3.0" in body
            assert f"Content-Length: {len(body)}".encode() in head
            head_only = await _exchange(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
            assert head_only.startswith(b"HTTP/1.1 200 OK\r\n")
            assert head_only.endswith(b"\r\n\r\n")

    _run(test)


def test_bad_requests_get_an_error_status_and_the_endpoint_keeps_serving() -> None:
    async def test() -> None:
        async with _endpoint() as (_, port):
            for request, status in (
                (b"GET / HTTP/1.1\r\n\r\n", b"404"),
                (b"GET /metricsx HTTP/1.1\r\n\r\n", b"404"),
                (b"DELETE /metrics HTTP/1.1\r\n\r\n", b"405"),
                (b"GET /metrics\r\n\r\n", b"400"),
                (b"\x16\x03\x01 binary junk\r\n\r\n", b"400"),
                (
                    b"GET /metrics HTTP/1.1\r\nX: " + b"y" * REQUEST_HEAD_BYTES_MAX + b"\r\n\r\n",
                    b"431",
                ),
            ):
                answer = await _exchange(port, request)
                assert answer.startswith(b"HTTP/1.1 " + status + b" "), (request[:40], answer)
            # A client that leaves half-way is just gone.
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /met")
            writer.close()
            answer = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 ")

    _run(test)


def test_stop_closes_the_connections_it_is_serving() -> None:
    async def test() -> None:
        async with _endpoint() as (endpoint, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metrics HTTP/1.1\r\n")  # the head never ends
            await writer.drain()
            # Connections are served in the order they arrive: once a later one is answered,
            # this one is being served (no sleep that hopes it has been).
            answer = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 ")
            loop = asyncio.get_running_loop()
            started = loop.time()
            await endpoint.stop(STOP_TIMEOUT_S)
            assert loop.time() - started < STOP_TIMEOUT_S
            assert await asyncio.wait_for(reader.read(), READ_TIMEOUT_S) == b""
            writer.close()
            try:
                await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                pass
            else:
                raise AssertionError("the endpoint still accepts connections after stop")

    _run(test)


def test_stop_with_open_connections_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    """Idle connections and one with a scrape half sent: stop ends each one without asyncio
    logging an exception for its task (cancelling them did, once per connection)."""
    caplog.set_level(logging.WARNING, logger="asyncio")

    async def test() -> None:
        async with _endpoint() as (endpoint, port):
            clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            clients[0][1].write(b"GET /metr")
            await clients[0][1].drain()
            # Connections are served in the order they arrive: once a later one is answered,
            # the earlier ones are being served.
            answer = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 ")
            loop = asyncio.get_running_loop()
            started = loop.time()
            await endpoint.stop(STOP_TIMEOUT_S)
            assert loop.time() - started < STOP_TIMEOUT_S
            for reader, writer in clients:
                assert await asyncio.wait_for(reader.read(), READ_TIMEOUT_S) == b""
                writer.close()

    _run(test)
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
