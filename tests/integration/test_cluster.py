"""The local cluster as real processes: start-up, health, shutdown, restart, no leaks."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_fixture import ClusterFactory, free_port_offset, pid_alive

from brook.health import HealthStatus, check_health
from brook.launcher import START_ORDER, ClusterStartError, Role

pytestmark = pytest.mark.integration

SIGTERM_EXIT_BOUND_MS = 5_000
# Bounds for the subprocess-driven tests below; start-up is the slow part on a busy machine.
CLUSTER_UP_READY_TIMEOUT_S = 90
LAUNCHER_EXIT_TIMEOUT_S = 30
PROCESS_GONE_TIMEOUT_S = 10
KAFKA_CLIENT_TIMEOUT_S = 30


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """The pids still alive after ``timeout_s`` (polling; they are not our children)."""
    deadline = time.monotonic() + timeout_s
    alive = [pid for pid in pids if pid_alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if pid_alive(pid)]
    return alive


def _read_json_line(process: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any]:
    """The next line of ``process``'s stdout as JSON, waiting at most ``timeout_s``."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, f"no output within {timeout_s} s"
    line = process.stdout.readline()
    assert line, f"stdout closed; exit code {process.poll()}"
    parsed = json.loads(line)
    assert isinstance(parsed, dict)
    return parsed


def test_full_topology_serves_and_every_process_exits_zero_on_sigterm(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(controllers=3, storage_nodes=3, group_coordinators=1, gateways=1)

    assert len(cluster.names(Role.CONTROLLER)) == 3
    assert len(cluster.names(Role.STORAGE_NODE)) == 3
    assert len(cluster.names(Role.GROUP_COORDINATOR)) == 1
    assert len(cluster.names(Role.GATEWAY)) == 1
    for name in cluster.names():
        result = check_health(cluster.grpc_address(name), timeout_ms=5_000)
        assert result.status is HealthStatus.SERVING, result.describe()
    pids = {name: cluster.pid(name) for name in cluster.names()}

    exits = cluster.stop()

    assert set(exits) == set(cluster.names())
    for name, exited in exits.items():
        assert exited.exit_code == 0, f"{name} exited {exited.exit_code}:\n{cluster.log_tail(name)}"
        assert not exited.killed_after_timeout, name
        assert exited.duration_ms < SIGTERM_EXIT_BOUND_MS, f"{name} took {exited.duration_ms} ms"
    assert [name for name, pid in pids.items() if pid is not None and pid_alive(pid)] == []


def test_process_killed_with_sigkill_restarts_and_serves_again(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(controllers=3, storage_nodes=3, group_coordinators=1, gateways=1)
    victims = ["controller-2", "storage-node-2", "group-coordinator-1", "gateway-1"]
    old_pids = {name: cluster.pid(name) for name in victims}

    for name in victims:
        cluster.kill(name, signal.SIGKILL)
        assert cluster.wait(name, timeout_ms=5_000).exit_code == -signal.SIGKILL
        cluster_factory.start(cluster, name)

    for name in victims:
        assert cluster.pid(name) not in (None, old_pids[name])
        result = check_health(cluster.grpc_address(name), timeout_ms=5_000)
        assert result.status is HealthStatus.SERVING, result.describe()


def test_failed_start_stops_started_processes_and_reports_the_log_tail(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=1,
        config_overrides={"gateway-1": {"node.id": "not-a-number"}},
        start=False,
    )

    with pytest.raises(ClusterStartError) as raised:
        cluster_factory.start(cluster)

    message = str(raised.value)
    assert "gateway-1" in message
    assert "node.id" in message.split("--- last lines of", 1)[1]
    assert [name for name in cluster.names() if cluster.is_running(name)] == []
    for name in ("controller-1", "storage-node-1"):
        last = cluster.last_exit(name)
        assert last is not None and not pid_alive(last.pid), name


def test_fixture_teardown_leaves_no_process_and_no_files(tmp_path: Path) -> None:
    factory = ClusterFactory(tmp_path / "clusters")
    try:
        cluster = factory(controllers=1, storage_nodes=1, group_coordinators=1, gateways=1)
        pids = [pid for name in cluster.names() if (pid := cluster.pid(name)) is not None]
        assert len(pids) == 4
    finally:
        factory.close(keep_files=False)

    assert [pid for pid in pids if pid_alive(pid)] == []
    assert not factory.root.exists()


def test_process_still_running_at_the_stop_timeout_is_killed(tmp_path: Path) -> None:
    # A 1 ms bound that no real shutdown meets stands in for a process that ignores SIGTERM.
    factory = ClusterFactory(tmp_path / "clusters", stop_timeout_ms=1)
    try:
        cluster = factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0)
        pids = [pid for name in cluster.names() if (pid := cluster.pid(name)) is not None]

        exits = cluster.stop()

        assert set(exits) == set(cluster.names())
        for name, exited in exits.items():
            assert exited.killed_after_timeout, name
            assert exited.exit_code == -signal.SIGKILL, name
            assert not exited.clean
        assert [pid for pid in pids if pid_alive(pid)] == []
    finally:
        factory.close(keep_files=False)


def test_failing_test_report_carries_every_process_log_tail(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tests_dir = Path(__file__).resolve().parents[1]
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tests_dir), os.environ.get("PYTHONPATH", "")])
    )
    pytester.makeconftest("from cluster_fixture import cluster_factory, pytest_runtest_makereport")
    pytester.makepyfile(
        test_inner="""
        def test_fails(cluster_factory):
            cluster_factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0)
            assert False, "deliberate"
        """
    )

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    for name in ("controller-1", "storage-node-1"):
        assert f"{name} log (" in output
        assert f"brook launcher: starting {name}" in output
    assert "cluster files kept for diagnosis" in output


