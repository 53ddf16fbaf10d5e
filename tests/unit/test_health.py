"""gRPC health checks (brook.health) against a real in-process gRPC server."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from brook.health import HealthStatus, check_health, main, wait_until_serving
from brook.ports import allocate_free_ports

SERVER_STOP_GRACE_S = 1


class _HealthServer:
    def __init__(self) -> None:
        self.port = allocate_free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.servicer = health.HealthServicer()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, self.server)
        self.server.add_insecure_port(self.address)

    def set(self, status: int) -> None:
        self.servicer.set("", status)


@pytest.fixture
def health_server() -> Generator[_HealthServer, None, None]:
    server = _HealthServer()
    server.server.start()
    try:
        yield server
    finally:
        server.server.stop(SERVER_STOP_GRACE_S).wait(SERVER_STOP_GRACE_S + 1)


def test_check_reports_serving_and_not_serving(health_server: _HealthServer) -> None:
    health_server.set(health_pb2.HealthCheckResponse.SERVING)
    assert check_health(health_server.address, timeout_ms=2_000).status is HealthStatus.SERVING

    health_server.set(health_pb2.HealthCheckResponse.NOT_SERVING)
    assert check_health(health_server.address, timeout_ms=2_000).status is HealthStatus.NOT_SERVING


def test_check_of_an_unknown_service_says_so(health_server: _HealthServer) -> None:
    health_server.set(health_pb2.HealthCheckResponse.SERVING)

    result = check_health(health_server.address, timeout_ms=2_000, service="no.such.Service")

    assert result.status is HealthStatus.SERVICE_UNKNOWN


def test_check_of_a_port_nobody_listens_on_is_unreachable_within_its_timeout() -> None:
    address = f"127.0.0.1:{allocate_free_ports(1)[0]}"
    started = time.monotonic()

    result = check_health(address, timeout_ms=300)

    assert result.status is HealthStatus.UNREACHABLE
    assert result.detail == "DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("address", ["localhost", "host:port", ":80", "host:0", "host:70000"])
def test_malformed_address_is_rejected_naming_it(address: str) -> None:
    with pytest.raises(ValueError, match="invalid address"):
        check_health(address)


def test_wait_returns_once_the_server_turns_serving(health_server: _HealthServer) -> None:
    health_server.set(health_pb2.HealthCheckResponse.NOT_SERVING)
    timer = threading.Timer(0.3, health_server.set, args=(health_pb2.HealthCheckResponse.SERVING,))
    timer.start()
    try:
        result = wait_until_serving(health_server.address, timeout_ms=10_000)
    finally:
        timer.cancel()

    assert result.status is HealthStatus.SERVING


def test_wait_gives_up_at_its_timeout_with_the_last_status(health_server: _HealthServer) -> None:
    health_server.set(health_pb2.HealthCheckResponse.NOT_SERVING)
    started = time.monotonic()

    result = wait_until_serving(health_server.address, timeout_ms=500)

    assert result.status is HealthStatus.NOT_SERVING
    assert 0.4 < time.monotonic() - started < 3


def test_wait_stops_when_asked_to_abort(health_server: _HealthServer) -> None:
    health_server.set(health_pb2.HealthCheckResponse.NOT_SERVING)

    result = wait_until_serving(
        health_server.address, timeout_ms=30_000, abort_reason=lambda: "process exited"
    )

    assert result.detail == "process exited"
    assert not result.serving


def test_health_command_exit_status_says_serving_or_not(
    health_server: _HealthServer, capsys: pytest.CaptureFixture[str]
) -> None:
    health_server.set(health_pb2.HealthCheckResponse.SERVING)
    assert main([health_server.address]) == 0
    assert capsys.readouterr().out.strip() == f"{health_server.address}: SERVING"

    health_server.set(health_pb2.HealthCheckResponse.NOT_SERVING)
    assert main([health_server.address, "--timeout-ms", "1000"]) == 1


def test_health_command_rejects_bad_usage_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["not-an-address"]) == 2
    assert "invalid address 'not-an-address'" in capsys.readouterr().err
    assert main(["127.0.0.1:9", "--timeout-ms", "0"]) == 2
