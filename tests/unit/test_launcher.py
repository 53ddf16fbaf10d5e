"""The launcher's plan (ports, ids, config files, directory reuse) and its refusals.

Nothing here starts a Brook service: these are the checks made before any process runs.
Starting real clusters is tests/integration/test_cluster.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brook.cli import load_service_spec
from brook.config import load_config, load_properties, parse_listeners, parse_voters
from brook.launcher import (
    LAYOUT_FILE,
    NODE_PORT_IDS_SPARE,
    ClusterError,
    ClusterLayoutError,
    ClusterStartError,
    LocalCluster,
    Role,
    Topology,
    add_cluster_command,
    parse_cluster_overrides,
    run_cluster_command,
)
from brook.ports import (
    allocate_free_port_block,
    allocate_free_ports,
    ephemeral_port_range,
    port_is_free,
)


def _properties(path: Path) -> dict[str, str]:
    """A config file as the services read it (brook.config's parser)."""
    return {key: raw.value for key, raw in load_properties(path).items()}


def test_default_topology_has_the_documented_well_known_ports(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, port_offset=0)

    ports = {name: dict(spec.ports) for name, spec in cluster.processes.items()}

    assert ports == {
        "controller-1": {"GRPC": 9201, "RAFT": 9301, "METRICS": 10201},
        "controller-2": {"GRPC": 9202, "RAFT": 9302, "METRICS": 10202},
        "controller-3": {"GRPC": 9203, "RAFT": 9303, "METRICS": 10203},
        "storage-node-1": {"GRPC": 9101, "METRICS": 10101},
        "storage-node-2": {"GRPC": 9102, "METRICS": 10102},
        "storage-node-3": {"GRPC": 9103, "METRICS": 10103},
        "group-coordinator-1": {"GRPC": 9401, "METRICS": 10401},
        "gateway-1": {"GRPC": 9501, "PLAINTEXT": 9092, "METRICS": 10501},
    }
    assert cluster.kafka_bootstrap_servers == "127.0.0.1:9092"


def test_largest_topology_has_no_port_or_node_id_in_common(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, Topology(9, 99, 99, 5), port_offset=0)

    ports = [port for spec in cluster.processes.values() for port in spec.ports.values()]
    ports += [
        port
        for name in cluster.names(Role.GATEWAY)
        for port in cluster.kafka_node_ports(name).values()
    ]
    node_ids = [spec.node_id for spec in cluster.processes.values()]

    # Every process has a METRICS port besides the ones of its role.
    assert len(ports) == len(set(ports)) == 9 * 3 + 99 * 2 + 99 * 2 + 5 * 3 + 5 * 99
    assert len(node_ids) == len(set(node_ids))


def test_each_gateway_shows_each_storage_node_at_the_documented_kafka_port(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, Topology(storage_nodes=3, gateways=2), port_offset=0)

    assert cluster.config("gateway-1")["kafka.node.port.base"] == "9600"
    assert cluster.kafka_node_ports("gateway-1") == {1: 9601, 2: 9602, 3: 9603}
    assert cluster.kafka_node_ports("gateway-2") == {1: 9701, 2: 9702, 3: 9703}
    assert cluster.kafka_node_ports("storage-node-1") == {}
    shifted = LocalCluster(tmp_path / "b", Topology(gateways=2), port_offset=1000)
    assert shifted.kafka_node_ports("gateway-2")[3] == 10703
    # The override turns them off.
    off = LocalCluster(
        tmp_path / "c", port_offset=0, config_overrides={"gateway": {"kafka.node.port.base": "0"}}
    )
    assert off.kafka_node_ports("gateway-1") == {}


def test_free_port_plans_give_each_gateway_a_free_block_for_every_storage_id_and_spares(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path, Topology(storage_nodes=2, gateways=2))
    listener_ports = {p for spec in cluster.processes.values() for p in spec.ports.values()}
    blocks = []
    for name in cluster.names(Role.GATEWAY):
        base = cluster.processes[name].kafka_node_port_base
        block = [base + n for n in range(1, 2 + NODE_PORT_IDS_SPARE + 1)]
        assert all(port_is_free("127.0.0.1", port) for port in block)
        assert cluster.kafka_node_ports(name) == {1: base + 1, 2: base + 2}
        blocks += block
    assert len(set(blocks)) == len(blocks)
    assert not listener_ports & set(blocks)
    # Kept across runs, with the rest of the plan.
    cluster.prepare()
    again = LocalCluster(tmp_path, Topology(storage_nodes=2, gateways=2))
    assert again.kafka_node_ports("gateway-2") == cluster.kafka_node_ports("gateway-2")


def test_a_free_port_block_is_consecutive_free_and_avoids_the_ports_given() -> None:
    start = allocate_free_port_block(8)
    assert all(port_is_free("127.0.0.1", port) for port in range(start, start + 8))
    avoided = set(range(start, start + 8))
    again = allocate_free_port_block(8, avoid=avoided)
    assert not avoided & set(range(again, again + 8))


def test_port_offset_shifts_every_well_known_port(tmp_path: Path) -> None:
    base = LocalCluster(tmp_path / "a", port_offset=0)
    shifted = LocalCluster(tmp_path / "b", port_offset=1000)

    for name, spec in base.processes.items():
        expected = {listener: port + 1000 for listener, port in spec.ports.items()}
        assert dict(shifted.processes[name].ports) == expected


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = allocate_free_ports(30)

    assert len(set(ports)) == 30
    assert all(port < ephemeral_port_range()[0] for port in ports)
    assert all(port_is_free("127.0.0.1", port) for port in ports)


def test_config_files_wire_every_process_to_the_controller_quorum(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)

    cluster.prepare()

    controllers = [cluster.processes[name] for name in cluster.names(Role.CONTROLLER)]
    for name, spec in cluster.processes.items():
        config = _properties(spec.config_path)
        assert config["node.id"] == str(spec.node_id)
        listeners = parse_listeners(config["listeners"].split(","))
        assert {listener.name: listener.port for listener in listeners} == dict(spec.ports)
        assert config["advertised.listeners"] == config["listeners"]
        if spec.role is Role.CONTROLLER:
            voters = parse_voters(config["controller.quorum.voters"].split(","))
            assert [(v.node_id, v.host, v.port) for v in voters] == [
                (c.node_id, "127.0.0.1", c.ports["RAFT"]) for c in controllers
            ]
            assert Path(config["metadata.log.dir"]).parent == spec.directory
        else:
            assert config["controller.quorum.bootstrap.servers"] == ",".join(
                c.grpc_address for c in controllers
            ), name
    storage = _properties(cluster.processes["storage-node-2"].config_path)
    assert Path(storage["log.dirs"]) == tmp_path.resolve() / "storage-node-2" / "data"
    coordinator = _properties(cluster.processes["group-coordinator-1"].config_path)
    assert Path(coordinator["group.coordinator.state.dir"]).parent == (
        tmp_path.resolve() / "group-coordinator-1"
    )


def test_config_files_hold_only_settings_the_services_accept(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)

    cluster.prepare()

    for name, spec in cluster.processes.items():
        definition = load_service_spec(spec.role.value).config_def
        config = load_config(definition, config_path=spec.config_path, environ={})
        assert config.unknown_keys == (), name
        assert config.get_int("node.id") == spec.node_id


def test_config_values_read_back_exactly_whatever_characters_they_hold(tmp_path: Path) -> None:
    awkward = " leading space, back\\slash, tab\t, new\nline, = : # ! unicode \u00e9"
    cluster = LocalCluster(tmp_path, config_overrides={"*": {"some.setting": awkward}})

    cluster.prepare()

    config = _properties(cluster.processes["controller-1"].config_path)
    assert config["some.setting"] == awkward


def test_the_most_specific_config_override_wins(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        config_overrides={
            "*": {"logging.level": "WARNING", "request.timeout.ms": "1"},
            "storage-node": {"logging.level": "ERROR"},
            "storage-node-2": {"logging.level": "DEBUG"},
        },
    )

    assert cluster.config("controller-1")["logging.level"] == "WARNING"
    assert cluster.config("storage-node-1")["logging.level"] == "ERROR"
    assert cluster.config("storage-node-2")["logging.level"] == "DEBUG"
    assert cluster.config("gateway-1")["request.timeout.ms"] == "1"


def test_override_for_an_unknown_process_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ClusterLayoutError, match="storage-node-4"):
        LocalCluster(tmp_path, config_overrides={"storage-node-4": {"node.id": "9"}})