@contextlib.contextmanager
def _launcher(command: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """A launcher process and a list for the pids of its cluster; whatever happens in the
    test, both the launcher and every pid recorded are gone afterwards. Its stdout is
    unbuffered: a line read never takes the next ones along, so select() sees them."""
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, bufsize=0)
    pids: list[int] = []
    try:
        yield launcher, pids
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        assert launcher.stdout is not None
        launcher.stdout.close()


def test_cluster_up_serves_and_exits_zero_on_sigint_leaving_no_process(tmp_path: Path) -> None:
    port_offset = free_port_offset(tmp_path / "probe")
    brook = str(Path(sys.executable).with_name("brook"))
    command = [brook, "cluster", "up", "--dir", str(tmp_path / "brook")]
    command += ["--port-offset", str(port_offset), "--json"]
    with _launcher(command) as (launcher, pids):
        # A serving event per process as it becomes healthy, role by role, then "up".
        serving = []
        while (event := _read_json_line(launcher, CLUSTER_UP_READY_TIMEOUT_S))["event"] != "up":
            assert event.pop("event") == "serving", event
            serving.append(event)
        up = event
        assert len(up["processes"]) == 8
        assert serving == up["processes"], "each process announced once, with its addresses"
        roles = [event["role"] for event in serving]
        assert roles == sorted(roles, key=[role.value for role in START_ORDER].index)
        for process in up["processes"]:
            pids.append(process["pid"])
            result = check_health(process["listeners"]["GRPC"], timeout_ms=5_000)
            assert result.status is HealthStatus.SERVING, result.describe()
        assert up["kafka_bootstrap_servers"] == f"127.0.0.1:{9092 + port_offset}"

        launcher.send_signal(signal.SIGINT)
        exit_code = launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S)

        assert exit_code == 0
        stopped = _read_json_line(launcher, 1)
        assert stopped["event"] == "stopped"
        assert stopped["unclean"] == []
        assert sorted(stopped["exit_codes"]) == sorted(p["name"] for p in up["processes"])
        assert _wait_gone(pids, PROCESS_GONE_TIMEOUT_S) == []


def _lines_until_up(launcher: subprocess.Popen[bytes]) -> list[str]:
    """The text ``brook cluster up`` prints until it says it is up ("Press Ctrl-C ...")."""
    assert launcher.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + CLUSTER_UP_READY_TIMEOUT_S
    while not lines or not lines[-1].startswith("Press Ctrl-C"):
        ready, _, _ = select.select([launcher.stdout], [], [], deadline - time.monotonic())
        assert ready, f"not up within {CLUSTER_UP_READY_TIMEOUT_S} s: {lines}"
        lines.append(launcher.stdout.readline().decode().rstrip("\n"))
    return lines


def test_cluster_up_prints_a_line_per_process_as_it_becomes_healthy(tmp_path: Path) -> None:
    brook = str(Path(sys.executable).with_name("brook"))
    command = [brook, "cluster", "up", "--dir", str(tmp_path / "brook"), "--port-offset"]
    command += [str(free_port_offset(tmp_path / "probe")), "--controllers", "1"]
    command += ["--storage-nodes", "1", "--coordinators", "0", "--gateways", "0"]
    with _launcher(command) as (launcher, pids):
        lines = _lines_until_up(launcher)
        serving = [line.split() for line in lines if line.startswith("  serving  ")]
        assert [words[1] for words in serving] == ["controller-1", "storage-node-1"]
        for words in serving:
            pids.append(int(words[words.index("pid") + 1]))
            grpc = words[words.index("GRPC") + 1]
            assert check_health(grpc, timeout_ms=5_000).status is HealthStatus.SERVING
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S) == 0


