"""Topic administration decided by the controller: create, delete, add partitions, and topic and
node configuration (Kafka's ReplicationControlManager and ConfigurationControlManager).

Each function validates one resource against the committed image plus the pending changes of
the same request and either adds its records to the ``ChangeSet`` or raises ``BrookError``
with Kafka's error code, having added nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from brook.config import ConfigKey
from brook.errors import BrookError, ErrorCode
from brook.topic_config import (
    BROKER_SYNONYMS,
    NODE_DYNAMIC_CONFIG_DEF,
    TOPIC_CONFIG_DEF,
    describe_type,
    topic_name_for_broker_config,
    validate_broker_default_configs,
    validate_topic_configs,
)
from brook.topic_name import CLUSTER_TOPIC_PREFIX, topic_name_problem
from brook.v1 import admin_pb2, common_pb2, metadata_pb2, storage_pb2
from brook_controller.changes import ChangeSet
from brook_controller.image import (
    BROKER,
    TOPIC,
    ControllerImage,
    topic_family_key,
    topic_name_key,
)
from brook_controller.placement import Node, place_replicas

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "RECORDS_PER_REQUEST_MAX",
    "TRANSACTION_STATE_TOPIC",
    "InternalTopicSettings",
    "TopicDefaults",
    "alter_configs",
    "auto_created_topic",
    "create_partitions",
    "create_topic",
    "delete_topic",
    "describe_configs",
    "topic_metadata",
    "topic_name_problem",
]

OFFSETS_TOPIC: Final = "__consumer_offsets"
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
# Created by the controllers alone (``InternalTopicSettings``), never by a request.
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# Kafka's bound on the records one administrative operation may write (its
# MAX_RECORDS_PER_USER_OP): a request for more is refused rather than turned into one huge
# Raft entry.
RECORDS_PER_REQUEST_MAX: Final = 10_000


@dataclass(frozen=True)
class TopicDefaults:
    num_partitions: int
    replication_factor: int


@dataclass(frozen=True)
class InternalTopicSettings:
    """An internal topic the controllers create (compacted, like Kafka's) once
    ``replication_factor`` storage nodes are live."""

    name: str
    partitions: int
    replication_factor: int
    segment_bytes: int
    # None: the cluster's default. Capped at the replication factor, so a small cluster
    # configured with only a smaller replication factor can still write the topic.
    min_insync_replicas: int | None = None

    def creatable(self) -> admin_pb2.CreatableTopic:
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.segment_bytes),
        }
        if self.min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(
                min(self.min_insync_replicas, self.replication_factor)
            )
        return admin_pb2.CreatableTopic(
            name=self.name,
            num_partitions=self.partitions,
            replication_factor=self.replication_factor,
            configs=configs,
        )


def _storage_nodes(image: ControllerImage) -> list[Node]:
    return [
        Node(node_id, image.brokers[node_id].rack)
        for node_id in image.live_brokers(common_pb2.NODE_ROLE_STORAGE_NODE)
    ]


def _check_assignments(
    image: ControllerImage,
    assignments: Sequence[admin_pb2.ReplicaAssignment],
    first_partition: int,
    count: int,
) -> list[list[int]]:
    """Explicit placement: one entry per partition first..first+count-1, the same number of
    distinct registered storage nodes each, at least one of them live."""
    error = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    by_partition = {}
    for assignment in assignments:
        if assignment.partition in by_partition:
            raise BrookError(error, f"partition {assignment.partition} is assigned twice")
        by_partition[assignment.partition] = list(assignment.broker_ids)
    expected = set(range(first_partition, first_partition + count))
    if set(by_partition) != expected:
        raise BrookError(
            error,
            f"assignments must name partitions {first_partition} to "
            f"{first_partition + count - 1}, each once",
        )
    sizes = {len(replicas) for replicas in by_partition.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise BrookError(error, "every partition needs the same, non-zero number of replicas")
    for partition, replicas in sorted(by_partition.items()):
        if len(set(replicas)) != len(replicas):
            raise BrookError(error, f"partition {partition} names a node twice")
        for node_id in replicas:
            broker = image.brokers.get(node_id)
            if broker is None or broker.role != common_pb2.NODE_ROLE_STORAGE_NODE:
                raise BrookError(error, f"node {node_id} is not a registered storage node")
        if not any(image.is_live(node_id) for node_id in replicas):
            raise BrookError(error, f"no replica of partition {partition} is live")
    return [by_partition[p] for p in sorted(by_partition)]


def _new_partition(
    image: ControllerImage, topic_id: bytes, topic: str, index: int, replicas: list[int]
) -> metadata_pb2.PartitionRecord:
    isr = [node_id for node_id in replicas if image.is_live(node_id)]
    return metadata_pb2.PartitionRecord(
        topic_id=topic_id,
        topic=topic,
        partition=index,
        replicas=replicas,
        isr=isr,
        leader=isr[0],
        leader_epoch=0,
        partition_epoch=0,
    )


def _placement(
    changes: ChangeSet,
    num_partitions: int,
    replication_factor: int,
    pending: Iterable[metadata_pb2.PartitionRecord],
) -> list[list[int]]:
    """Placement balanced over what exists and what this request creates before it."""
    nodes = _storage_nodes(changes.image)
    if replication_factor > len(nodes):
        raise BrookError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the {len(nodes)} live "
            "storage nodes",
        )
    load = changes.image.load.copy()
    for partition in pending:
        load.add(partition.replicas)
    return place_replicas(nodes, load, num_partitions, replication_factor)


def _new_topic_id(image: ControllerImage) -> bytes:
    while True:
        topic_id = uuid.uuid4().bytes
        if topic_id not in image.topics:
            return topic_id


def create_topic(
    changes: ChangeSet,
    request: admin_pb2.CreatableTopic,
    defaults: TopicDefaults,
    pending: list[metadata_pb2.PartitionRecord],
    *,
    internal: bool = False,
) -> admin_pb2.CreateTopicResult:
    """Adds the topic to ``changes``. ``pending`` holds the partitions other topics of the same
    request will create (placement balances them too); this topic's are appended to it."""
    name = request.name
    problem = topic_name_problem(name)
    if problem is not None:
        raise BrookError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if name in INTERNAL_TOPICS and not internal:
        raise BrookError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name} is created by the controller")
    image = changes.image
    if image.topic_by_name(name) is not None:
        raise BrookError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    colliding = image.topics_colliding_with(name)
    if colliding:
        raise BrookError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic {name!r} collides with existing topic {colliding[0]!r} ('.' and '_' "
            "are the same in metric names)",
        )
    problem = validate_topic_configs(request.configs)
    if problem is not None:
        raise BrookError(ErrorCode.INVALID_CONFIG, problem)
    if request.assignments:
        count = len(request.assignments)
        if count > RECORDS_PER_REQUEST_MAX:
            raise _too_many(count)
        assignment = _check_assignments(image, request.assignments, 0, count)
    else:
        num_partitions = _positive_or_default(
            request.num_partitions,
            defaults.num_partitions,
            ErrorCode.INVALID_PARTITIONS,
            "the number of partitions",
        )
        if num_partitions > RECORDS_PER_REQUEST_MAX:
            raise _too_many(num_partitions)
        factor = _positive_or_default(
            request.replication_factor,
            defaults.replication_factor,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "the replication factor",
        )
        assignment = _placement(changes, num_partitions, factor, pending)
    topic_id = _new_topic_id(image)
    changes.require(topic_family_key(name))
    changes.put_topic(metadata_pb2.TopicRecord(name=name, topic_id=topic_id, internal=internal))
    for config_name in sorted(request.configs):
        changes.put_config(TOPIC, name, config_name, request.configs[config_name])
    for index, replicas in enumerate(assignment):
        partition = _new_partition(image, topic_id, name, index, replicas)
        changes.put_partition(partition)
        pending.append(partition)
    return admin_pb2.CreateTopicResult(
        name=name,
        topic_id=topic_id,
        num_partitions=len(assignment),
        replication_factor=len(assignment[0]),
        configs=_topic_config_entries(image, dict(request.configs), (), False, False),
    )