def test_reopened_directory_keeps_its_ports_node_ids_and_config_files(tmp_path: Path) -> None:
    first = LocalCluster(tmp_path)
    first.prepare()
    configs = {n: s.config_path.read_text() for n, s in first.processes.items()}

    second = LocalCluster(tmp_path)
    second.prepare()

    assert {n: (s.ports, s.node_id) for n, s in second.processes.items()} == {
        n: (s.ports, s.node_id) for n, s in first.processes.items()
    }
    assert {n: s.config_path.read_text() for n, s in second.processes.items()} == configs


def test_reopening_with_another_topology_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    LocalCluster(tmp_path).prepare()
    layout_before = (tmp_path / LAYOUT_FILE).read_text()

    with pytest.raises(ClusterLayoutError, match="holds a cluster"):
        LocalCluster(tmp_path, Topology(storage_nodes=4))

    assert (tmp_path / LAYOUT_FILE).read_text() == layout_before
    assert not (tmp_path / "storage-node-4").exists()


def test_reopening_with_another_port_offset_is_refused(tmp_path: Path) -> None:
    LocalCluster(tmp_path, port_offset=0).prepare()

    with pytest.raises(ClusterLayoutError, match="port offset 0"):
        LocalCluster(tmp_path, port_offset=7)


def test_unreadable_layout_file_is_reported_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / LAYOUT_FILE).write_text("{not json")

    with pytest.raises(ClusterLayoutError, match="cannot read cluster layout"):
        LocalCluster(tmp_path)

    assert (tmp_path / LAYOUT_FILE).read_text() == "{not json"