def test_cluster_up_tls_runs_a_mutual_tls_cluster_the_cli_reaches_with_its_client_config(
    tmp_path: Path,
) -> None:
    brook = str(Path(sys.executable).with_name("brook"))
    directory = tmp_path / "brook"
    command = [brook, "cluster", "up", "--tls", "--dir", str(directory), "--port-offset"]
    command += [str(free_port_offset(tmp_path / "probe")), "--controllers", "1"]
    command += ["--storage-nodes", "1", "--coordinators", "1", "--gateways", "1"]
    properties = directory / "tls" / "client.properties"
    kafka_properties = directory / "tls" / "kafka-client.properties"

    def tool(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [brook, *arguments, "--timeout-ms", "5000"],
            capture_output=True,
            text=True,
            timeout=LAUNCHER_EXIT_TIMEOUT_S,
            check=False,
        )

    with _launcher(command) as (launcher, pids):
        lines = _lines_until_up(launcher)
        serving = [line.split() for line in lines if line.startswith("  serving  ")]
        pids.extend(int(words[words.index("pid") + 1]) for words in serving)
        controller = serving[0][serving[0].index("GRPC") + 1]
        assert any(f"--command-config {properties}" in line for line in lines)

        config = ["--command-config", str(properties)]
        created = tool("topics", "create", "--topic", "over-tls", "--partitions", "1", *config)
        assert created.returncode == 0, created.stderr
        listed = tool("topics", "list", *config)
        assert listed.returncode == 0 and "over-tls" in listed.stdout.split(), listed.stderr
        # Without the client's certificate the cluster does not answer.
        refused = tool("topics", "list", "--bootstrap-server", controller)
        assert refused.returncode == 1 and "over-tls" not in refused.stdout
        assert tool("health", controller, *config).returncode == 0

        # Kafka clients: SASL_SSL as the SCRAM user admin the file names; a wrong password
        # is refused and writes nothing.
        assert any(f"kcat -F {kafka_properties}" in line for line in lines)
        assert kafka_properties.stat().st_mode & 0o077 == 0
        settings = dict(
            line.split("=", 1)
            for line in kafka_properties.read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        values = [f"secure-{i}".encode() for i in range(50)]
        assert _kafka_produce({**settings, "sasl.password": "wrong"}, "over-tls", values[:1]) == 1
        assert _kafka_produce(settings, "over-tls", values) == 0
        assert _kafka_read(settings, "over-tls", len(values)) == values

        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S) == 0


def _kafka_produce(settings: dict[str, str], topic: str, values: list[bytes]) -> int:
    """Produces ``values`` to partition 0 with confluent-kafka; how many were not delivered
    (refused, or not acknowledged within message.timeout.ms)."""
    from confluent_kafka import KafkaError, Message, Producer

    delivered = 0

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        nonlocal delivered
        delivered += error is None

    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 5_000})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    producer.flush(KAFKA_CLIENT_TIMEOUT_S)
    return len(values) - delivered


def _kafka_read(settings: dict[str, str], topic: str, count: int) -> list[bytes]:
    """The first ``count`` values of partition 0, read with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "tls-reader", "enable.auto.commit": False})
    read: list[bytes] = []
    deadline = time.monotonic() + KAFKA_CLIENT_TIMEOUT_S
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while len(read) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.append(message.value())
    finally:
        consumer.close()
    return read


def test_children_stop_when_the_launcher_is_killed(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, time
        from pathlib import Path
        from brook.launcher import LocalCluster, Topology
        cluster = LocalCluster(Path({str(tmp_path / "cluster")!r}), Topology(1, 1, 0, 0))
        cluster.start()
        print(json.dumps({{"pids": [cluster.pid(name) for name in cluster.names()]}}), flush=True)
        time.sleep(600)
        """
    )
    with _launcher([sys.executable, "-c", script]) as (launcher, pids):
        pids += _read_json_line(launcher, CLUSTER_UP_READY_TIMEOUT_S)["pids"]
        assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)

        launcher.kill()
        launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S)

        assert _wait_gone(pids, PROCESS_GONE_TIMEOUT_S) == []


