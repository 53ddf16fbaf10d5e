"""A deposed group coordinator cannot make committed offsets go back (real processes).

The zombie: the coordinator owning a group takes a commit of an older offset that its
__consumer_offsets partition cannot store yet (its ISR is below min.insync.replicas: one of the
two storage nodes is paused), so it keeps retrying the append within offsets.commit.timeout.ms.
It is paused (SIGSTOP) past its session meanwhile; the storage node comes back, the controllers
give the partition to the other coordinator, which fences and replays it, and a newer offset
is committed there. Then the old coordinator resumes: its retry is due at once, before it even
learns that it lost the partition. Without fencing that retry is appended after the new
owner's commit and acknowledged, and every later replay goes back to the older offset. With
fencing the storage node refuses it: not acknowledged, and a replay (the new owner restarted)
still has the new owner's offset.
"""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from brook_group_coordinator.ownership import offsets_partition_for
from cluster_fixture import ClusterFactory, wait_until
from coordinator_client import RPC_TIMEOUT_S
from test_group_coordinator_cluster import (
    BROKER_SESSION_TIMEOUT_MS,
    HEARTBEAT_INTERVAL_MS,
    OFFSETS_PARTITIONS,
    TOPIC,
    WAIT_TIMEOUT_S,
    _fetch,
    group_client,
)

from brook.client.admin import Admin
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import group_pb2, group_pb2_grpc

pytestmark = pytest.mark.integration

GROUP = "fenced-commits"
FIRST_OFFSET = 10
NEW_OWNER_OFFSET = 500
STALE_OFFSET = 20
STORAGE_NODES = 2
# Long enough that the paused coordinator's append is still within its time when it resumes.
COMMIT_TIMEOUT_MS = 60_000
STALE_RPC_TIMEOUT_S = COMMIT_TIMEOUT_MS / 1000 + 10
# Time for the coordinator to try (and be refused) at least once before it is paused.
FIRST_ATTEMPT_S = 0.5


def _fencing_cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    session = str(BROKER_SESSION_TIMEOUT_MS)
    heartbeat = str(HEARTBEAT_INTERVAL_MS)
    return cluster_factory(
        controllers=3,
        storage_nodes=STORAGE_NODES,
        group_coordinators=2,
        gateways=0,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": session,
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "offsets.topic.replication.factor": str(STORAGE_NODES),
            },
            "storage-node": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
                "min.insync.replicas": str(STORAGE_NODES),
                "replica.lag.time.max.ms": session,
            },
            "group-coordinator": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
                "offsets.commit.timeout.ms": str(COMMIT_TIMEOUT_MS),
            },
        },
    )


def _isr_size(admin: Admin, partition: int) -> int:
    topic = admin.describe_topics(["__consumer_offsets"], include_internal=True)
    return len(topic["__consumer_offsets"].partitions[partition].isr)


def _stub(address: str, channels: list[grpc.Channel]) -> group_pb2_grpc.GroupCoordinatorServiceStub:
    channel = grpc.insecure_channel(address)
    channels.append(channel)
    return group_pb2_grpc.GroupCoordinatorServiceStub(channel)  # type: ignore[no-untyped-call]


def _commit_request(offset: int) -> group_pb2.CommitOffsetsRequest:
    # Generation -1 and no member id: a commit from outside the group, accepted while the
    # group is Empty (what admin tools do).
    return group_pb2.CommitOffsetsRequest(
        group_id=GROUP,
        generation_id=-1,
        member_id="",
        partitions=[
            group_pb2.OffsetCommitPartition(
                topic=TOPIC, partition=0, committed_offset=offset, metadata=f"m{offset}"
            )
        ],
    )


def _commit_error(stub: group_pb2_grpc.GroupCoordinatorServiceStub, offset: int) -> ErrorCode:
    answer = stub.CommitOffsets(_commit_request(offset), timeout=RPC_TIMEOUT_S)
    return error_code(answer.partitions[0].error_code)


