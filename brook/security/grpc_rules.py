"""What every gRPC method of every brook.v1 service needs: the authorization table.

``METHOD_RULES`` names, for each method (``brook.v1.StorageService/Produce``), the actions a
call needs (brook.security.authorizer.Action), computed from its request, or that it is
cluster-internal (CLUSTER_ACTION on the cluster: the calls the cluster's own processes make to
each other, such as replica fetching, registration, heartbeats and WatchMetadata). A call
needs every action its rule names; the interceptor (brook.security.grpc_authorization) refuses
it whole at the first one denied. Calls that list everything (GetMetadata or DescribeTopics
without names, ListGroups, ListTransactions) are answered with only what the caller may
describe, as Kafka's Metadata and ListGroups are. docs/decisions.md (Security: authorization)
has the table in words; tests/unit/security/test_grpc_authorization.py fails when a method has no
rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from brook.errors import ErrorCode
from brook.security.acl import WILDCARD_RESOURCE
from brook.security.authorizer import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER_ACTION,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    Action,
    Authorizer,
    cluster_action,
)
from brook.v1 import group_pb2, metadata_pb2, storage_pb2

__all__ = ["METHOD_RULES", "MethodRule", "Permits"]

Permits = Callable[[Action], bool]
"""Whether the caller may take an action."""


@dataclass(frozen=True, slots=True)
class MethodRule:
    """How one gRPC method is authorized."""

    summary: str
    """The rule in words (docs/decisions.md's table)."""
    actions: Callable[[Any, Authorizer], Iterable[Action]]
    """The actions a call with this request needs (the authorizer resolves topic ids)."""
    reads_request: bool = True
    """False: the actions do not depend on the request (the only kind a client-streaming
    method may have: it is checked before its first message)."""
    filter_response: Callable[[Any, Any, Permits], None] | None = None
    """Removes from the response (given the request) what the caller may not describe."""


def _none(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del request, authorizer
    return ()


def _internal(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del request, authorizer
    return (cluster_action(CLUSTER_ACTION),)


OPEN: Final = MethodRule("none", _none, reads_request=False)
CLUSTER_INTERNAL: Final = MethodRule(
    "cluster-internal: CLUSTER_ACTION on the cluster", _internal, reads_request=False
)


def _on_cluster(operation: int, summary: str) -> MethodRule:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del request, authorizer
        return (cluster_action(operation),)

    return MethodRule(summary, actions, reads_request=False)


def _on_topics(operation: int, summary: str, names: Callable[[Any], Iterable[str]]) -> MethodRule:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        return [Action(TOPIC, name, operation) for name in dict.fromkeys(names(request))]

    return MethodRule(summary, actions)


def _partition_topics(request: Any) -> Iterable[str]:
    return (p.topic for p in request.partitions)


def _produce(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    if request.origin == storage_pb2.PRODUCE_ORIGIN_COORDINATOR:
        yield cluster_action(CLUSTER_ACTION)
    if request.transactional_id:
        yield Action(TRANSACTIONAL_ID, request.transactional_id, WRITE)
    for topic in dict.fromkeys(_partition_topics(request)):
        yield Action(TOPIC, topic, WRITE)


def _init_producer_id(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    if request.transactional_id:
        return (Action(TRANSACTIONAL_ID, request.transactional_id, WRITE),)
    return (cluster_action(IDEMPOTENT_WRITE),)


def _find_coordinator(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    kind = TRANSACTIONAL_ID if request.key_type == group_pb2.COORDINATOR_TYPE_TRANSACTION else GROUP
    return [Action(kind, key, DESCRIBE) for key in request.keys]


def _group_then_topics(
    group_operation: int, topic_operation: int
) -> Callable[[Any, Authorizer], Iterable[Action]]:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        yield Action(GROUP, request.group_id, group_operation)
        for topic in dict.fromkeys(_partition_topics(request)):
            yield Action(TOPIC, topic, topic_operation)

    return actions


def _describable_offsets(request: Any, response: Any, permits: Permits) -> None:
    """Keeps, in an answer for every partition of a group (none named), the offsets of the
    topics the caller may describe, as Kafka's OffsetFetch does."""
    if request.partitions:
        return
    kept = [p for p in response.partitions if permits(Action(TOPIC, p.topic, DESCRIBE))]
    del response.partitions[:]
    response.partitions.extend(kept)


def _on_group(operation: int, summary: str) -> MethodRule:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        return (Action(GROUP, request.group_id, operation),)

    return MethodRule(summary, actions)


def _on_groups(operation: int, summary: str) -> MethodRule:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        return [Action(GROUP, group, operation) for group in request.group_ids]

    return MethodRule(summary, actions)


def _txn_commit_offsets(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    yield Action(TRANSACTIONAL_ID, request.transactional_id, WRITE)
    yield from _group_then_topics(READ, READ)(request, authorizer)


def _on_transaction(summary: str) -> MethodRule:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        return (Action(TRANSACTIONAL_ID, request.transactional_id, WRITE),)

    return MethodRule(summary, actions)


def _add_partitions_to_txn(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    if request.verify_only:
        # Kafka's AddPartitionsToTxn v4+ verification is asked by brokers only.
        yield cluster_action(CLUSTER_ACTION)
        return
    yield Action(TRANSACTIONAL_ID, request.transactional_id, WRITE)
    for topic in dict.fromkeys(_partition_topics(request)):
        yield Action(TOPIC, topic, WRITE)


def _add_offsets_to_txn(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    return (
        Action(TRANSACTIONAL_ID, request.transactional_id, WRITE),
        Action(GROUP, request.group_id, READ),
    )


def _create_topics(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    return [Action(TOPIC, t.name, CREATE, cluster_grants=True) for t in request.topics]


def _delete_topics(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    names = list(request.names)
    # An id this process's metadata cannot name needs DELETE on every topic (the literal
    # "*"); the controller answers UNKNOWN_TOPIC_ID for an id it does not know, as Kafka does.
    names.extend(
        WILDCARD_RESOURCE if (n := authorizer.topic_name(i)) is None else n
        for i in request.topic_ids
    )
    return [Action(TOPIC, name, DELETE) for name in dict.fromkeys(names)]


def _config_actions(operation: int) -> Callable[[Any, Authorizer], Iterable[Action]]:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        for entry in request.resources:
            if entry.resource.type == metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC:
                yield Action(TOPIC, entry.resource.name, operation)
            else:
                yield cluster_action(operation)

    return actions


def _describe_named_topics(field: str) -> Callable[[Any, Authorizer], Iterable[Action]]:
    def actions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
        del authorizer
        return [Action(TOPIC, name, DESCRIBE) for name in getattr(request, field)]

    return actions


def _describable_topics(field: str) -> Callable[[Any, Any, Permits], None]:
    """Keeps, in a response listing every topic (no names asked), the ones the caller may
    describe; in one naming topics, answers those it may not describe with
    TOPIC_AUTHORIZATION_FAILED and nothing else (not even whether they exist)."""

    def filter_response(request: Any, response: Any, permits: Permits) -> None:
        named = bool(getattr(request, field))
        kept = []
        for topic in response.topics:
            if permits(Action(TOPIC, topic.name, DESCRIBE)):
                kept.append(topic)
            elif named:
                kept.append(
                    type(topic)(
                        name=topic.name,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        error_message=f"not authorized to describe topic {topic.name!r}",
                    )
                )
        del response.topics[:]
        response.topics.extend(kept)

    return filter_response


def _describable_groups(request: Any, response: Any, permits: Permits) -> None:
    del request
    if permits(cluster_action(DESCRIBE)):
        return
    kept = [g for g in response.groups if permits(Action(GROUP, g.group_id, DESCRIBE))]
    del response.groups[:]
    response.groups.extend(kept)


def _describable_transactions(request: Any, response: Any, permits: Permits) -> None:
    del request
    kept = [
        t
        for t in response.transactions
        if permits(Action(TRANSACTIONAL_ID, t.transactional_id, DESCRIBE))
    ]
    del response.transactions[:]
    response.transactions.extend(kept)


def _describe_transactions(request: Any, authorizer: Authorizer) -> Iterable[Action]:
    del authorizer
    return [Action(TRANSACTIONAL_ID, t, DESCRIBE) for t in request.transactional_ids]


_ADMIN: Final = "brook.v1.AdminService/"
_CONTROLLER: Final = "brook.v1.ControllerService/"
_GROUP: Final = "brook.v1.GroupCoordinatorService/"
_REPLICA: Final = "brook.v1.ReplicaService/"
_STORAGE: Final = "brook.v1.StorageService/"
_TRANSACTION: Final = "brook.v1.TransactionCoordinatorService/"

METHOD_RULES: Final[Mapping[str, MethodRule]] = {
    # AdminService: Kafka's admin APIs' rules.
    _ADMIN + "CreateTopics": MethodRule("CREATE on the cluster or on each topic", _create_topics),
    _ADMIN + "DeleteTopics": MethodRule("DELETE on each topic (ids resolved)", _delete_topics),
    _ADMIN + "DescribeTopics": MethodRule(
        "DESCRIBE on each named topic; without names, only describable topics are listed",
        _describe_named_topics("names"),
        filter_response=_describable_topics("names"),
    ),
    _ADMIN + "CreatePartitions": _on_topics(
        ALTER, "ALTER on each topic", lambda r: (t.name for t in r.topics)
    ),
    _ADMIN + "DescribeConfigs": MethodRule(
        "DESCRIBE_CONFIGS on each topic, or on the cluster for a broker",
        _config_actions(DESCRIBE_CONFIGS),
    ),
    _ADMIN + "AlterConfigs": MethodRule(
        "ALTER_CONFIGS on each topic, or on the cluster for a broker",
        _config_actions(ALTER_CONFIGS),
    ),
    _ADMIN + "DescribeCluster": OPEN,
    _ADMIN + "ElectLeaders": _on_cluster(ALTER, "ALTER on the cluster"),
    _ADMIN + "AlterPartitionReassignments": _on_cluster(ALTER, "ALTER on the cluster"),
    _ADMIN + "ListPartitionReassignments": _on_cluster(DESCRIBE, "DESCRIBE on the cluster"),
    _ADMIN + "UnregisterBroker": _on_cluster(ALTER, "ALTER on the cluster"),
    _ADMIN + "CreateAcls": _on_cluster(ALTER, "ALTER on the cluster"),
    _ADMIN + "DeleteAcls": _on_cluster(ALTER, "ALTER on the cluster"),
    _ADMIN + "DescribeAcls": _on_cluster(DESCRIBE, "DESCRIBE on the cluster"),
    _ADMIN + "AlterUserScramCredentials": _on_cluster(ALTER, "ALTER on the cluster"),
    _ADMIN + "DescribeUserScramCredentials": _on_cluster(DESCRIBE, "DESCRIBE on the cluster"),
    _ADMIN + "AlterClientQuotas": _on_cluster(ALTER_CONFIGS, "ALTER_CONFIGS on the cluster"),
    _ADMIN + "DescribeClientQuotas": _on_cluster(
        DESCRIBE_CONFIGS, "DESCRIBE_CONFIGS on the cluster"
    ),
    # ControllerService: the cluster's own processes, and the quorum's whereabouts.
    _CONTROLLER + "RegisterBroker": CLUSTER_INTERNAL,
    _CONTROLLER + "BrokerHeartbeat": CLUSTER_INTERNAL,
    _CONTROLLER + "WatchMetadata": CLUSTER_INTERNAL,
    _CONTROLLER + "AlterPartition": CLUSTER_INTERNAL,
    _CONTROLLER + "AllocateProducerIds": CLUSTER_INTERNAL,
    _CONTROLLER + "DescribeQuorum": OPEN,
    # GroupCoordinatorService: Kafka's group APIs' rules.
    _GROUP + "FindCoordinator": MethodRule(
        "DESCRIBE on each group or transactional id", _find_coordinator
    ),
    _GROUP + "JoinGroup": _on_group(READ, "READ on the group"),
    _GROUP + "SyncGroup": _on_group(READ, "READ on the group"),
    _GROUP + "Heartbeat": _on_group(READ, "READ on the group"),
    _GROUP + "LeaveGroup": _on_group(READ, "READ on the group"),
    _GROUP + "CommitOffsets": MethodRule(
        "READ on the group and on each topic", _group_then_topics(READ, READ)
    ),
    _GROUP + "FetchOffsets": MethodRule(
        "DESCRIBE on the group and on each topic; asked for every partition, only the "
        "topics the caller may describe are answered",
        _group_then_topics(DESCRIBE, DESCRIBE),
        filter_response=_describable_offsets,
    ),
    _GROUP + "DescribeGroups": _on_groups(DESCRIBE, "DESCRIBE on each group"),
    _GROUP + "ListGroups": MethodRule(
        "none; lists only groups the caller may DESCRIBE, unless DESCRIBE on the cluster",
        _none,
        filter_response=_describable_groups,
    ),
    _GROUP + "DeleteGroups": _on_groups(DELETE, "DELETE on each group"),
    _GROUP + "DeleteOffsets": MethodRule(
        "DELETE on the group, READ on each topic", _group_then_topics(DELETE, READ)
    ),
    _GROUP + "TxnCommitOffsets": MethodRule(
        "WRITE on the transactional id, READ on the group and on each topic",
        _txn_commit_offsets,
    ),
    _GROUP + "CompleteTransaction": CLUSTER_INTERNAL,
    # ReplicaService: followers and the cluster's own readers.
    _REPLICA + "ReplicaFetch": CLUSTER_INTERNAL,
    _REPLICA + "OffsetForLeaderEpoch": CLUSTER_INTERNAL,
    # StorageService: Kafka's data APIs' rules.
    _STORAGE + "Produce": MethodRule(
        "WRITE on each topic (and the transactional id); a coordinator's write: CLUSTER_ACTION",
        _produce,
    ),
    _STORAGE + "ProduceRecords": _on_topics(WRITE, "WRITE on each topic", _partition_topics),
    _STORAGE + "Fetch": _on_topics(READ, "READ on each topic", _partition_topics),
    _STORAGE + "Subscribe": _on_topics(READ, "READ on each topic", _partition_topics),
    _STORAGE + "ListOffsets": _on_topics(DESCRIBE, "DESCRIBE on each topic", _partition_topics),
    _STORAGE + "GetMetadata": MethodRule(
        "DESCRIBE on a topic to see it: a named topic the caller may not describe is answered "
        "TOPIC_AUTHORIZATION_FAILED (whether or not it exists), and a listing of every topic "
        "shows only describable ones, as Kafka's Metadata",
        _none,
        filter_response=_describable_topics("topics"),
    ),
    _STORAGE + "InitProducerId": MethodRule(
        "WRITE on the transactional id; without one IDEMPOTENT_WRITE on the cluster",
        _init_producer_id,
    ),
    _STORAGE + "DeleteRecords": _on_topics(DELETE, "DELETE on each topic", _partition_topics),
    _STORAGE + "WriteTxnMarkers": CLUSTER_INTERNAL,
    _STORAGE + "DescribeProducers": _on_topics(READ, "READ on each topic", _partition_topics),
    _STORAGE + "DescribeLogDirs": _on_cluster(DESCRIBE, "DESCRIBE on the cluster"),
    # TransactionCoordinatorService: Kafka's transaction APIs' rules.
    _TRANSACTION + "InitProducerId": MethodRule(
        "WRITE on the transactional id; without one IDEMPOTENT_WRITE on the cluster",
        _init_producer_id,
    ),
    _TRANSACTION + "AddPartitionsToTxn": MethodRule(
        "WRITE on the transactional id and on each topic; verify_only: CLUSTER_ACTION",
        _add_partitions_to_txn,
    ),
    _TRANSACTION + "AddOffsetsToTxn": MethodRule(
        "WRITE on the transactional id, READ on the group", _add_offsets_to_txn
    ),
    _TRANSACTION + "EndTxn": _on_transaction("WRITE on the transactional id"),
    _TRANSACTION + "DescribeTransactions": MethodRule(
        "DESCRIBE on each transactional id", _describe_transactions
    ),
    _TRANSACTION + "ListTransactions": MethodRule(
        "none; lists only transactional ids the caller may DESCRIBE",
        _none,
        filter_response=_describable_transactions,
    ),
}
