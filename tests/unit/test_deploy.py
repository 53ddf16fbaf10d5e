"""deploy/: the compose files, the role configs, the Dockerfile and the image's entrypoint.

These check structure and consistency without a Docker engine: the compose topology is the one
`brook cluster up` runs (names, node ids, ports), every reference resolves, and the settings
are the ones the services read (parsed with brook.config, as the services do).
tests/docker/test_compose.py builds the image and runs the host-network topology for real.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from brook.cli import load_service_spec
from brook.config import (
    config_key_for_env,
    load_config,
    load_properties,
    parse_listeners,
    parse_voters,
)
from brook.launcher import START_ORDER, LocalCluster, Role

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DATA_DIR = "/var/lib/brook"
ENTRYPOINT_TIMEOUT_S = 30


COMPOSE_FILES = ["docker-compose.yml", "docker-compose.host.yml"]
# What the host-network variant may change of a service of docker-compose.yml: its network and
# addresses (the environment's other settings are checked against the launcher's plan).
HOST_NETWORK_KEYS = {"network_mode", "ports", "environment"}


def _load_compose(name: str) -> dict[str, Any]:
    parsed = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(parsed, dict)
    return parsed


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load_compose("docker-compose.yml")


@pytest.fixture(scope="module")
def host_compose() -> dict[str, Any]:
    return _load_compose("docker-compose.host.yml")


@pytest.fixture(scope="module")
def local_plan(tmp_path_factory: pytest.TempPathFactory) -> LocalCluster:
    """The plan of `brook cluster up` with its defaults (nothing is started)."""
    return LocalCluster(tmp_path_factory.mktemp("plan"), port_offset=0)


def _settings(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's BROOK_* environment as the setting names services read."""
    settings = {}
    for name, value in service["environment"].items():
        key = config_key_for_env(name)
        assert key is not None, f"{name} is not a BROOK_ setting"
        settings[key] = str(value)
    return settings


def _role_config(role: Role) -> dict[str, str]:
    path = DEPLOY / "config" / f"{role.value}.properties"
    return {key: raw.value for key, raw in load_properties(path).items()}


