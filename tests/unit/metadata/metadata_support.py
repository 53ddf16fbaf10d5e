"""Metadata records for the metadata tests, written the way the controllers write them (a
partition record names its topic, a topic removal its name)."""

from __future__ import annotations

from typing import Any

from brook.v1 import common_pb2, metadata_pb2

Record = metadata_pb2.MetadataRecord


def broker(
    node_id: int,
    epoch: int,
    role: common_pb2.NodeRole = common_pb2.NODE_ROLE_STORAGE_NODE,
    **fields: Any,
) -> Record:
    """A node at ``[::1]:9000 + node_id % 1000`` (PLAINTEXT for a gateway, GRPC otherwise)."""
    listener = "PLAINTEXT" if role == common_pb2.NODE_ROLE_GATEWAY else "GRPC"
    endpoint = common_pb2.Endpoint(listener=listener, host="::1", port=9000 + node_id % 1000)
    return Record(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id, broker_epoch=epoch, role=role, endpoints=[endpoint], **fields
        )
    )


def remove_broker(node_id: int, epoch: int) -> Record:
    return Record(
        remove_broker=metadata_pb2.RemoveBrokerRecord(node_id=node_id, broker_epoch=epoch)
    )


def topic(name: str, topic_id: bytes, internal: bool = False) -> Record:
    return Record(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id, internal=internal))


def remove_topic(name: str, topic_id: bytes) -> Record:
    return Record(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic_id, name=name))


def partition(
    name: str, topic_id: bytes, index: int, replicas: list[int], epoch: int = 0, **fields: Any
) -> Record:
    """Led by the first replica, with every replica in the ISR."""
    return Record(
        partition=metadata_pb2.PartitionRecord(
            topic_id=topic_id,
            topic=name,
            partition=index,
            replicas=replicas,
            isr=replicas,
            leader=replicas[0],
            leader_epoch=epoch,
            partition_epoch=epoch,
            **fields,
        )
    )


def config(resource_type: int, resource: str, name: str, value: str | None) -> Record:
    """Sets ``name`` (or removes it, for None)."""
    record = metadata_pb2.ConfigRecord(resource_name=resource, name=name)
    record.resource_type = resource_type  # type: ignore[assignment]
    if value is not None:
        record.value = value
    return Record(config=record)


def coordinator(index: int, node_id: int, epoch: int) -> Record:
    return Record(
        coordinator=metadata_pb2.CoordinatorRecord(
            offsets_partition=index, coordinator_id=node_id, coordinator_epoch=epoch
        )
    )
