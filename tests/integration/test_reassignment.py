"""Partition reassignment on a real cluster (issue #20, done-when).

Three controllers and four storage nodes. A topic of three partitions, RF 3 on nodes 1-3
(min.insync.replicas=2) and a few MiB in it, moves to nodes 2-4 with ``brook reassign
--execute --throttle`` while an idempotent producer keeps sending numbered records with
acks=all. Mid-copy the active controller is killed -9. Then:

- every move completes (the replicas are 2-4, all in sync; node 1 holds none of the topic);
- node 4's copy grew at the throttle's rate (within 20 %), measured from its log sizes;
- every acknowledged record is read back from the new replicas, once, in send order;
- ``--verify`` reports completion and removes the throttles.

A second test drains a node (``brook reassign --decommission``) and checks it ends up
holding no replica at all.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from cluster_fixture import ClusterFactory, replication_cluster, wait_until
from numbered_sender import NumberedSender
from replica_logs import read_to_high_watermarks

from brook.cli import main as brook_main
from brook.client import Producer
from brook.client.admin import Admin, AlterConfigOp, ConfigResource, NewTopic
from brook.launcher import LocalCluster, Role
from brook.rpc.channels import sync_channel
from brook.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

TOPIC = "moving"
PARTITIONS = 3
FILL_BYTES_PER_PARTITION = 2 << 20
FILL_VALUE_BYTES = 1000
THROTTLE_BYTES_PER_S = 1 << 20
FOLLOWER_LIST = "follower.replication.throttled.replicas"
RATE_TOLERANCE = 0.2
SESSION_TIMEOUT_MS = 3000
WAIT_TIMEOUT_S = 60.0
POLL_S = 0.1
CONSUME_TIMEOUT_S = 60.0


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> float:
    return wait_until(condition, what, timeout_s, POLL_S)


def _cluster(
    cluster_factory: ClusterFactory,
    *,
    controllers: int,
    storage_nodes: int,
    controller_config: dict[str, str] | None = None,
) -> LocalCluster:
    return replication_cluster(
        cluster_factory,
        controllers=controllers,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=300,
        lag_time_max_ms=5000,
        storage_nodes=storage_nodes,
        controller_config=controller_config,
    )


def _node_names(cluster: LocalCluster) -> dict[int, str]:
    return {cluster.spec(n).node_id: n for n in cluster.names(Role.STORAGE_NODE)}


def _topic_bytes(cluster: LocalCluster, name: str, topic: str) -> int | None:
    """The bytes of ``topic``'s logs on one storage node (None if it does not answer)."""
    try:
        with sync_channel(cluster.grpc_address(name)) as channel:
            stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
            answer = stub.DescribeLogDirs(storage_pb2.DescribeLogDirsRequest(), timeout=5)
    except grpc.RpcError:
        return None
    return sum(p.size_bytes for d in answer.log_dirs for p in d.partitions if p.topic == topic)


def _hosted(cluster: LocalCluster, name: str) -> set[tuple[str, int]]:
    with sync_channel(cluster.grpc_address(name)) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.DescribeLogDirs(storage_pb2.DescribeLogDirsRequest(), timeout=5)
    return {(p.topic, p.partition) for d in answer.log_dirs for p in d.partitions}


def _cli(*args: str) -> int:
    return brook_main(list(args))


def _replicas(admin: Admin) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    return {
        p.partition: (p.replicas, tuple(sorted(p.isr)))
        for p in admin.describe_topics([TOPIC])[TOPIC].partitions
    }


def _fill(bootstrap: str) -> dict[int, int]:
    """Writes about FILL_BYTES_PER_PARTITION to each partition (acks=all); returns how many
    records each got."""
    count = FILL_BYTES_PER_PARTITION // FILL_VALUE_BYTES
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        futures = [
            producer.send(TOPIC, f"fill-{i}".encode().ljust(FILL_VALUE_BYTES), partition=p)
            for p in range(PARTITIONS)
            for i in range(count)
        ]
        for future in futures:
            future.result(60)
    return dict.fromkeys(range(PARTITIONS), count)


