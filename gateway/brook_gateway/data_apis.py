"""Metadata, Fetch, ListOffsets and OffsetForLeaderEpoch: the data plane, forwarded to the
leader storage nodes (fan_out.py) with the record batches passed through as bytes. Produce, the
same way with its merging and ordering of a connection's requests, is produce.py's.

Fetch and ListOffsets carry the request's isolation level to the storage node: read_committed
reads stop at the last stable offset (ListOffsets' latest is it), and a read_committed Fetch
returns the aborted transactions overlapping its records, which Kafka clients filter out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from brook.errors import ErrorCode
from brook.record import CorruptRecordError
from brook.security.authorizer import CREATE, DESCRIBE, READ, TOPIC, Action
from brook.topic_name import topic_name_problem
from brook.v1 import common_pb2, replica_pb2, storage_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import Authorization, Items, only_describable, topic_items
from brook_gateway.auto_create import TopicAutoCreator
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import NO_NODE
from brook_gateway.fan_out import Part, current_leader, fan_out
from brook_gateway.fetch_budget import ResponseBudget, node_budgets
from brook_gateway.produce import ProduceAffinity, produce_handler
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.protocol.primitives import UUID_ZERO

__all__ = ["data_handlers"]

_log = logging.getLogger(__name__)

# Kafka's ListOffsets timestamps with a special meaning.
_LATEST_TIMESTAMP: Final = -1
_EARLIEST_TIMESTAMP: Final = -2
_MAX_TIMESTAMP: Final = -3


def _client_leader_epoch(partition: Message) -> int | None:
    """The current_leader_epoch a Fetch (v9+), ListOffsets (v4+) or OffsetForLeaderEpoch
    (v2+) partition carries; None when the version has none or the client sent -1 (unknown),
    which the storage node must not check."""
    epoch = partition.get("current_leader_epoch", NO_EPOCH)
    return epoch if epoch >= 0 else None


# Kafka's value of an authorized-operations bitfield that was not asked for (Metadata v8+):
# Brook does not report the operations its ACLs authorize.
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
# Kafka's "no epoch" in leader-epoch fields.
NO_EPOCH: Final = -1
# The replica id a consumer's OffsetForLeaderEpoch carries (v3+), and the gateway's on its way
# to the storage node.
_CONSUMER_REPLICA_ID: Final = -1
# Metadata v10+ asks for topics by id as well as by name; v0-9 and unset ids read as zero.
_NO_TOPIC_ID: Final = UUID_ZERO
METADATA_SERVED: Final = (0, 12)
# The first Metadata version that looks topics up by id (v10-11 carry the fields unused).
METADATA_BY_ID_MIN: Final = 12


def _metadata(backend: Backend, affinity: ProduceAffinity) -> ApiHandler:
    """Metadata v0-12. From v7 every partition carries its leader epoch and from v10 every
    topic its id: the two things a Kafka client uses to tell a topic deleted and re-created
    (with the same name, perhaps fewer partitions) from the one it knew, and a leader from a
    stale one. v12+ may ask for a topic by id alone (name null): answered by id, an unknown id
    with UNKNOWN_TOPIC_ID and that id. v10-11 asking by id get INVALID_REQUEST, as from Kafka.
    An unknown, valid name is created when the request allows it (always before v4, then
    ``allow_auto_topic_creation``) and the controllers' ``auto.create.topics.enable`` is on
    (auto_create.py); an invalid one is INVALID_TOPIC_EXCEPTION."""
    auto_creator = TopicAutoCreator(backend)

    async def handle(request: Message, context: RequestContext) -> Message:
        affinity.refreshed(context.peer)
        image = backend.image
        presented = image.kafka_brokers(context.listener)
        brokers = [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in presented
        ]
        # Leaders, replicas and ISRs are the storage nodes' own ids, the ids the brokers are
        # listed under; a leader that is not listed (fenced, or no gateway to show it at) is
        # no leader to the client, which retries.
        listed = {b.node_id for b in presented}
        requested = request["topics"]
        if requested is None or (context.api_version == 0 and not requested):
            wanted: list[tuple[str | None, bytes]] = [
                (n, _NO_TOPIC_ID) for n in sorted(image.topics)
            ]
        else:
            wanted = [(t["name"], t.get("topic_id") or _NO_TOPIC_ID) for t in requested]
            if context.api_version < METADATA_BY_ID_MIN and any(
                name is None or any(topic_id) for name, topic_id in wanted
            ):
                # v10-11 have the fields but, as in Kafka, not the lookup: their answer has no
                # room for a topic without a name.
                return error(request, context, int(ErrorCode.INVALID_REQUEST))
        unknown = {
            name: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if topic_name_problem(name) is None
            else ErrorCode.INVALID_TOPIC_EXCEPTION
            for name, _ in wanted
            if name is not None and name not in image.topics
        }
        creatable = [
            n for n, code in unknown.items() if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ]
        if creatable and (context.api_version < 4 or request["allow_auto_topic_creation"]):
            unknown.update(await auto_creator.create(creatable))
        topics: list[Message] = []
        for name, topic_id in wanted:
            state = image.topics.get(name) if name is not None else image.topic_by_id(topic_id)
            code = unknown.get(name, ErrorCode.NONE) if name is not None else ErrorCode.NONE
            if state is None or code != ErrorCode.NONE:
                topics.append(
                    {
                        "error_code": int(
                            code
                            if code != ErrorCode.NONE
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            if name is not None
                            else ErrorCode.UNKNOWN_TOPIC_ID
                        ),
                        "name": name,
                        "topic_id": topic_id if name is None else _NO_TOPIC_ID,
                        "partitions": [],
                    }
                )
                continue
            partitions = []
            for index in sorted(state.partitions):
                p = state.partitions[index]
                leader = p.leader if p.leader in listed else NO_NODE
                partitions.append(
                    {
                        "error_code": int(
                            ErrorCode.NONE if leader != NO_NODE else ErrorCode.LEADER_NOT_AVAILABLE
                        ),
                        "partition_index": index,
                        "leader_id": leader,
                        "leader_epoch": p.leader_epoch,
                        "replica_nodes": list(p.replicas),
                        "isr_nodes": list(p.isr),
                        "offline_replicas": [r for r in p.replicas if r not in listed],
                    }
                )
            topics.append(
                {
                    "error_code": 0,
                    "name": state.name,
                    "topic_id": state.topic_id,
                    "is_internal": state.internal,
                    "partitions": partitions,
                    "topic_authorized_operations": _AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
        return {
            "throttle_time_ms": 0,
            "brokers": brokers,
            "cluster_id": image.cluster_id or None,
            # Admin clients send here; any gateway forwards to the active controller.
            "controller_id": presented[0].node_id if presented else NO_NODE,
            "topics": topics,
            "cluster_authorized_operations": _AUTHORIZED_OPERATIONS_OMITTED,
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        nameless = None if context.api_version >= METADATA_BY_ID_MIN else ""
        return {
            "topics": [
                {
                    "error_code": code,
                    "name": nameless if t["name"] is None else t["name"],
                    "topic_id": t.get("topic_id") or _NO_TOPIC_ID,
                    "partitions": [],
                }
                for t in request["topics"] or []
            ]
        }

    return ApiHandler(
        ApiKey.METADATA,
        handle,
        versions=METADATA_SERVED,
        authorization=_metadata_authorization(backend),
        error_response=error,
    )


def _metadata_authorization(backend: Backend) -> Authorization:
    """Kafka's: DESCRIBE on each named topic (TOPIC_AUTHORIZATION_FAILED otherwise), and
    CREATE on the cluster or the topic to have an unknown one auto-created; a request for
    every topic lists only those the caller may describe."""

    def actions(item: Message, request: Message, context: RequestContext) -> list[Action]:
        image = backend.image
        name = item["name"]
        if name is None:
            state = image.topic_by_id(item.get("topic_id") or _NO_TOPIC_ID)
            # An unknown id is answered UNKNOWN_TOPIC_ID, as Kafka does.
            return [] if state is None else [Action(TOPIC, state.name, DESCRIBE)]
        needed = [Action(TOPIC, name, DESCRIBE)]
        if name not in image.topics and (
            context.api_version < 4 or request["allow_auto_topic_creation"]
        ):
            needed.append(Action(TOPIC, name, CREATE, cluster_grants=True))
        return needed

    return Authorization(
        "DESCRIBE on each topic (listing every topic: only those); auto-creation: CREATE on "
        "the cluster or the topic",
        items=(
            # v0's empty list asks for every topic: the handler must not see one.
            Items("topics", "topics", actions, versions=(0, 0)),
            Items("topics", "topics", actions, versions=(1, METADATA_SERVED[1]), serve_empty=True),
        ),
        # A request for every topic is answered with those the caller may describe; a named
        # one it may not describe was answered TOPIC_AUTHORIZATION_FAILED.
        filter_response=only_describable("topics", TOPIC, "name", keep_errors=True),
    )


def _fetch_error(request: Message, context: RequestContext, code: int) -> Message:
    del context
    return {
        "error_code": code,
        "responses": [
            {
                "topic": t["topic"],
                "partitions": [
                    {"partition_index": p["partition"], "error_code": code, "high_watermark": -1}
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


# Kafka's isolation levels (Fetch v4+, ListOffsets v2+; earlier versions read as 0).
_ISOLATION_LEVELS: Final = {
    0: common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED,
    1: common_pb2.ISOLATION_LEVEL_READ_COMMITTED,
}


def _isolation_level(kafka_value: int) -> common_pb2.IsolationLevel | None:
    """A Fetch or ListOffsets request's isolation_level as Brook's: 0 read_uncommitted, 1
    read_committed (bounded by the last stable offset); None for any other value, which the
    request is refused for (INVALID_REQUEST) rather than read as either."""
    return _ISOLATION_LEVELS.get(kafka_value)


def _fetch(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        results: dict[tuple[str, int], Message] = {}
        isolation = _isolation_level(request["isolation_level"])
        if isolation is None:
            return _fetch_error(request, context, int(ErrorCode.INVALID_REQUEST))
        read_committed = isolation == common_pb2.ISOLATION_LEVEL_READ_COMMITTED

        def fail(part: Part, code: ErrorCode, message: str) -> None:
            del message
            results[(part[0], part[1])] = {
                "partition_index": part[1],
                "error_code": int(code),
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
            }

        node_max_bytes: dict[str, int] = {}

        def planned(calls: Mapping[str, list[Part]]) -> None:
            node_max_bytes.update(
                node_budgets(
                    request["max_bytes"],
                    {
                        a: [data["partition_max_bytes"] for _, _, data in items]
                        for a, items in calls.items()
                    },
                )
            )

        async def call(address: str, items: list[Part]) -> None:
            partitions = []
            for t, p, data in items:
                fetch_partition = storage_pb2.FetchPartition(
                    topic=t,
                    partition=p,
                    fetch_offset=data["fetch_offset"],
                    partition_max_bytes=data["partition_max_bytes"],
                )
                # v9+: the node fences a stale epoch and refuses an unknown newer one.
                epoch = _client_leader_epoch(data)
                if epoch is not None:
                    fetch_partition.current_leader_epoch = epoch
                if data["last_fetched_epoch"] >= 0:
                    fetch_partition.last_fetched_epoch = data["last_fetched_epoch"]
                partitions.append(fetch_partition)
            max_wait_ms = max(request["max_wait_ms"], 0)
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).Fetch,
                storage_pb2.FetchRequest(
                    max_wait_ms=max_wait_ms,
                    # A node asked for less than min_bytes could only ever wait out max_wait_ms.
                    min_bytes=min(max(request["min_bytes"], 0), node_max_bytes[address]),
                    max_bytes=node_max_bytes[address],
                    isolation_level=isolation,
                    partitions=partitions,
                ),
                backend.upstreams.request_timeout_s + max_wait_ms / 1000,
            )
            for r in response.partitions:
                answer = {
                    "partition_index": r.partition,
                    "error_code": int(r.error_code),
                    "high_watermark": r.high_watermark,
                    "last_stable_offset": r.last_stable_offset,
                    "log_start_offset": r.log_start_offset,
                    # The aborted transactions overlapping the records returned, which the
                    # client filters out; null for read_uncommitted, as from Kafka.
                    "aborted_transactions": [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in r.aborted_transactions
                    ]
                    if read_committed
                    else None,
                    "preferred_read_replica": -1,
                    "records": bytes(r.records),
                }
                if r.HasField("diverging_epoch"):
                    answer["diverging_epoch"] = {
                        "epoch": r.diverging_epoch.epoch,
                        "end_offset": r.diverging_epoch.end_offset,
                    }
                leader = current_leader(backend.image, r)
                if leader is not None:
                    answer["current_leader"] = leader
                results[(r.topic, r.partition)] = answer

        parts = [
            (t["topic"], p["partition"], p) for t in request["topics"] for p in t["partitions"]
        ]
        await fan_out(backend, parts, call, fail, planned=planned)
        budget = ResponseBudget(request["max_bytes"])
        for t, p, data in parts:
            result = results[(t, p)]
            records = result.get("records")
            if not records:
                continue
            try:
                length = budget.take(records, data["partition_max_bytes"])
            except CorruptRecordError as e:
                _log.error("fetch of %s-%d answered unreadable records: %s", t, p, e)
                fail((t, p, data), ErrorCode.CORRUPT_MESSAGE, str(e))
                continue
            if length < len(records):
                # Cut to whole batches within the budget; the client fetches the rest next.
                result["records"] = records[:length]
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            # No fetch sessions: every fetch is a full one.
            "session_id": 0,
            "responses": [
                {
                    "topic": t["topic"],
                    "partitions": [results[(t["topic"], p["partition"])] for p in t["partitions"]],
                }
                for t in request["topics"]
            ],
        }

    # 13+ name topics by id only (Metadata hands the ids out since #14): the next step, not
    # taken yet; every client in CI sends 12 at most against this range.
    return ApiHandler(
        ApiKey.FETCH,
        handle,
        versions=(4, 12),
        authorization=Authorization(
            "READ on each topic",
            items=(topic_items("topics", "responses", READ, name_key="topic"),),
        ),
        error_response=_fetch_error,
    )


def _list_offsets_error(request: Message, context: RequestContext, code: int) -> Message:
    del context
    return {
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code, "offset": -1}
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ]
    }


def _offset_spec(timestamp: int) -> int:
    if timestamp == _LATEST_TIMESTAMP:
        return storage_pb2.OFFSET_SPEC_LATEST
    if timestamp == _EARLIEST_TIMESTAMP:
        return storage_pb2.OFFSET_SPEC_EARLIEST
    if timestamp == _MAX_TIMESTAMP:
        return storage_pb2.OFFSET_SPEC_MAX_TIMESTAMP
    return storage_pb2.OFFSET_SPEC_TIMESTAMP


def _list_offsets_partition(
    topic: str, partition: int, data: Message
) -> storage_pb2.ListOffsetsPartition:
    entry = storage_pb2.ListOffsetsPartition(
        topic=topic,
        partition=partition,
        spec=_offset_spec(data["timestamp"]),  # type: ignore[arg-type]
        timestamp_ms=max(data["timestamp"], 0),
    )
    # v4+: the storage node fences an older epoch (FENCED_LEADER_EPOCH) and refuses a newer
    # one it has not seen yet (UNKNOWN_LEADER_EPOCH); -1 (and v0-3) checks nothing.
    epoch = _client_leader_epoch(data)
    if epoch is not None:
        entry.current_leader_epoch = epoch
    return entry


def _list_offsets(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        results: dict[tuple[str, int], Message] = {}
        isolation = _isolation_level(request["isolation_level"])
        if isolation is None:
            return _list_offsets_error(request, context, int(ErrorCode.INVALID_REQUEST))

        def fail(part: Part, code: ErrorCode, message: str) -> None:
            del message
            results[(part[0], part[1])] = {
                "partition_index": part[1],
                "error_code": int(code),
                "timestamp": -1,
                "offset": -1,
            }

        async def call(address: str, items: list[Part]) -> None:
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).ListOffsets,
                storage_pb2.ListOffsetsRequest(
                    isolation_level=isolation,
                    partitions=[_list_offsets_partition(t, p, data) for t, p, data in items],
                ),
            )
            for r in response.partitions:
                results[(r.topic, r.partition)] = {
                    "partition_index": r.partition,
                    "error_code": int(r.error_code),
                    "timestamp": r.timestamp_ms if r.timestamp_ms else -1,
                    "offset": r.offset,
                    # v4+: the epoch of the record at `offset`, from the node's epoch history.
                    "leader_epoch": r.leader_epoch if r.offset >= 0 else NO_EPOCH,
                }

        parts = [
            (t["name"], p["partition_index"], p) for t in request["topics"] for p in t["partitions"]
        ]
        await fan_out(backend, parts, call, fail)
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        results[(t["name"], p["partition_index"])] for p in t["partitions"]
                    ],
                }
                for t in request["topics"]
            ],
        }

    # v7 adds timestamp -3 (the record with the largest timestamp; KIP-734), which the storage
    # node answers; 8+ are about tiered storage, which Brook has not.
    return ApiHandler(
        ApiKey.LIST_OFFSETS,
        handle,
        versions=(1, 7),
        authorization=Authorization(
            "DESCRIBE on each topic", items=(topic_items("topics", "topics", DESCRIBE),)
        ),
        error_response=_list_offsets_error,
    )


def _offset_for_leader_epoch_error(request: Message, context: RequestContext, code: int) -> Message:
    del context
    return {
        "topics": [
            {
                "topic": t["topic"],
                "partitions": [
                    {"partition": p["partition"], "error_code": code} for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ]
    }


def _offset_for_leader_epoch(backend: Backend) -> ApiHandler:
    """OffsetForLeaderEpoch v0-4 for consumers (KIP-320): the end offset of the largest leader
    epoch <= the asked one in the leader's log, from the leader epoch cache the storage node
    keeps for its followers' truncation (ReplicaService.OffsetForLeaderEpoch, asked as
    replica -1). A consumer whose position lies past that end offset has seen records the
    log no longer has (an unclean leader change truncated them) and resets; one whose
    current_leader_epoch is stale is fenced."""

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results: dict[tuple[str, int], Message] = {}

        def fail(part: Part, code: ErrorCode, message: str) -> None:
            del message
            results[(part[0], part[1])] = {"partition": part[1], "error_code": int(code)}

        async def call(address: str, items: list[Part]) -> None:
            response = await backend.upstreams.call(
                backend.upstreams.replica(address).OffsetForLeaderEpoch,
                replica_pb2.OffsetForLeaderEpochRequest(
                    replica_id=_CONSUMER_REPLICA_ID,
                    partitions=[
                        replica_pb2.OffsetForLeaderEpochPartition(
                            topic=t,
                            partition=p,
                            # Always set: this field is not optional, and its default 0
                            # would read as "epoch 0" (-1 is no check).
                            current_leader_epoch=max(data["current_leader_epoch"], NO_EPOCH),
                            leader_epoch=data["leader_epoch"],
                        )
                        for t, p, data in items
                    ],
                ),
            )
            for r in response.partitions:
                results[(r.topic, r.partition)] = {
                    "partition": r.partition,
                    "error_code": int(r.error_code),
                    "leader_epoch": r.end_offset.epoch if not r.error_code else NO_EPOCH,
                    "end_offset": r.end_offset.end_offset if not r.error_code else -1,
                }

        parts = [
            (t["topic"], p["partition"], p) for t in request["topics"] for p in t["partitions"]
        ]
        await fan_out(backend, parts, call, fail)
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "topic": t["topic"],
                    "partitions": [
                        results.get(
                            (t["topic"], p["partition"]),
                            {
                                "partition": p["partition"],
                                "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                            },
                        )
                        for p in t["partitions"]
                    ],
                }
                for t in request["topics"]
            ],
        }

    return ApiHandler(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        handle,
        versions=(0, 4),
        authorization=Authorization(
            "DESCRIBE on each topic",
            items=(topic_items("topics", "topics", DESCRIBE, name_key="topic"),),
        ),
        error_response=_offset_for_leader_epoch_error,
    )


def data_handlers(backend: Backend) -> list[ApiHandler]:
    affinity = ProduceAffinity()
    return [
        _metadata(backend, affinity),
        produce_handler(backend, affinity),
        _fetch(backend),
        _list_offsets(backend),
        _offset_for_leader_epoch(backend),
    ]