def test_compose_runs_the_processes_of_brook_cluster_up(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    assert list(compose["services"]) == local_plan.names()
    for name, spec in local_plan.processes.items():
        service = compose["services"][name]
        settings = _settings(service)
        assert service["command"] == [spec.role.value], name
        assert settings["node.id"] == str(spec.node_id), name
        bound = parse_listeners(settings["listeners"].split(","))
        assert {(lst.name, lst.host, lst.port) for lst in bound} == {
            (listener, "0.0.0.0", port) for listener, port in spec.ports.items()
        }, name
        # A gateway's per-broker Kafka ports: the same base as the launcher's.
        base = local_plan.config(name).get("kafka.node.port.base")
        assert settings.get("kafka.node.port.base") == base, name


def test_compose_advertises_addresses_others_can_reach(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    for name, spec in local_plan.processes.items():
        advertised = parse_listeners(
            _settings(compose["services"][name])["advertised.listeners"].split(",")
        )
        for listener in advertised:
            assert listener.port == spec.ports[listener.name], name
            # Kafka clients connect from the host through the published port; everything else
            # is reached by other containers through the compose network's service names.
            expected_host = "127.0.0.1" if listener.name == "PLAINTEXT" else name
            assert listener.host == expected_host, (name, listener)


def test_compose_publishes_every_client_port_on_host_loopback_only(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    for name, spec in local_plan.processes.items():
        published = set(compose["services"][name]["ports"])
        expected = {
            f"127.0.0.1:{port}:{port}"
            for listener, port in spec.ports.items()
            if listener != "RAFT"
        }
        # Kafka clients on the host reach each broker id at its own port of the gateway.
        expected |= {f"127.0.0.1:{p}:{p}" for p in local_plan.kafka_node_ports(name).values()}
        assert published == expected, name


def test_compose_health_checks_ask_each_process_for_grpc_health(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    for name, spec in local_plan.processes.items():
        check = compose["services"][name]["healthcheck"]
        assert check["test"] == ["CMD", "brook", "health", f"127.0.0.1:{spec.ports['GRPC']}"]
        for bound in ("interval", "timeout", "retries", "start_period"):
            assert bound in check, (name, bound)


def test_compose_starts_each_role_after_the_roles_before_it_are_healthy(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    rank = {role: position for position, role in enumerate(START_ORDER)}
    for name, spec in local_plan.processes.items():
        depends_on = compose["services"][name].get("depends_on", {})
        for dependency, condition in depends_on.items():
            assert condition == {"condition": "service_healthy"}, (name, dependency)
            assert rank[local_plan.processes[dependency].role] < rank[spec.role], (name, dependency)
        if spec.role is not Role.CONTROLLER:
            previous = START_ORDER[rank[spec.role] - 1]
            assert set(local_plan.names(previous)) <= set(depends_on), name


def test_compose_keeps_each_stateful_process_data_in_its_own_named_volume(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    declared = set(compose["volumes"])
    used = []
    for name, spec in local_plan.processes.items():
        volumes = compose["services"][name].get("volumes", [])
        if spec.role is Role.GATEWAY:
            assert volumes == [], "gateways are stateless"
            continue
        assert volumes == [f"{name}:{DATA_DIR}"], name
        used.append(name)
    assert declared == set(used)


@pytest.mark.parametrize("compose_file", COMPOSE_FILES)
def test_compose_services_share_one_image_built_from_the_repository(compose_file: str) -> None:
    for name, service in _load_compose(compose_file)["services"].items():
        assert service["image"] == "brook:dev", name
        build = service["build"]
        assert (build["context"], build["dockerfile"]) == ("..", "deploy/Dockerfile"), name
        assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()
        # The Dockerfile's build arguments, each with the Dockerfile's own default.
        assert build["args"] == {
            "BASE_IMAGE": "${BROOK_BASE_IMAGE:-python:3.11-slim}",
            "INSTALL_FROM": "${BROOK_INSTALL_FROM:-source}",
        }, name


@pytest.mark.parametrize("compose_file", COMPOSE_FILES)
def test_compose_files_leave_the_project_name_to_the_command_line(compose_file: str) -> None:
    # Compose 1.29 (Debian's docker-compose) rejects a top-level `name`: it is given with -p.
    assert "name" not in _load_compose(compose_file)


def test_host_compose_is_the_default_topology_on_the_hosts_network(
    compose: dict[str, Any], host_compose: dict[str, Any]
) -> None:
    assert list(host_compose["services"]) == list(compose["services"])
    assert host_compose["volumes"] == compose["volumes"]
    for name, service in host_compose["services"].items():
        default = compose["services"][name]
        assert service["network_mode"] == "host", name
        assert "ports" not in service and "networks" not in service, name
        # The image's build runs its RUN steps on the host's network too.
        assert service["build"] == {**default["build"], "network": "host"}, name
        other_keys = set(service) | set(default)
        same = {key for key in other_keys - HOST_NETWORK_KEYS if key != "build"}
        assert {k: service.get(k) for k in same} == {k: default.get(k) for k in same}, name


def test_host_compose_gives_each_process_the_addresses_of_brook_cluster_up(
    host_compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    addresses = {
        "listeners",
        "advertised.listeners",
        "controller.quorum.voters",
        "controller.quorum.grpc.endpoints",
        "controller.quorum.bootstrap.servers",
    }
    for name in local_plan.names():
        settings = _settings(host_compose["services"][name])
        # A secret of the deployment, not an address: the plan's is random.
        settings.pop("controller.quorum.password", None)
        planned = local_plan.config(name)
        assert settings == {key: planned[key] for key in settings}, name
        assert addresses & set(planned) <= set(settings), name


def test_role_configs_point_at_the_compose_controllers(
    compose: dict[str, Any], local_plan: LocalCluster
) -> None:
    controllers = [local_plan.processes[n] for n in local_plan.names(Role.CONTROLLER)]
    voters = parse_voters(_role_config(Role.CONTROLLER)["controller.quorum.voters"].split(","))
    assert [(v.node_id, v.host, v.port) for v in voters] == [
        (c.node_id, c.name, c.ports["RAFT"]) for c in controllers
    ]
    bootstrap = ",".join(f"{c.name}:{c.ports['GRPC']}" for c in controllers)
    for role in (Role.STORAGE_NODE, Role.GROUP_COORDINATOR, Role.GATEWAY):
        assert _role_config(role)["controller.quorum.bootstrap.servers"] == bootstrap, role


@pytest.mark.parametrize("compose_file", COMPOSE_FILES)
def test_every_compose_service_config_passes_its_services_own_validation(
    compose_file: str,
) -> None:
    for name, service in _load_compose(compose_file)["services"].items():
        role = service["command"][0]
        environ = {key: str(value) for key, value in service["environment"].items()}

        config = load_config(
            load_service_spec(role).config_def,
            config_path=DEPLOY / "config" / f"{role}.properties",
            environ=environ,
        )

        assert config.unknown_keys == (), name


def test_role_configs_keep_data_on_the_volume() -> None:
    assert _role_config(Role.CONTROLLER)["metadata.log.dir"].startswith(DATA_DIR + "/")
    assert _role_config(Role.STORAGE_NODE)["log.dirs"].startswith(DATA_DIR + "/")
    coordinator = _role_config(Role.GROUP_COORDINATOR)
    assert coordinator["group.coordinator.state.dir"].startswith(DATA_DIR + "/")


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def _dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_dockerfile_builds_on_python_311_slim_and_runs_as_a_non_root_user() -> None:
    instructions = _dockerfile_instructions()
    # The base image is a build argument (tools/docker-base-image builds one offline).
    assert instructions[:2] == [("ARG", "BASE_IMAGE=python:3.11-slim"), ("FROM", "${BASE_IMAGE}")]
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert ("ENTRYPOINT", '["brook-entrypoint"]') in instructions


def test_everything_the_dockerfile_copies_exists_and_is_in_the_build_context() -> None:
    patterns = _dockerignore_patterns()
    sources = []
    for keyword, rest in _dockerfile_instructions():
        if keyword == "COPY":
            words = [word for word in rest.split() if not word.startswith("--")]
            sources += words[:-1]
    assert "deploy/entrypoint.sh" in sources
    for source in sources:
        assert (ROOT / source).exists(), source
        parts = Path(source.rstrip("/")).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = [p for p in patterns for prefix in prefixes if fnmatch.fnmatch(prefix, p)]
        assert excluded == [], f"{source} is excluded from the build context by {excluded}"


def test_dockerfile_builds_with_the_legacy_builder() -> None:
    # Docker's legacy builder (the only one without the buildx plugin) knows no COPY --chmod:
    # the entrypoint is executable in the repository, and COPY keeps the mode.
    for keyword, rest in _dockerfile_instructions():
        if keyword == "COPY":
            flags = [word.split("=")[0] for word in rest.split() if word.startswith("--")]
            assert set(flags) <= {"--chown", "--from"}, rest
    assert os.access(DEPLOY / "entrypoint.sh", os.X_OK)
    assert os.access(ROOT / "tools" / "docker-base-image", os.X_OK)


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    patterns = _dockerignore_patterns()
    for path in (".git", ".venv", ".brook", "node_modules"):
        assert path in patterns, path


def _entrypoint(*args: str) -> subprocess.CompletedProcess[str]:
    # The image's `python` is the one Brook is installed in; here that is this venv's.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return subprocess.run(
        ["sh", str(DEPLOY / "entrypoint.sh"), *args],
        capture_output=True,
        text=True,
        timeout=ENTRYPOINT_TIMEOUT_S,
        check=False,
        env={**os.environ, "PATH": path},
    )


@pytest.mark.parametrize("role", [role.value for role in START_ORDER])
def test_entrypoint_runs_the_named_service_with_its_role_config(role: str) -> None:
    # Outside the image /etc/brook is absent, so the service stops at reading its config file:
    # the message proves which service ran and which file it was given.
    assert not Path("/etc/brook").exists(), "this check needs a machine without /etc/brook"
    result = _entrypoint(role)

    assert result.returncode == 2
    assert f"/etc/brook/{role}.properties" in result.stderr


@pytest.mark.parametrize("args", [[], ["no-such-service-or-command"]])
def test_entrypoint_without_a_service_exits_2_with_usage(args: list[str]) -> None:
    result = _entrypoint(*args)

    assert result.returncode == 2
    assert re.search(
        r"usage: <controller\|storage-node\|group-coordinator\|gateway>", result.stderr
    )


def test_entrypoint_runs_any_other_command_as_given() -> None:
    result = _entrypoint("echo", "brook", "health")

    assert result.returncode == 0
    assert result.stdout == "brook health\n"
