"""A set of changes to the metadata image being decided on the leader, before it is proposed.

``ChangeSet`` reads through to the committed image and remembers, for every object it read or
changed, the state it saw: those become the command's preconditions (commands.py), so the
decision applies only to the state it was made for. Objects changed twice in one set (a
partition whose ISR loses two fenced nodes) keep only their final state, and reads see the
pending state, so decisions compose.
"""

from __future__ import annotations

from collections.abc import Iterator

from brook.metadata.image import QuotaEntity, quota_entity_parts
from brook.v1 import metadata_pb2
from brook_controller.commands import state_digest
from brook_controller.image import (
    ControllerImage,
    acls_key,
    broker_key,
    client_quota_key,
    cluster_key,
    configs_key,
    coordinator_key,
    partition_key,
    producer_ids_key,
    scram_credential_key,
    topic_name_key,
)

__all__ = ["ChangeSet"]


class ChangeSet:
    def __init__(self, image: ControllerImage) -> None:
        self.image = image
        self._preconditions: dict[str, bytes] = {}
        # Object key -> its new state, in the order first changed (a topic before its
        # partitions); None for "no record" placeholders is never stored.
        self._records: dict[str, metadata_pb2.MetadataRecord] = {}
        self._brokers: dict[int, metadata_pb2.BrokerRecord] = {}
        self._partitions: dict[tuple[bytes, int], metadata_pb2.PartitionRecord] = {}

    # ------------------------------------------------------------------ reading

    def require(self, key: str) -> None:
        """Makes the decision conditional on the object ``key`` being as it is now."""
        if key not in self._preconditions:
            self._preconditions[key] = state_digest(self.image.version(key))

    def broker(self, node_id: int) -> metadata_pb2.BrokerRecord | None:
        pending = self._brokers.get(node_id)
        if pending is not None:
            return pending
        self.require(broker_key(node_id))
        return self.image.brokers.get(node_id)

    def is_live(self, node_id: int) -> bool:
        """Unfenced and not shutting down, counting pending changes."""
        broker = self.broker(node_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def partition(self, topic_id: bytes, index: int) -> metadata_pb2.PartitionRecord | None:
        pending = self._partitions.get((topic_id, index))
        if pending is not None:
            return pending
        self.require(partition_key(topic_id, index))
        return self.image.partition(topic_id, index)

    def partitions(self) -> Iterator[metadata_pb2.PartitionRecord]:
        """Every partition in its latest state (pending or committed), without making the
        decision conditional on all of them: callers ``partition()`` the ones they use."""
        for committed in self.image.all_partitions():
            yield self._partitions.get((committed.topic_id, committed.partition), committed)

    # ------------------------------------------------------------------ changing

    def put_broker(self, broker: metadata_pb2.BrokerRecord) -> None:
        self.require(broker_key(broker.node_id))
        self._brokers[broker.node_id] = broker
        self._records[broker_key(broker.node_id)] = metadata_pb2.MetadataRecord(broker=broker)

    def remove_broker(self, broker: metadata_pb2.BrokerRecord) -> None:
        """Unregisters the node (this registration of it: its broker epoch)."""
        self.require(broker_key(broker.node_id))
        self._brokers.pop(broker.node_id, None)
        self._records[broker_key(broker.node_id)] = metadata_pb2.MetadataRecord(
            remove_broker=metadata_pb2.RemoveBrokerRecord(
                node_id=broker.node_id, broker_epoch=broker.broker_epoch
            )
        )

    def put_partition(self, partition: metadata_pb2.PartitionRecord) -> None:
        key = partition_key(partition.topic_id, partition.partition)
        self.require(key)
        self._partitions[(partition.topic_id, partition.partition)] = partition
        self._records[key] = metadata_pb2.MetadataRecord(partition=partition)

    def put_topic(self, topic: metadata_pb2.TopicRecord) -> None:
        self.require(topic_name_key(topic.name))
        self._records[topic_name_key(topic.name)] = metadata_pb2.MetadataRecord(topic=topic)

    def remove_topic(self, topic: metadata_pb2.TopicRecord) -> None:
        self.require(topic_name_key(topic.name))
        self._records[topic_name_key(topic.name)] = metadata_pb2.MetadataRecord(
            remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic.topic_id, name=topic.name)
        )

    def put_config(
        self, resource_type: int, resource_name: str, name: str, value: str | None
    ) -> None:
        self.require(configs_key(resource_type, resource_name))
        record = metadata_pb2.ConfigRecord(
            resource_type=resource_type,  # type: ignore[arg-type]
            resource_name=resource_name,
            name=name,
        )
        if value is not None:
            record.value = value
        self._records[f"{configs_key(resource_type, resource_name)}/{name}"] = (
            metadata_pb2.MetadataRecord(config=record)
        )

    def put_client_quota(self, entity: QuotaEntity, key: str, value: float | None) -> None:
        """Sets quota ``key`` of ``entity`` to ``value``, or removes it (None)."""
        self.require(client_quota_key(entity))
        record = metadata_pb2.ClientQuotaRecord(
            entity=quota_entity_parts(entity),
            key=key,
            value=value,
        )
        self._records[f"{client_quota_key(entity)}/{key}"] = metadata_pb2.MetadataRecord(
            client_quota=record
        )

    def put_cluster(self, cluster_id: str) -> None:
        self.require(cluster_key())
        self._records[cluster_key()] = metadata_pb2.MetadataRecord(
            cluster=metadata_pb2.ClusterRecord(cluster_id=cluster_id)
        )

    def put_producer_ids(self, block: metadata_pb2.ProducerIdsRecord) -> None:
        self.require(producer_ids_key())
        self._records[producer_ids_key()] = metadata_pb2.MetadataRecord(producer_ids=block)

    def put_coordinator(self, coordinator: metadata_pb2.CoordinatorRecord) -> None:
        key = coordinator_key(coordinator.offsets_partition)
        self.require(key)
        self._records[key] = metadata_pb2.MetadataRecord(coordinator=coordinator)

    def put_acl(self, acl: metadata_pb2.AccessControlEntryRecord) -> None:
        self.require(acls_key())
        self._records[f"{acls_key()}/{acl.id.hex()}"] = metadata_pb2.MetadataRecord(
            access_control_entry=acl
        )

    def remove_acl(self, acl_id: bytes) -> None:
        self.require(acls_key())
        self._records[f"{acls_key()}/{acl_id.hex()}"] = metadata_pb2.MetadataRecord(
            remove_access_control_entry=metadata_pb2.RemoveAccessControlEntryRecord(id=acl_id)
        )

    def scram_credential(
        self, name: str, mechanism: int
    ) -> metadata_pb2.UserScramCredentialRecord | None:
        """The committed credential of ``name`` for ``mechanism``."""
        self.require(scram_credential_key(name, mechanism))
        return self.image.scram_credentials.get((name, mechanism))

    def put_scram_credential(self, credential: metadata_pb2.UserScramCredentialRecord) -> None:
        key = scram_credential_key(credential.name, credential.mechanism)
        self.require(key)
        self._records[key] = metadata_pb2.MetadataRecord(user_scram_credential=credential)

    def remove_scram_credential(self, name: str, mechanism: int) -> None:
        key = scram_credential_key(name, mechanism)
        self.require(key)
        self._records[key] = metadata_pb2.MetadataRecord(
            remove_user_scram_credential=metadata_pb2.RemoveUserScramCredentialRecord(
                name=name,
                mechanism=mechanism,  # type: ignore[arg-type]
            )
        )

    # ------------------------------------------------------------------ result

    @property
    def records(self) -> list[metadata_pb2.MetadataRecord]:
        return list(self._records.values())

    @property
    def preconditions(self) -> dict[str, bytes]:
        return dict(self._preconditions)

    def __bool__(self) -> bool:
        return bool(self._records)

    def __len__(self) -> int:
        return len(self._records)
