"""A nemesis for a whole Brook cluster, in the spirit of Jepsen (issue #13).

A real cluster of processes on loopback (3 controllers, 3 storage nodes, a group coordinator
and a gateway) runs a workload while a seeded random schedule of faults hits it, one fault at
a time; then the history is checked against the guarantees.

Workload, all idempotent with acks=all, numbering what each stream sends per partition:
- the SDK's producer, to the storage nodes;
- confluent-kafka (librdkafka) through the gateway;
- a consumer group member (the SDK) that commits after each poll and reads the committed
  offsets back.

Faults (``FAULT_KINDS``): kill -9 and restart of a storage node; SIGSTOP/SIGCONT of one;
kill -9 and restart of the Raft leader controller; kill -9 and restart of the group
coordinator; a storage node cut off from the controllers (clients and the other storage
nodes still reach it); the leader of a partition cut off from the other storage nodes
(controllers and clients still reach it). Cuts are real: each process runs in a cgroup of its
own, every TCP connection is marked (conntrack) with the cgroup of the process that opened
it, and iptables drops the marked connections to the cut-off ports, in both directions — on
loopback only, where every process of the test listens. While a node is cut off, a probe
sends it an acks=all write for a partition it led: it must not be acknowledged.

Checks once the faults stop (``check``): every ISR is full again within
``isr_bound_s`` = 2 x replica.lag.time.max.ms + broker.session.timeout.ms; every acknowledged
record is in the log exactly once at the offset it was acknowledged with, and each stream's
records are in send order; nothing was written that was never sent, and nothing twice; the
group's committed offsets never went backward; the controllers' metadata digests are equal;
the replicas are byte-identical up to the high watermark.

The seed is printed before the first fault; the same seed gives the same schedule of fault
kinds, durations and randomly chosen nodes (the faults aimed at "the Raft leader" or "the
leader of partition p" hit whichever node leads then, and the processes' own timing varies).
The suite runs a short version (tests/integration/test_nemesis.py); a long one runs on demand
and prints a JSON summary:

    .venv/bin/python tests/nemesis.py --minutes 20 [--seed N]

Needs root (cgroups, iptables) and iptables with the conntrack, connmark and cgroup matches
(Debian's ``iptables``; tools/install-dev installs it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
from cluster_fixture import ClusterFactory
from replica_logs import assert_replicas_identical_to_high_watermark, read_to_high_watermarks

from brook.client import Consumer, Producer, TopicPartition
from brook.client.admin import Admin, NewTopic
from brook.controller_probe import wait_for_convergence, wait_for_leader
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, ProcessSpec, Role
from brook.record import build_batch
from brook.v1 import storage_pb2, storage_pb2_grpc

TOPIC: Final = "nemesis"
PARTITIONS: Final = 3
GROUP: Final = "nemesis-group"
SESSION_TIMEOUT_MS: Final = 2000
HEARTBEAT_INTERVAL_MS: Final = 200
LAG_TIME_MAX_MS: Final = 2000
# After the last fault heals, every ISR must be full within this (issue #13, part 2): a
# lagging follower is noticed within 1.5 lag periods and a fenced node re-registers within a
# session; a follower back in sync is re-admitted at its next fetch.
ISR_BOUND_S: Final = (2 * LAG_TIME_MAX_MS + SESSION_TIMEOUT_MS) / 1000
OFFSETS_PARTITIONS: Final = 6
LEADER_REBALANCE_INTERVAL_S: Final = 5
# Each stream sends about this many records a second (all partitions together): enough to
# keep every partition busy through each fault, little enough for two cores.
SEND_RATE_PER_S: Final = 250
IN_FLIGHT_MAX: Final = 2000
DELIVERY_TIMEOUT_MS: Final = 120_000
FLUSH_TIMEOUT_S: Final = 150.0
READ_TIMEOUT_S: Final = 90.0
WAIT_TIMEOUT_S: Final = 60.0
RPC_TIMEOUT_S: Final = 5.0
PROBE_TIMEOUT_MS: Final = 1500
CONVERGENCE_TIMEOUT_S: Final = 30.0
COMMIT_TIMEOUT_S: Final = 10.0
FAULT_HOLD_S: Final = (1.0, 4.0)
EXAMPLES_MAX: Final = 5
# A cut lasts until its probe has run (past the lease or the ISR shrink) and a while more.
CUT_HOLD_AFTER_PROBE_S: Final = (0.5, 3.0)
QUIET_S: Final = (1.0, 3.0)
# When a cut-off node must have stopped acknowledging acks=all writes: the controllers have
# fenced it (its lease), or it has shrunk its ISRs below min.insync.replicas.
CUT_FROM_CONTROLLERS_PROBE_S: Final = SESSION_TIMEOUT_MS / 1000 + 1.0
CUT_FROM_FOLLOWERS_PROBE_S: Final = 1.5 * LAG_TIME_MAX_MS / 1000 + 1.0

FAULT_KINDS: Final = (
    "kill_storage_node",
    "pause_storage_node",
    "kill_raft_leader",
    "kill_group_coordinator",
    "cut_node_from_controllers",
    "cut_leader_from_followers",
)

CHAIN_PREFIX: Final = "BROOK-NEM-"
CGROUP_PREFIX: Final = "brook-nemesis-"
# Connection marks live in these bits only (value/mask), so connections that other software
# on the host marks (firewalls, container runtimes use marks too) are neither matched nor
# changed.
MARK_SHIFT: Final = 16
MARK_MASK: Final = 0xFF << MARK_SHIFT


# -- the firewall -------------------------------------------------------------------------


def _cgroup2_root() -> Path:
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    raise RuntimeError("no cgroup2 file system is mounted; the nemesis needs one")


def _iptables_path() -> str | None:
    # /usr/sbin may be missing from a non-login PATH.
    return shutil.which("iptables") or shutil.which("iptables", path="/usr/sbin:/sbin")


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [_iptables_path() or "iptables", "-w", "5", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)}: {result.stderr.strip()}")
    return result


class Firewall:
    """Cuts TCP connections between the processes of one cluster on loopback.

    Each process runs in a cgroup of its own (``spawn_prefix`` puts it there before it
    executes); a connection is marked, when it opens, with the number of the cgroup of the
    process that opened it; ``cut`` drops every packet, both ways, of the connections that a
    set of processes opened to a set of ports. Nothing else on the machine is touched: the
    rules sit in chains of their own, jumped to from OUTPUT for loopback traffic only, and
    ``close`` removes them and the cgroups."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the nemesis needs root (cgroups and iptables)")
        if _iptables_path() is None:
            raise RuntimeError("the nemesis needs iptables (Debian package iptables)")
        tag = f"{os.getpid()}"
        self._mark_chain = f"{CHAIN_PREFIX}{tag}-M"
        self._fault_chain = f"{CHAIN_PREFIX}{tag}-F"
        self._cgroup_root = _cgroup2_root()
        self._group_dir = self._cgroup_root / f"{CGROUP_PREFIX}{tag}"
        self._marks: dict[str, int] = {}
        self._open = False
        self.cuts: list[str] = []

    def open(self) -> Firewall:
        _remove_stale(self._cgroup_root)
        # Open before the first rule, so that close() removes whatever a failure leaves.
        self._open = True
        try:
            self._group_dir.mkdir()
            for chain in (self._mark_chain, self._fault_chain):
                _iptables("-N", chain)
            for chain in (self._fault_chain, self._mark_chain):  # marking runs first
                _iptables("-I", "OUTPUT", "1", "-o", "lo", "-j", chain)
        except BaseException:
            self.close()
            raise
        return self

    def spawn_prefix(self, spec: ProcessSpec) -> list[str]:
        """For ``LocalCluster(spawn_prefix=...)``: runs the process in its own cgroup and
        marks the connections it opens from then on."""
        mark = self._marks.get(spec.name)
        group = self._group_dir / spec.name
        if mark is None:
            mark = (len(self._marks) + 1) << MARK_SHIFT
            assert mark & MARK_MASK == mark, "too many processes for the mark bits"
            self._marks[spec.name] = mark
            group.mkdir(exist_ok=True)
            relative = group.relative_to(self._cgroup_root)
            _iptables(
                "-A", self._mark_chain, "-p", "tcp", "-m", "conntrack", "--ctstate", "NEW",
                "-m", "cgroup", "--path", str(relative),
                "-j", "CONNMARK", "--set-xmark", f"{mark:#x}/{MARK_MASK:#x}",
            )  # fmt: skip
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")]

    def cut(self, sources: Sequence[str], ports: Sequence[int], what: str) -> None:
        """Drop the connections ``sources`` open to ``ports`` (both directions)."""
        for source in sources:
            for port in ports:
                _iptables(
                    "-A", self._fault_chain, "-p", "tcp",
                    "-m", "connmark", "--mark", f"{self._marks[source]:#x}/{MARK_MASK:#x}",
                    "-m", "conntrack", "--ctorigdstport", str(port), "-j", "DROP",
                )  # fmt: skip
        self.cuts.append(what)

    def dropped_packets(self) -> int:
        """Packets the current cuts have dropped so far (a cut that drops nothing had no
        effect: connection tracking off on loopback, say)."""
        listing = _iptables("-L", self._fault_chain, "-v", "-x", "-n").stdout
        return sum(
            int(line.split()[0])
            for line in listing.splitlines()[2:]
            if line.split() and line.split()[0].isdigit()
        )

    def heal(self) -> None:
        if self._open:
            _iptables("-F", self._fault_chain)
        self.cuts.clear()

    def close(self) -> None:
        """Remove the rules and the cgroups (call once the cluster's processes are gone)."""
        if self._open:
            for chain in (self._mark_chain, self._fault_chain):
                _iptables("-D", "OUTPUT", "-o", "lo", "-j", chain, check=False)
                _iptables("-F", chain, check=False)
                _iptables("-X", chain, check=False)
            self._open = False
        for group in sorted(self._group_dir.glob("*"), reverse=True):
            with contextlib.suppress(OSError):
                group.rmdir()
        with contextlib.suppress(OSError):
            self._group_dir.rmdir()

    def __enter__(self) -> Firewall:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_stale(cgroup_root: Path) -> None:
    """Chains and cgroups left by a nemesis run that was killed (its pid is gone)."""
    listing = _iptables("-S", check=False).stdout
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "-N" and parts[1].startswith(CHAIN_PREFIX):
            chain = parts[1]
            pid = chain[len(CHAIN_PREFIX) :].split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _iptables("-D", "OUTPUT", "-o", "lo", "-j", chain, check=False)
                _iptables("-F", chain, check=False)
                _iptables("-X", chain, check=False)
    for group in cgroup_root.glob(f"{CGROUP_PREFIX}*"):
        pid = group.name[len(CGROUP_PREFIX) :]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            for child in group.glob("*"):
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                group.rmdir()


