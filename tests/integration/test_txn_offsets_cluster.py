"""Transactional offsets in a real cluster, over raw gRPC: offsets committed in a transaction
(TxnCommitOffsets) stay pending in __consumer_offsets on the storage nodes across the kill -9
and restart of their coordinator, and become the group's committed offsets when the
transaction coordinator completes the transaction, also across a second kill -9."""

from __future__ import annotations

import pytest
from cluster_fixture import ClusterFactory
from test_group_coordinator_cluster import TOPIC, GroupClient, _cluster, group_client

from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import common_pb2, group_pb2

pytestmark = pytest.mark.integration

PRODUCER_ID = 7_000
PRODUCER_EPOCH = 2
OFFSETS = {0: 41, 1: 42}
KILL_WAIT_MS = 10_000


def _fetch(client: GroupClient, *, require_stable: bool) -> dict[int, tuple[ErrorCode, int]]:
    answer = client.call(
        "FetchOffsets",
        group_pb2.FetchOffsetsRequest(
            group_id=client.group_id,
            partitions=[common_pb2.TopicPartition(topic=TOPIC, partition=p) for p in OFFSETS],
            require_stable=require_stable,
        ),
        "FetchOffsets",
    )
    assert isinstance(answer, group_pb2.FetchOffsetsResponse)
    assert error_code(answer.error_code) is ErrorCode.NONE, answer.error_message
    return {p.partition: (error_code(p.error_code), p.committed_offset) for p in answer.partitions}


def _kill_and_restart(cluster_factory: ClusterFactory, cluster: LocalCluster) -> None:
    name = cluster.names(Role.GROUP_COORDINATOR)[0]
    cluster.kill(name)
    cluster.wait(name, KILL_WAIT_MS)
    cluster_factory.start(cluster, name)


def test_txn_offsets_stay_pending_across_a_kill_and_commit_on_completion(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory, storage_nodes=1, group_coordinators=1)
    with group_client(cluster, "copier-group") as client:
        committed = client.call(
            "TxnCommitOffsets",
            group_pb2.TxnCommitOffsetsRequest(
                transactional_id="copier",
                group_id=client.group_id,
                producer_id=PRODUCER_ID,
                producer_epoch=PRODUCER_EPOCH,
                generation_id=-1,
                partitions=[
                    group_pb2.OffsetCommitPartition(topic=TOPIC, partition=p, committed_offset=o)
                    for p, o in OFFSETS.items()
                ],
            ),
            "TxnCommitOffsets",
        )
        assert isinstance(committed, group_pb2.TxnCommitOffsetsResponse)
        assert [error_code(p.error_code) for p in committed.partitions] == [ErrorCode.NONE] * 2
        unstable = {p: (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1) for p in OFFSETS}
        assert _fetch(client, require_stable=True) == unstable
        assert _fetch(client, require_stable=False) == {p: (ErrorCode.NONE, -1) for p in OFFSETS}

        _kill_and_restart(cluster_factory, cluster)
        assert _fetch(client, require_stable=True) == unstable

        ended = client.call(
            "CompleteTransaction",
            group_pb2.CompleteTransactionRequest(
                group_id=client.group_id,
                producer_id=PRODUCER_ID,
                producer_epoch=PRODUCER_EPOCH,
                committed=True,
                coordinator_epoch=0,
                transactional_id="copier",
            ),
            "CompleteTransaction",
        )
        assert isinstance(ended, group_pb2.CompleteTransactionResponse)
        assert error_code(ended.error_code) is ErrorCode.NONE, ended.error_message
        visible = {p: (ErrorCode.NONE, o) for p, o in OFFSETS.items()}
        assert _fetch(client, require_stable=True) == visible

        _kill_and_restart(cluster_factory, cluster)
        assert _fetch(client, require_stable=True) == visible
