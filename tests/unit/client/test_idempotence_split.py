"""A batch the node refuses as too large (MESSAGE_TOO_LARGE: the topic's max.message.bytes is
below what the producer sent) is split and sent again, as Kafka's producer does: every record
is written once, in order; an idempotent producer's pieces take over the refused batch's
sequence range, so the batches after it keep theirs and no epoch bump is needed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from client_test_support import TOPIC, StaticMetadata, make_producer_known, static_cluster
from storage_double import RunningDouble, StorageDouble
from test_idempotence_delivery import FAST, RESULT_TIMEOUT_S, DedupDouble

from brook.client import Producer
from brook.client.accumulator import PartitionQueue, ProducerBatch, RecordAccumulator
from brook.client.errors import RecordTooLargeError
from brook.client.idempotence import IdempotenceState
from brook.client.metadata import ClusterView
from brook.client.runtime import Notifier, Wakeup
from brook.record import BATCH_OVERHEAD, Compression, RecordError, read_header, validate_batches

TOPICS = {"single": 1}
PRODUCER_ID = 4000
EPOCH = 3
BATCH_SIZE = 200
# What the "node" takes per batch in the accumulator tests: a grown batch is above it.
REFUSED_ABOVE_BYTES = 600


# -- the accumulator, driven as the sender drives it ------------------------------------------


def _accumulator(cluster: ClusterView) -> RecordAccumulator:
    accumulator = RecordAccumulator(
        metadata=StaticMetadata(cluster),
        notifier=Notifier(),
        wakeup=Wakeup(asyncio.new_event_loop()),  # never run: Wakeup only posts to it
        batch_size=BATCH_SIZE,
        buffer_memory=1 << 20,
        linger_ms=0,
        max_request_size=1 << 20,
        delivery_timeout_ms=120_000,
        compression=Compression.NONE,
        partitioner_ignore_keys=False,
        idempotence=IdempotenceState(),
        in_flight_max=5,
    )
    make_producer_known(accumulator, cluster, PRODUCER_ID, EPOCH)
    return accumulator


def _drain_one(
    accumulator: RecordAccumulator, cluster: ClusterView
) -> tuple[PartitionQueue, ProducerBatch]:
    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1 << 30)
    [request] = requests
    [(queue, [batch])] = request.entries
    batch.seal(accumulator.compression)
    return queue, batch


def test_split_pieces_take_the_refused_sequence_range_and_later_batches_keep_theirs() -> None:
    cluster = static_cluster(1)
    accumulator = _accumulator(cluster)
    send = accumulator.append
    futures = [send(TOPIC, b"first", None, None, 0, None)]
    queue, first = _drain_one(accumulator, cluster)
    # While ``first`` is unanswered the next batch waits, growing past batch.size.
    values = [b"grown-%03d-" % i + b"x" * 40 for i in range(20)]
    futures += [send(TOPIC, value, None, None, 0, None) for value in values]
    _, grown = _drain_one(accumulator, cluster)
    futures += [send(TOPIC, b"later", None, None, 0, None)]
    _, later = _drain_one(accumulator, cluster)
    assert grown.size_bytes > REFUSED_ABOVE_BYTES, "the waiting batch grew"
    assert (first.base_sequence, grown.base_sequence, later.base_sequence) == (0, 1, 21)

    assert accumulator.split_too_large(queue, grown)
    # ``later`` bounced as out of order (its predecessor was refused): a retry.
    accumulator.requeue(queue, [later], 0.0)

    pieces = [piece for _, piece in grown.pieces or []]
    assert len(pieces) > 1
    assert list(queue.batches) == [*pieces, later], "the pieces take the refused batch's place"
    assert sum(piece.count for piece in pieces) == len(values)
    expected_sequence = 1
    for piece in pieces:
        assert piece.base_sequence == expected_sequence
        expected_sequence += piece.count
    assert later.base_sequence == 21, "the batch sent after the refused one keeps its sequence"
    orders = [first.send_order, *(p.send_order for p in pieces), later.send_order]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)

    # The pieces go out one after another once ``first`` is answered, then ``later``.
    accumulator.complete(queue, [first], 0, -1)
    offset = 1
    stored: list[bytes] = []
    for expected in [*pieces, later]:
        _, sent = _drain_one(accumulator, cluster)
        assert sent is expected
        payload = sent.seal(accumulator.compression)
        (header,) = validate_batches(payload, max_batch_bytes=BATCH_SIZE)
        assert (header.producer_id, header.producer_epoch) == (PRODUCER_ID, EPOCH)
        assert header.base_sequence == sent.base_sequence
        stored.append(payload)
        accumulator.complete(queue, [sent], offset, -1)
        offset += sent.count

    assert [future.result(0).offset for future in futures] == list(range(len(futures)))
    assert accumulator.incomplete_count == 0
    assert accumulator.has_free_bytes(1 << 20), "every reserved byte was given back"


def test_after_a_refusal_the_topics_waiting_batches_stop_growing() -> None:
    cluster = static_cluster(1)
    accumulator = _accumulator(cluster)
    accumulator.append(TOPIC, b"first", None, None, 0, None)
    # Unanswered, so the next batch waits and grows.
    queue, _unanswered = _drain_one(accumulator, cluster)
    for i in range(20):
        accumulator.append(TOPIC, b"%050d" % i, None, None, 0, None)
    _, grown = _drain_one(accumulator, cluster)
    assert accumulator.split_too_large(queue, grown)

    for i in range(20):
        accumulator.append(TOPIC, b"%050d" % i, None, None, 0, None)

    new = [batch for batch in queue.batches if batch.send_order < 0]
    assert len(new) > 1
    assert all(BATCH_OVERHEAD + len(batch.body) <= BATCH_SIZE for batch in new)


def test_a_refused_batch_of_one_record_is_not_split() -> None:
    cluster = static_cluster(1)
    accumulator = _accumulator(cluster)
    accumulator.append(TOPIC, b"x" * 150, None, None, 0, None)
    queue, only = _drain_one(accumulator, cluster)

    assert not accumulator.split_too_large(queue, only)
    assert only.pieces is None and list(queue.batches) == []


# -- end to end against a storage double with a small max.message.bytes -----------------------


class _SizeLimit:
    """Refuses every batch above ``max_batch_bytes`` with MESSAGE_TOO_LARGE, as a node whose
    topic has that max.message.bytes; counts the refusals."""

    max_batch_bytes = 1 << 20
    refused = 0

    def limited(self, records: bytes) -> None:
        try:
            validate_batches(records, max_batch_bytes=self.max_batch_bytes)
        except RecordError:
            self.refused += 1
            raise


class LimitedDedupDouble(_SizeLimit, DedupDouble):
    def append(self, topic: str, partition: int, records: bytes) -> int:
        self.limited(records)
        return super().append(topic, partition, records)


class LimitedDouble(_SizeLimit, StorageDouble):
    def append(self, topic: str, partition: int, records: bytes) -> int:
        self.limited(records)
        return super().append(topic, partition, records)


def _running(double: StorageDouble) -> Iterator[RunningDouble]:
    running = RunningDouble(double)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def limited_dedup() -> Iterator[RunningDouble]:
    double = LimitedDedupDouble(dict(TOPICS))
    double.max_batch_bytes = 4096
    yield from _running(double)


@pytest.fixture
def limited() -> Iterator[RunningDouble]:
    double = LimitedDouble(dict(TOPICS))
    double.max_batch_bytes = 600
    yield from _running(double)


def _stored(running: RunningDouble) -> list[bytes]:
    return list(running.call(lambda: running.double.partitions[("single", 0)].batches))


def _values(running: RunningDouble) -> list[bytes | None]:
    return [value for _, _, value in running.call(lambda: running.double.records("single", 0))]


def _offsets_of_sent(
    running: RunningDouble, settings: dict[str, object], sent: list[bytes]
) -> list[int]:
    """Send ``sent`` to the "single" topic; the offsets the producer reports."""
    with Producer({"bootstrap.servers": running.address, **FAST, **settings}) as producer:
        futures = [producer.send("single", value) for value in sent]
        return [future.result(RESULT_TIMEOUT_S).offset for future in futures]


def test_an_idempotent_batch_grown_past_the_topics_limit_is_split_and_delivered_once_in_order(
    limited_dedup: RunningDouble,
) -> None:
    double = limited_dedup.double
    assert isinstance(double, LimitedDedupDouble)
    sent = [b"record-%05d-" % i + b"v" * 30 for i in range(600)]
    # A long linger keeps the first batch waiting, so it grows to ~30 KiB (past 4096).
    offsets = _offsets_of_sent(limited_dedup, {"batch.size": 1024, "linger.ms": 500}, sent)

    assert double.refused >= 1, "the grown batch was refused"
    assert _values(limited_dedup) == sent
    assert offsets == list(range(len(sent)))
    assert len(double.init_requests) == 1, "no epoch bump"
    sequence = 0
    for batch in _stored(limited_dedup):
        header = read_header(batch)
        assert header.base_sequence == sequence, "the pieces cover the sequences without gaps"
        assert header.size <= 1024
        sequence += header.records_count


def test_a_plain_batch_above_the_topics_limit_is_split_until_it_fits(
    limited: RunningDouble,
) -> None:
    double = limited.double
    assert isinstance(double, LimitedDouble)
    sent = [b"plain-%04d-" % i + b"p" * 40 for i in range(100)]
    settings: dict[str, object] = {
        "enable.idempotence": False,
        "batch.size": 4096,
        "linger.ms": 200,
        "acks": 1,
    }
    offsets = _offsets_of_sent(limited, settings, sent)

    assert double.refused >= 1
    assert _values(limited) == sent
    assert offsets == list(range(len(sent)))


def test_a_single_record_above_the_topics_limit_still_fails_as_too_large(
    limited: RunningDouble,
) -> None:
    with Producer({"bootstrap.servers": limited.address, **FAST}) as producer:
        future = producer.send("single", b"z" * 1000)
        with pytest.raises(RecordTooLargeError):
            future.result(RESULT_TIMEOUT_S)
        after = producer.send("single", b"small").result(RESULT_TIMEOUT_S)

    assert _values(limited) == [b"small"]
    assert after.offset == 0
