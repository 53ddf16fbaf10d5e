"""The gateway's gRPC side: one channel per node address (``brook.rpc.channels.ChannelPool``),
reused by every Kafka connection, and the calls that reach the active controller
(``brook.rpc.quorum``) and the group and transaction coordinators.

A failed call becomes a Kafka error code (brook.rpc.errors.rpc_error), so handlers answer
clients in one vocabulary whether a node answered with a code or did not answer at all.

Every call made while a Kafka request's span is recorded gets a CLIENT span of its own, a child
of the request's, and carries its trace context in the gRPC metadata so that the node's server
span continues the trace. Nothing is made or sent when the request's span is not recorded: an
unsampled trace context would make a node that does record (its own exporter on) drop its spans.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import grpc
from opentelemetry import propagate, trace

from brook.errors import ErrorCode
from brook.rpc.backoff import RetryBackoff
from brook.rpc.channels import ChannelPool, ChannelPoolClosedError, channel_options
from brook.rpc.errors import rpc_error
from brook.rpc.quorum import (
    ControllerQuorum,
    ControllerUnavailableError,
    attempts_within,
    call_active_controller,
)
from brook.telemetry import tracer
from brook.v1 import group_pb2_grpc, replica_pb2_grpc, storage_pb2_grpc, transaction_pb2_grpc

__all__ = ["UpstreamError", "Upstreams"]

# The wait between two attempts to reach the active controller (an election is under way).
CONTROLLER_BACKOFF: Final = RetryBackoff(base_ms=100, max_ms=100)
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
        self._channels = ChannelPool(
            channel_options(
                client_id="gateway",
                send_bytes_max=message_bytes_max,
                receive_bytes_max=message_bytes_max,
            )
        )
        self.message_bytes_max = message_bytes_max
        """The largest request the gateway accepts (socket.request.max.bytes)."""
        self.request_timeout_s = request_timeout_ms / 1000
        self._quorum: ControllerQuorum | None = None

    def _stub(self, stub: Callable[[str], _T], address: str) -> _T:
        try:
            return stub(address)
        except ChannelPoolClosedError:
            raise UpstreamError(ErrorCode.NETWORK_EXCEPTION, "the gateway is stopping") from None

    def storage(self, address: str) -> storage_pb2_grpc.StorageServiceStub:
        return self._stub(self._channels.storage, address)

    def replica(self, address: str) -> replica_pb2_grpc.ReplicaServiceStub:
        """A storage node's replication service (the gateway asks it only for end offsets of
        leader epochs, on behalf of consumers validating their positions)."""
        return self._stub(self._channels.replica, address)

    def groups(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        return self._stub(self._channels.groups, address)

    def transactions(self, address: str) -> transaction_pb2_grpc.TransactionCoordinatorServiceStub:
        """A coordinator's transaction service (the same processes as ``groups``)."""
        return self._stub(self._channels.transactions, address)

    async def call(self, method: Any, request: Any, timeout_s: float | None = None) -> Any:
        """One unary call; UpstreamError if it gets no answer."""
        try:
            return await self.traced_call(method, request, timeout_s or self.request_timeout_s)
        except grpc.aio.AioRpcError as error:
            code, message = rpc_error(error)
            raise UpstreamError(code, message) from None

    async def traced_call(self, method: Any, request: Any, timeout_s: float) -> Any:
        """One unary call in a CLIENT span when the request's span is recorded (see the
        module doc); a failure is raised as gRPC's (grpc.aio.AioRpcError), for the look-ups of
        ``brook.rpc`` that decide what is worth another attempt."""
        if not trace.get_current_span().is_recording():
            return await method(request, timeout=timeout_s)
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
                raise

    async def admin(
        self,
        controllers: Sequence[str],
        method: str,
        request: Any,
        codes: Callable[[Any], list[int]],
    ) -> Any:
        """Sends an AdminService call to the active controller (``brook.rpc.quorum``: the last
        one that answered first, then each controller in turn while the answer says
        NOT_CONTROLLER, none comes or one fails unexpectedly), within request.timeout.ms;
        UpstreamError with the retriable NOT_CONTROLLER or REQUEST_TIMED_OUT when none answers,
        or the code standing for a gRPC failure every controller would repeat."""
        if self._quorum is None or self._quorum.bootstrap_servers != tuple(controllers):
            if not controllers:
                raise UpstreamError(ErrorCode.NOT_CONTROLLER, "no controller is known")
            self._quorum = ControllerQuorum(controllers)

        async def send(address: str, timeout_s: float) -> Any:
            return await self.traced_call(
                getattr(self._stub(self._channels.admin, address), method), request, timeout_s
            )

        try:
            response, _ = await call_active_controller(
                self._quorum,
                method,
                send,
                codes,
                lambda _: None,
                timeout_s=self.request_timeout_s,
                backoff=CONTROLLER_BACKOFF,
                attempts_max=attempts_within(self.request_timeout_s, CONTROLLER_BACKOFF),
            )
        except ControllerUnavailableError as e:
            raise UpstreamError(e.code, str(e)) from None
        return response

    async def close(self) -> None:
        await self._channels.close()


def _rpc_name(method: Any) -> str:
    """The span name of a grpc.aio stub's method: the path it calls, such as
    brook.v1.StorageService/Produce."""
    path = getattr(method, "_method", None)
    if isinstance(path, bytes):
        return path.decode().lstrip("/")
    return path.lstrip("/") if isinstance(path, str) else _UNKNOWN_RPC
