"""``brook topics`` and ``brook cluster describe`` against a real three-controller quorum."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster_fixture import ClusterFactory

from brook.controller_probe import ControllerState, wait_for_convergence, wait_for_leader
from brook.launcher import LocalCluster, Role
from brook.v1 import common_pb2, controller_pb2, controller_pb2_grpc

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
COMMAND_TIMEOUT_S = 60
LEADER_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("cli-clusters"))
    try:
        running = factory(
            controllers=3,
            storage_nodes=0,
            group_coordinators=0,
            gateways=0,
            config_overrides={
                "controller": {
                    "broker.session.timeout.ms": "600000",
                    "offsets.topic.replication.factor": "3",
                }
            },
        )
        addresses = [running.grpc_address(n) for n in running.names(Role.CONTROLLER)]
        leader = wait_for_leader(addresses, LEADER_TIMEOUT_S)
        _register_live_nodes(running, leader.leader_id, (1, 2))
        yield running
    finally:
        factory.close(keep_files=False)


def _register_live_nodes(
    cluster: LocalCluster, leader_id: int | None, node_ids: tuple[int, ...]
) -> None:
    name = next(n for n in cluster.names(Role.CONTROLLER) if cluster.spec(n).node_id == leader_id)
    with grpc.insecure_channel(cluster.grpc_address(name)) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)  # type: ignore[no-untyped-call]
        for node_id in node_ids:
            registration = stub.RegisterBroker(
                controller_pb2.RegisterBrokerRequest(
                    node_id=node_id,
                    incarnation_id=f"cli-test-{node_id}",
                    role=common_pb2.NODE_ROLE_STORAGE_NODE,
                    endpoints=[
                        common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=19100 + node_id)
                    ],
                    rack=f"rack-{node_id}",
                ),
                timeout=10,
            )
            assert registration.error_code == 0, registration
            heartbeat = stub.BrokerHeartbeat(
                controller_pb2.BrokerHeartbeatRequest(
                    node_id=node_id,
                    broker_epoch=registration.broker_epoch,
                    current_metadata_offset=2**62,
                ),
                timeout=10,
            )
            assert not heartbeat.is_fenced, heartbeat


def _brook(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BROOK, *args, "--bootstrap-server", cluster.controller_bootstrap_servers],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _states(cluster: LocalCluster) -> list[ControllerState]:
    addresses = [cluster.grpc_address(n) for n in cluster.names(Role.CONTROLLER)]
    return wait_for_convergence(addresses, LEADER_TIMEOUT_S)


def test_topics_are_created_described_altered_and_deleted_from_the_command_line(
    cluster: LocalCluster,
) -> None:
    created = _brook(
        cluster,
        "topics",
        "create",
        "--topic",
        "clicks",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
        "--config",
        "retention.ms=60000",
    )
    altered = _brook(cluster, "topics", "alter", "--topic", "clicks", "--partitions", "4")
    configured = _brook(
        cluster, "topics", "configs", "--topic", "clicks", "--add-config", "cleanup.policy=compact"
    )
    described = _brook(cluster, "topics", "describe", "--topic", "clicks")
    listed = _brook(cluster, "topics", "list")
    described_json = _brook(cluster, "topics", "describe", "--topic", "clicks", "--json")
    listed_json = _brook(cluster, "topics", "list", "--json")
    configs_json = _brook(cluster, "topics", "configs", "--topic", "clicks", "--json")
    elected = _brook(cluster, "topics", "elect-leaders", "--topic", "clicks", "--partition", "0")
    deleted = _brook(cluster, "topics", "delete", "--topic", "clicks")
    after = _brook(cluster, "topics", "list")

    for result in (created, altered, configured, described, listed, elected, deleted, after):
        assert result.returncode == 0, result.stderr
    # --json: the same, one document with stable keys.
    assert "clicks" in json.loads(listed_json.stdout)["topics"]
    [topic] = json.loads(described_json.stdout)["topics"]
    assert topic["name"] == "clicks" and topic["internal"] is False
    assert (topic["partitionCount"], topic["replicationFactor"]) == (4, 2)
    assert topic["configs"] == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2, 3]
    assert all(
        len(p["replicas"]) == 2 and p["leader"] in p["isr"] and p["offlineReplicas"] == []
        for p in topic["partitions"]
    )
    configs = {c["name"]: c for c in json.loads(configs_json.stdout)["configs"]}
    assert configs["retention.ms"] == {
        "name": "retention.ms",
        "value": "60000",
        "source": "DYNAMIC_TOPIC_CONFIG",
    }
    assert created.stdout == "Created topic clicks.\n"
    header, *partitions = described.stdout.splitlines()
    assert header.startswith("Topic: clicks\tTopicId: ")
    assert "PartitionCount: 4\tReplicationFactor: 2" in header
    assert "retention.ms=60000" in header and "cleanup.policy=compact" in header
    assert [line.split("\t")[2] for line in partitions] == [f"Partition: {i}" for i in range(4)]
    assert "clicks" in listed.stdout.split()
    assert elected.stdout == "No election needed for clicks-0.\n"
    assert "clicks" not in after.stdout.split()


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--topic", "no spaces"), "INVALID_TOPIC_EXCEPTION"),
        (("--topic", "too-wide", "--replication-factor", "3"), "INVALID_REPLICATION_FACTOR"),
        (("--topic", "odd", "--config", "retention.msx=1"), "INVALID_CONFIG"),
        (("--topic", "placed", "--replica-assignment", "1:7"), "INVALID_REPLICA_ASSIGNMENT"),
        (("--topic", "taken"), "TOPIC_ALREADY_EXISTS"),
    ],
)
def test_invalid_creations_fail_with_kafkas_error_and_change_no_controllers_state(
    cluster: LocalCluster, args: tuple[str, ...], code: str
) -> None:
    existing = _brook(cluster, "topics", "create", "--topic", "taken")
    assert existing.returncode in (0, 1), existing.stderr
    before = _states(cluster)

    result = _brook(cluster, "topics", "create", *args)

    assert result.returncode == 1
    assert f": {code}: " in result.stderr, result.stderr
    after = _states(cluster)
    assert [(s.offset, s.digest) for s in after] == [(s.offset, s.digest) for s in before]


def test_cluster_describe_shows_the_nodes_and_equal_digests_on_every_controller(
    cluster: LocalCluster,
) -> None:
    result = _brook(cluster, "cluster", "describe", "--digests")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    controllers = [line for line in lines if line.startswith("Controller: ")]
    assert len(controllers) == 3
    digests = {line.split("Digest: ")[1] for line in controllers}
    assert len(digests) == 1
    nodes = [line for line in lines if line.startswith("Node: ")]
    assert [line.split("\t")[0] for line in nodes] == ["Node: 1", "Node: 2"]
    assert all("storage_node\tactive" in line for line in nodes)

    described = json.loads(_brook(cluster, "cluster", "describe", "--digests", "--json").stdout)
    assert described["controllerId"] in {c["nodeId"] for c in described["controllers"]}
    assert len({c["digest"] for c in described["controllers"]}) == 1
    assert all(c["unreachable"] is None and c["offset"] > 0 for c in described["controllers"])
    assert [(n["nodeId"], n["role"], n["fenced"]) for n in described["nodes"]] == [
        (1, "storage_node", False),
        (2, "storage_node", False),
    ]
    assert all("GRPC" in n["endpoints"] for n in described["nodes"])


def test_node_configs_are_set_described_and_removed_like_kafka_configs(
    cluster: LocalCluster,
) -> None:
    rate = "follower.replication.throttled.rate"
    node = ("--entity-type", "brokers", "--entity-name", "1")
    every = ("--entity-type", "brokers", "--entity-default")

    assert _brook(cluster, "configs", *node, "--add-config", f"{rate}=2097152").returncode == 0
    assert _brook(cluster, "configs", *every, "--add-config", f"{rate}=1048576").returncode == 0
    described = json.loads(_brook(cluster, "configs", *node, "--json").stdout)
    entries = {e["name"]: e for e in described["configs"]}
    assert (entries[rate]["value"], entries[rate]["source"]) == (
        "2097152",
        "DYNAMIC_BROKER_CONFIG",
    )
    refused = _brook(cluster, "configs", *node, "--add-config", f"{rate}=fast")
    assert refused.returncode == 1 and "INVALID_CONFIG" in refused.stderr

    assert _brook(cluster, "configs", *node, "--delete-config", rate).returncode == 0
    described = json.loads(_brook(cluster, "configs", *node, "--json").stdout)
    entries = {e["name"]: e for e in described["configs"]}
    assert (entries[rate]["value"], entries[rate]["source"]) == (
        "1048576",
        "DYNAMIC_DEFAULT_BROKER_CONFIG",
    )
    assert _brook(cluster, "configs", *every, "--delete-config", rate).returncode == 0
    usage = _brook(cluster, "configs", "--entity-type", "brokers")
    assert usage.returncode == 2 and "--entity-default" in usage.stderr


def test_bad_arguments_exit_2_and_an_unreachable_cluster_exits_1() -> None:
    bad = subprocess.run(
        [BROOK, "topics", "create", "--topic", "t", "--config", "no-equals-sign"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    unreachable = subprocess.run(
        [BROOK, "topics", "list", "--bootstrap-server", "127.0.0.1:9", "--timeout-ms", "500"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )

    assert bad.returncode == 2 and "is not KEY=VALUE" in bad.stderr
    assert unreachable.returncode == 1 and "Error: no answer" in unreachable.stderr