def _serves_with(stub: group_pb2_grpc.GroupCoordinatorServiceStub, node_id: int) -> bool:
    """Whether the coordinator behind ``stub`` is ``node_id`` for the group and has loaded it."""
    try:
        found = stub.FindCoordinator(
            group_pb2.FindCoordinatorRequest(
                key_type=group_pb2.COORDINATOR_TYPE_GROUP, keys=[GROUP]
            ),
            timeout=RPC_TIMEOUT_S,
        ).coordinators[0]
        if error_code(found.error_code) is not ErrorCode.NONE or found.node_id != node_id:
            return False
        fetched = stub.FetchOffsets(
            group_pb2.FetchOffsetsRequest(group_id=GROUP), timeout=RPC_TIMEOUT_S
        )
    except grpc.RpcError:
        return False
    return error_code(fetched.error_code) is ErrorCode.NONE


def _name_of(cluster: LocalCluster, node_id: int) -> str:
    return next(
        n for n in cluster.names(Role.GROUP_COORDINATOR) if cluster.spec(n).node_id == node_id
    )


def test_a_resumed_deposed_coordinator_cannot_acknowledge_or_store_an_older_commit(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _fencing_cluster(cluster_factory)
    partition = offsets_partition_for(GROUP, OFFSETS_PARTITIONS)
    storage = cluster.names(Role.STORAGE_NODE)[-1]
    channels: list[grpc.Channel] = []
    admin = Admin(cluster.controller_bootstrap_servers, default_api_timeout_ms=10_000)
    try:
        with group_client(cluster, GROUP) as client:
            old_id, old_address = client.find()
        old_name = _name_of(cluster, old_id)
        new_name = next(n for n in cluster.names(Role.GROUP_COORDINATOR) if n != old_name)
        new_id = cluster.spec(new_name).node_id
        old = _stub(old_address, channels)
        new = _stub(cluster.grpc_address(new_name), channels)
        wait_until(lambda: _serves_with(old, old_id), "the first owner to load", WAIT_TIMEOUT_S)
        assert _commit_error(old, FIRST_OFFSET) is ErrorCode.NONE

        cluster.kill(storage, signal.SIGSTOP)
        try:
            wait_until(
                lambda: _isr_size(admin, partition) < STORAGE_NODES,
                "the partition's ISR to shrink",
                WAIT_TIMEOUT_S,
            )
            # Refused before appending (NOT_ENOUGH_REPLICAS), retried with back-off.
            stale = old.CommitOffsets.future(
                _commit_request(STALE_OFFSET), timeout=STALE_RPC_TIMEOUT_S
            )
            time.sleep(FIRST_ATTEMPT_S)
            cluster.kill(old_name, signal.SIGSTOP)
        finally:
            cluster.kill(storage, signal.SIGCONT)
        try:
            wait_until(
                lambda: _isr_size(admin, partition) == STORAGE_NODES,
                "the storage node to rejoin the ISR",
                WAIT_TIMEOUT_S,
            )
            wait_until(
                lambda: _serves_with(new, new_id),
                "the other coordinator to own and load the group's partition",
                WAIT_TIMEOUT_S,
            )
            assert _commit_error(new, NEW_OWNER_OFFSET) is ErrorCode.NONE
        finally:
            cluster.kill(old_name, signal.SIGCONT)
        try:
            stale_answer: ErrorCode | None = error_code(stale.result().partitions[0].error_code)
        except grpc.RpcError:
            stale_answer = None  # no answer at all is not an acknowledgement either
        assert stale_answer is not ErrorCode.NONE, "the deposed coordinator acknowledged"

        cluster.restart(new_name)
        cluster_factory.track(cluster)
        with group_client(cluster, GROUP) as client:
            assert _fetch(client) == {0: (NEW_OWNER_OFFSET, f"m{NEW_OWNER_OFFSET}")}
    finally:
        admin.close()
        for channel in channels:
            channel.close()