def test_a_throttled_move_survives_a_controller_kill_and_loses_no_acknowledged_record(
    cluster_factory: ClusterFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(cluster_factory, controllers=3, storage_nodes=4)
    names = _node_names(cluster)
    bootstrap = ",".join(cluster.grpc_address(n) for n in cluster.names(Role.STORAGE_NODE))
    controllers = cluster.controller_bootstrap_servers
    with Admin(controllers) as admin:
        created = admin.create_topics(
            [
                NewTopic(
                    TOPIC,
                    replica_assignment={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]},
                    configs={"min.insync.replicas": "2"},
                )
            ]
        )
        assert created == {TOPIC: None}
        _wait(
            lambda: all(len(isr) == 3 for _, isr in _replicas(admin).values()),
            "the topic's full ISRs",
        )
        filled = _fill(bootstrap)
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": TOPIC, "partition": p, "replicas": [2, 3, 4]}
                        for p in range(PARTITIONS)
                    ],
                }
            )
        )
        with (
            Producer(
                bootstrap_servers=bootstrap,
                acks="all",
                enable_idempotence=True,
                linger_ms=0,
                request_timeout_ms=5000,
                delivery_timeout_ms=30000,
                retry_backoff_ms=50,
            ) as producer,
            NumberedSender(producer, TOPIC, PARTITIONS, pause_s=0.05) as sender,
        ):
            _wait(lambda: all(sender.acked.values()), "a first acknowledgement per partition")
            # An operator's own throttle entry, which the tool must leave alone.
            mine = (FOLLOWER_LIST, AlterConfigOp.SET, "9:4")
            assert admin.alter_configs({ConfigResource.topic(TOPIC): [mine]}) == {
                ConfigResource.topic(TOPIC): None
            }
            target = _topic_bytes(cluster, names[1], TOPIC)
            assert target is not None and target >= PARTITIONS * FILL_BYTES_PER_PARTITION
            capsys.readouterr()
            assert (
                _cli(
                    "reassign",
                    "--execute",
                    "--bootstrap-server",
                    controllers,
                    "--reassignment-json-file",
                    str(plan),
                    "--throttle",
                    str(THROTTLE_BYTES_PER_S),
                )
                == 0
            )
            rollback = capsys.readouterr().out
            assert '"replicas": [1, 2, 3]' in rollback, "the rollback plan is printed"
            moving = admin.list_partition_reassignments()
            assert {tp.partition for tp in moving} == set(range(PARTITIONS))
            assert all(m.adding_replicas == (4,) for m in moving.values())
            assert all(m.removing_replicas == (1,) for m in moving.values())

            # Node 4's copy, sampled until it is complete; the controller dies at 40 %.
            samples: list[tuple[float, int]] = []
            killed: list[str] = []

            def copied() -> bool:
                size = _topic_bytes(cluster, names[4], TOPIC) or 0
                samples.append((time.monotonic(), size))
                if not killed and size >= 0.4 * target:
                    active = admin.describe_cluster().controller_id
                    victim = next(
                        n
                        for n in cluster.names(Role.CONTROLLER)
                        if cluster.spec(n).node_id == active
                    )
                    cluster.kill(victim, signal.SIGKILL)
                    killed.append(victim)
                return not admin.list_partition_reassignments()

            _wait(copied, "every move to complete", timeout_s=120)
            assert killed, "the active controller was killed mid-move"
            acked_at_end = sender.acknowledged()
            _wait(lambda: sender.acknowledged() > acked_at_end + 10, "sends after the move")

        after = _replicas(admin)
        assert after == dict.fromkeys(range(PARTITIONS), ((2, 3, 4), (2, 3, 4))), after
        _wait(lambda: (TOPIC, 0) not in _hosted(cluster, names[1]), "node 1 to delete its copy")
        assert not {tp for tp in _hosted(cluster, names[1]) if tp[0] == TOPIC}

        # The throttle: node 4's bytes between 10 % and 90 % of the copy, against time.
        low = next((t, b) for t, b in samples if b >= 0.1 * target)
        high = next((t, b) for t, b in samples if b >= 0.9 * target)
        rate = (high[1] - low[1]) / (high[0] - low[0])
        with capsys.disabled():
            print(
                f"\nnode 4 copied {high[1] - low[1]} bytes at {rate / 1024:.0f} KiB/s "
                f"(throttle {THROTTLE_BYTES_PER_S >> 10} KiB/s); the controller killed: "
                f"{killed[0]}; {sender.acknowledged()} numbered records acknowledged"
            )
        assert abs(rate - THROTTLE_BYTES_PER_S) <= RATE_TOLERANCE * THROTTLE_BYTES_PER_S

        # --verify: complete, and the throttles are gone.
        capsys.readouterr()
        assert (
            _cli(
                "reassign",
                "--verify",
                "--bootstrap-server",
                controllers,
                "--reassignment-json-file",
                str(plan),
            )
            == 0
        )
        verified = capsys.readouterr().out
        for p in range(PARTITIONS):
            assert f"Reassignment of partition {TOPIC}-{p} is completed." in verified
        # The plan's entries are gone, the operator's stays, and so do the rates it needs.
        topic_resource = ConfigResource.topic(TOPIC)
        entries = admin.describe_configs([topic_resource])[topic_resource]
        assert entries[FOLLOWER_LIST].value == "9:4"
        assert entries["leader.replication.throttled.replicas"].source == "DEFAULT_CONFIG"
        node_4 = admin.describe_configs([ConfigResource.node(4)])[ConfigResource.node(4)]
        assert node_4["follower.replication.throttled.rate"].value == str(THROTTLE_BYTES_PER_S)
        # Without it, a second --verify removes the rates too.
        removed = (FOLLOWER_LIST, AlterConfigOp.DELETE, None)
        assert admin.alter_configs({topic_resource: [removed]}) == {topic_resource: None}
        verify = ("reassign", "--verify", "--bootstrap-server", controllers)
        assert _cli(*verify, "--reassignment-json-file", str(plan)) == 0
        configs = admin.describe_configs(
            [ConfigResource.node(n) for n in (1, 2, 3, 4)] + [ConfigResource.topic(TOPIC)]
        )
        for resource, entries in configs.items():
            for name, entry in entries.items():
                if "throttled" in name:
                    assert entry.source == "DEFAULT_CONFIG", (resource, entry)

    # Every acknowledged record, once, in order, from the new replicas.
    new_bootstrap = ",".join(cluster.grpc_address(names[n]) for n in (2, 3, 4))
    _, records = read_to_high_watermarks(new_bootstrap, TOPIC, range(PARTITIONS), CONSUME_TIMEOUT_S)
    for p in range(PARTITIONS):
        values = [(r.value or b"").strip() for r in records[p]]
        fills = [v for v in values if v.startswith(b"fill-")]
        assert fills == [f"fill-{i}".encode() for i in range(filled[p])], f"partition {p}"
        numbers = [int(v) for v in values if not v.startswith(b"fill-")]
        assert len(numbers) == len(set(numbers)), f"partition {p} holds duplicates"
        assert numbers == sorted(numbers), f"partition {p} is out of send order"
        missing = set(sender.acked[p]) - set(numbers)
        assert not missing, f"partition {p} lost acknowledged records {sorted(missing)[:10]}"