def auto_created_topic(
    request: admin_pb2.CreatableTopic, enabled: bool
) -> admin_pb2.CreatableTopic:
    """The topic a client creates by naming it (Kafka's auto.create.topics.enable): the
    cluster's num.partitions and default.replication.factor, no configs or placement, whatever
    the request carries. BrookError if it may not be created that way."""
    name = request.name
    problem = topic_name_problem(name)
    if problem is not None:
        raise BrookError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if not enabled:
        raise BrookError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"no topic is named {name!r}, and auto.create.topics.enable is false",
        )
    if name.startswith(CLUSTER_TOPIC_PREFIX):
        raise BrookError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"no topic is named {name!r}; names starting with {CLUSTER_TOPIC_PREFIX!r} belong "
            "to the cluster and are never created on demand",
        )
    return admin_pb2.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1)


def _positive_or_default(value: int, default: int, code: ErrorCode, what: str) -> int:
    """-1 means the cluster default (Kafka's convention); anything else must be positive."""
    chosen = default if value == -1 else value
    if chosen <= 0:
        raise BrookError(code, f"{what} must be positive, got {chosen}")
    return chosen


def _too_many(count: int) -> BrookError:
    return BrookError(
        ErrorCode.POLICY_VIOLATION,
        f"{count} partitions in one request; the limit is {RECORDS_PER_REQUEST_MAX}",
    )