# -- the history ---------------------------------------------------------------------------


@dataclass
class Stream:
    """What one producer sent and had acknowledged, per partition: values are
    ``<stream>:<partition>:<number>``, numbers counting up from 0 per partition."""

    name: str
    sent: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    # partition -> number -> acknowledged offset
    acked: list[dict[int, int]] = field(default_factory=lambda: [{} for _ in range(PARTITIONS)])
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_value(self, partition: int) -> tuple[int, bytes]:
        with self.lock:
            number = self.sent[partition]
            self.sent[partition] = number + 1
        return number, f"{self.name}:{partition}:{number}".encode()

    def ack(self, partition: int, number: int, offset: int) -> None:
        with self.lock:
            self.acked[partition][number] = offset

    def fail(self, error: object) -> None:
        with self.lock:
            self.failed += 1
            self.errors[str(error).split("\n")[0][:120]] += 1

    def acked_count(self) -> int:
        with self.lock:
            return sum(map(len, self.acked))


@dataclass
class FaultEvent:
    kind: str
    target: str
    started_s: float
    healed_s: float = 0.0
    # From the heal until every partition's ISR (internal topics too) was full again.
    full_isr_after_s: float = -1.0
    note: str = ""


@dataclass
class History:
    seed: int
    streams: dict[str, Stream] = field(default_factory=dict)
    faults: list[FaultEvent] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    commits: int = 0
    commit_failures: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    acked_without_offset: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stream(self, name: str) -> Stream:
        with self.lock:
            return self.streams.setdefault(name, Stream(name))

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)
        print(f"nemesis VIOLATION: {text}", flush=True)


