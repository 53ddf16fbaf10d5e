"""The consumer reads every record once and in order, prefetches, verifies, and resets as
Kafka's does (against the storage double, which can fail and corrupt on demand)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from client_test_support import client_threads
from storage_double import RunningDouble, corrupt_first_record

from brook.client import (
    ApiError,
    AsyncConsumer,
    BrookClientError,
    ClientClosedError,
    Consumer,
    ConsumerRecord,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    TopicPartition,
)
from brook.errors import ErrorCode
from brook.record import TimestampType, build_batch
from brook.v1 import storage_pb2

BASE_MS = 1_700_000_000_000
FAST = {
    "fetch.max.wait.ms": 100,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "request.timeout.ms": 2000,
    "default.api.timeout.ms": 5000,
}
POLL_TIMEOUT_S = 5.0
SINGLE = TopicPartition("single", 0)


def _append(double: RunningDouble, tp: TopicPartition, records: list[bytes], start_ms: int) -> None:
    """One batch of ``records`` (values; key = value, timestamp start_ms + index)."""
    batch = build_batch(
        [(start_ms + i, value, value, [("i", b"%d" % i)]) for i, value in enumerate(records)]
    )
    double.call(lambda: double.double.append(tp.topic, tp.partition, batch))


def _fill(double: RunningDouble, tp: TopicPartition, count: int, per_batch: int = 10) -> None:
    for start in range(0, count, per_batch):
        values = [b"%d" % i for i in range(start, min(start + per_batch, count))]
        _append(double, tp, values, BASE_MS + start)


def _poll_until(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(0.5)
    return records


@pytest.fixture
def consumer(double: RunningDouble) -> Iterator[Consumer]:
    settings = {"bootstrap.servers": double.address, "auto.offset.reset": "earliest", **FAST}
    with Consumer(settings) as consumer:
        yield consumer


def test_every_record_is_read_once_in_order_with_its_fields(
    double: RunningDouble, consumer: Consumer
) -> None:
    partitions = [TopicPartition("events", p) for p in range(3)]
    for tp in partitions:
        _fill(double, tp, 250)
    consumer.assign(partitions)

    records = _poll_until(consumer, 750)

    assert len(records) == 750
    for tp in partitions:
        mine = [r for r in records if (r.topic, r.partition) == tp]
        assert [r.offset for r in mine] == list(range(250))
        assert [r.value for r in mine] == [b"%d" % i for i in range(250)]
        assert all(r.key == r.value for r in mine)
        assert [r.timestamp for r in mine] == [BASE_MS + i for i in range(250)]
        assert mine[3].headers == (("i", b"3"),)
        assert mine[0].timestamp_type is TimestampType.CREATE_TIME
    assert consumer.poll(0.2) == []


def test_poll_returns_at_most_max_poll_records(double: RunningDouble) -> None:
    _fill(double, SINGLE, 100)
    settings = {"bootstrap.servers": double.address, "auto.offset.reset": "earliest", **FAST}
    with Consumer(settings, max_poll_records=7) as consumer:
        consumer.assign([SINGLE])
        sizes = []
        while sum(sizes) < 100:
            sizes.append(len(consumer.poll(POLL_TIMEOUT_S)))

    assert max(sizes) == 7


def test_latest_reset_starts_after_the_existing_records(double: RunningDouble) -> None:
    _fill(double, SINGLE, 30)
    with Consumer({"bootstrap.servers": double.address, **FAST}) as consumer:
        consumer.assign([SINGLE])
        assert consumer.position(SINGLE) == 30
        _append(double, SINGLE, [b"new"], BASE_MS)

        records = _poll_until(consumer, 1)

    assert [(r.offset, r.value) for r in records] == [(30, b"new")]


def test_seek_into_a_batch_skips_the_records_before_the_offset(
    double: RunningDouble, consumer: Consumer
) -> None:
    _fill(double, SINGLE, 40, per_batch=10)
    consumer.assign([SINGLE])

    consumer.seek(SINGLE, 25)
    records = _poll_until(consumer, 15)

    assert [r.offset for r in records] == list(range(25, 40))
    assert consumer.position(SINGLE) == 40


def test_seek_discards_what_was_prefetched_for_the_old_position(
    double: RunningDouble, consumer: Consumer
) -> None:
    _fill(double, SINGLE, 40)
    consumer.assign([SINGLE])
    first = _poll_until(consumer, 1)

    consumer.seek(SINGLE, 5)
    again = _poll_until(consumer, 35)

    assert first[0].offset == 0
    assert [r.offset for r in again] == list(range(5, 40))


def test_seek_to_beginning_and_end_move_to_the_logs_edges(
    double: RunningDouble, consumer: Consumer
) -> None:
    _fill(double, SINGLE, 20)
    consumer.assign([SINGLE])

    consumer.seek_to_end()
    at_end = consumer.position(SINGLE)
    consumer.seek_to_beginning([SINGLE])
    at_beginning = consumer.position(SINGLE)

    assert (at_end, at_beginning) == (20, 0)
    assert consumer.beginning_offsets([SINGLE]) == {SINGLE: 0}
    assert consumer.end_offsets([SINGLE]) == {SINGLE: 20}


def test_offsets_for_times_finds_the_first_record_at_or_after_each_timestamp(
    double: RunningDouble, consumer: Consumer
) -> None:
    _fill(double, SINGLE, 20)
    later = TopicPartition("events", 0)

    found = consumer.offsets_for_times({SINGLE: BASE_MS + 7, later: BASE_MS})

    assert found[SINGLE] is not None
    assert (found[SINGLE].offset, found[SINGLE].timestamp) == (7, BASE_MS + 7)
    assert found[later] is None


def test_a_corrupt_batch_raises_and_the_position_stays_until_a_seek(
    double: RunningDouble, consumer: Consumer
) -> None:
    _fill(double, SINGLE, 10)
    _fill(double, SINGLE, 10)
    stored = double.double.partitions[SINGLE].batches
    double.call(lambda: stored.__setitem__(1, corrupt_first_record(stored[1])))
    consumer.assign([SINGLE])

    good = _poll_until(consumer, 10)
    with pytest.raises(ApiError, match="CRC") as raised:
        for _ in range(10):
            consumer.poll(POLL_TIMEOUT_S)
    with pytest.raises(ApiError):
        consumer.poll(POLL_TIMEOUT_S)
    position = consumer.position(SINGLE)
    consumer.seek(SINGLE, 20)

    assert [r.offset for r in good] == list(range(10))
    assert raised.value.code is ErrorCode.CORRUPT_MESSAGE
    assert position == 10
    assert consumer.poll(0.2) == []


def test_check_crcs_false_hands_out_records_of_a_damaged_batch(double: RunningDouble) -> None:
    _fill(double, SINGLE, 10)
    stored = double.double.partitions[SINGLE].batches
    double.call(lambda: stored.__setitem__(0, corrupt_first_record(stored[0])))
    settings = {"bootstrap.servers": double.address, "auto.offset.reset": "earliest", **FAST}
    with Consumer(settings, check_crcs=False) as consumer:
        consumer.assign([SINGLE])

        records = _poll_until(consumer, 10)

    assert len(records) == 10


def test_an_out_of_range_position_resets_as_auto_offset_reset_says(
    double: RunningDouble, consumer: Consumer
) -> None:
    _fill(double, SINGLE, 10)
    consumer.assign([SINGLE])
    consumer.seek(SINGLE, 500)

    records = _poll_until(consumer, 10)

    assert [r.offset for r in records] == list(range(10))


def test_an_out_of_range_position_raises_until_a_seek_when_reset_is_none(
    double: RunningDouble,
) -> None:
    _fill(double, SINGLE, 10)
    settings = {"bootstrap.servers": double.address, "auto.offset.reset": "none", **FAST}
    with Consumer(settings) as consumer:
        consumer.assign([SINGLE])
        with pytest.raises(NoOffsetForPartitionError):
            consumer.poll(0.1)
        consumer.seek(SINGLE, 500)
        with pytest.raises(OffsetOutOfRangeError) as raised:
            for _ in range(20):
                consumer.poll(0.5)
        with pytest.raises(OffsetOutOfRangeError):
            consumer.poll(0.1)
        consumer.seek(SINGLE, 3)

        records = _poll_until(consumer, 7)

    assert raised.value.offsets == {SINGLE: 500}
    assert [r.offset for r in records] == list(range(3, 10))


def test_retriable_fetch_errors_are_retried(double: RunningDouble, consumer: Consumer) -> None:
    _fill(double, SINGLE, 10)
    failures = 0

    async def not_leader_twice(request: Any, context: Any) -> Any:
        nonlocal failures
        if failures < 2:
            failures += 1
            return storage_pb2.FetchResponse(
                partitions=[
                    storage_pb2.FetchPartitionResponse(
                        topic=p.topic,
                        partition=p.partition,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,  # type: ignore[arg-type]
                    )
                    for p in request.partitions
                ]
            )
        return None

    double.double.faults["Fetch"] = not_leader_twice
    consumer.assign([SINGLE])

    records = _poll_until(consumer, 10)

    assert failures == 2
    assert len(records) == 10


def test_the_next_fetch_is_in_flight_while_the_application_processes(
    double: RunningDouble,
) -> None:
    _fill(double, SINGLE, 10)
    settings = {
        "bootstrap.servers": double.address,
        "auto.offset.reset": "earliest",
        **FAST,
        "fetch.max.wait.ms": 5000,
        "request.timeout.ms": 10_000,
        # Two polls drain the fetched data: the last one must start the next fetch.
        "max.poll.records": 5,
    }
    with Consumer(settings) as consumer:
        consumer.assign([SINGLE])
        records = _poll_until(consumer, 5)
        time.sleep(0.1)  # meanwhile the fetcher sees the partition's data still buffered
        records += consumer.poll(POLL_TIMEOUT_S)
        time.sleep(0.2)  # the application is busy with them; nobody polls
        appended_at = time.monotonic()
        _append(double, SINGLE, [b"next"], BASE_MS)
        following = consumer.poll(POLL_TIMEOUT_S)
        returned_at = time.monotonic()

    assert len(records) == 10
    assert [r.value for r in following] == [b"next"]
    (delivering,) = [f for f in double.double.fetches if f[2] > 0 and f[1] >= appended_at]
    # The fetch that brought the new record was already waiting at the node while the
    # application was busy: poll did not start a round trip, it found the answer coming.
    assert delivering[0] < appended_at
    assert returned_at - appended_at < 2.0


def test_no_partition_is_fetched_again_while_its_records_are_buffered(
    double: RunningDouble,
) -> None:
    _fill(double, SINGLE, 100)
    settings = {"bootstrap.servers": double.address, "auto.offset.reset": "earliest", **FAST}
    with Consumer(settings, max_poll_records=1) as consumer:
        consumer.assign([SINGLE])
        _poll_until(consumer, 1)
        fetches = double.double.calls["Fetch"]
        time.sleep(0.3)

        assert double.double.calls["Fetch"] == fetches


def test_close_releases_every_thread(double: RunningDouble) -> None:
    before = set(threading.enumerate())
    consumer = Consumer(bootstrap_servers=double.address, **FAST)
    consumer.assign([SINGLE])
    consumer.poll(0.1)

    consumer.close()

    assert client_threads(before) == []
    with pytest.raises(ClientClosedError):
        consumer.poll(0)
    with pytest.raises(ClientClosedError):
        consumer.end_offsets([SINGLE])


def test_unassigned_partitions_are_refused() -> None:
    with Consumer(bootstrap_servers="127.0.0.1:1") as consumer:
        with pytest.raises(BrookClientError, match="assign"):
            consumer.poll(0)
        with pytest.raises(ValueError, match="not assigned"):
            consumer.seek(SINGLE, 0)
        with pytest.raises(TypeError, match="TopicPartition"):
            consumer.assign(["single"])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="offset must be an int >= 0"):
            consumer.assign([SINGLE])
            consumer.seek(SINGLE, -1)


def test_async_consumer_reads_on_the_applications_loop(double: RunningDouble) -> None:
    _fill(double, SINGLE, 30)

    async def consume() -> list[int]:
        settings = {"bootstrap.servers": double.address, **FAST}
        async with AsyncConsumer(settings) as consumer:
            consumer.assign([SINGLE])
            consumer.seek(SINGLE, 5)
            records: list[ConsumerRecord] = []
            while len(records) < 25:
                records += await consumer.poll(POLL_TIMEOUT_S)
            assert await consumer.position(SINGLE) == 30
            return [r.offset for r in records]

    before = set(threading.enumerate())

    assert asyncio.run(consume()) == list(range(5, 30))
    assert client_threads(before) == []