def delete_topic(
    changes: ChangeSet, name: str, topic_id: bytes | None
) -> admin_pb2.DeleteTopicResult:
    image = changes.image
    topic = image.topics.get(topic_id) if topic_id else image.topic_by_name(name)
    if topic is None:
        if topic_id:
            raise BrookError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id.hex()}")
        raise BrookError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic is named {name!r}")
    if topic.internal:
        raise BrookError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, f"{topic.name} is internal and cannot be deleted"
        )
    changes.remove_topic(topic)
    return admin_pb2.DeleteTopicResult(name=topic.name, topic_id=topic.topic_id)


def create_partitions(
    changes: ChangeSet,
    request: admin_pb2.CreatePartitionsTopic,
    pending: list[metadata_pb2.PartitionRecord],
) -> None:
    image = changes.image
    topic = image.topic_by_name(request.name)
    if topic is None:
        raise BrookError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic is named {request.name!r}"
        )
    current = image.topic_partitions(topic.topic_id)
    if request.count <= len(current):
        raise BrookError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {topic.name!r} has {len(current)} partitions; the new count must be larger, "
            f"got {request.count}",
        )
    added = request.count - len(current)
    if added > RECORDS_PER_REQUEST_MAX:
        raise _too_many(added)
    factor = len(current[0].replicas) if current else 1
    if request.assignments:
        assignment = _check_assignments(image, request.assignments, len(current), added)
        if len(assignment[0]) != factor:
            raise BrookError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"new partitions need {factor} replicas, as the existing ones have",
            )
    else:
        assignment = _placement(changes, added, factor, pending)
    changes.require(topic_name_key(topic.name))
    for offset, replicas in enumerate(assignment):
        partition = _new_partition(
            image, topic.topic_id, topic.name, len(current) + offset, replicas
        )
        changes.put_partition(partition)
        pending.append(partition)


# --------------------------------------------------------------------------- configs


def _resource_overrides(
    image: ControllerImage, resource: admin_pb2.ConfigResource
) -> dict[str, str]:
    if resource.type == TOPIC:
        if image.topic_by_name(resource.name) is None:
            raise BrookError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic is named {resource.name!r}"
            )
    elif resource.type == BROKER:
        if resource.name and not (resource.name.isdigit() and int(resource.name) in image.brokers):
            raise BrookError(
                ErrorCode.INVALID_REQUEST,
                f"{resource.name!r} is not a registered node id (empty names the default of "
                "every node)",
            )
    else:
        raise BrookError(ErrorCode.INVALID_REQUEST, "the resource type must be TOPIC or BROKER")
    return image.resource_configs(resource.type, resource.name)


