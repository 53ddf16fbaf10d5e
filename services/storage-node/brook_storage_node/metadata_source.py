"""Where the node's metadata comes from: a stream of ``MetadataUpdate``s.

``ControllerMetadataSource`` follows the controllers' metadata log through ``WatchMetadata``
(brook.membership.MetadataWatcher: a snapshot, then deltas, resumed after reconnections, stale
controller epochs ignored). ``StaticMetadataSource`` is the bridge for development and tests
without controllers: it turns the ``static.topics`` setting into the same kind of snapshot,
one that makes this node the leader (leader epoch 0, replicas and ISR just itself) of every
listed partition. The node consumes either source the same way; it uses the static one when
static.topics lists topics, the controllers otherwise.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from brook.config import Config, Listener
from brook.membership import MetadataWatcher
from brook.metadata.delta import MetadataUpdate
from brook.v1 import common_pb2, metadata_pb2
from brook_storage_node.log.topic_partition import check_topic_name
from brook_storage_node.topic_settings import check_topic_configs

__all__ = [
    "STATIC_PARTITIONS_MAX",
    "ControllerMetadataSource",
    "MetadataSource",
    "StaticMetadataSource",
    "StaticTopic",
    "parse_static_topics",
]

# A bound on one static entry, so a typo (orders:60000000) fails at start-up instead of
# creating millions of partition directories.
STATIC_PARTITIONS_MAX: Final = 10_000
STATIC_LEADER_EPOCH: Final = 0
# Stable topic ids for static topics: the same name gets the same id on every start.
_STATIC_TOPIC_NAMESPACE: Final = uuid.UUID("6f0b9a53-3c1e-4a55-9a3e-2b5f3e0c7d11")


class MetadataSource(Protocol):
    """A stream of metadata: the first update is a snapshot; the stream may end (a static
    source has nothing more to say) or run until cancelled."""

    def updates(self) -> AsyncIterator[MetadataUpdate]: ...


@dataclass(frozen=True, slots=True)
class StaticTopic:
    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


def parse_static_topics(entries: Sequence[str]) -> tuple[StaticTopic, ...]:
    """Parse ``static.topics`` entries (``topic:partitions[:config=value...]``).

    ValueError naming the entry and the problem: a bad topic name or count, a duplicate
    topic, an unknown topic config or an invalid value.
    """
    topics: dict[str, StaticTopic] = {}
    for entry in entries:
        name, *rest = (part.strip() for part in entry.split(":"))
        if not rest:
            raise ValueError(f"entry {entry!r} needs a partition count: topic:partitions")
        try:
            check_topic_name(name)
        except ValueError as exc:
            raise ValueError(f"entry {entry!r}: {exc}") from None
        count_text, *config_parts = rest
        if not count_text.isdigit() or not 1 <= int(count_text) <= STATIC_PARTITIONS_MAX:
            raise ValueError(
                f"entry {entry!r}: the partition count must be 1 to {STATIC_PARTITIONS_MAX}"
            )
        configs: dict[str, str] = {}
        for part in config_parts:
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(f"entry {entry!r}: {part!r} is not config=value")
            if key in configs:
                raise ValueError(f"entry {entry!r}: {key} is given twice")
            configs[key] = value.strip()
        try:
            check_topic_configs(configs, f"static.topics entry {name}")
        except ValueError as exc:
            raise ValueError(f"entry {entry!r}: {exc}") from None
        if name in topics:
            raise ValueError(f"topic {name} is listed twice")
        topics[name] = StaticTopic(name, int(count_text), configs)
    return tuple(topics.values())


def static_topic_id(name: str) -> bytes:
    """The 16-byte topic id of a static topic: derived from its name, so stable."""
    return uuid.uuid5(_STATIC_TOPIC_NAMESPACE, name).bytes


class StaticMetadataSource:
    """One snapshot from configuration, then nothing: this node alone leads every partition."""

    def __init__(
        self,
        *,
        node_id: int,
        endpoints: Sequence[Listener],
        rack: str | None,
        topics: Sequence[StaticTopic],
    ) -> None:
        self._node_id = node_id
        self._endpoints = tuple(endpoints)
        self._rack = rack or ""
        self._topics = tuple(topics)

    @classmethod
    def from_config(cls, config: Config) -> StaticMetadataSource:
        return cls(
            node_id=config.get_int("node.id"),
            endpoints=config.get_listeners("advertised.listeners"),
            rack=config.get_optional_string("broker.rack"),
            topics=parse_static_topics(config.get_list("static.topics")),
        )

    def snapshot(self) -> MetadataUpdate:
        node = self._node_id
        records = [
            metadata_pb2.MetadataRecord(
                broker=metadata_pb2.BrokerRecord(
                    node_id=node,
                    role=common_pb2.NODE_ROLE_STORAGE_NODE,
                    endpoints=[
                        common_pb2.Endpoint(listener=e.name, host=e.host, port=e.port)
                        for e in self._endpoints
                    ],
                    rack=self._rack,
                )
            )
        ]
        for topic in self._topics:
            topic_id = static_topic_id(topic.name)
            records.append(
                metadata_pb2.MetadataRecord(
                    topic=metadata_pb2.TopicRecord(name=topic.name, topic_id=topic_id)
                )
            )
            records.extend(
                metadata_pb2.MetadataRecord(
                    config=metadata_pb2.ConfigRecord(
                        resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC,
                        resource_name=topic.name,
                        name=name,
                        value=value,
                    )
                )
                for name, value in sorted(topic.configs.items())
            )
            records.extend(
                metadata_pb2.MetadataRecord(
                    partition=metadata_pb2.PartitionRecord(
                        topic_id=topic_id,
                        topic=topic.name,
                        partition=index,
                        replicas=[node],
                        isr=[node],
                        leader=node,
                        leader_epoch=STATIC_LEADER_EPOCH,
                    )
                )
                for index in range(topic.partitions)
            )
        # Offset -1: no metadata log stands behind this image.
        return MetadataUpdate(snapshot=True, offset=-1, records=tuple(records))

    async def updates(self) -> AsyncIterator[MetadataUpdate]:
        yield self.snapshot()


class ControllerMetadataSource:
    """The controllers' metadata log, as the watcher delivers it; runs until cancelled."""

    def __init__(self, watcher: MetadataWatcher) -> None:
        self._watcher = watcher

    async def updates(self) -> AsyncIterator[MetadataUpdate]:
        async for message in self._watcher.updates():
            yield MetadataUpdate(
                snapshot=message.snapshot, offset=message.offset, records=tuple(message.records)
            )
