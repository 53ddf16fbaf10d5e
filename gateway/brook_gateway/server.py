"""The Kafka-protocol TCP server: an asyncio protocol per connection that starts each request
as soon as its frame is whole, handles requests concurrently (pipelined) and answers them in
the order they arrived. No task, stream or timeout per read: a request costs one task.

Limits, each from configuration:
- `socket.request.max.bytes`: a larger frame closes the connection before its body is read;
- `max.connections`: connections beyond it are closed as they arrive;
- `max.in.flight.requests.per.connection`: with that many requests unanswered the connection
  is not read any further until one is answered (back-pressure on the client, bounded memory);
- `connections.max.idle.ms`: a connection with nothing in flight and nothing received for that
  long is closed, as is one that stalls that long in the middle of a frame;
- `request.timeout.ms`: a handler running longer (plus the wait its request may ask for,
  `ApiHandler.wait_ms`) is answered with REQUEST_TIMED_OUT.

The server listens on one or more Kafka listeners (`KafkaListener`: PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL, each its own port), and besides each may listen on one port per
broker id it presents (`open_node_listener`, kafka.node.port.base + id): a connection accepted
there is a connection to that broker (`RequestContext.broker_id`) on that listener. Every
listener shares the limits above (one count of connections, one idle timeout); closing a
broker's listener stops accepting on its port and leaves the connections it accepted to end
as any other (the client closes them, or they idle out); `stop` closes them all.

Client quotas (brook_gateway.quotas), when given: a request a quota applies to gets its
throttle time in its response, and its connection is then read one request at a time, as
Kafka reads a channel, and not at all while throttled (KIP-219's muting).

Who a connection is (`RequestContext.principal`, read by authorization and quotas): on a TLS
listener (SSL) the subject common name of a verified client certificate, `User:<CN>`; on a
SASL listener the user it authenticated as (brook_gateway.sasl), and until it has, nothing but
ApiVersions, SaslHandshake and SaslAuthenticate is served, one request at a time, each frame
at most `SASL_FRAME_BYTES_MAX`, and one that has not authenticated within
`ServerLimits.authentication_timeout_ms` is closed; otherwise `User:ANONYMOUS`. A TLS
handshake must complete within `TLS_HANDSHAKE_TIMEOUT_S`, and a connection is counted against
max.connections from the moment it is accepted, handshake included (`_TlsGate`: a client that
opens sockets and never finishes a handshake cannot exhaust the process's descriptors); one
that fails (garbage, a plaintext client, a certificate the trust store does not vouch for or
that has expired) closes that connection only.

Bad input closes only the connection that sent it, with the reason logged: a malformed frame,
an unknown API key or a version without a schema (as Kafka does). A known API at a version the
gateway does not serve is answered with UNSUPPORTED_VERSION, and an ApiVersions request newer
than the gateway's gets the v0-layout fallback answer from which the client picks its retry.

Each request is traced as one SERVER span, "kafka.<ApiName>" (api key and version, client id,
correlation id, the response's error code, bytes in and out); the gRPC calls it makes upstream
are its children (brook_gateway.upstream). When the process does not record spans (the traces
exporter is off) no span is made at all: Kafka requests carry no trace context to pass on, and
an unrecorded span would still cost more than a small request's own handling. Every request's
latency is recorded in the `brook.gateway.request.duration` histogram by Kafka API name
(docs/metrics.md), span or not.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace

from brook.errors import ErrorCode
from brook.security.principal import ANONYMOUS, Principal, user
from brook.security.tls import ReloadingServerContext
from brook.telemetry import meter, records_root_spans, tracer
from brook_gateway.api_versions import unsupported_version_response
from brook_gateway.apis import ApiHandler, Dispatcher, RequestContext
from brook_gateway.cluster_view import KAFKA_LISTENER
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
from brook_gateway.quotas import ClientQuotas
from brook_gateway.sasl import (
    PLAIN_CHECKS_MAX,
    SASL_FRAME_BYTES_MAX,
    CredentialLookup,
    SaslAuthenticator,
    SaslError,
)

__all__ = [
    "SASL_AUTHENTICATION_TIMEOUT_MS",
    "TLS_HANDSHAKE_TIMEOUT_S",
    "KafkaListener",
    "KafkaServer",
    "ServerLimits",
]

_logger = logging.getLogger(__name__)

# How long a closing connection may take to flush what the kernel has not yet sent.
_CLOSE_TIMEOUT_S: Final = 1.0
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
"""A TLS connection whose handshake has not completed in this long is closed."""
SASL_AUTHENTICATION_TIMEOUT_MS: Final = 30_000
"""A connection to a SASL listener that has not authenticated in this long is closed
(`ServerLimits.authentication_timeout_ms`'s default)."""
# Span names by API key: "kafka.Produce", ...
_SPAN_NAMES: Final = {
    key: f"kafka.{spec.name.removesuffix('Request')}" for key, spec in REQUESTS.items()
}
_UNKNOWN_API_SPAN_NAME: Final = "kafka.Unknown"
# The request-latency attributes per API key, made once: a dict per request costs on a hot path.
_API_ATTRIBUTES: Final = {
    key: {"kafka.api": spec.name.removesuffix("Request")} for key, spec in REQUESTS.items()
}
_UNKNOWN_API_ATTRIBUTES: Final = {"kafka.api": "Unknown"}
# How often request deadlines (request.timeout.ms) are checked: a request is answered
# REQUEST_TIMED_OUT at most this long after its deadline.
_DEADLINE_TICK_S: Final = 0.05
# How deep _error_code looks into a response for a partition's error (topics > partitions).
_ERROR_CODE_DEPTH_MAX: Final = 3


@dataclass(frozen=True, slots=True)
class ServerLimits:
    request_bytes_max: int
    connections_max: int
    in_flight_per_connection_max: int
    idle_timeout_ms: int
    request_timeout_ms: int
    authentication_timeout_ms: int = SASL_AUTHENTICATION_TIMEOUT_MS

    def __post_init__(self) -> None:
        assert self.request_bytes_max >= REQUEST_PREFIX_BYTES
        assert self.connections_max >= 1
        assert self.in_flight_per_connection_max >= 1
        assert self.idle_timeout_ms >= 1
        assert self.request_timeout_ms >= 1
        assert self.authentication_timeout_ms >= 1


@dataclass(frozen=True, slots=True)
class KafkaListener:
    """One Kafka listener: its name (Kafka's: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), where
    it binds, its TLS context (SSL, SASL_SSL) and its SASL mechanisms (SASL_*: the
    enabled ones; empty without SASL)."""

    name: str
    host: str
    port: int
    tls: ReloadingServerContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()


class _Deadlines:
    """request.timeout.ms for the requests being handled, with one timer for the whole server:
    an `asyncio.timeout` per request cost about a tenth of the gateway's CPU under
    librdkafka's produce load (bench/README.md, issue #19). Every ``tick_s`` the requests past
    their deadlines are cancelled; `leave` tells the request whether that is why."""

    def __init__(self, tick_s: float) -> None:
        self._tick_s = tick_s
        self._deadlines: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def enter(self, task: asyncio.Task[Any], timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._deadlines[task] = loop.time() + timeout_s
        if self._timer is None:
            self._timer = loop.call_later(self._tick_s, self._sweep)

    def leave(self, task: asyncio.Task[Any]) -> bool:
        """Forgets ``task``; True if it was cancelled for its deadline (once)."""
        self._deadlines.pop(task, None)
        if task in self._expired:
            self._expired.discard(task)
            return True
        return False

    def close(self) -> None:
        """The server stopped: no more sweeps (requests still running were cancelled)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now_s = loop.time()
        expired = [task for task, deadline_s in self._deadlines.items() if deadline_s <= now_s]
        for task in expired:
            del self._deadlines[task]
            self._expired.add(task)
            task.cancel()
        self._timer = loop.call_later(self._tick_s, self._sweep) if self._deadlines else None


class _CloseConnection(Exception):
    """The connection must be closed; the message is the reason logged."""


class KafkaServer:
    """Serves `dispatcher`'s APIs on each of `listeners` (port 0 picks a free one: see
    `ports`)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: ServerLimits,
        listeners: Sequence[KafkaListener],
        tracer_provider: trace.TracerProvider | None = None,
        credentials: CredentialLookup | None = None,
        quotas: ClientQuotas | None = None,
    ):
        """`tracer_provider`: where request spans go; None is the process's (brook.telemetry).
        `credentials`: the SCRAM credentials SASL listeners check (required with one).
        `quotas`: the client quotas to enforce (brook_gateway.quotas); None enforces none."""
        assert listeners, "a Kafka server needs a listener"
        assert len({listener.name for listener in listeners}) == len(listeners)
        assert credentials is not None or not any(lst.sasl_mechanisms for lst in listeners)
        self._dispatcher = dispatcher
        self._quotas = quotas
        self._limits = limits
        self._listeners = tuple(listeners)
        self._credentials = credentials
        self._tracer_provider = tracer_provider
        self._tracer = (
            tracer(__name__) if tracer_provider is None else tracer_provider.get_tracer(__name__)
        )
        self._duration = meter(__name__).create_histogram(
            "brook.gateway.request.duration",
            unit="ms",
            description="Kafka request latency, from its frame read to its response encoded",
        )
        # listener name -> its server, in the order given.
        self._servers: dict[str, asyncio.Server] = {}
        # (listener name, broker id) -> the listener on its own port (kafka.node.port.base + id).
        self._node_servers: dict[tuple[str, int], asyncio.Server] = {}
        self._connections: set[_Connection] = set()
        # Bounds the PBKDF2 checks of SASL PLAIN passwords of every connection at once.
        self._plain_checks = asyncio.Semaphore(PLAIN_CHECKS_MAX)
        # Accepted TLS connections still in their handshake (counted against max.connections).
        self._handshakes: set[_TlsGate] = set()
        self._deadlines = _Deadlines(_DEADLINE_TICK_S)

    @property
    def port(self) -> int:
        """The port of the first listener."""
        return self.ports[self._listeners[0].name]

    @property
    def ports(self) -> dict[str, int]:
        """listener name -> the port it listens on."""
        if not self._servers:
            raise RuntimeError("the server is not started")
        return {name: server.sockets[0].getsockname()[1] for name, server in self._servers.items()}

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def node_ports(self) -> dict[int, int]:
        """broker id -> port of every broker listener of the first listener open now."""
        return self.listener_node_ports(self._listeners[0].name)

    def listener_node_ports(self, listener: str) -> dict[int, int]:
        """broker id -> port of every broker listener of ``listener`` open now."""
        return {
            broker_id: server.sockets[0].getsockname()[1]
            for (name, broker_id), server in self._node_servers.items()
            if name == listener
        }

    async def start(self) -> None:
        """Opens every listener; OSError if one cannot be bound (those opened are closed)."""
        try:
            for listener in self._listeners:
                self._servers[listener.name] = await self._listen(listener, None, listener.port)
        except OSError:
            for server in self._servers.values():
                server.close()
            self._servers.clear()
            raise

    async def _listen(
        self, listener: KafkaListener, broker_id: int | None, port: int
    ) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        protocol = functools.partial(self._protocol, listener, broker_id)
        tls = listener.tls
        if tls is None:
            return await loop.create_server(protocol, listener.host, port)
        return await loop.create_server(
            lambda: _TlsGate(self, protocol(), tls.context), listener.host, port
        )

    async def open_node_listener(
        self, broker_id: int, port: int, listener: str | None = None
    ) -> None:
        """Listens on ``port`` (same host and security as ``listener``, the first when None)
        for connections to broker ``broker_id``; OSError when the port cannot be bound."""
        assert self._servers, "open_node_listener before start"
        spec = self._listener(listener)
        key = (spec.name, broker_id)
        assert key not in self._node_servers, f"broker {broker_id} already listens on {key[0]}"
        self._node_servers[key] = await self._listen(spec, broker_id, port)

    def close_node_listener(self, broker_id: int, listener: str | None = None) -> None:
        """Stops accepting on broker ``broker_id``'s port of ``listener`` (the first when None)
        at once (the port is free on return); connections it accepted carry on."""
        server = self._node_servers.pop((self._listener(listener).name, broker_id), None)
        if server is not None:
            server.close()

    def _listener(self, name: str | None) -> KafkaListener:
        if name is None:
            return self._listeners[0]
        for listener in self._listeners:
            if listener.name == name:
                return listener
        raise KeyError(f"no Kafka listener {name}")

    async def stop(self) -> None:
        """Stops accepting, closes every connection (its requests cancelled), waits for them
        to end, then closes the handlers (`Dispatcher.close`)."""
        servers = [*self._servers.values(), *self._node_servers.values()]
        self._node_servers.clear()
        for server in servers:
            server.close()
        for gate in list(self._handshakes):
            gate.abort()
        connections = set(self._connections)
        for connection in connections:
            connection.close()
        if connections:
            await asyncio.gather(*(c.closed() for c in connections))
        for server in servers:
            await server.wait_closed()
        self._deadlines.close()
        await self._dispatcher.close()

    def _protocol(self, listener: KafkaListener, broker_id: int | None) -> _Connection:
        authenticator = None
        if listener.sasl_mechanisms:
            assert self._credentials is not None
            authenticator = SaslAuthenticator(
                listener.sasl_mechanisms, self._credentials, self._plain_checks
            )
        return _Connection(self, listener.name, broker_id, authenticator)

    async def respond(
        self,
        frame: bytes,
        peer: str,
        broker_id: int | None = None,
        listener: str = KAFKA_LISTENER,
        principal: Principal = ANONYMOUS,
        throttle: Callable[[int], None] | None = None,
    ) -> bytearray | None:
        """The response frame to one request frame, None if none is due (acks=0). Raises
        _CloseConnection when the request cannot be answered. ``broker_id``: the broker whose
        port accepted the connection (None: the bootstrap listener); ``listener``: the Kafka
        listener that accepted it; ``principal``: the connection's. ``throttle(ms)`` is
        called when a client quota applies to the request: with 0 as its handling starts, and
        with how long it throttles the client if it does."""
        api_key, api_version, correlation_id = peek_request(frame)
        started = time.perf_counter()
        respond = functools.partial(
            self._respond,
            frame,
            peer,
            broker_id,
            listener,
            principal,
            api_key,
            api_version,
            correlation_id,
            throttle=throttle,
        )
        try:
            if not records_root_spans(self._tracer_provider):
                return await respond(None)
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
                response = await respond(span)
                span.set_attribute("kafka.response_bytes", 0 if response is None else len(response))
                return response
        finally:
            self._duration.record(
                (time.perf_counter() - started) * 1000,
                _API_ATTRIBUTES.get(api_key, _UNKNOWN_API_ATTRIBUTES),
            )

    async def _respond(
        self,
        frame: bytes,
        peer: str,
        broker_id: int | None,
        listener: str,
        principal: Principal,
        api_key: int,
        api_version: int,
        correlation_id: int,
        span: trace.Span | None,
        throttle: Callable[[int], None] | None = None,
    ) -> bytearray | None:
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
        context = RequestContext(header, peer, broker_id, principal, listener)
        if span is not None and header.client_id is not None:
            span.set_attribute("kafka.client_id", header.client_id)
        handler = self._dispatcher.handler(api_key)
        usage = self._quotas.usage(context) if self._quotas is not None else None
        if usage is None:
            response = await self._handle(handler, request, context)
        else:
            if throttle is not None:
                throttle(0)
            response = await usage.timed(self._handle(handler, request, context))
        if span is not None and response is not None:
            code = _error_code(response, _ERROR_CODE_DEPTH_MAX)
            if code is not None:
                span.set_attribute("kafka.error_code", code)
        if usage is None:
            if response is None:
                return None
            return self._encode(peer, api_key, api_version, correlation_id, response)
        encode = functools.partial(self._encode, peer, api_key, api_version, correlation_id)
        answer, throttle_ms = usage.answer(FRAME_SIZE_BYTES + len(frame), response, encode)
        if throttle is not None and throttle_ms > 0:
            throttle(throttle_ms)
        return answer

    @staticmethod
    def _encode(
        peer: str, api_key: int, api_version: int, correlation_id: int, response: Message
    ) -> bytearray:
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
        task = asyncio.current_task()
        assert task is not None
        deadlines = self._deadlines
        deadlines.enter(task, timeout_ms / 1000)
        try:
            return await handler.handle(request, context)
        except asyncio.CancelledError:
            if deadlines.leave(task) and task.uncancel() == 0:
                return _error_response(handler, request, context, ErrorCode.REQUEST_TIMED_OUT)
            if task.cancelling():
                raise  # the connection is closing (or the server stopping)
            # Not cancelled itself: a future the handler awaited was. A failure like any other.
            _logger.error(
                "request handler cancelled",
                extra={"peer": context.peer, "api_key": context.header.api_key},
            )
            return _error_response(handler, request, context, ErrorCode.UNKNOWN_SERVER_ERROR)
        except TimeoutError:
            return _error_response(handler, request, context, ErrorCode.REQUEST_TIMED_OUT)
        except Exception as e:
            if deadlines.leave(task) and task.uncancel() == 0:
                # Cancelled for its deadline, and the handler turned that into an error.
                return _error_response(handler, request, context, ErrorCode.REQUEST_TIMED_OUT)
            # The client gets UNKNOWN_SERVER_ERROR; the trace keeps what actually happened.
            trace.get_current_span().record_exception(e)
            _logger.exception(
                "request handler failed",
                extra={"peer": context.peer, "api_key": context.header.api_key},
            )
            return _error_response(handler, request, context, ErrorCode.UNKNOWN_SERVER_ERROR)
        finally:
            if deadlines.leave(task):
                task.uncancel()  # cancelled for its deadline, and the handler answered anyway


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


