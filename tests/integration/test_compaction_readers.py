"""Every Brook reader on a compacted partition served by a real storage node (issue #18):
offsets missing between batches and inside them, batches with no record left, a committed
transaction whose marker is kept. The SDK consumer (both isolation levels, one record per
poll, seeks into gaps), the console consumer, the group lag, Spark's range reader and a Kafka
client through the gateway each read exactly the kept records, at their offsets, and reach
the log's end.

The partition's log is written as the cleaner leaves it (``tests/compacted_batches.py``), with
the node stopped, through the log's follower-append path; the node then serves it as any
other. One cluster serves the module.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from brook_storage_node.log import LogConfig, PartitionLog
from cluster_fixture import one_node_transactions_cluster, wait_until
from compacted_batches import compacted_batch

from brook.client import Admin, Consumer, NewTopic, OffsetAndMetadata, TopicPartition
from brook.launcher import LocalCluster
from brook.record import ControlType, build_control_batch

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
NODE = "storage-node-1"
TOPIC = "compacted"
TP = TopicPartition(TOPIC, 0)
T0 = 1_700_000_000_000
IDEMPOTENT = 400
TRANSACTIONAL = 500
# (offset, key, value) of every record the log keeps; the log ends at 22.
KEPT = [
    (1, b"a", b"a1"),
    (3, b"b", b"b3"),
    (10, b"c", b"c10"),
    (13, b"a", b"a13"),
    (15, b"d", b"d15"),
]
LOG_END = 22
TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0


def compacted_log() -> list[bytes]:
    """[0, 4] keeps 1 and 3; [5, 7] is empty (an idempotent producer's, kept for its
    sequence); 8-9 are gone; [10, 13] keeps 10 and 13; [14, 16], a committed transaction,
    keeps 15; its COMMIT marker is at 17; [18, 21], the idempotent producer's last batch, is
    empty."""

    def kept(*offsets: int, base: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
        by_offset = {offset: (key, value) for offset, key, value in KEPT}
        return [(o - base, T0 + o, *by_offset[o]) for o in offsets]

    return [
        compacted_batch(kept(1, 3, base=0), base_offset=0, last_offset_delta=4),
        compacted_batch(
            [],
            base_offset=5,
            last_offset_delta=2,
            producer_id=IDEMPOTENT,
            producer_epoch=0,
            base_sequence=0,
        ),
        compacted_batch(kept(10, 13, base=10), base_offset=10, last_offset_delta=3),
        compacted_batch(
            kept(15, base=14),
            base_offset=14,
            last_offset_delta=2,
            producer_id=TRANSACTIONAL,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        build_control_batch(
            ControlType.COMMIT,
            producer_id=TRANSACTIONAL,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=T0 + 17,
            base_offset=17,
            partition_leader_epoch=0,
        ),
        compacted_batch(
            [],
            base_offset=18,
            last_offset_delta=3,
            producer_id=IDEMPOTENT,
            producer_epoch=0,
            base_sequence=3,
        ),
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One controller, storage node and gateway, two coordinators; TOPIC's only partition
    holds ``compacted_log()``."""
    with one_node_transactions_cluster(
        tmp_path_factory,
        "compaction-readers",
        group_coordinator={"group.initial.rebalance.delay.ms": "0"},
        gateways=1,
    ) as running:
        with Admin(running.controller_bootstrap_servers) as admin:
            created = admin.create_topics(
                [NewTopic(TOPIC, 1, 1, configs={"cleanup.policy": "compact"})]
            )
            assert created == {TOPIC: None}
        directory = running.spec(NODE).directory / "data" / f"{TOPIC}-0"
        wait_until(directory.exists, "the partition's directory", TIMEOUT_S)
        running.stop(NODE)
        log = PartitionLog.open(directory, LogConfig())
        try:
            assert log.log_end_offset == 0
            for batch in compacted_log():
                log.append_as_follower(batch)
            log.flush()
        finally:
            log.close()
        running.start(NODE)
        yield running


@pytest.fixture(scope="module")
def bootstrap(cluster: LocalCluster) -> str:
    address = cluster.grpc_address(NODE)
    with Consumer(bootstrap_servers=address) as consumer:
        wait_until(
            lambda: consumer.end_offsets([TP], TIMEOUT_S)[TP] == LOG_END,
            "the node to serve the log to its end",
            TIMEOUT_S,
        )
    return address


