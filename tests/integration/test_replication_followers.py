"""ISR membership follows the followers (issue #6, done-when).

A follower whose disk was wiped while it was down refetches the whole log and rejoins the
ISR; a follower frozen with SIGSTOP is dropped from the ISR by the leader's lag check within
replica.lag.time.max.ms (well before its broker session would expire, so the lag rule did it)
and is added back once SIGCONT lets it catch up.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable

import pytest
from cluster_fixture import ClusterFactory, replication_cluster, wait_until

from brook.client import Producer
from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

TOPIC = "isr"
PARTITIONS = 1
LAG_TIME_MAX_MS = 1500
# Far above the lag limit, so an ISR removal inside it cannot be the session expiring.
SESSION_TIMEOUT_MS = 8000
HEARTBEAT_INTERVAL_MS = 200
# The lag check runs every half lag period, so a stalled follower is noticed within 1.5
# periods; the AlterPartition round trip and the metadata reaching the admin client add this.
PROPAGATION_MARGIN_MS = 1000
WAIT_TIMEOUT_S = 40.0
SEND_TIMEOUT_S = 10.0
POLL_S = 0.05
RECORDS_PER_BATCH = 200
VALUE = b"x" * 100


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> float:
    return wait_until(condition, what, timeout_s, POLL_S)


def _isr(admin: Admin) -> set[int]:
    return set(admin.describe_topics([TOPIC])[TOPIC].partitions[0].isr)


def _leader(admin: Admin) -> int | None:
    return admin.describe_topics([TOPIC])[TOPIC].partitions[0].leader


def _produce(producer: Producer) -> None:
    futures = [producer.send(TOPIC, VALUE, partition=0) for _ in range(RECORDS_PER_BATCH)]
    for future in futures:
        future.result(SEND_TIMEOUT_S)


def _setup(cluster_factory: ClusterFactory) -> tuple[LocalCluster, dict[int, str], str]:
    cluster = replication_cluster(
        cluster_factory,
        controllers=1,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        lag_time_max_ms=LAG_TIME_MAX_MS,
    )
    nodes = {cluster.spec(n).node_id: n for n in cluster.names(Role.STORAGE_NODE)}
    bootstrap = ",".join(cluster.grpc_address(n) for n in cluster.names(Role.STORAGE_NODE))
    return cluster, nodes, bootstrap


def _create_topic(admin: Admin, nodes: dict[int, str]) -> int:
    """Creates the RF 3 topic, waits for its full ISR, returns the leader's id."""
    created = admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, configs={"min.insync.replicas": "1"})]
    )
    assert created == {TOPIC: None}
    _wait(lambda: _leader(admin) is not None and _isr(admin) == set(nodes), "a full ISR")
    leader = _leader(admin)
    assert leader is not None
    return leader


def test_follower_restarted_on_an_empty_disk_catches_up_and_rejoins_the_isr(
    cluster_factory: ClusterFactory,
) -> None:
    cluster, nodes, bootstrap = _setup(cluster_factory)
    with (
        Admin(cluster.controller_bootstrap_servers) as admin,
        Producer(bootstrap_servers=bootstrap, acks="1", linger_ms=5) as producer,
    ):
        leader = _create_topic(admin, nodes)
        follower_id = next(n for n in nodes if n != leader)
        follower = nodes[follower_id]
        _produce(producer)
        cluster.stop(follower)
        _wait(lambda: follower_id not in _isr(admin), "the stopped follower to leave the ISR")
        data_dir = cluster.spec(follower).directory / "data"
        shutil.rmtree(data_dir)
        # Written while the follower is away: what it must fetch beyond the older records.
        _produce(producer)
        cluster_factory.start(cluster, follower)
        _wait(lambda: follower_id in _isr(admin), "the wiped follower to rejoin the ISR")
    partition_dir = data_dir / f"{TOPIC}-0"
    assert any(f.stat().st_size > 0 for f in partition_dir.glob("*.log")), (
        "the follower rejoined the ISR without any log data"
    )


def test_follower_paused_with_sigstop_leaves_the_isr_within_the_lag_limit_and_rejoins(
    cluster_factory: ClusterFactory,
) -> None:
    cluster, nodes, bootstrap = _setup(cluster_factory)
    with (
        Admin(cluster.controller_bootstrap_servers) as admin,
        Producer(bootstrap_servers=bootstrap, acks="1", linger_ms=5) as producer,
    ):
        leader = _create_topic(admin, nodes)
        follower_id = next(n for n in nodes if n != leader)
        follower = nodes[follower_id]
        _produce(producer)
        cluster.kill(follower, signal.SIGSTOP)
        paused = time.monotonic()
        try:
            # New records the frozen follower cannot fetch, so it is behind, not just idle.
            _produce(producer)
            _wait(lambda: follower_id not in _isr(admin), "the paused follower to leave the ISR")
            left_after_ms = (time.monotonic() - paused) * 1000
        finally:
            cluster.kill(follower, signal.SIGCONT)
        bound_ms = LAG_TIME_MAX_MS * 1.5 + PROPAGATION_MARGIN_MS
        print(f"\npaused follower left the ISR after {left_after_ms:.0f} ms (bound {bound_ms} ms)")
        assert left_after_ms <= bound_ms, (
            f"the paused follower left the ISR only after {left_after_ms:.0f} ms "
            f"(replica.lag.time.max.ms={LAG_TIME_MAX_MS})"
        )
        assert cluster.is_running(follower)
        _produce(producer)
        _wait(lambda: follower_id in _isr(admin), "the resumed follower to rejoin the ISR")
