"""The node's image of cluster metadata: brokers, topics, partitions and topic configs.

Built by applying ``MetadataRecord``s (proto/brook/v1/metadata.proto) in log order, exactly as
a ``WatchMetadata`` follower receives them: a snapshot replaces the whole image, a delta is
applied on top of it. Every record is a whole-object upsert, so applying one twice changes
nothing (docs/decisions.md). ``apply`` answers what changed, as a ``MetadataDelta``: the
replica manager turns that into "become leader / become follower / stop serving" without
knowing where the records came from (static configuration today, the controller later).

Mutated only from the event loop, and never across an ``await``, so readers on the loop
always see one consistent image.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from brook.v1 import common_pb2, metadata_pb2

__all__ = [
    "NO_LEADER",
    "BrokerInfo",
    "EndpointInfo",
    "MetadataDelta",
    "MetadataUpdate",
    "MetadataView",
    "PartitionInfo",
    "TopicInfo",
]

# Kafka's sentinel for "no leader" (an offline partition) and for an unknown controller.
NO_LEADER: Final = -1
NO_OFFSET: Final = -1

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """One message of a metadata stream: a whole image (``snapshot``) or a delta, and the
    metadata log offset it brings the image to (WatchMetadataResponse's shape)."""

    snapshot: bool
    offset: int
    records: tuple[metadata_pb2.MetadataRecord, ...]


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    broker_epoch: int
    role: int
    """A brook.v1.NodeRole value."""
    endpoints: tuple[EndpointInfo, ...]
    rack: str
    fenced: bool
    in_controlled_shutdown: bool = False

    @property
    def isr_eligible(self) -> bool:
        """The controllers take it into an ISR (Kafka's isReplicaIsrEligible): neither fenced
        nor shutting down."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """The whole state of one partition, as the last PartitionRecord for it said."""

    topic: str
    partition: int
    topic_id: bytes
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes
    internal: bool
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """What one update changed, in the terms the replica manager acts on."""

    changed_partitions: tuple[PartitionInfo, ...]
    """Partitions that are new or whose state differs from before."""
    removed_partitions: tuple[TopicPartitionKey, ...]
    """Partitions that no longer exist (their topic was deleted, or a snapshot lacks them)."""
    changed_topic_configs: frozenset[str]
    """Topics whose configuration overrides changed."""

    @property
    def empty(self) -> bool:
        return not (
            self.changed_partitions or self.removed_partitions or self.changed_topic_configs
        )


class MetadataView:
    """The image. ``apply`` updates it; the rest reads it."""

    def __init__(self) -> None:
        self.cluster_id = ""
        self.controller_id = NO_LEADER
        self.offset = NO_OFFSET
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        # Kept apart from the topics: a config may be set before its topic record arrives.
        self._topic_configs: dict[str, dict[str, str]] = {}

    # -- reading ----------------------------------------------------------------------------

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]:
        return self._brokers

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self._brokers.get(node_id)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self._topics.get(topic)
        return None if info is None else info.partitions.get(partition)

    def partitions(self) -> Iterator[PartitionInfo]:
        for topic in self._topics.values():
            yield from topic.partitions.values()

    def topic_configs(self, topic: str) -> Mapping[str, str]:
        """The topic's configuration overrides (topic-level names), empty if none."""
        return self._topic_configs.get(topic, {})

    # -- applying ---------------------------------------------------------------------------

    def apply(self, update: MetadataUpdate) -> MetadataDelta:
        """Apply a snapshot or a delta; returns what changed. Records of kinds the storage
        node does not use yet (producer ids, coordinators) are accepted and ignored."""
        before_partitions = {info.key: info for info in self.partitions()}
        before_configs = {topic: dict(configs) for topic, configs in self._topic_configs.items()}
        if update.snapshot:
            self._brokers.clear()
            self._topics.clear()
            self._topic_configs.clear()
            self.controller_id = NO_LEADER
        for record in update.records:
            self._apply_record(record)
        self.offset = update.offset
        after_partitions = {info.key: info for info in self.partitions()}
        changed = tuple(
            info for key, info in after_partitions.items() if before_partitions.get(key) != info
        )
        # A partition whose topic id changed belongs to a re-created topic: the old replica
        # goes (removed) before the new one comes (changed).
        removed = tuple(
            key
            for key, info in before_partitions.items()
            if key not in after_partitions or after_partitions[key].topic_id != info.topic_id
        )
        topics = set(before_configs) | set(self._topic_configs)
        changed_configs = frozenset(
            topic
            for topic in topics
            if before_configs.get(topic, {}) != self._topic_configs.get(topic, {})
        )
        return MetadataDelta(changed, removed, changed_configs)

    def apply_records(
        self, records: Iterable[metadata_pb2.MetadataRecord], offset: int
    ) -> MetadataDelta:
        """A delta of ``records`` bringing the image to ``offset``."""
        return self.apply(MetadataUpdate(False, offset, tuple(records)))

    def _apply_record(self, record: metadata_pb2.MetadataRecord) -> None:
        kind = record.WhichOneof("record")
        if kind == "cluster":
            self.cluster_id = record.cluster.cluster_id
        elif kind == "broker":
            self._apply_broker(record.broker)
        elif kind == "remove_broker":
            self._brokers.pop(record.remove_broker.node_id, None)
        elif kind == "topic":
            self._apply_topic(record.topic)
        elif kind == "remove_topic":
            self._remove_topic(record.remove_topic)
        elif kind == "partition":
            self._apply_partition(record.partition)
        elif kind == "config":
            self._apply_config(record.config)

    def _apply_broker(self, broker: metadata_pb2.BrokerRecord) -> None:
        self._brokers[broker.node_id] = BrokerInfo(
            node_id=broker.node_id,
            broker_epoch=broker.broker_epoch,
            role=broker.role,
            endpoints=tuple(EndpointInfo(e.listener, e.host, e.port) for e in broker.endpoints),
            rack=broker.rack,
            fenced=broker.fenced,
            in_controlled_shutdown=broker.in_controlled_shutdown,
        )

    def _apply_topic(self, topic: metadata_pb2.TopicRecord) -> None:
        existing = self._topics.get(topic.name)
        if existing is not None and existing.topic_id == topic.topic_id:
            existing.internal = topic.internal
            return
        # A new id under an old name is a different topic: the old one's partitions go.
        self._topics[topic.name] = TopicInfo(topic.name, topic.topic_id, topic.internal)

    def _remove_topic(self, removal: metadata_pb2.RemoveTopicRecord) -> None:
        name = removal.name or next(
            (t.name for t in self._topics.values() if t.topic_id == removal.topic_id), ""
        )
        existing = self._topics.get(name)
        if existing is None or (removal.topic_id and existing.topic_id != removal.topic_id):
            return
        del self._topics[name]
        self._topic_configs.pop(name, None)

    def _apply_partition(self, record: metadata_pb2.PartitionRecord) -> None:
        topic = self._topics.get(record.topic)
        if topic is None:
            # The controller writes the topic record first; accepting the partition anyway
            # keeps a follower that resumed mid-way from dropping it.
            topic = TopicInfo(record.topic, record.topic_id, internal=False)
            self._topics[record.topic] = topic
        topic.partitions[record.partition] = PartitionInfo(
            topic=record.topic,
            partition=record.partition,
            topic_id=record.topic_id or topic.topic_id,
            replicas=tuple(record.replicas),
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
        )

    def _apply_config(self, record: metadata_pb2.ConfigRecord) -> None:
        if record.resource_type != metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC:
            return
        configs = self._topic_configs.setdefault(record.resource_name, {})
        if record.HasField("value"):
            configs[record.name] = record.value
        else:
            configs.pop(record.name, None)
            if not configs:
                del self._topic_configs[record.resource_name]


def endpoint_protos(endpoints: Iterable[EndpointInfo]) -> list[common_pb2.Endpoint]:
    """The endpoints as brook.v1.Endpoint messages (for hints and GetMetadata)."""
    return [common_pb2.Endpoint(listener=e.listener, host=e.host, port=e.port) for e in endpoints]