# -- the workload --------------------------------------------------------------------------


@contextlib.contextmanager
def _in_thread(target: Callable[[threading.Event], None], name: str) -> Iterator[None]:
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            target(stop)
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(FLUSH_TIMEOUT_S + WAIT_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError(f"{name} did not stop")
    if failure:
        raise RuntimeError(f"{name} failed: {failure[0]!r}") from failure[0]


class _Pacer:
    """Sleeps so that calls to ``tick`` come at ``rate_per_s`` on average."""

    def __init__(self, rate_per_s: float) -> None:
        self._interval_s = 1 / rate_per_s
        self._next_s = time.monotonic()

    def tick(self, stop: threading.Event) -> None:
        self._next_s += self._interval_s
        delay_s = self._next_s - time.monotonic()
        if delay_s > 0:
            stop.wait(delay_s)
        elif delay_s < -1:
            self._next_s = time.monotonic()  # fell behind (a stall): do not burst


def sdk_producer(cluster: LocalCluster, history: History) -> Callable[[threading.Event], None]:
    stream = history.stream("sdk")
    bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)

    def run(stop: threading.Event) -> None:
        in_flight = threading.BoundedSemaphore(IN_FLIGHT_MAX)

        def acquired() -> bool:
            """A permit for one more record in flight (False: stopping meanwhile)."""
            while not in_flight.acquire(timeout=0.5):
                if stop.is_set():
                    return False
            return True

        with Producer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=5000,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            retry_backoff_ms=100,
        ) as producer:
            pacer = _Pacer(SEND_RATE_PER_S)
            turn = 0
            while not stop.is_set() and acquired():
                partition = turn % PARTITIONS
                turn += 1
                number, value = stream.next_value(partition)
                future = producer.send(TOPIC, value, partition=partition)

                def done(f: Any, p: int = partition, n: int = number) -> None:
                    try:
                        metadata = f.result(0)
                    except Exception as error:
                        stream.fail(error)
                    else:
                        stream.ack(p, n, metadata.offset)
                    in_flight.release()

                future.add_done_callback(done)
                pacer.tick(stop)
            producer.flush(FLUSH_TIMEOUT_S)

    return run


