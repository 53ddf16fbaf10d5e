"""brook.v1.TransactionCoordinatorService: the gRPC face of the transaction coordinator, and
FindCoordinator's answer for a transactional id.

NOT_COORDINATOR answers carry a NodeHint to the owner the metadata names (the owner of the
__consumer_offsets partition that owns the id's __transaction_state partition). A partition
named in AddPartitionsToTxn must be of a topic that is not internal (__consumer_offsets,
__transaction_state, or any topic the metadata marks internal: TOPIC_AUTHORIZATION_FAILED,
Kafka's answer; a marker written there would break the coordinators' fenced writers) and must
exist in this coordinator's metadata (UNKNOWN_TOPIC_OR_PARTITION); the other partitions of
such a request are answered OPERATION_NOT_ATTEMPTED, as Kafka's broker answers. With
verify_only (a storage node verifying a transactional batch) a partition is only looked for in
the ongoing transaction.
"""

from __future__ import annotations

from typing import Any, Final, cast

from brook.errors import ErrorCode
from brook.v1 import common_pb2, errors_pb2, group_pb2, transaction_pb2, transaction_pb2_grpc
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.ownership import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    offsets_partition_owning,
)
from brook_group_coordinator.transactions.coordinator import TransactionCoordinator
from brook_group_coordinator.transactions.state import Transaction, TxnState

__all__ = ["TransactionCoordinatorServicer", "find_transaction_coordinator"]

# Bounds on one request, so a single call cannot make the coordinator do unbounded work.
IDS_PER_REQUEST_MAX: Final = 10_000
PARTITIONS_PER_REQUEST_MAX: Final = 10_000

_STATES: Final = {
    TxnState.EMPTY: transaction_pb2.TRANSACTION_STATE_EMPTY,
    TxnState.ONGOING: transaction_pb2.TRANSACTION_STATE_ONGOING,
    TxnState.PREPARE_COMMIT: transaction_pb2.TRANSACTION_STATE_PREPARE_COMMIT,
    TxnState.PREPARE_ABORT: transaction_pb2.TRANSACTION_STATE_PREPARE_ABORT,
    TxnState.COMPLETE_COMMIT: transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT,
    TxnState.COMPLETE_ABORT: transaction_pb2.TRANSACTION_STATE_COMPLETE_ABORT,
    TxnState.DEAD: transaction_pb2.TRANSACTION_STATE_DEAD,
    TxnState.PREPARE_EPOCH_FENCE: transaction_pb2.TRANSACTION_STATE_PREPARE_EPOCH_FENCE,
}
_FROM_WIRE: Final = {wire: state for state, wire in _STATES.items()}
# Internal whether or not the metadata has them yet (Kafka's Topic.isInternal).
_INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def _wire(code: ErrorCode) -> errors_pb2.ErrorCode:
    return cast(errors_pb2.ErrorCode, int(code))


def _owner_hint(
    coordinator: TransactionCoordinator,
    directory: CoordinatorDirectory,
    offsets_partitions: int,
    transactional_id: str,
) -> common_pb2.NodeHint:
    if coordinator.partition_count <= 0 or offsets_partitions <= 0 or not transactional_id:
        return common_pb2.NodeHint(node_id=-1)
    partition = coordinator.partition_for(transactional_id)
    return directory.hint(offsets_partition_owning(partition, offsets_partitions))


