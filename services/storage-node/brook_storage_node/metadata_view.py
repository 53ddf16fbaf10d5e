"""The node's view of cluster metadata: brokers, topics, partitions and topic configs.

A ``MetadataCache`` (brook/metadata/cache.py) over the shared image: updates arrive as
``MetadataUpdate``s exactly as a ``WatchMetadata`` follower receives them (a snapshot replaces
the whole image, a delta is applied on top), and ``apply`` answers what changed as the shared
``MetadataDelta``. The replica manager turns that into "become leader / become follower / stop
serving" (``replica_changes``) without knowing where the records came from (static
configuration or the controllers).

Mutated only from the event loop, and never across an ``await``, so readers on the loop
always see one consistent image.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from brook.metadata.cache import MetadataCache
from brook.metadata.delta import MetadataDelta, MetadataUpdate
from brook.metadata.info import NO_LEADER, PartitionInfo, TopicPartitionKey, endpoint_protos
from brook.v1 import metadata_pb2

# NO_LEADER and endpoint_protos are brook.metadata.info's, named here for storage_service.py.
__all__ = ["NO_LEADER", "MetadataView", "ReplicaChanges", "endpoint_protos"]


@dataclass(frozen=True, slots=True)
class ReplicaChanges:
    """What one update asks of the replica manager, from the delta alone."""

    changed_partitions: tuple[PartitionInfo, ...]
    """Partitions that are new or whose state differs from before."""
    removed_partitions: tuple[TopicPartitionKey, ...]
    """Partitions that no longer exist (their topic was deleted or re-created with a new id,
    or a snapshot lacks them): the old replica goes before a new one of the same name comes."""
    changed_topic_configs: frozenset[str]
    """Topics whose configuration overrides changed."""

    @property
    def empty(self) -> bool:
        return not (
            self.changed_partitions or self.removed_partitions or self.changed_topic_configs
        )


class MetadataView(MetadataCache):
    """The image, with the typed reads the node serves requests from."""

    controller_id = NO_LEADER
    """The node does not learn the active controller from metadata: always unknown."""

    def apply(self, update: MetadataUpdate) -> MetadataDelta:
        """Apply a snapshot or a delta; returns what changed."""
        return self.replay(update)

    def apply_records(
        self, records: Iterable[metadata_pb2.MetadataRecord], offset: int
    ) -> MetadataDelta:
        """A delta of ``records`` bringing the image to ``offset``."""
        return self.apply(MetadataUpdate(False, offset, tuple(records)))

    def replica_changes(self, delta: MetadataDelta) -> ReplicaChanges:
        """The partitions (as they are now) and topic configs ``delta`` touched. A partition
        whose ``PartitionInfo`` is what it was before the update (only fields the node does
        not read changed, such as reassignment's adding replicas) is left out, so the replica
        manager does not make a leader or follower again for nothing."""
        changed = []
        for key, partition in delta.changed_partitions.items():
            topic = self.topic_by_id(partition.topic_id)
            info = None if topic is None else topic.partitions.get(partition.partition)
            if info is None:
                continue
            previous = delta.previous_partitions.get(key)
            if previous is None or PartitionInfo.from_record(previous, info.topic) != info:
                changed.append(info)
        # The image only holds (and so only removes) partition records whose ``topic`` is
        # their topic id's name: it refuses the others.
        removed = tuple((p.topic, p.partition) for p in delta.removed_partitions.values())
        return ReplicaChanges(tuple(changed), removed, delta.changed_topic_configs())

    def everything(self) -> ReplicaChanges:
        """Every partition and every topic: what a node takes up after its first snapshot."""
        return ReplicaChanges(tuple(self.partitions()), (), frozenset(self.topics))