def kafka_producer(cluster: LocalCluster, history: History) -> Callable[[threading.Event], None]:
    from confluent_kafka import Producer as KafkaProducer

    stream = history.stream("kafka")
    bootstrap = cluster.kafka_bootstrap_servers
    # librdkafka's idempotence state changes (epoch bumps and why), for diagnosis.
    rdkafka_log = logging.getLogger("nemesis.librdkafka")
    rdkafka_log.propagate = False
    rdkafka_log.setLevel(logging.DEBUG)
    handler = logging.FileHandler(cluster.base_dir / "librdkafka.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    rdkafka_log.addHandler(handler)

    def run(stop: threading.Event) -> None:
        producer = KafkaProducer(
            {
                "debug": os.environ.get("BROOK_NEMESIS_RDKAFKA_DEBUG", "eos"),
                "logger": rdkafka_log,
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                "request.timeout.ms": 5000,
                "retry.backoff.ms": 100,
                "queue.buffering.max.messages": IN_FLIGHT_MAX,
                "error_cb": lambda error: (
                    history.violation(f"librdkafka fatal error: {error}")
                    if error.fatal()
                    else rdkafka_log.info("error callback: %s", error)
                ),
            }
        )

        def delivered(error: Any, message: Any) -> None:
            partition, number = (int(x) for x in message.value().split(b":")[1:])
            if error is not None:
                stream.fail(error)
                if error.fatal():
                    history.violation(f"librdkafka reported a fatal error: {error}")
            else:
                stream.ack(partition, number, message.offset())

        pacer = _Pacer(SEND_RATE_PER_S)
        turn = 0
        while not stop.is_set():
            partition = turn % PARTITIONS
            turn += 1
            _, value = stream.next_value(partition)
            while True:
                try:
                    producer.produce(TOPIC, value, partition=partition, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
                except Exception as error:  # KafkaException: a fatal producer state
                    history.violation(f"confluent-kafka refused to produce: {error}")
                    producer.poll(1.0)  # serves the error callback: the fatal error's cause
                    stop.set()
                    break
            producer.poll(0)
            pacer.tick(stop)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        rdkafka_log.removeHandler(handler)
        handler.close()
        if remaining:
            history.violation(f"confluent-kafka: {remaining} records neither delivered nor failed")

    return run


def group_member(cluster: LocalCluster, history: History) -> Callable[[threading.Event], None]:
    """Consumes the topic in a group, commits after every poll and reads the committed
    offsets back: what the coordinator acknowledged must never be read back lower."""
    bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)

    def run(stop: threading.Event) -> None:
        acknowledged: dict[TopicPartition, int] = {}
        with Consumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            request_timeout_ms=int(COMMIT_TIMEOUT_S * 1000),
        ) as consumer:
            consumer.subscribe([TOPIC])
            while not stop.is_set():
                try:
                    records = consumer.poll(0.5)
                    history.consumed += len(records)
                    if not records:
                        continue
                    positions = {
                        tp: consumer.position(tp, COMMIT_TIMEOUT_S) for tp in consumer.assignment()
                    }
                    consumer.commit(positions, timeout=COMMIT_TIMEOUT_S)
                except Exception:  # a rebalance, a coordinator moving: try again
                    history.commit_failures += 1
                    continue
                history.commits += 1
                for tp, offset in positions.items():
                    acknowledged[tp] = max(acknowledged.get(tp, 0), offset)
                try:
                    committed = consumer.committed(list(acknowledged), COMMIT_TIMEOUT_S)
                except Exception:
                    continue
                for tp, floor in acknowledged.items():
                    found = committed.get(tp)
                    if found is None or found.offset < floor:
                        history.violation(
                            f"group {GROUP}: committed offset of {tp} read back as "
                            f"{None if found is None else found.offset} after {floor} was "
                            "acknowledged"
                        )

    return run


