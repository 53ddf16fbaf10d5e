"""The image and the host-network compose topology, built and run for real.

Opt-in: skipped unless BROOK_DOCKER_TESTS=1 (`.ci/run` sets it after `tools/install-docker`);
with it set, anything missing (the engine, Compose, debootstrap, a Debian mirror, PyPI) fails
the test rather than skipping it. Nothing here needs an image registry: Brook and its
dependencies are built into wheels on this machine, the base image is a debootstrapped bookworm
(tools/docker-base-image, kept between runs), and the image is built from deploy/Dockerfile
with `INSTALL_FROM=wheels` and no network at all.

The topology is deploy/docker-compose.host.yml with every port shifted by a free port offset
(as `brook cluster up --port-offset` shifts them), under a project name of its own, so it runs
beside other tests and clusters on the machine. Containers use the host's network only: the
test checks that no compose network exists and every container's network mode is `host`.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from cluster_fixture import free_port_offset
from replica_logs import read_to_high_watermarks

from brook.client import Admin, NewTopic, Producer
from brook.launcher import LocalCluster, Role

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("BROOK_DOCKER_TESTS") != "1",
        reason="opt-in: BROOK_DOCKER_TESTS=1 (after tools/install-docker)",
    ),
]

ROOT: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = ROOT / "deploy"
WHEELS: Final = DEPLOY / "wheels"
BASE_IMAGE: Final = "brook-base:bookworm"
# Kept after the test, so the next run's build reuses its layers.
IMAGE: Final = "brook:docker-test"
PROJECT_LABEL: Final = "com.docker.compose.project"

WHEEL_BUILD_TIMEOUT_S: Final = 600
BASE_IMAGE_TIMEOUT_S: Final = 600
IMAGE_BUILD_TIMEOUT_S: Final = 600
DOCKER_TIMEOUT_S: Final = 60
# `up -d` waits for each role to be healthy before starting the next (depends_on).
COMPOSE_UP_TIMEOUT_S: Final = 300
HEALTHY_TIMEOUT_S: Final = 120
HEALTH_POLL_S: Final = 1.0
COMPOSE_DOWN_TIMEOUT_S: Final = 120
CLIENT_TIMEOUT_S: Final = 30.0
LOG_TAIL_LINES: Final = 80
RECORDS: Final = 200
REPLICAS: Final = 3
TEST_TIMEOUT_S: Final = 900


# Above the suite's 300 s: a first run debootstraps the base image (~80 s) on a shared machine.
@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_host_network_topology_serves_kafka_and_grpc_clients(tmp_path: Path) -> None:
    compose = _compose_command()
    _build_image()
    offset = free_port_offset(tmp_path / "probe")
    plan = LocalCluster(tmp_path / "plan", port_offset=offset)
    compose_file = _shifted_host_compose(tmp_path, offset)

    with _running(compose, compose_file, plan.names()) as project:
        assert _docker("network", "ls", "-q", "--filter", f"label={PROJECT_LABEL}={project}") == ""
        assert set(_inspect(project, "{{.HostConfig.NetworkMode}}").values()) == {"host"}

        kafka_topic = "through-kafka"
        sent = _kafka_round_trip(plan.kafka_bootstrap_servers, kafka_topic)
        # The gateway wrote to the storage nodes' log: the SDK reads the same records there.
        assert _sdk_read(plan, kafka_topic) == sent
        _sdk_round_trip(plan, "through-grpc")


def _compose_command() -> list[str]:
    """Compose v2 (`docker compose`) when the docker CLI has it, else Compose v1."""
    if shutil.which("docker") is None:
        pytest.fail("no docker CLI: run tools/install-docker")
    probe = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, timeout=DOCKER_TIMEOUT_S
    )
    if probe.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose`: run tools/install-docker")


def _run(command: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> str:
    """``command``'s stdout; fails the test with its output if it fails or overruns."""
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{' '.join(command)} did not finish within {timeout_s} s: {expired.stderr}")
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
        )
    return result.stdout


def _docker(*args: str, timeout_s: float = DOCKER_TIMEOUT_S) -> str:
    return _run(["docker", *args], timeout_s).strip()


