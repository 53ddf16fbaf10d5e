"""The group coordinator in a real cluster: three controllers, storage nodes and coordinators
as processes, spoken to over raw gRPC (brook.v1.GroupCoordinatorService) the way any client
in any language would.

Offsets live in __consumer_offsets on the storage nodes (4 partitions here, replicated to every
storage node); coordinators own those partitions as the controllers assign them. The tests
prove the classic group round trip, that committed offsets survive the kill -9 of the
coordinator that owned them (the other coordinator takes its partitions over and replays
them), that a restarted coordinator replays only the tail of a partition thanks to its local
view, and that a static member's restart causes no rebalance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest
from brook_group_coordinator.ownership import offsets_partition_for
from cluster_fixture import ClusterFactory
from coordinator_client import CoordinatorClient, wait_for

from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import group_pb2

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 4
HEARTBEAT_INTERVAL_MS = 200
BROKER_SESSION_TIMEOUT_MS = 2000
MEMBER_SESSION_TIMEOUT_MS = 6000
REBALANCE_TIMEOUT_MS = 10_000
WAIT_TIMEOUT_S = 45.0
TOPIC = "orders"
PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"
# Errors that say "ask again (maybe elsewhere) shortly".
_TRANSIENT = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
_R = TypeVar("_R")


def _cluster(
    cluster_factory: ClusterFactory, *, storage_nodes: int, group_coordinators: int
) -> LocalCluster:
    session = str(BROKER_SESSION_TIMEOUT_MS)
    heartbeat = str(HEARTBEAT_INTERVAL_MS)
    return cluster_factory(
        controllers=3,
        storage_nodes=storage_nodes,
        group_coordinators=group_coordinators,
        gateways=0,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": session,
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "offsets.topic.replication.factor": str(storage_nodes),
            },
            "storage-node": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
            },
            "group-coordinator": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
                "group.initial.rebalance.delay.ms": "0",
                "group.min.session.timeout.ms": "1000",
            },
        },
    )


def _wait(condition: Callable[[], _R | None], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> _R:
    return wait_for(condition, what, timeout_s)


class GroupClient(CoordinatorClient):
    """A raw-gRPC group client: finds the coordinator of its group through any coordinator
    and follows it when it moves."""

    def __init__(self, cluster: LocalCluster, group_id: str) -> None:
        super().__init__(
            cluster, group_id, group_pb2.COORDINATOR_TYPE_GROUP, _TRANSIENT, WAIT_TIMEOUT_S
        )
        self.group_id = group_id


@contextmanager
def group_client(cluster: LocalCluster, group_id: str) -> Iterator[GroupClient]:
    client = GroupClient(cluster, group_id)
    try:
        yield client
    finally:
        client.close()


def _join(
    client: GroupClient, member_id: str = "", instance_id: str | None = None
) -> group_pb2.JoinGroupResponse:
    request = group_pb2.JoinGroupRequest(
        group_id=client.group_id,
        session_timeout_ms=MEMBER_SESSION_TIMEOUT_MS,
        rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=PROTOCOL_TYPE,
        protocols=[group_pb2.JoinGroupProtocol(name=ASSIGNOR, metadata=TOPIC.encode())],
        client_id="test",
    )
    answer = client.call("JoinGroup", request, "JoinGroup")
    assert isinstance(answer, group_pb2.JoinGroupResponse)
    if error_code(answer.error_code) is ErrorCode.MEMBER_ID_REQUIRED:
        return _join(client, answer.member_id, instance_id)
    return answer


def _join_and_sync(
    client: GroupClient, assignment: bytes, instance_id: str | None = None
) -> tuple[group_pb2.JoinGroupResponse, group_pb2.SyncGroupResponse]:
    joined = _join(client, instance_id=instance_id)
    assert error_code(joined.error_code) is ErrorCode.NONE, joined.error_message
    assert joined.leader_id == joined.member_id
    return joined, _sync(client, joined, instance_id, {joined.member_id: assignment})


def _sync(
    client: GroupClient,
    joined: group_pb2.JoinGroupResponse,
    instance_id: str | None,
    assignments: dict[str, bytes],
) -> group_pb2.SyncGroupResponse:
    synced = client.call(
        "SyncGroup",
        group_pb2.SyncGroupRequest(
            group_id=client.group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=ASSIGNOR,
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()
            ],
        ),
        "SyncGroup",
    )
    assert isinstance(synced, group_pb2.SyncGroupResponse)
    assert error_code(synced.error_code) is ErrorCode.NONE, synced.error_message
    return synced


def _commit(
    client: GroupClient, joined: group_pb2.JoinGroupResponse, offsets: dict[int, int]
) -> None:
    answer = client.call(
        "CommitOffsets",
        group_pb2.CommitOffsetsRequest(
            group_id=client.group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            partitions=[
                group_pb2.OffsetCommitPartition(
                    topic=TOPIC,
                    partition=partition,
                    committed_offset=offset,
                    metadata=f"m{offset}",
                )
                for partition, offset in offsets.items()
            ],
        ),
        "CommitOffsets",
    )
    assert isinstance(answer, group_pb2.CommitOffsetsResponse)
    assert [error_code(p.error_code) for p in answer.partitions] == [ErrorCode.NONE] * len(offsets)


def _fetch(client: GroupClient) -> dict[int, tuple[int, str]]:
    answer = client.call(
        "FetchOffsets", group_pb2.FetchOffsetsRequest(group_id=client.group_id), "FetchOffsets"
    )
    assert isinstance(answer, group_pb2.FetchOffsetsResponse)
    assert error_code(answer.error_code) is ErrorCode.NONE, answer.error_message
    return {
        p.partition: (p.committed_offset, p.metadata) for p in answer.partitions if p.topic == TOPIC
    }


def test_group_round_trip_over_grpc_commits_offsets_to_the_storage_nodes(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory, storage_nodes=1, group_coordinators=1)
    with group_client(cluster, "round-trip") as client:
        joined, synced = _join_and_sync(client, b"orders:0,1")
        assert joined.generation_id == 1
        assert synced.assignment == b"orders:0,1"
        beat = client.call(
            "Heartbeat",
            group_pb2.HeartbeatRequest(
                group_id=client.group_id,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
            ),
            "Heartbeat",
        )
        assert isinstance(beat, group_pb2.HeartbeatResponse)
        assert error_code(beat.error_code) is ErrorCode.NONE
        _commit(client, joined, {0: 17, 1: 42})
        assert _fetch(client) == {0: (17, "m17"), 1: (42, "m42")}


_LOADED = re.compile(
    r'msg="loaded a __consumer_offsets partition".* partition=(\d+) .*replayed_from_offset=(\d+)'
)


def _replayed_from(log_text: str, partition: int) -> list[int]:
    """Where each load of ``partition`` logged in ``log_text`` started reading the topic."""
    found = []
    for line in log_text.splitlines():
        match = _LOADED.search(line)
        if match is not None and int(match.group(1)) == partition:
            found.append(int(match.group(2)))
    return found


def test_offsets_survive_kill_of_the_owning_coordinator(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory, storage_nodes=2, group_coordinators=2)
    groups = [f"group-{i}" for i in range(8)]
    committed: dict[str, dict[int, int]] = {}
    owners: dict[str, int] = {}
    for index, group_id in enumerate(groups):
        with group_client(cluster, group_id) as client:
            joined, _ = _join_and_sync(client, b"all")
            offsets = {p: 100 * index + p for p in range(3)}
            _commit(client, joined, offsets)
            committed[group_id] = offsets
            owners[group_id] = client.find()[0]
    assert len(set(owners.values())) == 2, "the 8 groups should spread over both coordinators"
    victim_id = owners[groups[0]]
    victim = next(
        n for n in cluster.names(Role.GROUP_COORDINATOR) if cluster.spec(n).node_id == victim_id
    )
    cluster.kill(victim)
    cluster.wait(victim, 10_000)
    for group_id in groups:
        with group_client(cluster, group_id) as client:
            # Until the controllers fence the victim, FindCoordinator still names it and the
            # calls fail: the client re-finds, as any Kafka client does.
            assert _fetch(client) == {p: (o, f"m{o}") for p, o in committed[group_id].items()}
            assert client.find()[0] != victim_id


def test_static_member_rejoins_without_rebalance(cluster_factory: ClusterFactory) -> None:
    cluster = _cluster(cluster_factory, storage_nodes=1, group_coordinators=1)
    with group_client(cluster, "static") as client:
        joined, synced = _join_and_sync(client, b"orders:0-5", instance_id="consumer-a")
        # A restart: the member forgot its id and joins again with its instance id only.
        rejoined = _join(client, instance_id="consumer-a")
        assert error_code(rejoined.error_code) is ErrorCode.NONE, rejoined.error_message
        assert rejoined.generation_id == joined.generation_id, "a rebalance happened"
        assert rejoined.member_id != joined.member_id
        # No rebalance, so nothing to assign: the member gets back the assignment it had.
        synced_again = _sync(client, rejoined, "consumer-a", {})
        assert synced_again.assignment == synced.assignment
        old = client.call(
            "Heartbeat",
            group_pb2.HeartbeatRequest(
                group_id=client.group_id,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id="consumer-a",
            ),
            "Heartbeat",
        )
        assert isinstance(old, group_pb2.HeartbeatResponse)
        assert error_code(old.error_code) is ErrorCode.FENCED_INSTANCE_ID


def test_restarted_coordinator_replays_only_the_tail_after_its_local_view(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory, storage_nodes=1, group_coordinators=1)
    name = cluster.names(Role.GROUP_COORDINATOR)[0]
    group_id = "restarts"
    partition = offsets_partition_for(group_id, OFFSETS_PARTITIONS)
    with group_client(cluster, group_id) as client:
        joined, _ = _join_and_sync(client, b"all")
        for offset in (10, 20, 30):
            _commit(client, joined, {0: offset, 1: offset + 1})
        # A load right after start saw an empty partition; the commits above reached the
        # view as they were appended.
        cluster.stop(name)
        log_path = cluster.spec(name).log_path
        before = log_path.read_text(encoding="utf-8")
        cluster_factory.start(cluster, name)
        assert _fetch(client) == {0: (30, "m30"), 1: (31, "m31")}
        replayed = _wait(
            lambda: (
                _replayed_from(log_path.read_text(encoding="utf-8")[len(before) :], partition)
                or None
            ),
            "the reload's log line",
        )
        # Everything committed before the restart came from the local view, not the topic.
        assert replayed[-1] > 0