def alter_configs(
    changes: ChangeSet, resource: admin_pb2.ConfigResource, ops: Sequence[admin_pb2.AlterableConfig]
) -> None:
    """Incremental changes (SET, DELETE, APPEND, SUBTRACT) to one resource's dynamic configs,
    all or nothing."""
    current = _resource_overrides(changes.image, resource)
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise BrookError(ErrorCode.INVALID_REQUEST, "a config is named twice in one request")
    updated = dict(current)
    for op in ops:
        topic_name = op.name if resource.type == TOPIC else topic_name_for_broker_config(op.name)
        if op.op == admin_pb2.ALTER_CONFIG_OP_SET:
            if not op.HasField("value"):
                raise BrookError(ErrorCode.INVALID_CONFIG, f"SET {op.name} needs a value")
            updated[op.name] = op.value
        elif op.op == admin_pb2.ALTER_CONFIG_OP_DELETE:
            updated.pop(op.name, None)
        elif op.op in (admin_pb2.ALTER_CONFIG_OP_APPEND, admin_pb2.ALTER_CONFIG_OP_SUBTRACT):
            if topic_name is None or topic_name not in TOPIC_CONFIG_DEF:
                raise BrookError(ErrorCode.INVALID_CONFIG, f"unknown config {op.name}")
            if describe_type(topic_name) != "list":
                raise BrookError(
                    ErrorCode.INVALID_CONFIG,
                    f"{op.name} is not a list; APPEND and SUBTRACT need one",
                )
            items = _list_value(updated.get(op.name), topic_name)
            given = [item.strip() for item in op.value.split(",") if item.strip()]
            if op.op == admin_pb2.ALTER_CONFIG_OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            updated[op.name] = ",".join(items)
        else:
            raise BrookError(ErrorCode.INVALID_REQUEST, f"unknown operation on {op.name}")
    validate = validate_topic_configs if resource.type == TOPIC else validate_broker_default_configs
    problem = validate(updated)
    if problem is not None:
        raise BrookError(ErrorCode.INVALID_CONFIG, problem)
    for name in sorted(set(current) | set(updated)):
        if current.get(name) != updated.get(name):
            changes.put_config(resource.type, resource.name, name, updated.get(name))


def _list_value(value: str | None, topic_name: str) -> list[str]:
    if value is None:
        default = TOPIC_CONFIG_DEF.key(topic_name).default
        return list(default) if isinstance(default, tuple) else []
    return [item.strip() for item in value.split(",") if item.strip()]


def _format_default(topic_name: str) -> str:
    default = TOPIC_CONFIG_DEF.key(topic_name).default
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ",".join(default)
    return str(default)


def _entry(
    name: str,
    topic_name: str,
    chain: Sequence[tuple[str, str, int]],
    synonyms: bool,
    documentation: bool,
) -> admin_pb2.ConfigEntry:
    """``chain``: (name, value, source) from highest precedence down, the default last."""
    _, value, source = chain[0]
    entry = admin_pb2.ConfigEntry(
        name=name,
        value=value,
        source=source,  # type: ignore[arg-type]
        type=describe_type(topic_name),
    )
    if synonyms:
        entry.synonyms.extend(
            admin_pb2.ConfigSynonym(name=n, value=v, source=s)  # type: ignore[arg-type]
            for n, v, s in chain
        )
    if documentation:
        entry.documentation = TOPIC_CONFIG_DEF.key(topic_name).doc
    return entry


