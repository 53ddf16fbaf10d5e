"""Transactions through the Kafka gateway with confluent-kafka (librdkafka): the transactional
producer against the idempotent one, and read_committed consumers against read_uncommitted
ones, in the same run on the same cluster (issue #16); prints one JSON document.

Scenarios, 100-byte keyless records into 6-partition topics, acks=all throughout:

- produce_idempotent: one idempotent producer sends ``--records`` records as fast as it can
  (the seed's batch.size=8196 and 64 MiB of buffer, as bench_gateway.py): the peer.
- produce_transactional_<n>ms, n in ``--commit-intervals-ms`` (1, 10, 100): one transactional
  producer sends the same records in transactions that each stay open n ms, accepting records
  as fast as it sends them, then commit (Kafka's ProducerPerformance
  ``--transaction-duration-ms``); reported: records/s and MB/s from the first record to the
  last commit, the transactions, records per transaction, and commit_transaction latency.
  ``of_idempotent`` is records/s over produce_idempotent's in the same round.
- consume_read_committed / consume_read_uncommitted: one consumer reads the records of the
  10 ms transactional topic back from the beginning (manual assignment), with each isolation
  level; the topic holds a commit marker per partition per transaction, which both skip, and
  read_committed reads only up to the last stable offset and filters aborted transactions
  (none here). ``of_read_uncommitted`` is the ratio.

The cluster: 1 controller, 1 storage node (3 with ``--rf3``: replication factor 3 and
min.insync.replicas=2), 1 coordinator (group and transaction coordinator) and 1 gateway,
started with ``brook.launcher``. Server CPU-seconds per million records come from /proc, as in
bench_gateway.py; the disk and loopback ceilings of bench_sdk.py are measured in the same run.
Rounds interleave the scenarios; top-level figures are medians of the rounds.

    python bench/bench_transactions.py [--records 200000] [--rounds 3] [--rf3]
    python bench/bench_transactions.py --quick            # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

from bench_gateway import (
    CLIENT_TIMEOUT_S,
    FLUSH_TIMEOUT_S,
    PARTITIONS,
    POLL_S,
    PRODUCER_SETTINGS,
    RECORD_BYTES,
    System,
    _client_version,
    consume,
    create_topics,
    machine_facts,
    measure,
    produce,
    running_brook,
    summarize,
)
from bench_sdk import DISK_BYTES_MIN, LOOPBACK_SECONDS, disk_ceiling, loopback_ceiling
from confluent_kafka import KafkaError, Producer

from brook.tools.perf import MB, make_payload, summarize_latencies

COMMIT_INTERVALS_MS: Final = (1, 10, 100)
# The transactional topic the consumers read: many markers, so their cost shows.
CONSUMED_INTERVAL_MS: Final = 10
QUICK: Final = {"records": 20_000, "rounds": 1}
IDEMPOTENT_SETTINGS: Final[Mapping[str, Any]] = {"enable.idempotence": True}
ISOLATION_LEVELS: Final = ("read_committed", "read_uncommitted")
NOTE: Final = (
    "Client and servers share this machine's cores, so records/s depend on how much CPU the "
    "Python client leaves to the servers; compare scenarios only within one run. A transaction's "
    "commit waits for its records to be acknowledged, then for EndTxn (the PrepareCommit "
    "record written to __transaction_state); markers follow asynchronously, so a short commit "
    "interval pays one such round trip per interval."
)


def cluster_overrides(replicated: bool) -> dict[str, dict[str, str]]:
    """One copy of the internal topics on a one-node cluster; Kafka's defaults (3 copies,
    min.insync.replicas 2) on three nodes."""
    if replicated:
        return {}
    return {
        "controller": {
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        }
    }


def produce_transactional(
    bootstrap: str, topic: str, records: int, commit_interval_ms: int
) -> dict[str, Any]:
    """``records`` records in transactions each open ``commit_interval_ms``, every one
    committed; init_transactions happens before the clock starts."""
    errors: list[str] = []

    def on_error(error: KafkaError | None, _message: Any) -> None:
        if error is not None and len(errors) < 1:
            errors.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "transactional.id": f"bench-{topic}",
            "on_delivery": on_error,
            **PRODUCER_SETTINGS,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    payload = make_payload(RECORD_BYTES)
    send = producer.produce
    interval_s = commit_interval_ms / 1000
    commit_ms: list[float] = []
    sent = 0
    began = time.perf_counter()
    while sent < records:
        producer.begin_transaction()
        close_at = time.perf_counter() + interval_s
        in_transaction = 0
        while sent < records and (in_transaction == 0 or time.perf_counter() < close_at):
            try:
                send(topic, payload)
            except BufferError:
                producer.poll(POLL_S)
                continue
            sent += 1
            in_transaction += 1
        committing = time.perf_counter()
        producer.commit_transaction(FLUSH_TIMEOUT_S)
        commit_ms.append((time.perf_counter() - committing) * 1000)
    elapsed_s = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"transactional produce to {topic}: first error {errors}")
    latency = summarize_latencies(commit_ms)
    return {
        "records": records,
        "records_per_s": round(records / elapsed_s, 1),
        "mb_per_s": round(records * RECORD_BYTES / MB / elapsed_s, 2),
        "transactions": len(commit_ms),
        "records_per_transaction": round(records / len(commit_ms), 1),
        "commit_p50_ms": round(latency.p50_ms, 2),
        "commit_p99_ms": round(latency.p99_ms, 2),
    }


def transactional_topic(interval_ms: int, round_index: int) -> str:
    return f"transactional-{interval_ms}ms-{round_index}"


def run_round(
    system: System, round_index: int, records: int, intervals_ms: tuple[int, ...]
) -> dict[str, dict[str, Any]]:
    """One round of every scenario, the idempotent peer first."""
    figures: dict[str, dict[str, Any]] = {}
    idempotent = measure(
        system,
        partial(
            produce,
            system.bootstrap,
            f"idempotent-{round_index}",
            records,
            "all",
            IDEMPOTENT_SETTINGS,
        ),
    ).as_dict(records)
    figures["produce_idempotent"] = idempotent
    for interval_ms in intervals_ms:
        topic = transactional_topic(interval_ms, round_index)
        measured = measure(
            system, partial(produce_transactional, system.bootstrap, topic, records, interval_ms)
        ).as_dict(records)
        measured["of_idempotent"] = round(
            measured["records_per_s"] / idempotent["records_per_s"], 3
        )
        figures[f"produce_transactional_{interval_ms}ms"] = measured
    topic = transactional_topic(CONSUMED_INTERVAL_MS, round_index)
    # Alternate which isolation level reads first: the second read finds a warmer page cache.
    levels = ISOLATION_LEVELS if round_index % 2 == 0 else ISOLATION_LEVELS[::-1]
    for level in levels:
        settings = {"isolation.level": level, "group.id": f"bench-{topic}-{level}"}
        figures[f"consume_{level}"] = measure(
            system, partial(consume, system.bootstrap, topic, records, settings)
        ).as_dict(records)
    committed = figures["consume_read_committed"]
    committed["of_read_uncommitted"] = round(
        committed["records_per_s"] / figures["consume_read_uncommitted"]["records_per_s"], 3
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=200_000, help="records per scenario")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument(
        "--commit-intervals-ms",
        default=",".join(map(str, COMMIT_INTERVALS_MS)),
        help="comma list of how long each transaction stays open (ms)",
    )
    parser.add_argument("--rf3", action="store_true", help="3 storage nodes, replication 3")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument("--dir", type=Path, default=None, help="where the cluster lives")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    try:
        intervals_ms = tuple(int(x) for x in args.commit_intervals_ms.split(",") if x.strip())
    except ValueError:
        parser.error("--commit-intervals-ms takes a comma list of whole milliseconds")
    if not intervals_ms or min(intervals_ms) < 0 or CONSUMED_INTERVAL_MS not in intervals_ms:
        parser.error(f"--commit-intervals-ms: >= 0 each, {CONSUMED_INTERVAL_MS} among them")
    if args.records < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be at least 1")

    began = time.perf_counter()
    load_at_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bench-transactions-", dir=args.dir))
    rounds: dict[str, list[dict[str, Any]]] = {}
    storage_nodes = 3 if args.rf3 else 1
    try:
        ceilings = {
            "disk_write": disk_ceiling(root, max(args.records * RECORD_BYTES, DISK_BYTES_MIN)),
            "loopback_tcp": loopback_ceiling(LOOPBACK_SECONDS),
        }
        with running_brook(
            root,
            "brook",
            storage_nodes,
            "none",
            group_coordinators=1,
            config_overrides=cluster_overrides(args.rf3),
        ) as system:
            topics = {f"idempotent-{n}": PARTITIONS for n in range(args.rounds)}
            for n in range(args.rounds):
                for interval_ms in intervals_ms:
                    topics[transactional_topic(interval_ms, n)] = PARTITIONS
            create_topics(system, topics)
            for n in range(args.rounds):
                for scenario, figures in run_round(system, n, args.records, intervals_ms).items():
                    rounds.setdefault(scenario, []).append(figures)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    scenarios: dict[str, Any] = {}
    for scenario, runs in rounds.items():
        scenarios[scenario] = summarize(runs)
        for ratio in ("of_idempotent", "of_read_uncommitted"):
            values = [run[ratio] for run in runs if ratio in run]
            if values:
                scenarios[scenario][ratio] = round(float(statistics.median(values)), 3)
    report: dict[str, Any] = {
        "benchmark": "transactions",
        "note": NOTE,
        "machine": machine_facts(load_at_start),
        "scenario": {
            "partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "records_per_scenario": args.records,
            "rounds": args.rounds,
            "commit_intervals_ms": list(intervals_ms),
            "storage_nodes": storage_nodes,
            "replication_factor": 3 if args.rf3 else 1,
            "client": f"confluent-kafka {_client_version()} through the gateway",
            "producer_settings": dict(PRODUCER_SETTINGS),
        },
        "ceilings": ceilings,
        "scenarios": scenarios,
        "total_s": round(time.perf_counter() - began, 1),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
