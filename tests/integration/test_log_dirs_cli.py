"""``brook log-dirs describe`` against a real storage node (static.topics, no controller): the
partition logs, their sizes and the log cleaner's clean and dirty bytes (DescribeLogDirs).

The test marked "Needs clean_log" runs the real cleaner and passes once it is implemented.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_fixture import STANDALONE_STORAGE_NODE, ClusterFactory, start_standalone_storage_node

from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster
from brook.record import build_batch
from brook.tools.log_dirs import COLUMNS
from brook.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
NODE = STANDALONE_STORAGE_NODE
COMMAND_TIMEOUT_S = 60
RPC_TIMEOUT_S = 15.0
CLEAN_WAIT_S = 30.0
TIMESTAMP_MS = 1_700_000_000_000
# Small segments: 40 one-record batches fill about 20 of them.
TOPICS = "table:1:cleanup.policy=compact:segment.bytes=200,plain:1"


def _start(cluster_factory: ClusterFactory, **settings: str) -> LocalCluster:
    return start_standalone_storage_node(cluster_factory, TOPICS, **settings)


def _produce_updates(cluster: LocalCluster, topic: str, count: int, keys: int) -> int:
    """``count`` one-record batches cycling over ``keys`` keys; returns the bytes written
    (the batches are stored as they are sent)."""
    written = 0
    with grpc.insecure_channel(cluster.grpc_address(NODE)) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        for i in range(count):
            batch = build_batch([(TIMESTAMP_MS, b"key-%d" % (i % keys), b"value-%d" % i, ())])
            written += len(batch)
            reply = stub.Produce(
                storage_pb2.ProduceRequest(
                    partitions=[
                        storage_pb2.PartitionProduceData(
                            topic=topic,
                            partition=0,
                            records=batch,
                        )
                    ]
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert error_code(reply.partitions[0].error_code) is ErrorCode.NONE
    return written


def _log_dirs(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BROOK, "log-dirs", "describe", "--bootstrap-server", cluster.grpc_address(NODE), *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _partitions(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    done = _log_dirs(cluster, "--json")
    assert done.returncode == 0, done.stderr
    [node] = json.loads(done.stdout)["nodes"]
    [log_dir] = node["logDirs"]
    return {p["partition"]: p for p in log_dir["partitions"]}


def test_log_dirs_describe_shows_sizes_and_the_dirty_section_of_compacted_logs(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _start(cluster_factory, **{"log.cleaner.enable": "false"})
    _produce_updates(cluster, "table", 40, keys=4)
    _produce_updates(cluster, "plain", 3, keys=3)

    partitions = _partitions(cluster)
    table, plain = partitions["table-0"], partitions["plain-0"]
    assert (table["compacted"], plain["compacted"]) == (True, False)
    assert (table["logEndOffset"], plain["logEndOffset"]) == (40, 3)
    # Never cleaned: everything below the active segment is dirty.
    assert table["cleanBytes"] == 0 and table["firstDirtyOffset"] == 0
    assert 0 < table["dirtyBytes"] < table["size"]
    assert table["dirtyRatio"] == 1.0 and table["firstUncleanableOffset"] > 0
    assert table["uncleanable"] is False and table["lastCleanedMs"] is None
    assert plain["size"] > 0 and plain["dirtyBytes"] == 0

    table_only = _log_dirs(cluster, "--topic", "table")
    assert table_only.returncode == 0, table_only.stderr
    header, *rows = table_only.stdout.splitlines()
    assert header.split() == list(COLUMNS)
    [row] = rows
    assert row.split()[2:] == [
        "table-0",
        str(table["size"]),
        "0",
        str(table["dirtyBytes"]),
        "1.000",
        "0",
        "no",
        "-",
    ]


def test_log_dirs_describe_fails_for_a_node_that_does_not_answer() -> None:
    done = subprocess.run(
        [BROOK, "log-dirs", "describe", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "500"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 1
    assert "127.0.0.1:1" in done.stderr


def test_log_dirs_describe_shows_a_compacted_log_shrinking_after_the_cleaner_ran(
    cluster_factory: ClusterFactory,
) -> None:
    """Needs clean_log."""
    cluster = _start(
        cluster_factory,
        **{"log.cleaner.backoff.ms": "100", "log.cleaner.min.cleanable.ratio": "0.1"},
    )
    # The cleaner may run while the updates go in: what it must beat is what was written.
    written = _produce_updates(cluster, "table", 40, keys=4)
    deadline = time.monotonic() + CLEAN_WAIT_S
    after = _partitions(cluster)["table-0"]
    while after["lastCleanedMs"] is None:
        assert time.monotonic() < deadline, f"never cleaned: {after}"
        time.sleep(0.1)
        after = _partitions(cluster)["table-0"]
    assert after["size"] < written
    assert after["cleanBytes"] > 0 and after["firstDirtyOffset"] > 0
    # Never cleaned, the ratio is 1.0 (the test above).
    assert after["dirtyRatio"] < 1.0
    assert after["uncleanable"] is False
