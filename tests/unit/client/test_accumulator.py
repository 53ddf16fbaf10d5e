"""Records become RecordBatch v2 batches per partition; batches become ready as Kafka's do."""

from __future__ import annotations

import asyncio
import threading

import pytest
from client_test_support import TOPIC, all_drained, make_accumulator, static_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.client.accumulator import NeedMemory, NeedMetadata, RecordFuture, encode_varint
from brook.client.errors import ClientTimeoutError, RecordTooLargeError
from brook.client.runtime import Notifier
from brook.record import (
    BATCH_OVERHEAD,
    BatchBuilder,
    Compression,
    iter_records,
    scan_batches,
    validate_batches,
)
from brook.record.varint import write_varlong

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
BASE_MS = 1_700_000_000_000

records_strategy = st.lists(
    st.tuples(
        st.integers(BASE_MS - 10_000, BASE_MS + 10_000),
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300), st.just(b"v" * 5000)),
        st.lists(
            st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=30,
)


def _one_partition_batches(records: list[Record], compression: Compression) -> list[bytes]:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=1 << 20, compression=compression)
    for timestamp, key, value, headers in records:
        accumulator.append(TOPIC, value, key, headers, 0, timestamp)
    return [batch for _, batches in all_drained(accumulator, cluster) for batch in batches]


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from(list(Compression)))
def test_batches_are_byte_identical_to_the_codecs_batch_builder(
    records: list[Record], compression: Compression
) -> None:
    builder = BatchBuilder(compression)
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)

    assert _one_partition_batches(records, compression) == [builder.build()]


@settings(max_examples=40, deadline=None)
@given(records_strategy)
def test_sealed_batches_pass_validation_and_decode_to_the_records_sent(
    records: list[Record],
) -> None:
    (batch,) = _one_partition_batches(records, Compression.LZ4)

    validate_batches(batch, max_batch_bytes=len(batch))
    decoded = list(iter_records(batch))
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == [
        (timestamp, key, value, [(k, v) for k, v in headers])
        for timestamp, key, value, headers in records
    ]
    assert [r.offset for r in decoded] == list(range(len(records)))


@pytest.mark.parametrize("value", [-1, 0, 1, 63, 64, 4095, 4096, 2**31, -(2**40), 2**63 - 1])
def test_varints_match_the_codecs_encoding(value: int) -> None:
    expected = bytearray()
    write_varlong(value, expected)

    assert encode_varint(value) == bytes(expected)


def test_batches_are_cut_at_batch_size() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=4096)
    for _ in range(200):
        accumulator.append(TOPIC, b"x" * 100, None, None, 0, None)

    batches = [batch for _, sealed in all_drained(accumulator, cluster) for batch in sealed]

    assert len(batches) > 1
    assert all(len(batch) <= 4096 for batch in batches)
    # Full: one more record would not have fitted.
    assert all(len(batch) + 100 > 4096 for batch in batches[:-1])
    assert sum(header.records_count for b in batches for _, header in scan_batches(b)) == 200


def test_a_record_larger_than_batch_size_travels_in_a_batch_of_its_own() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=1024)
    accumulator.append(TOPIC, b"small", None, None, 0, None)
    accumulator.append(TOPIC, b"L" * 5000, None, None, 0, None)
    accumulator.append(TOPIC, b"small", None, None, 0, None)

    batches = [batch for _, sealed in all_drained(accumulator, cluster) for batch in sealed]

    counts = [[r.value for r in iter_records(batch)] for batch in batches]
    assert counts == [[b"small"], [b"L" * 5000], [b"small"]]


def test_a_record_over_max_request_size_raises_at_send_and_queues_nothing() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, max_request_size=10_000)

    with pytest.raises(RecordTooLargeError, match=r"max\.request\.size") as raised:
        accumulator.append(TOPIC, b"x" * 10_000, None, None, 0, None)

    assert raised.value.code.name == "MESSAGE_TOO_LARGE"
    assert list(all_drained(accumulator, cluster)) == []
    assert accumulator.incomplete_count == 0


@pytest.mark.parametrize(
    ("value", "key", "headers", "timestamp", "error"),
    [
        ("text", None, None, None, "encode it first"),
        (b"v", 42, None, None, "record key must be bytes"),
        (b"v", None, [("h", "text")], None, "header 'h' value must be bytes"),
        (b"v", None, [(b"h", b"x")], None, "header keys must be str"),
        (b"v", None, ["h"], None, "pairs"),
        (b"v", None, None, -5, "timestamp must be ms since the epoch"),
        (b"v", None, None, 1.5, "timestamp must be ms since the epoch"),
    ],
)
def test_malformed_records_are_rejected_at_send_and_queue_nothing(
    value: object, key: object, headers: object, timestamp: object, error: str
) -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster)

    with pytest.raises((TypeError, ValueError), match=error):
        accumulator.append(TOPIC, value, key, headers, 0, timestamp)  # type: ignore[arg-type]

    assert accumulator.incomplete_count == 0


