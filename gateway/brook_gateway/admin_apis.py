"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, AlterPartitionReassignments and ListPartitionReassignments: forwarded
to the active controller's AdminService, whose answers already carry Kafka's error codes.
DeleteRecords: each partition at its leader storage node (StorageService.DeleteRecords),
answered per partition.

After a successful topic change the gateway waits (within the request's timeout) until its
own metadata cache shows it, so a client that sends Metadata right after CreateTopics sees
the topic, as with Kafka.
"""

from __future__ import annotations

from typing import Any, Final

from brook.errors import ErrorCode
from brook.security.acl import WILDCARD_RESOURCE
from brook.security.authorizer import (
    ALTER,
    ALTER_CONFIGS,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    TOPIC,
    Action,
    cluster_action,
    operation_name,
)
from brook.v1 import admin_pb2, common_pb2, metadata_pb2, storage_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import Authorization, Items, named, on_cluster, topic_items
from brook_gateway.backend import Backend
from brook_gateway.fan_out import Part, fan_out
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.protocol.primitives import UUID_ZERO
from brook_gateway.upstream import UpstreamError

__all__ = ["admin_handlers"]

# Kafka's legacy AlterConfigs replaces a resource's whole set of overrides.
_DYNAMIC_TOPIC_SOURCE: Final = admin_pb2.CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG


def _timeout_s(backend: Backend, timeout_ms: int) -> float:
    limit_s = backend.upstreams.request_timeout_s
    return limit_s if timeout_ms <= 0 else min(timeout_ms / 1000, limit_s)


def _per_topic_error(list_field: str) -> Any:
    """The answer reporting one error for every topic of a request's `topics`."""

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {list_field: [{"name": t["name"], "error_code": code} for t in request["topics"]]}

    return error


def _every_topic_failed(list_field: str, topics: list[Message], error: UpstreamError) -> Message:
    """The answer when the controller could not be asked: every topic of the request fails
    with ``error``'s code and text (null when it has none, as a controller's answer)."""
    return {
        list_field: [
            {"name": t["name"], "error_code": int(error.code), "error_message": str(error) or None}
            for t in topics
        ]
    }


def _topic_error_codes(response: Any) -> list[int]:
    """The per-topic error codes of a controller answer that lists ``topics``."""
    return [t.error_code for t in response.topics]


# DescribeConfigs v3's ConfigType numbers, by the type names the controller gives.
_CONFIG_TYPES: Final = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}
_CONFIG_TYPE_UNKNOWN: Final = 0


def _config_value(entry: admin_pb2.ConfigEntry) -> str | None:
    """Kafka's null for a sensitive value or a setting without one."""
    return entry.value if entry.HasField("value") else None


def _config_source(entry: admin_pb2.ConfigEntry) -> int:
    """Kafka's ConfigSource number (Brook's enum has its values); -1 when unknown."""
    return int(entry.source) or -1


def _create_topics(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        topics = [
            admin_pb2.CreatableTopic(
                name=t["name"],
                num_partitions=t["num_partitions"],
                replication_factor=t["replication_factor"],
                assignments=[
                    admin_pb2.ReplicaAssignment(
                        partition=a["partition_index"], broker_ids=a["broker_ids"]
                    )
                    for a in t["assignments"]
                ],
                configs={c["name"]: c["value"] for c in t["configs"] if c["value"] is not None},
            )
            for t in request["topics"]
        ]
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "CreateTopics",
                admin_pb2.CreateTopicsRequest(
                    topics=topics,
                    timeout_ms=request["timeout_ms"],
                    validate_only=request["validate_only"],
                ),
                _topic_error_codes,
            )
        except UpstreamError as e:
            return _every_topic_failed("topics", request["topics"], e)
        created = [t.name for t in response.topics if t.error_code == 0]
        if created and not request["validate_only"]:
            image = backend.image
            await backend.image.wait_until(
                lambda: all(n in image.topics and image.topics[n].partitions for n in created),
                _timeout_s(backend, request["timeout_ms"]),
            )
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t.name,
                    "error_code": int(t.error_code),
                    "error_message": t.error_message or None,
                    # v7+ (also with validate_only: the id the topic would have had).
                    "topic_id": t.topic_id or UUID_ZERO,
                    # v5+: what was created (or would be), the defaults filled in.
                    "num_partitions": t.num_partitions or -1,
                    "replication_factor": t.replication_factor or -1,
                    "configs": [
                        {
                            "name": c.name,
                            "value": _config_value(c),
                            "read_only": c.read_only,
                            "config_source": _config_source(c),
                            "is_sensitive": c.sensitive,
                        }
                        for c in t.configs
                    ],
                }
                for t in response.topics
            ],
        }

    def creatable(item: Message, request: Message, context: RequestContext) -> list[Action]:
        del request, context
        return [Action(TOPIC, item["name"], CREATE, cluster_grants=True)]

    error = _per_topic_error("topics")
    return ApiHandler(
        ApiKey.CREATE_TOPICS,
        handle,
        versions=(2, 7),
        authorization=Authorization(
            "CREATE on the cluster or on each topic",
            items=(Items("topics", "topics", creatable),),
        ),
        error_response=error,
    )


