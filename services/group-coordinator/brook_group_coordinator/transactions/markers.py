"""Writing a decided transaction's outcome where it belongs: the coordinator's
``MarkerWriter`` over gRPC.

Data partitions: StorageService.WriteTxnMarkers to each partition's leader (the coordinator's
metadata), one request per leader node for the transaction's partitions there (at most
``PARTITIONS_PER_REQUEST_MAX`` each), with the transaction's producer id and epoch and the
__transaction_state partition's coordinator epoch. A partition is done when its leader answers
NONE, or skipped when its topic or partition no longer exists (deleted) or its topic is internal
(no client may write there, and the storage nodes refuse markers there: groups end their
transactions with CompleteTransaction). Every other answer
or failure (a leader moving, a node down, NOT_ENOUGH_REPLICAS, a timeout) is retried, after
the next metadata update or a back-off (retry.backoff.ms growing to retry.backoff.max.ms),
whichever comes first, until it is written: a decided transaction must reach every partition.

An obsolete marker is done too: INVALID_PRODUCER_EPOCH (the producer is at a newer epoch
there) or TRANSACTION_COORDINATOR_FENCED (a newer coordinator epoch wrote a marker of the
producer there) means that a marker of a newer epoch was written on that partition, which
ended whatever transaction the producer had open there: nothing of this transaction is left
for this marker to end. (The producer is handed a newer epoch only once this transaction is
complete, so a newer epoch there comes from a marker: a successor coordinator's, written after
it loaded this transaction, or an operator's abort.) Each one is logged. Kafka's coordinator
gives the transaction up on such an answer, for its successor; here the coordinator goes on
and writes the completion, which its fenced append refuses if a successor has taken the
__transaction_state partition over, and which nobody else would write if none has (an
operator's abort raised the epoch). One case is left to the operator: an abort naming a
coordinator epoch above this coordinator's, written on a partition before this transaction's
batches, leaves them open there (the partition's LSO waits; ``brook transactions
find-hanging`` shows it, an abort naming the coordinator epoch DescribeProducers shows ends
it). Retrying would not help: the coordinator epoch grows only when the ownership moves.

Groups: GroupCoordinatorService.CompleteTransaction to the owner of the group's
__consumer_offsets partition, through gRPC even when that owner is this process (one path,
the group manager's own checks and ownership), retried the same way until answered NONE or
obsolete (the group manager's INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED mean
the same as the storage nodes').

Bounds: each call within request.timeout.ms (a WriteTxnMarkers asks the node to wait for
replication that long, and is cut off ``DEADLINE_MARGIN_MS`` later); at most
``REQUESTS_IN_FLIGHT_MAX`` calls at once from this process, whatever the number of
transactions completing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import grpc

from brook.errors import ErrorCode, error_code
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.rpc.channels import ChannelPool, channel_options
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, group_pb2, storage_pb2
from brook_group_coordinator.cluster_metadata import ClusterMetadata
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.ownership import offsets_partition_for
from brook_group_coordinator.transactions.state import Transaction, TxnState

__all__ = [
    "DEADLINE_MARGIN_MS",
    "PARTITIONS_PER_REQUEST_MAX",
    "REQUESTS_IN_FLIGHT_MAX",
    "GrpcMarkerWriter",
    "MarkerSettings",
]

_log = logging.getLogger(__name__)

CLIENT_ID: Final = "transaction-coordinator"
PARTITIONS_PER_REQUEST_MAX: Final = 1000
REQUESTS_IN_FLIGHT_MAX: Final = 64
# A WriteTxnMarkers call's deadline beyond the replication wait it asks the node for, so the
# node's own answer (REQUEST_TIMED_OUT, retried) arrives before the call is cut off.
DEADLINE_MARGIN_MS: Final = 1000
_T = TypeVar("_T")
# One round of writes over what is left: removes what is done, returns the problems met.
_Round = Callable[[set[_T]], Awaitable[list[str]]]
# A marker of a newer epoch ended the producer's transaction there: this one is obsolete.
_OBSOLETE: Final = frozenset(
    {ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}
)


@dataclass(frozen=True, slots=True)
class MarkerSettings:
    request_timeout_ms: int
    retry_backoff: RetryBackoff


@dataclass(frozen=True, slots=True)
class _Marker:
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    transactional_id: str


class GrpcMarkerWriter:
    def __init__(
        self,
        metadata: ClusterMetadata,
        directory: CoordinatorDirectory,
        settings: MarkerSettings,
    ) -> None:
        self._metadata = metadata
        self._directory = directory
        self._settings = settings
        self._network = ChannelPool(
            channel_options(
                client_id=CLIENT_ID,
                reconnect_backoff_ms=settings.retry_backoff.base_ms,
                reconnect_backoff_max_ms=settings.retry_backoff.max_ms,
            )
        )
        self._in_flight = asyncio.Semaphore(REQUESTS_IN_FLIGHT_MAX)

    async def close(self) -> None:
        await self._network.close()

    async def write_markers(self, transaction: Transaction, coordinator_epoch: int) -> None:
        if not transaction.state.preparing:
            raise ValueError(f"{transaction.state.value} has no outcome to write")
        marker = _Marker(
            transaction.producer_id,
            transaction.producer_epoch,
            transaction.state is TxnState.PREPARE_COMMIT,
            coordinator_epoch,
            transaction.transactional_id,
        )
        outcomes = await asyncio.gather(
            self._data_markers(marker, set(transaction.partitions)),
            self._group_markers(marker, set(transaction.groups)),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _retry_rounds(
        self, marker: _Marker, remaining: set[_T], one_round: _Round[_T], what: str
    ) -> None:
        """Runs ``one_round`` over what is left until nothing is, waiting between rounds."""
        failures = 0
        while remaining:
            seen = self._metadata.offset
            problems = await one_round(remaining)
            if not remaining:
                return
            failures += 1
            wait_s = backoff_s(self._settings.retry_backoff, failures)
            _log.warning(
                "transaction markers not all written; trying again",
                extra={
                    "transactional_id": marker.transactional_id,
                    "what": what,
                    "left": len(remaining),
                    "problems": problems[:5],
                },
            )
            if self._metadata.offset == seen:
                await self._metadata.wait_for_change(wait_s)

    # -- data partitions --------------------------------------------------------------------

    async def _data_markers(self, marker: _Marker, remaining: set[tuple[str, int]]) -> None:
        async def one_round(left: set[tuple[str, int]]) -> list[str]:
            problems: list[str] = []
            by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for topic, partition in sorted(left):
                if self._metadata.partition(topic, partition) is None:
                    _log.info(
                        "no marker for a deleted partition",
                        extra={"topic": topic, "partition": partition},
                    )
                    left.discard((topic, partition))
                    continue
                info = self._metadata.topic(topic)
                if info is not None and info.internal:
                    # No client batch can be there (the storage nodes refuse them), and the
                    # storage nodes refuse markers there too: nothing to end.
                    _log.info(
                        "no marker for an internal topic",
                        extra={"topic": topic, "partition": partition},
                    )
                    left.discard((topic, partition))
                    continue
                route = self._metadata.leader(partition, topic)
                if route is None:
                    problems.append(f"{topic}-{partition}: no leader")
                    continue
                by_leader[route[0].leader].append((topic, partition))
            calls: list[Awaitable[list[str]]] = []
            for node_id, partitions in by_leader.items():
                address = self._metadata.address_of(node_id)
                if address is None:
                    problems.append(f"node {node_id}: no address")
                    continue
                for start in range(0, len(partitions), PARTITIONS_PER_REQUEST_MAX):
                    chunk = partitions[start : start + PARTITIONS_PER_REQUEST_MAX]
                    calls.append(self._write_txn_markers(address, marker, chunk, left))
            for found in await asyncio.gather(*calls):
                problems.extend(found)
            return problems

        await self._retry_rounds(marker, remaining, one_round, "partitions")

    async def _write_txn_markers(
        self,
        address: str,
        marker: _Marker,
        partitions: list[tuple[str, int]],
        left: set[tuple[str, int]],
    ) -> list[str]:
        """One WriteTxnMarkers; removes from ``left`` what is done; returns the problems."""
        timeout_ms = self._settings.request_timeout_ms
        request = storage_pb2.WriteTxnMarkersRequest(
            markers=[
                storage_pb2.TxnMarker(
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    committed=marker.committed,
                    coordinator_epoch=marker.coordinator_epoch,
                    partitions=[
                        common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions
                    ],
                )
            ],
            timeout_ms=timeout_ms,
        )
        async with self._in_flight:
            try:
                response = await self._network.storage(address).WriteTxnMarkers(
                    request, timeout=(timeout_ms + DEADLINE_MARGIN_MS) / 1000
                )
            except grpc.aio.AioRpcError as error:
                code, message = rpc_error(error)
                return [f"{address}: {code.name}: {message}"]
        problems = []
        for result in response.markers:
            for answer in result.partitions:
                key = (answer.topic, answer.partition)
                code = error_code(answer.error_code)
                if code is ErrorCode.NONE or (
                    code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    and self._metadata.partition(*key) is None
                ):
                    left.discard(key)
                elif code in _OBSOLETE:
                    _obsolete(
                        marker, f"{answer.topic}-{answer.partition}", code, answer.error_message
                    )
                    left.discard(key)
                else:
                    problems.append(f"{answer.topic}-{answer.partition}: {code.name}")
        return problems

    # -- groups -----------------------------------------------------------------------------

    async def _group_markers(self, marker: _Marker, remaining: set[str]) -> None:
        async def one_round(left: set[str]) -> list[str]:
            found = await asyncio.gather(
                *(self._complete_transaction(marker, group_id, left) for group_id in sorted(left))
            )
            return [problem for problem in found if problem]

        await self._retry_rounds(marker, remaining, one_round, "groups")

    async def _complete_transaction(self, marker: _Marker, group_id: str, left: set[str]) -> str:
        """One CompleteTransaction; removes the group from ``left`` when done; returns the
        problem, if any."""
        count = self._metadata.partition_count
        if count <= 0:
            return f"{group_id}: no __consumer_offsets"
        owner = self._directory.owner(offsets_partition_for(group_id, count))
        address = None if owner is None else self._metadata.address_of(owner.node_id)
        if address is None:
            return f"{group_id}: no coordinator"
        request = group_pb2.CompleteTransactionRequest(
            group_id=group_id,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            committed=marker.committed,
            coordinator_epoch=marker.coordinator_epoch,
            transactional_id=marker.transactional_id,
        )
        async with self._in_flight:
            try:
                response = await self._network.groups(address).CompleteTransaction(
                    request, timeout=self._settings.request_timeout_ms / 1000
                )
            except grpc.aio.AioRpcError as error:
                code, message = rpc_error(error)
                return f"{group_id} at {address}: {code.name}: {message}"
        code = error_code(response.error_code)
        if code is ErrorCode.NONE:
            left.discard(group_id)
            return ""
        if code in _OBSOLETE:
            _obsolete(marker, f"group {group_id}", code, response.error_message)
            left.discard(group_id)
            return ""
        return f"{group_id}: {code.name}"


def _obsolete(marker: _Marker, where: str, code: ErrorCode, message: str) -> None:
    _log.warning(
        "a transaction marker is obsolete: a marker of a newer epoch was written there",
        extra={
            "transactional_id": marker.transactional_id,
            "producer_id": marker.producer_id,
            "producer_epoch": marker.producer_epoch,
            "coordinator_epoch": marker.coordinator_epoch,
            "where": where,
            "error": code.name,
            "error_message": message,
        },
    )
