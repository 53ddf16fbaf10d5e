"""The storage requests a consumer's settings shape, built in one place for every client that
sends them (the consumer's fetcher, the admin client, the Spark readers)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from brook.client.config import ConsumerConfig
from brook.client.types import TopicPartition
from brook.v1 import storage_pb2

__all__ = ["fetch_request", "list_offsets_request"]


def list_offsets_request(
    isolation_level: int,
    tps: Iterable[TopicPartition],
    specs: Mapping[TopicPartition, tuple[int, int]],
) -> storage_pb2.ListOffsetsRequest:
    """The ListOffsets request for ``tps``, each by its (OffsetSpec, timestamp ms) in
    ``specs``, at ``isolation_level`` (a common_pb2.IsolationLevel value)."""
    return storage_pb2.ListOffsetsRequest(
        isolation_level=isolation_level,  # type: ignore[arg-type]
        partitions=[
            storage_pb2.ListOffsetsPartition(
                topic=tp.topic,
                partition=tp.partition,
                spec=specs[tp][0],  # type: ignore[arg-type]
                timestamp_ms=specs[tp][1],
                current_leader_epoch=-1,
            )
            for tp in tps
        ],
    )


def fetch_request(
    config: ConsumerConfig, partitions: Iterable[tuple[TopicPartition, int, int]]
) -> storage_pb2.FetchRequest:
    """A Fetch of ``partitions`` (partition, fetch offset, the leader epoch believed current
    or -1) bounded as ``config`` says: its wait, sizes and isolation level."""
    return storage_pb2.FetchRequest(
        max_wait_ms=config.fetch_max_wait_ms,
        min_bytes=config.fetch_min_bytes,
        max_bytes=config.fetch_max_bytes,
        isolation_level=config.isolation_level,  # type: ignore[arg-type]
        partitions=[
            storage_pb2.FetchPartition(
                topic=tp.topic,
                partition=tp.partition,
                fetch_offset=position,
                partition_max_bytes=config.max_partition_fetch_bytes,
                current_leader_epoch=leader_epoch,
            )
            for tp, position, leader_epoch in partitions
        ],
    )
