"""__consumer_offsets under compaction in a real cluster (issue #18), shared by
tests/integration/test_compaction_cluster.py and bench/bench_offsets_failover.py: a cluster
whose offsets topic has one small-segment partition on one storage node and two group
coordinators; 10,000 commits for the same 100 keys (one group, 100 partitions of a topic,
committed from outside the group as an admin tool does); holding cleaning back and letting it
go (the topic's ``min.compaction.lag.ms``); the partition's bytes on disk; and a failover of
the coordinator that owns the group, timed until the new owner serves the group's offsets.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_fixture import coordinator_owners, wait_until

from brook.client import Admin, AlterConfigOp, BrookClientError, ConfigResource, TopicPartition
from brook.launcher import LocalCluster, Role

OFFSETS_TOPIC = "__consumer_offsets"
STORAGE_NODE = "storage-node-1"
GROUP = "compaction"
TOPIC = "orders"
KEYS = 100
COMMITS = 10_000
# Small segments, so that all but the last few commits are in sealed (cleanable) segments.
OFFSETS_SEGMENT_BYTES = 64 * 1024
# Longer than any test: nothing is cleanable while this is the topic's min.compaction.lag.ms.
HOLD_CLEANING_MS = 24 * 3600 * 1000
BROKER_SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 200
ADMIN_TIMEOUT_MS = 30_000
SERVE_TIMEOUT_S = 120.0
POLL_S = 0.05
# A segment swap renames a few files: a listing is untorn again within milliseconds.
SWAP_TIMEOUT_S = 10.0

CLUSTER_CONFIG: dict[str, dict[str, str]] = {
    "controller": {
        "broker.session.timeout.ms": str(BROKER_SESSION_TIMEOUT_MS),
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.segment.bytes": str(OFFSETS_SEGMENT_BYTES),
    },
    "storage-node": {
        "broker.session.timeout.ms": str(BROKER_SESSION_TIMEOUT_MS),
        "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
        "log.cleaner.backoff.ms": "100",
        "log.cleaner.min.cleanable.ratio": "0.01",
    },
    "group-coordinator": {
        "broker.session.timeout.ms": str(BROKER_SESSION_TIMEOUT_MS),
        "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
        "group.initial.rebalance.delay.ms": "0",
    },
}
CLUSTER_SHAPE: dict[str, int] = {
    "controllers": 1,
    "storage_nodes": 1,
    "group_coordinators": 2,
    "gateways": 0,
}

_LOADED = re.compile(r'msg="loaded a __consumer_offsets partition".* load_ms=(\d+)')


def hold_cleaning(admin: Admin, held: bool) -> None:
    """Make __consumer_offsets uncleanable (``held``) or cleanable at once."""
    value = str(HOLD_CLEANING_MS if held else 0)
    changes = [("min.compaction.lag.ms", AlterConfigOp.SET, value)]
    results = admin.alter_configs({ConfigResource.topic(OFFSETS_TOPIC): changes})
    error = next(iter(results.values()))
    if error is not None:
        raise error


def commit_all(admin: Admin) -> dict[TopicPartition, int]:
    """COMMITS commits for the KEYS partitions of TOPIC (one CommitOffsets of every partition
    at a time); the last committed offset of each."""
    last: dict[TopicPartition, int] = {}
    for round_ in range(COMMITS // KEYS):
        offsets = {TopicPartition(TOPIC, p): round_ * 1000 + p for p in range(KEYS)}
        results = admin.alter_consumer_group_offsets(GROUP, offsets, timeout_ms=ADMIN_TIMEOUT_MS)
        failed = {tp: error for tp, error in results.items() if error is not None}
        if failed:
            raise next(iter(failed.values()))
        last = offsets
    return last


def committed(admin: Admin) -> dict[TopicPartition, int] | None:
    """The group's committed offsets, or None while its coordinator does not serve them."""
    try:
        found = admin.list_consumer_group_offsets(GROUP, timeout_ms=2000)
    except BrookClientError:  # an error answer, or no answer in time
        return None
    return {tp: meta.offset for tp, meta in found.items()}


