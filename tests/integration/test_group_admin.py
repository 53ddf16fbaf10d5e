"""Consumer-group administration against a real cluster: the Admin client's group methods and
the ``brook groups`` command, over a controller, two storage nodes and two coordinators.

Group state is made through raw gRPC (JoinGroup/SyncGroup/CommitOffsets/LeaveGroup), the way
any client would; member metadata and assignments are encoded by kafka-python, an
implementation of Kafka's consumer protocol that this project did not write. One cluster
serves the whole module (each test has its own groups) to keep the file fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cluster_fixture import ClusterFactory, wait_until
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from test_group_coordinator_cluster import GroupClient, group_client

from brook.client import (
    Admin,
    ApiError,
    ConsumerGroupState,
    NewTopic,
    OffsetAndMetadata,
    PartitionLag,
    Producer,
    TopicPartition,
)
from brook.config import ConfigError
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import group_pb2

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
COMMAND_TIMEOUT_S = 60
ADMIN_TIMEOUT_MS = 30_000
PRODUCE_TIMEOUT_S = 30.0
BALANCE_TIMEOUT_S = 30.0
OFFSETS_PARTITIONS = 4
# Members of these tests never heartbeat: a long session keeps them in their group for the
# test's length, and each test makes them leave at the end.
MEMBER_SESSION_TIMEOUT_MS = 120_000
REBALANCE_TIMEOUT_MS = 10_000
TOPIC = "clicks"
# Records per partition of TOPIC; record i of a partition has timestamp T0 + i s.
RECORDS = {0: 10, 1: 6}
T0_MS = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("group-admin"))
    try:
        running = factory(
            controllers=1,
            storage_nodes=2,
            group_coordinators=2,
            gateways=0,
            config_overrides={
                "controller": {
                    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                    "offsets.topic.replication.factor": "2",
                },
                "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
            },
        )
        with Admin(running.controller_bootstrap_servers) as admin:
            created = admin.create_topics(
                [NewTopic(TOPIC, num_partitions=len(RECORDS), replication_factor=2)]
            )
            assert created == {TOPIC: None}
        bootstrap = running.bootstrap_servers(Role.STORAGE_NODE)
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            futures = [
                producer.send(TOPIC, b"v%d" % i, partition=p, timestamp=T0_MS + i * 1000)
                for p, count in RECORDS.items()
                for i in range(count)
            ]
            producer.flush(PRODUCE_TIMEOUT_S)
            for future in futures:
                future.result(0)
        yield running
    finally:
        factory.close(keep_files=False)


@pytest.fixture
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(cluster.controller_bootstrap_servers, default_api_timeout_ms=ADMIN_TIMEOUT_MS) as a:
        yield a


@dataclass(frozen=True)
class Member:
    client: GroupClient
    member_id: str
    generation_id: int


def _assignment(partitions: list[int]) -> bytes:
    encoded: bytes = ConsumerProtocolAssignment(0, [(TOPIC, partitions)], b"").encode()
    return encoded


@contextmanager
def active_member(
    cluster: LocalCluster, group_id: str, partitions: list[int], instance_id: str | None = None
) -> Iterator[Member]:
    """The only member of ``group_id`` (Stable, assigned ``partitions`` of TOPIC) until the
    block ends; then it leaves and the group is Empty."""
    with group_client(cluster, group_id) as client:
        member_id = ""
        while True:
            joined = client.call(
                "JoinGroup",
                group_pb2.JoinGroupRequest(
                    group_id=group_id,
                    session_timeout_ms=MEMBER_SESSION_TIMEOUT_MS,
                    rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                    member_id=member_id,
                    group_instance_id=instance_id,
                    protocol_type="consumer",
                    protocols=[
                        group_pb2.JoinGroupProtocol(
                            name="range",
                            metadata=ConsumerProtocolSubscription(0, [TOPIC], b"").encode(),
                        )
                    ],
                    client_id="admin-test",
                    client_host="/127.0.0.1",
                ),
                "JoinGroup",
            )
            assert isinstance(joined, group_pb2.JoinGroupResponse)
            if error_code(joined.error_code) is not ErrorCode.MEMBER_ID_REQUIRED:
                break
            member_id = joined.member_id
        assert error_code(joined.error_code) is ErrorCode.NONE, joined.error_message
        synced = client.call(
            "SyncGroup",
            group_pb2.SyncGroupRequest(
                group_id=group_id,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id=instance_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[
                    group_pb2.SyncGroupAssignment(
                        member_id=joined.member_id, assignment=_assignment(partitions)
                    )
                ],
            ),
            "SyncGroup",
        )
        assert isinstance(synced, group_pb2.SyncGroupResponse)
        assert error_code(synced.error_code) is ErrorCode.NONE, synced.error_message
        try:
            yield Member(client, joined.member_id, joined.generation_id)
        finally:
            client.call(
                "LeaveGroup",
                group_pb2.LeaveGroupRequest(
                    group_id=group_id,
                    members=[
                        group_pb2.LeavingMember(
                            member_id=joined.member_id, group_instance_id=instance_id
                        )
                    ],
                ),
                "LeaveGroup",
            )


def _member_commit(member: Member, offsets: dict[int, int]) -> None:
    answer = member.client.call(
        "CommitOffsets",
        group_pb2.CommitOffsetsRequest(
            group_id=member.client.group_id,
            generation_id=member.generation_id,
            member_id=member.member_id,
            partitions=[
                group_pb2.OffsetCommitPartition(topic=TOPIC, partition=p, committed_offset=o)
                for p, o in offsets.items()
            ],
        ),
        "CommitOffsets",
    )
    assert isinstance(answer, group_pb2.CommitOffsetsResponse)
    assert {error_code(p.error_code) for p in answer.partitions} == {ErrorCode.NONE}


def _committed(admin: Admin, group_id: str) -> dict[int, int]:
    return {
        tp.partition: value.offset
        for tp, value in admin.list_consumer_group_offsets(group_id).items()
        if tp.topic == TOPIC
    }


def _tp(partition: int) -> TopicPartition:
    return TopicPartition(TOPIC, partition)


def _brook(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            BROOK,
            "groups",
            *args,
            "--bootstrap-server",
            cluster.controller_bootstrap_servers,
            "--timeout-ms",
            str(ADMIN_TIMEOUT_MS),
        ],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


# ---------------------------------------------------------------------------- Admin


def test_list_merges_every_coordinator_and_describe_decodes_member_assignments(
    cluster: LocalCluster, admin: Admin
) -> None:
    offline = [f"offline-{i}" for i in range(8)]
    for group_id in offline:
        assert admin.alter_consumer_group_offsets(group_id, {_tp(0): 1}) == {_tp(0): None}
    coordinators = {cluster.spec(n).node_id for n in cluster.names(Role.GROUP_COORDINATOR)}
    # The controller balances __consumer_offsets over the coordinators once both registered.
    wait_until(
        lambda: (
            {d.coordinator for d in admin.describe_consumer_groups(offline).values()}
            == coordinators
        ),
        "the groups to be spread over both coordinators",
        BALANCE_TIMEOUT_S,
        poll_s=0.2,
    )
    with active_member(cluster, "dashboard", [0, 1], instance_id="dash-1") as member:
        listed = {g.group_id: g for g in admin.list_consumer_groups()}
        assert listed["dashboard"].state is ConsumerGroupState.STABLE
        assert listed["dashboard"].protocol_type == "consumer"
        for group_id in offline:
            assert listed[group_id].state is ConsumerGroupState.EMPTY
        stable = admin.list_consumer_groups(states=[ConsumerGroupState.STABLE])
        assert "dashboard" in {g.group_id for g in stable}
        assert not {g.group_id for g in stable} & set(offline)

        # The groups live on both coordinators, so the list above merged two answers.
        dashboard = admin.describe_consumer_groups(["dashboard"])["dashboard"]
        assert dashboard.coordinator in coordinators
        assert dashboard.state is ConsumerGroupState.STABLE
        assert (dashboard.protocol_type, dashboard.protocol_name) == ("consumer", "range")
        [only] = dashboard.members
        assert only.member_id == member.member_id
        assert only.group_instance_id == "dash-1"
        assert (only.client_id, only.host) == ("admin-test", "/127.0.0.1")
        assert only.assignment == (_tp(0), _tp(1))
    assert admin.describe_consumer_groups(["dashboard"])["dashboard"].members == ()
    unknown = admin.describe_consumer_groups(["never-existed"])["never-existed"]
    assert (unknown.state, unknown.members) == (ConsumerGroupState.DEAD, ())


def test_lag_is_log_end_offset_minus_committed_offset(cluster: LocalCluster, admin: Admin) -> None:
    with active_member(cluster, "lagging", [0, 1]) as member:
        _member_commit(member, {0: 4})
        assert admin.describe_consumer_group_lag("lagging") == {
            _tp(0): PartitionLag(4, RECORDS[0], RECORDS[0] - 4),
            # Assigned but never committed: no lag to tell.
            _tp(1): PartitionLag(None, RECORDS[1], None),
        }
        _member_commit(member, {0: RECORDS[0], 1: 2})
        lags = admin.describe_consumer_group_lag("lagging")
        assert {tp: lag.lag for tp, lag in lags.items()} == {_tp(0): 0, _tp(1): RECORDS[1] - 2}


def test_reset_offsets_commits_earliest_latest_and_by_timestamp(admin: Admin) -> None:
    group_id = "replay"
    admin.alter_consumer_group_offsets(group_id, {_tp(0): 5, _tp(1): 5})

    planned = admin.reset_consumer_group_offsets(group_id, [TOPIC], to="earliest", dry_run=True)
    assert planned == {_tp(0): 0, _tp(1): 0}
    assert _committed(admin, group_id) == {0: 5, 1: 5}, "a dry run committed"

    assert admin.reset_consumer_group_offsets(group_id, [TOPIC], to="earliest") == planned
    assert _committed(admin, group_id) == {0: 0, 1: 0}

    admin.reset_consumer_group_offsets(group_id, [TOPIC], to="latest")
    assert _committed(admin, group_id) == RECORDS

    # Partition 0 has a record at T0 + 8 s; partition 1's last is at T0 + 5 s, so it goes to
    # its end.
    admin.reset_consumer_group_offsets(group_id, [TOPIC], timestamp_ms=T0_MS + 7500)
    assert _committed(admin, group_id) == {0: 8, 1: RECORDS[1]}
    admin.reset_consumer_group_offsets(group_id, [TOPIC], timestamp_ms=T0_MS + 2000)
    assert _committed(admin, group_id) == {0: 2, 1: 2}


def test_offsets_of_an_active_group_cannot_be_reset_or_altered_from_outside(
    cluster: LocalCluster, admin: Admin
) -> None:
    with active_member(cluster, "busy", [0, 1]) as member:
        _member_commit(member, {0: 3, 1: 3})
        with pytest.raises(ApiError) as refused:
            admin.reset_consumer_group_offsets("busy", [TOPIC], to="earliest", dry_run=True)
        assert refused.value.code is ErrorCode.NON_EMPTY_GROUP
        # The coordinator itself rejects a commit from outside the generation.
        results = admin.alter_consumer_group_offsets("busy", {_tp(0): 0, _tp(1): 0})
        assert {tp: e.code for tp, e in results.items() if e is not None} == {
            _tp(0): ErrorCode.UNKNOWN_MEMBER_ID,
            _tp(1): ErrorCode.UNKNOWN_MEMBER_ID,
        }
        assert _committed(admin, "busy") == {0: 3, 1: 3}
    # Once the member has left, the same reset goes through.
    assert admin.reset_consumer_group_offsets("busy", [TOPIC], to="earliest") == {
        _tp(0): 0,
        _tp(1): 0,
    }
    assert _committed(admin, "busy") == {0: 0, 1: 0}


def test_delete_refuses_a_group_with_members_and_removes_an_empty_one_with_its_offsets(
    cluster: LocalCluster, admin: Admin
) -> None:
    admin.alter_consumer_group_offsets("finished", {_tp(0): 7, _tp(1): 1})
    with active_member(cluster, "running", [0]):
        results = admin.delete_consumer_groups(["running", "finished", "no-such-group"])
        codes = {g: None if e is None else e.code for g, e in results.items()}
        assert codes == {
            "running": ErrorCode.NON_EMPTY_GROUP,
            "finished": None,
            "no-such-group": ErrorCode.GROUP_ID_NOT_FOUND,
        }
        assert admin.list_consumer_group_offsets("finished") == {}
        assert "finished" not in {g.group_id for g in admin.list_consumer_groups()}
        assert admin.describe_consumer_groups(["finished"])["finished"].state is (
            ConsumerGroupState.DEAD
        )
        assert admin.describe_consumer_groups(["running"])["running"].state is (
            ConsumerGroupState.STABLE
        )


def test_bad_arguments_are_refused_before_anything_is_sent(admin: Admin) -> None:
    admin.alter_consumer_group_offsets("untouched", {_tp(0): 3})
    with pytest.raises(ValueError, match="exactly one"):
        admin.reset_consumer_group_offsets("untouched", [TOPIC])
    with pytest.raises(ValueError, match="exactly one"):
        admin.reset_consumer_group_offsets("untouched", [TOPIC], to="latest", timestamp_ms=1)
    with pytest.raises(ValueError, match="earliest"):
        admin.reset_consumer_group_offsets("untouched", [TOPIC], to="start")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        admin.alter_consumer_group_offsets("untouched", {_tp(0): -5})
    with pytest.raises(ApiError) as unknown_topic:
        admin.reset_consumer_group_offsets("untouched", ["no-such-topic"], to="earliest")
    assert unknown_topic.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(ApiError) as invalid:
        admin.list_consumer_group_offsets("")
    assert invalid.value.code is ErrorCode.INVALID_GROUP_ID
    assert admin.list_consumer_group_offsets("untouched") == {_tp(0): OffsetAndMetadata(3)}


# ---------------------------------------------------------------------------- CLI


def test_cli_lists_and_describes_groups_with_members_and_lag(cluster: LocalCluster) -> None:
    with active_member(cluster, "cli-watch", [0, 1]) as member:
        _member_commit(member, {0: 6, 1: 6})
        listed = _brook(cluster, "list")
        assert listed.returncode == 0, listed.stderr
        assert ["GROUP", "STATE", "PROTOCOL-TYPE"] in _rows(listed.stdout)
        assert ["cli-watch", "Stable", "consumer"] in _rows(listed.stdout)

        described = _brook(cluster, "describe", "cli-watch")
        assert described.returncode == 0, described.stderr
        rows = _rows(described.stdout)
        assert rows[1][0] == "cli-watch" and rows[1][2:] == ["Stable", "consumer", "range", "1"]
        assert [member.member_id, "-", "/127.0.0.1", "admin-test", "2", f"{TOPIC}-0,{TOPIC}-1"] in (
            rows
        )

        lag = _brook(cluster, "describe", "cli-watch", "--lag")
        assert lag.returncode == 0, lag.stderr
        assert _rows(lag.stdout)[1:] == [
            ["cli-watch", TOPIC, "0", "6", "10", "4", member.member_id, "/127.0.0.1", "admin-test"],
            ["cli-watch", TOPIC, "1", "6", "6", "0", member.member_id, "/127.0.0.1", "admin-test"],
        ]

        listed_json = json.loads(_brook(cluster, "list", "--json").stdout)["groups"]
        assert {"groupId": "cli-watch", "state": "Stable", "protocolType": "consumer"} in (
            listed_json
        )
        described_json = json.loads(_brook(cluster, "describe", "cli-watch", "--json").stdout)
        assert described_json["state"] == "Stable"
        assert described_json["assignmentStrategy"] == "range"
        [member_json] = described_json["members"]
        assert member_json["memberId"] == member.member_id
        assert member_json["assignment"] == [
            {"topic": TOPIC, "partition": 0},
            {"topic": TOPIC, "partition": 1},
        ]
        assert described_json["offsets"] == [
            {
                "topic": TOPIC,
                "partition": 0,
                "currentOffset": 6,
                "logEndOffset": 10,
                "lag": 4,
                "memberId": member.member_id,
            },
            {
                "topic": TOPIC,
                "partition": 1,
                "currentOffset": 6,
                "logEndOffset": 6,
                "lag": 0,
                "memberId": member.member_id,
            },
        ]

        refused = _brook(cluster, "delete", "cli-watch")
        assert refused.returncode == 1
        assert "NON_EMPTY_GROUP" in refused.stderr

    missing = _brook(cluster, "describe", "cli-nobody")
    assert missing.returncode == 1
    assert "GROUP_ID_NOT_FOUND" in missing.stderr


def test_cli_resets_offsets_only_with_execute_and_deletes_an_empty_group(
    cluster: LocalCluster, admin: Admin
) -> None:
    admin.alter_consumer_group_offsets("cli-replay", {_tp(0): 9, _tp(1): 5})

    dry = _brook(cluster, "reset-offsets", "cli-replay", "--topic", TOPIC, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert _rows(dry.stdout)[1:3] == [
        ["cli-replay", TOPIC, "0", "0"],
        ["cli-replay", TOPIC, "1", "0"],
    ]
    assert "dry run" in dry.stdout
    assert _committed(admin, "cli-replay") == {0: 9, 1: 5}

    at = datetime.fromtimestamp((T0_MS + 3000) / 1000, tz=UTC).isoformat()
    executed = _brook(
        cluster, "reset-offsets", "cli-replay", "--topic", TOPIC, "--to-datetime", at, "--execute"
    )
    assert executed.returncode == 0, executed.stderr
    assert _committed(admin, "cli-replay") == {0: 3, 1: 3}

    latest = _brook(
        cluster, "reset-offsets", "cli-replay", "--topic", TOPIC, "--to-latest", "--execute"
    )
    assert latest.returncode == 0, latest.stderr
    assert _committed(admin, "cli-replay") == RECORDS

    deleted = _brook(cluster, "delete", "cli-replay")
    assert deleted.returncode == 0, deleted.stderr
    assert "Deleted group cli-replay." in deleted.stdout
    assert admin.list_consumer_group_offsets("cli-replay") == {}


def test_cli_reset_offsets_takes_kafkas_targets_and_clamps_them_into_the_log(
    cluster: LocalCluster, admin: Admin
) -> None:
    group = "cli-targets"
    admin.alter_consumer_group_offsets(group, {_tp(0): 5, _tp(1): 2})

    def reset(*args: str) -> subprocess.CompletedProcess[str]:
        done = _brook(cluster, "reset-offsets", "--group", group, *args)
        assert done.returncode == 0, done.stderr
        return done

    # Past the log end (10 and 6 records): the log end.
    reset("--topic", TOPIC, "--to-offset", "8", "--execute")
    assert _committed(admin, group) == {0: 8, 1: 6}
    # One partition named; below the log start: the log start.
    reset("--topic", f"{TOPIC}:1", "--shift-by", "-100", "--execute")
    assert _committed(admin, group) == {0: 8, 1: 0}
    # Every topic of the group, a dry run: printed, nothing committed.
    dry = reset("--all-topics", "--shift-by", "3")
    assert _rows(dry.stdout)[1:3] == [[group, TOPIC, "0", "10"], [group, TOPIC, "1", "3"]]
    assert _committed(admin, group) == {0: 8, 1: 0}
    # A day ago is before every record (the first is an hour old): the first offsets.
    reset("--topic", TOPIC, "--to-latest", "--execute")
    reset("--topic", TOPIC, "--by-duration", "P1D", "--execute")
    assert _committed(admin, group) == {0: 0, 1: 0}
    # 30 minutes ago is after every record: the log end.
    reset("--topic", TOPIC, "--by-duration", "PT30M", "--execute")
    assert _committed(admin, group) == RECORDS


def test_cli_reset_offsets_all_topics_moves_only_the_partitions_with_committed_offsets(
    cluster: LocalCluster, admin: Admin
) -> None:
    group = "cli-one-partition"
    admin.alter_consumer_group_offsets(group, {_tp(0): 5})

    # As Kafka's tool: the group's committed partitions, not the rest of their topic.
    done = _brook(cluster, "reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert _rows(done.stdout)[1:] == [[group, TOPIC, "0", "0"]]
    assert _committed(admin, group) == {0: 0}
    # A topic named: every partition of it.
    done = _brook(cluster, "reset-offsets", group, "--topic", TOPIC, "--to-latest", "--execute")
    assert done.returncode == 0, done.stderr
    assert _committed(admin, group) == RECORDS


def test_cli_refuses_to_reset_or_delete_the_offsets_a_member_consumes(
    cluster: LocalCluster, admin: Admin
) -> None:
    group = "cli-busy"
    with active_member(cluster, group, [0, 1]) as member:
        _member_commit(member, {0: 4, 1: 2})
        refused = _brook(cluster, "reset-offsets", group, "--topic", TOPIC, "--to-earliest")
        assert refused.returncode == 1
        assert "NON_EMPTY_GROUP" in refused.stderr and "has no members" in refused.stderr
        subscribed = _brook(cluster, "delete-offsets", group, "--topic", TOPIC)
        assert subscribed.returncode == 1
        assert _rows(subscribed.stdout)[1:] == [
            [TOPIC, "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
            [TOPIC, "1", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
        ]
        assert _committed(admin, group) == {0: 4, 1: 2}
    # The member left: the group no longer consumes the topic.
    deleted = _brook(cluster, "delete-offsets", "--group", group, "--topic", f"{TOPIC}:0")
    assert deleted.returncode == 0, deleted.stderr
    assert _rows(deleted.stdout)[1:] == [[TOPIC, "0", "Successful"]]
    assert _committed(admin, group) == {1: 2}


def test_console_consumer_with_a_group_commits_and_the_next_run_continues(
    cluster: LocalCluster, admin: Admin
) -> None:
    group = "cli-console"

    def consume(*args: str) -> list[tuple[int, int]]:
        done = subprocess.run(
            [
                BROOK, "console-consumer", "--topic", TOPIC, "--group", group,
                "--property", "print.partition=true", "--property", "print.offset=true",
                "--bootstrap-server", cluster.controller_bootstrap_servers, *args,
            ],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        printed = []
        for line in done.stdout.splitlines():
            partition, offset, _ = line.split("\t")
            printed.append((int(partition.removeprefix("Partition:")), int(offset[7:])))
        return printed

    first = consume("--from-beginning", "--max-messages", "7", "--timeout-ms", "30000")
    assert len(first) == 7
    # What was printed is committed; nothing beyond it.
    committed = _committed(admin, group)
    assert committed == {p: max(o for q, o in first if q == p) + 1 for p, _ in first}

    # --from-beginning only where the group has committed nothing (as Kafka's): a partition
    # the first run did not reach starts at its beginning, the others where it stopped.
    rest = consume("--from-beginning", "--timeout-ms", "5000")
    every = {(p, o) for p, count in RECORDS.items() for o in range(count)}
    assert sorted(first + rest) == sorted(every), "each record once over the two runs"
    assert _committed(admin, group) == RECORDS
    assert admin.describe_consumer_groups([group])[group].state is ConsumerGroupState.EMPTY


def test_cli_bad_arguments_exit_2_with_a_clear_message_and_change_nothing(
    cluster: LocalCluster, admin: Admin
) -> None:
    admin.alter_consumer_group_offsets("cli-guarded", {_tp(0): 4})
    bad_date = _brook(
        cluster,
        "reset-offsets",
        "cli-guarded",
        "--topic",
        TOPIC,
        "--to-datetime",
        "yesterday",
        "--execute",
    )
    assert bad_date.returncode == 2
    assert "--to-datetime 'yesterday' is not an ISO 8601 date and time" in bad_date.stderr
    no_target = _brook(cluster, "reset-offsets", "cli-guarded", "--topic", TOPIC, "--execute")
    assert no_target.returncode == 2
    assert (
        "one of the arguments --to-earliest --to-latest --to-offset --shift-by --by-duration "
        "--to-datetime is required"
    ) in no_target.stderr
    for args, problem in (
        (("--by-duration", "1h"), "--by-duration '1h' is not an ISO 8601 duration"),
        (("--to-offset", "-1"), "offset=-1 must not be negative"),
    ):
        refused = _brook(cluster, "reset-offsets", "cli-guarded", "--topic", TOPIC, *args)
        assert refused.returncode == 2 and problem in refused.stderr, refused.stderr
    bad_partition = _brook(
        cluster, "reset-offsets", "cli-guarded", "--topic", f"{TOPIC}:x", "--to-earliest"
    )
    assert bad_partition.returncode == 2 and "TOPIC:P,P" in bad_partition.stderr
    twice = _brook(
        cluster, "delete-offsets", "cli-guarded", "--group", "cli-guarded", "--topic", TOPIC
    )
    assert twice.returncode == 2 and "name the group once" in twice.stderr
    assert _committed(admin, "cli-guarded") == {0: 4}


def test_an_admin_bootstrapped_from_storage_nodes_serves_groups_and_topics_only(
    cluster: LocalCluster, admin: Admin
) -> None:
    """What the Spark sink's driver uses: the coordinators and the topics are found through
    a storage node's GetMetadata; an operation only the controllers answer is refused with a
    clear error instead of being sent to a storage node."""
    group = "storage-bootstrapped"
    tp = TopicPartition(TOPIC, 0)
    with Admin(
        cluster.bootstrap_servers(Role.STORAGE_NODE),
        bootstrap_role="storage_node",
        default_api_timeout_ms=ADMIN_TIMEOUT_MS,
    ) as from_storage:
        assert from_storage.alter_consumer_group_offsets(
            group, {tp: OffsetAndMetadata(3, "by storage")}
        ) == {tp: None}
        assert admin.list_consumer_group_offsets(group) == {tp: OffsetAndMetadata(3, "by storage")}
        assert from_storage.list_consumer_group_offsets(group) == admin.list_consumer_group_offsets(
            group
        )
        assert from_storage.describe_topics([TOPIC]) == admin.describe_topics([TOPIC])
        with pytest.raises(ConfigError, match="the operation is the controllers'"):
            from_storage.create_topics([NewTopic("not-created", 1, 1)])
    assert TOPIC in admin.list_topics() and "not-created" not in admin.list_topics()
    assert admin.delete_consumer_groups([group]) == {group: None}
