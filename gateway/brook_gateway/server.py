"""The Kafka-protocol TCP server: one reader and one writer per connection, requests handled
concurrently (pipelined) and answered in the order they arrived.

Limits, each from configuration:
- `socket.request.max.bytes`: a larger frame closes the connection before its body is read;
- `max.connections`: connections beyond it are closed as they arrive;
- `max.in.flight.requests.per.connection`: with that many requests unanswered the connection
  is not read any further until one is answered (back-pressure on the client, bounded memory);
- `connections.max.idle.ms`: a connection with nothing in flight and nothing received for that
  long is closed, as is one that stalls that long in the middle of a frame;
- `request.timeout.ms`: a handler running longer (plus the wait its request may ask for,
  `ApiHandler.wait_ms`) is answered with REQUEST_TIMED_OUT.

Besides its PLAINTEXT (bootstrap) listener the server may listen on one port per broker id it
presents (`open_node_listener`, kafka.node.port.base + id): a connection accepted there is a
connection to that broker (`RequestContext.broker_id`). Every listener shares the limits above
(one count of connections, one idle timeout); closing a broker's listener stops accepting on
its port and leaves the connections it accepted to end as any other (the client closes them,
or they idle out); `stop` closes them all.

Bad input closes only the connection that sent it, with the reason logged: a malformed frame,
an unknown API key or a version without a schema (as Kafka does). A known API at a version the
gateway does not serve is answered with UNSUPPORTED_VERSION, and an ApiVersions request newer
than the gateway's gets the v0-layout fallback answer from which the client picks its retry.

Each request is traced as one SERVER span, "kafka.<ApiName>" (api key and version, client id,
correlation id, the response's error code, bytes in and out); the gRPC calls it makes upstream
are its children (brook_gateway.upstream). When the process does not record spans (the traces
exporter is off) no span is made at all: Kafka requests carry no trace context to pass on, and
an unrecorded span would still cost more than a small request's own handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace

from brook.errors import ErrorCode
from brook.telemetry import records_root_spans, tracer
from brook_gateway.api_versions import unsupported_version_response
from brook_gateway.apis import ApiHandler, Dispatcher, RequestContext
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import (
    FRAME_SIZE_BYTES,
    REQUEST_PREFIX_BYTES,
    UnknownApiError,
    decode_request,
    encode_response,
    peek_request,
)
from brook_gateway.protocol.kafka_messages import REQUESTS, ApiKey
from brook_gateway.protocol.primitives import ProtocolError
from brook_gateway.protocol.schema import in_range

__all__ = ["KafkaServer", "ServerLimits"]

_logger = logging.getLogger(__name__)

# How long a closing connection may take to flush what the kernel has not yet sent.
_CLOSE_TIMEOUT_S: Final = 1.0
# Span names by API key: "kafka.Produce", ...
_SPAN_NAMES: Final = {
    key: f"kafka.{spec.name.removesuffix('Request')}" for key, spec in REQUESTS.items()
}
_UNKNOWN_API_SPAN_NAME: Final = "kafka.Unknown"
# How deep _error_code looks into a response for a partition's error (topics > partitions).
_ERROR_CODE_DEPTH_MAX: Final = 3


@dataclass(frozen=True, slots=True)
class ServerLimits:
    request_bytes_max: int
    connections_max: int
    in_flight_per_connection_max: int
    idle_timeout_ms: int
    request_timeout_ms: int

    def __post_init__(self) -> None:
        assert self.request_bytes_max >= REQUEST_PREFIX_BYTES
        assert self.connections_max >= 1
        assert self.in_flight_per_connection_max >= 1
        assert self.idle_timeout_ms >= 1
        assert self.request_timeout_ms >= 1


class _CloseConnection(Exception):
    """The connection must be closed; the message is the reason logged."""


class KafkaServer:
    """Serves `dispatcher`'s APIs on host:port (port 0 picks a free one: see `port`)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: ServerLimits,
        host: str,
        port: int,
        tracer_provider: trace.TracerProvider | None = None,
    ):
        """`tracer_provider`: where request spans go; None is the process's (brook.telemetry)."""
        self._dispatcher = dispatcher
        self._limits = limits
        self._host = host
        self._port = port
        self._tracer_provider = tracer_provider
        self._tracer = (
            tracer(__name__) if tracer_provider is None else tracer_provider.get_tracer(__name__)
        )
        self._server: asyncio.Server | None = None
        # broker id -> the listener on its own port (kafka.node.port.base + id).
        self._node_servers: dict[int, asyncio.Server] = {}
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the server is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def node_ports(self) -> dict[int, int]:
        """broker id -> port of every broker listener open now."""
        return {
            broker_id: server.sockets[0].getsockname()[1]
            for broker_id, server in self._node_servers.items()
        }

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._port)

    async def open_node_listener(self, broker_id: int, port: int) -> None:
        """Listens on ``port`` (same host as PLAINTEXT) for connections to broker
        ``broker_id``; OSError when the port cannot be bound."""
        assert self._server is not None, "open_node_listener before start"
        assert broker_id not in self._node_servers, f"broker {broker_id} already listens"
        accept = functools.partial(self._accept, broker_id=broker_id)
        self._node_servers[broker_id] = await asyncio.start_server(accept, self._host, port)

    def close_node_listener(self, broker_id: int) -> None:
        """Stops accepting on broker ``broker_id``'s port at once (the port is free on return);
        connections it accepted carry on."""
        server = self._node_servers.pop(broker_id, None)
        if server is not None:
            server.close()

    async def stop(self) -> None:
        """Stops accepting, closes every connection and waits for their tasks to end."""
        servers = [s for s in (self._server, *self._node_servers.values()) if s is not None]
        self._node_servers.clear()
        for server in servers:
            server.close()
        tasks = set(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            await server.wait_closed()

    async def _accept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        broker_id: int | None = None,
    ) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "unknown"
        if len(self._connections) >= self._limits.connections_max:
            _logger.warning(
                "connection refused: max.connections reached",
                extra={"peer": peer, "max_connections": self._limits.connections_max},
            )
            await _close(writer)
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await _Connection(self, reader, writer, peer, broker_id).run()
        except asyncio.CancelledError:
            # stop() cancels connections and awaits them; asyncio's stream callback (3.11)
            # would log a cancelled connection task as an error, so it ends normally instead.
            pass
        finally:
            self._connections.discard(task)
            await _close(writer)

    async def respond(self, frame: bytes, peer: str, broker_id: int | None = None) -> bytes | None:
        """The response frame to one request frame, None if none is due (acks=0). Raises
        _CloseConnection when the request cannot be answered. ``broker_id``: the broker whose
        port accepted the connection (None: the bootstrap listener)."""
        api_key, api_version, correlation_id = peek_request(frame)
        if not records_root_spans(self._tracer_provider):
            return await self._respond(
                frame, peer, broker_id, api_key, api_version, correlation_id, None
            )
        with self._tracer.start_as_current_span(
            _SPAN_NAMES.get(api_key, _UNKNOWN_API_SPAN_NAME),
            kind=trace.SpanKind.SERVER,
            attributes={
                "kafka.api_key": api_key,
                "kafka.api_version": api_version,
                "kafka.correlation_id": correlation_id,
                "kafka.request_bytes": FRAME_SIZE_BYTES + len(frame),
                "client.address": peer,
            },
        ) as span:
            response = await self._respond(
                frame, peer, broker_id, api_key, api_version, correlation_id, span
            )
            span.set_attribute("kafka.response_bytes", 0 if response is None else len(response))
            return response

    async def _respond(
        self,
        frame: bytes,
        peer: str,
        broker_id: int | None,
        api_key: int,
        api_version: int,
        correlation_id: int,
        span: trace.Span | None,
    ) -> bytes | None:
        if api_key == ApiKey.API_VERSIONS:
            served = self._dispatcher.advertised_range(api_key)
            if served is not None and api_version > served[1]:
                # The body of a newer version may not parse: answer without reading it.
                fallback = unsupported_version_response(self._dispatcher)
                return encode_response(api_key, 0, correlation_id, fallback)
        try:
            header, request = decode_request(frame)
        except UnknownApiError as e:
            raise _CloseConnection(str(e)) from None
        except ProtocolError as e:
            name = REQUESTS[api_key].name
            raise _CloseConnection(f"malformed {name} v{api_version}: {e}") from None
        context = RequestContext(header, peer, broker_id)
        if span is not None and header.client_id is not None:
            span.set_attribute("kafka.client_id", header.client_id)
        handler = self._dispatcher.handler(api_key)
        response = await self._handle(handler, request, context)
        if response is None:
            return None
        if span is not None:
            code = _error_code(response, _ERROR_CODE_DEPTH_MAX)
            if code is not None:
                span.set_attribute("kafka.error_code", code)
        try:
            return encode_response(api_key, api_version, correlation_id, response)
        except ProtocolError as e:
            # A handler bug, not the client's fault; but there is no answer to send.
            _logger.error(
                "unencodable response",
                extra={
                    "peer": peer,
                    "api_key": api_key,
                    "api_version": api_version,
                    "reason": str(e),
                },
            )
            raise _CloseConnection(f"unencodable response: {e}") from None

    async def _handle(
        self, handler: ApiHandler | None, request: Message, context: RequestContext
    ) -> Message | None:
        if handler is None or not in_range(context.api_version, handler.versions):
            return _error_response(handler, request, context, ErrorCode.UNSUPPORTED_VERSION)
        timeout_ms = self._limits.request_timeout_ms
        if handler.wait_ms is not None:
            timeout_ms += handler.wait_ms(request)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await handler.handle(request, context)
        except TimeoutError:
            return _error_response(handler, request, context, ErrorCode.REQUEST_TIMED_OUT)
        except Exception as e:
            # The client gets UNKNOWN_SERVER_ERROR; the trace keeps what actually happened.
            trace.get_current_span().record_exception(e)
            _logger.exception(
                "request handler failed",
                extra={"peer": context.peer, "api_key": context.header.api_key},
            )
            return _error_response(handler, request, context, ErrorCode.UNKNOWN_SERVER_ERROR)


