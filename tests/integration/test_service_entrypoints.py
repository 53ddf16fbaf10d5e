"""Every service as a real process through its entry points: it reports gRPC health, exits 0
within 5 s of SIGTERM, and refuses bad configuration with exit status 2 and one line on stderr
before binding or creating anything."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brook.config import ENV_PREFIX

pytestmark = pytest.mark.integration

SIGTERM_EXIT_BOUND_S = 5.0
STARTUP_TIMEOUT_S = 30.0
CONFIG_ERROR_EXIT_TIMEOUT_S = 30.0
RPC_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 0.05
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class ServiceUnderTest:
    package: str
    listener_names: tuple[str, ...]
    health_names: tuple[str, ...]
    data_dir: str | None
    """Where its data directory lands by default, relative to the working directory."""


SERVICES = {
    "storage-node": ServiceUnderTest(
        "brook_storage_node",
        ("GRPC",),
        ("brook.v1.StorageService", "brook.v1.ReplicaService"),
        ".brook/storage-1",
    ),
    "controller": ServiceUnderTest(
        "brook_controller",
        ("GRPC", "RAFT"),
        ("brook.v1.ControllerService", "brook.v1.AdminService"),
        ".brook/controller-1",
    ),
    "group-coordinator": ServiceUnderTest(
        "brook_group_coordinator",
        ("GRPC",),
        ("brook.v1.GroupCoordinatorService",),
        ".brook/group-coordinator-1",
    ),
    "gateway": ServiceUnderTest("brook_gateway", ("GRPC", "PLAINTEXT"), (), None),
}


def _free_ports(count: int) -> list[int]:
    """Distinct ports free right now (all held open together, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for held in sockets:
            held.bind(("127.0.0.1", 0))
        return [held.getsockname()[1] for held in sockets]
    finally:
        for held in sockets:
            held.close()


def _settings(service: ServiceUnderTest) -> dict[str, str]:
    """node.id 1 and every listener on a free loopback port (the controller a quorum of one)."""
    ports = dict(zip(service.listener_names, _free_ports(len(service.listener_names)), strict=True))
    settings = {
        "node.id": "1",
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
    }
    if "RAFT" in ports:
        settings["controller.quorum.voters"] = f"1@127.0.0.1:{ports['RAFT']}"
    if service.package == "brook_storage_node":
        # Stand-alone: without static.topics a storage node waits for the controllers before it
        # reports SERVING (as Kafka's broker does), and this test starts no controller.
        settings["static.topics"] = "entrypoint:1"
    return settings


def _grpc_address(settings: dict[str, str]) -> str:
    grpc_listener = next(e for e in settings["listeners"].split(",") if e.startswith("GRPC://"))
    return grpc_listener.removeprefix("GRPC://")


@dataclass
class ServiceProcess:
    popen: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {timeout_s} s; stderr:\n{self.stderr()}")


Launch = Callable[[Sequence[str]], ServiceProcess]


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="brook-entrypoints-") as path:
        yield Path(path)


@pytest.fixture
def launch(workdir: Path) -> Iterator[Launch]:
    """Starts commands in `workdir` without the caller's BROOK_* variables; kills leftovers."""
    started: list[ServiceProcess] = []
    environment = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}

    def start(command: Sequence[str]) -> ServiceProcess:
        stderr_path = workdir / f"stderr-{len(started)}.txt"
        with stderr_path.open("wb") as stderr:
            popen = subprocess.Popen(
                list(command),
                cwd=workdir,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        process = ServiceProcess(popen, stderr_path)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            if process.popen.poll() is None:
                process.popen.kill()
            process.popen.wait(KILL_WAIT_S)


def _python_module(package: str, *args: str) -> list[str]:
    return [sys.executable, "-m", package, *args]


def _overrides(settings: dict[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("--override", f"{key}={value}")]


def _wait_serving(process: ServiceProcess, stub: health_pb2_grpc.HealthStub) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if process.popen.poll() is not None:
            pytest.fail(f"exited {process.popen.returncode} during start-up:\n{process.stderr()}")
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=RPC_TIMEOUT_S)
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"not SERVING after {STARTUP_TIMEOUT_S} s:\n{process.stderr()}")
        time.sleep(POLL_INTERVAL_S)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_serves_health_then_exits_0_within_5_s_of_sigterm(
    name: str, launch: Launch, workdir: Path
) -> None:
    service = SERVICES[name]
    settings = _settings(service)
    if name in ("group-coordinator", "gateway"):
        # A coordinator or gateway is SERVING only once it has joined the cluster, so it gets
        # a controller (a quorum of one) to join.
        controller_settings = _settings(SERVICES["controller"])
        controller = launch(_python_module("brook_controller", *_overrides(controller_settings)))
        with grpc.insecure_channel(_grpc_address(controller_settings)) as channel:
            _wait_serving(controller, health_pb2_grpc.HealthStub(channel))
        settings["controller.quorum.bootstrap.servers"] = _grpc_address(controller_settings)
    properties = workdir / "server.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    process = launch(_python_module(service.package, "--config", str(properties)))

    with grpc.insecure_channel(_grpc_address(settings)) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        _wait_serving(process, stub)
        for health_name in ("", *service.health_names):
            response = stub.Check(
                health_pb2.HealthCheckRequest(service=health_name), timeout=RPC_TIMEOUT_S
            )
            assert response.status == health_pb2.HealthCheckResponse.SERVING, health_name
        if service.data_dir is not None:
            assert (workdir / service.data_dir).is_dir()

        # An open Watch stream is an in-flight RPC: it must see NOT_SERVING at once, and it
        # must not hold the process past its shutdown deadline.
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=SIGTERM_EXIT_BOUND_S)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        signalled = time.monotonic()
        process.popen.send_signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        status = process.wait(SIGTERM_EXIT_BOUND_S)
        elapsed_s = time.monotonic() - signalled
        watch.cancel()

    assert status == 0, process.stderr()
    assert elapsed_s < SIGTERM_EXIT_BOUND_S
    log = process.stderr()
    assert f'msg="service ready" listener=GRPC://{_grpc_address(settings)}' in log
    assert f"service={name} node_id=1" in log
    assert "msg=stopped exit_status=0" in log


