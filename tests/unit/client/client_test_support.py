"""Helpers for the SDK's unit tests: a fixed cluster view and an accumulator wired to it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import MappingProxyType

from brook.client.accumulator import RecordAccumulator
from brook.client.metadata import ClusterView, PartitionInfo, TopicInfo
from brook.client.runtime import Notifier, Wakeup
from brook.record import Compression

TOPIC = "events"
NODE_ADDRESS = "127.0.0.1:9101"
# grpc.aio starts one poller thread per process on first use and keeps it: not ours to stop.
GRPC_POLLER_THREAD = "_poll_wrapper"


class StaticMetadata:
    """Stands in for the metadata cache where no node is needed: a fixed view."""

    def __init__(self, cluster: ClusterView) -> None:
        self.cluster = cluster


def static_cluster(partitions: int, *, leaderless: tuple[int, ...] = ()) -> ClusterView:
    infos = tuple(PartitionInfo(p, -1 if p in leaderless else 1, 0) for p in range(partitions))
    available = tuple(p for p in range(partitions) if p not in leaderless)
    return ClusterView(
        MappingProxyType({1: NODE_ADDRESS}),
        MappingProxyType({TOPIC: TopicInfo(TOPIC, infos, available)}),
        MappingProxyType({}),
    )


_LOOP = asyncio.new_event_loop()  # never run: Wakeup only needs a loop to post to


def make_accumulator(
    cluster: ClusterView,
    *,
    batch_size: int = 16384,
    buffer_memory: int = 32 * 1024 * 1024,
    linger_ms: int = 5,
    max_request_size: int = 1024 * 1024,
    delivery_timeout_ms: int = 120_000,
    compression: Compression = Compression.NONE,
    ignore_keys: bool = False,
    notifier: Notifier | None = None,
) -> RecordAccumulator:
    return RecordAccumulator(
        metadata=StaticMetadata(cluster),
        notifier=notifier or Notifier(),
        wakeup=Wakeup(_LOOP),
        batch_size=batch_size,
        buffer_memory=buffer_memory,
        linger_ms=linger_ms,
        max_request_size=max_request_size,
        delivery_timeout_ms=delivery_timeout_ms,
        compression=compression,
        partitioner_ignore_keys=ignore_keys,
    )


def client_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not before, grpc's process-wide poller aside."""
    return [
        thread
        for thread in threading.enumerate()
        if thread not in before and GRPC_POLLER_THREAD not in thread.name
    ]


def all_drained(
    accumulator: RecordAccumulator, cluster: ClusterView
) -> Iterator[tuple[int, list[bytes]]]:
    """Drain everything now, as the sender would: (partition, sealed batches) per entry."""
    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1 << 30)
    for request in requests:
        for queue, batches in request.entries:
            yield queue.partition, [batch.seal(accumulator.compression) for batch in batches]


def make_producer_known(
    accumulator: RecordAccumulator, cluster: ClusterView, producer_id: int, epoch: int
) -> None:
    """Idempotent ``accumulator``: as after an epoch bump, the leader of each partition of
    TOPIC has appended a batch of ``producer_id`` (in ``epoch`` - 1), so new batches pipeline
    from the first one on; sequences start at 0 in ``epoch``. (A partition the leader does not
    know the producer on sends one batch at a time until one is acknowledged.)"""
    accumulator.reset_sequences(producer_id, epoch - 1)
    for info in cluster.topics[TOPIC].partitions:
        accumulator.append(TOPIC, b"earlier epoch", None, None, info.partition, None)
        requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1 << 30)
        [request] = requests
        [(queue, [batch])] = request.entries
        accumulator.complete(queue, [batch], 0, -1)
    accumulator.reset_sequences(producer_id, epoch)
