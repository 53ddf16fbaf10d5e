"""Consumer groups and coordinator look-ups: FindCoordinator (groups and transactional ids),
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
ListGroups and DeleteGroups.

Kafka clients must only ever talk Kafka to a gateway, never to a coordinator's gRPC port, so
FindCoordinator answers with one of the brokers Metadata lists (each served by a gateway),
picked from the owning coordinator's node id by `ClusterImage.coordinator_broker`, for a group
and for a transactional id alike. Every gateway therefore names the same broker for a key, and
whichever gateway receives a request forwards it to the key's owning coordinator
(coordinator_routing.py).

Member metadata, assignments and committed metadata pass through untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final

from brook.errors import ErrorCode
from brook.security.authorizer import (
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    Action,
)
from brook.v1 import common_pb2, group_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import (
    Authorization,
    Items,
    Permits,
    named,
    on_group,
    only_describable,
    topic_items,
)
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import NO_NODE, KafkaBroker
from brook_gateway.coordinator_routing import (
    CoordinatorRouteError,
    CoordinatorRouter,
    Routers,
    ask_coordinators_listed_here,
    gather_bounded,
    partitions_not_coordinator,
)
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey

__all__ = ["commit_error", "commit_offsets", "group_handlers", "unknown"]

# Kafka's FindCoordinator key types.
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
# Kafka's states as DescribeGroups and ListGroups name them.
_STATE_NAMES: Final = {
    group_pb2.GROUP_STATE_UNSPECIFIED: "",
    group_pb2.GROUP_STATE_EMPTY: "Empty",
    group_pb2.GROUP_STATE_PREPARING_REBALANCE: "PreparingRebalance",
    group_pb2.GROUP_STATE_COMPLETING_REBALANCE: "CompletingRebalance",
    group_pb2.GROUP_STATE_STABLE: "Stable",
    group_pb2.GROUP_STATE_DEAD: "Dead",
}
# ListGroups v5's name for the type of group Brook has: Kafka's classic protocol.
_GROUP_TYPE_CLASSIC: Final = "classic"
# DescribeGroups v3+: "not requested" (Kafka's INT32_MIN sentinel).
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
# JoinGroup v4 introduced MEMBER_ID_REQUIRED (KIP-394); older clients never see it.
_MEMBER_ID_REQUIRED_MIN_VERSION: Final = 4
# JoinGroup v9 tells a static leader to keep the group's assignment (KIP-814).
_SKIP_ASSIGNMENT_MIN_VERSION: Final = 9
# The longest a JoinGroup may wait for its group to rejoin (its rebalance timeout, capped at
# Kafka's default group.max.session.timeout.ms) before the gateway gives up on it.
JOIN_WAIT_MS_MAX: Final = 1_800_000
# How long an OffsetCommit (TxnOffsetCommit, AddPartitionsToTxn) naming a partition this
# gateway's metadata lacks waits for it to arrive before answering UNKNOWN_TOPIC_OR_PARTITION:
# far above the metadata's propagation between gateways (milliseconds), far below a client's
# request timeout.
COMMIT_METADATA_WAIT_MS: Final = 1000


def _client_host(peer: str) -> str:
    # Kafka shows a member's host as Java's InetAddress.toString() does: "/address".
    return "/" + peer.rsplit(":", 1)[0].strip("[]")


# FindCoordinator v4 looks up several keys at once (coordinator_keys, one answer each).
_FIND_COORDINATOR_BATCH_MIN_VERSION: Final = 4
_COORDINATOR_FIELDS: Final = ("node_id", "host", "port", "error_code", "error_message")


def _find_coordinator(backend: Backend, routers: Routers) -> ApiHandler:
    by_key_type = {KEY_TYPE_GROUP: routers.groups, KEY_TYPE_TRANSACTION: routers.transactions}

    def answer(code: int, message: str | None, broker: KafkaBroker | None = None) -> Message:
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "error_message": message,
            "node_id": broker.node_id if broker else NO_NODE,
            "host": broker.host if broker else "",
            "port": broker.port if broker else -1,
        }

    async def find(key: str, key_type: int, listener: str) -> Message:
        router = by_key_type.get(key_type)
        if router is None:
            return answer(int(ErrorCode.INVALID_REQUEST), f"unknown key type {key_type}")
        try:
            # Looked up afresh: a client asks after its coordinator stopped answering.
            owner = await router.owner(key, refresh=True)
        except CoordinatorRouteError as e:
            return answer(int(e.code), str(e) or None)
        image = backend.image
        broker = image.coordinator_broker(image.kafka_brokers(listener), owner.node_id)
        if broker is None:
            return answer(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "no gateway is registered")
        return answer(int(ErrorCode.NONE), None, broker)

    def batched(keys: list[str], found: list[Message]) -> Message:
        # v4+ (KIP-699): one answer per key, each in the shape of a v0-3 answer.
        return {
            "throttle_time_ms": 0,
            "coordinators": [
                {name: f[name] for name in _COORDINATOR_FIELDS} | {"key": key}
                for key, f in zip(keys, found, strict=True)
            ],
        }

    async def handle(request: Message, context: RequestContext) -> Message:
        key_type = request["key_type"]
        if context.api_version < _FIND_COORDINATOR_BATCH_MIN_VERSION:
            return await find(request["key"], key_type, context.listener)
        keys = request["coordinator_keys"]
        found = await gather_bounded(
            [partial(find, key, key_type, context.listener) for key in keys]
        )
        return batched(keys, found)

    def error(request: Message, context: RequestContext, code: int) -> Message:
        if context.api_version < _FIND_COORDINATOR_BATCH_MIN_VERSION:
            return answer(code, None)
        keys = request["coordinator_keys"]
        return batched(keys, [answer(code, None) for _ in keys])

    return ApiHandler(
        ApiKey.FIND_COORDINATOR,
        handle,
        versions=(0, 4),
        authorization=Authorization(
            "DESCRIBE on the group or transactional id",
            request=_coordinator_key(lambda request: [request["key"]], (0, 3)),
            items=(
                Items(
                    "coordinator_keys",
                    "coordinators",
                    lambda key, request, context: _coordinator_actions(request, [key]),
                    versions=(_FIND_COORDINATOR_BATCH_MIN_VERSION, 4),
                ),
            ),
        ),
        error_response=error,
    )


# FindCoordinator's key types (Kafka's CoordinatorType).
_KEY_TYPE_TRANSACTION: Final = 1


def _coordinator_actions(request: Message, keys: list[str]) -> list[Action]:
    """DESCRIBE on each key: a group, or a transactional id (key type 1)."""
    kind = TRANSACTIONAL_ID if request["key_type"] == _KEY_TYPE_TRANSACTION else GROUP
    return [Action(kind, key, DESCRIBE) for key in keys]


def _coordinator_key(
    keys: Callable[[Message], list[str]], versions: tuple[int, int]
) -> Callable[[Message, RequestContext], list[Action]]:
    def actions(request: Message, context: RequestContext) -> list[Action]:
        low, high = versions
        if not low <= context.api_version <= high:
            return []
        return _coordinator_actions(request, keys(request))

    return actions


def _rebalance_timeout_ms(request: Message) -> int:
    # v0 has no rebalance timeout (the field reads -1); Kafka uses the session timeout.
    timeout_ms: int = request["rebalance_timeout_ms"]
    return request["session_timeout_ms"] if timeout_ms < 0 else timeout_ms


def _join_wait_ms(request: Message) -> int:
    return min(max(_rebalance_timeout_ms(request), 0), JOIN_WAIT_MS_MAX)


def _join_group(backend: Backend, router: CoordinatorRouter) -> ApiHandler:
    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": request["member_id"],
            "members": [],
        }

    async def handle(request: Message, context: RequestContext) -> Message:
        join = group_pb2.JoinGroupRequest(
            group_id=request["group_id"],
            session_timeout_ms=request["session_timeout_ms"],
            rebalance_timeout_ms=_rebalance_timeout_ms(request),
            member_id=request["member_id"],
            protocol_type=request["protocol_type"],
            protocols=[
                group_pb2.JoinGroupProtocol(name=p["name"], metadata=p["metadata"])
                for p in request["protocols"]
            ],
            client_id=context.header.client_id or "",
            client_host=_client_host(context.peer),
        )
        if request["group_instance_id"] is not None:
            join.group_instance_id = request["group_instance_id"]
        # The join waits for the whole group to (re)join, up to the rebalance timeout.
        timeout_s = _join_wait_ms(request) / 1000 + backend.upstreams.request_timeout_s
        try:
            response = await router.forward(
                join.group_id, "JoinGroup", join, lambda r: r.error_code, timeout_s
            )
            if (
                response.error_code == ErrorCode.MEMBER_ID_REQUIRED
                and context.api_version < _MEMBER_ID_REQUIRED_MIN_VERSION
            ):
                # Clients before v4 take their member id from a successful join only; join
                # again at once with the id the coordinator handed out.
                join.member_id = response.member_id
                response = await router.forward(
                    join.group_id, "JoinGroup", join, lambda r: r.error_code, timeout_s
                )
        except CoordinatorRouteError as e:
            return error(request, context, int(e.code))
        leader = response.leader_id
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": (
                    m.group_instance_id if m.HasField("group_instance_id") else None
                ),
                "metadata": bytes(m.metadata),
            }
            for m in response.members
        ]
        if response.skip_assignment and context.api_version < _SKIP_ASSIGNMENT_MIN_VERSION:
            # A static leader that took its old incarnation's place in a stable group keeps the
            # group's assignment. Clients before v9 cannot be told to skip the assignment, so,
            # as Kafka does for them, the member is not named the leader and gets no members:
            # it syncs as a follower and receives its stored assignment.
            leader, members = "", []
        return {
            "throttle_time_ms": 0,
            "error_code": int(response.error_code),
            "generation_id": response.generation_id,
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name,
            "leader": leader,
            "skip_assignment": response.skip_assignment,
            "member_id": response.member_id,
            "members": members,
        }

    return ApiHandler(
        ApiKey.JOIN_GROUP,
        handle,
        versions=(0, 7),
        authorization=_READ_GROUP,
        error_response=error,
        wait_ms=_join_wait_ms,
    )


def _sync_group(router: CoordinatorRouter) -> ApiHandler:
    def error(request: Message, context: RequestContext, code: int) -> Message:
        del request, context
        return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}

    async def handle(request: Message, context: RequestContext) -> Message:
        sync = group_pb2.SyncGroupRequest(
            group_id=request["group_id"],
            generation_id=request["generation_id"],
            member_id=request["member_id"],
            protocol_type=request["protocol_type"] or "",
            protocol_name=request["protocol_name"] or "",
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=a["member_id"], assignment=a["assignment"])
                for a in request["assignments"]
            ],
        )
        if request["group_instance_id"] is not None:
            sync.group_instance_id = request["group_instance_id"]
        try:
            response = await router.forward(
                sync.group_id, "SyncGroup", sync, lambda r: r.error_code
            )
        except CoordinatorRouteError as e:
            return error(request, context, int(e.code))
        return {
            "throttle_time_ms": 0,
            "error_code": int(response.error_code),
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name or None,
            "assignment": bytes(response.assignment),
        }

    return ApiHandler(
        ApiKey.SYNC_GROUP,
        handle,
        versions=(0, 5),
        authorization=_READ_GROUP,
        error_response=error,
    )


def _heartbeat(router: CoordinatorRouter) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        beat = group_pb2.HeartbeatRequest(
            group_id=request["group_id"],
            generation_id=request["generation_id"],
            member_id=request["member_id"],
        )
        if request["group_instance_id"] is not None:
            beat.group_instance_id = request["group_instance_id"]
        try:
            response = await router.forward(
                beat.group_id, "Heartbeat", beat, lambda r: r.error_code
            )
        except CoordinatorRouteError as e:
            return {"throttle_time_ms": 0, "error_code": int(e.code)}
        return {"throttle_time_ms": 0, "error_code": int(response.error_code)}

    return ApiHandler(ApiKey.HEARTBEAT, handle, versions=(0, 4), authorization=_READ_GROUP)


# LeaveGroup v3 leaves several members at once, each by member id and/or instance id (KIP-345).
_LEAVE_GROUP_BATCH_MIN_VERSION: Final = 3


def _leaving_member(member: Message) -> group_pb2.LeavingMember:
    leaving = group_pb2.LeavingMember(member_id=member["member_id"], reason=member["reason"] or "")
    if member["group_instance_id"] is not None:
        leaving.group_instance_id = member["group_instance_id"]
    return leaving


def _leave_group(router: CoordinatorRouter) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        batch = context.api_version >= _LEAVE_GROUP_BATCH_MIN_VERSION
        leave = group_pb2.LeaveGroupRequest(
            group_id=request["group_id"],
            members=(
                [_leaving_member(m) for m in request["members"]]
                if batch
                else [group_pb2.LeavingMember(member_id=request["member_id"])]
            ),
        )
        try:
            response = await router.forward(
                leave.group_id, "LeaveGroup", leave, lambda r: r.error_code
            )
        except CoordinatorRouteError as e:
            return {"throttle_time_ms": 0, "error_code": int(e.code), "members": []}
        code = int(response.error_code)
        if batch:
            return {
                "throttle_time_ms": 0,
                "error_code": code,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": (
                            m.group_instance_id if m.HasField("group_instance_id") else None
                        ),
                        "error_code": int(m.error_code),
                    }
                    for m in response.members
                ],
            }
        if code == ErrorCode.NONE and response.members:
            # v0-2 name one member and have no per-member results: its error is the answer.
            code = int(response.members[0].error_code)
        return {"throttle_time_ms": 0, "error_code": code}

    return ApiHandler(ApiKey.LEAVE_GROUP, handle, versions=(0, 5), authorization=_READ_GROUP)


def commit_answer(request: Message, codes: dict[tuple[str, int], int], default: int) -> Message:
    """The OffsetCommit or TxnOffsetCommit answer (the same shape): each requested partition
    with its code from ``codes``, else ``default``."""
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": codes.get((t["name"], p["partition_index"]), default),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


def commit_error(request: Message, context: RequestContext, code: int) -> Message:
    """OffsetCommit's and TxnOffsetCommit's ErrorResponse: ``code`` for every partition."""
    del context
    return commit_answer(request, {}, code)


async def unknown(backend: Backend, named: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (topic, partition)s of ``named`` missing from the metadata, after a wait of up to
    COMMIT_METADATA_WAIT_MS for them when some are: a topic created a moment ago through
    another gateway may not have reached this one's metadata yet, and only a request naming an
    unknown partition pays for the wait."""
    image = backend.image
    if not all(image.partition(*tp) is not None for tp in named):
        await image.wait_until(
            lambda: all(image.partition(*tp) is not None for tp in named),
            COMMIT_METADATA_WAIT_MS / 1000,
        )
    return {tp for tp in named if image.partition(*tp) is None}