def test_a_node_added_to_and_removed_from_a_running_local_cluster(tmp_path: Path) -> None:
    from brook.client import Producer
    from brook.client.admin import Admin, NewTopic

    port_offset = free_port_offset(tmp_path / "probe")
    brook = str(Path(sys.executable).with_name("brook"))
    directory = str(tmp_path / "brook")
    command = [brook, "cluster", "up", "--dir", directory, "--port-offset", str(port_offset)]
    command += ["--json", "--controllers", "1", "--storage-nodes", "2", "--coordinators", "0"]
    command += ["--gateways", "0", "--override", "storage-node:broker.session.timeout.ms=3000"]
    command += ["--override", "controller:broker.session.timeout.ms=3000"]
    # Internal topics on two of the three nodes, so that one node can be drained.
    for internal in ("offsets.topic", "transaction.state.log"):
        command += ["--override", f"controller:{internal}.replication.factor=2"]
    command += ["--override", "controller:transaction.state.log.min.isr=1"]
    with _launcher(command) as (launcher, pids):
        while (event := _read_json_line(launcher, CLUSTER_UP_READY_TIMEOUT_S))["event"] != "up":
            pass
        pids.extend(process["pid"] for process in event["processes"])
        controllers = event["controller_bootstrap_servers"]

        # A second launcher on the directory is refused and touches nothing of the first's.
        second = subprocess.run(
            command, capture_output=True, text=True, timeout=LAUNCHER_EXIT_TIMEOUT_S, check=False
        )
        assert second.returncode == 1 and "another brook cluster up" in second.stderr
        assert all(pid_alive(pid) for pid in pids)

        added = subprocess.run(
            [brook, "cluster", "add-node", "--dir", directory],
            capture_output=True,
            text=True,
            timeout=CLUSTER_UP_READY_TIMEOUT_S,
            check=False,
        )
        assert added.returncode == 0, added.stderr
        assert "storage-node-3" in added.stdout
        layout = json.loads((tmp_path / "brook" / "cluster.json").read_text())
        third = layout["processes"]["storage-node-3"]
        pid = int((tmp_path / "brook" / "storage-node-3" / "server.pid").read_text())
        pids.append(pid)
        assert third["ports"]["GRPC"] == 9103 + port_offset, "the well-known ports"
        with Admin(controllers) as admin:
            deadline = time.monotonic() + CLUSTER_UP_READY_TIMEOUT_S
            while 3 not in {n.node_id for n in admin.describe_cluster().nodes if not n.fenced}:
                assert time.monotonic() < deadline, "node 3 never registered"
                time.sleep(0.1)
            # Node 3 can take replicas at once: a topic placed on it, records written.
            topic = NewTopic("on-every-node", replica_assignment={0: [1, 2], 1: [3, 1]})
            assert admin.create_topics([topic]) == {"on-every-node": None}
            storage = ",".join(f"127.0.0.1:{p + port_offset}" for p in (9101, 9102, 9103))
            with Producer(bootstrap_servers=storage, acks="all") as producer:
                for future in [
                    producer.send("on-every-node", str(i).encode(), partition=i % 2)
                    for i in range(100)
                ]:
                    future.result(30)

            removed = subprocess.run(
                [brook, "cluster", "remove-node", "--dir", directory, "--node", "1"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert removed.returncode == 0, removed.stderr
            assert 1 not in {n.node_id for n in admin.describe_cluster().nodes}
            placed = admin.describe_topics(["on-every-node"])["on-every-node"].partitions
            assert all(1 not in p.replicas for p in placed), placed
        layout = json.loads((tmp_path / "brook" / "cluster.json").read_text())
        assert layout["removed"] == ["storage-node-1"]
        assert "storage-node-1" not in layout["processes"]

        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S) == 0
        # The added node, started by add-node, stopped with the launcher's own processes.
        assert _wait_gone(pids, 10) == []

    # The directory comes back as it was left: node 2 and node 3, no node 1.
    command = [brook, "cluster", "up", "--dir", directory, "--port-offset", str(port_offset)]
    with _launcher([*command, "--json"]) as (launcher, pids):
        while (event := _read_json_line(launcher, CLUSTER_UP_READY_TIMEOUT_S))["event"] != "up":
            pass
        pids.extend(process["pid"] for process in event["processes"])
        names = [process["name"] for process in event["processes"]]
        assert names == ["controller-1", "storage-node-2", "storage-node-3"]
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S) == 0