def _error_code(message: Any, depth: int) -> int | None:
    """The response's top-level error code if it has a non-zero one, else the first non-zero
    error of its parts (a partition's), else 0 if it reports any error code; None if none."""
    code: int | None = message.get("error_code")
    if code or depth == 0:
        return code
    for value in message.values():
        if isinstance(value, list):
            for part in value:
                if isinstance(part, dict):
                    found = _error_code(part, depth - 1)
                    if found:
                        return found
                    if found is not None:
                        code = 0
    return code


def _error_response(
    handler: ApiHandler | None, request: Message, context: RequestContext, error: ErrorCode
) -> Message:
    api_key = context.header.api_key
    try:
        if handler is not None:
            return handler.error_response(request, context, int(error))
        from brook_gateway.apis import top_level_error_response

        return top_level_error_response(request, context, int(error))
    except LookupError as e:
        raise _CloseConnection(
            f"cannot answer API {api_key} v{context.api_version} with {error.name}: {e}"
        ) from None


class _Connection:
    def __init__(
        self,
        server: KafkaServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        broker_id: int | None,
    ) -> None:
        self._server = server
        self._limits = server._limits
        self._reader = reader
        self._writer = writer
        self._peer = peer
        self._broker_id = broker_id
        self._slots = asyncio.Semaphore(self._limits.in_flight_per_connection_max)
        self._in_flight = 0
        # Responses in request order: a task per request, None once the client has finished.
        self._pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue()

    async def run(self) -> None:
        read_task = asyncio.create_task(self._read_requests(), name=f"kafka-read {self._peer}")
        write_task = asyncio.create_task(self._write_responses(), name=f"kafka-write {self._peer}")
        try:
            done, _ = await asyncio.wait(
                (read_task, write_task), return_when=asyncio.FIRST_EXCEPTION
            )
            for task in done:
                error = task.exception()
                if isinstance(error, _CloseConnection):
                    _logger.warning(
                        "closing connection", extra={"peer": self._peer, "reason": str(error)}
                    )
                elif isinstance(error, ConnectionError | asyncio.IncompleteReadError):
                    _logger.debug("connection lost", extra={"peer": self._peer})
                elif error is not None:
                    raise error
        finally:
            for task in (read_task, write_task):
                task.cancel()
            await asyncio.gather(read_task, write_task, return_exceptions=True)
            while not self._pending.empty():
                pending = self._pending.get_nowait()
                if pending is not None:
                    pending.cancel()
                    await asyncio.gather(pending, return_exceptions=True)

    async def _read_requests(self) -> None:
        idle_s = self._limits.idle_timeout_ms / 1000
        while True:
            await self._slots.acquire()
            size_bytes = await self._read_size(idle_s)
            if size_bytes is None:
                self._slots.release()
                # The client finished sending: answer what it asked, then close.
                await self._pending.put(None)
                return
            size = int.from_bytes(size_bytes, "big", signed=True)
            if size < REQUEST_PREFIX_BYTES:
                raise _CloseConnection(f"frame of {size} bytes is shorter than a request header")
            if size > self._limits.request_bytes_max:
                raise _CloseConnection(
                    f"frame of {size} bytes exceeds socket.request.max.bytes "
                    f"({self._limits.request_bytes_max})"
                )
            try:
                async with asyncio.timeout(idle_s):
                    frame = await self._reader.readexactly(size)
            except TimeoutError:
                raise _CloseConnection(f"stalled mid-frame for {idle_s} s") from None
            except asyncio.IncompleteReadError:
                raise _CloseConnection("closed mid-frame") from None
            self._in_flight += 1
            task = asyncio.create_task(self._server.respond(frame, self._peer, self._broker_id))
            await self._pending.put(task)

    async def _read_size(self, idle_s: float) -> bytes | None:
        """The next frame's size prefix; None at a clean end of stream."""
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    return await self._reader.readexactly(FRAME_SIZE_BYTES)
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    raise _CloseConnection("closed mid-frame") from None
                return None
            except TimeoutError:
                if self._in_flight == 0:
                    raise _CloseConnection(
                        f"idle for connections.max.idle.ms ({self._limits.idle_timeout_ms})"
                    ) from None

    async def _write_responses(self) -> None:
        while True:
            task = await self._pending.get()
            if task is None:
                return
            response = await task
            if response is not None:
                self._writer.write(response)
                await self._writer.drain()
            self._in_flight -= 1
            self._slots.release()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await writer.wait_closed()