async def _committable(
    backend: Backend, request: Message
) -> tuple[list[group_pb2.OffsetCommitPartition], dict[tuple[str, int], int]]:
    """An OffsetCommit's or TxnOffsetCommit's partitions to send the coordinator, and the codes
    of those answered here: as a Kafka broker does before its coordinator sees the commit, a
    partition missing from the metadata is UNKNOWN_TOPIC_OR_PARTITION, the others go on."""
    named = [(t["name"], p["partition_index"]) for t in request["topics"] for p in t["partitions"]]
    codes = {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for tp in await unknown(backend, named)}
    partitions = [
        group_pb2.OffsetCommitPartition(
            topic=t["name"],
            partition=p["partition_index"],
            committed_offset=p["committed_offset"],
            committed_leader_epoch=p["committed_leader_epoch"],
            metadata=p["committed_metadata"] or "",
        )
        for t in request["topics"]
        for p in t["partitions"]
        if (t["name"], p["partition_index"]) not in codes
    ]
    return partitions, codes


async def commit_offsets(
    backend: Backend,
    router: CoordinatorRouter,
    request: Message,
    method: str,
    build: Callable[[list[group_pb2.OffsetCommitPartition]], Any],
    code_of: Callable[[int], int] = int,
) -> Message:
    """An OffsetCommit or TxnOffsetCommit: its known partitions (``_committable``) sent to the
    group's coordinator as ``method`` in the request ``build`` makes of them (with the
    request's group_instance_id, when it has one), and answered per partition, each
    coordinator code as ``code_of`` gives it."""
    partitions, codes = await _committable(backend, request)
    if not partitions:
        return commit_answer(request, codes, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    commit = build(partitions)
    if request["group_instance_id"] is not None:
        commit.group_instance_id = request["group_instance_id"]
    try:
        response = await router.forward(commit.group_id, method, commit, partitions_not_coordinator)
    except CoordinatorRouteError as e:
        return commit_answer(request, codes, int(e.code))
    codes.update(((r.topic, r.partition), code_of(int(r.error_code))) for r in response.partitions)
    return commit_answer(request, codes, int(ErrorCode.UNKNOWN_SERVER_ERROR))


def _offset_commit(backend: Backend, router: CoordinatorRouter) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        # retention_time_ms (v2-4) is ignored, as by Kafka since 2.1 (KIP-211): offsets
        # expire by offsets.retention.minutes once the group is empty.
        return await commit_offsets(
            backend,
            router,
            request,
            "CommitOffsets",
            lambda partitions: group_pb2.CommitOffsetsRequest(
                group_id=request["group_id"],
                generation_id=request["generation_id_or_member_epoch"],
                member_id=request["member_id"],
                partitions=partitions,
            ),
        )

    return ApiHandler(
        ApiKey.OFFSET_COMMIT,
        handle,
        versions=(2, 9),
        authorization=Authorization(
            "READ on the group and on each topic",
            request=on_group(READ),
            items=(topic_items("topics", "topics", READ),),
        ),
        error_response=commit_error,
    )


# OffsetFetch v2 added the top-level error code and "all partitions" (null topics).
_OFFSET_FETCH_GROUP_ERROR_MIN_VERSION: Final = 2
# OffsetFetch v8 fetches several groups at once, each with its own error code (KIP-709).
_OFFSET_FETCH_BATCH_MIN_VERSION: Final = 8


def _offset_fetch(router: CoordinatorRouter) -> ApiHandler:
    def no_offset(partition: int, code: int = 0) -> Message:
        return {
            "partition_index": partition,
            "committed_offset": -1,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": code,
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        if context.api_version >= _OFFSET_FETCH_BATCH_MIN_VERSION:
            return {
                "throttle_time_ms": 0,
                "groups": [
                    {"group_id": g["group_id"], "topics": [], "error_code": code}
                    for g in request["groups"]
                ],
            }
        if context.api_version >= _OFFSET_FETCH_GROUP_ERROR_MIN_VERSION:
            return {"throttle_time_ms": 0, "error_code": code, "topics": []}
        # v1 has no group-level code: every requested partition carries it.
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [no_offset(p, code) for p in t["partition_indexes"]],
                }
                for t in request["topics"] or []
            ],
        }

    async def fetch_group(
        group_id: str, requested: list[Message] | None, require_stable: bool
    ) -> tuple[int, list[Message]]:
        """(the group's error code, its topics with their partitions' offsets)."""
        fetch = group_pb2.FetchOffsetsRequest(
            group_id=group_id,
            partitions=[
                common_pb2.TopicPartition(topic=t["name"], partition=p)
                for t in requested or []
                for p in t["partition_indexes"]
            ],
            require_stable=require_stable,
        )
        try:
            response = await router.forward(group_id, "FetchOffsets", fetch, lambda r: r.error_code)
        except CoordinatorRouteError as e:
            return int(e.code), []
        if response.error_code != ErrorCode.NONE:
            return int(response.error_code), []
        found = {
            (r.topic, r.partition): {
                "partition_index": r.partition,
                "committed_offset": r.committed_offset,
                "committed_leader_epoch": r.committed_leader_epoch,
                "metadata": r.metadata,
                "error_code": int(r.error_code),
            }
            for r in response.partitions
        }
        if requested is None:
            topics: dict[str, list[Message]] = {}
            for (topic, _), partition in sorted(found.items()):
                topics.setdefault(topic, []).append(partition)
            return 0, [{"name": name, "partitions": parts} for name, parts in topics.items()]
        return 0, [
            {
                "name": t["name"],
                "partitions": [
                    found.get((t["name"], p), no_offset(p)) for p in t["partition_indexes"]
                ],
            }
            for t in requested
        ]

    async def fetch_one_of(group: Message, require_stable: bool) -> Message:
        # v9's member id and epoch belong to KIP-848's consumer groups; for a classic group
        # Kafka checks neither on a fetch.
        code, topics = await fetch_group(group["group_id"], group["topics"], require_stable)
        return {"group_id": group["group_id"], "topics": topics, "error_code": code}

    async def handle(request: Message, context: RequestContext) -> Message:
        if context.api_version >= _OFFSET_FETCH_BATCH_MIN_VERSION:
            groups = await gather_bounded(
                [partial(fetch_one_of, g, request["require_stable"]) for g in request["groups"]]
            )
            return {"throttle_time_ms": 0, "groups": groups}
        code, topics = await fetch_group(
            request["group_id"], request["topics"], request["require_stable"]
        )
        if code != ErrorCode.NONE:
            return error(request, context, code)
        return {"throttle_time_ms": 0, "error_code": 0, "topics": topics}

    def group_describable(request: Message, context: RequestContext) -> list[Action]:
        if context.api_version >= _OFFSET_FETCH_BATCH_MIN_VERSION:
            return []
        return [Action(GROUP, request["group_id"], DESCRIBE)]

    def topics_describable(
        request: Message, response: Message, context: RequestContext, permits: Permits
    ) -> None:
        if context.api_version < _OFFSET_FETCH_BATCH_MIN_VERSION:
            _describable_offsets(request["topics"], response, permits)
            return
        asked = {g["group_id"]: g["topics"] for g in request["groups"]}
        for group in response["groups"]:
            _describable_offsets(asked.get(group["group_id"]), group, permits)

    def group_item(group: Message, request: Message, context: RequestContext) -> list[Action]:
        del request, context
        return [Action(GROUP, group["group_id"], DESCRIBE)]

    return ApiHandler(
        ApiKey.OFFSET_FETCH,
        handle,
        versions=(1, 9),
        authorization=Authorization(
            "DESCRIBE on each group and on each topic (topics not describable are left out "
            "of an every-topic answer)",
            request=group_describable,
            items=(
                Items(
                    "groups", "groups", group_item, versions=(_OFFSET_FETCH_BATCH_MIN_VERSION, 9)
                ),
            ),
            filter_response=topics_describable,
        ),
        error_response=error,
    )


