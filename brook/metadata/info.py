"""Typed reads of the image's records, for the views that serve requests from them (the
storage node's, the gateway's and the coordinator's): ``BrokerInfo`` (with its
``EndpointInfo``s), ``PartitionInfo`` and ``TopicInfo``. Built once per change by
``MetadataCache``, so a request reads plain tuples and ints instead of protobuf containers.

All are immutable except in one respect: a ``TopicInfo``'s ``partitions`` is a read-only view
that follows the partition records (the cache replaces the ``PartitionInfo``s behind it); the
``TopicInfo`` itself is replaced when its TopicRecord changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from brook.rpc.addresses import GRPC_LISTENER, listener_address
from brook.v1 import common_pb2, metadata_pb2

__all__ = [
    "NO_LEADER",
    "BrokerInfo",
    "EndpointInfo",
    "PartitionInfo",
    "TopicInfo",
    "TopicPartitionKey",
    "endpoint_protos",
]

# Kafka's sentinel for "no leader" (an offline partition) and for an unknown node.
NO_LEADER: Final = -1

TopicPartitionKey = tuple[str, int]
"""(topic name, partition index)."""


class EndpointInfo(NamedTuple):
    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered node (any role), as its last BrokerRecord said."""

    node_id: int
    broker_epoch: int
    role: int
    """A brook.v1.NodeRole value."""
    endpoints: tuple[EndpointInfo, ...]
    rack: str
    fenced: bool
    in_controlled_shutdown: bool = False

    @classmethod
    def from_record(cls, record: metadata_pb2.BrokerRecord) -> BrokerInfo:
        return cls(
            node_id=record.node_id,
            broker_epoch=record.broker_epoch,
            role=record.role,
            endpoints=tuple(EndpointInfo(e.listener, e.host, e.port) for e in record.endpoints),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )

    @property
    def isr_eligible(self) -> bool:
        """The controllers take it into an ISR (Kafka's isReplicaIsrEligible): neither fenced
        nor shutting down."""
        return not self.fenced and not self.in_controlled_shutdown

    def address(self, listener: str = GRPC_LISTENER) -> str | None:
        """``host:port`` of ``listener`` (IPv6 bracketed), for gRPC; Kafka's Metadata takes
        host and port from ``endpoints`` unformatted."""
        return listener_address(self.endpoints, listener)


class PartitionInfo(NamedTuple):
    """The state of one partition the services act on, as the last PartitionRecord for it said.
    ``topic`` is the name of the topic its id names (the image refuses a record whose ``topic``
    field says otherwise). ``removing``: the replicas a reassignment in progress takes away
    (the target is ``replicas`` without them).

    A named tuple rather than a frozen dataclass: a snapshot builds one per partition on the
    event loop, and a tuple is built several times faster."""

    topic: str
    partition: int
    topic_id: bytes
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: metadata_pb2.PartitionRecord, topic: str) -> PartitionInfo:
        """``record``, a partition of topic ``topic`` (its TopicRecord's name)."""
        # tuple(list) is faster than tuple() over a protobuf repeated field.
        return cls(
            topic,
            record.partition,
            record.topic_id,
            tuple(record.replicas[:]),
            tuple(record.isr[:]),
            record.leader,
            record.leader_epoch,
            record.partition_epoch,
            tuple(record.removing_replicas[:]),
        )

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic and its partitions by index. Replaced when its TopicRecord changes;
    ``partitions`` is a read-only view that follows the partition records."""

    name: str
    topic_id: bytes
    internal: bool
    partitions: Mapping[int, PartitionInfo]


def endpoint_protos(endpoints: tuple[EndpointInfo, ...]) -> list[common_pb2.Endpoint]:
    """The endpoints as brook.v1.Endpoint messages (for hints and GetMetadata)."""
    return [common_pb2.Endpoint(listener=e.listener, host=e.host, port=e.port) for e in endpoints]