def _certificate_principal(certificate: Any) -> Principal:
    """``User:<subject CN>`` of a verified client certificate (``SSLObject.getpeercert()``,
    empty when the client sent none), else ANONYMOUS."""
    for rdn in (certificate or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return user(str(value))
    return ANONYMOUS


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


class _TlsGate(asyncio.Protocol):
    """A TCP connection to a TLS listener until its handshake is done: counted against
    max.connections as soon as it is accepted (asyncio's own TLS servers make the protocol
    only after the handshake, so a client that never finishes one would hold its descriptor
    uncounted), then upgraded (``loop.start_tls``) and handed to its ``_Connection``."""

    def __init__(
        self, server: KafkaServer, connection: _Connection, context: ssl.SSLContext
    ) -> None:
        self._server = server
        self._connection = connection
        self._context = context
        self._transport: asyncio.Transport | None = None
        self._upgrade: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        server = self._server
        if len(server._connections) + len(server._handshakes) >= server._limits.connections_max:
            peer = transport.get_extra_info("peername")
            _logger.warning(
                "connection refused: max.connections reached",
                extra={"peer": str(peer), "max_connections": server._limits.connections_max},
            )
            transport.close()
            return
        # Nothing is read until start_tls has taken the transport over.
        transport.pause_reading()
        self._transport = transport
        server._handshakes.add(self)
        self._upgrade = asyncio.get_running_loop().create_task(self._start_tls(transport))

    async def _start_tls(self, transport: asyncio.Transport) -> None:
        try:
            upgraded = await asyncio.get_running_loop().start_tls(
                transport,
                self._connection,
                self._context,
                server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
            )
        except Exception as e:
            _logger.debug("TLS handshake failed", extra={"reason": repr(e)})
            transport.abort()
            return
        finally:
            self._server._handshakes.discard(self)
        if upgraded is None:
            transport.close()
            return
        self._connection.connection_made(upgraded)

    def data_received(self, data: bytes) -> None:
        del data  # not reading until start_tls takes over

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._handshakes.discard(self)

    def abort(self) -> None:
        """Ends a connection still in its handshake (the server is stopping)."""
        if self._upgrade is not None:
            self._upgrade.cancel()
        if self._transport is not None:
            self._transport.abort()
        self._server._handshakes.discard(self)


class _Connection(asyncio.Protocol):
    """One client connection: frames parsed as bytes arrive, each request handled in a task
    of its own as soon as it is whole, the answers written in request order as they come.

    Reading stops (the transport is paused) while `max.in.flight.requests.per.connection`
    requests are unanswered or the client does not take its answers (the transport's write
    buffer is over its high-water mark), so memory stays bounded either way. One timer per
    connection, moved lazily, enforces `connections.max.idle.ms`.

    On a SASL listener the frames go to the connection's `SaslAuthenticator` until it is
    complete, one at a time and each at most `SASL_FRAME_BYTES_MAX`; an answer that reports a
    failed authentication is the connection's last."""

    def __init__(
        self,
        server: KafkaServer,
        listener: str,
        broker_id: int | None,
        authenticator: SaslAuthenticator | None,
    ) -> None:
        self._server = server
        self._limits = server._limits
        self._listener = listener
        self._broker_id = broker_id
        self._auth = authenticator
        self._tls = False
        # Who the connection is without SASL: a verified TLS client certificate's CN.
        self._tls_principal = ANONYMOUS
        self._idle_s = self._limits.idle_timeout_ms / 1000
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._peer = "unknown"
        self._buffer = bytearray()
        # Requests in arrival order, answered (written) from the front.
        self._pending: deque[asyncio.Task[bytearray | None]] = deque()
        self._write_paused = False
        self._reading = True
        self._eof = False
        self._closing = False
        self._last_active_s = self._loop.time()
        # When the frame now partly in the buffer began to arrive (None: no partial frame, or
        # reading is paused, which is the gateway's doing, not the client's).
        self._frame_started_s: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._abort_timer: asyncio.TimerHandle | None = None
        # A client quota applies: one request at a time, as Kafka's channels (see _throttle).
        self._one_at_a_time = False
        # A client quota's throttle (KIP-219): nothing is read until the timer ends it.
        self._muted_until_s = 0.0
        self._mute_timer: asyncio.TimerHandle | None = None
        self._authentication_timer: asyncio.TimerHandle | None = None
        self._done: asyncio.Future[None] = self._loop.create_future()

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peername = transport.get_extra_info("peername")
        self._peer = f"{peername[0]}:{peername[1]}" if peername else "unknown"
        connections = self._server._connections
        # TLS connections still in their handshake count too (_TlsGate).
        if len(connections) + len(self._server._handshakes) >= self._limits.connections_max:
            _logger.warning(
                "connection refused: max.connections reached",
                extra={"peer": self._peer, "max_connections": self._limits.connections_max},
            )
            self._closing = True
            transport.close()
            return
        connections.add(self)
        self._idle_timer = self._loop.call_at(self._last_active_s + self._idle_s, self._on_timer)
        if self._auth is not None:
            self._authentication_timer = self._loop.call_later(
                self._limits.authentication_timeout_ms / 1000, self._on_authentication_timeout
            )
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self._tls = True
            self._tls_principal = _certificate_principal(ssl_object.getpeercert())
        if self._buffer or self._eof:
            # What arrived with the end of a TLS handshake, before this call (_TlsGate).
            self._take_requests()
            self._close_if_answered()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_active_s = self._loop.time()
        self._buffer += data
        if self._transport is None:
            # Sent with the client's last handshake message: asyncio's TLS hands it over
            # before the upgrade completes (_TlsGate); kept until connection_made knows who
            # the client is.
            return
        self._take_requests()

    def eof_received(self) -> bool:
        # The client finished sending: answer what it asked, then close (a frame cut short
        # closes at once). True keeps our side open for the answers; TLS has no half-close
        # (asyncio closes the transport whatever we return, and warns if we say True).
        self._eof = True
        if self._transport is None:
            return False
        self._close_if_answered()
        return not self._tls

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        self._take_requests()
        self._close_if_answered()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            _logger.debug("connection lost", extra={"peer": self._peer})
        self._closing = True
        self._server._connections.discard(self)
        for timer in (
            self._idle_timer,
            self._abort_timer,
            self._authentication_timer,
            self._mute_timer,
        ):
            if timer is not None:
                timer.cancel()
        for task in self._pending:
            task.cancel()
        pending = list(self._pending)
        self._pending.clear()
        if not pending:
            self._done.set_result(None)
            return
        # Done once every request's task has ended (each holds upstream calls to unwind).
        remaining = len(pending)

        def ended(_: asyncio.Task[bytearray | None]) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0 and not self._done.done():
                self._done.set_result(None)

        for task in pending:
            task.add_done_callback(ended)

    # -- the server's side

    def close(self) -> None:
        """Closes the connection: what is written is flushed for up to _CLOSE_TIMEOUT_S,
        unanswered requests are cancelled."""
        if self._transport is None or self._transport.is_closing():
            return
        self._closing = True
        self._transport.close()
        self._abort_timer = self._loop.call_later(_CLOSE_TIMEOUT_S, self._transport.abort)

    async def closed(self) -> None:
        """Waits until the connection is gone and its requests' tasks have ended."""
        await asyncio.shield(self._done)

    # -- requests in, answers out

    def _take_requests(self) -> None:
        """Starts every whole request in the buffer while reading is allowed."""
        buffer = self._buffer
        while not self._closing and len(buffer) >= FRAME_SIZE_BYTES:
            if not self._may_read():
                break
            size = int.from_bytes(buffer[:FRAME_SIZE_BYTES], "big", signed=True)
            auth = self._auth
            authenticating = auth is not None and not auth.complete
            if authenticating and not 0 <= size <= SASL_FRAME_BYTES_MAX:
                self._close_for(
                    f"frame of {size} bytes before authentication (at most {SASL_FRAME_BYTES_MAX})"
                )
                return
            # A bare SASL token may be any size within the bound above.
            raw_token = authenticating and auth is not None and auth.expects_raw_token
            if not raw_token and size < REQUEST_PREFIX_BYTES:
                self._close_for(f"frame of {size} bytes is shorter than a request header")
                return
            if size > self._limits.request_bytes_max:
                self._close_for(
                    f"frame of {size} bytes exceeds socket.request.max.bytes "
                    f"({self._limits.request_bytes_max})"
                )
                return
            end = FRAME_SIZE_BYTES + size
            if len(buffer) < end:
                break
            frame = bytes(buffer[FRAME_SIZE_BYTES:end])
            del buffer[:end]
            self._frame_started_s = None
            if authenticating:
                task = self._loop.create_task(self._authenticate(frame))
            else:
                principal = self._tls_principal
                if auth is not None:
                    principal = auth.principal or ANONYMOUS
                task = self._loop.create_task(
                    self._server.respond(
                        frame,
                        self._peer,
                        self._broker_id,
                        self._listener,
                        principal,
                        self._throttle,
                    )
                )
            self._pending.append(task)
            task.add_done_callback(self._answered)
        self._update_reading()
        if not buffer or not self._reading:
            self._frame_started_s = None
        elif self._frame_started_s is None:
            self._frame_started_s = self._loop.time()

    async def _authenticate(self, frame: bytes) -> bytearray | None:
        """The answer to a frame of the SASL exchange (ApiVersions among them)."""
        auth = self._auth
        assert auth is not None
        try:
            if not auth.expects_raw_token:
                api_key = peek_request(frame)[0]
                auth.check_request(api_key)
                if api_key == ApiKey.API_VERSIONS:
                    return await self._server.respond(
                        frame, self._peer, self._broker_id, self._listener
                    )
            return await auth.respond(frame)
        except SaslError as e:
            raise _CloseConnection(str(e)) from None

    def _may_read(self) -> bool:
        if self._auth is not None and not self._auth.complete and self._pending:
            return False  # the SASL exchange is one request at a time
        return (
            not self._write_paused
            and self._mute_timer is None
            and len(self._pending) < self._limits.in_flight_per_connection_max
            and not (self._one_at_a_time and self._pending)
        )

    def _throttle(self, throttle_ms: int) -> None:
        """A client quota applies to the connection's requests: from now on they are read one
        at a time, each once the one before is answered, as Kafka's broker reads a channel, so
        a throttle holds back everything the client sends after it (pipelined requests read
        ahead would pass by it); and nothing is read for ``throttle_ms`` (from now, when the
        throttled response is ready), or longer if already muted longer."""
        self._one_at_a_time = True
        if self._closing or throttle_ms <= 0:
            return
        until_s = self._loop.time() + throttle_ms / 1000
        if until_s <= self._muted_until_s:
            return
        self._muted_until_s = until_s
        if self._mute_timer is not None:
            self._mute_timer.cancel()
        self._mute_timer = self._loop.call_at(until_s, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._mute_timer = None
        self._update_reading()
        self._take_requests()
        self._close_if_answered()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        reading = self._may_read()
        if reading != self._reading:
            self._reading = reading
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _answered(self, done: asyncio.Task[bytearray | None]) -> None:
        """Writes the answers now due, in request order."""
        if not done.cancelled():
            done.exception()  # retrieved, even when the connection closed meanwhile
        pending = self._pending
        transport = self._transport
        while pending and pending[0].done() and not self._closing:
            task = pending.popleft()
            if task.cancelled():
                # Only closing cancels a request (KafkaServer._handle answers the others): the
                # answers after it cannot be given in order.
                self._close_for("a request ended unanswered")
                return
            error = task.exception()
            if error is not None:
                if isinstance(error, _CloseConnection):
                    self._close_for(str(error))
                else:
                    _logger.error(
                        "request failed",
                        exc_info=error,
                        extra={"peer": self._peer},
                    )
                    self._close_for(f"request failed: {error!r}")
                return
            response = task.result()
            if response is not None and transport is not None:
                transport.write(response)
                self._last_active_s = self._loop.time()
            if self._auth is not None and self._auth.failed:
                self._close_for(f"SASL authentication failed: {self._auth.failure}")
                return
        if self._closing:
            return
        self._take_requests()
        self._close_if_answered()

    def _close_if_answered(self) -> None:
        """After the client's end of stream: closes once every request is answered, or at
        once if what is left of the stream is a frame cut short."""
        if not self._eof or self._closing:
            return
        if self._buffer and self._may_read():
            # _take_requests started every whole frame it was allowed to: this one is cut.
            self._close_for("closed mid-frame")
        elif not self._pending and not self._buffer:
            self.close()

    def _close_for(self, reason: str) -> None:
        _logger.warning("closing connection", extra={"peer": self._peer, "reason": reason})
        self.close()

    def _on_authentication_timeout(self) -> None:
        if not self._closing and self._auth is not None and not self._auth.complete:
            self._close_for(
                f"not authenticated within {self._limits.authentication_timeout_ms} ms of "
                "connecting"
            )

    def _on_timer(self) -> None:
        """connections.max.idle.ms: nothing in flight and nothing received for that long, or a
        frame begun and not finished in that long (however slowly its bytes come), closes the
        connection."""
        if self._closing:
            return
        now_s = self._loop.time()
        started_s = self._frame_started_s
        if started_s is not None and now_s >= started_s + self._idle_s:
            self._close_for(f"stalled mid-frame for {self._idle_s} s")
            return
        due_s = self._last_active_s + self._idle_s
        if now_s >= due_s:
            if not self._pending:
                self._close_for(
                    f"idle for connections.max.idle.ms ({self._limits.idle_timeout_ms})"
                )
                return
            due_s = now_s + self._idle_s
        if started_s is not None:
            due_s = min(due_s, started_s + self._idle_s)
        self._idle_timer = self._loop.call_at(due_s, self._on_timer)
