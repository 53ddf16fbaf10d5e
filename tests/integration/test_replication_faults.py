"""Replication under failures: no acknowledged record is lost (issue #6, done-when).

Three controllers and three storage nodes as processes; one topic with RF 3 and
min.insync.replicas=2. A producer sends numbered records (acks=all) to every partition while
the test kills -9 the leader of each partition in turn and restarts it, waiting each time
until the restarted node is back in every ISR, for several rounds. Then a consumer reads every
partition from offset 0: every acknowledged number is there exactly once, the numbers are in
send order, and none was invented.

The producer does not retry (retries=0): without idempotent producers a retried send whose
first attempt was appended would be a legitimate duplicate, and this test asserts none exist.
A send that fails is simply not acknowledged; its record may or may not be in the log.
(tests/integration/test_idempotent_producer.py runs the same scenario with an idempotent
producer that does retry: ``idempotent=True``.)
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from cluster_fixture import ClusterFactory, replication_cluster, wait_until
from numbered_sender import NumberedSender
from replica_logs import assert_replicas_identical_to_high_watermark, read_to_high_watermarks

from brook.client import Producer
from brook.client.admin import Admin, NewTopic
from brook.launcher import Role

pytestmark = pytest.mark.integration

TOPIC = "no-loss"
PARTITIONS = 3
ROUNDS = 2
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 200
LAG_TIME_MAX_MS = 2000
WAIT_TIMEOUT_S = 40.0
SEND_TIMEOUT_S = 15.0
CONSUME_TIMEOUT_S = 30.0
POLL_S = 0.05


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> float:
    return wait_until(condition, what, timeout_s, POLL_S)


def _leader_of(admin: Admin, partition: int) -> int | None:
    return admin.describe_topics([TOPIC])[TOPIC].partitions[partition].leader


def _fully_replicated(admin: Admin) -> bool:
    partitions = admin.describe_topics([TOPIC])[TOPIC].partitions
    return all(p.leader is not None and len(p.isr) == len(p.replicas) for p in partitions)


@dataclass(frozen=True)
class _Outcome:
    sent: dict[int, int]
    acked: dict[int, list[int]]
    failures: int
    # Per partition: the numbers read back from offset 0, in log order.
    found: dict[int, list[int]]
    # Per partition: the high watermark once sending stopped and every ISR was full.
    high_watermarks: dict[int, int]


def _kill_leaders_in_turn(
    cluster_factory: ClusterFactory, acks: str, *, idempotent: bool = False
) -> _Outcome:
    """Sends numbered records with ``acks`` while killing each partition's leader in turn, then
    reads every partition back from offset 0 up to its high watermark; all storage nodes are
    stopped (cleanly) on return so their logs can be read from disk.

    ``idempotent``: an idempotent producer that retries (issue #8) instead of one that does
    not retry at all."""
    retry_settings: dict[str, object] = (
        {"enable_idempotence": True} if idempotent else {"enable_idempotence": False, "retries": 0}
    )
    cluster = replication_cluster(
        cluster_factory,
        controllers=3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        lag_time_max_ms=LAG_TIME_MAX_MS,
    )
    nodes = {cluster.spec(n).node_id: n for n in cluster.names(Role.STORAGE_NODE)}
    bootstrap = ",".join(cluster.grpc_address(n) for n in cluster.names(Role.STORAGE_NODE))
    started = time.monotonic()
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, configs={"min.insync.replicas": "2"})]
        )
        assert created == {TOPIC: None}
        _wait(lambda: _fully_replicated(admin), "the topic's leaders and full ISRs")
        with (
            Producer(
                bootstrap_servers=bootstrap,
                acks=acks,
                **retry_settings,
                linger_ms=0,
                request_timeout_ms=5000,
                delivery_timeout_ms=10000,
                retry_backoff_ms=50,
            ) as producer,
            NumberedSender(producer, TOPIC, PARTITIONS, send_timeout_s=SEND_TIMEOUT_S) as sender,
        ):
            _wait(lambda: all(sender.acked.values()), "a first acknowledgement per partition")
            for _ in range(ROUNDS):
                for partition in range(PARTITIONS):
                    victim_id = _leader_of(admin, partition)
                    assert victim_id is not None
                    acked_before = sender.acknowledged()
                    cluster.kill(nodes[victim_id], signal.SIGKILL)
                    _wait(
                        lambda p=partition, v=victim_id: _leader_of(admin, p) not in (None, v),  # type: ignore[misc]
                        f"a new leader for partition {partition}",
                    )
                    cluster_factory.start(cluster, nodes[victim_id])
                    _wait(
                        lambda: _fully_replicated(admin), "the restarted node to rejoin every ISR"
                    )
                    _wait(
                        lambda b=acked_before: sender.acknowledged() > b,  # type: ignore[misc]
                        "acknowledgements after the failover",
                    )
        # With sending over and every replica in the ISR, every replica's log end is at or
        # past the high watermark read next, so each one holds the whole committed prefix.
        _wait(lambda: _fully_replicated(admin), "full ISRs after the last send")
        elapsed_s = time.monotonic() - started
    acked_total = sender.acknowledged()
    print(
        f"\nacks={acks} idempotent={idempotent}: {ROUNDS * PARTITIONS} leader kills in "
        f"{elapsed_s:.1f} s: {acked_total} "
        f"records acknowledged, {sender.failures} sends failed (not acknowledged)"
    )

    high_watermarks, records = read_to_high_watermarks(
        bootstrap, TOPIC, range(PARTITIONS), CONSUME_TIMEOUT_S
    )
    found = {p: [int(r.value or b"") for r in records[p]] for p in range(PARTITIONS)}
    for name in cluster.names(Role.STORAGE_NODE):
        cluster.stop(name)
    assert_replicas_identical_to_high_watermark(cluster, TOPIC, high_watermarks)
    return _Outcome(sender.sent, sender.acked, sender.failures, found, high_watermarks)


def _assert_nothing_invented_or_reordered(outcome: _Outcome) -> None:
    for p in range(PARTITIONS):
        numbers = outcome.found[p]
        assert len(numbers) == outcome.high_watermarks[p], f"partition {p}: not read to the HW"
        assert len(numbers) == len(set(numbers)), f"partition {p} holds duplicates"
        assert numbers == sorted(numbers), f"partition {p} is out of send order"
        assert all(0 <= n < outcome.sent[p] for n in numbers), f"partition {p}: invented records"


def test_acks_all_loses_no_acknowledged_record_while_leaders_are_killed_in_turn(
    cluster_factory: ClusterFactory,
) -> None:
    outcome = _kill_leaders_in_turn(cluster_factory, "all")
    _assert_nothing_invented_or_reordered(outcome)
    for p in range(PARTITIONS):
        missing = sorted(set(outcome.acked[p]) - set(outcome.found[p]))
        assert not missing, f"partition {p} lost acknowledged records {missing[:20]}"


def test_acks_1_invents_and_reorders_nothing_and_reports_acknowledged_records_lost(
    cluster_factory: ClusterFactory,
) -> None:
    outcome = _kill_leaders_in_turn(cluster_factory, "1")
    _assert_nothing_invented_or_reordered(outcome)
    lost = {p: sorted(set(outcome.acked[p]) - set(outcome.found[p])) for p in range(PARTITIONS)}
    acked_total = sum(map(len, outcome.acked.values()))
    lost_total = sum(map(len, lost.values()))
    # The trade-off acks=1 documents: a leader acknowledges before followers copy, so a kill -9
    # can lose what it acknowledged. This is a measurement, not a bound.
    print(
        f"acks=1: {lost_total} of {acked_total} acknowledged records lost "
        f"(per partition: {', '.join(f'{p}: {len(n)}' for p, n in lost.items())})"
    )
