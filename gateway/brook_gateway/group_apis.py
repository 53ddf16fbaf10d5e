"""Consumer groups and producer ids: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and
InitProducerId.

Kafka clients must only ever talk Kafka to a gateway, never to a coordinator's gRPC port, so
FindCoordinator answers with one of the brokers Metadata lists (each served by a gateway),
picked from the owning coordinator's node id by `ClusterImage.coordinator_broker`. Every
gateway therefore names the same broker for a group, and whichever gateway receives a
group request forwards it to the group's owning coordinator, found with the coordinators'
FindCoordinator and cached. A NOT_COORDINATOR answer (ownership moved) is followed through its
hint, and an unreachable owner is looked up again; only when the owner still cannot be reached
does the client get NOT_COORDINATOR, which makes it look the coordinator up again itself.

Member metadata, assignments and committed metadata pass through untouched. InitProducerId is
forwarded to a live storage node, which hands out producer ids from its controller-allocated
block.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Final

from brook.errors import ErrorCode, error_code
from brook.rpc.addresses import GRPC_LISTENER, Endpoint, listener_address
from brook.rpc.coordinators import (
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator,
    hinted_coordinator,
)
from brook.v1 import common_pb2, group_pb2, storage_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import NO_NODE, KafkaBroker
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import UpstreamError

__all__ = ["GroupRouteError", "GroupRouter", "group_handlers"]

_log = logging.getLogger(__name__)

# Kafka's FindCoordinator key types.
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
# Lookups and calls per forwarded request: the cached owner, a hinted or re-found owner, and
# one more in case ownership moved again during a hand-over.
_ATTEMPTS_MAX: Final = 3
# Bounds the owner cache: clients choose group ids freely.
OWNER_CACHE_ENTRIES_MAX: Final = 10_000
# Groups of one DescribeGroups or DeleteGroups request forwarded at the same time.
CONCURRENT_FORWARDS_MAX: Final = 32
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
# How long an OffsetCommit naming a partition this gateway's metadata lacks waits for it to
# arrive before answering UNKNOWN_TOPIC_OR_PARTITION: far above the metadata's propagation
# between gateways (milliseconds), far below a client's request timeout.
COMMIT_METADATA_WAIT_MS: Final = 1000


class GroupRouteError(Exception):
    """A group request that reached no coordinator able to answer it; ``code`` is what the
    Kafka client gets (retriable ones make it look the coordinator up again)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class GroupRouter:
    """Finds the coordinator owning each group and forwards group calls to it."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._owners: dict[str, Coordinator] = {}

    def _remember(self, group_id: str, owner: Coordinator) -> None:
        self._owners.pop(group_id, None)
        while len(self._owners) >= OWNER_CACHE_ENTRIES_MAX:
            del self._owners[next(iter(self._owners))]
        self._owners[group_id] = owner

    def _address_of(self, node_id: int, endpoints: Iterable[Endpoint]) -> str | None:
        address = listener_address(endpoints)
        if address is None:
            node = self._backend.image.nodes.get(node_id)
            address = None if node is None else node.address(GRPC_LISTENER)
        return address

    async def owner(self, group_id: str, *, refresh: bool = False) -> Coordinator:
        """The coordinator owning ``group_id``: cached, or asked of any live coordinator
        (``brook.rpc.coordinators``) within the gateway's request timeout."""
        cached = None if refresh else self._owners.get(group_id)
        if cached is not None:
            return cached
        upstreams = self._backend.upstreams
        deadline = time.monotonic() + upstreams.request_timeout_s
        coordinators = self._backend.group_coordinator_nodes()
        if not coordinators:
            raise GroupRouteError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, "no group coordinator is registered"
            )

        async def ask(
            address: str, request: group_pb2.FindCoordinatorRequest, timeout_s: float
        ) -> group_pb2.FindCoordinatorResponse:
            response: group_pb2.FindCoordinatorResponse = await upstreams.traced_call(
                upstreams.groups(address).FindCoordinator, request, timeout_s
            )
            return response

        try:
            owner = await find_coordinator(
                group_id,
                [address for _, address in coordinators],
                ask,
                deadline,
                self._address_of,
            )
        except (CoordinatorNotFoundError, CoordinatorRefusedError) as e:
            raise GroupRouteError(e.code, str(e)) from None
        except UpstreamError as e:  # the gateway is stopping
            raise GroupRouteError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from None
        self._remember(group_id, owner)
        return owner

    async def forward(
        self,
        group_id: str,
        method: str,
        request: Any,
        error_of: Callable[[Any], int],
        timeout_s: float | None = None,
    ) -> Any:
        """Calls ``method`` of the coordinator owning ``group_id``, following NOT_COORDINATOR
        hints and looking the owner up again when it does not answer."""
        upstreams = self._backend.upstreams
        refresh = False
        problem = ""
        for _ in range(_ATTEMPTS_MAX):
            owner = await self.owner(group_id, refresh=refresh)
            refresh = True
            stub = upstreams.groups(owner.address)
            try:
                response = await upstreams.call(getattr(stub, method), request, timeout_s)
            except UpstreamError as e:
                self._owners.pop(group_id, None)
                problem = f"coordinator {owner.node_id} did not answer: {e}"
                continue
            except asyncio.CancelledError:
                # The request ran out of time waiting on this owner (or the client left):
                # the next request looks the owner up again rather than wait on it again.
                self._owners.pop(group_id, None)
                raise
            code = error_code(error_of(response))
            if code != ErrorCode.NOT_COORDINATOR:
                return response
            self._owners.pop(group_id, None)
            problem = f"coordinator {owner.node_id} no longer owns the group"
            hinted = hinted_coordinator(
                (code,), getattr(response, "coordinator", None), self._address_of
            )
            if hinted is not None:
                self._remember(group_id, hinted)
                refresh = False
        raise GroupRouteError(ErrorCode.NOT_COORDINATOR, problem)


