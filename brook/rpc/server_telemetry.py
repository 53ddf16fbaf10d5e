"""A server span and a latency record for every call of chosen gRPC services (a grpc.aio server
interceptor the runtime installs; `ServiceSpec.traced_services` names the services).

The span is named `<service>/<method>`, of kind SERVER, continues the caller's trace when its
metadata carries one (W3C traceparent) and ends with the call; a call that raises records the
exception and an error status. The latency goes to the `brook.rpc.server.duration` histogram
(ms; attributes rpc.service, rpc.method, rpc.grpc.status_code); a stream's duration is its life.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import grpc
from opentelemetry import propagate, trace

from brook.rpc.method_handlers import wrapped
from brook.telemetry import meter, tracer

__all__ = ["RPC_SERVER_DURATION", "ServerTelemetryInterceptor"]

RPC_SERVER_DURATION: Final = "brook.rpc.server.duration"


class ServerTelemetryInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps the handlers of `services` (fully qualified names); other calls pass untouched."""

    def __init__(
        self, services: tuple[str, ...], tracer_provider: trace.TracerProvider | None = None
    ) -> None:
        """`tracer_provider`: where the spans go; None is the process's (brook.telemetry)."""
        self._services = frozenset(services)
        self._tracer = (
            tracer(__name__) if tracer_provider is None else tracer_provider.get_tracer(__name__)
        )
        self._duration = meter(__name__).create_histogram(
            RPC_SERVER_DURATION, unit="ms", description="gRPC server call latency"
        )

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        service, _, method = str(handler_call_details.method).lstrip("/").rpartition("/")
        if handler is None or service not in self._services:
            return handler
        carrier = {key: value for key, value in handler_call_details.invocation_metadata or ()}
        call = _Call(self, service, method, carrier)
        return wrapped(
            handler,
            lambda kind, behaviour: (
                call.unary(behaviour) if kind.endswith("unary") else call.stream(behaviour)
            ),
        )


class _Call:
    def __init__(
        self,
        interceptor: ServerTelemetryInterceptor,
        service: str,
        method: str,
        carrier: dict[str, Any],
    ) -> None:
        self._interceptor = interceptor
        self._service = service
        self._method = method
        self._carrier = carrier

    @contextlib.contextmanager
    def _observed(self, context: Any) -> Iterator[None]:
        started = time.perf_counter()
        raised: BaseException | None = None
        try:
            with self._interceptor._tracer.start_as_current_span(
                f"{self._service}/{self._method}",
                context=propagate.extract(self._carrier),
                kind=trace.SpanKind.SERVER,
                attributes={
                    "rpc.system": "grpc",
                    "rpc.service": self._service,
                    "rpc.method": self._method,
                },
            ):
                yield
        except BaseException as e:
            raised = e
            raise
        finally:
            self._interceptor._duration.record(
                (time.perf_counter() - started) * 1000,
                {
                    "rpc.service": self._service,
                    "rpc.method": self._method,
                    "rpc.grpc.status_code": _status_value(context.code(), raised),
                },
            )

    def unary(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def observed(request: Any, context: Any) -> Any:
            with self._observed(context):
                return await behaviour(request, context)

        return observed

    def stream(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behaviour):
            # A streaming handler that writes with context.write and returns.
            return self.unary(behaviour)

        async def observed(request: Any, context: Any) -> AsyncIterator[Any]:
            with self._observed(context):
                async for response in behaviour(request, context):
                    yield response

        return observed


def _status_value(code: Any, raised: BaseException | None) -> int:
    """The numeric gRPC status a call ended with: the one the handler set (abort, set_code),
    else CANCELLED for a cancelled call, UNKNOWN for one that raised, OK otherwise."""
    if not isinstance(code, grpc.StatusCode):
        if raised is None:
            code = grpc.StatusCode.OK
        elif isinstance(raised, asyncio.CancelledError):
            code = grpc.StatusCode.CANCELLED
        else:
            code = grpc.StatusCode.UNKNOWN
    value = code.value[0]
    return value if isinstance(value, int) else 0