def test_sigint_shuts_down_as_gracefully_as_sigterm(launch: Launch) -> None:
    # A stand-alone storage node (static.topics): it needs no other process to be SERVING.
    settings = _settings(SERVICES["storage-node"])
    process = launch(_python_module("brook_storage_node", *_overrides(settings)))
    with grpc.insecure_channel(_grpc_address(settings)) as channel:
        _wait_serving(process, health_pb2_grpc.HealthStub(channel))
    process.popen.send_signal(signal.SIGINT)

    assert process.wait(SIGTERM_EXIT_BOUND_S) == 0
    assert 'msg="shutdown requested" signal=SIGINT' in process.stderr()


def test_second_signal_exits_at_once_without_waiting_for_the_grace_period(
    launch: Launch,
) -> None:
    settings = {**_settings(SERVICES["storage-node"]), "shutdown.timeout.ms": "60000"}
    process = launch(_python_module("brook_storage_node", *_overrides(settings)))
    with grpc.insecure_channel(_grpc_address(settings)) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        _wait_serving(process, stub)
        # An endless stream that would hold a graceful shutdown for the whole minute.
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=SIGTERM_EXIT_BOUND_S)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        process.popen.send_signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        process.popen.send_signal(signal.SIGTERM)
        status = process.wait(SIGTERM_EXIT_BOUND_S)
        watch.cancel()

    assert status == 128 + signal.SIGTERM
    assert "brook-storage-node: second SIGTERM, exiting immediately" in process.stderr()


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_malformed_listeners_exit_2_naming_the_setting(
    name: str, launch: Launch, workdir: Path
) -> None:
    service = SERVICES[name]
    process = launch(
        _python_module(
            service.package, "--override", "node.id=1", "--override", "listeners=nonsense"
        )
    )

    assert process.wait(CONFIG_ERROR_EXIT_TIMEOUT_S) == 2
    assert process.stderr() == (
        f'brook-{name}: invalid configuration: listeners="nonsense" is not a valid listener '
        "list: 'nonsense' is not of the form NAME://host:port (from --override)\n"
    )
    assert not (workdir / ".brook").exists()


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_unusable_tls_files_exit_2_naming_the_file(
    name: str, launch: Launch, workdir: Path
) -> None:
    service = SERVICES[name]
    missing = workdir / "missing.pem"
    process = launch(
        _python_module(
            service.package,
            *_overrides(_settings(service)),
            "--override",
            "listener.security.protocol.map=GRPC:SSL",
            "--override",
            f"ssl.keystore.location={missing}",
        )
    )

    assert process.wait(CONFIG_ERROR_EXIT_TIMEOUT_S) == 2
    assert (
        f"brook-{name}: invalid TLS configuration: ssl.keystore.location={missing}: "
        "No such file or directory\n"
    ) in process.stderr()
    assert not (workdir / ".brook").exists()


@contextlib.contextmanager
def _port_held(address: str) -> Iterator[None]:
    host, port = address.split(":")
    with socket.socket() as holder:
        holder.bind((host, int(port)))
        holder.listen()
        yield


def test_malformed_value_exits_2_before_binding_anything(launch: Launch, workdir: Path) -> None:
    settings = _settings(SERVICES["storage-node"])
    # Had the service tried to bind before validating, it would have failed on this port.
    with _port_held(_grpc_address(settings)):
        process = launch(
            _python_module(
                "brook_storage_node", *_overrides(settings), "--override", "log.segment.bytes=ten"
            )
        )
        assert process.wait(CONFIG_ERROR_EXIT_TIMEOUT_S) == 2

    assert process.stderr() == (
        'brook-storage-node: invalid configuration: log.segment.bytes="ten" is not an integer '
        "(from --override)\n"
    )
    assert not (workdir / ".brook").exists()


def test_busy_grpc_port_exits_1_saying_why(launch: Launch, workdir: Path) -> None:
    settings = _settings(SERVICES["group-coordinator"])
    with _port_held(_grpc_address(settings)):
        process = launch(_python_module("brook_group_coordinator", *_overrides(settings)))
        assert process.wait(CONFIG_ERROR_EXIT_TIMEOUT_S) == 1

    stderr = process.stderr()
    assert f'msg="cannot listen" listener=GRPC://{_grpc_address(settings)}' in stderr
    assert 'reason="address already in use"' in stderr
    assert not (workdir / ".brook").exists()


def _venv_script(name: str) -> str:
    script = Path(sys.executable).with_name(name)
    assert script.exists(), f"{name} is not installed next to {sys.executable}"
    return str(script)


@pytest.mark.parametrize(
    ("command", "prog"),
    [
        (("brook-gateway",), "brook-gateway"),
        (("brook", "gateway"), "brook gateway"),
    ],
)
def test_console_scripts_run_the_same_service(
    command: tuple[str, ...], prog: str, launch: Launch
) -> None:
    process = launch(
        [
            _venv_script(command[0]),
            *command[1:],
            "--override",
            "node.id=1",
            "--override",
            "max.connections=0",
        ]
    )

    assert process.wait(CONFIG_ERROR_EXIT_TIMEOUT_S) == 2
    assert process.stderr() == (
        f'{prog}: invalid configuration: max.connections="0" is less than the minimum 1 '
        "(from --override)\n"
    )