async def _gather_bounded(
    calls: list[Callable[[], Awaitable[Message]]],
) -> list[Message]:
    """Runs ``calls`` at most CONCURRENT_FORWARDS_MAX at a time; results in call order."""
    slots = asyncio.Semaphore(CONCURRENT_FORWARDS_MAX)

    async def one(call: Callable[[], Awaitable[Message]]) -> Message:
        async with slots:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _client_host(peer: str) -> str:
    # Kafka shows a member's host as Java's InetAddress.toString() does: "/address".
    return "/" + peer.rsplit(":", 1)[0].strip("[]")


# FindCoordinator v4 looks up several keys at once (coordinator_keys, one answer each).
_FIND_COORDINATOR_BATCH_MIN_VERSION: Final = 4
_COORDINATOR_FIELDS: Final = ("node_id", "host", "port", "error_code", "error_message")


def _find_coordinator(backend: Backend, router: GroupRouter) -> ApiHandler:
    def answer(code: int, message: str | None, broker: KafkaBroker | None = None) -> Message:
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "error_message": message,
            "node_id": broker.node_id if broker else NO_NODE,
            "host": broker.host if broker else "",
            "port": broker.port if broker else -1,
        }

    async def find(key: str, key_type: int) -> Message:
        if key_type == KEY_TYPE_TRANSACTION:
            return answer(
                int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "Brook has no transaction coordinator (transactions are not supported)",
            )
        if key_type != KEY_TYPE_GROUP:
            return answer(int(ErrorCode.INVALID_REQUEST), f"unknown key type {key_type}")
        try:
            # Looked up afresh: a client asks after its coordinator stopped answering.
            owner = await router.owner(key, refresh=True)
        except GroupRouteError as e:
            return answer(int(e.code), str(e) or None)
        image = backend.image
        broker = image.coordinator_broker(image.kafka_brokers(), owner.node_id)
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
            return await find(request["key"], key_type)
        keys = request["coordinator_keys"]
        found = await _gather_bounded([partial(find, key, key_type) for key in keys])
        return batched(keys, found)

    def error(request: Message, context: RequestContext, code: int) -> Message:
        if context.api_version < _FIND_COORDINATOR_BATCH_MIN_VERSION:
            return answer(code, None)
        keys = request["coordinator_keys"]
        return batched(keys, [answer(code, None) for _ in keys])

    return ApiHandler(ApiKey.FIND_COORDINATOR, handle, versions=(0, 4), error_response=error)


def _rebalance_timeout_ms(request: Message) -> int:
    # v0 has no rebalance timeout (the field reads -1); Kafka uses the session timeout.
    timeout_ms: int = request["rebalance_timeout_ms"]
    return request["session_timeout_ms"] if timeout_ms < 0 else timeout_ms


def _join_wait_ms(request: Message) -> int:
    return min(max(_rebalance_timeout_ms(request), 0), JOIN_WAIT_MS_MAX)


def _join_group(backend: Backend, router: GroupRouter) -> ApiHandler:
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
        except GroupRouteError as e:
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
        ApiKey.JOIN_GROUP, handle, versions=(0, 7), error_response=error, wait_ms=_join_wait_ms
    )


def _sync_group(router: GroupRouter) -> ApiHandler:
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
        except GroupRouteError as e:
            return error(request, context, int(e.code))
        return {
            "throttle_time_ms": 0,
            "error_code": int(response.error_code),
            "protocol_type": response.protocol_type or None,
            "protocol_name": response.protocol_name or None,
            "assignment": bytes(response.assignment),
        }

    return ApiHandler(ApiKey.SYNC_GROUP, handle, versions=(0, 5), error_response=error)


