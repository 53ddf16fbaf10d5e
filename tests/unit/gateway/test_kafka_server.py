"""The Kafka-protocol server against raw sockets and a real client (kafka-python)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import NO_AUTHORIZATION
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.server import _Connection
from gateway_support import RawClient, dispatcher_with_api_versions, running_server
from kafka.net.compat import KafkaNetClient

from brook.errors import ErrorCode

API_VERSIONS_ONLY = [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 3}]
SOFTWARE = {"client_software_name": "brook-test", "client_software_version": "1.0"}


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_api_versions_advertises_only_implemented_apis_at_every_version() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            for version in range(4):
                await client.send(ApiKey.API_VERSIONS, version, 100 + version, SOFTWARE)
                correlation_id, body = await client.receive(ApiKey.API_VERSIONS, version)
                assert correlation_id == 100 + version
                assert body["error_code"] == ErrorCode.NONE
                assert body["api_keys"] == API_VERSIONS_ONLY
            await client.close()

    run(scenario())


def test_too_new_api_versions_gets_the_v0_fallback_with_unsupported_version() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.API_VERSIONS, 4, 7, SOFTWARE)
            # Header v0 and a v0 body, whatever version was asked.
            correlation_id, body = await client.receive(ApiKey.API_VERSIONS, 0)
            assert correlation_id == 7
            assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
            assert body["api_keys"] == API_VERSIONS_ONLY
            # The connection stays usable for the retry.
            await client.send(ApiKey.API_VERSIONS, 3, 8, SOFTWARE)
            assert (await client.receive(ApiKey.API_VERSIONS, 3))[1]["error_code"] == 0
            await client.close()

    run(scenario())


def test_api_versions_rejects_invalid_client_software_name() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            bad = {"client_software_name": "-bad name", "client_software_version": "1"}
            await client.send(ApiKey.API_VERSIONS, 3, 1, bad)
            _, body = await client.receive(ApiKey.API_VERSIONS, 3)
            assert body["error_code"] == ErrorCode.INVALID_REQUEST
            await client.close()

    run(scenario())


def test_kafka_python_negotiates_api_versions() -> None:
    async def scenario() -> None:
        async with running_server() as server:

            def negotiate() -> dict[int, tuple[int, int]]:
                client = KafkaNetClient(bootstrap_servers=f"127.0.0.1:{server.port}")
                try:
                    manager = client._manager
                    node = manager.cluster.bootstrap_brokers()[0]

                    async def connect() -> dict[int, tuple[int, int]]:
                        connection = manager.get_connection(node.node_id, timeout_ms=5000)
                        await connection
                        versions: dict[int, tuple[int, int]] = (
                            connection.broker_version_data.api_versions
                        )
                        return versions

                    result: dict[int, tuple[int, int]] = client._net.run(connect)
                    return result
                finally:
                    client.close()

            # kafka-python first asks for v4 and retries with v3 after our fallback answer.
            assert await asyncio.to_thread(negotiate) == {ApiKey.API_VERSIONS: (0, 3)}

    run(scenario())


def _heartbeat_handler(
    delays_s: dict[str, float], versions: tuple[int, int] = (0, 1)
) -> tuple[ApiHandler, list[int]]:
    """Heartbeat that sleeps per group id and records its peak concurrency."""
    running = [0]
    peak = [0]

    async def handle(request: Message, context: RequestContext) -> Message:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        try:
            await asyncio.sleep(delays_s.get(request["group_id"], 0.0))
        finally:
            running[0] -= 1
        return {"error_code": 0, "throttle_time_ms": 0}

    return ApiHandler(
        ApiKey.HEARTBEAT, handle, versions=versions, authorization=NO_AUTHORIZATION
    ), peak


def _heartbeat(group_id: str) -> Message:
    return {"group_id": group_id, "generation_id": 1, "member_id": "m"}


def test_pipelined_requests_are_answered_in_request_order() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, peak = _heartbeat_handler({"slow": 0.3, "medium": 0.1})
        dispatcher.register(handler)
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            for correlation_id, group in enumerate(("slow", "medium", "fast")):
                await client.send(ApiKey.HEARTBEAT, 1, correlation_id, _heartbeat(group))
            answered = [(await client.receive(ApiKey.HEARTBEAT, 1))[0] for _ in range(3)]
            assert answered == [0, 1, 2]
            assert peak[0] == 3, "pipelined requests were handled one at a time"
            await client.close()

    run(scenario())


def test_in_flight_requests_per_connection_are_bounded() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, peak = _heartbeat_handler({"slow": 0.05})
        dispatcher.register(handler)
        async with running_server(dispatcher, in_flight_per_connection_max=2) as server:
            client = await RawClient.connect(server.port)
            for correlation_id in range(6):
                await client.send(ApiKey.HEARTBEAT, 1, correlation_id, _heartbeat("slow"))
            answered = [(await client.receive(ApiKey.HEARTBEAT, 1))[0] for _ in range(6)]
            assert answered == list(range(6))
            assert peak[0] == 2
            await client.close()

    run(scenario())


def test_advertised_but_unserved_version_is_answered_with_unsupported_version() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, _ = _heartbeat_handler({}, versions=(1, 1))
        dispatcher.register(handler)
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.HEARTBEAT, 0, 5, _heartbeat("g"))
            correlation_id, body = await client.receive(ApiKey.HEARTBEAT, 0)
            assert (correlation_id, body["error_code"]) == (5, ErrorCode.UNSUPPORTED_VERSION)
            await client.close()

    run(scenario())


def test_unregistered_api_with_top_level_error_is_answered_unsupported_version() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.HEARTBEAT, 1, 9, _heartbeat("g"))
            correlation_id, body = await client.receive(ApiKey.HEARTBEAT, 1)
            assert (correlation_id, body["error_code"]) == (9, ErrorCode.UNSUPPORTED_VERSION)
            await client.close()

    run(scenario())


def test_slow_handler_is_answered_with_request_timed_out() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, _ = _heartbeat_handler({"stuck": 10.0})
        dispatcher.register(handler)
        async with running_server(dispatcher, request_timeout_ms=100) as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.HEARTBEAT, 1, 3, _heartbeat("stuck"))
            _, body = await client.receive(ApiKey.HEARTBEAT, 1)
            assert body["error_code"] == ErrorCode.REQUEST_TIMED_OUT
            await client.close()

    run(scenario())


def test_timed_out_and_prompt_requests_on_one_connection_each_get_their_own_answer() -> None:
    """A request past request.timeout.ms is answered REQUEST_TIMED_OUT, in its turn; one whose
    handler turns the cancellation into an answer of its own sends that; the requests around
    them are answered normally."""

    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()

        async def handle(request: Message, context: RequestContext) -> Message:
            group = request["group_id"]
            try:
                await asyncio.sleep(10.0 if group != "fast" else 0.0)
            except asyncio.CancelledError:
                if group != "stubborn":
                    raise
                return {"error_code": int(ErrorCode.REBALANCE_IN_PROGRESS), "throttle_time_ms": 0}
            return {"error_code": 0, "throttle_time_ms": 0}

        dispatcher.register(
            ApiHandler(ApiKey.HEARTBEAT, handle, versions=(0, 1), authorization=NO_AUTHORIZATION)
        )
        async with running_server(dispatcher, request_timeout_ms=100) as server:
            client = await RawClient.connect(server.port)
            groups = ("fast", "stuck", "stubborn", "fast")
            for correlation_id, group in enumerate(groups):
                await client.send(ApiKey.HEARTBEAT, 1, correlation_id, _heartbeat(group))
            answers = [await client.receive(ApiKey.HEARTBEAT, 1) for _ in groups]
            assert [(c, body["error_code"]) for c, body in answers] == [
                (0, ErrorCode.NONE),
                (1, ErrorCode.REQUEST_TIMED_OUT),
                (2, ErrorCode.REBALANCE_IN_PROGRESS),
                (3, ErrorCode.NONE),
            ]
            await _still_serves(server.port)
            await client.close()

    run(scenario())


async def _still_serves(port: int) -> None:
    client = await RawClient.connect(port)
    await client.send(ApiKey.API_VERSIONS, 3, 1, SOFTWARE)
    assert (await client.receive(ApiKey.API_VERSIONS, 3))[0] == 1
    await client.close()


def _frame(payload_hex: str) -> bytes:
    payload = bytes.fromhex(payload_hex)
    return len(payload).to_bytes(4, "big") + payload


def test_bad_frames_close_only_their_own_connection() -> None:
    bad_frames = {
        "unknown api key": _frame("7fff 0000 00000001 0000"),
        "version without a schema": _frame("0003 0064 00000001 0000"),
        "shorter than a header": _frame("616263"),
        "negative size": (-5).to_bytes(4, "big", signed=True),
        "oversized": (10**6).to_bytes(4, "big") + b"x" * 100,
        # ApiVersions v3 (header v2) whose compact string claims 15 bytes and has 2.
        "malformed body": _frame("0012 0003 00000001 0000 00 10 6162"),
    }

    async def scenario() -> None:
        async with running_server(request_bytes_max=1024) as server:
            bystander = await RawClient.connect(server.port)
            for reason, frame in bad_frames.items():
                client = await RawClient.connect(server.port)
                client.writer.write(frame)
                assert await client.closed_by_server(), reason
                await client.close()
                await _still_serves(server.port)
            await bystander.send(ApiKey.API_VERSIONS, 0, 2, {})
            assert (await bystander.receive(ApiKey.API_VERSIONS, 0))[0] == 2
            await bystander.close()

    run(scenario())


def test_bytes_after_a_request_body_are_ignored_as_by_kafka() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            client.writer.write(_frame("0012 0000 00000007 0000 ff"))  # ApiVersions v0 + 1 byte
            correlation_id, response = await client.receive(ApiKey.API_VERSIONS, 0)
            assert (correlation_id, response["error_code"]) == (7, 0)
            await client.close()

    run(scenario())


def test_connections_beyond_max_connections_are_closed() -> None:
    async def scenario() -> None:
        async with running_server(connections_max=2) as server:
            first = await RawClient.connect(server.port)
            second = await RawClient.connect(server.port)
            await first.send(ApiKey.API_VERSIONS, 0, 1, {})
            await second.send(ApiKey.API_VERSIONS, 0, 1, {})
            await first.receive(ApiKey.API_VERSIONS, 0)
            await second.receive(ApiKey.API_VERSIONS, 0)
            third = await RawClient.connect(server.port)
            assert await third.closed_by_server()
            await third.close()
            await first.close()
            await asyncio.sleep(0.1)
            await _still_serves(server.port)
            await second.close()

    run(scenario())


def test_idle_connection_is_closed_after_connections_max_idle_ms() -> None:
    async def scenario() -> None:
        async with running_server(idle_timeout_ms=200) as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.API_VERSIONS, 0, 1, {})
            await client.receive(ApiKey.API_VERSIONS, 0)
            started = asyncio.get_running_loop().time()
            assert await client.closed_by_server()
            assert asyncio.get_running_loop().time() - started >= 0.15
            await client.close()

    run(scenario())


def test_long_running_request_does_not_count_as_idle() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, _ = _heartbeat_handler({"slow": 0.5})
        dispatcher.register(handler)
        async with running_server(dispatcher, idle_timeout_ms=150) as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.HEARTBEAT, 1, 4, _heartbeat("slow"))
            assert (await client.receive(ApiKey.HEARTBEAT, 1))[0] == 4
            await client.close()

    run(scenario())


def test_stop_closes_open_connections() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            await client.send(ApiKey.API_VERSIONS, 0, 1, {})
            await client.receive(ApiKey.API_VERSIONS, 0)
        assert server.connection_count == 0
        assert await client.closed_by_server()
        await client.close()

    run(scenario())


def test_a_frame_stalled_midway_closes_the_connection_after_connections_max_idle_ms() -> None:
    async def scenario() -> None:
        async with running_server(idle_timeout_ms=200) as server:
            client = await RawClient.connect(server.port)
            whole = _frame("0012 0000 00000007 0000")
            client.writer.write(whole[:-3])  # size prefix and part of the body
            started = asyncio.get_running_loop().time()
            assert await client.closed_by_server()
            assert asyncio.get_running_loop().time() - started >= 0.15
            await client.close()
            await _still_serves(server.port)

    run(scenario())


def test_a_client_that_stops_sending_gets_every_pipelined_answer_then_the_close() -> None:
    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()
        handler, _ = _heartbeat_handler({"slow": 0.1})
        dispatcher.register(handler)
        async with running_server(dispatcher, in_flight_per_connection_max=2) as server:
            client = await RawClient.connect(server.port)
            for correlation_id in range(5):
                await client.send(ApiKey.HEARTBEAT, 1, correlation_id, _heartbeat("slow"))
            client.writer.write_eof()
            answered = [(await client.receive(ApiKey.HEARTBEAT, 1))[0] for _ in range(5)]
            assert answered == list(range(5))
            assert await client.closed_by_server()
            await client.close()

    run(scenario())


def test_a_frame_cut_short_by_the_end_of_stream_closes_the_connection() -> None:
    async def scenario() -> None:
        async with running_server() as server:
            client = await RawClient.connect(server.port)
            client.writer.write(_frame("0012 0000 00000007 0000")[:-2])
            client.writer.write_eof()
            assert await client.closed_by_server()
            await client.close()

    run(scenario())


def test_a_frame_trickling_in_slower_than_connections_max_idle_ms_is_closed() -> None:
    """A frame must be whole within connections.max.idle.ms of its first byte, however
    steadily its bytes come (a slow sender cannot hold a connection and its buffer)."""

    async def scenario() -> None:
        async with running_server(idle_timeout_ms=200) as server:
            client = await RawClient.connect(server.port)
            frame = _frame("0012 0000 00000007 0000" + "00" * 40)
            started = asyncio.get_running_loop().time()
            closed = False
            for byte in frame:
                client.writer.write(bytes([byte]))
                # A byte every 50 ms: the connection is never quiet for 200 ms.
                try:
                    async with asyncio.timeout(0.05):
                        closed = await client.reader.read(1) == b""
                except TimeoutError:
                    continue
                break
            assert closed, "the frame was never whole, yet the connection stayed open"
            assert asyncio.get_running_loop().time() - started >= 0.15
            await client.close()

    run(scenario())


def test_a_handler_whose_await_is_cancelled_by_another_is_answered_in_turn() -> None:
    """The request's task was not cancelled (a future it awaited was): it is answered
    UNKNOWN_SERVER_ERROR, and the answers after it keep their order."""

    async def scenario() -> None:
        dispatcher = dispatcher_with_api_versions()

        async def handle(request: Message, context: RequestContext) -> Message:
            if request["group_id"] == "orphan":
                future = asyncio.get_running_loop().create_future()
                asyncio.get_running_loop().call_soon(future.cancel)
                await future
            return {"error_code": 0, "throttle_time_ms": 0}

        dispatcher.register(
            ApiHandler(ApiKey.HEARTBEAT, handle, versions=(0, 1), authorization=NO_AUTHORIZATION)
        )
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            for correlation_id, group in enumerate(("orphan", "fine")):
                await client.send(ApiKey.HEARTBEAT, 1, correlation_id, _heartbeat(group))
            answers = [await client.receive(ApiKey.HEARTBEAT, 1) for _ in range(2)]
            assert [(c, body["error_code"]) for c, body in answers] == [
                (0, ErrorCode.UNKNOWN_SERVER_ERROR),
                (1, ErrorCode.NONE),
            ]
            await client.close()

    run(scenario())


class _Transport(asyncio.Transport):
    """Just enough transport to drive a connection's protocol by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def test_a_client_that_stops_reading_is_not_read_and_a_cut_frame_closes_once_it_reads() -> None:
    """Write back-pressure pauses reading; the client's end of stream with a frame cut short
    closes the connection as soon as the client takes its answers again."""

    async def scenario() -> None:
        async with running_server() as server:
            connection = _Connection(server, "PLAINTEXT", None, None)
            transport = _Transport()
            connection.connection_made(transport)
            connection.pause_writing()  # the client does not read its answers
            assert not transport.reading
            connection.data_received(_frame("0012 0000 00000007 0000")[:-2])
            connection.eof_received()
            assert not transport.closed, "closed while the client could not be read"
            connection.resume_writing()
            assert transport.closed
            connection.connection_lost(None)
            await connection.closed()

    run(scenario())
