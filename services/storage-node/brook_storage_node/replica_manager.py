"""The partitions this node hosts, kept in line with the metadata (Kafka's ReplicaManager).

The metadata says, for every partition, who leads it in which epoch and which nodes hold
replicas. ``apply`` takes one metadata update (from whatever source: static configuration
now, the controller's WatchMetadata stream later), and for each partition that changed:

- this node is the leader: open (or create) the log and lead it;
- this node holds a replica but does not lead: follow (replication arrives with issue #6;
  until then a follower only answers NOT_LEADER_OR_FOLLOWER with a hint);
- this node holds no replica any more, or the topic is gone: stop serving it and delete it.

Partitions whose directory is on disk but which the metadata does not mention are left
alone (and unserved): with static.topics a line removed from the configuration must not
delete data. Request handlers find partitions through ``leader_partition``, which explains a
miss with Kafka's error and, where it can, a hint naming the leader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from brook.errors import ErrorCode
from brook_storage_node.errors import LeaderHint, PartitionError
from brook_storage_node.log import LogConfig, LogManager, TopicPartition
from brook_storage_node.metadata_view import (
    NO_LEADER,
    MetadataDelta,
    MetadataUpdate,
    MetadataView,
    PartitionInfo,
)
from brook_storage_node.partition import NO_EPOCH, Partition
from brook_storage_node.topic_settings import TopicDefaults, TopicSettings, resolve_topic_settings

__all__ = ["ReplicaManager", "topic_log_configs"]

_log = logging.getLogger(__name__)


def topic_log_configs(view: MetadataView, defaults: TopicDefaults) -> dict[str, LogConfig]:
    """The LogConfig of every topic with overrides: what the log manager opens logs with."""
    return {
        topic: resolve_topic_settings(topic, defaults, view.topic_configs(topic)).log_config
        for topic in view.topics
        if view.topic_configs(topic)
    }


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        defaults: TopicDefaults,
        view: MetadataView,
    ) -> None:
        self.node_id = node_id
        self.view = view
        self._log_manager = log_manager
        self._defaults = defaults
        self._partitions: dict[TopicPartition, Partition] = {}
        self._settings: dict[str, TopicSettings] = {}
        # Partitions this node should serve but could not open: reported as storage errors.
        self._failed: dict[TopicPartition, str] = {}

    # -- metadata -----------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Take up every partition of the current image (after the first snapshot)."""
        every = tuple(self.view.partitions())
        await self._reconcile(
            MetadataDelta(every, (), frozenset(self.view.topics)), all_configs=True
        )

    async def apply(self, update: MetadataUpdate) -> None:
        """Apply one metadata update and act on what it changed."""
        delta = self.view.apply(update)
        if not delta.empty:
            await self._reconcile(delta, all_configs=False)

    async def _reconcile(self, delta: MetadataDelta, *, all_configs: bool) -> None:
        for topic in delta.changed_topic_configs:
            self._settings.pop(topic, None)
            settings = self.topic_settings(topic)
            if not all_configs:
                self._log_manager.update_topic_config(topic, settings.log_config)
            for tp, partition in self._partitions.items():
                if tp.topic == topic:
                    partition.update_settings(settings)
        for topic, partition_index in delta.removed_partitions:
            await self._stop_replica(
                TopicPartition(topic, partition_index), "the partition no longer exists"
            )
        for info in delta.changed_partitions:
            try:
                await self._apply_partition(info)
            except Exception as exc:
                tp = TopicPartition(info.topic, info.partition)
                self._failed[tp] = f"{type(exc).__name__}: {exc}"
                _log.exception("cannot take up %s", tp)

    async def _apply_partition(self, info: PartitionInfo) -> None:
        tp = TopicPartition(info.topic, info.partition)
        if self.node_id not in info.replicas:
            await self._stop_replica(tp, f"this node is no longer a replica of {tp}")
            return
        settings = self.topic_settings(info.topic)
        partition = self._partitions.get(tp)
        if partition is None:
            log = await self._log_manager.get_or_create_log(tp, settings.log_config)
            partition = Partition(log, self.node_id, settings)
            self._partitions[tp] = partition
            self._failed.pop(tp, None)
        if info.leader == self.node_id:
            partition.make_leader(info, settings)
            _log.info(
                "leading %s in epoch %d (isr %s, high watermark %d)",
                tp,
                info.leader_epoch,
                list(info.isr),
                partition.high_watermark,
            )
        else:
            partition.make_follower(info, settings)
            _log.info("following %s: leader %d epoch %d", tp, info.leader, info.leader_epoch)

    async def _stop_replica(self, tp: TopicPartition, reason: str) -> None:
        self._failed.pop(tp, None)
        partition = self._partitions.pop(tp, None)
        if partition is None:
            return
        partition.make_offline(reason)
        _log.info("stopped serving %s (%s); deleting its log", tp, reason)
        await self._log_manager.delete_log(tp)

    def topic_settings(self, topic: str) -> TopicSettings:
        """The node's defaults with ``topic``'s overrides (cached until they change)."""
        settings = self._settings.get(topic)
        if settings is None:
            settings = resolve_topic_settings(topic, self._defaults, self.view.topic_configs(topic))
            self._settings[topic] = settings
        return settings

    # -- lookups ------------------------------------------------------------------------------

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]:
        return self._partitions

    def hosted(self) -> Iterator[Partition]:
        return iter(tuple(self._partitions.values()))

    def leader_partition(
        self, topic: str, partition_index: int, current_leader_epoch: int = NO_EPOCH
    ) -> Partition:
        """The partition if this node leads it (in ``current_leader_epoch``, unless -1), else
        PartitionError with Kafka's code for why not and a hint naming the leader."""
        partition = self._partitions.get(TopicPartition(topic, partition_index))
        if partition is not None and partition.is_leader:
            if current_leader_epoch != NO_EPOCH:
                partition.check_leader(current_leader_epoch)
            return partition
        raise self._not_served(topic, partition_index)

    def _not_served(self, topic: str, partition_index: int) -> PartitionError:
        info = self.view.partition(topic, partition_index)
        if info is None:
            known = self.view.topic(topic)
            what = (
                f"topic {topic} has no partition {partition_index}"
                if known is not None
                else f"topic {topic} does not exist"
            )
            return PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, what)
        tp = TopicPartition(topic, partition_index)
        failure = self._failed.get(tp)
        if failure is not None:
            return PartitionError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"this node cannot open the log of {tp}: {failure}"
            )
        hint = self.leader_hint(info)
        if info.leader == NO_LEADER:
            message = f"{tp} has no leader at the moment"
        elif info.leader == self.node_id:
            message = f"this node is becoming the leader of {tp}; retry"
        else:
            message = f"node {info.leader} leads {tp}, not this node"
        return PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, message, leader_hint=hint)

    def leader_hint(self, info: PartitionInfo) -> LeaderHint:
        broker = self.view.broker(info.leader)
        endpoints = broker.endpoints if broker is not None else ()
        return LeaderHint(info.leader, info.leader_epoch, endpoints)

    def wake_all(self) -> None:
        """Wake every waiting fetch and subscription (shutdown)."""
        for partition in self.hosted():
            partition.wake_listeners()