def _heartbeat(router: GroupRouter) -> ApiHandler:
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
        except GroupRouteError as e:
            return {"throttle_time_ms": 0, "error_code": int(e.code)}
        return {"throttle_time_ms": 0, "error_code": int(response.error_code)}

    return ApiHandler(ApiKey.HEARTBEAT, handle, versions=(0, 4))


# LeaveGroup v3 leaves several members at once, each by member id and/or instance id (KIP-345).
_LEAVE_GROUP_BATCH_MIN_VERSION: Final = 3


def _leaving_member(member: Message) -> group_pb2.LeavingMember:
    leaving = group_pb2.LeavingMember(member_id=member["member_id"], reason=member["reason"] or "")
    if member["group_instance_id"] is not None:
        leaving.group_instance_id = member["group_instance_id"]
    return leaving


def _leave_group(router: GroupRouter) -> ApiHandler:
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
        except GroupRouteError as e:
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

    return ApiHandler(ApiKey.LEAVE_GROUP, handle, versions=(0, 5))


def _offset_commit(backend: Backend, router: GroupRouter) -> ApiHandler:
    def answer(request: Message, codes: dict[tuple[str, int], int], default: int) -> Message:
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

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return answer(request, {}, code)

    def group_error(response: Any) -> int:
        codes = {int(p.error_code) for p in response.partitions}
        return ErrorCode.NOT_COORDINATOR if ErrorCode.NOT_COORDINATOR in codes else 0

    async def handle(request: Message, context: RequestContext) -> Message:
        # As a Kafka broker does before its coordinator sees the commit: a partition missing
        # from the metadata is answered UNKNOWN_TOPIC_OR_PARTITION, the others are committed.
        image = backend.image
        named = [
            (t["name"], p["partition_index"]) for t in request["topics"] for p in t["partitions"]
        ]
        if not all(image.partition(*tp) is not None for tp in named):
            # A topic created a moment ago through another gateway may not have reached this
            # one's metadata yet: only an unknown partition pays for the wait.
            await image.wait_until(
                lambda: all(image.partition(*tp) is not None for tp in named),
                COMMIT_METADATA_WAIT_MS / 1000,
            )
        codes = {
            tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            for tp in named
            if image.partition(*tp) is None
        }
        # retention_time_ms (v2-4) is ignored, as by Kafka since 2.1 (KIP-211): offsets
        # expire by offsets.retention.minutes once the group is empty.
        commit = group_pb2.CommitOffsetsRequest(
            group_id=request["group_id"],
            generation_id=request["generation_id_or_member_epoch"],
            member_id=request["member_id"],
            partitions=[
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
            ],
        )
        if not commit.partitions:
            return answer(request, codes, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        if request["group_instance_id"] is not None:
            commit.group_instance_id = request["group_instance_id"]
        try:
            response = await router.forward(commit.group_id, "CommitOffsets", commit, group_error)
        except GroupRouteError as e:
            return answer(request, codes, int(e.code))
        codes.update(((r.topic, r.partition), int(r.error_code)) for r in response.partitions)
        return answer(request, codes, int(ErrorCode.UNKNOWN_SERVER_ERROR))

    return ApiHandler(ApiKey.OFFSET_COMMIT, handle, versions=(2, 9), error_response=error)


# OffsetFetch v2 added the top-level error code and "all partitions" (null topics).
_OFFSET_FETCH_GROUP_ERROR_MIN_VERSION: Final = 2
# OffsetFetch v8 fetches several groups at once, each with its own error code (KIP-709).
_OFFSET_FETCH_BATCH_MIN_VERSION: Final = 8


def _offset_fetch(router: GroupRouter) -> ApiHandler:
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
        except GroupRouteError as e:
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
            groups = await _gather_bounded(
                [partial(fetch_one_of, g, request["require_stable"]) for g in request["groups"]]
            )
            return {"throttle_time_ms": 0, "groups": groups}
        code, topics = await fetch_group(
            request["group_id"], request["topics"], request["require_stable"]
        )
        if code != ErrorCode.NONE:
            return error(request, context, code)
        return {"throttle_time_ms": 0, "error_code": 0, "topics": topics}

    return ApiHandler(ApiKey.OFFSET_FETCH, handle, versions=(1, 9), error_response=error)


def _describe_groups(router: GroupRouter) -> ApiHandler:
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
        except GroupRouteError as e:
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
        groups = await _gather_bounded([partial(describe, g) for g in request["groups"]])
        return {"throttle_time_ms": 0, "groups": groups}

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {"throttle_time_ms": 0, "groups": [failed(g, code) for g in request["groups"]]}

    return ApiHandler(ApiKey.DESCRIBE_GROUPS, handle, versions=(0, 5), error_response=error)


def _list_groups(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        # v4 filters by state and v5 by group type, both case-insensitively as Kafka does;
        # every Brook group is a classic one.
        states = {state.lower() for state in request["states_filter"]}
        types = {kind.lower() for kind in request["types_filter"]}
        upstreams = backend.upstreams
        # Each broker lists the groups whose coordinator FindCoordinator names as that broker,
        # so asking every broker lists each group once (decisions.md, "ListGroups is split by
        # broker"). A connection to a broker's own port asks for that broker; one to the
        # bootstrap listener for every broker this gateway presents.
        image = backend.image
        brokers = image.kafka_brokers()
        mine = []
        for node_id, address in backend.group_coordinator_nodes():
            broker = image.coordinator_broker(brokers, node_id)
            if broker is None:
                continue
            if context.broker_id is None:
                if broker.gateway_id == backend.node_id:
                    mine.append(address)
            elif broker.node_id == context.broker_id:
                mine.append(address)

        async def ask(address: str) -> Any:
            return await upstreams.call(
                upstreams.groups(address).ListGroups, group_pb2.ListGroupsRequest()
            )

        answers = await asyncio.gather(*(ask(a) for a in mine), return_exceptions=True)
        code = ErrorCode.NONE
        groups: dict[str, Message] = {}
        for answer in answers:
            if isinstance(answer, UpstreamError):
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                continue
            if isinstance(answer, BaseException):
                raise answer
            if answer.error_code != ErrorCode.NONE:
                code = error_code(answer.error_code)
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

    return ApiHandler(ApiKey.LIST_GROUPS, handle, versions=(0, 5))


def _delete_groups(router: GroupRouter) -> ApiHandler:
    async def delete(group_id: str) -> Message:
        try:
            response = await router.forward(
                group_id,
                "DeleteGroups",
                group_pb2.DeleteGroupsRequest(group_ids=[group_id]),
                lambda r: r.results[0].error_code,
            )
        except GroupRouteError as e:
            return {"group_id": group_id, "error_code": int(e.code)}
        return {"group_id": group_id, "error_code": int(response.results[0].error_code)}

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results = await _gather_bounded([partial(delete, g) for g in request["groups_names"]])
        return {"throttle_time_ms": 0, "results": results}

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {
            "throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": code} for g in request["groups_names"]],
        }

    return ApiHandler(ApiKey.DELETE_GROUPS, handle, versions=(0, 2), error_response=error)


