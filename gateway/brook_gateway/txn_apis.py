"""Producer ids and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, DescribeTransactions and ListTransactions, forwarded to the coordinators
(coordinator_routing.py); DescribeProducers and WriteTxnMarkers, forwarded to the partitions'
leader storage nodes (fan_out.py).

InitProducerId without a transactional id goes to any live storage node, which hands out
producer ids from its controller-allocated block; with one, to the transaction coordinator
owning the id, as do AddPartitionsToTxn, AddOffsetsToTxn and EndTxn. TxnOffsetCommit goes to
the coordinator owning the group. The coordinators answer in Kafka's error codes; a code a
request's version predates is answered with one that version knows (``_txn_error``).
WriteTxnMarkers is Kafka's broker-to-broker marker request, served for admin tools
(kafka-transactions.sh's abort of a hanging transaction); the coordinators write their own
markers over gRPC.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from brook.errors import ErrorCode
from brook.security.authorizer import (
    CLUSTER_ACTION,
    DESCRIBE,
    IDEMPOTENT_WRITE,
    READ,
    TRANSACTIONAL_ID,
    WRITE,
    Action,
    cluster_action,
)
from brook.v1 import common_pb2, group_pb2, storage_pb2, transaction_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import (
    Authorization,
    Items,
    all_of,
    named,
    on_cluster,
    on_group,
    only_describable,
    topic_items,
    transactional_id_write,
)
from brook_gateway.backend import Backend
from brook_gateway.coordinator_routing import (
    CoordinatorRouteError,
    CoordinatorRouter,
    Routers,
    ask_coordinators_listed_here,
    gather_bounded,
    partitions_not_coordinator,
)
from brook_gateway.fan_out import Part, fan_out
from brook_gateway.group_apis import commit_error, commit_offsets, unknown
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import UpstreamError

__all__ = ["TRANSACTION_STATE_NAMES", "txn_handlers"]

_log = logging.getLogger(__name__)

# Kafka's names of the transaction states (DescribeTransactions, ListTransactions).
TRANSACTION_STATE_NAMES: Final = {
    transaction_pb2.TRANSACTION_STATE_EMPTY: "Empty",
    transaction_pb2.TRANSACTION_STATE_ONGOING: "Ongoing",
    transaction_pb2.TRANSACTION_STATE_PREPARE_COMMIT: "PrepareCommit",
    transaction_pb2.TRANSACTION_STATE_PREPARE_ABORT: "PrepareAbort",
    transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT: "CompleteCommit",
    transaction_pb2.TRANSACTION_STATE_COMPLETE_ABORT: "CompleteAbort",
    transaction_pb2.TRANSACTION_STATE_DEAD: "Dead",
    transaction_pb2.TRANSACTION_STATE_PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_STATES_BY_NAME: Final = {name: state for state, name in TRANSACTION_STATE_NAMES.items()}
_NO_PRODUCER_ID: Final = -1
_NO_EPOCH: Final = -1
# The version of each API that introduced PRODUCER_FENCED (KIP-588; None: it never did) and
# TRANSACTION_ABORTABLE (KIP-890), by the schemas' version notes.
_PRODUCER_FENCED_FROM: Final[dict[ApiKey, int | None]] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: None,
}
_TRANSACTION_ABORTABLE_FROM: Final[dict[ApiKey, int]] = {
    ApiKey.INIT_PRODUCER_ID: 5,
    ApiKey.ADD_PARTITIONS_TO_TXN: 5,
    ApiKey.ADD_OFFSETS_TO_TXN: 4,
    ApiKey.END_TXN: 4,
    ApiKey.TXN_OFFSET_COMMIT: 4,
}


def _txn_error(code: int, context: RequestContext) -> int:
    """A coordinator's code as the request's version knows it: PRODUCER_FENCED before the
    version that introduced it is INVALID_PRODUCER_EPOCH (what the coordinator answered for a
    fenced producer until then, and what those clients handle as fenced, as Kafka maps it);
    TRANSACTION_ABORTABLE before its version is INVALID_TXN_STATE, a code every such client
    knows and, like TRANSACTION_ABORTABLE for the transaction, cannot retry."""
    api = ApiKey(context.header.api_key)
    version = context.api_version
    fenced_from = _PRODUCER_FENCED_FROM[api]
    if code == ErrorCode.PRODUCER_FENCED and (fenced_from is None or version < fenced_from):
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < _TRANSACTION_ABORTABLE_FROM[api]:
        return int(ErrorCode.INVALID_TXN_STATE)
    return code


def _top_level_error(response: Any) -> int:
    code: int = response.error_code
    return code


# -- InitProducerId -------------------------------------------------------------------------


def _init_producer_id(backend: Backend, router: CoordinatorRouter) -> ApiHandler:
    def error(request: Message, context: RequestContext, code: int) -> Message:
        del request, context
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "producer_id": _NO_PRODUCER_ID,
            "producer_epoch": _NO_EPOCH,
        }

    def answer(code: int, producer_id: int, producer_epoch: int) -> Message:
        if code != ErrorCode.NONE:
            producer_id, producer_epoch = _NO_PRODUCER_ID, _NO_EPOCH
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
        }

    async def idempotent(request: Message, context: RequestContext) -> Message:
        upstreams = backend.upstreams
        forwarded = storage_pb2.InitProducerIdRequest(
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
            return answer(int(response.error_code), response.producer_id, response.producer_epoch)
        # What every client retries InitProducerId on; a transport error code (which
        # librdkafka takes as its own connection failing) would not be.
        return error(request, context, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))

    async def handle(request: Message, context: RequestContext) -> Message:
        transactional_id: str | None = request["transactional_id"]
        if transactional_id is None:
            return await idempotent(request, context)
        if not transactional_id:
            # Kafka's coordinator refuses an empty transactional id, as the producer does.
            return error(request, context, int(ErrorCode.INVALID_REQUEST))
        forwarded = transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=request["transaction_timeout_ms"],
            producer_id=request["producer_id"],
            producer_epoch=request["producer_epoch"],
        )
        try:
            response = await router.forward(
                transactional_id, "InitProducerId", forwarded, _top_level_error
            )
        except CoordinatorRouteError as e:
            return error(request, context, int(e.code))
        code = _txn_error(int(response.error_code), context)
        return answer(code, response.producer_id, response.producer_epoch)

    def producer_actions(request: Message, context: RequestContext) -> list[Action]:
        del context
        transactional_id = request["transactional_id"]
        if transactional_id is None:
            return [cluster_action(IDEMPOTENT_WRITE)]
        return [Action(TRANSACTIONAL_ID, transactional_id, WRITE)]

    return ApiHandler(
        ApiKey.INIT_PRODUCER_ID,
        handle,
        versions=(0, 5),
        authorization=Authorization(
            "WRITE on the transactional id; without one IDEMPOTENT_WRITE on the cluster (or "
            "WRITE on any topic)",
            request=producer_actions,
        ),
        error_response=error,
    )


# -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ----------------------------------------------

# AddPartitionsToTxn v4+ is broker-to-broker (a partition leader verifying a transaction,
# KIP-890), batched by transaction: not advertised, the clients' 0-3 are.
_ADD_PARTITIONS_CLIENT_MAX: Final = 3


def _add_partitions_to_txn(backend: Backend, router: CoordinatorRouter) -> ApiHandler:
    def answer(request: Message, codes: dict[tuple[str, int], int], default: int) -> Message:
        return {
            "throttle_time_ms": 0,
            "results_by_topic_v3_and_below": [
                {
                    "name": t["name"],
                    "results_by_partition": [
                        {
                            "partition_index": p,
                            "partition_error_code": codes.get((t["name"], p), default),
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in request["v3_and_below_topics"]
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        # The top-level code is v4+'s (a broker's batched request, answered UNSUPPORTED_VERSION).
        return answer(request, {}, code) | {"error_code": code}

    async def handle(request: Message, context: RequestContext) -> Message:
        named = [(t["name"], p) for t in request["v3_and_below_topics"] for p in t["partitions"]]
        if not named:
            return answer(request, {}, int(ErrorCode.NONE))
        # As a Kafka broker: a partition it does not know fails the request before the
        # coordinator sees it, the others are OPERATION_NOT_ATTEMPTED.
        missing = await unknown(backend, named)
        if missing:
            codes = {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for tp in missing}
            return answer(request, codes, int(ErrorCode.OPERATION_NOT_ATTEMPTED))
        transactional_id = request["v3_and_below_transactional_id"]
        add = transaction_pb2.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=request["v3_and_below_producer_id"],
            producer_epoch=request["v3_and_below_producer_epoch"],
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in named],
        )
        try:
            response = await router.forward(
                transactional_id, "AddPartitionsToTxn", add, partitions_not_coordinator
            )
        except CoordinatorRouteError as e:
            return error(request, context, int(e.code))
        codes = {
            (r.topic, r.partition): _txn_error(int(r.error_code), context)
            for r in response.partitions
        }
        return answer(request, codes, int(ErrorCode.UNKNOWN_SERVER_ERROR))

    return ApiHandler(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        handle,
        versions=(0, _ADD_PARTITIONS_CLIENT_MAX),
        authorization=Authorization(
            "WRITE on the transactional id and on each topic (one topic denied: none added)",
            request=transactional_id_write("v3_and_below_transactional_id"),
            items=(
                topic_items(
                    "v3_and_below_topics",
                    "results_by_topic_v3_and_below",
                    WRITE,
                    versions=(0, _ADD_PARTITIONS_CLIENT_MAX),
                    all_or_nothing=True,
                ),
            ),
        ),
        error_response=error,
    )


def _forwarded(
    api: ApiKey,
    versions: tuple[int, int],
    router: CoordinatorRouter,
    method: str,
    build: Callable[[Message], Any],
    authorization: Authorization,
) -> ApiHandler:
    """An API answered with a top-level error code alone (AddOffsetsToTxn, EndTxn): the
    request ``build`` makes sent to the coordinator of its transactional id as ``method``."""

    async def handle(request: Message, context: RequestContext) -> Message:
        forwarded = build(request)
        try:
            response = await router.forward(
                forwarded.transactional_id, method, forwarded, _top_level_error
            )
        except CoordinatorRouteError as e:
            return {"throttle_time_ms": 0, "error_code": int(e.code)}
        return {"throttle_time_ms": 0, "error_code": _txn_error(int(response.error_code), context)}

    return ApiHandler(api, handle, versions=versions, authorization=authorization)


def _add_offsets_to_txn(router: CoordinatorRouter) -> ApiHandler:
    return _forwarded(
        ApiKey.ADD_OFFSETS_TO_TXN,
        (0, 4),
        router,
        "AddOffsetsToTxn",
        lambda request: transaction_pb2.AddOffsetsToTxnRequest(
            transactional_id=request["transactional_id"],
            producer_id=request["producer_id"],
            producer_epoch=request["producer_epoch"],
            group_id=request["group_id"],
        ),
        Authorization(
            "WRITE on the transactional id, READ on the group",
            request=all_of(transactional_id_write(), on_group(READ)),
        ),
    )


def _end_txn(router: CoordinatorRouter) -> ApiHandler:
    # v5 bumps the producer epoch at every transaction's end (KIP-890 part 2), which the
    # coordinators do not: not served, and not advertised.
    return _forwarded(
        ApiKey.END_TXN,
        (0, 4),
        router,
        "EndTxn",
        lambda request: transaction_pb2.EndTxnRequest(
            transactional_id=request["transactional_id"],
            producer_id=request["producer_id"],
            producer_epoch=request["producer_epoch"],
            committed=request["committed"],
        ),
        Authorization("WRITE on the transactional id", request=transactional_id_write()),
    )


# -- TxnOffsetCommit -------------------------------------------------------------------------


def _txn_offset_commit(backend: Backend, router: CoordinatorRouter) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        # v0-2 carry no generation or member (their defaults, -1 and "", are not checked).
        return await commit_offsets(
            backend,
            router,
            request,
            "TxnCommitOffsets",
            lambda partitions: group_pb2.TxnCommitOffsetsRequest(
                transactional_id=request["transactional_id"],
                group_id=request["group_id"],
                producer_id=request["producer_id"],
                producer_epoch=request["producer_epoch"],
                generation_id=request["generation_id"],
                member_id=request["member_id"],
                partitions=partitions,
            ),
            lambda code: _txn_error(code, context),
        )

    return ApiHandler(
        ApiKey.TXN_OFFSET_COMMIT,
        handle,
        versions=(0, 4),
        authorization=Authorization(
            "WRITE on the transactional id, READ on the group and on each topic",
            request=all_of(transactional_id_write(), on_group(READ)),
            items=(topic_items("topics", "topics", READ),),
        ),
        error_response=commit_error,
    )


# -- DescribeTransactions, ListTransactions --------------------------------------------------


def _describe_transactions(router: CoordinatorRouter) -> ApiHandler:
    def failed(transactional_id: str, code: int) -> Message:
        return {
            "error_code": code,
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": _NO_PRODUCER_ID,
            "producer_epoch": _NO_EPOCH,
            "topics": [],
        }

    def first_error(response: Any) -> int:
        return int(response.transactions[0].error_code) if response.transactions else 0

    async def describe(transactional_id: str) -> Message:
        try:
            response = await router.forward(
                transactional_id,
                "DescribeTransactions",
                transaction_pb2.DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                first_error,
            )
        except CoordinatorRouteError as e:
            return failed(transactional_id, int(e.code))
        found = next(
            (t for t in response.transactions if t.transactional_id == transactional_id), None
        )
        if found is None:
            return failed(transactional_id, int(ErrorCode.UNKNOWN_SERVER_ERROR))
        if found.error_code != ErrorCode.NONE:
            return failed(transactional_id, int(found.error_code))
        topics: dict[str, list[int]] = {}
        for tp in found.partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        return {
            "error_code": 0,
            "transactional_id": transactional_id,
            "transaction_state": TRANSACTION_STATE_NAMES.get(found.state, ""),
            "transaction_timeout_ms": found.transaction_timeout_ms,
            "transaction_start_time_ms": found.transaction_start_time_ms,
            "producer_id": found.producer_id,
            "producer_epoch": found.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        ids = request["transactional_ids"]
        states = await gather_bounded([partial(describe, i) for i in ids])
        return {"throttle_time_ms": 0, "transaction_states": states}

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return {
            "throttle_time_ms": 0,
            "transaction_states": [failed(i, code) for i in request["transactional_ids"]],
        }

    return ApiHandler(
        ApiKey.DESCRIBE_TRANSACTIONS,
        handle,
        versions=(0, 0),
        authorization=Authorization(
            "DESCRIBE on each transactional id",
            items=(
                Items("transactional_ids", "transaction_states", named(TRANSACTIONAL_ID, DESCRIBE)),
            ),
        ),
        error_response=error,
    )


def _list_transactions(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        names: list[str] = request["state_filters"]
        unknown_names = [n for n in names if n not in _STATES_BY_NAME]
        states = [_STATES_BY_NAME[n] for n in names if n in _STATES_BY_NAME]
        if names and not states:
            # Only states Kafka does not have: nothing can match.
            return {
                "throttle_time_ms": 0,
                "error_code": 0,
                "unknown_state_filters": unknown_names,
                "transaction_states": [],
            }
        listing = transaction_pb2.ListTransactionsRequest(
            state_filters=states,
            producer_id_filters=request["producer_id_filters"],
            duration_filter_ms=request["duration_filter"],
        )
        upstreams = backend.upstreams
        # Split by broker as ListGroups is: each transactional id is listed by the broker
        # FindCoordinator names for it, so a client asking every broker sees it once.

        async def ask(address: str) -> Any:
            return await upstreams.call(upstreams.transactions(address).ListTransactions, listing)

        code, answers = await ask_coordinators_listed_here(backend, context, ask)
        listed: dict[str, Message] = {}
        for answer in answers:
            for t in answer.transactions:
                listed[t.transactional_id] = {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": TRANSACTION_STATE_NAMES.get(t.state, ""),
                }
        return {
            "throttle_time_ms": 0,
            "error_code": int(code),
            "unknown_state_filters": unknown_names,
            "transaction_states": [listed[i] for i in sorted(listed)],
        }

    return ApiHandler(
        ApiKey.LIST_TRANSACTIONS,
        handle,
        versions=(0, 1),
        authorization=Authorization(
            "none: lists the transactional ids the caller may DESCRIBE",
            filter_response=only_describable(
                "transaction_states", TRANSACTIONAL_ID, "transactional_id"
            ),
        ),
    )


# -- DescribeProducers, WriteTxnMarkers ------------------------------------------------------


def _describe_producers(backend: Backend) -> ApiHandler:
    def partition_failed(partition: int, code: int, message: str | None = None) -> Message:
        return {
            "partition_index": partition,
            "error_code": code,
            "error_message": message,
            "active_producers": [],
        }

    def answer(request: Message, results: dict[tuple[str, int], Message], default: int) -> Message:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        results.get((t["name"], p), partition_failed(p, default))
                        for p in t["partition_indexes"]
                    ],
                }
                for t in request["topics"]
            ],
        }

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        results: dict[tuple[str, int], Message] = {}

        def fail(part: Part, code: ErrorCode, message: str) -> None:
            results[(part[0], part[1])] = partition_failed(part[1], int(code), message or None)

        async def call(address: str, items: list[Part]) -> None:
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).DescribeProducers,
                storage_pb2.DescribeProducersRequest(
                    partitions=[
                        common_pb2.TopicPartition(topic=t, partition=p) for t, p, _ in items
                    ]
                ),
            )
            for r in response.partitions:
                results[(r.topic, r.partition)] = {
                    "partition_index": r.partition,
                    "error_code": int(r.error_code),
                    "error_message": r.error_message or None,
                    "active_producers": [
                        {
                            "producer_id": d.producer_id,
                            "producer_epoch": d.producer_epoch,
                            "last_sequence": d.last_sequence,
                            "last_timestamp": d.last_timestamp,
                            "coordinator_epoch": d.coordinator_epoch,
                            "current_txn_start_offset": d.current_txn_start_offset,
                        }
                        for d in r.producers
                    ],
                }

        parts = [(t["name"], p, None) for t in request["topics"] for p in t["partition_indexes"]]
        await fan_out(backend, parts, call, fail)
        return answer(request, results, int(ErrorCode.UNKNOWN_SERVER_ERROR))

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return answer(request, {}, code)

    return ApiHandler(
        ApiKey.DESCRIBE_PRODUCERS,
        handle,
        versions=(0, 0),
        authorization=Authorization(
            "READ on each topic", items=(topic_items("topics", "topics", READ),)
        ),
        error_response=error,
    )


def _write_txn_markers(backend: Backend) -> ApiHandler:
    """Each marker's partitions go to their leaders: one StorageService.WriteTxnMarkers call
    per leader node carrying its share of every marker, answered per marker and partition."""

    def answer(request: Message, codes: dict[tuple[int, str, int], int], default: int) -> Message:
        return {
            "markers": [
                {
                    "producer_id": m["producer_id"],
                    "topics": [
                        {
                            "name": t["name"],
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "error_code": codes.get((index, t["name"], p), default),
                                }
                                for p in t["partition_indexes"]
                            ],
                        }
                        for t in m["topics"]
                    ],
                }
                for index, m in enumerate(request["markers"])
            ]
        }

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        markers = request["markers"]
        codes: dict[tuple[int, str, int], int] = {}

        def fail(part: Part, code: ErrorCode, message: str) -> None:
            del message
            codes[(part[2], part[0], part[1])] = int(code)

        async def call(address: str, items: list[Part]) -> None:
            by_marker: dict[int, list[common_pb2.TopicPartition]] = {}
            for t, p, index in items:
                by_marker.setdefault(index, []).append(
                    common_pb2.TopicPartition(topic=t, partition=p)
                )
            indexes = list(by_marker)
            response = await backend.upstreams.call(
                backend.upstreams.storage(address).WriteTxnMarkers,
                storage_pb2.WriteTxnMarkersRequest(
                    markers=[
                        storage_pb2.TxnMarker(
                            producer_id=markers[i]["producer_id"],
                            producer_epoch=markers[i]["producer_epoch"],
                            committed=markers[i]["transaction_result"],
                            coordinator_epoch=markers[i]["coordinator_epoch"],
                            partitions=by_marker[i],
                        )
                        for i in indexes
                    ]
                ),
            )
            # The node answers the markers in request order.
            for index, result in zip(indexes, response.markers, strict=False):
                for r in result.partitions:
                    codes[(index, r.topic, r.partition)] = int(r.error_code)

        parts = [
            (t["name"], p, index)
            for index, m in enumerate(markers)
            for t in m["topics"]
            for p in t["partition_indexes"]
        ]
        await fan_out(backend, parts, call, fail)
        return answer(request, codes, int(ErrorCode.UNKNOWN_SERVER_ERROR))

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return answer(request, {}, code)

    return ApiHandler(
        ApiKey.WRITE_TXN_MARKERS,
        handle,
        versions=(0, 1),
        authorization=Authorization(
            "CLUSTER_ACTION on the cluster", request=on_cluster(CLUSTER_ACTION)
        ),
        error_response=error,
    )


def txn_handlers(backend: Backend, routers: Routers) -> list[ApiHandler]:
    transactions = routers.transactions
    return [
        _init_producer_id(backend, transactions),
        _add_partitions_to_txn(backend, transactions),
        _add_offsets_to_txn(transactions),
        _end_txn(transactions),
        _txn_offset_commit(backend, routers.groups),
        _describe_transactions(transactions),
        _list_transactions(backend),
        _describe_producers(backend),
        _write_txn_markers(backend),
    ]
