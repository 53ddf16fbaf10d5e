"""The SDK against a real storage node: what is produced is consumed, once, in order.

One cluster (a controller and one storage node serving static topics) is shared by the tests
of this module, each working on a topic of its own; the restart test runs its own cluster.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_fixture import ClusterFactory

from brook.client import (
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerRecord,
    Producer,
    RecordFuture,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from brook.client.partitioner import partition_for_key
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

NODE = "storage-node-1"
# Each test owns its topics, so the shared cluster's tests do not see each other's records.
STATIC_TOPICS = (
    "orders:6",
    "keys:6",
    "codecs:4",
    "longpoll:1",
    "seeks:2",
    "asyncio:2",
    "durable:3",
)
RECORDS = 3000
RESULT_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 30.0
# Kafka's Java client puts these keys on these partitions of a 6-partition topic
# (worked out from the published murmur2 values in tests/unit/client/test_partitioner.py).
JAVA_CLIENT_PARTITIONS_OF_6 = {b"21": 0, b"foobar": 0, b"a-little-bit-long-string": 2, b"abc": 3}


def _storage_cluster(factory: ClusterFactory) -> LocalCluster:
    return factory(
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=0,
        config_overrides={NODE: {"static.topics": ",".join(STATIC_TOPICS)}},
    )


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of the shared cluster's storage node."""
    factory = ClusterFactory(Path(tmp_path_factory.mktemp("sdk")) / "clusters")
    failed = True
    try:
        cluster = _storage_cluster(factory)
        yield cluster.grpc_address(NODE)
        failed = False
    finally:
        if failed:
            for title, text in factory.log_sections():
                print(f"--- {title} ---\n{text}")
        factory.close(keep_files=failed)