def test_a_negative_partition_is_rejected() -> None:
    accumulator = make_accumulator(static_cluster(partitions=3))

    with pytest.raises(ValueError, match="partition must be an int >= 0"):
        accumulator.append(TOPIC, b"v", None, None, -1, None)


def test_a_topic_missing_from_metadata_asks_the_caller_to_wait() -> None:
    accumulator = make_accumulator(static_cluster(partitions=3))

    with pytest.raises(NeedMetadata):
        accumulator.append("other-topic", b"v", None, None, None, None)
    with pytest.raises(NeedMetadata):
        accumulator.append(TOPIC, b"v", None, None, 3, None)


def test_a_full_buffer_memory_asks_the_caller_to_wait_until_a_batch_completes() -> None:
    cluster = static_cluster(partitions=2)
    accumulator = make_accumulator(cluster, batch_size=1024, buffer_memory=2048)
    first = accumulator.append(TOPIC, b"v", None, None, 0, None)
    accumulator.append(TOPIC, b"v", None, None, 1, None)

    with pytest.raises(NeedMemory):
        for _ in range(100):
            accumulator.append(TOPIC, b"x" * 200, None, None, 0, None)
    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1)
    for queue, batches in requests[0].entries:
        if first._batch in batches:
            accumulator.complete(queue, batches, 0, -1)

    accumulator.append(TOPIC, b"x" * 200, None, None, 0, None)


def test_a_batch_lingers_until_linger_ms_unless_it_is_full() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, linger_ms=50)
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)
    created = future._batch.created

    early, next_ready, _ = accumulator.drain(cluster, created + 0.01, lambda node: 1)
    late, _, _ = accumulator.drain(cluster, created + 0.05, lambda node: 1)

    assert early == []
    assert next_ready == pytest.approx(created + 0.05)
    assert len(late) == 1


def test_flush_makes_lingering_batches_ready_at_once() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, linger_ms=60_000)
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)

    waiting_for = accumulator.begin_flush()
    requests, _, _ = accumulator.drain(cluster, future._batch.created, lambda node: 1)

    assert waiting_for == [future._batch]
    assert len(requests) == 1


def test_a_partition_has_at_most_one_request_in_flight() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=1024, linger_ms=0)
    for _ in range(30):
        accumulator.append(TOPIC, b"x" * 100, None, None, 0, None)

    first, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)
    accumulator.append(TOPIC, b"x" * 100, None, None, 0, None)
    while_in_flight, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)
    ((queue, batches),) = first[0].entries
    accumulator.complete(queue, batches, 0, -1)
    after_answer, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)

    assert len(first) == 1
    assert while_in_flight == []
    assert len(after_answer) == 1


def test_one_request_carries_every_queued_batch_of_a_partition_up_to_max_request_size() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=1024, max_request_size=4096)
    for _ in range(100):
        accumulator.append(TOPIC, b"x" * 100, None, None, 0, None)

    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)

    ((_, batches),) = requests[0].entries
    sizes = [batch.size_bytes for batch in batches]
    assert len(batches) > 1
    assert sum(sizes) <= 4096


def test_requests_take_partitions_of_one_node_together() -> None:
    cluster = static_cluster(partitions=4)
    accumulator = make_accumulator(cluster, linger_ms=0)
    for partition in range(4):
        accumulator.append(TOPIC, b"v", None, None, partition, None)

    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)

    assert len(requests) == 1
    assert sorted(queue.partition for queue, _ in requests[0].entries) == [0, 1, 2, 3]


def test_partitions_without_a_leader_wait_and_ask_for_metadata() -> None:
    cluster = static_cluster(partitions=2, leaderless=(1,))
    accumulator = make_accumulator(cluster, linger_ms=0)
    accumulator.append(TOPIC, b"v", None, None, 1, None)

    requests, _, unknown_leader = accumulator.drain(cluster, float("inf"), lambda node: 5)

    assert requests == []
    assert unknown_leader


def test_a_retried_batch_goes_back_in_front_of_newer_ones_in_order() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=1024, linger_ms=0, max_request_size=2048)
    values = [b"%03d" % i + b"x" * 200 for i in range(20)]
    for value in values:
        accumulator.append(TOPIC, value, None, None, 0, None)
    (request,), _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)
    ((queue, sent),) = request.entries

    accumulator.requeue(queue, sent, retry_at=0.0)
    resent: list[bytes] = []
    while requests := accumulator.drain(cluster, float("inf"), lambda node: 5)[0]:
        ((_, batches),) = requests[0].entries
        resent += [batch.seal(Compression.NONE) for batch in batches]
        accumulator.complete(queue, batches, 0, -1)

    assert [batch.attempts for batch in sent] == [1] * len(sent)
    assert [r.value for batch in resent for r in iter_records(batch)] == values