# -- the faults ----------------------------------------------------------------------------


class Nemesis:
    """Applies one fault at a time from a seeded schedule and heals it."""

    def __init__(
        self,
        factory: ClusterFactory,
        cluster: LocalCluster,
        firewall: Firewall,
        admin: Admin,
        history: History,
    ) -> None:
        self._factory = factory
        self._cluster = cluster
        self._firewall = firewall
        self._admin = admin
        self._history = history
        self._random = random.Random(history.seed)
        self._paused: set[str] = set()
        self._epoch_s = time.monotonic()

    def _now_s(self) -> float:
        return round(time.monotonic() - self._epoch_s, 3)

    def run(self, duration_s: float) -> None:
        """Faults until ``duration_s`` has passed. After each heal, the time until every ISR
        is full again is measured (bounded catch-up, issue #13): past ``ISR_BOUND_S`` it is a
        violation, and the next fault waits for it (up to WAIT_TIMEOUT_S) so that faults do
        not pile up on a cluster that has not recovered."""
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            kind = self._random.choice(FAULT_KINDS)
            quiet_s = self._random.uniform(*QUIET_S)
            getattr(self, kind)()
            event = self._history.faults[-1] if self._history.faults else None
            if event is not None and event.full_isr_after_s < 0:
                event.full_isr_after_s = self.measure_full_isr(event.kind)
            time.sleep(quiet_s)

    def measure_full_isr(self, what: str) -> float:
        """Seconds from now until every ISR is full (a violation past ISR_BOUND_S)."""
        try:
            waited_s = _poll(self.full_isr, f"every ISR full after {what}", WAIT_TIMEOUT_S)
        except TimeoutError as error:
            self._history.violation(f"{error} ({self.isr_report()})")
            return WAIT_TIMEOUT_S
        if waited_s > ISR_BOUND_S:
            self._history.violation(
                f"ISRs full {waited_s:.1f} s after {what} healed; the bound is {ISR_BOUND_S} s"
            )
        return round(waited_s, 3)

    def isr_report(self) -> str:
        try:
            topics = self._admin.describe_topics(include_internal=True)
        except Exception as error:
            return f"describe failed: {error}"
        return "; ".join(
            f"{name}-{p.partition} leader {p.leader} isr {list(p.isr)} of {list(p.replicas)}"
            for name, topic in topics.items()
            for p in topic.partitions
            if p.leader is None or len(p.isr) != len(p.replicas)
        )

    def heal_all(self) -> None:
        """Lift every cut, wake every paused process, start every process that is down."""
        self._firewall.heal()
        for name in list(self._paused):
            self._cluster.kill(name, signal.SIGCONT)
            self._paused.discard(name)
        for name in self._cluster.names():
            if not self._cluster.is_running(name):
                self._factory.start(self._cluster, name)

    def _event(self, kind: str, target: str) -> FaultEvent:
        event = FaultEvent(kind, target, self._now_s())
        self._history.faults.append(event)
        print(f"nemesis {event.started_s:8.3f} s: {kind} {target}", flush=True)
        return event

    def _node(self, node_id: int) -> str:
        return next(n for n in self._cluster.names() if self._cluster.spec(n).node_id == node_id)

    def _ports(self, names: Sequence[str]) -> list[int]:
        return [port for name in names for port in self._cluster.spec(name).ports.values()]

    def _kill_and_restart(self, kind: str, name: str) -> None:
        event = self._event(kind, name)
        self._cluster.kill(name, signal.SIGKILL)
        self._cluster.wait(name, int(WAIT_TIMEOUT_S * 1000))
        time.sleep(self._random.uniform(*FAULT_HOLD_S))
        self._factory.start(self._cluster, name)
        event.healed_s = self._now_s()

    def kill_storage_node(self) -> None:
        self._kill_and_restart("kill_storage_node", self._random_storage_node())

    def kill_group_coordinator(self) -> None:
        name = self._random.choice(self._cluster.names(Role.GROUP_COORDINATOR))
        self._kill_and_restart("kill_group_coordinator", name)

    def kill_raft_leader(self) -> None:
        addresses = self._cluster.controller_bootstrap_servers.split(",")
        leader = wait_for_leader(addresses, WAIT_TIMEOUT_S)
        self._kill_and_restart("kill_raft_leader", self._node(int(leader.leader_id or 0)))

    def pause_storage_node(self) -> None:
        name = self._random_storage_node()
        hold_s = self._random.uniform(*FAULT_HOLD_S)
        event = self._event("pause_storage_node", name)
        self._cluster.kill(name, signal.SIGSTOP)
        self._paused.add(name)
        time.sleep(hold_s)
        self._cluster.kill(name, signal.SIGCONT)
        self._paused.discard(name)
        event.healed_s = self._now_s()

    def cut_node_from_controllers(self) -> None:
        """The node keeps its clients and its peers; the controllers fence it once its lease
        runs out and move its leaderships. It must not acknowledge acks=all writes then."""
        name = self._random_storage_node()
        hold_s = self._random.uniform(*CUT_HOLD_AFTER_PROBE_S)
        led = self._led_partitions(name)
        controllers = self._cluster.names(Role.CONTROLLER)
        event = self._event("cut_node_from_controllers", name)
        self._firewall.cut([name], self._ports(controllers), f"{name} from the controllers")
        self._firewall.cut(controllers, self._ports([name]), f"the controllers from {name}")
        self._hold_and_probe(event, name, led, CUT_FROM_CONTROLLERS_PROBE_S, hold_s)

    def cut_leader_from_followers(self) -> None:
        """The leader keeps the controllers and its clients; its followers stop fetching, it
        shrinks the ISR below min.insync.replicas and must refuse acks=all writes."""
        partition = self._random.randrange(PARTITIONS)
        hold_s = self._random.uniform(*CUT_HOLD_AFTER_PROBE_S)
        leader = self._leader_of(partition)
        if leader is None:
            return
        name = self._node(leader)
        others = [n for n in self._cluster.names(Role.STORAGE_NODE) if n != name]
        event = self._event("cut_leader_from_followers", f"{name} (leader of {partition})")
        self._firewall.cut([name], self._ports(others), f"{name} from {others}")
        self._firewall.cut(others, self._ports([name]), f"{others} from {name}")
        self._hold_and_probe(event, name, [partition], CUT_FROM_FOLLOWERS_PROBE_S, hold_s)

    def _hold_and_probe(
        self, event: FaultEvent, name: str, partitions: list[int], probe_s: float, after_s: float
    ) -> None:
        """Keep the cut ``probe_s``, probe the cut-off node, keep it ``after_s`` more, check
        that the cut dropped traffic, heal."""
        time.sleep(probe_s)
        if partitions:
            event.note = self._probe(name, partitions)
        time.sleep(after_s)
        if self._firewall.dropped_packets() == 0:
            self._history.violation(f"{event.kind} {event.target}: the cut dropped nothing")
        self._firewall.heal()
        event.healed_s = self._now_s()

    def _probe(self, name: str, partitions: list[int]) -> str:
        """An acks=all write straight to the cut-off node; acknowledged counts as a write the
        history must then hold, and as a violation (it could not have been replicated)."""
        stream = self._history.stream("probe")
        outcomes = []
        with grpc.insecure_channel(self._cluster.grpc_address(name)) as channel:
            stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
            for partition in partitions:
                number, value = stream.next_value(partition)
                request = storage_pb2.ProduceRequest(
                    acks=storage_pb2.ACKS_ALL,
                    timeout_ms=PROBE_TIMEOUT_MS,
                    partitions=[
                        storage_pb2.PartitionProduceData(
                            topic=TOPIC,
                            partition=partition,
                            records=build_batch([(int(time.time() * 1000), None, value, ())]),
                        )
                    ],
                )
                try:
                    response = stub.Produce(request, timeout=PROBE_TIMEOUT_MS / 1000 + 2)
                except grpc.RpcError as error:
                    outcomes.append(f"{partition}: {error.code().name}")  # type: ignore[attr-defined]
                    continue
                result = response.partitions[0]
                code = error_code(int(result.error_code))
                outcomes.append(f"{partition}: {code.name}")
                if code is ErrorCode.NONE:
                    stream.ack(partition, number, result.base_offset)
                    self._history.violation(
                        f"{name}, cut off, acknowledged an acks=all write to {TOPIC}-{partition}"
                        f" at offset {result.base_offset}"
                    )
        return "probe " + ", ".join(outcomes)

    def _random_storage_node(self) -> str:
        return self._random.choice(self._cluster.names(Role.STORAGE_NODE))

    def _describe(self) -> list[Any]:
        topics = self._admin.describe_topics(include_internal=True)
        return [p for t in topics.values() for p in t.partitions]

    def _leader_of(self, partition: int) -> int | None:
        try:
            return self._admin.describe_topics([TOPIC])[TOPIC].partitions[partition].leader
        except Exception:
            return None

    def _led_partitions(self, name: str) -> list[int]:
        node_id = self._cluster.spec(name).node_id
        try:
            described = self._admin.describe_topics([TOPIC])[TOPIC].partitions
        except Exception:
            return []
        return [p.partition for p in described if p.leader == node_id]

    def full_isr(self) -> bool:
        try:
            partitions = self._describe()
        except Exception:
            return False
        return bool(partitions) and all(
            p.leader is not None and len(p.isr) == len(p.replicas) for p in partitions
        )


