"""The idempotent producer end to end against a storage double that deduplicates as a leader does:
lost answers, out-of-order arrivals, a lost producer state and fencing never duplicate, lose
or reorder an acknowledged record."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from storage_double import RunningDouble, StorageDouble

from brook.client import Producer
from brook.client.errors import ApiError, ProducerFencedError
from brook.errors import ErrorCode
from brook.record import RecordError, read_header
from brook.v1 import storage_pb2

TOPICS = {"events": 3, "single": 1}
FAST = {
    "linger.ms": 0,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "request.timeout.ms": 2000,
    "delivery.timeout.ms": 8000,
    "max.block.ms": 2000,
}
RESULT_TIMEOUT_S = 15.0
# What a leader remembers per producer and partition (Kafka's five batches).
REMEMBERED_BATCHES = 5


@dataclass
class ProducerEntry:
    epoch: int
    # (first sequence, last sequence, base offset) of the last batches appended.
    batches: list[tuple[int, int, int]] = field(default_factory=list)


class DedupDouble(StorageDouble):
    """A StorageDouble with the leader's producer-state rules (one batch per partition data)."""

    def __init__(self, topics: dict[str, int]) -> None:
        super().__init__(topics)
        self.state: dict[tuple[str, int, int], ProducerEntry] = {}
        self.epochs: dict[int, int] = {}
        self.init_requests: list[tuple[int, int]] = []
        self._next_producer_id = 1000
        # Answers to drop after appending (the connection "dies" after the append).
        self.drop_answers = 0
        # False: an unknown producer's batch must start at sequence 0 (UNKNOWN_PRODUCER_ID
        # otherwise), as brokers before Kafka 2.5. True: taken at any sequence, as Brook's
        # storage node and Kafka since 2.5.
        self.unknown_producer_any_sequence = False

    async def InitProducerId(self, request: Any, context: Any) -> Any:
        if (answer := await self._fault("InitProducerId", request, context)) is not None:
            return answer
        self.init_requests.append((request.producer_id, request.producer_epoch))
        if request.producer_id < 0:
            producer_id, epoch = self._next_producer_id, 0
            self._next_producer_id += 1
        elif self.epochs.get(request.producer_id) != request.producer_epoch:
            return storage_pb2.InitProducerIdResponse(
                error_code=ErrorCode.PRODUCER_FENCED,  # type: ignore[arg-type]
                error_message="not the current epoch",
            )
        else:
            producer_id, epoch = request.producer_id, request.producer_epoch + 1
        self.epochs[producer_id] = epoch
        return storage_pb2.InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)

    async def Produce(self, request: Any, context: Any) -> Any:
        self.produced.append(request)
        if (answer := await self._fault("Produce", request, context)) is not None:
            return answer
        answers = [self._produce(data) for data in request.partitions]
        if self.drop_answers > 0:
            self.drop_answers -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset after append")
        return storage_pb2.ProduceResponse(partitions=answers)

    def _produce(self, data: Any) -> storage_pb2.PartitionProduceResponse:
        answer = storage_pb2.PartitionProduceResponse(
            topic=data.topic, partition=data.partition, base_offset=-1, log_append_time_ms=-1
        )

        def refuse(code: ErrorCode) -> storage_pb2.PartitionProduceResponse:
            answer.error_code = code  # type: ignore[assignment]
            answer.error_message = code.name
            return answer

        header = read_header(data.records)
        assert header.size == len(data.records), "one batch per partition when idempotent"
        key = (data.topic, data.partition, header.producer_id)
        first, last = header.base_sequence, header.base_sequence + header.records_count - 1
        entry = self.state.get(key)
        if header.producer_id >= 0:
            if entry is not None and header.producer_epoch < entry.epoch:
                return refuse(ErrorCode.INVALID_PRODUCER_EPOCH)
            if entry is None or header.producer_epoch > entry.epoch:
                unknown_taken = entry is None and self.unknown_producer_any_sequence
                if first != 0 and not unknown_taken:
                    return refuse(
                        ErrorCode.UNKNOWN_PRODUCER_ID
                        if entry is None
                        else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                    )
                entry = ProducerEntry(header.producer_epoch)
            else:
                for seen_first, seen_last, offset in entry.batches:
                    if (seen_first, seen_last) == (first, last):
                        answer.base_offset = offset
                        return answer
                if first != entry.batches[-1][1] + 1:
                    return refuse(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        try:
            answer.base_offset = self.append(data.topic, data.partition, data.records)
        except RecordError as error:
            answer.error_code = error.error_code  # type: ignore[assignment]
            return answer
        if entry is not None:
            entry.batches = [*entry.batches, (first, last, answer.base_offset)][
                -REMEMBERED_BATCHES:
            ]
            self.state[key] = entry
        return answer

    def fence(self, producer_id: int) -> None:
        """Another instance took the id over with a newer epoch."""
        self.epochs[producer_id] += 1
        for (_, _, pid), entry in self.state.items():
            if pid == producer_id:
                entry.epoch = self.epochs[producer_id]
                entry.batches = []

    def forget_producers(self) -> None:
        """The leader lost every producer's state (as after a failover to a bare replica)."""
        self.state.clear()


@pytest.fixture
def dedup() -> Iterator[RunningDouble]:
    running = RunningDouble(DedupDouble(dict(TOPICS)))
    try:
        yield running
    finally:
        running.stop()


def _double(running: RunningDouble) -> DedupDouble:
    assert isinstance(running.double, DedupDouble)
    return running.double


def _values(running: RunningDouble, topic: str, partition: int) -> list[bytes | None]:
    return [value for _, _, value in running.call(lambda: running.double.records(topic, partition))]


def test_a_batch_whose_answer_was_lost_is_written_once_with_its_original_offsets(
    dedup: RunningDouble,
) -> None:
    double = _double(dedup)
    with Producer({"bootstrap.servers": dedup.address, **FAST}) as producer:
        producer.send("single", b"first").result(RESULT_TIMEOUT_S)
        dedup.call(lambda: setattr(double, "drop_answers", 1))

        metadata = producer.send("single", b"second").result(RESULT_TIMEOUT_S)

    assert _values(dedup, "single", 0) == [b"first", b"second"]
    assert metadata.offset == 1
    sequences = [read_header(r.partitions[0].records).base_sequence for r in double.produced]
    assert sequences == [0, 1, 1], "the retry re-sent the same sequence"


def test_many_in_flight_batches_survive_failures_in_order_and_exactly_once(
    dedup: RunningDouble,
) -> None:
    double = _double(dedup)
    failures = {"left": 6}
    arrived = threading.Event()

    async def flaky(request: Any, context: Any) -> Any:
        # Every third request fails before the append (NOT_LEADER), a few after it (a
        # dropped answer), while later batches of the partition are in flight.
        count = double.calls["Produce"]
        if count % 3 == 0 and failures["left"] > 0:
            failures["left"] -= 1
            await asyncio.sleep(0.01)
            return storage_pb2.ProduceResponse(
                partitions=[
                    storage_pb2.PartitionProduceResponse(
                        topic=p.topic,
                        partition=p.partition,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,  # type: ignore[arg-type]
                        base_offset=-1,
                    )
                    for p in request.partitions
                ]
            )
        if count % 5 == 0:
            double.drop_answers = 1
        arrived.set()
        return None

    double.faults["Produce"] = flaky
    sent = [b"%04d" % i for i in range(300)]
    # max.request.size leaves a waiting batch no room to grow past batch.size: about 25
    # batches, so that several are in flight when the faults hit.
    settings = {"batch.size": 200, "max.request.size": 300, "linger.ms": 1}
    with Producer({"bootstrap.servers": dedup.address, **FAST, **settings}) as producer:
        futures = [producer.send("single", value) for value in sent]
        offsets = [future.result(RESULT_TIMEOUT_S).offset for future in futures]

    assert _values(dedup, "single", 0) == sent
    assert offsets == list(range(len(sent)))
    assert failures["left"] == 0, "the faults were injected"


def test_a_lost_producer_state_bumps_the_epoch_and_delivers_everything_once(
    dedup: RunningDouble,
) -> None:
    double = _double(dedup)
    with Producer({"bootstrap.servers": dedup.address, **FAST}) as producer:
        producer.send("single", b"before").result(RESULT_TIMEOUT_S)
        dedup.call(double.forget_producers)

        after = producer.send("single", b"after").result(RESULT_TIMEOUT_S)

    assert _values(dedup, "single", 0) == [b"before", b"after"]
    assert after.offset == 1
    producer_id = double.init_requests[1][0]
    assert double.init_requests == [(-1, -1), (producer_id, 0)], "one epoch bump via KIP-360"
    last = read_header(double.produced[-1].partitions[0].records)
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


def test_a_first_batch_that_fails_is_not_overtaken_by_the_next_one(dedup: RunningDouble) -> None:
    """A leader that takes an unknown producer's first batch at any sequence would keep a
    second batch sent beside a failed first one, and the first one's records would land after
    it: until the partition's leader knows the producer, its batches go one at a time."""
    double = _double(dedup)
    double.unknown_producer_any_sequence = True
    refused: list[int] = []

    async def slow_producer_id(request: Any, context: Any) -> Any:
        del request, context
        # Meanwhile the records queue up as several batches, all ready when the id comes.
        await asyncio.sleep(0.5)
        return None

    async def refuse_first_batch_once(request: Any, context: Any) -> Any:
        del context
        header = read_header(request.partitions[0].records)
        if header.base_sequence != 0 or refused:
            return None
        refused.append(header.records_count)
        return storage_pb2.ProduceResponse(
            partitions=[
                storage_pb2.PartitionProduceResponse(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,  # type: ignore[arg-type]
                    error_message="moving",
                    base_offset=-1,
                )
                for p in request.partitions
            ]
        )

    double.faults["InitProducerId"] = slow_producer_id
    double.faults["Produce"] = refuse_first_batch_once
    sent = [b"%099d" % i for i in range(5)]
    # One 100-byte record per batch: five batches wait for the producer id.
    settings = {"batch.size": 200, "max.request.size": 300}
    with Producer({"bootstrap.servers": dedup.address, **FAST, **settings}) as producer:
        futures = [producer.send("single", value) for value in sent]
        offsets = [future.result(RESULT_TIMEOUT_S).offset for future in futures]

    assert refused == [1], "the first batch was refused once"
    assert _values(dedup, "single", 0) == sent
    assert offsets == list(range(len(sent)))


def test_a_fenced_producer_fails_every_later_send_and_writes_nothing_more(
    dedup: RunningDouble,
) -> None:
    double = _double(dedup)
    with Producer({"bootstrap.servers": dedup.address, **FAST}) as producer:
        producer.send("single", b"before").result(RESULT_TIMEOUT_S)
        [producer_id] = double.epochs
        dedup.call(lambda: double.fence(producer_id))

        rejected = producer.send("single", b"after fencing")
        with pytest.raises(ProducerFencedError, match="fenced"):
            rejected.result(RESULT_TIMEOUT_S)
        with pytest.raises(ProducerFencedError):
            producer.send("single", b"later")

    assert _values(dedup, "single", 0) == [b"before"]


def test_a_cluster_without_producer_ids_gets_plain_produce_when_idempotence_is_defaulted(
    double: RunningDouble,
) -> None:
    with Producer({"bootstrap.servers": double.address, **FAST}) as producer:
        metadata = producer.send("single", b"v").result(RESULT_TIMEOUT_S)

    assert metadata.offset == 0
    header = read_header(double.double.produced[0].partitions[0].records)
    assert header.producer_id == -1


def test_a_cluster_without_producer_ids_is_an_error_when_idempotence_was_asked_for(
    double: RunningDouble,
) -> None:
    settings = {"bootstrap.servers": double.address, **FAST, "enable.idempotence": True}
    with Producer(settings) as producer:
        future = producer.send("single", b"v")
        with pytest.raises(ApiError, match=r"enable\.idempotence=false") as raised:
            future.result(RESULT_TIMEOUT_S)

    assert raised.value.code is ErrorCode.UNSUPPORTED_VERSION
    assert double.double.calls.get("Produce", 0) == 0


def test_retriable_init_producer_id_errors_are_retried(dedup: RunningDouble) -> None:
    double = _double(dedup)
    refusals = {"left": 2}

    async def not_yet(request: Any, context: Any) -> Any:
        if refusals["left"] > 0:
            refusals["left"] -= 1
            return storage_pb2.InitProducerIdResponse(
                error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,  # type: ignore[arg-type]
            )
        return None

    double.faults["InitProducerId"] = not_yet
    started = time.monotonic()
    with Producer({"bootstrap.servers": dedup.address, **FAST}) as producer:
        assert producer.send("single", b"v").result(RESULT_TIMEOUT_S).offset == 0

    assert refusals["left"] == 0
    assert double.calls["InitProducerId"] == 3
    assert time.monotonic() - started < RESULT_TIMEOUT_S


def test_a_rejected_batch_leaves_a_gap_that_the_next_batch_closes_with_an_epoch_bump(
    dedup: RunningDouble,
) -> None:
    double = _double(dedup)

    async def rejects_bad(request: Any, context: Any) -> Any:
        if b"bad" in request.partitions[0].records:
            return storage_pb2.ProduceResponse(
                partitions=[
                    storage_pb2.PartitionProduceResponse(
                        topic=p.topic,
                        partition=p.partition,
                        error_code=ErrorCode.INVALID_RECORD,  # type: ignore[arg-type]
                        base_offset=-1,
                    )
                    for p in request.partitions
                ]
            )
        return None

    double.faults["Produce"] = rejects_bad
    with Producer({"bootstrap.servers": dedup.address, **FAST}) as producer:
        producer.send("single", b"good").result(RESULT_TIMEOUT_S)
        with pytest.raises(ApiError) as rejected:
            producer.send("single", b"bad").result(RESULT_TIMEOUT_S)
        after = producer.send("single", b"after").result(RESULT_TIMEOUT_S)

    assert rejected.value.code is ErrorCode.INVALID_RECORD
    assert _values(dedup, "single", 0) == [b"good", b"after"]
    assert after.offset == 1
    # "after" first went out as sequence 2 (the gap), then as sequence 0 of a bumped epoch.
    attempts = [read_header(r.partitions[0].records) for r in double.produced]
    assert [(h.producer_epoch, h.base_sequence) for h in attempts] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
    ]
