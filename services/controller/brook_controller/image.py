"""The metadata image: the cluster's metadata as the result of applying metadata records in log
order to an empty image.

Records are whole-object upserts (docs/decisions.md), so ``apply`` is a plain replace or delete
and applying a record twice changes nothing. ``records()`` is the image as records again, in
one canonical order: what a snapshot stores, what WatchMetadata sends first, and what the
digest is computed over, so two controllers with equal images produce equal bytes.

The image is not thread-safe; the state machine and the controller each own one (see
state_machine.py and metadata_view.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import Message

from brook.metadata.digest import metadata_digest
from brook.v1 import common_pb2, metadata_pb2
from brook_controller.placement import Load

__all__ = [
    "ConfigKey",
    "MetadataImage",
    "broker_key",
    "cluster_key",
    "configs_key",
    "coordinator_key",
    "partition_key",
    "producer_ids_key",
    "topic_family_key",
    "topic_name_key",
]

TOPIC: int = metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC
BROKER: int = metadata_pb2.CONFIG_RESOURCE_TYPE_BROKER

ConfigKey = tuple[int, str]
"""(ConfigResourceType, resource name)."""


# Object keys: what a proposal's preconditions name (see commands.py). Each key identifies one
# object of the image whose state a proposal was computed from.


def cluster_key() -> str:
    return "cluster"


def broker_key(node_id: int) -> str:
    return f"broker/{node_id}"


def topic_name_key(name: str) -> str:
    return f"topic/{name}"


def _fold(name: str) -> str:
    return name.replace(".", "_")


def topic_family_key(name: str) -> str:
    """Kafka refuses topics whose names differ only in '.' versus '_' (their metric names
    collide); this key names every topic of such a family at once."""
    return f"topic-family/{_fold(name)}"


def partition_key(topic_id: bytes, partition: int) -> str:
    return f"partition/{topic_id.hex()}/{partition}"


def configs_key(resource_type: int, resource_name: str) -> str:
    return f"configs/{resource_type}/{resource_name}"


def producer_ids_key() -> str:
    return "producer-ids"


def coordinator_key(offsets_partition: int) -> str:
    return f"coordinator/{offsets_partition}"


def _serialize(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


@dataclass
class MetadataImage:
    """Brokers, topics, partitions, configs, producer ids and coordinators, plus the metadata
    log offset: the number of records applied to reach this image (-1 before the first)."""

    offset: int = -1
    cluster: metadata_pb2.ClusterRecord | None = None
    brokers: dict[int, metadata_pb2.BrokerRecord] = field(default_factory=dict)
    topics: dict[bytes, metadata_pb2.TopicRecord] = field(default_factory=dict)
    topic_ids: dict[str, bytes] = field(default_factory=dict)
    partitions: dict[bytes, dict[int, metadata_pb2.PartitionRecord]] = field(default_factory=dict)
    configs: dict[ConfigKey, dict[str, str]] = field(default_factory=dict)
    producer_ids: metadata_pb2.ProducerIdsRecord | None = None
    coordinators: dict[int, metadata_pb2.CoordinatorRecord] = field(default_factory=dict)
    # Topic names by their '.'/'_'-folded form (see topic_family_key).
    families: dict[str, set[str]] = field(default_factory=dict)
    # Kept as partitions change, so placing new ones does not walk every partition.
    load: Load = field(default_factory=Load)

    @classmethod
    def from_records(
        cls, records: Iterable[metadata_pb2.MetadataRecord], offset: int
    ) -> MetadataImage:
        image = cls()
        for record in records:
            image.apply(record)
        image.offset = offset
        return image

    # ------------------------------------------------------------------ apply

    def apply(self, record: metadata_pb2.MetadataRecord) -> None:
        """Applies one record and advances the offset. Records that refer to an object that
        does not exist (a partition of a deleted topic) change nothing but the offset, so
        every replica stays identical whatever arrives."""
        kind = record.WhichOneof("record")
        if kind == "cluster":
            self.cluster = _copy(record.cluster)
        elif kind == "broker":
            self.brokers[record.broker.node_id] = _copy(record.broker)
        elif kind == "remove_broker":
            existing = self.brokers.get(record.remove_broker.node_id)
            if existing is not None and existing.broker_epoch == record.remove_broker.broker_epoch:
                del self.brokers[record.remove_broker.node_id]
        elif kind == "topic":
            self._apply_topic(record.topic)
        elif kind == "remove_topic":
            self._remove_topic(record.remove_topic.topic_id)
        elif kind == "partition":
            partition = record.partition
            if partition.topic_id in self.topics:
                partitions = self.partitions[partition.topic_id]
                previous = partitions.get(partition.partition)
                if previous is not None:
                    self.load.add(previous.replicas, -1)
                partitions[partition.partition] = _copy(partition)
                self.load.add(partition.replicas)
        elif kind == "config":
            self._apply_config(record.config)
        elif kind == "producer_ids":
            self.producer_ids = _copy(record.producer_ids)
        elif kind == "coordinator":
            self.coordinators[record.coordinator.offsets_partition] = _copy(record.coordinator)
        self.offset += 1

    def _apply_topic(self, topic: metadata_pb2.TopicRecord) -> None:
        previous_id = self.topic_ids.get(topic.name)
        if previous_id is not None and previous_id != topic.topic_id:
            self._remove_topic(previous_id)
        existing = self.topics.get(topic.topic_id)
        if existing is not None and existing.name != topic.name:
            del self.topic_ids[existing.name]
            self._forget_family(existing.name)
        self.topics[topic.topic_id] = _copy(topic)
        self.topic_ids[topic.name] = topic.topic_id
        self.families.setdefault(_fold(topic.name), set()).add(topic.name)
        self.partitions.setdefault(topic.topic_id, {})

    def _remove_topic(self, topic_id: bytes) -> None:
        topic = self.topics.pop(topic_id, None)
        if topic is None:
            return
        self.topic_ids.pop(topic.name, None)
        self._forget_family(topic.name)
        for partition in self.partitions.pop(topic_id, {}).values():
            self.load.add(partition.replicas, -1)
        self.configs.pop((TOPIC, topic.name), None)

    def _forget_family(self, name: str) -> None:
        members = self.families.get(_fold(name))
        if members is not None:
            members.discard(name)
            if not members:
                del self.families[_fold(name)]

    def _apply_config(self, config: metadata_pb2.ConfigRecord) -> None:
        key = (int(config.resource_type), config.resource_name)
        if config.HasField("value"):
            self.configs.setdefault(key, {})[config.name] = config.value
            return
        values = self.configs.get(key)
        if values is not None:
            values.pop(config.name, None)
            if not values:
                del self.configs[key]

    # ------------------------------------------------------------------ queries

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id if self.cluster is not None else ""

    def topic_by_name(self, name: str) -> metadata_pb2.TopicRecord | None:
        topic_id = self.topic_ids.get(name)
        return self.topics.get(topic_id) if topic_id is not None else None

    def topics_colliding_with(self, name: str) -> list[str]:
        """Existing topics whose names equal ``name`` once '.' and '_' are treated alike."""
        return sorted(self.families.get(_fold(name), ()))

    def topic_partitions(self, topic_id: bytes) -> dict[int, metadata_pb2.PartitionRecord]:
        return self.partitions.get(topic_id, {})

    def partition(self, topic_id: bytes, index: int) -> metadata_pb2.PartitionRecord | None:
        return self.partitions.get(topic_id, {}).get(index)

    def all_partitions(self) -> Iterator[metadata_pb2.PartitionRecord]:
        for topic_id in sorted(self.topics, key=lambda tid: self.topics[tid].name):
            partitions = self.partitions.get(topic_id, {})
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

    # ------------------------------------------------------------------ versions

    def version(self, key: str) -> bytes:
        """The state of the object named by ``key``, as bytes that are equal on two replicas
        exactly when the object is: a proposal's preconditions compare these."""
        kind, _, rest = key.partition("/")
        message: Message | None
        if kind == "cluster":
            message = self.cluster
        elif kind == "broker":
            message = self.brokers.get(int(rest))
        elif kind == "topic":
            message = self.topic_by_name(rest)
        elif kind == "topic-family":
            return b"\0".join(n.encode() for n in self.topics_colliding_with(rest))
        elif kind == "partition":
            topic_hex, _, index = rest.partition("/")
            message = self.partition(bytes.fromhex(topic_hex), int(index))
        elif kind == "configs":
            resource_type, _, resource_name = rest.partition("/")
            values = self.configs.get((int(resource_type), resource_name), {})
            return b"\0".join(f"{n}={v}".encode() for n, v in sorted(values.items()))
        elif kind == "producer-ids":
            message = self.producer_ids
        elif kind == "coordinator":
            message = self.coordinators.get(int(rest))
        else:
            raise ValueError(f"unknown object key {key!r}")
        # An absent object and an empty one must differ.
        return b"" if message is None else b"=" + _serialize(message)

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