def find_transaction_coordinator(
    key: str,
    coordinator: TransactionCoordinator,
    directory: CoordinatorDirectory,
    offsets_partitions: int,
) -> group_pb2.Coordinator:
    """FindCoordinator's answer for transactional id ``key``."""

    def unavailable(message: str) -> group_pb2.Coordinator:
        return group_pb2.Coordinator(
            key=key,
            error_code=_wire(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            error_message=message,
            node_id=-1,
        )

    if not key:
        return group_pb2.Coordinator(
            key=key,
            error_code=_wire(ErrorCode.INVALID_REQUEST),
            error_message="the transactional id is empty",
            node_id=-1,
        )
    if coordinator.partition_count <= 0:
        return unavailable(f"{TRANSACTION_STATE_TOPIC} does not exist yet")
    if offsets_partitions <= 0:
        return unavailable(f"{OFFSETS_TOPIC} does not exist yet")
    hint = _owner_hint(coordinator, directory, offsets_partitions, key)
    if hint.node_id < 0:
        partition = coordinator.partition_for(key)
        return unavailable(f"{TRANSACTION_STATE_TOPIC}-{partition} has no coordinator")
    return group_pb2.Coordinator(key=key, node_id=hint.node_id, endpoints=hint.endpoints)


class TransactionCoordinatorServicer(transaction_pb2_grpc.TransactionCoordinatorServiceServicer):
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        directory: CoordinatorDirectory,
        metadata: ClusterMetadata,
    ) -> None:
        self._coordinator = coordinator
        self._directory = directory
        self._metadata = metadata

    def _hint(self, transactional_id: str, error: ErrorCode) -> common_pb2.NodeHint | None:
        if error is not ErrorCode.NOT_COORDINATOR:
            return None
        return _owner_hint(
            self._coordinator, self._directory, self._metadata.partition_count, transactional_id
        )

    async def InitProducerId(
        self,
        request: transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest,
        context: Any,
    ) -> transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse:
        result = await self._coordinator.init_producer_id(
            request.transactional_id,
            request.transaction_timeout_ms,
            request.producer_id,
            request.producer_epoch,
            two_phase=request.enable_two_phase_commit,
        )
        return transaction_pb2.TransactionCoordinatorServiceInitProducerIdResponse(
            error_code=_wire(result.error),
            error_message=result.message,
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
            coordinator=self._hint(request.transactional_id, result.error),
        )

    async def AddPartitionsToTxn(
        self, request: transaction_pb2.AddPartitionsToTxnRequest, context: Any
    ) -> transaction_pb2.AddPartitionsToTxnResponse:
        wanted = [(p.topic, p.partition) for p in request.partitions]
        if request.verify_only and len(wanted) <= PARTITIONS_PER_REQUEST_MAX:
            return self._verify(request, wanted)
        error, message = ErrorCode.NONE, ""
        refused = {tp: why for tp in wanted if (why := self._refusal(*tp)) is not None}
        if len(wanted) > PARTITIONS_PER_REQUEST_MAX:
            error = ErrorCode.INVALID_REQUEST
            message = f"at most {PARTITIONS_PER_REQUEST_MAX} partitions per request"
        elif not refused:
            error, message = await self._coordinator.add_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, wanted
            )

        def result(topic: str, partition: int) -> transaction_pb2.TxnPartitionResult:
            if refused and error is ErrorCode.NONE:
                code, why = refused.get(
                    (topic, partition),
                    (ErrorCode.OPERATION_NOT_ATTEMPTED, "another partition was refused"),
                )
                return transaction_pb2.TxnPartitionResult(
                    topic=topic, partition=partition, error_code=_wire(code), error_message=why
                )
            return transaction_pb2.TxnPartitionResult(
                topic=topic, partition=partition, error_code=_wire(error), error_message=message
            )

        return transaction_pb2.AddPartitionsToTxnResponse(
            partitions=[result(topic, partition) for topic, partition in wanted],
            coordinator=self._hint(request.transactional_id, error),
        )

    def _refusal(self, topic: str, partition: int) -> tuple[ErrorCode, str] | None:
        """Why a partition cannot be in a transaction, None if it can (module docstring)."""
        info = self._metadata.topic(topic)
        if topic in _INTERNAL_TOPICS or (info is not None and info.internal):
            return (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"{topic} is an internal topic: it cannot be written in a transaction",
            )
        if self._metadata.partition(topic, partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition"
        return None

    def _verify(
        self, request: transaction_pb2.AddPartitionsToTxnRequest, wanted: list[tuple[str, int]]
    ) -> transaction_pb2.AddPartitionsToTxnResponse:
        """verify_only: NONE for the partitions in the ongoing transaction, INVALID_TXN_STATE
        for the others, or the transaction-level error on each; nothing added."""
        error, message, included = self._coordinator.verify_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, wanted
        )

        def result(topic: str, partition: int) -> transaction_pb2.TxnPartitionResult:
            code, why = error, message
            if error is ErrorCode.NONE and (topic, partition) not in included:
                code = ErrorCode.INVALID_TXN_STATE
                why = (
                    f"{topic}-{partition} is not in an ongoing transaction of producer "
                    f"{request.producer_id} at epoch {request.producer_epoch}"
                )
            return transaction_pb2.TxnPartitionResult(
                topic=topic, partition=partition, error_code=_wire(code), error_message=why
            )

        return transaction_pb2.AddPartitionsToTxnResponse(
            partitions=[result(topic, partition) for topic, partition in wanted],
            coordinator=self._hint(request.transactional_id, error),
        )

    async def AddOffsetsToTxn(
        self, request: transaction_pb2.AddOffsetsToTxnRequest, context: Any
    ) -> transaction_pb2.AddOffsetsToTxnResponse:
        error, message = await self._coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        return transaction_pb2.AddOffsetsToTxnResponse(
            error_code=_wire(error),
            error_message=message,
            coordinator=self._hint(request.transactional_id, error),
        )

    async def EndTxn(
        self, request: transaction_pb2.EndTxnRequest, context: Any
    ) -> transaction_pb2.EndTxnResponse:
        error, message = await self._coordinator.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
        return transaction_pb2.EndTxnResponse(
            error_code=_wire(error),
            error_message=message,
            coordinator=self._hint(request.transactional_id, error),
        )

    async def DescribeTransactions(
        self, request: transaction_pb2.DescribeTransactionsRequest, context: Any
    ) -> transaction_pb2.DescribeTransactionsResponse:
        described = []
        for transactional_id in request.transactional_ids[:IDS_PER_REQUEST_MAX]:
            error, message, transaction = self._coordinator.describe(transactional_id)
            if transaction is None:
                described.append(
                    transaction_pb2.TransactionDescription(
                        transactional_id=transactional_id,
                        error_code=_wire(error),
                        error_message=message,
                        producer_id=-1,
                        producer_epoch=-1,
                        transaction_start_time_ms=-1,
                        last_update_time_ms=-1,
                        coordinator=self._hint(transactional_id, error),
                    )
                )
                continue
            described.append(_description(transaction))
        return transaction_pb2.DescribeTransactionsResponse(transactions=described)

    async def ListTransactions(
        self, request: transaction_pb2.ListTransactionsRequest, context: Any
    ) -> transaction_pb2.ListTransactionsResponse:
        states = {_FROM_WIRE[s] for s in request.state_filters if s in _FROM_WIRE}
        unknown = [
            transaction_pb2.TransactionState.Name(s)
            if s in transaction_pb2.TransactionState.values()
            else str(s)
            for s in request.state_filters
            if s not in _FROM_WIRE
        ]
        loading = self._coordinator.loading_partitions()
        found = (
            self._coordinator.transactions(
                states, set(request.producer_id_filters), request.duration_filter_ms
            )
            if states or not unknown
            else []
        )
        return transaction_pb2.ListTransactionsResponse(
            # As Kafka: the transactions of a partition still being replayed are not known
            # yet, so the list is incomplete and says so.
            error_code=_wire(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE),
            error_message=f"{TRANSACTION_STATE_TOPIC} partitions {loading} are being loaded"
            if loading
            else "",
            transactions=[
                transaction_pb2.ListedTransaction(
                    transactional_id=t.transactional_id,
                    producer_id=t.producer_id,
                    state=_STATES[t.state],
                )
                for t in found
            ],
            unknown_state_filters=unknown,
        )


def _description(transaction: Transaction) -> transaction_pb2.TransactionDescription:
    return transaction_pb2.TransactionDescription(
        transactional_id=transaction.transactional_id,
        error_code=_wire(ErrorCode.NONE),
        state=_STATES[transaction.state],
        producer_id=transaction.producer_id,
        producer_epoch=transaction.producer_epoch,
        transaction_timeout_ms=transaction.timeout_ms,
        transaction_start_time_ms=transaction.start_ms,
        partitions=[
            common_pb2.TopicPartition(topic=topic, partition=partition)
            for topic, partition in sorted(transaction.partitions)
        ],
        groups=sorted(transaction.groups),
        last_update_time_ms=transaction.update_ms,
    )
