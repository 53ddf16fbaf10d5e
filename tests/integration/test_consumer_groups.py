"""The SDK consumer in consumer groups, against real clusters (controller, storage nodes, two
group coordinators as processes).

The tests prove what a group promises: partitions shared without overlap or gaps, and moved
when a member leaves; at-least-once delivery when a member is killed -9, with duplicates only
from its uncommitted tail; committed offsets that survive the kill -9 of the coordinator that
owned the group; and a static member that restarts without a rebalance.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from cluster_fixture import ClusterFactory

from brook.client import (
    Admin,
    AsyncConsumer,
    CommitFailedError,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
)
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import group_pb2, group_pb2_grpc

pytestmark = pytest.mark.integration

PARTITIONS = 6
OFFSETS_PARTITIONS = 4
BROKER_SESSION_TIMEOUT_MS = 2000
BROKER_HEARTBEAT_MS = 200
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 300
# Long enough that a busy CI machine never trips it; the static-member test restarts well
# within it.
STATIC_SESSION_TIMEOUT_MS = 30_000
POLL_S = 0.1
STABLE_TIMEOUT_S = 45.0
PRODUCE_TIMEOUT_S = 30.0
SUBPROCESS_STOP_TIMEOUT_S = 10.0
RPC_TIMEOUT_S = 10.0
_R = TypeVar("_R")


def _cluster(factory: ClusterFactory, *, gateways: int = 0) -> LocalCluster:
    heartbeat = str(BROKER_HEARTBEAT_MS)
    session = str(BROKER_SESSION_TIMEOUT_MS)
    return factory(
        controllers=1,
        storage_nodes=2,
        group_coordinators=2,
        gateways=gateways,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": session,
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "offsets.topic.replication.factor": "2",
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
            # Its lease must match the controller's short session, or it is fenced between
            # heartbeats.
            "gateway": {
                "broker.session.timeout.ms": session,
                "broker.heartbeat.interval.ms": heartbeat,
            },
        },
    )


def _create_topic(cluster: LocalCluster, topic: str, records: int) -> None:
    """``topic`` with PARTITIONS partitions holding ``records`` records, values b"<n>"."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, PARTITIONS, 2)]) == {topic: None}
    with Producer(bootstrap_servers=_bootstrap(cluster), acks="all") as producer:
        futures = [
            producer.send(topic, str(n).encode(), partition=n % PARTITIONS) for n in range(records)
        ]
        producer.flush(PRODUCE_TIMEOUT_S)
        for future in futures:
            future.result(0)


def _bootstrap(cluster: LocalCluster) -> str:
    return cluster.bootstrap_servers(Role.STORAGE_NODE)


def _settings(cluster: LocalCluster, group: str, **extra: object) -> dict[str, object]:
    settings: dict[str, object] = {
        "bootstrap.servers": _bootstrap(cluster),
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "retry.backoff.max.ms": 500,
    }
    settings.update({k.replace("_", "."): v for k, v in extra.items()})
    return settings


def _all_partitions(topic: str) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(PARTITIONS)}


def _wait(
    condition: Callable[[], _R | None],
    what: str,
    timeout_s: float,
    state: Callable[[], str] = lambda: "",
) -> _R:
    """``condition()`` once it is not None; fails naming ``what`` and ``state()`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}; {state()}")


def _poll_all(consumers: list[Consumer]) -> None:
    for consumer in consumers:
        consumer.poll(POLL_S)


def _partitioned(consumers: list[Consumer], topic: str) -> list[set[TopicPartition]] | None:
    """The consumers' assignments once all are members of one generation and cover the
    topic exactly once (else None)."""
    generations = {c.group_metadata().generation_id for c in consumers}
    assignments = [c.assignment() for c in consumers]
    if len(generations) != 1 or min(generations) < 0:
        return None
    owned = [tp for a in assignments for tp in a]
    if len(owned) == len(set(owned)) and set(owned) == _all_partitions(topic):
        return assignments
    return None


def _stable(consumers: list[Consumer], topic: str) -> list[set[TopicPartition]]:
    def settled() -> list[set[TopicPartition]] | None:
        _poll_all(consumers)
        return _partitioned(consumers, topic)

    return _wait(settled, f"{len(consumers)} consumers to share {topic}", STABLE_TIMEOUT_S)


@contextmanager
def _consumers(settings: list[dict[str, object]]) -> Iterator[list[Consumer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(Consumer(s)) for s in settings]


# -- a consumer in a subprocess (so it can be killed -9) ---------------------------------------

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from brook.client import Consumer

    settings, topic, delay_s = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    out = open(sys.argv[4], "a", buffering=1)
    consumer = Consumer(settings)
    consumer.subscribe(
        [topic],
        on_assign=lambda tps: out.write(json.dumps({"assigned": sorted(tps)}) + "\\n"),
    )
    while True:
        records = consumer.poll(0.2)
        for r in records:
            out.write(json.dumps({"record": [r.partition, r.offset]}) + "\\n")
        # Processing takes a while: the records are handled but not yet committed.
        time.sleep(delay_s)
        if records and not settings.get("enable.auto.commit", True):
            consumer.commit()
            positions = {r.partition: r.offset + 1 for r in records}
            out.write(json.dumps({"committed": positions}) + "\\n")
    """
)


