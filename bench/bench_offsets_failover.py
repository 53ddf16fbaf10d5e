"""Group coordinator failover over __consumer_offsets before and after compaction (issue #18);
prints one JSON document.

The cluster (``tests/offsets_compaction.py``, as ``test_compaction_cluster.py`` uses it): one
controller, one storage node holding __consumer_offsets (one partition, 64 KiB segments), two
group coordinators. 10,000 commits for the same 100 keys (one group, 100 partitions of a
topic) are made while the topic's ``min.compaction.lag.ms`` holds the cleaner back. Then, per
round:

- before: kill -9 the coordinator owning the group; the other takes the partition over and
  replays the whole uncleaned log. ``served_s``: from the kill until the new owner answers
  the group's committed offsets exactly (this includes the controllers noticing the death,
  ``broker.session.timeout.ms`` 2 s); ``load_ms``: the replay itself, from the new owner's
  "loaded a __consumer_offsets partition" log line. The killed coordinator restarts with its
  local view removed (so that the next takeover replays the topic, not the view).
- after: cleaning is let go, waited for (the sealed segments down to about 100 records'
  worth), and the same failover measured on the cleaned log.

``after_of_before`` is the ratio of the load times, the figure compaction changes (the
detection time is the same in both). The partition's bytes before and after are reported.

    python bench/bench_offsets_failover.py [--rounds 3]
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
from pathlib import Path
from typing import Any

from bench_gateway import machine_facts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from offsets_compaction import (
    CLUSTER_CONFIG,
    CLUSTER_SHAPE,
    COMMITS,
    KEYS,
    Failover,
    commit_all,
    fail_over,
    hold_cleaning,
    offsets_log_bytes,
    restart_without_view,
    wait_cleaned,
)

from brook.client import Admin
from brook.launcher import LocalCluster, Topology

STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
CLEAN_TIMEOUT_S = 300.0


def one_round(root: Path) -> dict[str, Any]:
    cluster = LocalCluster(
        root,
        Topology(**CLUSTER_SHAPE),
        config_overrides=CLUSTER_CONFIG,
        log_level="INFO",
        startup_timeout_ms=STARTUP_TIMEOUT_MS,
        stop_timeout_ms=STOP_TIMEOUT_MS,
    )
    cluster.start()
    try:
        with Admin(cluster.controller_bootstrap_servers) as admin:
            hold_cleaning(admin, held=True)
            expected = commit_all(admin)
            dirty_bytes = offsets_log_bytes(cluster)
            before: Failover = fail_over(cluster, admin, expected)
            restart_without_view(cluster, before.killed)
            hold_cleaning(admin, held=False)
            clean_s = wait_cleaned(
                cluster, int(2 * dirty_bytes / (COMMITS / KEYS)), CLEAN_TIMEOUT_S
            )
            cleaned_bytes = offsets_log_bytes(cluster)
            after = fail_over(cluster, admin, expected)
    finally:
        cluster.stop()
    return {
        "log_bytes_before": dirty_bytes,
        "log_bytes_after": cleaned_bytes,
        "cleaning_waited_s": round(clean_s, 2),
        "before": before.as_dict(),
        "after": after.as_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of these")
    parser.add_argument("--dir", type=Path, default=None, help="where the clusters live")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    root = Path(tempfile.mkdtemp(prefix="bench-offsets-failover-", dir=args.dir))
    load_at_start = os.getloadavg()
    began = time.perf_counter()
    try:
        rounds = [one_round(root / f"round-{n}") for n in range(args.rounds)]
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def median(phase: str, figure: str) -> float:
        return float(statistics.median(r[phase][figure] for r in rounds))

    report = {
        "benchmark": "offsets_failover",
        "machine": machine_facts(load_at_start),
        "scenario": {"commits": COMMITS, "keys": KEYS, "rounds": args.rounds},
        "before": {
            "served_s": median("before", "served_s"),
            "load_ms": median("before", "load_ms"),
        },
        "after": {"served_s": median("after", "served_s"), "load_ms": median("after", "load_ms")},
        "after_of_before": {
            "load_ms": round(median("after", "load_ms") / max(median("before", "load_ms"), 1), 3),
            "served_s": round(median("after", "served_s") / median("before", "served_s"), 3),
        },
        "rounds": rounds,
        "seconds": round(time.perf_counter() - began, 1),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