# -- one run -------------------------------------------------------------------------------


def _poll(condition: Callable[[], bool], what: str, timeout_s: float) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def start_cluster(factory: ClusterFactory, firewall: Firewall) -> LocalCluster:
    return factory(
        controllers=3,
        storage_nodes=3,
        group_coordinators=1,
        gateways=1,
        spawn_prefix=firewall.spawn_prefix,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                # Preferred-leader elections during the run move leadership back to restarted
                # nodes: the interim leaders become followers again (issue #13's bug).
                "leader.imbalance.check.interval.seconds": str(LEADER_REBALANCE_INTERVAL_S),
            },
            "storage-node": {
                "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
                "replica.lag.time.max.ms": str(LAG_TIME_MAX_MS),
                "replica.fetch.wait.max.ms": "200",
                "replica.fetch.backoff.ms": "100",
            },
            "group-coordinator": {
                "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            },
            "gateway": {
                "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            },
        },
    )


def run_nemesis(
    factory: ClusterFactory, firewall: Firewall, seed: int, faults_s: float
) -> dict[str, Any]:
    """One whole run: cluster, workload, ``faults_s`` of faults, healing, checks. Returns
    the summary; its ``violations`` list is empty when every guarantee held."""
    print(f"nemesis seed {seed} (replay: BROOK_NEMESIS_SEED={seed})", flush=True)
    started = time.monotonic()
    history = History(seed)
    cluster = start_cluster(factory, firewall)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, configs={"min.insync.replicas": "2"})]
        )
        assert created == {TOPIC: None}, created
        nemesis = Nemesis(factory, cluster, firewall, admin, history)
        _poll(nemesis.full_isr, "the topics' leaders and full ISRs", WAIT_TIMEOUT_S)
        time_to_full_isr_s = -1.0
        try:
            with (
                _in_thread(sdk_producer(cluster, history), "sdk-producer"),
                _in_thread(kafka_producer(cluster, history), "kafka-producer"),
                _in_thread(group_member(cluster, history), "group-member"),
            ):
                _poll(
                    lambda: (
                        all(s.acked_count() for s in history.streams.values())
                        and len(history.streams) >= 2
                    ),
                    "first acknowledgements from both producers",
                    WAIT_TIMEOUT_S,
                )
                try:
                    nemesis.run(faults_s)
                finally:
                    nemesis.heal_all()
                nemesis.measure_full_isr("the last heal")
                time_to_full_isr_s = history.faults[-1].full_isr_after_s if history.faults else 0
                # Traffic after the faults: both producers still work.
                marks = {name: s.acked_count() for name, s in history.streams.items()}
                try:
                    _poll(
                        lambda: all(
                            history.streams[n].acked_count() > marks[n] for n in ("sdk", "kafka")
                        ),
                        "acknowledgements after the faults",
                        WAIT_TIMEOUT_S,
                    )
                except TimeoutError as error:
                    stalled = [
                        n for n in ("sdk", "kafka") if history.streams[n].acked_count() <= marks[n]
                    ]
                    history.violation(f"{error}: {stalled} acknowledged nothing more")
        finally:
            nemesis.heal_all()
        high_watermarks, found = read_back(cluster)
        states = wait_for_convergence(
            cluster.controller_bootstrap_servers.split(","), CONVERGENCE_TIMEOUT_S
        )
        digests = sorted({s.digest for s in states})
        if len(digests) != 1:
            history.violation(f"controllers diverged: {states}")
    check_log(history, high_watermarks, found)
    for name in cluster.names(Role.STORAGE_NODE):
        cluster.stop(name)
    try:
        assert_replicas_identical_to_high_watermark(cluster, TOPIC, high_watermarks)
    except AssertionError as error:
        history.violation(str(error))
    return summary(history, time.monotonic() - started, time_to_full_isr_s, high_watermarks)


