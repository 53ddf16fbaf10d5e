"""One ``--bootstrap-server`` for every tool: controllers' or storage nodes' GRPC addresses,
whichever is at hand, with ``$BROOK_BOOTSTRAP_SERVERS`` as the default. Against a real cluster
(a controller and a storage node), run as ``brook`` subprocesses: controller-side commands
given a storage node reach the controllers it knows, record tools given a controller reach the
storage nodes it lists, and the option wins over the environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_fixture import ClusterFactory

from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
COMMAND_TIMEOUT_S = 60.0
EXIT_FAILED = 1
EXIT_USAGE = 2
TOPIC = "bootstrapped"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("bootstrap-cli"))
    failed = True
    try:
        yield factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0)
        failed = False
    finally:
        if failed:
            for title, text in factory.log_sections():
                print(f"--- {title} ---\n{text}")
        factory.close(keep_files=failed)


def _brook(*args: str, env: str | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``brook ARGS`` with BROOK_BOOTSTRAP_SERVERS set to ``env`` (unset when None)."""
    environment = {k: v for k, v in os.environ.items() if k != "BROOK_BOOTSTRAP_SERVERS"}
    if env is not None:
        environment["BROOK_BOOTSTRAP_SERVERS"] = env
    return subprocess.run(
        [BROOK, *args],
        input=stdin,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _closed_address() -> str:
    """host:port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_every_tool_takes_a_controller_or_a_storage_node(cluster: LocalCluster) -> None:
    controller = cluster.controller_bootstrap_servers
    storage_node = cluster.bootstrap_servers(Role.STORAGE_NODE)

    # The controllers' command given a storage node, the option winning over the environment.
    created = _brook(
        "topics", "create", "--topic", TOPIC, "--partitions", "2", "--replication-factor", "1",
        "--bootstrap-server", storage_node,
        env=_closed_address(),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    # From the environment alone, a storage node or a controller.
    for env in (storage_node, controller):
        listed = _brook("topics", "list", env=env)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == [TOPIC]

    # The record tools given the controller find the storage node.
    produced = _brook(
        "console-producer", "--topic", TOPIC, "--bootstrap-server", controller, stdin="a\nb\nc\n"
    )
    assert produced.returncode == 0, produced.stderr
    consumed = _brook(
        "console-consumer", "--topic", TOPIC, "--from-beginning", "--max-messages", "3",
        "--timeout-ms", "20000",
        env=controller,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["a", "b", "c"]

    # log-dirs given the controller asks every storage node it lists.
    described = _brook("log-dirs", "describe", "--topic", TOPIC, "--json", env=controller)
    assert described.returncode == 0, described.stderr
    [node] = json.loads(described.stdout)["nodes"]
    partitions = {p["partition"] for d in node["logDirs"] for p in d["partitions"]}
    assert partitions == {f"{TOPIC}-0", f"{TOPIC}-1"}


def test_no_answering_bootstrap_server_fails_clearly_and_a_bad_one_is_usage(
    cluster: LocalCluster,
) -> None:
    del cluster
    silent = _closed_address()
    for args in (("topics", "list"), ("log-dirs", "describe")):
        failed = _brook(*args, "--timeout-ms", "1000", env=silent)
        assert failed.returncode == EXIT_FAILED, failed.stderr
        assert "no answer from the bootstrap servers" in failed.stderr
        assert silent in failed.stderr
    bad = _brook("topics", "list", "--bootstrap-server", "no-port-here")
    assert bad.returncode == EXIT_USAGE
    assert "--bootstrap-server" in bad.stderr
