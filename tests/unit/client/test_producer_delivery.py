"""The producer delivers, retries without reordering, and bounds every wait (against the
storage double, which can fail on demand)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from client_test_support import client_threads
from storage_double import RunningDouble, answer_all

from brook.client import (
    ApiError,
    AsyncProducer,
    ClientClosedError,
    ClientTimeoutError,
    Producer,
    RecordFuture,
    UnknownTopicOrPartitionError,
)
from brook.errors import ErrorCode
from brook.record import iter_records, scan_batches

# Settings that keep failing tests short: every bound a few hundred ms.
FAST = {
    "linger.ms": 5,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "request.timeout.ms": 2000,
    "delivery.timeout.ms": 5000,
    "max.block.ms": 2000,
}
RESULT_TIMEOUT_S = 10.0


@pytest.fixture
def producer(double: RunningDouble) -> Iterator[Producer]:
    with Producer({"bootstrap.servers": double.address, **FAST}) as producer:
        yield producer


def _values_in(records: bytes) -> list[bytes | None]:
    return [r.value for pos, _ in scan_batches(records) for r in iter_records(records, pos)]


def test_records_are_acknowledged_at_consecutive_offsets_in_send_order(
    double: RunningDouble, producer: Producer
) -> None:
    futures = [
        producer.send("events", b"%d" % i, key=b"key-%d" % (i % 7), headers=[("n", b"%d" % i)])
        for i in range(3000)
    ]
    producer.flush(RESULT_TIMEOUT_S)

    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for index, future in enumerate(futures):
        metadata = future.result(0)
        by_partition.setdefault(metadata.partition, []).append((metadata.offset, b"%d" % index))
    for partition, acknowledged in by_partition.items():
        stored = double.call(lambda p=partition: double.double.records("events", p))
        assert [offset for offset, _ in acknowledged] == list(range(len(acknowledged)))
        assert [(offset, value) for offset, _, value in stored] == acknowledged


def test_retriable_errors_are_retried_without_reordering_a_partition(
    double: RunningDouble, producer: Producer
) -> None:
    calls = 0

    async def every_other_request_fails(request: Any, context: Any) -> Any:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)  # newer batches queue up behind the request meanwhile
        if calls % 2:
            return answer_all(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return None

    double.double.faults["Produce"] = every_other_request_fails
    futures = []
    for i in range(2000):
        futures.append(producer.send("single", b"%05d" % i))
        if i % 200 == 0:
            time.sleep(0.01)  # let several requests go out while others are retried
    producer.flush(RESULT_TIMEOUT_S)

    offsets = [future.result(0).offset for future in futures]
    stored = [value for _, _, value in double.call(lambda: double.double.records("single", 0))]
    assert calls > 2
    assert offsets == list(range(2000))
    assert stored == [b"%05d" % i for i in range(2000)]


def test_a_partition_never_has_two_produce_requests_in_flight(double: RunningDouble) -> None:
    in_flight: set[tuple[str, int]] = set()
    overlaps: list[tuple[str, int]] = []

    async def slow_node(request: Any, context: Any) -> Any:
        partitions = {(p.topic, p.partition) for p in request.partitions}
        overlaps.extend(partitions & in_flight)
        in_flight.update(partitions)
        await asyncio.sleep(0.03)
        in_flight.difference_update(partitions)
        return None

    double.double.faults["Produce"] = slow_node
    # Small requests, so that many go out and several are in flight to the node at once.
    settings = {**FAST, "max.request.size": 20_000}
    with Producer({"bootstrap.servers": double.address, **settings}) as producer:
        for i in range(3000):
            producer.send("events", b"%100d" % i, partition=i % 3)
            if i % 300 == 0:
                time.sleep(0.01)  # new batches become ready while requests are in flight
        producer.flush(RESULT_TIMEOUT_S)

    assert overlaps == []
    assert double.double.calls["Produce"] > 5


def test_transport_failures_are_retried(double: RunningDouble, producer: Producer) -> None:
    failed = False

    async def unavailable_once(request: Any, context: Any) -> Any:
        nonlocal failed
        if not failed:
            failed = True
            await context.abort(grpc.StatusCode.UNAVAILABLE, "node restarting")
        return None

    double.double.faults["Produce"] = unavailable_once

    metadata = producer.send("single", b"v").result(RESULT_TIMEOUT_S)

    assert failed
    assert metadata.offset == 0


def test_records_fail_with_a_timeout_once_delivery_timeout_passes(
    double: RunningDouble,
) -> None:
    async def never_leader(request: Any, context: Any) -> Any:
        return answer_all(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    double.double.faults["Produce"] = never_leader
    settings = {**FAST, "delivery.timeout.ms": 600, "request.timeout.ms": 500}
    with Producer({"bootstrap.servers": double.address, **settings}) as producer:
        started = time.monotonic()
        future = producer.send("single", b"v")

        with pytest.raises(ClientTimeoutError, match=r"delivery\.timeout\.ms=600"):
            future.result(RESULT_TIMEOUT_S)
        elapsed = time.monotonic() - started

    assert 0.5 < elapsed < 3.0
    assert double.double.calls["Produce"] > 1


def test_non_retriable_errors_fail_the_records_with_the_nodes_code(
    double: RunningDouble, producer: Producer
) -> None:
    async def rejects(request: Any, context: Any) -> Any:
        return answer_all(request, ErrorCode.INVALID_RECORD)

    double.double.faults["Produce"] = rejects

    with pytest.raises(ApiError) as raised:
        producer.send("single", b"v").result(RESULT_TIMEOUT_S)

    assert raised.value.code is ErrorCode.INVALID_RECORD
    assert double.double.calls["Produce"] == 1


def test_a_rejected_partition_is_resent_batch_by_batch_so_only_the_bad_batch_fails(
    double: RunningDouble,
) -> None:
    async def rejects_poison(request: Any, context: Any) -> Any:
        if any(b"poison" in _values_in(p.records) for p in request.partitions):
            return answer_all(request, ErrorCode.INVALID_RECORD)
        return None

    double.double.faults["Produce"] = rejects_poison
    settings = {**FAST, "linger.ms": 60_000, "delivery.timeout.ms": 90_000, "batch.size": 0}
    with Producer({"bootstrap.servers": double.address, **settings}) as producer:
        futures = [producer.send("single", value) for value in (b"a", b"poison", b"b")]
        producer.flush(RESULT_TIMEOUT_S)

    first_request = double.double.produced[0].partitions[0].records
    assert _values_in(first_request) == [b"a", b"poison", b"b"]
    assert futures[0].result(0).offset == 0
    with pytest.raises(ApiError):
        futures[1].result(0)
    assert futures[2].result(0).offset == 1


def test_an_unknown_topic_fails_the_future_after_max_block_ms(double: RunningDouble) -> None:
    with Producer({"bootstrap.servers": double.address, **FAST, "max.block.ms": 300}) as producer:
        started = time.monotonic()
        future = producer.send("no-such-topic", b"v")
        elapsed = time.monotonic() - started

        with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
            future.result(0)

    assert 0.25 < elapsed < 3.0


def test_a_partition_beyond_the_topics_count_fails_after_max_block_ms(
    double: RunningDouble,
) -> None:
    with Producer({"bootstrap.servers": double.address, **FAST, "max.block.ms": 200}) as producer:
        future = producer.send("events", b"v", partition=3)

        with pytest.raises(UnknownTopicOrPartitionError, match="partition 3 of topic 'events'"):
            future.result(0)


def test_send_blocks_while_buffer_memory_is_full_then_raises_after_max_block_ms(
    double: RunningDouble,
) -> None:
    release = asyncio.Event()

    async def stalls(request: Any, context: Any) -> Any:
        await release.wait()
        return None

    double.double.faults["Produce"] = stalls
    settings = {**FAST, "buffer.memory": 64 * 1024, "max.block.ms": 300, "batch.size": 16384}
    with Producer({"bootstrap.servers": double.address, **settings}) as producer:
        started = time.monotonic()
        with pytest.raises(ClientTimeoutError, match=r"buffer\.memory"):
            for _ in range(10_000):
                producer.send("single", b"x" * 1000)
        blocked = time.monotonic() - started
        double.call(release.set)

    assert blocked >= 0.3


def test_send_resumes_when_acknowledgements_free_buffer_memory(double: RunningDouble) -> None:
    settings = {**FAST, "buffer.memory": 64 * 1024, "batch.size": 16384}
    with Producer({"bootstrap.servers": double.address, **settings}) as producer:
        futures = [producer.send("single", b"x" * 1000) for _ in range(500)]
        producer.flush(RESULT_TIMEOUT_S)

    assert [f.result(0).offset for f in futures] == list(range(500))


def test_close_delivers_pending_records_and_releases_every_thread(double: RunningDouble) -> None:
    before = set(threading.enumerate())
    settings = {**FAST, "linger.ms": 60_000, "delivery.timeout.ms": 90_000}
    producer = Producer({"bootstrap.servers": double.address, **settings})
    future = producer.send("single", b"v")

    producer.close()

    assert future.result(0).offset == 0
    assert client_threads(before) == []
    with pytest.raises(ClientClosedError):
        producer.send("single", b"late")


def test_close_with_zero_timeout_fails_what_is_not_acknowledged(double: RunningDouble) -> None:
    release = asyncio.Event()

    async def stalls(request: Any, context: Any) -> Any:
        await release.wait()
        return None

    double.double.faults["Produce"] = stalls
    before = set(threading.enumerate())
    producer = Producer({"bootstrap.servers": double.address, **FAST, "linger.ms": 0})
    sent = producer.send("single", b"in a request")
    while double.double.calls.get("Produce", 0) == 0:
        time.sleep(0.01)
    queued = producer.send("single", b"queued")

    producer.close(timeout=0)
    double.call(release.set)

    for future in (sent, queued):
        with pytest.raises(ClientClosedError):
            future.result(0)
    assert client_threads(before) == []


def test_async_producer_delivers_on_the_applications_loop(double: RunningDouble) -> None:
    async def produce() -> list[int]:
        async with AsyncProducer(bootstrap_servers=double.address, **FAST) as producer:
            futures: list[RecordFuture] = [
                await producer.send("single", b"%d" % i) for i in range(100)
            ]
            await producer.flush(RESULT_TIMEOUT_S)
            last = await producer.send_and_wait("single", b"last")
            return [(await f).offset for f in futures] + [last.offset]

    before = set(threading.enumerate())

    assert asyncio.run(produce()) == list(range(101))
    assert client_threads(before) == []


def test_async_send_waits_for_metadata_without_blocking_the_loop(double: RunningDouble) -> None:
    async def produce() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        try:
            settings = {**FAST, "bootstrap.servers": double.address, "max.block.ms": 300}
            async with AsyncProducer(settings) as producer:
                future = await producer.send("no-such-topic", b"v")
                with pytest.raises(UnknownTopicOrPartitionError):
                    await future
        finally:
            task.cancel()
        return ticks, 0

    ticks, _ = asyncio.run(produce())

    assert ticks > 20
