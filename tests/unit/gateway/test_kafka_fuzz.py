"""Random and truncated frames thrown at the server for a bounded time: it stays up and keeps
answering a well-behaved client on another connection."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from brook_gateway.protocol.frames import decode_response, encode_request
from brook_gateway.protocol.kafka_messages import ApiKey
from gateway_support import running_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SOCKET_TIMEOUT_S = 5.0
FUZZ_EXAMPLES = 400
VALID = encode_request(
    ApiKey.API_VERSIONS,
    3,
    1,
    "fuzz",
    {
        "client_software_name": "fuzz",
        "client_software_version": "1",
    },
)


@pytest.fixture(scope="module")
def server_port() -> Iterator[int]:
    """A server on its own event loop thread, for synchronous socket clients."""
    ready = threading.Event()
    stop: list[asyncio.Event] = []
    port: list[int] = []

    async def serve() -> None:
        async with running_server(request_bytes_max=4096, idle_timeout_ms=2000) as server:
            stop.append(asyncio.Event())
            port.append(server.port)
            ready.set()
            await stop[0].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(SOCKET_TIMEOUT_S)
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(SOCKET_TIMEOUT_S)
        loop.close()


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            assert chunk, "server closed a well-behaved connection"
            data += chunk
        return data

    return exactly(int.from_bytes(exactly(4), "big"))


def _frames() -> st.SearchStrategy[bytes]:
    header = st.sampled_from([k.value for k in ApiKey]).map(lambda k: k.to_bytes(2, "big"))
    random_request = st.tuples(
        header, st.integers(0, 12).map(lambda v: v.to_bytes(2, "big")), st.binary(max_size=64)
    ).map(lambda parts: b"".join(parts))
    framed = (st.binary(max_size=80) | random_request).map(
        lambda payload: len(payload).to_bytes(4, "big") + payload
    )
    truncated = st.integers(0, len(VALID) - 1).map(lambda cut: VALID[:cut])
    mutated = st.tuples(st.integers(4, len(VALID) - 1), st.integers(0, 255)).map(
        lambda m: VALID[: m[0]] + bytes([m[1]]) + VALID[m[0] + 1 :]
    )
    return framed | truncated | mutated | st.binary(max_size=100)


def test_server_survives_random_and_truncated_frames(server_port: int) -> None:
    good = socket.create_connection(("127.0.0.1", server_port), timeout=SOCKET_TIMEOUT_S)

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(_frames())
    def throw(frame: bytes) -> None:
        with socket.create_connection(("127.0.0.1", server_port), timeout=SOCKET_TIMEOUT_S) as s:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            # Whatever the server makes of it, it answers or closes; it never hangs.
            while s.recv(65536):
                pass
        good.sendall(VALID)
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, 3, _read_frame(good))
        assert (correlation_id, body["error_code"]) == (1, 0)

    try:
        throw()
    finally:
        good.close()