def _consume(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(1.0)
    return records


def _by_partition(records: list[ConsumerRecord]) -> dict[int, list[ConsumerRecord]]:
    grouped: dict[int, list[ConsumerRecord]] = {}
    for record in records:
        grouped.setdefault(record.partition, []).append(record)
    return grouped


def test_records_with_keys_and_headers_are_consumed_exactly_once_in_order_per_partition(
    bootstrap: str,
) -> None:
    sent: dict[int, list[tuple[bytes, bytes, tuple[tuple[str, bytes | None], ...]]]] = {}
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        futures: list[
            tuple[RecordFuture, tuple[bytes, bytes, tuple[tuple[str, bytes | None], ...]]]
        ]
        futures = []
        for i in range(RECORDS):
            key, value = b"customer-%d" % (i % 97), b"order-%06d" % i
            headers = (("seq", b"%d" % i), ("trace", None))
            futures.append(
                (producer.send("orders", value, key=key, headers=headers), (key, value, headers))
            )
        producer.flush(RESULT_TIMEOUT_S)
        for future, record in futures:
            metadata = future.result(0)
            sent.setdefault(metadata.partition, []).append(record)
            assert metadata.offset == len(sent[metadata.partition]) - 1

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", p) for p in range(6)])
        received = _by_partition(_consume(consumer, RECORDS))
        assert consumer.poll(0.5) == []

    assert len(sent) > 1
    for partition, records in sent.items():
        got = received.get(partition, [])
        assert [r.offset for r in got] == list(range(len(records)))
        assert [(r.key, r.value, r.headers) for r in got] == records
    assert sum(len(records) for records in received.values()) == RECORDS


def test_keys_land_on_the_partition_kafkas_java_client_picks(bootstrap: str) -> None:
    with Producer(bootstrap_servers=bootstrap) as producer:
        placed = {
            key: producer.send("keys", b"v", key=key).result(RESULT_TIMEOUT_S).partition
            for key in JAVA_CLIENT_PARTITIONS_OF_6
        }

    assert placed == JAVA_CLIENT_PARTITIONS_OF_6
    assert all(partition_for_key(key, 6) == p for key, p in placed.items())


@pytest.mark.parametrize("codec", ["none", "lz4", "gzip", "snappy", "zstd"])
def test_every_compression_codec_round_trips_through_the_node(bootstrap: str, codec: str) -> None:
    values = [b"%s-%d " % (codec.encode(), i) * 5 for i in range(200)]
    with Producer(bootstrap_servers=bootstrap, compression_type=codec) as producer:
        futures = [producer.send("codecs", value, partition=0) for value in values]
        producer.flush(RESULT_TIMEOUT_S)
        first = futures[0].result(0).offset

    with Consumer(bootstrap_servers=bootstrap) as consumer:
        consumer.assign([TopicPartition("codecs", 0)])
        consumer.seek(TopicPartition("codecs", 0), first)
        got = _consume(consumer, len(values))

    assert [r.value for r in got[: len(values)]] == values


def test_a_waiting_poll_returns_promptly_when_a_record_arrives(bootstrap: str) -> None:
    tp = TopicPartition("longpoll", 0)
    settings = {"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 10_000}
    with Consumer(settings, request_timeout_ms=30_000) as consumer:
        consumer.assign([tp])
        assert consumer.poll(1.0) == []  # positioned at the end, long-poll at the node
        produced_at: list[float] = []

        def produce_later() -> None:
            time.sleep(0.5)
            with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
                producer.send("longpoll", b"wake up").result(RESULT_TIMEOUT_S)
                produced_at.append(time.monotonic())

        thread = threading.Thread(target=produce_later)
        thread.start()
        records = consumer.poll(15.0)
        returned_at = time.monotonic()
        thread.join()

    assert [r.value for r in records] == [b"wake up"]
    # Well before fetch.max.wait.ms: the node answered as the record landed.
    assert returned_at - produced_at[0] < 2.0


def test_positions_seeks_and_offset_lookups_agree_with_the_node(bootstrap: str) -> None:
    tp = TopicPartition("seeks", 1)
    base_ms = int(time.time() * 1000) - 100_000
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(50):
            producer.send("seeks", b"%d" % i, partition=1, timestamp=base_ms + i * 1000)
        producer.flush(RESULT_TIMEOUT_S)

    with Consumer(bootstrap_servers=bootstrap) as consumer:
        consumer.assign([tp])
        end = consumer.position(tp)
        consumer.seek_to_beginning()
        beginning = consumer.position(tp)
        found = consumer.offsets_for_times({tp: base_ms + 20_500})[tp]
        assert found is not None
        consumer.seek(tp, found.offset)
        tail = _consume(consumer, 29)

        assert (beginning, end) == (0, 50)
        assert consumer.end_offsets([tp]) == {tp: 50}
        assert (found.offset, found.timestamp) == (21, base_ms + 21_000)
        assert [r.value for r in tail] == [b"%d" % i for i in range(21, 50)]
        assert consumer.position(tp) == 50


def test_sending_to_an_unknown_topic_fails_with_unknown_topic_or_partition(bootstrap: str) -> None:
    with Producer(bootstrap_servers=bootstrap, max_block_ms=1000) as producer:
        future = producer.send("no-such-topic", b"v")

        with pytest.raises(UnknownTopicOrPartitionError):
            future.result(RESULT_TIMEOUT_S)


def test_the_asyncio_clients_round_trip(bootstrap: str) -> None:
    async def round_trip() -> list[bytes | None]:
        async with AsyncProducer(bootstrap_servers=bootstrap) as producer:
            futures = [await producer.send("asyncio", b"%d" % i, partition=0) for i in range(100)]
            await producer.flush(RESULT_TIMEOUT_S)
            first = (await futures[0]).offset
        async with AsyncConsumer(bootstrap_servers=bootstrap) as consumer:
            tp = TopicPartition("asyncio", 0)
            consumer.assign([tp])
            consumer.seek(tp, first)
            records: list[ConsumerRecord] = []
            async with asyncio.timeout(CONSUME_TIMEOUT_S):
                while len(records) < 100:
                    records += await consumer.poll(1.0)
            return [r.value for r in records]

    assert asyncio.run(round_trip()) == [b"%d" % i for i in range(100)]


def test_every_acknowledged_record_survives_a_kill_and_restart_of_the_node(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = _storage_cluster(cluster_factory)
    bootstrap = cluster.grpc_address(NODE)
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = [producer.send("durable", b"%d" % i, key=b"%d" % i) for i in range(RECORDS)]
        producer.flush(RESULT_TIMEOUT_S)
        acknowledged = {
            (f.result(0).partition, f.result(0).offset): b"%d" % i for i, f in enumerate(futures)
        }

    cluster.kill(NODE, signal.SIGKILL)
    cluster.wait(NODE, timeout_ms=10_000)
    cluster_factory.start(cluster, NODE)

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("durable", p) for p in range(3)])
        records = _consume(consumer, RECORDS)

    assert {(r.partition, r.offset): r.value for r in records} == acknowledged
    assert len(records) == RECORDS
