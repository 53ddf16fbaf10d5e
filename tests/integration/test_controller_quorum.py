"""The controller quorum as three real processes: failures of the Raft leader, a paused leader,
a full restart. After each, every controller must hold the same metadata (equal digests at
equal offsets) and nothing acknowledged may be missing."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from brook_controller.image import ControllerImage
from cluster_fixture import ClusterFactory

from brook.client.admin import Admin, NewTopic
from brook.controller_probe import (
    ControllerState,
    describe_controller,
    wait_for_convergence,
    wait_for_leader,
)
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.v1 import admin_pb2, admin_pb2_grpc, common_pb2, controller_pb2, controller_pb2_grpc

pytestmark = pytest.mark.integration

LEADER_TIMEOUT_S = 20
CONVERGENCE_TIMEOUT_S = 20
FAILOVER_BOUND_S = 5
RPC_TIMEOUT_S = 2
# Small enough that the tests' writes compact the Raft log, so restarts load snapshots and a
# controller that was down catches up from one.
SNAPSHOT_EVERY_ENTRIES = "20"


def _quorum(cluster_factory: ClusterFactory, session_ms: int) -> LocalCluster:
    return cluster_factory(
        controllers=3,
        storage_nodes=0,
        group_coordinators=0,
        gateways=0,
        config_overrides={
            "controller": {
                "metadata.log.max.entries.between.snapshots": SNAPSHOT_EVERY_ENTRIES,
                "broker.session.timeout.ms": str(session_ms),
                "offsets.topic.replication.factor": "2",
            }
        },
    )


def _addresses(cluster: LocalCluster) -> list[str]:
    return [cluster.grpc_address(name) for name in cluster.names(Role.CONTROLLER)]


def _name_of(cluster: LocalCluster, node_id: int | None) -> str:
    return next(n for n in cluster.names(Role.CONTROLLER) if cluster.spec(n).node_id == node_id)


def _controller_stub(address: str) -> Any:
    return controller_pb2_grpc.ControllerServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]


def _admin_stub(address: str) -> Any:
    return admin_pb2_grpc.AdminServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]


def _converged_image(addresses: Sequence[str]) -> tuple[list[ControllerState], ControllerImage]:
    """Waits for equal offsets, checks the digests are equal, returns the (common) image."""
    states = wait_for_convergence(addresses, CONVERGENCE_TIMEOUT_S)
    assert len({s.digest for s in states}) == 1, f"controllers diverged: {states}"
    stream = _controller_stub(addresses[0]).WatchMetadata(
        controller_pb2.WatchMetadataRequest(node_id=-1, after_offset=-1), timeout=RPC_TIMEOUT_S
    )
    snapshot = next(iter(stream))
    stream.cancel()
    return states, ControllerImage.from_records(snapshot.records, snapshot.offset)


class FakeNode:
    """A storage node reduced to its control-plane duties: it registers, then heartbeats the
    active controller in a thread, following it across leader changes. Like a real node, it
    keeps the newest controller epoch it has seen and counts answers stamped with an older one
    (which a real node rejects)."""

    def __init__(self, addresses: Sequence[str], node_id: int, interval_s: float = 0.2) -> None:
        self.addresses = list(addresses)
        self.node_id = node_id
        self.interval_s = interval_s
        self.broker_epoch = -1
        self.newest_epoch = 0
        self.stale_answers = 0
        self.fenced_after_unfencing = False
        self._leader: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fake-node-{node_id}")

    def _call(self, method: str, request: Any) -> Any:
        """Sends to the leader it knows, or asks around; None when nobody answered."""
        for address in [a for a in [self._leader] if a] + self.addresses:
            try:
                response = getattr(_controller_stub(address), method)(
                    request, timeout=RPC_TIMEOUT_S / 2
                )
            except grpc.RpcError:
                self._leader = None
                continue
            if response.error_code == ErrorCode.NOT_CONTROLLER:
                hint = response.controller
                self._leader = next(
                    (f"{e.host}:{e.port}" for e in hint.endpoints if e.listener == "GRPC"), None
                )
                continue
            self._leader = address
            return response
        return None

    def start(self, timeout_s: float) -> FakeNode:
        deadline = time.monotonic() + timeout_s
        request = controller_pb2.RegisterBrokerRequest(
            node_id=self.node_id,
            incarnation_id=str(uuid.uuid4()),
            role=common_pb2.NODE_ROLE_STORAGE_NODE,
            endpoints=[common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=19000)],
        )
        while True:
            response = self._call("RegisterBroker", request)
            if response is not None and response.error_code == 0:
                self.broker_epoch = response.broker_epoch
                break
            assert time.monotonic() < deadline, f"registration failed: {response}"
            time.sleep(0.1)
        while self._heartbeat() is not False:
            assert time.monotonic() < deadline, "the node was never unfenced"
            time.sleep(0.05)
        self._thread.start()
        return self

    def _heartbeat(self) -> bool | None:
        """is_fenced of the answer; None when none came."""
        response = self._call(
            "BrokerHeartbeat",
            controller_pb2.BrokerHeartbeatRequest(
                node_id=self.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=2**62,
            ),
        )
        if response is None or response.error_code != 0:
            return None
        if response.controller_epoch < self.newest_epoch:
            self.stale_answers += 1
            return None
        self.newest_epoch = response.controller_epoch
        return bool(response.is_fenced)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._heartbeat():
                self.fenced_after_unfencing = True

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)


@pytest.fixture
def fake_nodes() -> Iterator[list[FakeNode]]:
    nodes: list[FakeNode] = []
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _create(admin: Admin, name: str) -> ErrorCode | None:
    error = admin.create_topics([NewTopic(name, 1, 1)])[name]
    return None if error is None else error.code


def test_acknowledged_creations_survive_kill_of_the_raft_leader_and_the_killed_node_catches_up(
    cluster_factory: ClusterFactory, fake_nodes: list[FakeNode]
) -> None:
    cluster = _quorum(cluster_factory, session_ms=30_000)
    addresses = _addresses(cluster)
    leader = wait_for_leader(addresses, LEADER_TIMEOUT_S)
    fake_nodes.append(FakeNode(addresses, 1).start(LEADER_TIMEOUT_S))
    follower = next(a for a in addresses if a != _addresses_of(cluster, leader.leader_id))
    refused = _admin_stub(follower).CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="via-follower")]),
        timeout=RPC_TIMEOUT_S,
    )
    assert refused.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    acknowledged = []
    with Admin(
        ",".join(addresses),
        request_timeout_ms=1000,
        default_api_timeout_ms=20_000,
        retry_backoff_ms=50,
    ) as admin:
        for index in range(10):
            assert _create(admin, f"t{index:03d}") is None
            acknowledged.append(f"t{index:03d}")

        victim = _name_of(cluster, leader.leader_id)
        cluster.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        first_commit_s = None
        for index in range(10, 40):
            outcome = _create(admin, f"t{index:03d}")
            if outcome is None:
                acknowledged.append(f"t{index:03d}")
                if first_commit_s is None:
                    first_commit_s = time.monotonic() - killed_at
            else:
                # Only a creation whose first attempt died with the leader may find its topic.
                assert outcome is ErrorCode.TOPIC_ALREADY_EXISTS, outcome
        cluster.wait(victim, timeout_ms=10_000)

    survivors = [a for a in addresses if a != cluster.grpc_address(victim)]
    new_leader = wait_for_leader(survivors, LEADER_TIMEOUT_S, newer_than_term=leader.term)
    cluster_factory.start(cluster, victim)
    _, image = _converged_image(addresses)

    assert first_commit_s is not None and first_commit_s < FAILOVER_BOUND_S, first_commit_s
    assert new_leader.leader_id != leader.leader_id
    assert set(acknowledged) <= set(image.topic_ids), "an acknowledged creation was lost"
    assert len(acknowledged) >= 35


def _addresses_of(cluster: LocalCluster, node_id: int | None) -> str:
    return cluster.grpc_address(_name_of(cluster, node_id))


def test_a_paused_leader_steps_down_when_resumed_and_its_stale_epoch_changes_nothing(
    cluster_factory: ClusterFactory, fake_nodes: list[FakeNode]
) -> None:
    session_ms = 3000
    cluster = _quorum(cluster_factory, session_ms=session_ms)
    addresses = _addresses(cluster)
    old = wait_for_leader(addresses, LEADER_TIMEOUT_S)
    node = FakeNode(addresses, 1).start(LEADER_TIMEOUT_S)
    fake_nodes.append(node)
    paused = _name_of(cluster, old.leader_id)
    paused_address = cluster.grpc_address(paused)
    others = [a for a in addresses if a != paused_address]

    cluster.kill(paused, signal.SIGSTOP)
    try:
        new = wait_for_leader(others, LEADER_TIMEOUT_S, newer_than_term=old.term)
        with Admin(",".join(others), default_api_timeout_ms=20_000) as admin:
            assert _create(admin, "while-paused") is None
        # Longer than a session: by the paused leader's clock, every lease has now expired.
        time.sleep(session_ms / 1000 + 0.5)
    finally:
        cluster.kill(paused, signal.SIGCONT)
    stale_write = _admin_stub(paused_address).CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name="stale-write", num_partitions=1)]
        ),
        timeout=10,
    )
    stale_heartbeat = _controller_stub(paused_address).BrokerHeartbeat(
        controller_pb2.BrokerHeartbeatRequest(
            node_id=1, broker_epoch=node.broker_epoch, current_metadata_offset=2**62
        ),
        timeout=10,
    )
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    while True:
        # Elections may go on after the resume; what matters is that the resumed controller
        # follows whoever the majority follows, in a term newer than the one it led.
        current = wait_for_leader(addresses, LEADER_TIMEOUT_S, newer_than_term=old.term)
        resumed = describe_controller(paused_address, RPC_TIMEOUT_S)
        if (resumed.leader_id, resumed.term) == (current.leader_id, current.term):
            break
        assert time.monotonic() < deadline, f"the resumed leader did not step down: {resumed}"
        time.sleep(0.05)
    _, image = _converged_image(addresses)
    node.stop()

    assert new.term > old.term
    assert stale_write.topics[0].error_code in (
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.REQUEST_TIMED_OUT,
    ), stale_write
    # Answered under the old epoch, it would be a stale answer (a node that has seen the new
    # epoch rejects it); the resumed controller gives none: it cannot commit in that epoch.
    stale_answer_refused = stale_heartbeat.error_code in (
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.REQUEST_TIMED_OUT,
    )
    assert stale_answer_refused or stale_heartbeat.controller_epoch > old.term, stale_heartbeat
    assert "stale-write" not in image.topic_ids
    assert "while-paused" in image.topic_ids
    assert not image.brokers[1].fenced, "the deposed leader fenced a live node"
    assert not node.fenced_after_unfencing
    assert node.newest_epoch >= new.term


def test_state_is_intact_after_all_three_controllers_are_killed_and_restarted(
    cluster_factory: ClusterFactory, fake_nodes: list[FakeNode]
) -> None:
    cluster = _quorum(cluster_factory, session_ms=60_000)
    addresses = _addresses(cluster)
    wait_for_leader(addresses, LEADER_TIMEOUT_S)
    fake_nodes.append(FakeNode(addresses, 1).start(LEADER_TIMEOUT_S))
    with Admin(",".join(addresses), default_api_timeout_ms=20_000) as admin:
        for index in range(25):
            assert _create(admin, f"r{index:02d}") is None
    fake_nodes[0].stop()
    before, _ = _converged_image(addresses)

    for name in cluster.names(Role.CONTROLLER):
        cluster.kill(name, signal.SIGKILL)
    for name in cluster.names(Role.CONTROLLER):
        cluster.wait(name, timeout_ms=10_000)
    for name in cluster.names(Role.CONTROLLER):
        cluster_factory.start(cluster, name)
    wait_for_leader(addresses, LEADER_TIMEOUT_S)
    after, image = _converged_image(addresses)

    assert (after[0].offset, after[0].digest) == (before[0].offset, before[0].digest)
    assert {f"r{index:02d}" for index in range(25)} <= set(image.topic_ids)
    with Admin(",".join(addresses), default_api_timeout_ms=20_000) as admin:
        assert _create(admin, "after-restart") is None
