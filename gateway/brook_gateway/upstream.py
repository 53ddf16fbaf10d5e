"""The gateway's gRPC side: one channel per node address, reused by every Kafka connection,
and the calls that reach the active controller and the group coordinators.

A failed call becomes a Kafka error code (brook.rpc.errors.rpc_error), so handlers answer
clients in one vocabulary whether a node answered with a code or did not answer at all.

Every call made while a Kafka request's span is recorded gets a CLIENT span of its own, a child
of the request's, and carries its trace context in the gRPC metadata so that the node's server
span continues the trace. Nothing is made or sent when the request's span is not recorded: an
unsampled trace context would make a node that does record (its own exporter on) drop its spans.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import grpc
from opentelemetry import propagate, trace

from brook.errors import ErrorCode, error_code
from brook.rpc.channels import ENVELOPE_BYTES_MAX, KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from brook.rpc.errors import rpc_error
from brook.telemetry import tracer
from brook.v1 import admin_pb2_grpc, group_pb2_grpc, replica_pb2_grpc, storage_pb2_grpc

__all__ = ["UpstreamError", "Upstreams"]

# Codes after which another controller may succeed (the answering one is not the leader).
_CONTROLLER_RETRY_CODES: Final = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})
_T = TypeVar("_T")
# Span name of a call whose method path is not known (a stub type grpc did not make).
_UNKNOWN_RPC: Final = "grpc/unknown"


class UpstreamError(Exception):
    """A call that got no answer; ``code`` is the Kafka error standing for it."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Upstreams:
    def __init__(
        self,
        *,
        message_bytes_max: int,
        request_timeout_ms: int,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        """`tracer_provider`: where call spans go; None is the process's (brook.telemetry)."""
        self._tracer = (
            tracer(__name__) if tracer_provider is None else tracer_provider.get_tracer(__name__)
        )
        self._options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", message_bytes_max + ENVELOPE_BYTES_MAX),
            ("grpc.max_receive_message_length", message_bytes_max + ENVELOPE_BYTES_MAX),
            ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 0),
        ]
        self.message_bytes_max = message_bytes_max
        """The largest request the gateway accepts (socket.request.max.bytes)."""
        self.request_timeout_s = request_timeout_ms / 1000
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._controller: str | None = None
        self._closed = False

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if self._closed:
                raise UpstreamError(ErrorCode.NETWORK_EXCEPTION, "the gateway is stopping")
            channel = grpc.aio.insecure_channel(address, options=self._options)
            self._channels[address] = channel
        return channel

    def storage(self, address: str) -> storage_pb2_grpc.StorageServiceStub:
        return storage_pb2_grpc.StorageServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def replica(self, address: str) -> replica_pb2_grpc.ReplicaServiceStub:
        """A storage node's replication service (the gateway asks it only for end offsets of
        leader epochs, on behalf of consumers validating their positions)."""
        return replica_pb2_grpc.ReplicaServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def groups(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        return group_pb2_grpc.GroupCoordinatorServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    async def call(self, method: Any, request: Any, timeout_s: float | None = None) -> Any:
        """One unary call; UpstreamError if it gets no answer."""
        timeout_s = timeout_s or self.request_timeout_s
        if not trace.get_current_span().is_recording():
            try:
                return await method(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                code, message = rpc_error(error)
                raise UpstreamError(code, message) from None
        name = _rpc_name(method)
        service, _, rpc = name.rpartition("/")
        with self._tracer.start_as_current_span(
            name,
            kind=trace.SpanKind.CLIENT,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc},
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            try:
                return await method(request, timeout=timeout_s, metadata=tuple(carrier.items()))
            except grpc.aio.AioRpcError as error:
                code, message = rpc_error(error)
                span.set_attribute("rpc.grpc.status_code", error.code().value[0])
                span.set_attribute("kafka.error_code", int(code))
                span.set_status(trace.StatusCode.ERROR, message)
                raise UpstreamError(code, message) from None

    async def admin(
        self,
        controllers: Sequence[str],
        method: str,
        request: Any,
        codes: Callable[[Any], list[int]],
    ) -> Any:
        """Sends an AdminService call to the active controller: the last one that answered
        first, then each controller in turn while the answer says NOT_CONTROLLER (or none
        comes), within request.timeout.ms."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        problem = "no controller is known"
        candidates = list(dict.fromkeys([*filter(None, [self._controller]), *controllers]))
        attempt = 0
        while candidates and loop.time() < deadline:
            address = candidates[attempt % len(candidates)]
            attempt += 1
            stub = admin_pb2_grpc.AdminServiceStub(self.channel(address))  # type: ignore[no-untyped-call]
            try:
                response = await self.call(
                    getattr(stub, method), request, max(deadline - loop.time(), 0.001)
                )
            except UpstreamError as e:
                problem = f"{address}: {e}"
            else:
                if not {error_code(c) for c in codes(response)} & _CONTROLLER_RETRY_CODES:
                    self._controller = address
                    return response
                problem = f"{address}: not the active controller"
            self._controller = None
            if attempt % len(candidates) == 0:
                # Every controller said no: an election is under way.
                await asyncio.sleep(min(0.1, max(deadline - loop.time(), 0)))
        raise UpstreamError(ErrorCode.NOT_CONTROLLER, f"no active controller answered ({problem})")

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            await channel.close(grace=None)


def _rpc_name(method: Any) -> str:
    """The span name of a grpc.aio stub's method: the path it calls, such as
    brook.v1.StorageService/Produce."""
    path = getattr(method, "_method", None)
    if isinstance(path, bytes):
        return path.decode().lstrip("/")
    return path.lstrip("/") if isinstance(path, str) else _UNKNOWN_RPC