class Child:
    """A consumer in its own process, reporting what it does as JSON lines in a file."""

    def __init__(self, path: Path, settings: dict[str, object], topic: str, delay_s: float) -> None:
        self.path = path
        self._args = [json.dumps(settings), topic, str(delay_s), str(path)]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.path.with_suffix(".err"), "ab") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, *self._args],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(SUBPROCESS_STOP_TIMEOUT_S)

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            errors = self.path.with_suffix(".err").read_text()[-3000:]
            pytest.fail(f"the consumer subprocess exited ({self.process.returncode}): {errors}")

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        parsed = []
        for line in self.path.read_text().splitlines():
            # The last line may be half-written when the process was killed.
            with contextlib.suppress(json.JSONDecodeError):
                parsed.append(json.loads(line))
        return parsed

    def assignments(self) -> list[set[TopicPartition]]:
        return [
            {TopicPartition(t, p) for t, p in e["assigned"]}
            for e in self.events()
            if "assigned" in e
        ]

    def records(self) -> list[tuple[int, int]]:
        """(partition, offset) of every record it processed."""
        return [(e["record"][0], e["record"][1]) for e in self.events() if "record" in e]

    def committed(self) -> dict[int, int]:
        """Per partition, the highest offset it reported committed (after the commit
        returned)."""
        result: dict[int, int] = {}
        for event in self.events():
            for partition, offset in event.get("committed", {}).items():
                result[int(partition)] = max(result.get(int(partition), 0), offset)
        return result


@contextmanager
def _child(path: Path, settings: dict[str, object], topic: str, delay_s: float) -> Iterator[Child]:
    child = Child(path, settings, topic, delay_s)
    try:
        yield child
    finally:
        child.kill()


# -- tests --------------------------------------------------------------------------------------


def test_three_consumers_share_partitions_and_take_over_from_one_that_closes(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory)
    _create_topic(cluster, "shared", 60)
    settings = _settings(cluster, "sharers", enable_auto_commit=False)
    with _consumers([settings, settings, settings]) as consumers:
        for consumer in consumers:
            # Kafka's pattern: commit what was processed when partitions are taken away.
            consumer.subscribe(["shared"], on_revoke=lambda _tps, c=consumer: c.commit())
        assignments = _stable(consumers, "shared")
        assert all(len(a) == 2 for a in assignments), assignments

        leaving, staying = consumers[0], consumers[1:]
        moved = assignments[0]
        per_partition = 60 // PARTITIONS

        def leaving_caught_up() -> bool | None:
            _poll_all(consumers)
            return True if all(leaving.position(tp) == per_partition for tp in moved) else None

        _wait(leaving_caught_up, "the leaving consumer to read its partitions", STABLE_TIMEOUT_S)
        started = time.monotonic()
        leaving.close()
        redelivered: list[TopicPartition] = []

        def taken_over() -> list[set[TopicPartition]] | None:
            for consumer in staying:
                redelivered.extend(
                    TopicPartition(r.topic, r.partition) for r in consumer.poll(POLL_S)
                )
            return _partitioned(staying, "shared")

        after = _wait(taken_over, "the others to take over", STABLE_TIMEOUT_S)
        assert time.monotonic() - started < SESSION_TIMEOUT_MS / 1000
        assert moved <= after[0] | after[1]
        assert all(len(a) == 3 for a in after), after
        committed = staying[0].committed(moved)
        assert {tp: c.offset if c else None for tp, c in committed.items()} == dict.fromkeys(
            moved, per_partition
        )
        # The new owners start at the offsets committed in on_revoke: nothing again.
        for tp in moved:
            owner = staying[0] if tp in after[0] else staying[1]
            assert owner.position(tp) == per_partition
        assert not set(redelivered) & moved


