"""What a Spark task's producer delivered: per partition, how many records and bytes and the
first and last offset; a task fails at its first record that was not written.

Every writer that sends rows (the batch sink, ``produce``) sends them through one
``DeliveryTally`` per task, an Arrow batch at a time (``brook.spark.arrow_writes``). The tally
counts a batch's records once ``PENDING_BATCHES_MAX`` newer batches were sent after it (by
then they are normally acknowledged; if not, it waits for them), so a task holds the futures
of a few batches, not one per row it ever sent, and the producer still has batches in flight
while they are counted. ``finish`` flushes the producer and counts the rest. Counting is
columnar: each future is asked only for its error and its partition; Arrow groups them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from brook.client import ClientTimeoutError, Producer, RecordFuture, TopicPartition
from brook.spark.arrow_writes import payload_bytes, send_arrow_rows

__all__ = ["PENDING_BATCHES_MAX", "DeliveryError", "DeliveryTally", "PartitionDelivery"]

PENDING_BATCHES_MAX: Final = 2
"""Arrow batches whose futures a tally holds beyond the one being sent."""


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
        self._pending: deque[tuple[list[RecordFuture], list[int], str | None]] = deque()
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

    def _count(self, futures: list[RecordFuture], sizes: list[int], topic: str | None) -> None:
        """Count one sent batch, waiting for its records' outcomes; ``topic``: the one topic
        every record went to, if known (saves asking each future)."""
        wait_s = self._wait_s
        for future in futures:
            try:
                error = future.exception(wait_s)
            except ClientTimeoutError as timeout:
                raise DeliveryError(str(timeout)) from timeout
            if error is not None:
                raise DeliveryError(
                    f"a record for {future.topic}-{future.partition} was not written: {error}"
                ) from error
        columns = {
            "topic": [topic] * len(futures) if topic is not None else [f.topic for f in futures],
            "partition": [f.partition for f in futures],
            "bytes": sizes,
            "index": range(len(futures)),
        }
        groups = (
            pa.table(columns)
            .group_by(["topic", "partition"], use_threads=False)
            .aggregate([("bytes", "sum"), ("bytes", "count"), ("index", "min"), ("index", "max")])
            .to_pylist()
        )
        partitions = self._partitions
        for group in groups:
            where = TopicPartition(group["topic"], group["partition"])
            last = futures[group["index_max"]].result(0).offset
            delivery = partitions.get(where)
            if delivery is None:
                first = futures[group["index_min"]].result(0).offset
                delivery = partitions[where] = PartitionDelivery(0, 0, first, last)
            delivery.records += group["bytes_count"]
            delivery.bytes += group["bytes_sum"]
            delivery.last_offset = last
