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
  a topic's configs go with the topic, including when a topic record replaces it under its
  name: configs for a topic must follow its topic record (the controllers write the topic,
  then its configs, then its partitions, and create a topic only under a free name).
- A partition record must name its topic id's topic (``topic``), and a topic removal its
  topic's name; one that does not is refused (see ``apply``).

``records()`` is the image as records again, in one canonical order: what a snapshot stores,
what WatchMetadata sends first, and what ``digest()`` is computed over, so two images that are
equal give equal bytes whatever their history.

Not thread-safe: each owner mutates its image from one thread (or the event loop) only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Final, Self, TypeVar

from google.protobuf.message import Message

from brook.metadata.delta import ConfigKey, MetadataDelta, MetadataUpdate
from brook.metadata.digest import metadata_digest
from brook.v1 import common_pb2, metadata_pb2

__all__ = [
    "BROKER",
    "TOPIC",
    "MetadataImage",
    "QuotaEntity",
    "quota_entity",
    "quota_entity_order",
    "quota_entity_parts",
]

_log = logging.getLogger(__name__)

TOPIC: int = metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC
BROKER: int = metadata_pb2.CONFIG_RESOURCE_TYPE_BROKER

QuotaEntity = tuple[tuple[str, str | None], ...]
"""A client quota entity: its (entity type, name) parts sorted by type; a None name is the
default entity of that type."""


def quota_entity(parts: Iterable[metadata_pb2.ClientQuotaEntityPart]) -> QuotaEntity:
    """The image's key of a ClientQuotaRecord's entity."""
    return tuple(
        sorted(
            (part.entity_type, part.entity_name if part.HasField("entity_name") else None)
            for part in parts
        )
    )


def quota_entity_parts(entity: QuotaEntity) -> list[metadata_pb2.ClientQuotaEntityPart]:
    """The ClientQuotaRecord entity of an image's key (``quota_entity``'s inverse)."""
    return [
        metadata_pb2.ClientQuotaEntityPart(entity_type=entity_type, entity_name=name)
        for entity_type, name in entity
    ]