def read_back(cluster: LocalCluster) -> tuple[dict[int, int], dict[int, list[tuple[int, str]]]]:
    """Every partition from its start to its high watermark: (offset, value) in log order."""
    high_watermarks, records = read_to_high_watermarks(
        cluster.bootstrap_servers(Role.STORAGE_NODE), TOPIC, range(PARTITIONS), READ_TIMEOUT_S
    )
    found = {
        p: [(r.offset, (r.value or b"").decode()) for r in records[p]] for p in range(PARTITIONS)
    }
    return high_watermarks, found


def check_log(
    history: History, high_watermarks: dict[int, int], found: dict[int, list[tuple[int, str]]]
) -> None:
    """Lost, duplicated, reordered or invented records, and acknowledged offsets that hold
    something else, become violations (with counts and the first examples of each)."""
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}

    def count(what: str, example: str) -> None:
        counts[what] += 1
        if len(examples.setdefault(what, [])) < EXAMPLES_MAX:
            examples[what].append(example)

    for partition in range(PARTITIONS):
        at_offset: dict[int, str] = {}
        first_at: dict[str, int] = {}
        last_number: dict[str, int] = {}
        for offset, value in found[partition]:
            at_offset[offset] = value
            if value in first_at:
                count("duplicated", f"{value} at {first_at[value]} and {offset}")
                continue
            first_at[value] = offset
            try:
                stream_name, part, number_text = value.split(":")
                number = int(number_text)
            except ValueError:
                count("invented", f"{value!r} at {partition}/{offset}")
                continue
            stream = history.streams.get(stream_name)
            if stream is None or int(part) != partition or number >= stream.sent[partition]:
                count("invented", f"{value} at {partition}/{offset}")
                continue
            if number <= last_number.get(stream_name, -1):
                count("reordered", f"{value} at {offset} after {stream_name} {last_number}")
            last_number[stream_name] = number
        for stream in history.streams.values():
            for number, offset in stream.acked[partition].items():
                value = f"{stream.name}:{partition}:{number}"
                if value not in first_at:
                    count("lost", f"{value} acknowledged at {offset}")
                elif offset is None or offset < 0:
                    # librdkafka acknowledges a batch whose answer it lost once a later batch
                    # of the producer is acknowledged (the node took that one in sequence, so
                    # this one is in the log), without an offset: present once is the check.
                    history.acked_without_offset += 1
                elif at_offset.get(offset) != value:
                    count(
                        "misplaced",
                        f"{value} acknowledged at {partition}/{offset}, found at "
                        f"{first_at[value]}; {offset} holds {at_offset.get(offset)}",
                    )
    for what, n in counts.items():
        history.violation(f"{n} records {what}, for example {examples[what]}")
    history.lost = counts["lost"]
    history.duplicated = counts["duplicated"]