def _init_producer_id(backend: Backend) -> ApiHandler:
    def error(request: Message, context: RequestContext, code: int) -> Message:
        del request, context
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}

    async def handle(request: Message, context: RequestContext) -> Message:
        upstreams = backend.upstreams
        forwarded = storage_pb2.InitProducerIdRequest(
            transactional_id=request["transactional_id"] or "",
            transaction_timeout_ms=request["transaction_timeout_ms"],
            producer_id=request["producer_id"],
            producer_epoch=request["producer_epoch"],
        )
        addresses = backend.storage_addresses()
        # Any storage node hands out producer ids; spread the calls and try the next node
        # when one does not answer.
        start = hash(context.peer) % max(len(addresses), 1)
        for address in addresses[start:] + addresses[:start]:
            try:
                response = await upstreams.call(
                    upstreams.storage(address).InitProducerId, forwarded
                )
            except UpstreamError as e:
                _log.info(
                    "InitProducerId not answered",
                    extra={"storage_node": address, "reason": str(e)},
                )
                continue
            return {
                "throttle_time_ms": 0,
                "error_code": int(response.error_code),
                "producer_id": response.producer_id if response.error_code == 0 else -1,
                "producer_epoch": response.producer_epoch if response.error_code == 0 else -1,
            }
        # What every client retries InitProducerId on; a transport error code (which
        # librdkafka takes as its own connection failing) would not be.
        return error(request, context, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))

    return ApiHandler(ApiKey.INIT_PRODUCER_ID, handle, versions=(0, 4), error_response=error)


def group_handlers(backend: Backend) -> list[ApiHandler]:
    router = GroupRouter(backend)
    return [
        _find_coordinator(backend, router),
        _join_group(backend, router),
        _sync_group(router),
        _heartbeat(router),
        _leave_group(router),
        _offset_commit(backend, router),
        _offset_fetch(router),
        _describe_groups(router),
        _list_groups(backend),
        _delete_groups(router),
        _init_producer_id(backend),
    ]