def _topics_to_delete(request: Message, version: int) -> list[tuple[str | None, bytes]]:
    """(name, id) of each topic a DeleteTopics names, in order: v0-5 by name; v6 by name or
    by id (the other left null or zero)."""
    if version < 6:
        return [(name, UUID_ZERO) for name in request["topic_names"]]
    return [(t["name"], t["topic_id"]) for t in request["topics"]]


def _target_problem(name: str | None, topic_id: bytes) -> str | None:
    if name is None and topic_id == UUID_ZERO:
        return "names neither a topic nor a topic id"
    if name is not None and topic_id != UUID_ZERO:
        return "names both a topic and a topic id; give one"
    return None


def _deleted_topic(name: str | None, topic_id: bytes, code: int, message: str) -> Message:
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": code,
        "error_message": message or None,
    }


def _delete_topics_error(request: Message, context: RequestContext, code: int) -> Message:
    targets = _topics_to_delete(request, context.api_version)
    return {"responses": [_deleted_topic(n, i, code, "") for n, i in targets]}


def _delete_topics(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        targets = _topics_to_delete(request, context.api_version)
        answers: list[Message | None] = []
        for name, topic_id in targets:
            problem = _target_problem(name, topic_id)
            answers.append(
                None
                if problem is None
                else _deleted_topic(name, topic_id, int(ErrorCode.INVALID_REQUEST), problem)
            )
        # The controller answers the names, then the ids, each in the order sent.
        by_name = [i for i, a in enumerate(answers) if a is None and targets[i][0] is not None]
        by_id = [i for i, a in enumerate(answers) if a is None and targets[i][0] is None]
        if by_name or by_id:
            try:
                response = await backend.upstreams.admin(
                    backend.controllers,
                    "DeleteTopics",
                    admin_pb2.DeleteTopicsRequest(
                        names=[targets[i][0] or "" for i in by_name],
                        topic_ids=[targets[i][1] for i in by_id],
                        timeout_ms=request["timeout_ms"],
                    ),
                    _topic_error_codes,
                )
            except UpstreamError as e:
                return _delete_topics_error(request, context, int(e.code))
            for index, r in zip(by_name + by_id, response.topics, strict=True):
                name, topic_id = targets[index]
                # A topic given by id is named in the answer when the controller knew it.
                answers[index] = _deleted_topic(
                    r.name or name, r.topic_id or topic_id, int(r.error_code), r.error_message
                )
            deleted = [r.name for r in response.topics if r.error_code == 0]
            await backend.image.wait_until(
                lambda: not any(n in backend.image.topics for n in deleted),
                _timeout_s(backend, request["timeout_ms"]),
            )
        return {"throttle_time_ms": 0, "responses": answers}

    # v6 names topics by name or by id. An id this gateway's metadata cannot name (unknown, or
    # created a moment ago) needs DELETE on every topic (the literal "*"): the controller then
    # answers UNKNOWN_TOPIC_ID for an id it does not know either, as Kafka does, and nobody
    # deletes a topic they may not by naming it by an id the gateway has not seen yet.
    def deletable(item: Message, request: Message, context: RequestContext) -> list[Action]:
        del request, context
        name = item["name"]
        if name is None:
            state = backend.image.topic_by_id(item["topic_id"])
            name = WILDCARD_RESOURCE if state is None else state.name
        return [Action(TOPIC, name, DELETE)]

    return ApiHandler(
        ApiKey.DELETE_TOPICS,
        handle,
        versions=(0, 6),
        authorization=Authorization(
            "DELETE on each topic (named or by id)",
            items=(
                Items("topic_names", "responses", named(TOPIC, DELETE), versions=(0, 5)),
                Items("topics", "responses", deletable, versions=(6, 6)),
            ),
        ),
        error_response=_delete_topics_error,
    )


def _create_partitions(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        topics = []
        for t in request["topics"]:
            state = backend.image.topics.get(t["name"])
            first_new = len(state.partitions) if state is not None else 0
            topics.append(
                admin_pb2.CreatePartitionsTopic(
                    name=t["name"],
                    count=t["count"],
                    assignments=[
                        admin_pb2.ReplicaAssignment(
                            partition=first_new + i, broker_ids=a["broker_ids"]
                        )
                        for i, a in enumerate(t["assignments"] or [])
                    ],
                )
            )
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "CreatePartitions",
                admin_pb2.CreatePartitionsRequest(
                    topics=topics,
                    timeout_ms=request["timeout_ms"],
                    validate_only=request["validate_only"],
                ),
                _topic_error_codes,
            )
        except UpstreamError as e:
            return _every_topic_failed("results", request["topics"], e)
        return {
            "throttle_time_ms": 0,
            "results": [
                {
                    "name": t.name,
                    "error_code": int(t.error_code),
                    "error_message": t.error_message or None,
                }
                for t in response.topics
            ],
        }

    error = _per_topic_error("results")
    # v2 is v1 in the flexible encoding; v3 adds nothing (Kafka's quota semantics).
    return ApiHandler(
        ApiKey.CREATE_PARTITIONS,
        handle,
        versions=(0, 3),
        authorization=Authorization(
            "ALTER on each topic", items=(topic_items("topics", "results", ALTER),)
        ),
        error_response=error,
    )


def _resource(resource_type: int, name: str) -> admin_pb2.ConfigResource:
    return admin_pb2.ConfigResource(type=resource_type, name=name)  # type: ignore[arg-type]


def _resources_error(list_field: str) -> Any:
    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {
            list_field: [
                {
                    "error_code": code,
                    "resource_type": r["resource_type"],
                    "resource_name": r["resource_name"],
                }
                for r in request["resources"]
            ]
        }

    return error


def _configs_authorization(operation: int, response_key: str) -> Authorization:
    """Kafka's rule for a configs API: ``operation`` on each topic resource, on the cluster
    for a broker (or broker logger) resource."""

    def actions(resource: Message, request: Message, context: RequestContext) -> list[Action]:
        del request, context
        if resource["resource_type"] == metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC:
            return [Action(TOPIC, resource["resource_name"], operation)]
        return [cluster_action(operation)]

    return Authorization(
        f"{operation_name(operation)} on each topic; on the cluster for a broker",
        items=(Items("resources", response_key, actions),),
    )


def _describe_configs(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "DescribeConfigs",
                admin_pb2.DescribeConfigsRequest(
                    resources=[
                        admin_pb2.DescribeConfigsResource(
                            resource=_resource(r["resource_type"], r["resource_name"]),
                            names=r["configuration_keys"] or [],
                        )
                        for r in request["resources"]
                    ],
                    include_synonyms=request["include_synonyms"],
                    include_documentation=request["include_documentation"],
                ),
                lambda r: [x.error_code for x in r.results],
            )
        except UpstreamError as e:
            response_error: Message = _resources_error("results")(request, context, int(e.code))
            return response_error
        return {
            "throttle_time_ms": 0,
            "results": [
                {
                    "error_code": int(r.error_code),
                    "error_message": r.error_message or None,
                    "resource_type": int(r.resource.type),
                    "resource_name": r.resource.name,
                    "configs": [
                        {
                            "name": c.name,
                            "value": _config_value(c),
                            "read_only": c.read_only,
                            "is_default": c.source == admin_pb2.CONFIG_SOURCE_DEFAULT_CONFIG,
                            "config_source": _config_source(c),
                            "is_sensitive": c.sensitive,
                            "synonyms": [
                                {
                                    "name": s.name,
                                    "value": s.value if s.HasField("value") else None,
                                    "source": int(s.source),
                                }
                                for s in c.synonyms
                            ],
                            # v3+.
                            "config_type": _CONFIG_TYPES.get(c.type, _CONFIG_TYPE_UNKNOWN),
                            "documentation": c.documentation or None,
                        }
                        for c in r.configs
                    ],
                }
                for r in response.results
            ],
        }

    return ApiHandler(
        ApiKey.DESCRIBE_CONFIGS,
        handle,
        versions=(0, 4),
        authorization=_configs_authorization(DESCRIBE_CONFIGS, "results"),
        error_response=_resources_error("results"),
    )


async def _current_overrides(backend: Backend, resources: list[Message]) -> dict[str, set[str]]:
    """The dynamic overrides each topic resource has now (legacy AlterConfigs resets those it
    does not name)."""
    topics = [
        r["resource_name"]
        for r in resources
        if r["resource_type"] == metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC
    ]
    if not topics:
        return {}
    response = await backend.upstreams.admin(
        backend.controllers,
        "DescribeConfigs",
        admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.DescribeConfigsResource(
                    resource=_resource(metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC, name)
                )
                for name in topics
            ]
        ),
        lambda r: [x.error_code for x in r.results],
    )
    return {
        r.resource.name: {c.name for c in r.configs if c.source == _DYNAMIC_TOPIC_SOURCE}
        for r in response.results
    }