class Tracked:
    """An in-process consumer that commits after processing each poll's records."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.delivered: list[tuple[int, int]] = []
        self.commit_failures = 0

    def step(self) -> None:
        records = self.consumer.poll(POLL_S)
        self.delivered += [(r.partition, r.offset) for r in records]
        if records:
            try:
                self.consumer.commit()
            except CommitFailedError:
                # The group moved on; these records' partitions are someone else's now and
                # may be delivered again from the last commit, which is what at-least-once
                # allows.
                self.commit_failures += 1


def _describe(consumers: list[Consumer], child: Child) -> str:
    """What the members and the child report, for a failure message."""
    members = [(c.group_metadata(), sorted(c.assignment())) for c in consumers]
    events = child.events()
    return (
        f"members: {members}; child: {len(child.records())} records, "
        f"{sum(1 for e in events if 'committed' in e)} commits, last events {events[-3:]}"
    )


def _expected(records: int) -> set[tuple[int, int]]:
    return {(n % PARTITIONS, n // PARTITIONS) for n in range(records)}


def test_group_consumes_every_record_at_least_once_when_a_member_is_killed(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = _cluster(cluster_factory)
    records = 900
    _create_topic(cluster, "ledger", records)
    settings = _settings(cluster, "ledger-app", enable_auto_commit=False, max_poll_records=20)
    with _consumers([settings, settings]) as consumers:
        tracked = [Tracked(c) for c in consumers]
        child_settings = dict(settings, **{"max.poll.records": 10})
        with _child(tmp_path / "victim.jsonl", child_settings, "ledger", 0.5) as child:
            # The slow victim joins first, so the fast members cannot drain its partitions
            # before it gets any.
            child.start()
            _wait(
                lambda: True if child.assignments() else child.check_alive(),
                "the victim to join",
                STABLE_TIMEOUT_S,
            )
            for consumer in consumers:
                consumer.subscribe(["ledger"])

            def victim_committed() -> bool | None:
                for t in tracked:
                    t.step()
                child.check_alive()
                events = child.events()
                consumed = sum(1 for e in events if "record" in e)
                commits = sum(1 for e in events if "committed" in e)
                # Kill it while it holds processed but uncommitted records.
                mid_batch = bool(events) and "record" in events[-1]
                return True if consumed >= 30 and commits >= 2 and mid_batch else None

            _wait(
                victim_committed,
                "the victim to consume and commit",
                STABLE_TIMEOUT_S,
                lambda: _describe(consumers, child),
            )
            child.kill()

        def all_consumed() -> bool | None:
            for t in tracked:
                t.step()
            seen = {d for t in tracked for d in t.delivered}
            seen |= set(child.records())
            return True if seen >= _expected(records) else None

        _wait(
            all_consumed,
            "the survivors to consume every record",
            60.0,
            lambda: _describe(consumers, child),
        )

    child_records = child.records()
    committed_by_child = child.committed()
    tail = {(p, o) for p, o in child_records if o >= committed_by_child.get(p, 0)}
    assert tail, "the victim was killed with nothing uncommitted: the test proved nothing"
    counts = Counter(d for t in tracked for d in t.delivered)
    counts.update(child_records)
    assert set(counts) == _expected(records), "a record was never delivered"
    duplicates = {d: n - 1 for d, n in counts.items() if n > 1}
    assert set(duplicates) <= tail, sorted(set(duplicates) - tail)[:20]
    assert sum(duplicates.values()) <= len(tail)
    assert sum(t.commit_failures for t in tracked) == 0


def _coordinator_process(cluster: LocalCluster, group: str) -> str:
    """The name of the coordinator process that owns ``group`` now."""

    def owner() -> str | None:
        for name in cluster.names(Role.GROUP_COORDINATOR):
            if not cluster.is_running(name):
                continue
            with grpc.insecure_channel(cluster.grpc_address(name)) as channel:
                stub = group_pb2_grpc.GroupCoordinatorServiceStub(channel)  # type: ignore[no-untyped-call]
                try:
                    found = stub.FindCoordinator(
                        group_pb2.FindCoordinatorRequest(
                            key_type=group_pb2.COORDINATOR_TYPE_GROUP, keys=[group]
                        ),
                        timeout=RPC_TIMEOUT_S,
                    ).coordinators[0]
                except grpc.RpcError:
                    continue
            if error_code(found.error_code) is ErrorCode.NONE:
                return next(
                    n
                    for n in cluster.names(Role.GROUP_COORDINATOR)
                    if cluster.spec(n).node_id == found.node_id
                )
        return None

    return _wait(owner, f"the coordinator of {group}", STABLE_TIMEOUT_S)


def test_consumers_resume_from_committed_offsets_after_their_coordinator_is_killed(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory)
    records = 600
    group = "journal-app"
    _create_topic(cluster, "journal", records)
    settings = _settings(cluster, group, enable_auto_commit=False, max_poll_records=10)
    everything = _all_partitions("journal")
    with _consumers([settings, settings]) as consumers:
        tracked = [Tracked(c) for c in consumers]
        for consumer in consumers:
            consumer.subscribe(["journal"])

        def a_third_consumed() -> bool | None:
            for t in tracked:
                t.step()
            done = sum(len(t.delivered) for t in tracked)
            return True if done >= records // 3 else None

        _wait(a_third_consumed, "a third of the records to be consumed", STABLE_TIMEOUT_S)
        # Every poll's records were committed before the next poll: this is what the group
        # has acknowledged.
        committed_before = consumers[0].committed(everything)
        assert sum(c.offset for c in committed_before.values() if c is not None) >= records // 3
        delivered_before = sum(len(t.delivered) for t in tracked)

        victim = _coordinator_process(cluster, group)
        cluster.kill(victim)

        def all_consumed() -> bool | None:
            for t in tracked:
                t.step()
            seen = {d for t in tracked for d in t.delivered}
            return True if seen >= _expected(records) else None

        _wait(all_consumed, "every record after the coordinator's death", 60.0)
        assert _coordinator_process(cluster, group) != victim
        committed_after = consumers[0].committed(everything)

    assert sum(len(t.delivered) for t in tracked) > delivered_before
    counts = Counter(d for t in tracked for d in t.delivered)
    assert set(counts) == _expected(records)
    for (partition, offset), n in counts.items():
        if n > 1:
            before = committed_before[TopicPartition("journal", partition)]
            assert before is None or offset >= before.offset, (
                f"journal-{partition} offset {offset} was delivered {n} times though "
                f"{before.offset} had been committed before the coordinator died"
            )
    assert {tp: c.offset if c else None for tp, c in committed_after.items()} == {
        tp: records // PARTITIONS for tp in everything
    }


def test_static_member_restarted_within_its_session_causes_no_rebalance(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = _cluster(cluster_factory)
    _create_topic(cluster, "static", 60)
    settings = _settings(cluster, "static-app", session_timeout_ms=STATIC_SESSION_TIMEOUT_MS)
    static_settings = dict(settings, **{"group.instance.id": "static-worker-1"})
    assigned_calls = [0, 0]

    def counter(i: int) -> Callable[[list[TopicPartition]], None]:
        def on_assign(partitions: list[TopicPartition]) -> None:
            assigned_calls[i] += 1

        return on_assign

    with (
        _consumers([settings, settings]) as consumers,
        _child(tmp_path / "static.jsonl", static_settings, "static", 0.05) as child,
    ):
        for i, consumer in enumerate(consumers):
            consumer.subscribe(["static"], on_assign=counter(i))
        child.start()

        def stable_with_child() -> list[set[TopicPartition]] | None:
            _poll_all(consumers)
            child.check_alive()
            ours = _partitioned_with(consumers, "static", child)
            return ours

        _wait(stable_with_child, "two members and the static one to share", STABLE_TIMEOUT_S)
        # One more heartbeat round: a rebalance still in flight would show up now.
        time.sleep(3 * HEARTBEAT_INTERVAL_MS / 1000)
        assignments = _wait(stable_with_child, "the group to stay stable", STABLE_TIMEOUT_S)
        generations = [c.group_metadata().generation_id for c in consumers]
        calls_before = list(assigned_calls)
        static_assignment = child.assignments()[-1]
        assignments_seen = len(child.assignments())

        child.kill()
        child.start()

        def restarted() -> set[TopicPartition] | None:
            _poll_all(consumers)
            child.check_alive()
            seen = child.assignments()
            return seen[-1] if len(seen) > assignments_seen else None

        again = _wait(restarted, "the static member to come back", STABLE_TIMEOUT_S)
        # Let the survivors heartbeat a few times: a rebalance would reach them now.
        deadline = time.monotonic() + 10 * HEARTBEAT_INTERVAL_MS / 1000
        while time.monotonic() < deadline:
            _poll_all(consumers)
        assert again == static_assignment
        assert [c.group_metadata().generation_id for c in consumers] == generations
        assert assigned_calls == calls_before
        assert [c.assignment() for c in consumers] == assignments


def _partitioned_with(
    consumers: list[Consumer], topic: str, child: Child
) -> list[set[TopicPartition]] | None:
    """The in-process consumers' assignments when they and the child's latest assignment
    cover ``topic`` exactly once, all in one generation."""
    seen = child.assignments()
    generations = {c.group_metadata().generation_id for c in consumers}
    if not seen or len(generations) != 1 or min(generations) < 0:
        return None
    assignments = [c.assignment() for c in consumers]
    owned = [tp for a in [*assignments, seen[-1]] for tp in a]
    if len(owned) == len(set(owned)) and set(owned) == _all_partitions(topic):
        return assignments
    return None


def test_async_consumer_auto_commits_on_close_and_the_next_member_resumes_there(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _cluster(cluster_factory)
    records = 60
    _create_topic(cluster, "resume", records)
    # A long interval: the commit that counts is the one close makes.
    settings = _settings(cluster, "resume-app", auto_commit_interval_ms=600_000)
    everything = _all_partitions("resume")

    async def consume(expected: int) -> tuple[list[tuple[int, int]], dict[TopicPartition, int]]:
        delivered: list[tuple[int, int]] = []
        async with AsyncConsumer(settings) as consumer:
            revoked: list[TopicPartition] = []
            consumer.subscribe(["resume"], on_revoke=revoked.extend)
            deadline = time.monotonic() + STABLE_TIMEOUT_S
            while len(delivered) < expected and time.monotonic() < deadline:
                delivered += [(r.partition, r.offset) for r in await consumer.poll(POLL_S)]
            assert len(delivered) == expected
        assert set(revoked) == everything
        # Same group, never subscribed: it only reads the group's offsets.
        async with AsyncConsumer(settings) as observer:
            committed = await observer.committed(everything)
        return delivered, {tp: c.offset for tp, c in committed.items() if c is not None}

    first, committed = asyncio.run(consume(records))
    assert set(first) == _expected(records)
    assert committed == {tp: records // PARTITIONS for tp in everything}

    with Producer(bootstrap_servers=_bootstrap(cluster), acks="all") as producer:
        for partition in range(PARTITIONS):
            producer.send("resume", b"late", partition=partition)
        producer.flush(PRODUCE_TIMEOUT_S)
    second, committed = asyncio.run(consume(PARTITIONS))
    assert sorted(second) == [(p, records // PARTITIONS) for p in range(PARTITIONS)]
    assert committed == {tp: records // PARTITIONS + 1 for tp in everything}


def test_a_kafka_client_and_a_brook_consumer_share_one_group(
    cluster_factory: ClusterFactory,
) -> None:
    from kafka import KafkaConsumer

    cluster = _cluster(cluster_factory, gateways=1)
    records = 60
    _create_topic(cluster, "mixed", records)
    delivered: list[tuple[int, int]] = []
    # Both commit before giving partitions up, so a rebalance re-delivers nothing.
    with Consumer(_settings(cluster, "mixed-app")) as brook:
        brook.subscribe(["mixed"])

        def brook_alone() -> bool | None:
            delivered.extend((r.partition, r.offset) for r in brook.poll(POLL_S))
            return True if brook.assignment() == _all_partitions("mixed") else None

        # The Brook consumer leads the group and assigns the Kafka client its share. (A
        # kafka-python leader is tests/compat/test_kafka_groups.py's case: this loop, polling
        # each client for 0.1 s in turn, would trip kafka-python's join races described there.)
        _wait(brook_alone, "the Brook consumer to join", STABLE_TIMEOUT_S)
        kafka_consumer = KafkaConsumer(
            "mixed",
            bootstrap_servers=cluster.kafka_bootstrap_servers,
            group_id="mixed-app",
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        try:

            def shared() -> bool | None:
                for batch in kafka_consumer.poll(timeout_ms=100).values():
                    delivered.extend((r.partition, r.offset) for r in batch)
                delivered.extend((r.partition, r.offset) for r in brook.poll(POLL_S))
                theirs = {
                    TopicPartition(tp.topic, tp.partition) for tp in kafka_consumer.assignment()
                }
                ours = brook.assignment()
                split = theirs and ours and not theirs & ours
                done = split and theirs | ours == _all_partitions("mixed")
                return True if done and len(set(delivered)) == records else None

            _wait(
                shared,
                "a Kafka client and a Brook consumer to share the topic",
                60.0,
                lambda: (
                    f"kafka client: {sorted(kafka_consumer.assignment())}, brook: "
                    f"{sorted(brook.assignment())} {brook.group_metadata()}, "
                    f"{len(set(delivered))} distinct records"
                ),
            )
        finally:
            kafka_consumer.close()
    assert Counter(delivered) == Counter(_expected(records)), "a record was delivered twice"
