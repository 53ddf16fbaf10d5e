"""Standard gRPC health checks (grpc.health.v1) against any Brook process.

Used by the local launcher to wait for start-up and by container health checks through
``brook health HOST:PORT`` (exit 0 when SERVING, 1 otherwise, 2 on bad usage).
"""

from __future__ import annotations

import argparse
import enum
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brook.rpc.addresses import parse_address
from brook.rpc.channels import ChannelSecurity, channel_options, sync_channel
from brook.tools.options import (
    UsageError,
    add_command_config_argument,
    apply_command_config,
    report_error,
)

HEALTH_CHECK_TIMEOUT_MS_DEFAULT = 2000
# One RPC of a wait loop; short so a wait notices a dead process or an interrupt quickly.
_POLL_RPC_TIMEOUT_MS = 1000
POLL_INTERVAL_MS_DEFAULT = 100
# A server that comes up a moment after the first refused connection is seen within 0.5 s.
_CHANNEL_OPTIONS = channel_options(
    client_id="health", reconnect_backoff_ms=100, reconnect_backoff_max_ms=500
)


class HealthStatus(enum.StrEnum):
    SERVING = "SERVING"
    NOT_SERVING = "NOT_SERVING"
    UNKNOWN = "UNKNOWN"
    SERVICE_UNKNOWN = "SERVICE_UNKNOWN"
    # Not a protocol status: the RPC itself failed (nothing listening, timeout, not gRPC).
    UNREACHABLE = "UNREACHABLE"


@dataclass(frozen=True)
class HealthResult:
    address: str
    status: HealthStatus
    detail: str = ""

    @property
    def serving(self) -> bool:
        return self.status is HealthStatus.SERVING

    def describe(self) -> str:
        suffix = f" ({self.detail})" if self.detail else ""
        return f"{self.address}: {self.status.value}{suffix}"


def _check_address(address: str) -> None:
    try:
        parse_address(address)
    except ValueError as e:
        raise ValueError(f"invalid address {address!r}: {e}") from None


def _check(stub: Any, address: str, service: str, timeout_ms: int) -> HealthResult:
    try:
        # wait_for_ready: a server still binding its port gets the whole timeout to answer,
        # instead of failing on the first refused connection.
        response = stub.Check(
            health_pb2.HealthCheckRequest(service=service),
            timeout=timeout_ms / 1000,
            wait_for_ready=True,
        )
    except grpc.RpcError as error:
        code = error.code() if isinstance(error, grpc.Call) else None
        # The health protocol answers Check for a service it does not know with NOT_FOUND.
        if code is grpc.StatusCode.NOT_FOUND:
            return HealthResult(address, HealthStatus.SERVICE_UNKNOWN, repr(service))
        name = code.name if code is not None else type(error).__name__
        return HealthResult(address, HealthStatus.UNREACHABLE, name)
    status_name = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    try:
        return HealthResult(address, HealthStatus(status_name))
    except ValueError:
        return HealthResult(address, HealthStatus.UNKNOWN, f"status {status_name}")


def check_health(
    address: str,
    *,
    timeout_ms: int = HEALTH_CHECK_TIMEOUT_MS_DEFAULT,
    service: str = "",
    security: ChannelSecurity | None = None,
) -> HealthResult:
    """One health check of ``service`` ("" is the whole server) at ``address``; ``security``
    None: the process's default channel security."""
    _check_address(address)
    if timeout_ms <= 0:
        raise ValueError(f"timeout_ms must be > 0, got {timeout_ms}")
    with sync_channel(address, _CHANNEL_OPTIONS, security) as channel:
        return _check(health_pb2_grpc.HealthStub(channel), address, service, timeout_ms)


def wait_until_serving(
    address: str,
    *,
    timeout_ms: int,
    service: str = "",
    poll_interval_ms: int = POLL_INTERVAL_MS_DEFAULT,
    abort_reason: Callable[[], str | None] = lambda: None,
    security: ChannelSecurity | None = None,
) -> HealthResult:
    """Poll ``address`` until it reports SERVING, ``timeout_ms`` passes, or ``abort_reason``
    returns a reason (for example: the process exited). Returns the last result; the caller
    decides whether anything but SERVING is an error. ``security`` None: the process's
    default channel security.
    """
    _check_address(address)
    if timeout_ms <= 0:
        raise ValueError(f"timeout_ms must be > 0, got {timeout_ms}")
    deadline = time.monotonic() + timeout_ms / 1000
    result = HealthResult(address, HealthStatus.UNREACHABLE, "not checked yet")
    with sync_channel(address, _CHANNEL_OPTIONS, security) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            reason = abort_reason()
            if reason is not None:
                return HealthResult(address, result.status, reason)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return result
            result = _check(stub, address, service, min(remaining_ms, _POLL_RPC_TIMEOUT_MS))
            if result.serving:
                return result
            time.sleep(min(poll_interval_ms, max(remaining_ms, 0)) / 1000)


def add_health_command(subparsers: Any) -> None:
    """Register ``brook health`` on an argparse subparsers object."""
    parser = subparsers.add_parser(
        "health",
        help="check a Brook process's gRPC health (exit 0 when SERVING)",
        description="Ask a Brook process's gRPC health service whether it is SERVING. "
        "Exit status: 0 SERVING, 1 anything else (including unreachable), 2 bad usage.",
    )
    parser.add_argument("address", help="the process's GRPC listener, HOST:PORT")
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=HEALTH_CHECK_TIMEOUT_MS_DEFAULT,
        help=f"how long to wait for an answer (default {HEALTH_CHECK_TIMEOUT_MS_DEFAULT})",
    )
    parser.add_argument("--service", default="", help='service name to check (default "": all)')
    add_command_config_argument(parser)
    parser.set_defaults(func=run_health_command)


def run_health_command(args: argparse.Namespace) -> int:
    try:
        result = check_health(args.address, timeout_ms=args.timeout_ms, service=args.service)
    except ValueError as error:
        print(f"brook health: {error}", file=sys.stderr)
        return 2
    print(result.describe())
    return 0 if result.serving else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m brook.health HOST:PORT``: the same check without the ``brook`` CLI."""
    parser = argparse.ArgumentParser(prog="brook")
    add_health_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["health", *(sys.argv[1:] if argv is None else argv)])
    try:
        apply_command_config(args)
    except UsageError as error:
        return report_error("health", error)
    return run_health_command(args)


if __name__ == "__main__":
    sys.exit(main())
