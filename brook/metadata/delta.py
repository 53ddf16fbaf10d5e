"""What one metadata update changed (Kafka's ``MetadataDelta``), as ``MetadataImage.replay`` says.

A ``MetadataUpdate`` is one message of a WatchMetadata stream: a whole image (``snapshot``) or
records to apply on top, and the metadata log offset it brings the image to. Replaying it on
an image gives a ``MetadataDelta``: the objects it added or changed (their new records) and the
objects it removed (their last records), so a consumer acts on what was touched without
comparing images. A delta is net: a partition changed and then removed in the same update is
only removed; a record equal to the one the image holds changes nothing and is not reported.

The records a delta holds are the image's own (see image.py): read them, never mutate them.
The ``previous_*`` maps keep what the image held before the update (Kafka's delta keeps the
image it started from), so a consumer can tell what a change changed without a copy of its
own.

A partition is removed when its topic is deleted, when its topic is re-created under the same
name with a new id (the new topic's partitions are then changed, under the new id), or when a
snapshot lacks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from brook.v1 import metadata_pb2

__all__ = ["ConfigKey", "MetadataDelta", "MetadataUpdate", "PartitionKey"]

ConfigKey = tuple[int, str]
"""(ConfigResourceType, resource name)."""

PartitionKey = tuple[bytes, int]
"""(topic id, partition index)."""


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """One message of a metadata stream: a whole image (``snapshot``) or a delta, and the
    metadata log offset it brings the image to (WatchMetadataResponse's shape)."""

    snapshot: bool
    offset: int
    records: tuple[metadata_pb2.MetadataRecord, ...]


@dataclass(slots=True)
class MetadataDelta:
    """The objects one update added, changed or removed. Filled in by the image while it
    replays; read-only to consumers."""

    snapshot: bool = False
    """The update replaced the whole image (a consumer that mirrors state may rebuild)."""
    cluster_changed: bool = False
    producer_ids_changed: bool = False
    changed_brokers: dict[int, metadata_pb2.BrokerRecord] = field(default_factory=dict)
    removed_brokers: dict[int, metadata_pb2.BrokerRecord] = field(default_factory=dict)
    changed_topics: dict[bytes, metadata_pb2.TopicRecord] = field(default_factory=dict)
    removed_topics: dict[bytes, metadata_pb2.TopicRecord] = field(default_factory=dict)
    changed_partitions: dict[PartitionKey, metadata_pb2.PartitionRecord] = field(
        default_factory=dict
    )
    removed_partitions: dict[PartitionKey, metadata_pb2.PartitionRecord] = field(
        default_factory=dict
    )
    previous_brokers: dict[int, metadata_pb2.BrokerRecord | None] = field(default_factory=dict)
    """For each broker changed or removed: its record before the update (None: it was not
    registered)."""
    previous_partitions: dict[PartitionKey, metadata_pb2.PartitionRecord | None] = field(
        default_factory=dict
    )
    """For each partition changed or removed: its record before the update (None: it did not
    exist)."""
    changed_configs: set[ConfigKey] = field(default_factory=set)
    """Resources whose configuration changed (a value set, replaced or removed)."""
    changed_coordinators: dict[int, metadata_pb2.CoordinatorRecord] = field(default_factory=dict)
    removed_coordinators: dict[int, metadata_pb2.CoordinatorRecord] = field(default_factory=dict)
    """Assignments that no longer exist (no record removes one: only a snapshot lacking it)."""
    security_changed: bool = False
    """A SCRAM credential, an ACL or a client quota was added, changed or removed: whoever
    derives state from them (an authorizer, a quota manager) rebuilds it."""

    @property
    def empty(self) -> bool:
        return not (
            self.snapshot
            or self.cluster_changed
            or self.producer_ids_changed
            or self.changed_brokers
            or self.removed_brokers
            or self.changed_topics
            or self.removed_topics
            or self.changed_partitions
            or self.removed_partitions
            or self.changed_configs
            or self.changed_coordinators
            or self.removed_coordinators
            or self.security_changed
        )

    def changed_topic_configs(self) -> frozenset[str]:
        """Names of the topics whose configuration changed."""
        return frozenset(
            name
            for resource_type, name in self.changed_configs
            if resource_type == metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC
        )

    # -- filled in by the image ---------------------------------------------------------------

    def broker_changed(
        self, broker: metadata_pb2.BrokerRecord, previous: metadata_pb2.BrokerRecord | None
    ) -> None:
        self.previous_brokers.setdefault(broker.node_id, previous)
        self.removed_brokers.pop(broker.node_id, None)
        self.changed_brokers[broker.node_id] = broker

    def broker_removed(self, broker: metadata_pb2.BrokerRecord) -> None:
        self.previous_brokers.setdefault(broker.node_id, broker)
        self.changed_brokers.pop(broker.node_id, None)
        self.removed_brokers[broker.node_id] = broker

    def topic_changed(self, topic: metadata_pb2.TopicRecord) -> None:
        self.removed_topics.pop(topic.topic_id, None)
        self.changed_topics[topic.topic_id] = topic

    def topic_removed(self, topic: metadata_pb2.TopicRecord) -> None:
        self.changed_topics.pop(topic.topic_id, None)
        self.removed_topics[topic.topic_id] = topic

    def partition_changed(
        self,
        partition: metadata_pb2.PartitionRecord,
        previous: metadata_pb2.PartitionRecord | None,
    ) -> None:
        key = (partition.topic_id, partition.partition)
        self.previous_partitions.setdefault(key, previous)
        self.removed_partitions.pop(key, None)
        self.changed_partitions[key] = partition

    def partition_removed(self, partition: metadata_pb2.PartitionRecord) -> None:
        key = (partition.topic_id, partition.partition)
        self.previous_partitions.setdefault(key, partition)
        self.changed_partitions.pop(key, None)
        self.removed_partitions[key] = partition

    def coordinator_changed(self, coordinator: metadata_pb2.CoordinatorRecord) -> None:
        self.removed_coordinators.pop(coordinator.offsets_partition, None)
        self.changed_coordinators[coordinator.offsets_partition] = coordinator

    def coordinator_removed(self, coordinator: metadata_pb2.CoordinatorRecord) -> None:
        self.changed_coordinators.pop(coordinator.offsets_partition, None)
        self.removed_coordinators[coordinator.offsets_partition] = coordinator