def _build_image() -> None:
    """IMAGE from this checkout, offline: wheels built here, the debootstrapped base image."""
    _docker("info")
    started = time.monotonic()
    _run([str(ROOT / "tools" / "docker-base-image"), BASE_IMAGE], BASE_IMAGE_TIMEOUT_S)
    print(f"base image: {time.monotonic() - started:.1f} s")
    # Wheels with C code are built for this interpreter; the image's must be the same version.
    version = "import sys; print(*sys.version_info[:2])"
    image_python = _docker("run", "--rm", "--network", "none", BASE_IMAGE, "python3", "-c", version)
    assert image_python == f"{sys.version_info[0]} {sys.version_info[1]}", (
        f"{BASE_IMAGE} has Python {image_python}; the wheels would be for {sys.version}"
    )
    for stale in WHEELS.glob("*.whl"):
        stale.unlink()
    try:
        started = time.monotonic()
        pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", str(ROOT), "-w", str(WHEELS)]
        _run(pip_wheel, WHEEL_BUILD_TIMEOUT_S)
        print(f"wheels: {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        build = ["docker", "build", "--quiet", "--network", "none", "-t", IMAGE]
        build += ["-f", str(DEPLOY / "Dockerfile"), "--build-arg", f"BASE_IMAGE={BASE_IMAGE}"]
        build += ["--build-arg", "INSTALL_FROM=wheels", str(ROOT)]
        previous = _image_id(IMAGE)
        # The legacy builder: the one every docker CLI has, without the buildx plugin.
        _run(build, IMAGE_BUILD_TIMEOUT_S, env={"DOCKER_BUILDKIT": "0"})
        print(f"image: {time.monotonic() - started:.1f} s")
        if previous not in (None, _image_id(IMAGE)):
            # The last run's image, untagged now: runs would pile them up. Another session's
            # containers may still use it; then it stays.
            subprocess.run(
                ["docker", "rmi", previous], capture_output=True, timeout=DOCKER_TIMEOUT_S
            )
    finally:
        for wheel in WHEELS.glob("*.whl"):
            wheel.unlink()


def _image_id(image: str) -> str | None:
    found = _docker("images", "-q", "--no-trunc", image)
    return found or None


def _shifted_host_compose(directory: Path, offset: int) -> Path:
    """deploy/docker-compose.host.yml with every port moved up by ``offset`` and IMAGE for
    every service (nothing to build), written to ``directory``."""
    parsed = yaml.safe_load((DEPLOY / "docker-compose.host.yml").read_text())
    services: dict[str, Any] = parsed["services"]
    for service in services.values():
        del service["build"]
        service["image"] = IMAGE
        environment = service["environment"]
        if "BROOK_KAFKA_NODE_PORT_BASE" in environment:
            base = int(environment["BROOK_KAFKA_NODE_PORT_BASE"]) + offset
            environment["BROOK_KAFKA_NODE_PORT_BASE"] = str(base)
    # Every other port is written 127.0.0.1:PORT: listeners, quorum addresses, health checks.
    text = re.sub(
        r"127\.0\.0\.1:(\d+)",
        lambda match: f"127.0.0.1:{int(match[1]) + offset}",
        yaml.safe_dump({"services": services, "volumes": parsed["volumes"]}, sort_keys=False),
    )
    path = directory / "docker-compose.host.yml"
    path.write_text(text)
    return path


@contextmanager
def _running(compose: list[str], compose_file: Path, services: list[str]) -> Iterator[str]:
    """The topology of ``compose_file`` up with every service healthy, under a project name of
    its own (yielded); its containers' logs printed if the block fails; always taken down with
    its volumes, leaving no container or volume of the project behind."""
    project = f"brooktest{secrets.token_hex(4)}"
    # Compose interpolates it for every command, `down` included.
    env = {"BROOK_QUORUM_PASSWORD": secrets.token_hex(16)}
    command = [*compose, "-p", project, "-f", str(compose_file)]
    try:
        started = time.monotonic()
        _run([*command, "up", "-d", "--no-build"], COMPOSE_UP_TIMEOUT_S, env)
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        expected = dict.fromkeys(services, "healthy")
        while (health := _health(project)) != expected:
            assert time.monotonic() < deadline, (
                f"not all healthy in {HEALTHY_TIMEOUT_S} s: {health}"
            )
            time.sleep(HEALTH_POLL_S)
        print(f"up and healthy: {time.monotonic() - started:.1f} s")
        yield project
    except BaseException:
        _print_logs([*command, "logs", "--no-color", "--tail", str(LOG_TAIL_LINES)], env)
        raise
    finally:
        started = time.monotonic()
        try:
            _run([*command, "down", "-v", "--remove-orphans"], COMPOSE_DOWN_TIMEOUT_S, env)
        finally:
            _remove_leftovers(project)
        print(f"down: {time.monotonic() - started:.1f} s")


def _print_logs(command: list[str], env: Mapping[str, str]) -> None:
    """Prints what ``command`` (compose logs) says, within a bound, whatever it says."""
    try:
        logs = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_S,
            env={**os.environ, **env},
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"--- no container logs: `logs` took over {DOCKER_TIMEOUT_S} s ---")
        return
    print(f"--- container logs (last {LOG_TAIL_LINES} lines each) ---\n{logs.stdout}{logs.stderr}")