def test_a_retry_waits_for_its_backoff() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, linger_ms=0)
    accumulator.append(TOPIC, b"v", None, None, 0, None)
    (request,), _, _ = accumulator.drain(cluster, float("inf"), lambda node: 5)
    ((queue, sent),) = request.entries

    accumulator.requeue(queue, sent, retry_at=1000.0)
    before, next_ready, _ = accumulator.drain(cluster, 999.0, lambda node: 5)
    after, _, _ = accumulator.drain(cluster, 1000.0, lambda node: 5)

    assert before == []
    assert next_ready == 1000.0
    assert len(after) == 1


def test_queued_batches_expire_after_delivery_timeout() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, delivery_timeout_ms=1000)
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)

    next_expiry = accumulator.expire(future._batch.created + 0.5)
    kept = future.done()
    accumulator.expire(future._batch.created + 1.0)

    assert next_expiry == future._batch.created + 1.0
    assert not kept
    with pytest.raises(ClientTimeoutError, match=r"delivery\.timeout\.ms"):
        future.result(0)
    assert accumulator.incomplete_count == 0


def test_record_futures_resolve_with_offsets_from_the_batch_answer() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster)
    futures = [accumulator.append(TOPIC, b"v", None, None, 0, BASE_MS + i) for i in range(3)]
    (request,), _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1)
    ((queue, batches),) = request.entries

    accumulator.complete(queue, batches, 40, -1)

    assert [(f.result(0).offset, f.result(0).timestamp) for f in futures] == [
        (40, BASE_MS),
        (41, BASE_MS + 1),
        (42, BASE_MS + 2),
    ]


def test_log_append_time_replaces_the_create_time_in_metadata() -> None:
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster)
    future = accumulator.append(TOPIC, b"v", None, None, 0, BASE_MS)
    (request,), _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1)

    ((queue, batches),) = request.entries
    accumulator.complete(queue, batches, 7, BASE_MS + 999)

    assert future.result(0).timestamp == BASE_MS + 999


def _completed_later(future: RecordFuture, delay_s: float) -> threading.Thread:
    def complete() -> None:
        threading.Event().wait(delay_s)
        future._batch.complete(5, -1)

    thread = threading.Thread(target=complete)
    thread.start()
    return thread


def test_record_future_result_waits_for_completion_in_another_thread() -> None:
    accumulator = make_accumulator(static_cluster(partitions=1))
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)
    called: list[RecordFuture] = []
    future.add_done_callback(called.append)

    thread = _completed_later(future, 0.05)
    metadata = future.result(timeout=5)
    thread.join()

    assert metadata.offset == 5
    assert called == [future]
    assert future.done() and future.exception(0) is None


def test_record_future_result_times_out_when_not_acknowledged() -> None:
    accumulator = make_accumulator(static_cluster(partitions=1))
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)

    with pytest.raises(ClientTimeoutError, match=r"not acknowledged within 0\.01 s"):
        future.result(timeout=0.01)


def test_record_future_can_be_awaited_from_any_event_loop() -> None:
    accumulator = make_accumulator(static_cluster(partitions=1))
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)

    async def await_it() -> int:
        thread = _completed_later(future, 0.05)
        metadata = await asyncio.wait_for(future, 5)
        thread.join()
        return metadata.offset

    assert asyncio.run(await_it()) == 5


def test_a_callback_added_after_completion_runs_at_once() -> None:
    accumulator = make_accumulator(static_cluster(partitions=1))
    future = accumulator.append(TOPIC, b"v", None, None, 0, None)
    future._batch.fail(RuntimeError("boom"))
    seen: list[BaseException | None] = []

    future.add_done_callback(lambda f: seen.append(f.exception(0)))

    assert [str(error) for error in seen] == ["boom"]


def test_completing_a_batch_releases_its_memory_and_notifies_waiters() -> None:
    notifier = Notifier()
    cluster = static_cluster(partitions=1)
    accumulator = make_accumulator(cluster, batch_size=1024, buffer_memory=1024, notifier=notifier)
    accumulator.append(TOPIC, b"v", None, None, 0, None)
    version = notifier.version
    (request,), _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1)

    ((queue, batches),) = request.entries
    accumulator.complete(queue, batches, 0, -1)

    assert notifier.version > version
    assert accumulator.has_free_bytes(1024)
    assert BATCH_OVERHEAD < 1024
