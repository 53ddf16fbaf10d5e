"""Metadata, Produce, Fetch and ListOffsets: the data plane, forwarded to the leader storage
nodes with the record batches passed through as bytes.

A request touching partitions led by several storage nodes becomes one gRPC call per node,
sent concurrently; a node that does not answer gives its partitions the retriable error
standing for the failure, so the client refreshes its metadata and retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from brook.errors import ErrorCode
from brook.v1 import common_pb2, storage_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import NO_NODE
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import UpstreamError

__all__ = ["data_handlers"]

_ACKS: Final = {
    0: storage_pb2.ACKS_NONE,
    1: storage_pb2.ACKS_LEADER,
    -1: storage_pb2.ACKS_ALL,
}
# Kafka's ListOffsets timestamps with a special meaning.
_LATEST_TIMESTAMP: Final = -1
_EARLIEST_TIMESTAMP: Final = -2
_MAX_TIMESTAMP: Final = -3
# Produce v0-2 carry the old MessageSet formats, which Brook does not store.
PRODUCE_SERVED_MIN: Final = 3

_Part = tuple[str, int, Any]


async def _fan_out(
    backend: Backend,
    parts: list[_Part],
    call: Callable[[str, list[_Part]], Awaitable[None]],
    fail: Callable[[_Part, ErrorCode, str], None],
) -> None:
    routed = backend.route((t, p, (t, p, item)) for t, p, item in parts)
    for part, code in routed.errors:
        fail(part, code, "")

    async def one(address: str, items: list[_Part]) -> None:
        try:
            await call(address, items)
        except UpstreamError as e:
            code = e.code
            if code == ErrorCode.NETWORK_EXCEPTION:
                # The leader storage node is unreachable: most likely dead, with leadership
                # about to move. Kafka clients know NETWORK_EXCEPTION only as their own
                # transport error, and librdkafka fails a record for good when a broker
                # answers with it; NOT_LEADER_OR_FOLLOWER makes every client refresh its
                # metadata and retry, by which time the gateway routes to the new leader.
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            for part in items:
                fail(part, code, str(e))

    await asyncio.gather(*(one(a, items) for a, items in routed.by_address.items()))


def _metadata(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        image = backend.image
        brokers = [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in image.kafka_brokers()
        ]
        requested = request["topics"]
        if requested is None or (context.api_version == 0 and not requested):
            names = sorted(image.topics)
        else:
            names = [t["name"] for t in requested]
        topics = []
        for name in names:
            state = image.topics.get(name)
            if state is None:
                topics.append(
                    {
                        "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        "name": name,
                        "partitions": [],
                    }
                )
                continue
            partitions = []
            for index in sorted(state.partitions):
                p = state.partitions[index]
                leader = image.gateway_for(p.leader)
                replicas = list(dict.fromkeys(image.gateway_for(r) for r in p.replicas))
                isr = list(dict.fromkeys(image.gateway_for(r) for r in p.isr))
                partitions.append(
                    {
                        "error_code": int(
                            ErrorCode.NONE if leader != NO_NODE else ErrorCode.LEADER_NOT_AVAILABLE
                        ),
                        "partition_index": index,
                        "leader_id": leader,
                        "replica_nodes": [r for r in replicas if r != NO_NODE],
                        "isr_nodes": [r for r in isr if r != NO_NODE],
                        "offline_replicas": [],
                    }
                )
            topics.append(
                {
                    "error_code": 0,
                    "name": name,
                    "is_internal": state.internal,
                    "partitions": partitions,
                }
            )
        return {
            "throttle_time_ms": 0,
            "brokers": brokers,
            "cluster_id": image.cluster_id or None,
            "controller_id": image.controller_gateway(),
            "topics": topics,
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        names = [t["name"] for t in request["topics"] or []]
        return {"topics": [{"error_code": code, "name": n, "partitions": []} for n in names]}

    return ApiHandler(ApiKey.METADATA, handle, versions=(0, 5), error_response=error)


def _produce_error(request: Message, context: RequestContext, code: int) -> Message:
    del context
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    {"index": p["index"], "error_code": code, "base_offset": -1}
                    for p in t["partition_data"]
                ],
            }
            for t in request["topic_data"]
        ]
    }


def _produce(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message | None:
        acks = _ACKS.get(request["acks"])
        if acks is None:
            return _produce_error(request, context, int(ErrorCode.INVALID_REQUIRED_ACKS))
        results: dict[tuple[str, int], Message] = {}

        def fail(part: _Part, code: ErrorCode, message: str) -> None:
            results[(part[0], part[1])] = {
                "index": part[1],
                "error_code": int(code),
                "base_offset": -1,
                "log_append_time_ms": -1,
                "log_start_offset": -1,
                "error_message": message or None,
            }

        async def call(address: str, items: list[_Part]) -> None:
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).Produce,
                storage_pb2.ProduceRequest(
                    acks=acks,
                    timeout_ms=max(request["timeout_ms"], 0),
                    partitions=[
                        storage_pb2.PartitionProduceData(topic=t, partition=p, records=r or b"")
                        for t, p, r in items
                    ],
                ),
            )
            for r in response.partitions:
                results[(r.topic, r.partition)] = {
                    "index": r.partition,
                    "error_code": int(r.error_code),
                    "base_offset": r.base_offset,
                    "log_append_time_ms": r.log_append_time_ms,
                    "log_start_offset": r.log_start_offset,
                    "record_errors": [
                        {"batch_index": e.index, "batch_index_error_message": e.message or None}
                        for e in r.batch_errors
                    ],
                    "error_message": r.error_message or None,
                }

        parts = [
            (t["name"], p["index"], p["records"])
            for t in request["topic_data"]
            for p in t["partition_data"]
        ]
        await _fan_out(backend, parts, call, fail)
        if request["acks"] == 0:
            return None
        return {
            "responses": [
                {
                    "name": t["name"],
                    "partition_responses": [
                        results.get(
                            (t["name"], p["index"]),
                            {
                                "index": p["index"],
                                "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                            },
                        )
                        for p in t["partition_data"]
                    ],
                }
                for t in request["topic_data"]
            ],
            "throttle_time_ms": 0,
        }

    return ApiHandler(
        ApiKey.PRODUCE, handle, versions=(PRODUCE_SERVED_MIN, 8), error_response=_produce_error
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


def _fetch(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results: dict[tuple[str, int], Message] = {}
        isolation = (
            common_pb2.ISOLATION_LEVEL_READ_COMMITTED
            if request["isolation_level"] == 1
            else common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
        )

        def fail(part: _Part, code: ErrorCode, message: str) -> None:
            del message
            results[(part[0], part[1])] = {
                "partition_index": part[1],
                "error_code": int(code),
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
            }

        async def call(address: str, items: list[_Part]) -> None:
            partitions = []
            for t, p, data in items:
                fetch_partition = storage_pb2.FetchPartition(
                    topic=t,
                    partition=p,
                    fetch_offset=data["fetch_offset"],
                    partition_max_bytes=data["partition_max_bytes"],
                )
                if data["current_leader_epoch"] >= 0:
                    fetch_partition.current_leader_epoch = data["current_leader_epoch"]
                partitions.append(fetch_partition)
            max_wait_ms = max(request["max_wait_ms"], 0)
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).Fetch,
                storage_pb2.FetchRequest(
                    max_wait_ms=max_wait_ms,
                    min_bytes=max(request["min_bytes"], 0),
                    max_bytes=request["max_bytes"],
                    isolation_level=isolation,
                    partitions=partitions,
                ),
                backend.upstreams.request_timeout_s + max_wait_ms / 1000,
            )
            for r in response.partitions:
                results[(r.topic, r.partition)] = {
                    "partition_index": r.partition,
                    "error_code": int(r.error_code),
                    "high_watermark": r.high_watermark,
                    # No transactions yet: the last stable offset is the high watermark.
                    "last_stable_offset": r.last_stable_offset or r.high_watermark,
                    "log_start_offset": r.log_start_offset,
                    "aborted_transactions": [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in r.aborted_transactions
                    ],
                    "preferred_read_replica": -1,
                    "records": bytes(r.records),
                }

        parts = [
            (t["topic"], p["partition"], p) for t in request["topics"] for p in t["partitions"]
        ]
        await _fan_out(backend, parts, call, fail)
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

    return ApiHandler(ApiKey.FETCH, handle, versions=(4, 11), error_response=_fetch_error)


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


def _list_offsets(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results: dict[tuple[str, int], Message] = {}
        isolation = (
            common_pb2.ISOLATION_LEVEL_READ_COMMITTED
            if request["isolation_level"] == 1
            else common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
        )

        def fail(part: _Part, code: ErrorCode, message: str) -> None:
            del message
            results[(part[0], part[1])] = {
                "partition_index": part[1],
                "error_code": int(code),
                "timestamp": -1,
                "offset": -1,
            }

        async def call(address: str, items: list[_Part]) -> None:
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).ListOffsets,
                storage_pb2.ListOffsetsRequest(
                    isolation_level=isolation,
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic=t,
                            partition=p,
                            spec=_offset_spec(data["timestamp"]),  # type: ignore[arg-type]
                            timestamp_ms=max(data["timestamp"], 0),
                        )
                        for t, p, data in items
                    ],
                ),
            )
            for r in response.partitions:
                results[(r.topic, r.partition)] = {
                    "partition_index": r.partition,
                    "error_code": int(r.error_code),
                    "timestamp": r.timestamp_ms if r.timestamp_ms else -1,
                    "offset": r.offset,
                }

        parts = [
            (t["name"], p["partition_index"], p) for t in request["topics"] for p in t["partitions"]
        ]
        await _fan_out(backend, parts, call, fail)
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

    return ApiHandler(
        ApiKey.LIST_OFFSETS, handle, versions=(1, 3), error_response=_list_offsets_error
    )


def data_handlers(backend: Backend) -> list[ApiHandler]:
    return [_metadata(backend), _produce(backend), _fetch(backend), _list_offsets(backend)]