def test_decommission_drains_a_node_to_zero_replicas_then_removes_it(
    cluster_factory: ClusterFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(cluster_factory, controllers=1, storage_nodes=4)
    names = _node_names(cluster)
    bootstrap = ",".join(cluster.grpc_address(n) for n in cluster.names(Role.STORAGE_NODE))
    controllers = cluster.controller_bootstrap_servers
    topic = "drained"
    with Admin(controllers) as admin:
        assert admin.create_topics([NewTopic(topic, 4, 2)]) == {topic: None}
        _wait(
            lambda: all(len(p.isr) == 2 for p in admin.describe_topics([topic])[topic].partitions),
            "full ISRs",
        )
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            for future in [
                producer.send(topic, str(i).encode(), partition=i % 4) for i in range(400)
            ]:
                future.result(30)

        def hosted_by_2() -> list[str]:
            described = admin.describe_topics(
                admin.list_topics(include_internal=True), include_internal=True
            )
            return [
                f"{name}-{p.partition}"
                for name, t in described.items()
                for p in t.partitions
                if 2 in p.replicas
            ]

        assert hosted_by_2(), "node 2 holds replicas before"
        status = _cli(
            "reassign", "--decommission", "2", "--progress", "--bootstrap-server", controllers
        )
        out = capsys.readouterr().out
        assert status == 0, out
        assert "Every move is complete." in out
        assert hosted_by_2() == []
        _wait(lambda: not _hosted(cluster, names[2]), "node 2 to delete every replica")
        # Still running: refused, nothing changes.
        assert _cli("cluster", "unregister", "--node", "2", "--bootstrap-server", controllers) == 1
        cluster.stop(names[2])
        _wait(
            lambda: any(n.node_id == 2 and n.fenced for n in admin.describe_cluster().nodes),
            "node 2 to be fenced",
        )
        assert _cli("cluster", "unregister", "--node", "2", "--bootstrap-server", controllers) == 0
        assert 2 not in {n.node_id for n in admin.describe_cluster().nodes}

    storage = [names[n] for n in (1, 3, 4)]
    _, records = read_to_high_watermarks(
        ",".join(cluster.grpc_address(n) for n in storage), topic, range(4), CONSUME_TIMEOUT_S
    )
    for p in range(4):
        assert [int(r.value or b"") for r in records[p]] == list(range(p, 400, 4))


def test_generate_list_and_cancel_with_kafkas_json(
    cluster_factory: ClusterFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster(
        cluster_factory,
        controllers=1,
        storage_nodes=3,
        # No internal topics (they need more nodes than there are): only this test's
        # partition is on node 1, which the drain below must find moving already.
        controller_config={
            "offsets.topic.replication.factor": "4",
            "transaction.state.log.replication.factor": "4",
        },
    )
    names = _node_names(cluster)
    bootstrap = ",".join(cluster.grpc_address(n) for n in cluster.names(Role.STORAGE_NODE))
    controllers = cluster.controller_bootstrap_servers
    topic = "slow-move"
    common = ("--bootstrap-server", controllers)
    with Admin(controllers) as admin:
        assert admin.create_topics([NewTopic(topic, replica_assignment={0: [1]})]) == {topic: None}
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            for future in [producer.send(topic, b"x" * 1000, partition=0) for _ in range(300)]:
                future.result(30)

        # --generate: the current assignment and a proposal over the nodes given, as JSON.
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
        capsys.readouterr()
        generate = ("reassign", "--generate", "--topics-to-move-json-file", str(topics))
        assert _cli(*generate, "--broker-list", "2,3", *common) == 0
        lines = capsys.readouterr().out.splitlines()
        current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
        proposed = json.loads(
            lines[lines.index("Proposed partition reassignment configuration") + 1]
        )
        assert [p["replicas"] for p in current["partitions"]] == [[1]]
        assert [p["replicas"] for p in proposed["partitions"]] == [[2]]
        assert admin.describe_topics([topic])[topic].partitions[0].replicas == (1,)

        # A move slow enough to catch (300 kB at 10 kB/s), listed, then cancelled.
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(proposed))
        execute = ("reassign", "--execute", "--reassignment-json-file", str(plan))
        assert _cli(*execute, "--throttle", "10000", *common) == 0
        capsys.readouterr()
        assert _cli("reassign", "--list", *common) == 0
        assert f"{topic}-0: replicas: 2,1, adding: 2, removing: 1" in capsys.readouterr().out
        # Draining node 1 now has nothing to plan, but node 1 is not empty yet: said so.
        capsys.readouterr()
        assert _cli("reassign", "--decommission", "1", *common) == 1
        assert "being moved off by reassignments in progress" in capsys.readouterr().out
        cancel = ("reassign", "--cancel", "--reassignment-json-file", str(plan))
        assert _cli(*cancel, *common) == 0
        assert not admin.list_partition_reassignments()
        assert admin.describe_topics([topic])[topic].partitions[0].replicas == (1,)
        _wait(lambda: (topic, 0) not in _hosted(cluster, names[2]), "node 2 to drop its copy")
        # Not moving any more: --verify says the plan's replicas are not what it has.
        assert _cli("reassign", "--verify", "--reassignment-json-file", str(plan), *common) == 1