def _describable_offsets(asked: list[Message] | None, answer: Message, permits: Permits) -> None:
    """Kafka's OffsetFetch rule for topics the caller may not describe: left out of an answer
    for every topic (``asked`` None), TOPIC_AUTHORIZATION_FAILED for each partition of a
    named one."""
    topics = answer.get("topics") or []
    if asked is None:
        answer["topics"] = [t for t in topics if permits(Action(TOPIC, t["name"], DESCRIBE))]
        return
    for topic in topics:
        if not permits(Action(TOPIC, topic["name"], DESCRIBE)):
            for partition in topic["partitions"]:
                partition.update(
                    committed_offset=-1,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                )


def _describe_groups(router: CoordinatorRouter) -> ApiHandler:
    def failed(group_id: str, code: int) -> Message:
        return {
            "error_code": code,
            "group_id": group_id,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": _AUTHORIZED_OPERATIONS_OMITTED,
        }

    async def describe(group_id: str) -> Message:
        try:
            response = await router.forward(
                group_id,
                "DescribeGroups",
                group_pb2.DescribeGroupsRequest(group_ids=[group_id]),
                lambda r: r.groups[0].error_code,
            )
        except CoordinatorRouteError as e:
            return failed(group_id, int(e.code))
        g = response.groups[0]
        if g.error_code != ErrorCode.NONE:
            return failed(group_id, int(g.error_code))
        return {
            "error_code": 0,
            "group_id": g.group_id,
            "group_state": _STATE_NAMES[g.state],
            "protocol_type": g.protocol_type,
            "protocol_data": g.protocol_name,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": (
                        m.group_instance_id if m.HasField("group_instance_id") else None
                    ),
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": bytes(m.metadata),
                    "member_assignment": bytes(m.assignment),
                }
                for m in g.members
            ],
            "authorized_operations": _AUTHORIZED_OPERATIONS_OMITTED,
        }

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        groups = await gather_bounded([partial(describe, g) for g in request["groups"]])
        return {"throttle_time_ms": 0, "groups": groups}

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {"throttle_time_ms": 0, "groups": [failed(g, code) for g in request["groups"]]}

    return ApiHandler(
        ApiKey.DESCRIBE_GROUPS,
        handle,
        versions=(0, 5),
        authorization=Authorization(
            "DESCRIBE on each group", items=(Items("groups", "groups", named(GROUP, DESCRIBE)),)
        ),
        error_response=error,
    )