def _topic_config_entries(
    image: ControllerImage,
    overrides: Mapping[str, str],
    names: Sequence[str],
    synonyms: bool,
    documentation: bool,
) -> list[admin_pb2.ConfigEntry]:
    defaults = image.resource_configs(BROKER, "")
    entries = []
    for key in TOPIC_CONFIG_DEF.keys:
        if names and key.name not in names:
            continue
        chain = []
        if key.name in overrides:
            chain.append(
                (key.name, overrides[key.name], admin_pb2.CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG)
            )
        broker_name = BROKER_SYNONYMS.get(key.name)
        if broker_name is not None and broker_name in defaults:
            chain.append(
                (
                    broker_name,
                    defaults[broker_name],
                    admin_pb2.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
                )
            )
        chain.append((key.name, _format_default(key.name), admin_pb2.CONFIG_SOURCE_DEFAULT_CONFIG))
        entries.append(_entry(key.name, key.name, chain, synonyms, documentation))
    return entries


def describe_configs(
    image: ControllerImage,
    request: admin_pb2.DescribeConfigsResource,
    synonyms: bool,
    documentation: bool,
) -> list[admin_pb2.ConfigEntry]:
    """A topic's configs: its override, else the cluster-wide dynamic default, else Kafka's
    default (a storage node's static setting, which the controller does not know, would come
    between the last two). A node's (or, for the empty name, every node's) dynamic defaults."""
    resource = request.resource
    overrides = _resource_overrides(image, resource)
    names = list(request.names)
    if resource.type == TOPIC:
        return _topic_config_entries(image, overrides, names, synonyms, documentation)
    cluster_defaults = image.resource_configs(BROKER, "")
    entries = []
    for topic_name, broker_name in sorted(BROKER_SYNONYMS.items(), key=lambda item: item[1]):
        if names and broker_name not in names:
            continue
        chain = []
        if resource.name and broker_name in overrides:
            chain.append(
                (broker_name, overrides[broker_name], admin_pb2.CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG)
            )
        if broker_name in cluster_defaults:
            chain.append(
                (
                    broker_name,
                    cluster_defaults[broker_name],
                    admin_pb2.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
                )
            )
        chain.append(
            (broker_name, _format_default(topic_name), admin_pb2.CONFIG_SOURCE_DEFAULT_CONFIG)
        )
        entries.append(_entry(broker_name, topic_name, chain, synonyms, documentation))
    entries.extend(
        _node_config_entry(key, resource.name, overrides, cluster_defaults, synonyms, documentation)
        for key in NODE_DYNAMIC_CONFIG_DEF.keys
        if not names or key.name in names
    )
    return entries


def _node_config_entry(
    key: ConfigKey,
    node: str,
    overrides: Mapping[str, str],
    cluster_defaults: Mapping[str, str],
    synonyms: bool,
    documentation: bool,
) -> admin_pb2.ConfigEntry:
    """A node-only dynamic config (a replication throttle rate): the node's override, else
    every node's dynamic default, else the default."""
    chain = []
    if node and key.name in overrides:
        chain.append((overrides[key.name], admin_pb2.CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG))
    if key.name in cluster_defaults:
        chain.append(
            (cluster_defaults[key.name], admin_pb2.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)
        )
    chain.append((str(key.default), admin_pb2.CONFIG_SOURCE_DEFAULT_CONFIG))
    value, source = chain[0]
    entry = admin_pb2.ConfigEntry(name=key.name, value=value, source=source, type="long")
    if synonyms:
        entry.synonyms.extend(
            admin_pb2.ConfigSynonym(name=key.name, value=v, source=s) for v, s in chain
        )
    if documentation:
        entry.documentation = key.doc
    return entry


# --------------------------------------------------------------------------- describe


def topic_metadata(
    image: ControllerImage, topic: metadata_pb2.TopicRecord
) -> storage_pb2.TopicMetadata:
    partitions = image.topic_partitions(topic.topic_id)
    return storage_pb2.TopicMetadata(
        name=topic.name,
        topic_id=topic.topic_id,
        internal=topic.internal,
        partitions=[
            storage_pb2.PartitionMetadata(
                partition=p.partition,
                error_code=(ErrorCode.LEADER_NOT_AVAILABLE if p.leader < 0 else ErrorCode.NONE),  # type: ignore[arg-type]
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replicas=p.replicas,
                isr=p.isr,
                offline_replicas=[r for r in p.replicas if not image.is_live(r)],
            )
            for _, p in sorted(partitions.items())
        ],
    )
