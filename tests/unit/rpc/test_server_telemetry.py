"""The runtime's gRPC server interceptor (brook/rpc/server_telemetry.py): one SERVER span per
call of a traced service, continuing the caller's trace, ended when the call ends (a stream's
when the stream does); calls of other services pass untouched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from brook.rpc.server_telemetry import ServerTelemetryInterceptor

HEALTH = "grpc.health.v1.Health"
CALL_TIMEOUT_S = 5.0
# A W3C traceparent: the caller's trace and span.
CALLER_TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
CALLER_SPAN_ID = 0xB7AD6B7169203331
TRACEPARENT = f"00-{CALLER_TRACE_ID:032x}-{CALLER_SPAN_ID:016x}-01"


@asynccontextmanager
async def _server(
    traced: tuple[str, ...], spans: InMemorySpanExporter
) -> AsyncIterator[health_pb2_grpc.HealthStub]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    server = grpc.aio.server(interceptors=(ServerTelemetryInterceptor(traced, provider),))
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
    finally:
        await server.stop(None)


def test_a_traced_call_is_a_server_span_in_the_callers_trace() -> None:
    spans = InMemorySpanExporter()

    async def test() -> None:
        async with _server((HEALTH,), spans) as stub:
            answer = await stub.Check(
                health_pb2.HealthCheckRequest(),
                metadata=(("traceparent", TRACEPARENT),),
                timeout=CALL_TIMEOUT_S,
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING

    asyncio.run(test())
    (span,) = spans.get_finished_spans()
    assert span.name == f"{HEALTH}/Check"
    assert span.kind is trace.SpanKind.SERVER
    assert span.context.trace_id == CALLER_TRACE_ID
    assert span.parent is not None and span.parent.span_id == CALLER_SPAN_ID
    assert span.attributes == {"rpc.system": "grpc", "rpc.service": HEALTH, "rpc.method": "Check"}


def test_a_streams_span_ends_with_the_stream() -> None:
    spans = InMemorySpanExporter()

    async def test() -> None:
        async with _server((HEALTH,), spans) as stub:
            call = stub.Watch(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
            await call.read()
            assert spans.get_finished_spans() == ()
            call.cancel()

            def ended() -> bool:
                return len(spans.get_finished_spans()) == 1

            for _ in range(100):
                if ended():
                    break
                await asyncio.sleep(0.02)
            assert ended()

    asyncio.run(test())
    assert spans.get_finished_spans()[0].name == f"{HEALTH}/Watch"


def test_calls_of_other_services_are_not_traced() -> None:
    spans = InMemorySpanExporter()

    async def test() -> None:
        async with _server(("brook.v1.ControllerService",), spans) as stub:
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)

    asyncio.run(test())
    assert spans.get_finished_spans() == ()
