"""The metadata image: the cluster's metadata as the result of applying metadata records in log
order to an empty image (Kafka's ``MetadataImage``), and ``replay``, which applies a snapshot
or a delta and answers what changed (Kafka's ``MetadataDelta.replay``; see delta.py).

This is the one place the records of proto/brook/v1/metadata.proto are interpreted; every
process (controllers, storage nodes, group coordinators, gateways) holds one of these and reads
it through a view of its own. The rules:

- Records are whole-object upserts (docs/decisions.md): applying one is a replace or a delete,
  and applying a record twice changes nothing.
- A partition record for a topic the image does not hold changes nothing: the controller writes
  the topic record first, and a snapshot lists a topic before its partitions.
- ``remove_broker`` removes the broker only when its broker epoch matches the registered one;
  a removal stamped with an older epoch is stale and ignored.
- A topic record under the name of a topic with another id replaces that topic: the old topic,
  its partitions and its configs go first.
- Configs are kept by (resource type, resource name), whether or not the resource exists yet;
  a topic's configs go with the topic.

``records()`` is the image as records again, in one canonical order: what a snapshot stores,
what WatchMetadata sends first, and what ``digest()`` is computed over, so two images that are
equal give equal bytes whatever their history.

Not thread-safe: each owner mutates its image from one thread (or the event loop) only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Self, TypeVar

from google.protobuf.message import Message

from brook.metadata.delta import ConfigKey, MetadataDelta, MetadataUpdate
from brook.metadata.digest import metadata_digest
from brook.v1 import common_pb2, metadata_pb2

__all__ = ["BROKER", "TOPIC", "MetadataImage"]

TOPIC: int = metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC
BROKER: int = metadata_pb2.CONFIG_RESOURCE_TYPE_BROKER


@dataclass
class MetadataImage:
    """Brokers, topics, partitions, configs, producer ids and coordinators, plus the metadata
    log offset: the number of records applied to reach this image (-1 before the first), or
    the offset the last replayed update named."""

    offset: int = -1
    cluster: metadata_pb2.ClusterRecord | None = None
    brokers: dict[int, metadata_pb2.BrokerRecord] = field(default_factory=dict)
    topics: dict[bytes, metadata_pb2.TopicRecord] = field(default_factory=dict)
    topic_ids: dict[str, bytes] = field(default_factory=dict)
    partitions: dict[bytes, dict[int, metadata_pb2.PartitionRecord]] = field(default_factory=dict)
    configs: dict[ConfigKey, dict[str, str]] = field(default_factory=dict)
    producer_ids: metadata_pb2.ProducerIdsRecord | None = None
    coordinators: dict[int, metadata_pb2.CoordinatorRecord] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: Iterable[metadata_pb2.MetadataRecord], offset: int) -> Self:
        image = cls()
        for record in records:
            image.apply(record)
        image.offset = offset
        return image

    # ------------------------------------------------------------------ replay

    def replay(self, update: MetadataUpdate) -> MetadataDelta:
        """Applies a snapshot (the image becomes exactly its records) or a delta, sets the
        offset to the update's, and returns what changed. A delta costs in proportion to its
        records; a snapshot is compared with the image it replaces."""
        if update.snapshot:
            fresh = type(self).from_records(update.records, update.offset)
            delta = self._compare(fresh)
            for f in fields(self):
                setattr(self, f.name, getattr(fresh, f.name))
            return delta
        delta = MetadataDelta()
        for record in update.records:
            self.apply(record, delta)
        self.offset = update.offset
        return delta

    def apply(
        self, record: metadata_pb2.MetadataRecord, delta: MetadataDelta | None = None
    ) -> None:
        """Applies one record, advances the offset by one and notes the change in ``delta``.
        Records that refer to an object that does not exist (a partition of a deleted topic)
        change nothing but the offset, so every replica stays identical whatever arrives."""
        if delta is None:
            delta = MetadataDelta()
        kind = record.WhichOneof("record")
        if kind == "cluster":
            if self.cluster != record.cluster:
                self.cluster = _copy(record.cluster)
                delta.cluster_changed = True
        elif kind == "broker":
            if self.brokers.get(record.broker.node_id) != record.broker:
                broker = self.brokers[record.broker.node_id] = _copy(record.broker)
                delta.broker_changed(broker)
        elif kind == "remove_broker":
            existing = self.brokers.get(record.remove_broker.node_id)
            if existing is not None and existing.broker_epoch == record.remove_broker.broker_epoch:
                del self.brokers[record.remove_broker.node_id]
                delta.broker_removed(existing)
        elif kind == "topic":
            self._apply_topic(record.topic, delta)
        elif kind == "remove_topic":
            self._remove_topic(record.remove_topic.topic_id, delta)
        elif kind == "partition":
            self._apply_partition(record.partition, delta)
        elif kind == "config":
            self._apply_config(record.config, delta)
        elif kind == "producer_ids":
            if self.producer_ids != record.producer_ids:
                self.producer_ids = _copy(record.producer_ids)
                delta.producer_ids_changed = True
        elif kind == "coordinator":
            index = record.coordinator.offsets_partition
            if self.coordinators.get(index) != record.coordinator:
                coordinator = self.coordinators[index] = _copy(record.coordinator)
                delta.changed_coordinators[index] = coordinator
        self.offset += 1

    def _apply_topic(self, topic: metadata_pb2.TopicRecord, delta: MetadataDelta) -> None:
        previous_id = self.topic_ids.get(topic.name)
        if previous_id is not None and previous_id != topic.topic_id:
            self._remove_topic(previous_id, delta)
        existing = self.topics.get(topic.topic_id)
        if existing == topic:
            return
        if existing is not None and existing.name != topic.name:
            del self.topic_ids[existing.name]
        copied = self.topics[topic.topic_id] = _copy(topic)
        self.topic_ids[topic.name] = topic.topic_id
        self.partitions.setdefault(topic.topic_id, {})
        self._topic_replaced(existing, copied)
        delta.topic_changed(copied)

    def _remove_topic(self, topic_id: bytes, delta: MetadataDelta) -> None:
        topic = self.topics.pop(topic_id, None)
        if topic is None:
            return
        self.topic_ids.pop(topic.name, None)
        for partition in self.partitions.pop(topic_id, {}).values():
            self._partition_replaced(partition, None)
            delta.partition_removed(partition)
        if self.configs.pop((TOPIC, topic.name), None) is not None:
            delta.changed_configs.add((TOPIC, topic.name))
        self._topic_replaced(topic, None)
        delta.topic_removed(topic)

    def _apply_partition(
        self, partition: metadata_pb2.PartitionRecord, delta: MetadataDelta
    ) -> None:
        partitions = self.partitions.get(partition.topic_id)
        if partition.topic_id not in self.topics or partitions is None:
            return
        previous = partitions.get(partition.partition)
        if previous == partition:
            return
        copied = partitions[partition.partition] = _copy(partition)
        self._partition_replaced(previous, copied)
        delta.partition_changed(copied)

    def _apply_config(self, config: metadata_pb2.ConfigRecord, delta: MetadataDelta) -> None:
        key = (int(config.resource_type), config.resource_name)
        if config.HasField("value"):
            current = self.configs.setdefault(key, {})
            if current.get(config.name) != config.value:
                current[config.name] = config.value
                delta.changed_configs.add(key)
            return
        values = self.configs.get(key)
        if values is not None and values.pop(config.name, None) is not None:
            delta.changed_configs.add(key)
            if not values:
                del self.configs[key]

    # Hooks for a subclass that keeps figures derived from the image up to date as it changes
    # (the controller's placement load), instead of walking the image.

    def _topic_replaced(
        self, previous: metadata_pb2.TopicRecord | None, current: metadata_pb2.TopicRecord | None
    ) -> None:
        """A topic was added (previous None), changed, or removed (current None)."""

    def _partition_replaced(
        self,
        previous: metadata_pb2.PartitionRecord | None,
        current: metadata_pb2.PartitionRecord | None,
    ) -> None:
        """A partition was added (previous None), changed, or removed (current None)."""

    def _compare(self, other: MetadataImage) -> MetadataDelta:
        """What turning this image into ``other`` changes, for a snapshot."""
        delta = MetadataDelta(
            snapshot=True,
            cluster_changed=self.cluster != other.cluster,
            producer_ids_changed=self.producer_ids != other.producer_ids,
        )
        for node_id, broker in self.brokers.items():
            if node_id not in other.brokers:
                delta.broker_removed(broker)
        for node_id, broker in other.brokers.items():
            if self.brokers.get(node_id) != broker:
                delta.broker_changed(broker)
        for topic_id, topic in self.topics.items():
            if topic_id not in other.topics:
                delta.topic_removed(topic)
        for topic_id, topic in other.topics.items():
            if self.topics.get(topic_id) != topic:
                delta.topic_changed(topic)
        for topic_id, partitions in self.partitions.items():
            kept = other.partitions.get(topic_id, {})
            for index, partition in partitions.items():
                if index not in kept:
                    delta.partition_removed(partition)
        for topic_id, partitions in other.partitions.items():
            before = self.partitions.get(topic_id, {})
            for index, partition in partitions.items():
                if before.get(index) != partition:
                    delta.partition_changed(partition)
        for key in self.configs.keys() | other.configs.keys():
            if self.configs.get(key) != other.configs.get(key):
                delta.changed_configs.add(key)
        for index, coordinator in other.coordinators.items():
            if self.coordinators.get(index) != coordinator:
                delta.changed_coordinators[index] = coordinator
        return delta

    # ------------------------------------------------------------------ queries

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id if self.cluster is not None else ""

    def topic_by_name(self, name: str) -> metadata_pb2.TopicRecord | None:
        topic_id = self.topic_ids.get(name)
        return self.topics.get(topic_id) if topic_id is not None else None

    def topic_partitions(self, topic_id: bytes) -> dict[int, metadata_pb2.PartitionRecord]:
        return self.partitions.get(topic_id, {})

    def partition(self, topic_id: bytes, index: int) -> metadata_pb2.PartitionRecord | None:
        return self.partitions.get(topic_id, {}).get(index)

    def all_partitions(self) -> Iterator[metadata_pb2.PartitionRecord]:
        """Every partition, by topic name then index."""
        for name in sorted(self.topic_ids):
            partitions = self.partitions.get(self.topic_ids[name], {})
            for index in sorted(partitions):
                yield partitions[index]

    def resource_configs(self, resource_type: int, resource_name: str) -> dict[str, str]:
        return dict(self.configs.get((resource_type, resource_name), {}))

    def live_brokers(self, role: int = common_pb2.NODE_ROLE_STORAGE_NODE) -> list[int]:
        """Registered, unfenced nodes of a role, by id."""
        return sorted(
            node_id
            for node_id, broker in self.brokers.items()
            if broker.role == role and not broker.fenced
        )

    def is_live(self, node_id: int) -> bool:
        """Unfenced and not shutting down: may lead and be added to an ISR."""
        broker = self.brokers.get(node_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    # ------------------------------------------------------------------ as records

    def records(self) -> Iterator[metadata_pb2.MetadataRecord]:
        """The image as records, in canonical order; applying them to an empty image gives an
        equal image."""
        if self.cluster is not None:
            yield metadata_pb2.MetadataRecord(cluster=self.cluster)
        for node_id in sorted(self.brokers):
            yield metadata_pb2.MetadataRecord(broker=self.brokers[node_id])
        for name in sorted(self.topic_ids):
            topic_id = self.topic_ids[name]
            yield metadata_pb2.MetadataRecord(topic=self.topics[topic_id])
            partitions = self.partitions.get(topic_id, {})
            for index in sorted(partitions):
                yield metadata_pb2.MetadataRecord(partition=partitions[index])
        for resource_type, resource_name in sorted(self.configs):
            values = self.configs[(resource_type, resource_name)]
            for name in sorted(values):
                yield metadata_pb2.MetadataRecord(
                    config=metadata_pb2.ConfigRecord(
                        resource_type=resource_type,  # type: ignore[arg-type]
                        resource_name=resource_name,
                        name=name,
                        value=values[name],
                    )
                )
        if self.producer_ids is not None:
            yield metadata_pb2.MetadataRecord(producer_ids=self.producer_ids)
        for offsets_partition in sorted(self.coordinators):
            yield metadata_pb2.MetadataRecord(coordinator=self.coordinators[offsets_partition])

    def digest(self) -> str:
        return metadata_digest(self.records(), self.offset)


_M = TypeVar("_M", bound=Message)


def _copy(message: _M) -> _M:
    """A record owned by the image: the caller's message may be reused or mutated later."""
    copied = type(message)()
    copied.CopyFrom(message)
    return copied
