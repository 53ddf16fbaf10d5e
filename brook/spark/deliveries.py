"""What a Spark task's producer delivered: per partition, how many records and bytes and the
first and last offset; a task fails at its first record that was not written.

Every writer that sends rows (the batch sink, ``produce``) sends them through one
``DeliveryTally`` per task, an Arrow batch at a time (``brook.spark.arrow_writes``). The tally
counts a batch's records once ``PENDING_BATCHES_MAX`` newer batches were sent after it (by
then they are normally acknowledged; if not, it waits for them), so a task holds the futures
of a few batches, not one per row it ever sent, and the producer still has batches in flight
while they are counted. ``finish`` flushes the producer and counts the rest. Counting is
columnar: each future is asked only for its error and its partition; Arrow groups them
and sums the bytes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from brook.client import ClientTimeoutError, Producer, RecordFuture, TopicPartition
from brook.spark.arrow_writes import payload_bytes, send_arrow_rows

__all__ = ["PENDING_BATCHES_MAX", "DeliveryError", "DeliveryTally", "PartitionDelivery"]

PENDING_BATCHES_MAX: Final = 2
"""Arrow batches whose futures a tally holds beyond the one being sent."""

_TOPIC: Final = attrgetter("topic")
_PARTITION: Final = attrgetter("partition")
# Group keys: topic number * stride + partition (a partition number is below 2^31).
_TOPIC_STRIDE: Final = 1 << 32


class DeliveryError(RuntimeError):
    """A record the cluster did not accept (the cause is the SDK's delivery error)."""


@dataclass
class PartitionDelivery:
    """The records one task delivered to one partition. Offsets increase in send order within
    one producer session (idempotence keeps a partition's batches in order), so the first
    record sent holds ``first_offset`` and the last ``last_offset``."""

    records: int
    bytes: int
    first_offset: int
    last_offset: int


class DeliveryTally:
    """The deliveries of one task's ``producer``; not thread-safe (one task, one thread)."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        # A record's outcome is known by then: delivered, or failed when its delivery timeout
        # passed (plus the request that may still be answering).
        config = producer.config
        self._wait_s = (config.delivery_timeout_ms + config.request_timeout_ms) / 1000
        self._pending: deque[tuple[list[RecordFuture], pa.Array, str | None]] = deque()
        self._partitions: dict[TopicPartition, PartitionDelivery] = {}

    def send(self, batch: pa.RecordBatch, *, default_topic: str | None) -> None:
        """Send every row of ``batch`` (``send_arrow_rows``) and count what older batches
        delivered; DeliveryError for a record that failed."""
        futures = send_arrow_rows(self._producer, batch, default_topic=default_topic)
        if futures:
            self._pending.append((futures, payload_bytes(batch), default_topic))
        while len(self._pending) > PENDING_BATCHES_MAX:
            self._count(*self._pending.popleft())

    def finish(self) -> dict[TopicPartition, PartitionDelivery]:
        """Flush the producer and count every record: what the task delivered, per partition.
        DeliveryError for a failed record, ClientTimeoutError when the flush times out."""
        self._producer.flush()
        while self._pending:
            self._count(*self._pending.popleft())
        return dict(self._partitions)

    def _count(self, futures: list[RecordFuture], sizes: pa.Array, topic: str | None) -> None:
        """Count one sent batch, waiting for its records' outcomes; ``topic``: the one topic
        every record went to, if known (saves asking each future)."""
        # map over the unbound methods: this runs once per record.
        try:
            errors = list(map(RecordFuture.exception, futures, repeat(self._wait_s)))
        except ClientTimeoutError as timeout:
            raise DeliveryError(str(timeout)) from timeout
        if any(errors):
            index, error = next((i, e) for i, e in enumerate(errors) if e is not None)
            failed = futures[index]
            raise DeliveryError(
                f"a record for {failed.topic}-{failed.partition} was not written: {error}"
            ) from error
        # Grouped by (topic, partition) with Arrow, one pass per partition the batch went to.
        partitions = pa.array(list(map(_PARTITION, futures)), pa.int64())
        if topic is None:
            topics = pa.array(list(map(_TOPIC, futures)), pa.string()).dictionary_encode()
            names: list[str] = topics.dictionary.to_pylist()
            groups = pc.add(pc.multiply(topics.indices.cast(pa.int64()), _TOPIC_STRIDE), partitions)
        else:
            names = [topic]
            groups = partitions
        deliveries = self._partitions
        for group in pc.unique(groups).to_pylist():
            rows = pc.indices_nonzero(pc.equal(groups, group))
            where = TopicPartition(names[group // _TOPIC_STRIDE], group % _TOPIC_STRIDE)
            last = futures[rows[-1].as_py()].result(0).offset
            delivery = deliveries.get(where)
            if delivery is None:
                first = futures[rows[0].as_py()].result(0).offset
                delivery = deliveries[where] = PartitionDelivery(0, 0, first, last)
            delivery.records += len(rows)
            delivery.bytes += pc.sum(pc.take(sizes, rows)).as_py()
            delivery.last_offset = last