def _read(
    consumer: Consumer, start: int
) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
    """Records from ``start`` until the position reaches the log end, and that position."""
    consumer.assign([TP])
    consumer.seek(TP, start)
    found: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while consumer.position(TP, TIMEOUT_S) < LOG_END:
        assert time.monotonic() < deadline, f"stuck at {consumer.position(TP, TIMEOUT_S)}"
        found += [(r.offset, r.key, r.value) for r in consumer.poll(0.5)]
    return found, consumer.position(TP, TIMEOUT_S)


@pytest.mark.parametrize("isolation_level", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("max_poll_records", [1, 500])
def test_the_sdk_consumer_reads_the_kept_records_to_the_end(
    bootstrap: str, isolation_level: str, max_poll_records: int
) -> None:
    with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        max_poll_records=max_poll_records,
    ) as consumer:
        found, position = _read(consumer, 0)

    assert found == KEPT
    assert position == LOG_END


@pytest.mark.parametrize(("start", "first"), [(2, 3), (4, 10), (6, 10), (8, 10), (16, None)])
def test_a_position_inside_a_gap_reads_from_the_next_kept_record(
    bootstrap: str, start: int, first: int | None
) -> None:
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        found, position = _read(consumer, start)

    assert found == [record for record in KEPT if record[0] >= start]
    assert (found[0][0] if found else None) == first
    assert position == LOG_END


def test_the_console_consumer_prints_the_kept_records_and_ends(bootstrap: str) -> None:
    printed = subprocess.run(
        [
            BROOK,
            "console-consumer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            TOPIC,
            "--from-beginning",
            "--timeout-ms",
            "3000",
            *("--property", "print.offset=true", "--property", "print.key=true"),
        ],
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )

    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.decode().splitlines()
    assert [line.split("\t") for line in lines] == [
        [f"Offset:{offset}", key.decode(), value.decode()] for offset, key, value in KEPT
    ]


def test_group_lag_is_the_log_end_minus_the_committed_offset(cluster: LocalCluster) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        # A committed offset inside a gap, as a consumer that read up to offset 7 commits it.
        assert admin.alter_consumer_group_offsets("lagging", {TP: OffsetAndMetadata(8)}) == {
            TP: None
        }
        lag = admin.describe_consumer_group_lag("lagging")[TP]

    assert (lag.committed_offset, lag.log_end_offset, lag.lag) == (8, LOG_END, LOG_END - 8)


@pytest.mark.parametrize(("start", "end"), [(0, LOG_END), (0, 9), (2, 8), (11, 15), (16, LOG_END)])
def test_a_spark_range_holds_the_kept_records_and_ends_inside_gaps(
    bootstrap: str, start: int, end: int
) -> None:
    from brook.spark.offset_ranges import OffsetRange, read_range
    from brook.spark.read_options import parse_read_options

    options = parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False
    )

    batches = list(read_range(options, OffsetRange(TOPIC, 0, start, end)))

    rows = [
        (offset, key, value)
        for batch in batches
        for offset, key, value in zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            strict=True,
        )
    ]
    assert rows == [record for record in KEPT if start <= record[0] < end]


def test_a_kafka_client_through_the_gateway_reads_the_kept_records(cluster: LocalCluster) -> None:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaPartition

    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": "compaction-readers",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        assert consumer.get_watermark_offsets(KafkaPartition(TOPIC, 0), timeout=TIMEOUT_S) == (
            0,
            LOG_END,
        )
        found = consumer.offsets_for_times([KafkaPartition(TOPIC, 0, T0 + 5)], timeout=TIMEOUT_S)
        assert found[0].offset == 10  # the first kept record at or after the timestamp
        consumer.assign([KafkaPartition(TOPIC, 0, OFFSET_BEGINNING)])
        records: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT_S
        # librdkafka's position is the last record handed out + 1 (not the fetch position,
        # as Kafka's Java consumer reports): read until every record came, then a while
        # longer, in which nothing more (no record twice) may come.
        quiet_until = None
        while quiet_until is None or time.monotonic() < quiet_until:
            assert time.monotonic() < deadline, f"read only {records}"
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                records.append((message.offset(), message.key(), message.value()))
            if quiet_until is None and len(records) >= len(KEPT):
                quiet_until = time.monotonic() + 1.0
    finally:
        consumer.close()

    assert records == KEPT
