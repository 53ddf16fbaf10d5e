"""What the Spark read tests share: a cluster for them, topics, records written with the SDK
(and where they landed), and reads through ``format("brook")``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import pytest
from brook_topics import storage_bootstrap
from cluster_fixture import one_node_transactions_cluster
from pyspark.sql import DataFrame, SparkSession

from brook.client import Admin, Producer
from brook.client.types import RecordMetadata
from brook.launcher import LocalCluster

CLIENT_TIMEOUT_S: Final = 30.0
# (key, value, topic, partition, offset, timestamp ms, timestampType, headers)
Row = tuple[
    bytes | None, bytes | None, str, int, int, int, int, tuple[tuple[str, bytes | None], ...]
]


@contextmanager
def read_cluster(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[LocalCluster]:
    """One controller, one storage node, two coordinators (transactions work)."""
    with one_node_transactions_cluster(tmp_path_factory, name) as cluster:
        yield cluster


def add_partitions(cluster: LocalCluster, topic: str, total: int) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_partitions({topic: total}) == {topic: None}


def write(
    cluster: LocalCluster,
    records: Sequence[dict[str, Any]],
    **settings: object,
) -> list[Row]:
    """``records`` (Producer.send's keyword arguments, ``topic`` among them) sent and flushed
    by one producer of ``settings``; each as the row a read must return for it."""
    config: dict[str, object] = {"bootstrap.servers": storage_bootstrap(cluster), "linger.ms": 5}
    config.update({k.replace("_", "."): v for k, v in settings.items()})
    with Producer(config) as producer:
        futures = [producer.send(**record) for record in records]
        producer.flush(CLIENT_TIMEOUT_S)
        landed: list[RecordMetadata] = [f.result(CLIENT_TIMEOUT_S) for f in futures]
    return [
        (
            record.get("key"),
            record.get("value"),
            meta.topic,
            meta.partition,
            meta.offset,
            meta.timestamp,
            0,
            tuple(record.get("headers") or ()),
        )
        for record, meta in zip(records, landed, strict=True)
    ]


def reader(spark: SparkSession, cluster: LocalCluster, **options: str) -> Any:
    read = spark.read.format("brook").option("kafka.bootstrap.servers", storage_bootstrap(cluster))
    return read.options(**options)


def rows(frame: DataFrame) -> list[Row]:
    """The rows of a read, in the form ``write`` returns (headers when the read has them)."""
    result = []
    for row in frame.collect():
        headers = row["headers"] if "headers" in row else None
        result.append(
            (
                None if row["key"] is None else bytes(row["key"]),
                None if row["value"] is None else bytes(row["value"]),
                row["topic"],
                row["partition"],
                row["offset"],
                round(row["timestamp"].timestamp() * 1000),
                row["timestampType"],
                tuple(
                    (h["key"], None if h["value"] is None else bytes(h["value"]))
                    for h in headers or ()
                ),
            )
        )
    return sorted(result, key=lambda r: (r[2], r[3], r[4]))
