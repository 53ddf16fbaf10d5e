"""``MetadataCache``: a ``MetadataImage`` and the typed reads of it that request handlers use
(``BrokerInfo``, ``TopicInfo`` with its ``PartitionInfo``s), refreshed from each update's delta.

The storage node's metadata view and the gateway's Kafka view are this cache plus what each
adds; the group coordinator reads one too. ``replay`` costs in proportion to the records of a
delta (only the objects the delta names are rebuilt); a snapshot rebuilds everything. Reads are
dictionary look-ups of immutable objects (see info.py for the one read-only view,
``TopicInfo.partitions``); ``topic_configs`` is read-only and never changes once read (the
image replaces a resource's configs on a change, see image.py).

Mutated only from one event loop, and never across an ``await``, so readers on the loop always
see one consistent image.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from brook.metadata.delta import MetadataDelta, MetadataUpdate
from brook.metadata.image import TOPIC, MetadataImage
from brook.metadata.info import BrokerInfo, PartitionInfo, TopicInfo
from brook.security.authorizer import Authorizer
from brook.v1 import metadata_pb2

__all__ = ["MetadataCache"]

_NO_CONFIGS: Mapping[str, str] = MappingProxyType({})


class MetadataCache:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._topics_by_id: dict[bytes, TopicInfo] = {}
        # Topic id -> the dict behind its TopicInfo.partitions.
        self._partitions: dict[bytes, dict[int, PartitionInfo]] = {}
        self._authorizer: Authorizer | None = None

    # -- reading ----------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        return self.image.offset

    @property
    def cluster_id(self) -> str:
        return self.image.cluster_id

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

    def topic_by_id(self, topic_id: bytes) -> TopicInfo | None:
        """The topic with id ``topic_id``; None for an unknown id (or the zero id, which names
        no topic)."""
        return self._topics_by_id.get(topic_id) if any(topic_id) else None

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self._topics.get(topic)
        return None if info is None else info.partitions.get(partition)

    def partitions(self) -> Iterator[PartitionInfo]:
        for topic in self._topics.values():
            yield from topic.partitions.values()

    def topic_configs(self, topic: str) -> Mapping[str, str]:
        """The topic's configuration overrides (topic-level names), empty if none."""
        configs = self.image.configs.get((TOPIC, topic))
        return _NO_CONFIGS if configs is None else MappingProxyType(configs)

    # -- applying ---------------------------------------------------------------------------

    def feed(self, authorizer: Authorizer) -> None:
        """Keeps ``authorizer``'s ACLs this image's from now on (the process's authorizer,
        whose gRPC interceptor and Kafka APIs ask it)."""
        self._authorizer = authorizer
        # Not ready until the first update arrives (``replay`` then follows it).
        authorizer.use(self.image, received=False)

    def replay(self, update: MetadataUpdate, *, compare: bool = True) -> MetadataDelta:
        """Applies a snapshot or a delta to the image, refreshes what it touched and returns
        what changed (``compare``: see ``MetadataImage.replay``; a consumer that does not
        act on what a snapshot changed passes False)."""
        delta = self.image.replay(update, compare=compare)
        if delta.snapshot:
            self._rebuild()
        else:
            self._refresh(delta)
        if self._authorizer is not None:
            self._authorizer.follow(self.image, delta)
        return delta

    def _rebuild(self) -> None:
        image = self.image
        self._brokers = {n: BrokerInfo.from_record(b) for n, b in image.brokers.items()}
        self._topics = {}
        self._topics_by_id = {}
        self._partitions = {}
        for topic_id, topic in image.topics.items():
            name = topic.name
            self._partitions[topic_id] = {
                index: PartitionInfo.from_record(partition, name)
                for index, partition in image.topic_partitions(topic_id).items()
            }
            self._put_topic(topic_id, topic)

    def _refresh(self, delta: MetadataDelta) -> None:
        for node_id in delta.removed_brokers:
            self._brokers.pop(node_id, None)
        for node_id, broker in delta.changed_brokers.items():
            self._brokers[node_id] = BrokerInfo.from_record(broker)
        for topic_id in delta.removed_topics:
            removed = self._topics_by_id.pop(topic_id, None)
            self._partitions.pop(topic_id, None)
            if removed is not None and self._topics.get(removed.name) is removed:
                del self._topics[removed.name]
        for topic_id, topic in delta.changed_topics.items():
            existing = self._topics_by_id.get(topic_id)
            if existing is not None and self._topics.get(existing.name) is existing:
                del self._topics[existing.name]
            self._partitions.setdefault(topic_id, {})
            self._put_topic(topic_id, topic)
        for topic_id, index in delta.removed_partitions:
            partitions = self._partitions.get(topic_id)
            if partitions is not None:
                partitions.pop(index, None)
        for (topic_id, index), partition in delta.changed_partitions.items():
            partitions = self._partitions.get(topic_id)
            if partitions is not None:
                name = self._topics_by_id[topic_id].name
                partitions[index] = PartitionInfo.from_record(partition, name)

    def _put_topic(self, topic_id: bytes, topic: metadata_pb2.TopicRecord) -> None:
        partitions = MappingProxyType(self._partitions[topic_id])
        info = TopicInfo(topic.name, topic_id, topic.internal, partitions)
        self._topics[info.name] = info
        self._topics_by_id[topic_id] = info