async def _send_alter_configs(
    backend: Backend,
    request: Message,
    context: RequestContext,
    resources: list[admin_pb2.AlterConfigsResource],
) -> Message:
    """Sends the changes to the controller and answers AlterConfigs or IncrementalAlterConfigs
    (their responses have the same shape)."""
    try:
        response = await backend.upstreams.admin(
            backend.controllers,
            "AlterConfigs",
            admin_pb2.AlterConfigsRequest(
                resources=resources, validate_only=request["validate_only"]
            ),
            lambda r: [x.error_code for x in r.results],
        )
    except UpstreamError as e:
        alter_error: Message = _resources_error("responses")(request, context, int(e.code))
        return alter_error
    return {
        "throttle_time_ms": 0,
        "responses": [
            {
                "error_code": int(r.error_code),
                "error_message": r.error_message or None,
                "resource_type": int(r.resource.type),
                "resource_name": r.resource.name,
            }
            for r in response.results
        ],
    }


def _alter_configs(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        try:
            current = await _current_overrides(backend, request["resources"])
        except UpstreamError as e:
            alter_error: Message = _resources_error("responses")(request, context, int(e.code))
            return alter_error
        resources = []
        for r in request["resources"]:
            named = {c["name"] for c in r["configs"]}
            ops = [
                admin_pb2.AlterableConfig(
                    name=c["name"], op=admin_pb2.ALTER_CONFIG_OP_SET, value=c["value"]
                )
                if c["value"] is not None
                else admin_pb2.AlterableConfig(name=c["name"], op=admin_pb2.ALTER_CONFIG_OP_DELETE)
                for c in r["configs"]
            ]
            ops.extend(
                admin_pb2.AlterableConfig(name=name, op=admin_pb2.ALTER_CONFIG_OP_DELETE)
                for name in sorted(current.get(r["resource_name"], set()) - named)
            )
            resources.append(
                admin_pb2.AlterConfigsResource(
                    resource=_resource(r["resource_type"], r["resource_name"]), configs=ops
                )
            )
        return await _send_alter_configs(backend, request, context, resources)

    # v2 is v1 in the flexible encoding.
    return ApiHandler(
        ApiKey.ALTER_CONFIGS,
        handle,
        versions=(0, 2),
        authorization=_configs_authorization(ALTER_CONFIGS, "responses"),
        error_response=_resources_error("responses"),
    )


# IncrementalAlterConfigs' operation codes (KIP-339) -> the controller's. Any other code leaves
# the op UNSPECIFIED, which the controller refuses as an unknown operation (INVALID_REQUEST),
# changing nothing of that resource.
_INCREMENTAL_OPS: Final = {
    0: admin_pb2.ALTER_CONFIG_OP_SET,
    1: admin_pb2.ALTER_CONFIG_OP_DELETE,
    2: admin_pb2.ALTER_CONFIG_OP_APPEND,
    3: admin_pb2.ALTER_CONFIG_OP_SUBTRACT,
}


def _incremental_alter_configs(backend: Backend) -> ApiHandler:
    """KIP-339: SET, DELETE, APPEND and SUBTRACT (the last two for list configs) on the named
    configs only; the controller applies a resource's operations all or nothing."""

    async def handle(request: Message, context: RequestContext) -> Message:
        resources = []
        for r in request["resources"]:
            ops = []
            for c in r["configs"]:
                op = admin_pb2.AlterableConfig(
                    name=c["name"],
                    op=_INCREMENTAL_OPS.get(
                        c["config_operation"], admin_pb2.ALTER_CONFIG_OP_UNSPECIFIED
                    ),
                )
                if c["value"] is not None:
                    op.value = c["value"]
                ops.append(op)
            resources.append(
                admin_pb2.AlterConfigsResource(
                    resource=_resource(r["resource_type"], r["resource_name"]), configs=ops
                )
            )
        return await _send_alter_configs(backend, request, context, resources)

    return ApiHandler(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        handle,
        versions=(0, 1),
        authorization=_configs_authorization(ALTER_CONFIGS, "responses"),
        error_response=_resources_error("responses"),
    )


def _alter_partition_reassignments(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        # null cancels a move; an empty list is no assignment at all (Kafka refuses it). The
        # controllers' request has only the empty list, meaning cancel: refused here.
        empty = [
            (t["name"], p["partition_index"])
            for t in request["topics"]
            for p in t["partitions"]
            if p["replicas"] is not None and not p["replicas"]
        ]
        wanted = [
            admin_pb2.PartitionReassignment(
                topic=t["name"], partition=p["partition_index"], replicas=p["replicas"] or ()
            )
            for t in request["topics"]
            for p in t["partitions"]
            if p["replicas"] is None or p["replicas"]
        ]
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "AlterPartitionReassignments",
                admin_pb2.AlterPartitionReassignmentsRequest(
                    reassignments=wanted, timeout_ms=request["timeout_ms"]
                ),
                lambda r: [result.error_code for result in r.results],
            )
        except UpstreamError as e:
            return _reassignments_failed(request, int(e.code), str(e) or None)
        by_topic: dict[str, list[Message]] = {}
        for result in response.results:
            by_topic.setdefault(result.topic, []).append(
                {
                    "partition_index": result.partition,
                    "error_code": int(result.error_code),
                    "error_message": result.error_message or None,
                }
            )
        for name, index in empty:
            by_topic.setdefault(name, []).append(
                {
                    "partition_index": index,
                    "error_code": int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                    "error_message": "an empty replica list (null cancels a reassignment)",
                }
            )
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "responses": [
                {"name": name, "partitions": partitions} for name, partitions in by_topic.items()
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return _reassignments_failed(request, code, None)

    return ApiHandler(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        handle,
        versions=(0, 0),
        authorization=Authorization("ALTER on the cluster", request=on_cluster(ALTER)),
        error_response=error,
    )


def _reassignments_failed(request: Message, code: int, message: str | None) -> Message:
    """Every partition of an AlterPartitionReassignments request failed with ``code``."""
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "responses": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": code,
                        "error_message": message,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


def _list_partition_reassignments(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        wanted = [
            common_pb2.TopicPartition(topic=t["name"], partition=index)
            for t in request["topics"] or []
            for index in t["partition_indexes"]
        ]
        if request["topics"] is not None and not wanted:
            # Topics named with no partitions: nothing asked, nothing moving (as in Kafka).
            return {"throttle_time_ms": 0, "error_code": 0, "topics": []}
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "ListPartitionReassignments",
                admin_pb2.ListPartitionReassignmentsRequest(partitions=wanted),
                lambda r: [],
            )
        except UpstreamError as e:
            return {
                "throttle_time_ms": 0,
                "error_code": int(e.code),
                "error_message": str(e) or None,
                "topics": [],
            }
        by_topic: dict[str, list[Message]] = {}
        for moving in response.reassignments:
            by_topic.setdefault(moving.topic, []).append(
                {
                    "partition_index": moving.partition,
                    "replicas": list(moving.replicas),
                    "adding_replicas": list(moving.adding_replicas),
                    "removing_replicas": list(moving.removing_replicas),
                }
            )
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del request, context
        return {"throttle_time_ms": 0, "error_code": code, "topics": []}

    return ApiHandler(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        handle,
        versions=(0, 0),
        authorization=Authorization("DESCRIBE on the cluster", request=on_cluster(DESCRIBE)),
        error_response=error,
    )


# DeleteRecords' low watermark of a partition whose deletion failed, as Kafka answers.
_NO_LOW_WATERMARK: Final = -1


def _delete_records(backend: Backend) -> ApiHandler:
    """Each partition's records below its offset (-1: the high watermark) deleted at its
    leader: one StorageService.DeleteRecords call per leader node. A partition the gateway's
    metadata lacks is UNKNOWN_TOPIC_OR_PARTITION, one whose leader moved or does not answer
    NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata and retries), an offset above the
    high watermark or negative (but -1) OFFSET_OUT_OF_RANGE, as the leader answers."""

    def answer(
        request: Message, results: dict[tuple[str, int], tuple[int, int]], default: int
    ) -> Message:
        """``results``: (topic, partition) -> (low watermark, error code); a partition
        without one failed with ``default``."""
        topics = []
        for t in request["topics"]:
            partitions = []
            for p in t["partitions"]:
                index = p["partition_index"]
                low_watermark, code = results.get((t["name"], index), (_NO_LOW_WATERMARK, default))
                partitions.append(
                    {"partition_index": index, "low_watermark": low_watermark, "error_code": code}
                )
            topics.append({"name": t["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results: dict[tuple[str, int], tuple[int, int]] = {}

        def fail(part: Part, code: ErrorCode, message: str) -> None:
            del message
            results[(part[0], part[1])] = (_NO_LOW_WATERMARK, int(code))

        async def call(address: str, items: list[Part]) -> None:
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).DeleteRecords,
                storage_pb2.DeleteRecordsRequest(
                    partitions=[
                        storage_pb2.DeleteRecordsPartition(topic=t, partition=p, offset=offset)
                        for t, p, offset in items
                    ],
                    timeout_ms=request["timeout_ms"],
                ),
            )
            for r in response.partitions:
                failed = r.error_code != ErrorCode.NONE
                results[(r.topic, r.partition)] = (
                    _NO_LOW_WATERMARK if failed else r.low_watermark,
                    int(r.error_code),
                )

        parts = [
            (t["name"], p["partition_index"], p["offset"])
            for t in request["topics"]
            for p in t["partitions"]
        ]
        await fan_out(backend, parts, call, fail)
        return answer(request, results, int(ErrorCode.UNKNOWN_SERVER_ERROR))

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return answer(request, {}, code)

    # v2 is v1 in the flexible encoding; v1 adds nothing (Kafka's quota semantics).
    return ApiHandler(
        ApiKey.DELETE_RECORDS,
        handle,
        versions=(0, 2),
        authorization=Authorization(
            "DELETE on each topic", items=(topic_items("topics", "topics", DELETE),)
        ),
        error_response=error,
    )


def admin_handlers(backend: Backend) -> list[ApiHandler]:
    return [
        _create_topics(backend),
        _delete_topics(backend),
        _delete_records(backend),
        _create_partitions(backend),
        _describe_configs(backend),
        _alter_configs(backend),
        _incremental_alter_configs(backend),
        _alter_partition_reassignments(backend),
        _list_partition_reassignments(backend),
    ]
