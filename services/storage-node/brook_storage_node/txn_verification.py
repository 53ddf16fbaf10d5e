"""Transaction verification (KIP-890 part 1, ``transaction.partition.verification.enable``):
before a transactional batch opens a transaction of its producer on a partition, the leader
asks the transaction coordinator whether the partition is in that producer's ongoing
transaction at the batch's epoch.

Without it, a delayed retry of a batch of an aborted transaction that reaches the leader after
the ABORT marker (still in flight in the gateway, or sent again to a new leader) is in sequence
and opens a new transaction at the same epoch, which the producer's next COMMIT marker commits
(or which holds the last stable offset back forever if the producer never writes the partition
again). Kafka had the same hole before 3.6.

``TransactionVerifier.verify`` asks: the coordinator owning the transactional id is found with
FindCoordinator (key type TRANSACTION) among the live group coordinators of the node's
metadata (``brook.rpc.coordinators``), then asked AddPartitionsToTxn with ``verify_only``,
following one NOT_COORDINATOR hint or looking the owner up again once; nothing is cached, all
within the caller's deadline. The answer becomes the Produce answer as Kafka's ReplicaManager
maps it: NONE appends; INVALID_TXN_STATE (TRANSACTION_ABORTABLE too) refuses the batch;
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH (what producers expect from a partition); a
coordinator that cannot say now (moving, loading, completing the transaction, unreachable, out
of time) is NOT_ENOUGH_REPLICAS, which every client retries; any other code passes through.

The race with the marker (verified, then the ABORT lands, then the append) is closed by the
producer state's ``VerificationGuard`` (log/producer_state.py), which the produce path takes
before asking and brings to the append.
"""

from __future__ import annotations

import time
from typing import Final

import grpc

from brook.errors import ErrorCode, error_code
from brook.rpc.channels import ChannelPool, channel_options
from brook.rpc.coordinators import (
    COORDINATOR_ERRORS,
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator,
    hinted_coordinator,
)
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, group_pb2, transaction_pb2
from brook_storage_node.errors import ErrorResult
from brook_storage_node.metadata_view import MetadataView

__all__ = ["TransactionVerifier"]

# Calls to owners per verification: the owner found, then a hinted or re-found one.
_ATTEMPTS_MAX: Final = 2


class TransactionVerifier:
    """Asks transaction coordinators whether a partition is in a producer's ongoing
    transaction. Use on the event loop; ``close`` on shutdown."""

    def __init__(self, view: MetadataView, *, client_id: str) -> None:
        self._view = view
        self._channels = ChannelPool(channel_options(client_id=client_id))

    async def close(self) -> None:
        await self._channels.close()

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        deadline_s: float,
    ) -> ErrorResult | None:
        """None if ``topic``-``partition`` is in the ongoing transaction of ``producer_id``
        at ``producer_epoch`` (the coordinator of ``transactional_id`` says so by
        ``deadline_s``, time.monotonic), else the Produce error for the batch."""
        request = transaction_pb2.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            partitions=[common_pb2.TopicPartition(topic=topic, partition=partition)],
            verify_only=True,
        )
        owner: Coordinator | None = None
        problem = "no time left"
        for _ in range(_ATTEMPTS_MAX):
            try:
                if owner is None:
                    owner = await self._owner(transactional_id, deadline_s)
            except CoordinatorNotFoundError as e:
                return _unverified(str(e))
            except CoordinatorRefusedError as e:
                return ErrorResult(e.code, str(e))
            timeout_s = deadline_s - time.monotonic()
            if timeout_s <= 0:
                break
            try:
                response = await self._channels.transactions(owner.address).AddPartitionsToTxn(
                    request, timeout=timeout_s
                )
            except grpc.aio.AioRpcError as e:
                problem = f"coordinator {owner.node_id}: {rpc_error(e)[1]}"
                owner = None
                continue
            if len(response.partitions) != 1:
                return _unverified(
                    f"coordinator {owner.node_id} answered {len(response.partitions)} partitions"
                )
            answer = response.partitions[0]
            code = error_code(answer.error_code)
            if code is not ErrorCode.NOT_COORDINATOR:
                return _verdict(code, answer.error_message)
            problem = f"coordinator {owner.node_id} no longer owns {transactional_id!r}"
            owner = hinted_coordinator((code,), response.coordinator)
        return _unverified(problem)

    async def _owner(self, transactional_id: str, deadline_s: float) -> Coordinator:
        view = self._view
        addresses = [
            address
            for node_id in view.image.live_brokers(common_pb2.NODE_ROLE_GROUP_COORDINATOR)
            if (broker := view.broker(node_id)) is not None
            and (address := broker.address()) is not None
        ]

        async def ask(
            address: str, request: group_pb2.FindCoordinatorRequest, timeout_s: float
        ) -> group_pb2.FindCoordinatorResponse:
            response: group_pb2.FindCoordinatorResponse = await self._channels.groups(
                address
            ).FindCoordinator(request, timeout=timeout_s)
            return response

        return await find_coordinator(
            transactional_id,
            addresses,
            ask,
            deadline_s,
            key_type=group_pb2.COORDINATOR_TYPE_TRANSACTION,
        )


def _unverified(problem: str) -> ErrorResult:
    return ErrorResult(
        ErrorCode.NOT_ENOUGH_REPLICAS,
        f"cannot verify with the transaction coordinator that the partition is in the "
        f"producer's transaction yet; retry ({problem})",
    )


def _verdict(code: ErrorCode, message: str) -> ErrorResult | None:
    """The coordinator's answer for the partition as the Produce answer (module docstring)."""
    if code is ErrorCode.NONE:
        return None
    if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE):
        return ErrorResult(
            ErrorCode.INVALID_TXN_STATE,
            f"the partition was not added to the producer's ongoing transaction: {message}",
        )
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorResult(ErrorCode.INVALID_PRODUCER_EPOCH, message)
    if code in COORDINATOR_ERRORS or code is ErrorCode.CONCURRENT_TRANSACTIONS or code.retriable:
        return _unverified(f"{code.name}: {message}")
    return ErrorResult(code, message)