@dataclass
class MetadataImage:
    """Brokers, topics, partitions, configs, producer ids, coordinators, SCRAM credentials, ACLs
    and client quotas, plus the metadata
    log offset: the offset of the last record applied (-1 before the first; ``apply`` adds one
    per record), or the offset the last replayed update named.

    The records it holds and hands out (attributes, ``partition()``, ``topic_by_name()``, a
    delta's records) are the image's own: callers read them and must not mutate them (the
    controllers' digest is computed over them). Copying each one out would cost on every read;
    this is a contract, not a guarantee. Each resource's config dict is replaced, never
    mutated, when a ConfigRecord changes it, so one that was read stays as it was read.

    A subclass (the controller's) keeps everything a snapshot must reset in dataclass fields:
    ``replay`` of a snapshot swaps every field for a fresh image's.
    """

    offset: int = -1
    cluster: metadata_pb2.ClusterRecord | None = None
    brokers: dict[int, metadata_pb2.BrokerRecord] = field(default_factory=dict)
    topics: dict[bytes, metadata_pb2.TopicRecord] = field(default_factory=dict)
    topic_ids: dict[str, bytes] = field(default_factory=dict)
    partitions: dict[bytes, dict[int, metadata_pb2.PartitionRecord]] = field(default_factory=dict)
    configs: dict[ConfigKey, dict[str, str]] = field(default_factory=dict)
    producer_ids: metadata_pb2.ProducerIdsRecord | None = None
    coordinators: dict[int, metadata_pb2.CoordinatorRecord] = field(default_factory=dict)
    scram_credentials: dict[tuple[str, int], metadata_pb2.UserScramCredentialRecord] = field(
        default_factory=dict
    )
    """By (user name, ScramMechanism)."""
    acls: dict[bytes, metadata_pb2.AccessControlEntryRecord] = field(default_factory=dict)
    """By ACL id."""
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    """Quota values by entity; each dict is replaced, never mutated, when a value changes."""

    @classmethod
    def from_records(cls, records: Iterable[metadata_pb2.MetadataRecord], offset: int) -> Self:
        image = cls()
        for record in records:
            image.apply(record)
        image.offset = offset
        return image

    # ------------------------------------------------------------------ replay

    def replay(self, update: MetadataUpdate, *, compare: bool = True) -> MetadataDelta:
        """Applies a snapshot (the image becomes exactly its records) or a delta, sets the
        offset to the update's, and returns what changed. A delta costs in proportion to its
        records. A snapshot is compared with the image it replaces, unless ``compare`` is
        False: then the delta only says ``snapshot`` (everything may have changed, nothing is
        listed), for a consumer that rebuilds everything after a snapshot anyway."""
        if update.snapshot:
            fresh = type(self).from_records(update.records, update.offset)
            delta = self._compare(fresh) if compare else MetadataDelta(snapshot=True)
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
        """Applies one record, advances the offset by one and, given a ``delta``, notes the
        change in it (without one, nothing is compared or noted: the cheap path for loading
        and for the state machine). Records that refer to an object that does not exist (a
        partition of a deleted topic) change nothing but the offset, so every replica stays
        identical whatever arrives.

        Records that contradict the image (a partition record whose topic name is not its
        topic id's, a topic removal whose name is not the id's) are refused: logged as an
        invariant error and otherwise ignored, identically on every consumer. The controllers
        always write both fields, so such a record means a bug; raising instead would stop
        the Raft state machine or a watcher on every replica at once."""
        kind = record.WhichOneof("record")
        if kind == "partition":
            self._apply_partition(record.partition, delta)
        elif kind == "broker":
            broker = record.broker
            previous = self.brokers.get(broker.node_id)
            if delta is None:
                self.brokers[broker.node_id] = _copy(broker)
            elif previous != broker:
                copied = self.brokers[broker.node_id] = _copy(broker)
                delta.broker_changed(copied, previous)
        elif kind == "remove_broker":
            existing = self.brokers.get(record.remove_broker.node_id)
            if existing is not None and existing.broker_epoch == record.remove_broker.broker_epoch:
                del self.brokers[record.remove_broker.node_id]
                if delta is not None:
                    delta.broker_removed(existing)
        elif kind == "topic":
            self._apply_topic(record.topic, delta)
        elif kind == "remove_topic":
            removal = record.remove_topic
            existing_topic = self.topics.get(removal.topic_id)
            if existing_topic is not None and existing_topic.name != removal.name:
                _refuse(record, f"topic id {removal.topic_id.hex()} is {existing_topic.name!r}")
            else:
                self._remove_topic(removal.topic_id, delta)
        elif kind == "config":
            self._apply_config(record.config, delta)
        elif kind == "cluster":
            if delta is None:
                self.cluster = _copy(record.cluster)
            elif self.cluster != record.cluster:
                self.cluster = _copy(record.cluster)
                delta.cluster_changed = True
        elif kind == "producer_ids":
            if delta is None:
                self.producer_ids = _copy(record.producer_ids)
            elif self.producer_ids != record.producer_ids:
                self.producer_ids = _copy(record.producer_ids)
                delta.producer_ids_changed = True
        elif kind == "coordinator":
            index = record.coordinator.offsets_partition
            if delta is None:
                self.coordinators[index] = _copy(record.coordinator)
            elif self.coordinators.get(index) != record.coordinator:
                coordinator = self.coordinators[index] = _copy(record.coordinator)
                delta.coordinator_changed(coordinator)
        elif kind in _SECURITY_RECORDS:
            if self._apply_security(record, kind) and delta is not None:
                delta.security_changed = True
        self.offset += 1

    def _apply_security(self, record: metadata_pb2.MetadataRecord, kind: str) -> bool:
        """Applies a SCRAM credential, ACL or client quota record; True if it changed the
        image."""
        if kind == "user_scram_credential":
            credential = record.user_scram_credential
            key = (credential.name, int(credential.mechanism))
            if self.scram_credentials.get(key) == credential:
                return False
            self.scram_credentials[key] = _copy(credential)
            return True
        if kind == "remove_user_scram_credential":
            removal = record.remove_user_scram_credential
            return (
                self.scram_credentials.pop((removal.name, int(removal.mechanism)), None) is not None
            )
        if kind == "access_control_entry":
            acl = record.access_control_entry
            if self.acls.get(acl.id) == acl:
                return False
            self.acls[acl.id] = _copy(acl)
            return True
        if kind == "remove_access_control_entry":
            return self.acls.pop(record.remove_access_control_entry.id, None) is not None
        quota = record.client_quota
        entity = quota_entity(quota.entity)
        values = self.client_quotas.get(entity)
        if quota.HasField("value"):
            if values is not None and values.get(quota.key) == quota.value:
                return False
            self.client_quotas[entity] = {**(values or {}), quota.key: quota.value}
            return True
        if values is None or quota.key not in values:
            return False
        kept = {key: value for key, value in values.items() if key != quota.key}
        if kept:
            self.client_quotas[entity] = kept
        else:
            del self.client_quotas[entity]
        return True

    def _apply_topic(self, topic: metadata_pb2.TopicRecord, delta: MetadataDelta | None) -> None:
        previous_id = self.topic_ids.get(topic.name)
        if previous_id is not None and previous_id != topic.topic_id:
            self._remove_topic(previous_id, delta)
        existing = self.topics.get(topic.topic_id)
        if delta is not None and existing == topic:
            return
        if existing is not None and existing.name != topic.name:
            del self.topic_ids[existing.name]
        copied = self.topics[topic.topic_id] = _copy(topic)
        self.topic_ids[topic.name] = topic.topic_id
        self.partitions.setdefault(topic.topic_id, {})
        self._topic_replaced(existing, copied)
        if delta is not None:
            delta.topic_changed(copied)

    def _remove_topic(self, topic_id: bytes, delta: MetadataDelta | None) -> None:
        topic = self.topics.pop(topic_id, None)
        if topic is None:
            return
        self.topic_ids.pop(topic.name, None)
        for partition in self.partitions.pop(topic_id, {}).values():
            self._partition_replaced(partition, None)
            if delta is not None:
                delta.partition_removed(partition)
        if self.configs.pop((TOPIC, topic.name), None) is not None and delta is not None:
            delta.changed_configs.add((TOPIC, topic.name))
        self._topic_replaced(topic, None)
        if delta is not None:
            delta.topic_removed(topic)

    def _apply_partition(
        self, partition: metadata_pb2.PartitionRecord, delta: MetadataDelta | None
    ) -> None:
        topic_id = partition.topic_id
        if self.topic_ids.get(partition.topic) != topic_id:
            topic = self.topics.get(topic_id)
            if topic is not None:
                _refuse(
                    metadata_pb2.MetadataRecord(partition=partition),
                    f"topic id {topic_id.hex()} is {topic.name!r}",
                )
            return
        partitions = self.partitions[topic_id]
        index = partition.partition
        previous = partitions.get(index)
        if delta is not None and previous == partition:
            return
        copied = partitions[index] = _copy(partition)
        self._partition_replaced(previous, copied)
        if delta is not None:
            delta.partition_changed(copied, previous)

    def _apply_config(self, config: metadata_pb2.ConfigRecord, delta: MetadataDelta | None) -> None:
        # Copy on write: a dict handed out (MetadataCache.topic_configs) never changes.
        key = (int(config.resource_type), config.resource_name)
        values = self.configs.get(key)
        if config.HasField("value"):
            if values is None or values.get(config.name) != config.value:
                self.configs[key] = {**(values or {}), config.name: config.value}
                if delta is not None:
                    delta.changed_configs.add(key)
            return
        if values is not None and config.name in values:
            kept = {name: value for name, value in values.items() if name != config.name}
            if kept:
                self.configs[key] = kept
            else:
                del self.configs[key]
            if delta is not None:
                delta.changed_configs.add(key)

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
            previous = self.brokers.get(node_id)
            if previous != broker:
                delta.broker_changed(broker, previous)
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
                was = before.get(index)
                if was != partition:
                    delta.partition_changed(partition, was)
        for key in self.configs.keys() | other.configs.keys():
            if self.configs.get(key) != other.configs.get(key):
                delta.changed_configs.add(key)
        for index, coordinator in self.coordinators.items():
            if index not in other.coordinators:
                delta.coordinator_removed(coordinator)
        for index, coordinator in other.coordinators.items():
            if self.coordinators.get(index) != coordinator:
                delta.coordinator_changed(coordinator)
        delta.security_changed = (
            self.scram_credentials != other.scram_credentials
            or self.acls != other.acls
            or self.client_quotas != other.client_quotas
        )
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
        for user_mechanism in sorted(self.scram_credentials):
            yield metadata_pb2.MetadataRecord(
                user_scram_credential=self.scram_credentials[user_mechanism]
            )
        for acl_id in sorted(self.acls):
            yield metadata_pb2.MetadataRecord(access_control_entry=self.acls[acl_id])
        for entity in sorted(self.client_quotas, key=quota_entity_order):
            parts = quota_entity_parts(entity)
            quotas = self.client_quotas[entity]
            for quota_key in sorted(quotas):
                yield metadata_pb2.MetadataRecord(
                    client_quota=metadata_pb2.ClientQuotaRecord(
                        entity=parts, key=quota_key, value=quotas[quota_key]
                    )
                )

    def digest(self) -> str:
        return metadata_digest(self.records(), self.offset)


_M = TypeVar("_M", bound=Message)

_SECURITY_RECORDS: Final = frozenset(
    {
        "user_scram_credential",
        "remove_user_scram_credential",
        "access_control_entry",
        "remove_access_control_entry",
        "client_quota",
    }
)


def quota_entity_order(entity: QuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    """A total order of quota entities (a default entity's None name sorts first)."""
    return tuple((entity_type, name is not None, name or "") for entity_type, name in entity)


def _refuse(record: metadata_pb2.MetadataRecord, reason: str) -> None:
    _log.error("metadata invariant violated, record ignored: %s (%s)", reason, record)


def _copy(message: _M) -> _M:
    """A record owned by the image: the caller's message may be reused or mutated later."""
    copied = type(message)()
    copied.CopyFrom(message)
    return copied