def _list_groups(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        # v4 filters by state and v5 by group type, both case-insensitively as Kafka does;
        # every Brook group is a classic one.
        states = {state.lower() for state in request["states_filter"]}
        types = {kind.lower() for kind in request["types_filter"]}
        upstreams = backend.upstreams

        async def ask(address: str) -> Any:
            return await upstreams.call(
                upstreams.groups(address).ListGroups, group_pb2.ListGroupsRequest()
            )

        code, answers = await ask_coordinators_listed_here(backend, context, ask)
        groups: dict[str, Message] = {}
        for answer in answers:
            for g in answer.groups:
                state = _STATE_NAMES[g.state]
                if (states and state.lower() not in states) or (
                    types and _GROUP_TYPE_CLASSIC not in types
                ):
                    continue
                groups[g.group_id] = {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": state,
                    "group_type": _GROUP_TYPE_CLASSIC,
                }
        return {
            "throttle_time_ms": 0,
            "error_code": int(code),
            "groups": [groups[name] for name in sorted(groups)],
        }

    return ApiHandler(
        ApiKey.LIST_GROUPS,
        handle,
        versions=(0, 5),
        authorization=Authorization(
            "none: lists the groups the caller may DESCRIBE, every group with DESCRIBE on the "
            "cluster",
            filter_response=only_describable("groups", GROUP, "group_id", cluster_sees_all=True),
        ),
    )


def _delete_groups(router: CoordinatorRouter) -> ApiHandler:
    async def delete(group_id: str) -> Message:
        try:
            response = await router.forward(
                group_id,
                "DeleteGroups",
                group_pb2.DeleteGroupsRequest(group_ids=[group_id]),
                lambda r: r.results[0].error_code,
            )
        except CoordinatorRouteError as e:
            return {"group_id": group_id, "error_code": int(e.code)}
        return {"group_id": group_id, "error_code": int(response.results[0].error_code)}

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results = await gather_bounded([partial(delete, g) for g in request["groups_names"]])
        return {"throttle_time_ms": 0, "results": results}

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {
            "throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": code} for g in request["groups_names"]],
        }

    return ApiHandler(
        ApiKey.DELETE_GROUPS,
        handle,
        versions=(0, 2),
        authorization=Authorization(
            "DELETE on each group",
            items=(Items("groups_names", "results", named(GROUP, DELETE)),),
        ),
        error_response=error,
    )


_READ_GROUP: Final = Authorization("READ on the group", request=on_group(READ))


def group_handlers(backend: Backend, routers: Routers) -> list[ApiHandler]:
    router = routers.groups
    return [
        _find_coordinator(backend, routers),
        _join_group(backend, router),
        _sync_group(router),
        _heartbeat(router),
        _leave_group(router),
        _offset_commit(backend, router),
        _offset_fetch(router),
        _describe_groups(router),
        _list_groups(backend),
        _delete_groups(router),
    ]
