"""The service runtime, in-process against a real grpc.aio server: readiness, health, limits,
graceful shutdown, ownership of background tasks, and the failures that must end a process."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brook.config import Config, RawSetting, service_config_def
from brook.security.grpc_tls import INTER_BROKER_PROTOCOL
from brook.security.tls import TLS_KEYS
from brook.server import EXIT_FAILURE, EXIT_OK, ServiceContext, ServiceSpec, TaskOwner, serve

SERVE_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 5.0
RPC_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.02

DEFINITION = service_config_def(
    listener_names=("GRPC",),
    default_listeners="GRPC://127.0.0.1:1",
    keys=(*TLS_KEYS, INTER_BROKER_PROTOCOL),
)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(port: int, **settings: str) -> Config:
    raw = {
        "node.id": "1",
        "listeners": f"GRPC://127.0.0.1:{port}",
        **{name.replace("_", "."): value for name, value in settings.items()},
    }
    return DEFINITION.parse({k: RawSetting(v, "test") for k, v in raw.items()})


@dataclass
class Behaviour:
    start_delay_s: float = 0.0
    fail_start: bool = False
    task_fails_after_s: float | None = None
    task_ignores_cancel: bool = False
    stop_hangs: bool = False


@dataclass
class ProbeService:
    """A real service for the runtime: a test.Probe servicer and one background task."""

    behaviour: Behaviour
    events: list[str] = field(default_factory=list)
    release_stubborn_task: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, context: ServiceContext) -> None:
        self.events.append("start")
        context.server.add_generic_rpc_handlers((_probe_handler(),))
        context.tasks.spawn(self._background(), name="probe.background")
        if self.behaviour.fail_start:
            raise RuntimeError("disk on fire")
        try:
            await asyncio.sleep(self.behaviour.start_delay_s)
        except asyncio.CancelledError:
            self.events.append("start cancelled")
            raise

    async def _background(self) -> None:
        try:
            if self.behaviour.task_fails_after_s is not None:
                await asyncio.sleep(self.behaviour.task_fails_after_s)
                raise RuntimeError("loop crashed")
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.events.append("task cancelled")
            if not self.behaviour.task_ignores_cancel:
                raise
            await self.release_stubborn_task.wait()

    async def stop(self) -> None:
        self.events.append("stop")
        if self.behaviour.stop_hangs:
            await asyncio.sleep(3600)


async def _echo(request: bytes, context: Any) -> bytes:
    return request


async def _slow(request: bytes, context: Any) -> bytes:
    await asyncio.sleep(int(request) / 1000)
    return request


async def _grow(request: bytes, context: Any) -> bytes:
    return b"x" * int(request)


def _probe_handler() -> Any:
    return grpc.method_handlers_generic_handler(
        "test.Probe",
        {
            name: grpc.unary_unary_rpc_method_handler(handler)
            for name, handler in (("Echo", _echo), ("Slow", _slow), ("Grow", _grow))
        },
    )


@dataclass
class Running:
    service: ProbeService
    stop: asyncio.Event
    served: asyncio.Task[int]
    channel: Any

    def call(self, method: str, request: bytes) -> Awaitable[bytes]:
        result: Awaitable[bytes] = self.channel.unary_unary(f"/test.Probe/{method}")(
            request, timeout=RPC_TIMEOUT_S
        )
        return result

    async def health(self, name: str = "") -> int:
        stub = health_pb2_grpc.HealthStub(self.channel)
        response = await stub.Check(
            health_pb2.HealthCheckRequest(service=name), timeout=RPC_TIMEOUT_S
        )
        status: int = response.status
        return status

    async def exit_status(self) -> int:
        return await asyncio.wait_for(self.served, SERVE_TIMEOUT_S)


@asynccontextmanager
async def _running(
    behaviour: Behaviour, *, wait_ready: bool = True, **settings: str
) -> AsyncIterator[Running]:
    port = _free_port()
    service = ProbeService(behaviour)
    spec = ServiceSpec("probe", DEFINITION, ("test.Probe",), lambda config: service)
    stop = asyncio.Event()
    served = asyncio.create_task(serve(spec, _config(port, **settings), stop=stop))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    running = Running(service, stop, served, channel)
    try:
        if wait_ready:
            await _wait_serving(running)
        yield running
    finally:
        stop.set()
        service.release_stubborn_task.set()
        await channel.close()
        if not served.done():
            await asyncio.wait_for(asyncio.shield(served), SERVE_TIMEOUT_S)


async def _wait_serving(running: Running) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        assert not running.served.done(), f"serve ended with {running.served.result()}"
        try:
            if await running.health() == SERVING:
                return
        except grpc.RpcError:
            pass
        assert time.monotonic() < deadline, "service did not become SERVING"
        await asyncio.sleep(POLL_INTERVAL_S)


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), SERVE_TIMEOUT_S * 2))


def test_health_serves_every_name_then_flips_to_not_serving_when_shutdown_begins() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(), shutdown_timeout_ms="900") as running:
            assert await running.health("") == SERVING
            assert await running.health("test.Probe") == SERVING
            with pytest.raises(grpc.RpcError) as unknown:
                await running.health("test.Other")
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

            watch = health_pb2_grpc.HealthStub(running.channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=RPC_TIMEOUT_S
            )
            assert (await watch.read()).status == SERVING
            running.stop.set()
            assert (await watch.read()).status == NOT_SERVING
            watch.cancel()
            assert await running.exit_status() == EXIT_OK
            # The runtime stops the service first, then cancels and awaits what it owns.
            assert running.service.events == ["start", "stop", "task cancelled"]

    _run(scenario)


def test_in_flight_rpc_completes_during_grace_while_new_rpcs_are_refused() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(), shutdown_timeout_ms="3000") as running:
            slow = asyncio.ensure_future(running.call("Slow", b"300"))
            await asyncio.sleep(0.1)
            running.stop.set()
            await asyncio.sleep(0.05)
            with pytest.raises(grpc.RpcError) as refused:
                await running.call("Echo", b"late")
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert await slow == b"300"
            assert await running.exit_status() == EXIT_OK

    _run(scenario)


def test_rpc_still_running_when_the_grace_period_ends_is_cancelled() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(), shutdown_timeout_ms="600") as running:
            slow = asyncio.ensure_future(running.call("Slow", b"10000"))
            await asyncio.sleep(0.1)
            started = time.monotonic()
            running.stop.set()
            assert await running.exit_status() == EXIT_OK
            assert time.monotonic() - started < 1.0
            with pytest.raises(grpc.RpcError):
                await slow

    _run(scenario)


def test_concurrent_rpcs_beyond_queued_max_requests_are_rejected() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(), queued_max_requests="2") as running:
            held = [asyncio.ensure_future(running.call("Slow", b"400")) for _ in range(2)]
            await asyncio.sleep(0.1)
            with pytest.raises(grpc.RpcError) as rejected:
                await running.call("Echo", b"third")
            assert rejected.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await asyncio.gather(*held) == [b"400", b"400"]
            assert await running.call("Echo", b"after") == b"after"

    _run(scenario)


def test_messages_larger_than_socket_request_max_bytes_are_rejected_both_ways() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(), socket_request_max_bytes="1024") as running:
            assert await running.call("Echo", b"x" * 1000) == b"x" * 1000
            with pytest.raises(grpc.RpcError) as too_big_in:
                await running.call("Echo", b"x" * 2000)
            assert too_big_in.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            with pytest.raises(grpc.RpcError) as too_big_out:
                await running.call("Grow", b"2000")
            assert too_big_out.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    _run(scenario)


def test_failing_background_task_shuts_the_service_down_with_status_1() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(task_fails_after_s=0.2)) as running:
            assert await running.exit_status() == EXIT_FAILURE
            # Nobody asked it to stop: the failed task did, and it was not cancelled but failed.
            assert running.service.events == ["start", "stop"]

    _run(scenario)


def test_start_failure_exits_1_and_still_stops_the_service() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(fail_start=True), wait_ready=False) as running:
            assert await running.exit_status() == EXIT_FAILURE
            assert running.service.events == ["start", "stop", "task cancelled"]

    _run(scenario)


def test_shutdown_requested_during_start_up_cancels_the_start() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(start_delay_s=30), wait_ready=False) as running:
            await asyncio.sleep(0.2)
            running.stop.set()
            assert await running.exit_status() == EXIT_OK
            assert running.service.events == ["start", "start cancelled", "stop", "task cancelled"]

    _run(scenario)


def test_service_stop_that_overruns_the_deadline_is_abandoned_with_status_1() -> None:
    async def scenario() -> None:
        async with _running(Behaviour(stop_hangs=True), shutdown_timeout_ms="300") as running:
            started = time.monotonic()
            running.stop.set()
            assert await running.exit_status() == EXIT_FAILURE
            assert time.monotonic() - started < 1.0

    _run(scenario)


def test_task_that_ignores_cancellation_is_reported_within_the_deadline() -> None:
    async def scenario() -> None:
        async with _running(
            Behaviour(task_ignores_cancel=True), shutdown_timeout_ms="300"
        ) as running:
            started = time.monotonic()
            running.stop.set()
            assert await running.exit_status() == EXIT_FAILURE
            assert time.monotonic() - started < 1.0
            assert running.service.events[-1] == "task cancelled"

    _run(scenario)


def test_busy_port_fails_start_up_with_the_reason_before_the_service_exists(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        with socket.socket() as holder:
            # As a grpc server with default options does: with SO_REUSEPORT on both sides, a
            # second server could bind the same port and silently take half its connections.
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            service = ProbeService(Behaviour())
            spec = ServiceSpec("probe", DEFINITION, (), lambda config: service)
            status = await serve(spec, _config(port), stop=asyncio.Event())
            assert status == EXIT_FAILURE
            assert service.events == []

    with caplog.at_level(logging.ERROR, logger="brook.server"):
        _run(scenario)
    [record] = [r for r in caplog.records if r.getMessage() == "cannot listen"]
    assert record.__dict__["reason"] == "address already in use"


def test_task_owner_refuses_new_tasks_once_closed() -> None:
    async def scenario() -> None:
        owner = TaskOwner(on_failure=lambda error: None)
        assert await owner.close(timeout_s=0.1)

        async def nothing() -> None:
            return None

        with pytest.raises(RuntimeError, match="the service is shutting down"):
            owner.spawn(nothing(), name="late")

    _run(scenario)