@pytest.mark.parametrize(
    "topology_args",
    [
        {"controllers": 0},
        {"controllers": 10},
        {"storage_nodes": -1},
        {"storage_nodes": 100},
        {"group_coordinators": 100},
        {"gateways": 6},
    ],
)
def test_topology_outside_the_count_limits_is_rejected(topology_args: dict[str, int]) -> None:
    with pytest.raises(ClusterLayoutError, match="count must be between"):
        Topology(**topology_args)


def test_port_offset_beyond_the_port_range_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ClusterLayoutError, match="outside 1-65535"):
        LocalCluster(tmp_path, port_offset=60000)


def test_start_refuses_a_port_in_use_and_starts_nothing(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    kafka_port = cluster.processes["gateway-1"].ports["PLAINTEXT"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", kafka_port))
        squatter.listen()

        with pytest.raises(ClusterStartError, match=f"gateway-1 PLAINTEXT 127.0.0.1:{kafka_port}"):
            cluster.start()

    for name, spec in cluster.processes.items():
        assert cluster.last_exit(name) is None, name
        assert not spec.log_path.exists(), name
    assert not (tmp_path / LAYOUT_FILE).exists()


def test_start_refuses_a_process_left_running_by_an_earlier_launcher(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, Topology(1, 0, 0, 0))
    cluster.prepare()
    spec = cluster.processes["controller-1"]
    # Stands in for an orphan: a live process whose command line names this config file.
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(spec.config_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Until the child has exec'd, /proc shows the parent's command line: wait for the
        # orphan to look like one (bounded), or the launcher rightly sees no orphan.
        cmdline = Path(f"/proc/{orphan.pid}/cmdline")
        deadline = time.monotonic() + 10
        while os.fsencode(str(spec.config_path)) not in cmdline.read_bytes().split(b"\0"):
            assert time.monotonic() < deadline, "the stand-in orphan never started"
            time.sleep(0.01)
        spec.pid_path.write_text(f"{orphan.pid}\n")

        with pytest.raises(ClusterError, match=f"still running as pid {orphan.pid}"):
            cluster.start()

        assert not cluster.is_running("controller-1")
    finally:
        orphan.send_signal(signal.SIGKILL)
        orphan.wait(timeout=5)


def test_cluster_override_flags_parse_into_targets() -> None:
    assert parse_cluster_overrides(
        ["logging.level=DEBUG", "storage-node:log.segment.bytes=1024", "gateway-1:a.b=x=y"]
    ) == {
        "*": {"logging.level": "DEBUG"},
        "storage-node": {"log.segment.bytes": "1024"},
        "gateway-1": {"a.b": "x=y"},
    }


@pytest.mark.parametrize("flag", ["no-equals-sign", "=value", ":key=value", "storage-node:=1"])
def test_malformed_cluster_override_flag_is_rejected(flag: str) -> None:
    with pytest.raises(ValueError, match="TARGET:"):
        parse_cluster_overrides([flag])


def _cluster_up_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="brook")
    add_cluster_command(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["cluster", "up", *argv])


@pytest.mark.parametrize(
    "argv",
    [
        ["--controllers", "0"],
        ["--gateways", "6"],
        ["--override", "no-equals-sign"],
        ["--override", "storage-node-9:a=b"],
        ["--port-offset", "70000"],
    ],
)
def test_cluster_up_with_bad_arguments_exits_2_and_creates_nothing(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = _cluster_up_args("--dir", str(tmp_path / "brook"), *argv)

    assert run_cluster_command(args) == 2

    assert capsys.readouterr().err.startswith("brook cluster up: ")
    assert not (tmp_path / "brook").exists()


def test_cluster_up_refuses_a_directory_of_another_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    LocalCluster(tmp_path, port_offset=0).prepare()
    layout_before = json.loads((tmp_path / LAYOUT_FILE).read_text())

    assert (
        run_cluster_command(_cluster_up_args("--dir", str(tmp_path), "--storage-nodes", "1")) == 2
    )

    assert "holds a cluster" in capsys.readouterr().err
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == layout_before


def test_a_layout_recorded_before_metrics_gets_them_at_grpc_plus_1000(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, port_offset=0)
    cluster.prepare()
    layout_path = next(tmp_path.rglob("cluster.json"))
    layout = json.loads(layout_path.read_text())
    for entry in layout["processes"].values():
        del entry["ports"]["METRICS"]
    layout_path.write_text(json.dumps(layout))

    again = LocalCluster(tmp_path, port_offset=0)

    assert {name: spec.ports["METRICS"] for name, spec in again.processes.items()} == {
        name: spec.ports["GRPC"] + 1000 for name, spec in cluster.processes.items()
    }


def test_a_node_that_cannot_start_is_recorded_removed_and_its_index_never_reused(
    tmp_path: Path,
) -> None:
    offset = allocate_free_port_block(2) - 9101  # storage nodes 1 and 2's GRPC ports free
    cluster = LocalCluster(tmp_path, Topology(1, 0, 0, 0), port_offset=offset)
    cluster.prepare()
    before = json.loads((tmp_path / LAYOUT_FILE).read_text())
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 9101 + offset))
        squatter.listen()
        with pytest.raises(ClusterStartError, match="storage-node-1 GRPC"):
            cluster.add_storage_node(detached=True)
    after = json.loads((tmp_path / LAYOUT_FILE).read_text())
    assert after["processes"] == before["processes"]
    assert after["removed"] == ["storage-node-1"]
    assert cluster.topology == Topology(1, 0, 0, 0)
    assert "storage-node-1" not in cluster.processes
    # The directory still opens, and the next node takes the next index.
    reopened = LocalCluster.from_layout(tmp_path)
    assert reopened.names(Role.STORAGE_NODE) == []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 9102 + offset))
        squatter.listen()
        with pytest.raises(ClusterStartError, match="storage-node-2 GRPC"):
            reopened.add_storage_node(detached=True)


