"""The partitions this node hosts, kept in line with the metadata (Kafka's ReplicaManager).

The metadata says, for every partition, who leads it in which epoch and which nodes hold
replicas. ``apply`` takes one metadata update (from whatever source: the controllers'
WatchMetadata stream, or static configuration), and for each partition that changed:

- this node is the leader: open (or create) the log and lead it;
- this node holds a replica but does not lead: follow. Replication arrives with issue #6 and
  plugs in through ``FollowerFetchers`` (told which partitions to fetch from which leader);
  until then a follower only answers NOT_LEADER_OR_FOLLOWER with a hint;
- this node holds no replica any more, or the topic is gone: stop serving it and delete it.

Leading also takes a lease (``LeadershipLease``) when the metadata comes from the controllers:
a node that has lost its lease (no successful heartbeat within broker.session.timeout.ms, or
fenced) cannot act as leader, because the controllers will have moved its leaderships to
other nodes. Its led partitions go offline at once (``on_lease_lost``) and answer
NOT_LEADER_OR_FOLLOWER, whatever the metadata image still says, until the lease is back
(``on_lease_acquired``), when the image, by then caught up, says again what to lead.

Partitions whose directory is on disk but which the metadata does not mention are left
alone (and unserved): with static.topics a line removed from the configuration must not
delete data. With the controllers, a node that rejoins its cluster deletes them once it has
caught up (``delete_stray_logs``): their topic was deleted, or moved away, while it was down.
Request handlers find partitions through ``leader_partition``, which explains a miss with
Kafka's error and, where it can, a hint naming the leader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Protocol

from brook.errors import ErrorCode
from brook.metadata.delta import MetadataUpdate
from brook.metadata.info import NO_LEADER, PartitionInfo
from brook_storage_node.errors import LeaderHint, PartitionError
from brook_storage_node.leadership_gate import LeadershipGates
from brook_storage_node.log import LogConfig, LogManager, TopicPartition
from brook_storage_node.metadata_view import MetadataView, ReplicaChanges
from brook_storage_node.partition import NO_EPOCH, Partition
from brook_storage_node.topic_settings import TopicDefaults, TopicSettings, resolve_topic_settings

__all__ = [
    "FollowerFetchers",
    "LeadershipLease",
    "NoFollowerFetchers",
    "ReplicaManager",
    "topic_log_configs",
]

_log = logging.getLogger(__name__)


class LeadershipLease(Protocol):
    """Whether this node may lead now (brook.membership.BrokerLease)."""

    @property
    def active(self) -> bool: ...

    @property
    def inactive_reason(self) -> str: ...


class FollowerFetchers(Protocol):
    """The seam for replication (issue #6, Kafka's ReplicaFetcherManager): told which
    partitions this node follows, and stops following. Called on the event loop."""

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        """Fetch ``partition`` from ``leader_id`` (NO_LEADER: none now) in ``leader_epoch``."""

    def unfollow(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp``: this node leads it now, or no longer hosts it."""


class NoFollowerFetchers:
    """Until replication exists: followers do not fetch."""

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        pass

    def unfollow(self, tp: TopicPartition) -> None:
        pass


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
        *,
        lease: LeadershipLease | None = None,
        fetchers: FollowerFetchers | None = None,
    ) -> None:
        self.node_id = node_id
        self.view = view
        self._log_manager = log_manager
        self._defaults = defaults
        # None: the metadata is static and this node leads whatever it lists.
        self._lease = lease
        self._fetchers = fetchers or NoFollowerFetchers()
        self._partitions: dict[TopicPartition, Partition] = {}
        self._settings: dict[str, TopicSettings] = {}
        # Partitions this node should serve but could not open: reported as storage errors.
        self._failed: dict[TopicPartition, str] = {}
        # Produce requests for partitions this node is becoming the leader of wait here.
        self.gates = LeadershipGates(self._becoming_leader)

    # -- metadata -----------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Take up every partition of the current image (after the first snapshot)."""
        await self._reconcile(self.view.everything(), all_configs=True)

    async def apply(self, update: MetadataUpdate) -> None:
        """Apply one metadata update and act on what it changed."""
        changes = self.view.replica_changes(self.view.apply(update))
        if not changes.empty:
            await self._reconcile(changes, all_configs=False)

    async def _reconcile(self, changes: ReplicaChanges, *, all_configs: bool) -> None:
        for topic in changes.changed_topic_configs:
            self._settings.pop(topic, None)
            settings = self.topic_settings(topic)
            if not all_configs:
                self._log_manager.update_topic_config(topic, settings.log_config)
            for tp, partition in self._partitions.items():
                if tp.topic == topic:
                    partition.update_settings(settings)
        for topic, partition_index in changes.removed_partitions:
            await self._stop_replica(
                TopicPartition(topic, partition_index), "the partition no longer exists"
            )
        for info in changes.changed_partitions:
            try:
                await self._apply_partition(info)
            except Exception as exc:
                tp = TopicPartition(info.topic, info.partition)
                self._failed[tp] = f"{type(exc).__name__}: {exc}"
                _log.exception("cannot take up %s", tp)
            finally:
                # Requests waiting for this partition go now, not once every partition of
                # the update has been taken up.
                self.gates.settle()
        self.gates.settle()

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
        if info.leader != self.node_id:
            partition.make_follower(info, settings)
            self._fetchers.follow(partition, info.leader, info.leader_epoch)
            _log.info("following %s: leader %d epoch %d", tp, info.leader, info.leader_epoch)
            return
        self._fetchers.unfollow(tp)
        if not self.may_lead():
            # The image names this node, but it holds no lease: what it would lead has been
            # (or is being) moved away. It leads once the lease is back (on_lease_acquired).
            partition.make_offline(self._lease_reason())
            _log.info("not leading %s in epoch %d: no lease", tp, info.leader_epoch)
            return
        self._lead(partition, info, settings)

    def _lead(self, partition: Partition, info: PartitionInfo, settings: TopicSettings) -> None:
        partition.make_leader(info, settings)
        _log.info(
            "leading %s in epoch %d (isr %s, high watermark %d)",
            partition.topic_partition,
            info.leader_epoch,
            list(info.isr),
            partition.high_watermark,
        )

    async def _stop_replica(self, tp: TopicPartition, reason: str) -> None:
        self._failed.pop(tp, None)
        partition = self._partitions.pop(tp, None)
        if partition is None:
            return
        self._fetchers.unfollow(tp)
        partition.make_offline(reason)
        _log.info("stopped serving %s (%s); deleting its log", tp, reason)
        await self._log_manager.delete_log(tp)

    async def delete_stray_logs(self) -> list[TopicPartition]:
        """Delete the logs on disk that the metadata does not give this node (call once the
        image is caught up with the controllers); returns them."""
        strays = [tp for tp in self._log_manager.logs if tp not in self._partitions]
        for tp in strays:
            _log.info("deleting %s: the metadata does not place a replica on this node", tp)
            await self._log_manager.delete_log(tp)
        return strays

    # -- the lease ----------------------------------------------------------------------------

    def may_lead(self) -> bool:
        return self._lease is None or self._lease.active

    def _lease_reason(self, reason: str = "") -> str:
        if not reason and self._lease is not None:
            reason = self._lease.inactive_reason
        return f"this node cannot lead partitions now: {reason or 'it has no lease'}"

    def on_lease_lost(self, reason: str) -> None:
        """Stop leading at once (pending acks=all produces fail, long polls wake)."""
        led = [p for p in self.hosted() if p.is_leader]
        for partition in led:
            partition.make_offline(self._lease_reason(reason))
        self.gates.settle()
        _log.info("stopped leading %d partitions: %s", len(led), reason)

    def on_lease_acquired(self) -> None:
        """Lead whatever the (caught-up) image says this node leads."""
        for tp, partition in list(self._partitions.items()):
            info = self.view.partition(tp.topic, tp.partition)
            if info is not None and info.leader == self.node_id and not partition.is_leader:
                self._lead(partition, info, self.topic_settings(tp.topic))
        self.gates.settle()

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
        # The lease is read here as well as acted on when it is lost: it lapses at an
        # instant, before any timer on the loop can take leadership away.
        if partition is not None and partition.is_leader and self.may_lead():
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
        elif info.leader == self.node_id and not self.may_lead():
            # The image still names this node; pointing the client back here would not help.
            message = f"{self._lease_reason()}; its leaderships move to other nodes"
            hint = LeaderHint(NO_LEADER, info.leader_epoch, ())
        elif info.leader == self.node_id:
            message = f"this node is becoming the leader of {tp}; retry"
        else:
            message = f"node {info.leader} leads {tp}, not this node"
        return PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, message, leader_hint=hint)

    def _becoming_leader(self, tp: TopicPartition) -> bool:
        """The image names this node the leader of ``tp``, which it may lead, but it does not
        lead it yet: its log is being opened (or the change is still being applied)."""
        partition = self._partitions.get(tp)
        if partition is not None and partition.is_leader:
            return False
        if tp in self._failed or not self.may_lead():
            return False
        info = self.view.partition(tp.topic, tp.partition)
        return info is not None and info.leader == self.node_id

    def leader_hint(self, info: PartitionInfo) -> LeaderHint:
        broker = self.view.broker(info.leader)
        endpoints = broker.endpoints if broker is not None else ()
        return LeaderHint(info.leader, info.leader_epoch, endpoints)

    def wake_all(self) -> None:
        """Wake every waiting fetch, subscription and gated produce (shutdown)."""
        self.gates.open_all()
        for partition in self.hosted():
            partition.wake_listeners()