def segment_sizes(directory: Path) -> list[int] | None:
    """Bytes of each segment file of the partition log in ``directory``, oldest first; None
    while the log cleaner is swapping segments in (a `.swap` file marks it, and a listing then
    is torn) or when a file vanished between the listing and its size."""
    if any(directory.glob("*.swap")):
        return None
    try:
        sizes = [path.stat().st_size for path in sorted(directory.glob("*.log"))]
    except FileNotFoundError:
        return None
    return None if any(directory.glob("*.swap")) else sizes


def partition_log_bytes(directory: Path) -> int:
    """Bytes of the segment files of the partition log in ``directory``, from a listing no
    segment swap tore (the log cleaner may be at work)."""
    listed: list[list[int]] = []

    def untorn() -> bool:
        sizes = segment_sizes(directory)
        if sizes is not None:
            listed.append(sizes)
        return sizes is not None

    wait_until(untorn, f"a listing of {directory.name} between segment swaps", SWAP_TIMEOUT_S)
    return sum(listed[-1])


def _offsets_log_directory(cluster: LocalCluster) -> Path:
    return cluster.spec(STORAGE_NODE).directory / "data" / f"{OFFSETS_TOPIC}-0"


def offsets_log_bytes(cluster: LocalCluster) -> int:
    """Bytes of the __consumer_offsets partition's segment files on the storage node."""
    return partition_log_bytes(_offsets_log_directory(cluster))


def wait_cleaned(cluster: LocalCluster, ceiling_bytes: int, timeout_s: float) -> float:
    """Seconds until the partition's segments (the active one aside) hold at most
    ``ceiling_bytes``."""

    def cleaned() -> bool:
        sizes = segment_sizes(_offsets_log_directory(cluster))
        return sizes is not None and sum(sizes[:-1]) <= ceiling_bytes

    return wait_until(
        cleaned, f"__consumer_offsets to be cleaned to {ceiling_bytes} bytes", timeout_s, POLL_S
    )


@dataclass(frozen=True)
class Failover:
    """A failover of the group's coordinator: ``served_s`` from the kill until the new owner
    answered the group's committed offsets exactly; ``load_ms``: the new owner's replay, as
    its log line reports it."""

    killed: str
    new_owner: str
    served_s: float
    load_ms: int

    def as_dict(self) -> dict[str, Any]:
        return {"served_s": round(self.served_s, 3), "load_ms": self.load_ms}


def owner(cluster: LocalCluster) -> str:
    """The process name of the coordinator that owns __consumer_offsets-0."""
    node_id = coordinator_owners(cluster)[0]
    return next(
        name
        for name in cluster.names(Role.GROUP_COORDINATOR)
        if cluster.spec(name).node_id == node_id
    )


def fail_over(
    cluster: LocalCluster, admin: Admin, expected: Mapping[TopicPartition, int]
) -> Failover:
    """kill -9 the owning coordinator; wait until the group's offsets are served as
    ``expected`` (by the other coordinator)."""
    victim = owner(cluster)
    others = [n for n in cluster.names(Role.GROUP_COORDINATOR) if n != victim]
    logs = {name: cluster.spec(name).log_path for name in others}
    before = {name: _text(path) for name, path in logs.items()}
    began = time.monotonic()
    cluster.kill(victim)
    wait_until(
        lambda: committed(admin) == dict(expected),
        "the new coordinator to serve every committed offset",
        SERVE_TIMEOUT_S,
        POLL_S,
    )
    served_s = time.monotonic() - began
    cluster.wait(victim, 10_000)
    new_owner = owner(cluster)
    loads = _LOADED.findall(_text(logs[new_owner])[len(before[new_owner]) :])
    if not loads:
        raise AssertionError(f"{new_owner} logged no load of __consumer_offsets")
    return Failover(victim, new_owner, served_s, int(loads[-1]))


def restart_without_view(cluster: LocalCluster, name: str) -> None:
    """Start a killed coordinator again with its local view removed, so that a later
    takeover replays the topic, not the view."""
    state = Path(cluster.config(name)["group.coordinator.state.dir"])
    for path in sorted(state.rglob("*"), reverse=True):
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
    cluster.start(name)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""
