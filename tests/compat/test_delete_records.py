"""DeleteRecords end to end: Kafka's DeleteRecords API through the gateway (confluent-kafka's
AdminClient.delete_records) and ``brook delete-records`` over gRPC. Each moves the log start
offset at the partition's leader, a consumer reading from the beginning no longer sees the
records below it, and a partition that cannot be deleted from gets its own error while the
others succeed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from brook_gateway.protocol.kafka_messages import ApiKey
from test_gateway_fuzz import kafka_gateways, kafka_request

from brook.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
CLIENT_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 60.0
RECORDS_PER_PARTITION = 10
EXIT_FAILED = 1


def _topic_with_records(cluster: LocalCluster, topic: str, partitions: int) -> None:
    """``topic`` with RECORDS_PER_PARTITION records in each partition (offsets 0..9)."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics([NewTopic(topic, partitions, 1)])
        assert created[topic] is None, created
    storage = cluster.bootstrap_servers(Role.STORAGE_NODE)
    with Producer(bootstrap_servers=storage) as producer:
        futures = [
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
            for p in range(partitions)
            for i in range(RECORDS_PER_PARTITION)
        ]
        for future in futures:
            future.result(CLIENT_TIMEOUT_S)


def _first_offsets(cluster: LocalCluster, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The log start offset of each partition, and the offset of the first record a consumer
    reading from the beginning gets: they must agree."""
    storage = cluster.bootstrap_servers(Role.STORAGE_NODE)
    with Consumer(bootstrap_servers=storage, auto_offset_reset="earliest") as consumer:
        starts = consumer.beginning_offsets(tps, timeout=CLIENT_TIMEOUT_S)
        firsts: dict[TopicPartition, int] = {}
        consumer.assign(tps)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(firsts) < len(tps) and time.monotonic() < deadline:
            for record in consumer.poll(timeout=0.5):
                firsts.setdefault(TopicPartition(record.topic, record.partition), record.offset)
    assert firsts == starts, f"first records read {firsts}, log start offsets {starts}"
    return starts


def test_confluent_admin_delete_records_moves_the_log_start_per_partition(
    compat_cluster: LocalCluster, bootstrap: str
) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient

    topic = "confluent-delete-records"
    _topic_with_records(compat_cluster, topic, 2)
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})

    # Partition 1: offset -1 deletes up to the high watermark.
    results = admin.delete_records(
        [KafkaPartition(topic, 0, 4), KafkaPartition(topic, 1, -1)],
        operation_timeout=CLIENT_TIMEOUT_S,
    )
    low = {tp.partition: f.result(CLIENT_TIMEOUT_S).low_watermark for tp, f in results.items()}
    assert low == {0: 4, 1: RECORDS_PER_PARTITION}
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    # Partition 1 is empty now: its first record would be the next one written.
    assert _first_offsets(compat_cluster, tps[:1]) == {tps[0]: 4}

    def error_of(future: Any) -> int:
        with pytest.raises(KafkaException) as raised:
            future.result(CLIENT_TIMEOUT_S)
        code: int = raised.value.args[0].code()
        return code

    beyond = admin.delete_records(
        [KafkaPartition(topic, 0, RECORDS_PER_PARTITION + 1)], operation_timeout=CLIENT_TIMEOUT_S
    )
    assert [error_of(f) for f in beyond.values()] == [KafkaError.OFFSET_OUT_OF_RANGE]
    # librdkafka refuses a partition its metadata lacks before sending: ask the gateway raw,
    # one request mixing a deletable partition with missing ones.
    gateways = kafka_gateways(compat_cluster)
    for version in (0, 2):
        response = kafka_request(
            gateways.address,
            ApiKey.DELETE_RECORDS,
            version,
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "offset": 4},
                            {"partition_index": 7, "offset": 1},
                        ],
                    },
                    {"name": "no-such-topic", "partitions": [{"partition_index": 0, "offset": 1}]},
                ],
                "timeout_ms": int(CLIENT_TIMEOUT_S * 1000),
            },
            CLIENT_TIMEOUT_S,
        )
        answers = {
            (t["name"], p["partition_index"]): (p["error_code"], p["low_watermark"])
            for t in response["topics"]
            for p in t["partitions"]
        }
        unknown = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1)
        assert answers == {(topic, 0): (0, 4), (topic, 7): unknown, ("no-such-topic", 0): unknown}
    assert _first_offsets(compat_cluster, tps[:1]) == {tps[0]: 4}, "refusals changed nothing"


def _brook_delete_records(
    cluster: LocalCluster, directory: Path, partitions: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """``brook delete-records`` given an offset JSON file naming ``partitions``."""
    offsets = directory / "offsets.json"
    offsets.write_text(json.dumps({"partitions": partitions, "version": 1}))
    return subprocess.run(
        [
            BROOK,
            "delete-records",
            "--bootstrap-server",
            cluster.controller_bootstrap_servers,
            "--offset-json-file",
            str(offsets),
        ],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def test_brook_delete_records_takes_kafkas_offset_json_and_prints_low_watermarks(
    compat_cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = "cli-delete-records"
    _topic_with_records(compat_cluster, topic, 2)
    done = _brook_delete_records(
        compat_cluster,
        tmp_path,
        [
            {"topic": topic, "partition": 0, "offset": 3},
            {"topic": topic, "partition": 1, "offset": 6},
        ],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [
        f"partition: {topic}-0\tlow_watermark: 3",
        f"partition: {topic}-1\tlow_watermark: 6",
    ]
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert _first_offsets(compat_cluster, tps) == {tps[0]: 3, tps[1]: 6}

    # One partition beyond its high watermark, one that does not exist: each its own error,
    # the first partition's deletion still done.
    failed = _brook_delete_records(
        compat_cluster,
        tmp_path,
        [
            {"topic": topic, "partition": 0, "offset": 5},
            {"topic": topic, "partition": 1, "offset": RECORDS_PER_PARTITION + 1},
            {"topic": topic, "partition": 9, "offset": 1},
        ],
    )
    assert failed.returncode == EXIT_FAILED, failed.stderr
    lines = failed.stdout.splitlines()[-3:]
    assert lines[0] == f"partition: {topic}-0\tlow_watermark: 5"
    assert lines[1].startswith(f"partition: {topic}-1\terror: OFFSET_OUT_OF_RANGE")
    assert lines[2].startswith(f"partition: {topic}-9\terror: UNKNOWN_TOPIC_OR_PARTITION")
    assert _first_offsets(compat_cluster, tps) == {tps[0]: 5, tps[1]: 6}
