"""A Node.js client on Brook's gRPC contract alone: examples/node/produce_fetch.mjs (@grpc/grpc-js
and @grpc/proto-loader, pinned in package.json, loading proto/brook/v1 at run time) against the
compatibility suite's shared cluster (conftest.py: two storage nodes).

The script is pointed at the storage node that does not lead the topic's partition, so it must
find the leader through GetMetadata. It produces with ProduceRecords and fetches with Fetch;
the test checks that every record came back exactly once, in order, with its key, value and
headers (a repeated header name and a null header value included), and reads the partition
again with the Python SDK's consumer to check what was stored independently of Node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import pytest
from cluster_fixture import wait_until
from node_scripts import run_node_json

from brook.client import Admin, Consumer, NewTopic, TopicPartition
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

SCRIPT: Final = Path(__file__).resolve().parents[2] / "examples" / "node" / "produce_fetch.mjs"
TOPIC: Final = "grpc-node"
TP: Final = TopicPartition(TOPIC, 0)
# Not a multiple of the script's 4 records per ProduceRecords request: the last one is short.
RECORDS: Final = 30
NODE_TIMEOUT_S: Final = 60.0
TIMEOUT_S: Final = 20.0

Headers = list[tuple[str, str | None]]


def _expected() -> list[tuple[int, str | None, str, Headers]]:
    """(offset, key, value, headers) of every record the script produces, as it documents."""
    return [
        (
            i,
            None if i % 4 == 3 else f"key-{i}",
            f"value {i} ü",
            [("index", str(i)), ("trace", "a"), ("trace", "b"), ("absent", None)],
        )
        for i in range(RECORDS)
    ]


@pytest.fixture(scope="module")
def result(compat_cluster: LocalCluster) -> Any:
    """The script's output, run against the storage node that is not the partition's leader."""
    with Admin(compat_cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(TOPIC, 1, 1)]) == {TOPIC: None}
        leader = _leader(admin)
    follower = next(
        name
        for name in compat_cluster.names(Role.STORAGE_NODE)
        if compat_cluster.spec(name).node_id != leader
    )
    output = run_node_json(
        SCRIPT,
        [compat_cluster.grpc_address(follower), TOPIC, str(RECORDS)],
        packages=["@grpc/grpc-js", "@grpc/proto-loader"],
        timeout_s=NODE_TIMEOUT_S,
    )
    assert output["leader"] == leader, "the script did not find the leader the controller names"
    return output


def _leader(admin: Admin) -> int:
    """The node id leading TOPIC's partition 0, waiting (bounded) for one to be elected."""

    def leader() -> int | None:
        (partition,) = admin.describe_topics([TOPIC])[TOPIC].partitions
        return partition.leader if partition.leader is not None and partition.leader >= 0 else None

    wait_until(lambda: leader() is not None, f"a leader for {TP}", TIMEOUT_S)
    elected = leader()
    assert elected is not None
    return elected


def test_node_produces_through_the_leader_it_found_and_is_told_contiguous_offsets(
    result: Any,
) -> None:
    assert result["base_offsets"] == [str(offset) for offset in range(0, RECORDS, 4)]


def test_node_fetches_every_record_once_in_order_with_key_value_and_headers(result: Any) -> None:
    fetched = [
        (int(r["offset"]), r["key"], r["value"], [tuple(h) for h in r["headers"]])
        for r in result["records"]
    ]
    assert fetched == _expected()


def test_the_python_sdk_reads_what_node_produced(result: Any, bootstrap_grpc: str) -> None:
    consumed: list[tuple[int, str | None, str, Headers]] = []
    with Consumer(bootstrap_servers=bootstrap_grpc, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP])
        deadline = time.monotonic() + TIMEOUT_S
        while len(consumed) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(consumed)} of {RECORDS} records"
            for r in consumer.poll(0.5):
                consumed.append(
                    (
                        r.offset,
                        None if r.key is None else r.key.decode(),
                        (r.value or b"").decode(),
                        [(name, None if v is None else v.decode()) for name, v in r.headers],
                    )
                )
        assert consumer.end_offsets([TP], TIMEOUT_S)[TP] == RECORDS
    assert consumed == _expected()


@pytest.fixture
def bootstrap_grpc(compat_cluster: LocalCluster) -> str:
    """Every storage node's gRPC address, for the SDK."""
    return compat_cluster.bootstrap_servers(Role.STORAGE_NODE)