def summary(
    history: History, elapsed_s: float, time_to_full_isr_s: float, hws: dict[int, int]
) -> dict[str, Any]:
    return {
        "seed": history.seed,
        "elapsed_s": round(elapsed_s, 1),
        "faults_injected": len(history.faults),
        "faults_by_kind": dict(Counter(f.kind for f in history.faults)),
        "records_acknowledged": {n: s.acked_count() for n, s in history.streams.items()},
        "records_sent": {n: sum(s.sent) for n, s in history.streams.items()},
        "send_failures": {n: s.failed for n, s in history.streams.items()},
        "records_acknowledged_without_offset": history.acked_without_offset,
        "records_lost": history.lost,
        "records_duplicated": history.duplicated,
        "high_watermarks": hws,
        "group_commits": history.commits,
        "group_commit_failures": history.commit_failures,
        "group_records_consumed": history.consumed,
        "time_to_full_isr_after_last_fault_s": round(time_to_full_isr_s, 2),
        "time_to_full_isr_max_s": max(
            [time_to_full_isr_s, *(f.full_isr_after_s for f in history.faults)]
        ),
        "time_to_full_isr_by_kind_max_s": {
            kind: max(f.full_isr_after_s for f in history.faults if f.kind == kind)
            for kind in sorted({f.kind for f in history.faults})
        },
        "isr_bound_s": ISR_BOUND_S,
        "probes_run": sum(1 for f in history.faults if f.note),
        "probes": [f"{f.kind} {f.target}: {f.note}" for f in history.faults if f.note],
        "violations": history.violations,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the nemesis against a local cluster.")
    parser.add_argument("--minutes", type=float, default=20.0, help="how long to inject faults")
    parser.add_argument("--seed", type=int, default=None, help="replay a schedule")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's files")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    root = Path(tempfile.mkdtemp(prefix="brook-nemesis-"))
    factory = ClusterFactory(root / "clusters")
    failed = True
    with Firewall() as firewall:
        try:
            result = run_nemesis(factory, firewall, seed, args.minutes * 60)
            failed = bool(result["violations"])
        finally:
            factory.close(keep_files=failed or args.keep)
    print(json.dumps(result, indent=2))
    if failed:
        print(f"cluster files kept under {root}", file=sys.stderr)
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