def _health(project: str) -> dict[str, str]:
    """Service name -> health status of each of the project's containers."""
    return _inspect(project, "{{.State.Health.Status}}")


def _inspect(project: str, template: str) -> dict[str, str]:
    """Service name -> ``template`` applied to its container, for each of the project's."""
    ids = _docker("ps", "-aq", "--filter", f"label={PROJECT_LABEL}={project}").split()
    if not ids:
        return {}
    service = '{{index .Config.Labels "com.docker.compose.service"}}'
    lines = _docker("inspect", "--format", f"{service} {template}", *ids).splitlines()
    return dict(line.split(" ", 1) for line in lines)


def _remove_leftovers(project: str) -> None:
    """Removes whatever of ``project`` is left (after a failed `down`); fails if any was."""
    label = f"label={PROJECT_LABEL}={project}"
    containers = _docker("ps", "-aq", "--filter", label).split()
    volumes = _docker("volume", "ls", "-q", "--filter", label).split()
    if containers:
        _docker("rm", "-f", "-v", *containers)
    if volumes:
        _docker("volume", "rm", "-f", *volumes)
    assert containers == volumes == [], f"left after `down -v`: {containers} {volumes}"


def _kafka_round_trip(bootstrap: str, topic: str) -> list[bytes]:
    """RECORDS values produced to a new one-partition topic through the gateway with
    confluent-kafka (idempotent, acks=all) and read back from offset 0: each exactly once, in
    order, at consecutive offsets. The values."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, REPLICAS)])[topic].result(CLIENT_TIMEOUT_S)
    sent = [b"kafka-%05d" % i for i in range(RECORDS)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    delivered: list[tuple[Any, int]] = []
    for value in sent:
        producer.produce(
            topic, value, partition=0, on_delivery=lambda e, m: delivered.append((e, m.offset()))
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert delivered == [(None, offset) for offset in range(RECORDS)]

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False}
    )
    consumed: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(consumed) < RECORDS:
            assert time.monotonic() < deadline, f"{len(consumed)} of {RECORDS} records consumed"
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                consumed.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert consumed == list(enumerate(sent))
    return sent


def _sdk_round_trip(plan: LocalCluster, topic: str) -> None:
    """RECORDS values produced to a new one-partition topic with Brook's SDK (gRPC to the
    controllers and storage nodes, acks=all) and read back: each once, in order."""
    with Admin(plan.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, 1, REPLICAS)]) == {topic: None}
    sent = [b"grpc-%05d" % i for i in range(RECORDS)]
    bootstrap = plan.bootstrap_servers(Role.STORAGE_NODE)
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        futures = [producer.send(topic, value) for value in sent]
        offsets = [future.result(CLIENT_TIMEOUT_S).offset for future in futures]
    assert offsets == list(range(RECORDS))
    assert _sdk_read(plan, topic) == sent


def _sdk_read(plan: LocalCluster, topic: str) -> list[bytes | None]:
    """The values of partition 0 of ``topic``, from offset 0 to the high watermark, read with
    the SDK's consumer from the storage nodes."""
    bootstrap = plan.bootstrap_servers(Role.STORAGE_NODE)
    _, records = read_to_high_watermarks(bootstrap, topic, [0], CLIENT_TIMEOUT_S)
    offsets = [record.offset for record in records[0]]
    assert offsets == list(range(len(offsets)))
    return [record.value for record in records[0]]