def test_a_removed_node_is_not_brought_back_by_a_plan_read_before_it_was_removed(
    tmp_path: Path,
) -> None:
    LocalCluster(tmp_path, Topology(1, 2, 0, 0)).prepare()
    stale = LocalCluster.from_layout(tmp_path)
    LocalCluster.from_layout(tmp_path).remove_storage_node("storage-node-2")
    stale.prepare()  # what a start() of the older plan writes first
    layout = json.loads((tmp_path / LAYOUT_FILE).read_text())
    assert "storage-node-2" not in layout["processes"]
    assert stale.names(Role.STORAGE_NODE) == ["storage-node-1"]


def test_removing_a_node_keeps_what_another_launcher_recorded_meanwhile(tmp_path: Path) -> None:
    LocalCluster(tmp_path, Topology(1, 2, 0, 0)).prepare()
    remover = LocalCluster.from_layout(tmp_path)
    # Meanwhile another launcher (brook cluster add-node) records storage-node-3.
    adder = LocalCluster.from_layout(tmp_path)
    added = {"role": "storage-node", "node_id": 3, "ports": {"GRPC": 1, "METRICS": 2}}

    def record(layout: dict[str, object]) -> None:
        processes = layout["processes"]
        assert isinstance(processes, dict)
        processes["storage-node-3"] = added
        layout["topology"] = {**layout["topology"], "storage-node": 3}  # type: ignore[dict-item]
        layout["detached"] = ["storage-node-3"]

    adder._update_layout(record)
    remover.remove_storage_node("storage-node-1")

    layout = json.loads((tmp_path / LAYOUT_FILE).read_text())
    assert layout["removed"] == ["storage-node-1"]
    assert sorted(layout["processes"]) == ["controller-1", "storage-node-2", "storage-node-3"]
    assert layout["detached"] == ["storage-node-3"]
    reopened = LocalCluster.from_layout(tmp_path)
    assert reopened.names(Role.STORAGE_NODE) == ["storage-node-2", "storage-node-3"]


def test_stopping_a_cluster_leaves_processes_it_did_not_start_alone(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, Topology(1, 0, 0, 0))
    cluster.prepare()
    spec = cluster.processes["controller-1"]
    # Another launcher's process of this directory (its own session, as launchers start them).
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--config", str(spec.config_path)],
        start_new_session=True,
    )
    try:
        spec.pid_path.write_text(f"{other.pid}\n")
        cluster.stop()
        assert other.poll() is None, "stop() must not touch a process this launcher did not start"
    finally:
        other.kill()
        other.wait(timeout=10)
