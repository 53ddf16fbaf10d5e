"""brook.v1.GroupCoordinatorService: the gRPC face of the group manager.

Every group-level answer carries Kafka's error code; NOT_COORDINATOR answers carry a NodeHint
to the owner the metadata names, so a client can go there without another FindCoordinator.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from brook.errors import ErrorCode
from brook.v1 import errors_pb2, group_pb2, group_pb2_grpc
from brook_group_coordinator.directory import CoordinatorDirectory
from brook_group_coordinator.group import GroupState, JoinRequest
from brook_group_coordinator.group_manager import CommitPartition, GroupManager, PartitionResult
from brook_group_coordinator.ownership import (
    OFFSETS_TOPIC,
    PartitionLoad,
    offsets_partition_for,
)
from brook_group_coordinator.transactions.coordinator import TransactionCoordinator
from brook_group_coordinator.transactions.service import find_transaction_coordinator

__all__ = ["GroupCoordinatorServicer"]

_STATES = {
    GroupState.EMPTY: group_pb2.GROUP_STATE_EMPTY,
    GroupState.PREPARING_REBALANCE: group_pb2.GROUP_STATE_PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE: group_pb2.GROUP_STATE_COMPLETING_REBALANCE,
    GroupState.STABLE: group_pb2.GROUP_STATE_STABLE,
    GroupState.DEAD: group_pb2.GROUP_STATE_DEAD,
}
# Bounds on one request, so a single call cannot make the coordinator do unbounded work.
KEYS_PER_REQUEST_MAX = 10_000


def _wire(code: ErrorCode) -> errors_pb2.ErrorCode:
    return cast(errors_pb2.ErrorCode, int(code))


def _optional(message: Any, field: str) -> str | None:
    return cast(str, getattr(message, field)) if message.HasField(field) else None


def _unavailable(key: str, message: str) -> group_pb2.Coordinator:
    return group_pb2.Coordinator(
        key=key,
        error_code=_wire(ErrorCode.COORDINATOR_NOT_AVAILABLE),
        error_message=message,
        node_id=-1,
    )


class GroupCoordinatorServicer(group_pb2_grpc.GroupCoordinatorServiceServicer):
    def __init__(
        self,
        manager: GroupManager,
        directory: CoordinatorDirectory,
        transactions: TransactionCoordinator | None = None,
    ) -> None:
        """``transactions``: the transaction coordinator FindCoordinator answers for
        (COORDINATOR_TYPE_TRANSACTION); None: transactional ids have no coordinator here."""
        self._manager = manager
        self._directory = directory
        self._transactions = transactions

    def _hint(self, group_id: str, error: ErrorCode) -> Any:
        if error is not ErrorCode.NOT_COORDINATOR:
            return None
        return self._directory.hint(self._manager.partition_for(group_id))

    async def FindCoordinator(
        self, request: group_pb2.FindCoordinatorRequest, context: Any
    ) -> group_pb2.FindCoordinatorResponse:
        coordinators = []
        for key in request.keys[:KEYS_PER_REQUEST_MAX]:
            if request.key_type == group_pb2.COORDINATOR_TYPE_TRANSACTION:
                if self._transactions is None:
                    coordinators.append(_unavailable(key, "no transaction coordinator here"))
                else:
                    coordinators.append(
                        find_transaction_coordinator(
                            key, self._transactions, self._directory, self._manager.partition_count
                        )
                    )
                continue
            if not key:
                coordinators.append(
                    group_pb2.Coordinator(
                        key=key, error_code=_wire(ErrorCode.INVALID_GROUP_ID), node_id=-1
                    )
                )
                continue
            if self._manager.partition_count <= 0:
                coordinators.append(_unavailable(key, f"{OFFSETS_TOPIC} does not exist yet"))
                continue
            partition = offsets_partition_for(key, self._manager.partition_count)
            hint = self._directory.hint(partition)
            if hint.node_id < 0:
                coordinators.append(
                    _unavailable(key, f"{OFFSETS_TOPIC}-{partition} has no coordinator")
                )
                continue
            coordinators.append(
                group_pb2.Coordinator(key=key, node_id=hint.node_id, endpoints=hint.endpoints)
            )
        return group_pb2.FindCoordinatorResponse(coordinators=coordinators)

    async def JoinGroup(
        self, request: group_pb2.JoinGroupRequest, context: Any
    ) -> group_pb2.JoinGroupResponse:
        result = await self._manager.join(
            request.group_id,
            JoinRequest(
                member_id=request.member_id,
                group_instance_id=_optional(request, "group_instance_id"),
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                protocol_type=request.protocol_type,
                protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
                client_id=request.client_id,
                client_host=request.client_host,
            ),
        )
        return group_pb2.JoinGroupResponse(
            error_code=_wire(result.error),
            error_message=result.message,
            generation_id=result.generation_id,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            leader_id=result.leader_id,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=[
                group_pb2.JoinGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in result.members
            ],
            coordinator=self._hint(request.group_id, result.error),
        )

    async def SyncGroup(
        self, request: group_pb2.SyncGroupRequest, context: Any
    ) -> group_pb2.SyncGroupResponse:
        result = await self._manager.sync(
            request.group_id,
            request.member_id,
            _optional(request, "group_instance_id"),
            request.generation_id,
            request.protocol_type,
            request.protocol_name,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        return group_pb2.SyncGroupResponse(
            error_code=_wire(result.error),
            error_message=result.message,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
            coordinator=self._hint(request.group_id, result.error),
        )

    async def Heartbeat(
        self, request: group_pb2.HeartbeatRequest, context: Any
    ) -> group_pb2.HeartbeatResponse:
        error, message = self._manager.heartbeat(
            request.group_id,
            request.member_id,
            _optional(request, "group_instance_id"),
            request.generation_id,
        )
        return group_pb2.HeartbeatResponse(
            error_code=_wire(error),
            error_message=message,
            coordinator=self._hint(request.group_id, error),
        )

    async def LeaveGroup(
        self, request: group_pb2.LeaveGroupRequest, context: Any
    ) -> group_pb2.LeaveGroupResponse:
        members = [(m.member_id, _optional(m, "group_instance_id")) for m in request.members]
        error, message, results = self._manager.leave(request.group_id, members)
        return group_pb2.LeaveGroupResponse(
            error_code=_wire(error),
            error_message=message,
            members=[
                group_pb2.LeavingMemberResult(
                    member_id=m.member_id,
                    group_instance_id=_optional(m, "group_instance_id"),
                    error_code=_wire(code),
                )
                for m, code in zip(request.members, results, strict=False)
            ],
            coordinator=self._hint(request.group_id, error),
        )

    async def CommitOffsets(
        self, request: group_pb2.CommitOffsetsRequest, context: Any
    ) -> group_pb2.CommitOffsetsResponse:
        results = await self._manager.commit(
            request.group_id,
            request.member_id,
            _optional(request, "group_instance_id"),
            request.generation_id,
            _commit_partitions(request.partitions),
        )
        return group_pb2.CommitOffsetsResponse(
            partitions=_commit_results(results),
            coordinator=self._commit_hint(request.group_id, results),
        )

    def _commit_hint(self, group_id: str, results: Sequence[PartitionResult]) -> Any:
        not_coordinator = any(r.error is ErrorCode.NOT_COORDINATOR for r in results)
        return self._hint(
            group_id, ErrorCode.NOT_COORDINATOR if not_coordinator else ErrorCode.NONE
        )

    async def FetchOffsets(
        self, request: group_pb2.FetchOffsetsRequest, context: Any
    ) -> group_pb2.FetchOffsetsResponse:
        wanted = [(p.topic, p.partition) for p in request.partitions] or None
        error, message, results = self._manager.fetch(
            request.group_id, wanted, request.require_stable
        )
        return group_pb2.FetchOffsetsResponse(
            error_code=_wire(error),
            error_message=message,
            partitions=[
                group_pb2.OffsetFetchPartitionResult(
                    topic=r.topic,
                    partition=r.partition,
                    committed_offset=r.offset,
                    committed_leader_epoch=r.leader_epoch,
                    metadata=r.metadata,
                    error_code=_wire(r.error),
                    error_message=r.message,
                )
                for r in results
            ],
            coordinator=self._hint(request.group_id, error),
        )

    async def DescribeGroups(
        self, request: group_pb2.DescribeGroupsRequest, context: Any
    ) -> group_pb2.DescribeGroupsResponse:
        described = []
        for group_id in request.group_ids[:KEYS_PER_REQUEST_MAX]:
            error, message = self._manager.check_coordinator(group_id)
            group = self._manager.group(group_id) if error is ErrorCode.NONE else None
            if group is None:
                # Kafka describes an unknown group as Dead with no members.
                described.append(
                    group_pb2.DescribedGroup(
                        group_id=group_id,
                        error_code=_wire(error),
                        error_message=message,
                        state=group_pb2.GROUP_STATE_DEAD,
                    )
                )
                continue
            described.append(
                group_pb2.DescribedGroup(
                    group_id=group_id,
                    state=_STATES[group.state],
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    members=[
                        group_pb2.DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            metadata=m.metadata_for(group.protocol_name),
                            assignment=m.assignment,
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return group_pb2.DescribeGroupsResponse(groups=described)

    async def ListGroups(
        self, request: group_pb2.ListGroupsRequest, context: Any
    ) -> group_pb2.ListGroupsResponse:
        states = set(request.states_filter)
        types = set(request.types_filter)
        # As Kafka: the groups of a partition still being replayed are not known yet, so the
        # list is incomplete and says so (a client retries rather than trusting it).
        loading = sorted(
            p for p, o in self._manager.owned.items() if o.load is PartitionLoad.LOADING
        )
        return group_pb2.ListGroupsResponse(
            error_code=_wire(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE),
            error_message=f"{OFFSETS_TOPIC} partitions {loading} are being loaded"
            if loading
            else "",
            groups=[
                group_pb2.ListedGroup(
                    group_id=g.group_id, protocol_type=g.protocol_type, state=_STATES[g.state]
                )
                for g in self._manager.groups()
                if g.state is not GroupState.DEAD
                and (not states or _STATES[g.state] in states)
                and (not types or g.protocol_type in types)
            ],
        )

    async def DeleteGroups(
        self, request: group_pb2.DeleteGroupsRequest, context: Any
    ) -> group_pb2.DeleteGroupsResponse:
        results = []
        for group_id in request.group_ids[:KEYS_PER_REQUEST_MAX]:
            error, message = await self._manager.delete(group_id)
            results.append(
                group_pb2.DeleteGroupResult(
                    group_id=group_id, error_code=_wire(error), error_message=message
                )
            )
        return group_pb2.DeleteGroupsResponse(results=results)

    async def DeleteOffsets(
        self, request: group_pb2.DeleteOffsetsRequest, context: Any
    ) -> group_pb2.DeleteOffsetsResponse:
        keys = list(dict.fromkeys((p.topic, p.partition) for p in request.partitions))
        error, message, results = await self._manager.delete_offsets(request.group_id, keys)
        return group_pb2.DeleteOffsetsResponse(
            error_code=_wire(error),
            error_message=message,
            partitions=[
                group_pb2.DeleteOffsetsPartitionResult(
                    topic=topic,
                    partition=partition,
                    error_code=_wire(code),
                    error_message=(
                        f"a member of group {request.group_id!r} subscribes to {topic!r}"
                        if code is ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                        else ""
                    ),
                )
                for (topic, partition), code in results.items()
            ],
        )

    async def TxnCommitOffsets(
        self, request: group_pb2.TxnCommitOffsetsRequest, context: Any
    ) -> group_pb2.TxnCommitOffsetsResponse:
        results = await self._manager.txn_commit(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            request.member_id,
            _optional(request, "group_instance_id"),
            request.generation_id,
            _commit_partitions(request.partitions),
        )
        return group_pb2.TxnCommitOffsetsResponse(
            partitions=_commit_results(results),
            coordinator=self._commit_hint(request.group_id, results),
        )

    async def CompleteTransaction(
        self, request: group_pb2.CompleteTransactionRequest, context: Any
    ) -> group_pb2.CompleteTransactionResponse:
        error, message = await self._manager.complete_transaction(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            request.coordinator_epoch,
            request.committed,
        )
        return group_pb2.CompleteTransactionResponse(
            error_code=_wire(error),
            error_message=message,
            coordinator=self._hint(request.group_id, error),
        )


def _commit_partitions(
    partitions: Iterable[group_pb2.OffsetCommitPartition],
) -> list[CommitPartition]:
    return [
        CommitPartition(
            p.topic, p.partition, p.committed_offset, p.committed_leader_epoch, p.metadata
        )
        for p in partitions
    ]


def _commit_results(
    results: Iterable[PartitionResult],
) -> list[group_pb2.OffsetCommitPartitionResult]:
    return [
        group_pb2.OffsetCommitPartitionResult(
            topic=r.topic,
            partition=r.partition,
            error_code=_wire(r.error),
            error_message=r.message,
        )
        for r in results
    ]
