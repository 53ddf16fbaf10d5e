"""Incremental cooperative rebalancing (KIP-429): librdkafka through the gateways, Brook's SDK
over gRPC, and the two in one group.

Members run ``tests/compat/cooperative_member.py`` (``cooperative-sticky``), each a process of
its own so one can be killed; a producer writes all along. The group goes
through members joining one at a time, one unsubscribing, one closing while a cooperative round
is under way, and one killed (its session expires). Then the test checks the guarantees:

- every record produced is consumed, and the group's committed offsets end at the log ends;
- the committed offset of a partition never goes backwards;
- no partition is owned by two members at once (ownership runs from the assignment callback
  to the end of the revocation callback, or to the kill);
- a member keeps what the sticky assignment leaves it: in a round where others join, what it
  revokes is not given back to it, and when others leave it revokes nothing at all.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from cluster_fixture import wait_until
from test_kafka_clients import CLIENT_TIMEOUT_MS

from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
# A cooperative rebalance is two rounds; a killed member's partitions wait for its session.
SETTLE_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 60.0
MEMBER_EXIT_TIMEOUT_S = 30.0
# The producer's pace: records keep arriving through every rebalance without flooding the log.
PRODUCE_INTERVAL_S = 0.005
MEMBER_SCRIPT = Path(__file__).with_name("cooperative_member.py")

Event = dict[str, Any]


class Member:
    """A cooperative_member.py process and the events it printed."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str, name: str) -> None:
        self.name = name
        self.events: list[Event] = []
        self.killed_at: float | None = None
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [
                sys.executable,
                str(MEMBER_SCRIPT),
                client,
                bootstrap,
                topic,
                group,
                name,
                str(SESSION_TIMEOUT_MS),
                str(HEARTBEAT_INTERVAL_MS),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, name=f"{name}-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)

    def owned(self) -> set[int]:
        """The partitions it owns after the events printed so far (none once it exited)."""
        owned: set[int] = set()
        for event in self.snapshot():
            if event["ev"] == "assign":
                owned |= set(event["partitions"])
            elif event["ev"] in ("revoke", "lost"):
                owned -= set(event["partitions"])
            elif event["ev"] == "closed":
                owned = set()
        return owned if self.alive() else set()

    def alive(self) -> bool:
        return self.killed_at is None and self._process.poll() is None

    def send(self, command: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()

    def kill(self) -> None:
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(MEMBER_EXIT_TIMEOUT_S)
        self.killed_at = time.monotonic()

    def wait_closed(self) -> None:
        self._process.wait(MEMBER_EXIT_TIMEOUT_S)
        self._reader.join(MEMBER_EXIT_TIMEOUT_S)
        assert self._process.returncode == 0, f"{self.name} exited {self._process.returncode}"

    def stop(self) -> None:
        """Closes it (or kills it if it does not close); for the test's cleanup."""
        if self._process.poll() is None:
            try:
                self.send("close")
                self._process.wait(MEMBER_EXIT_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait(MEMBER_EXIT_TIMEOUT_S)
        self._reader.join(MEMBER_EXIT_TIMEOUT_S)


class Producer:
    """A confluent-kafka producer writing to every partition in turn from a thread of its own
    until stopped; remembers each record's acknowledged (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all"})
        self._topic = topic
        self._stop = threading.Event()
        self.delivered: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.delivered.add((message.partition(), message.offset()))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(
                self._topic,
                value=f"record-{i}".encode(),
                partition=i % PARTITIONS,
                on_delivery=self._delivered,
            )
            i += 1
            # Serves delivery reports, and paces the producer.
            self._producer.poll(PRODUCE_INTERVAL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(MEMBER_EXIT_TIMEOUT_S)
        assert self._producer.flush(CLIENT_TIMEOUT_MS / 1000) == 0
        assert self.errors == []


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(CLIENT_TIMEOUT_MS / 1000)


def _settled(members: list[Member]) -> bool:
    dead = [m.name for m in members if not m.alive()]
    assert not dead, f"members {dead} exited (their stderr is in the captured output)"
    owned = [m.owned() for m in members]
    every = [p for o in owned for p in o]
    share, extra = divmod(PARTITIONS, len(members))
    balanced = sorted(map(len, owned)) == sorted(
        [share + 1] * extra + [share] * (len(members) - extra)
    )
    return balanced and sorted(every) == list(range(PARTITIONS))


def _wait_settled(members: list[Member], what: str) -> None:
    wait_until(
        lambda: _settled(members),
        f"{what}: {[(m.name, sorted(m.owned())) for m in members]}",
        SETTLE_TIMEOUT_S,
    )


class Phase:
    """The events of a change to the group, from one settled group to the next."""

    def __init__(self, members: list[Member]) -> None:
        self._start = {m.name: len(m.snapshot()) for m in members}
        self._members = members

    def revoked(self, member: Member) -> set[int]:
        return {
            p
            for e in member.snapshot()[self._start[member.name] :]
            if e["ev"] in ("revoke", "lost")
            for p in e["partitions"]
        }


def _check_kept(phase: Phase, survivors: list[Member], *, others_left: bool) -> None:
    for member in survivors:
        revoked = phase.revoked(member)
        if others_left:
            assert revoked == set(), f"{member.name} revoked {revoked} though members only left"
        else:
            kept = member.owned()
            assert not revoked & kept, f"{member.name} revoked {revoked & kept} and kept them"


def _ownership_intervals(members: list[Member]) -> list[tuple[int, float, float, str]]:
    """(partition, from, to, member) for every time a member owned a partition."""
    intervals = []
    for member in members:
        since: dict[int, float] = {}
        for event in member.snapshot():
            if event["ev"] == "assign":
                for p in event["partitions"]:
                    assert p not in since, f"{member.name} was assigned {p}, which it owned"
                    since[p] = event["t"]
            elif event["ev"] in ("revoke", "lost"):
                for p in event["partitions"]:
                    assert p in since, f"{member.name} gave up {p}, which it did not own"
                    intervals.append((p, since.pop(p), event["t"], member.name))
        end = member.killed_at if member.killed_at is not None else float("inf")
        intervals += [(p, t, end, member.name) for p, t in since.items()]
    return intervals


def _check_guarantees(
    members: list[Member], producer: Producer, bootstrap: str, topic: str
) -> None:
    events = sorted((e for m in members for e in m.snapshot()), key=lambda e: e["t"])
    errors = [e for e in events if e["ev"] == "error"]
    assert errors == [], errors[:5]

    consumed = {(e["partition"], o) for e in events if e["ev"] == "records" for o in e["offsets"]}
    missing = producer.delivered - consumed
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"

    last: dict[int, tuple[int, str]] = {}
    for event in (e for e in events if e["ev"] == "commit"):
        for partition, offset in event["offsets"].items():
            before = last.get(int(partition))
            assert before is None or offset >= before[0], (
                f"partition {partition}: {event['member']} committed {offset} after "
                f"{before[1]} committed {before[0]}"
            )
            last[int(partition)] = (offset, event["member"])

    intervals = sorted(_ownership_intervals(members))
    for a, b in itertools.pairwise(intervals):
        if a[0] == b[0]:
            assert a[2] <= b[1], f"partition {a[0]} owned by {a[3]} and {b[3]} at once"

    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group"})
    try:
        ends = {
            p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10.0)[1]
            for p in range(PARTITIONS)
        }
        committed = reader.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10.0
        )
    finally:
        reader.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as exits:
        yield exits


# The clients of members a, b and c.
GROUPS = {
    "librdkafka": ("librdkafka", "librdkafka", "librdkafka"),
    "sdk": ("sdk", "sdk", "sdk"),
    "mixed": ("sdk", "librdkafka", "sdk"),
}


@pytest.mark.parametrize("kinds", sorted(GROUPS))
def test_cooperative_members_join_unsubscribe_leave_mid_round_and_die(
    compat_cluster: LocalCluster, bootstrap: str, stack: ExitStack, kinds: str
) -> None:
    topic = f"coop-{kinds}"
    _create_topic(bootstrap, topic)
    producer = Producer(bootstrap, topic)
    stack.callback(producer.stop)
    addresses = {
        "librdkafka": bootstrap,
        "sdk": compat_cluster.bootstrap_servers(Role.STORAGE_NODE),
    }

    def member(name: str, client: str) -> Member:
        started = Member(client, addresses[client], topic, f"{topic}-group", name)
        stack.callback(started.stop)
        return started

    clients = GROUPS[kinds]
    a = member("a", clients[0])
    _wait_settled([a], "a alone to own every partition")

    phase = Phase([a])
    b = member("b", clients[1])
    _wait_settled([a, b], "b to join")
    _check_kept(phase, [a], others_left=False)

    phase = Phase([a, b])
    c = member("c", clients[2])
    _wait_settled([a, b, c], "c to join")
    _check_kept(phase, [a, b], others_left=False)

    phase = Phase([a, b, c])
    b.send("unsubscribe")
    wait_until(lambda: b.owned() == set(), "b to give up its partitions", SETTLE_TIMEOUT_S)
    _wait_settled([a, c], "a and c to take b's partitions")
    _check_kept(phase, [a, c], others_left=True)

    # b subscribes again, and c closes as soon as that round makes it revoke a partition:
    # the group's second round runs with c leaving.
    phase = Phase([a, b, c])
    c.send("close-after-revoke")
    b.send("subscribe")
    c.wait_closed()
    _wait_settled([a, b], "b to rejoin while c leaves")

    phase = Phase([a, b])
    b.kill()
    _wait_settled([a], "a to take the killed b's partitions")
    _check_kept(phase, [a], others_left=True)

    producer.stop()
    members = [a, b, c]
    wait_until(
        lambda: (
            producer.delivered
            <= {
                (e["partition"], o)
                for m in members
                for e in m.snapshot()
                if e["ev"] == "records"
                for o in e["offsets"]
            }
        ),
        "a to consume every record",
        DRAIN_TIMEOUT_S,
    )
    a.send("close")
    a.wait_closed()
    _check_guarantees(members, producer, bootstrap, topic)
