"""Every group this coordinator serves: ownership of __consumer_offsets partitions, loading
them by replay, the groups' state machines, and offsets made durable before they are
acknowledged.

A group is served only if its partition (``offsets_partition_for``) is owned here and loaded;
otherwise the answer is NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while the replay
runs. Losing a partition drops its groups (their waiting members get NOT_COORDINATOR and go
looking for the new owner).

Writes: a partition is claimed (``PartitionClaims``: fenced against older owners, see
fencing.py) before it is replayed, and its appends are serialized (one in flight per
partition). Group commit: writes that queue up behind the in-flight append of their partition
go out together, as ONE append (one batch, one sequence) once it completes, bounded by
``batch_bytes_max`` and ``batch_records_max``; every writer in it is answered when that append
is (success only once it is acknowledged, its error to all of them otherwise). A writer that
gives up waiting is left out if its records have not been sent yet; once sent, what it changes
in memory is applied by the flusher when the append succeeds, in log order, as for any write,
so memory holds what a replay of the log would rebuild. An append that costs the
partition (``OffsetsWriteError``: fenced by a newer owner, or an outcome or sequence state that
is unknown) drops it at once, so its groups answer NOT_COORDINATOR, and ``on_partition_lost``
lets the service load it again if it is still assigned here. Offset commits are appended (and
acknowledged by the in-sync replicas) before the client is answered; one whose outcome is
unknown is answered with an error, never NONE. A group's metadata is appended whenever its
persisted shape changes, in order per partition, but the SyncGroup answer does not wait for it
(unlike Kafka): if that write is lost in a fail-over, the members of the lost generation get
UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION from the new coordinator and rejoin; no offset is lost.

Transactions (Kafka's TxnOffsetCommit and the markers it writes to __consumer_offsets):
``txn_commit`` appends the offsets as pending records of the producer id, invisible to
``fetch`` (UNSTABLE_OFFSET_COMMIT when it asks for stable offsets) until
``complete_transaction`` appends the end of the transaction in one batch with what it changes:
tombstones for the producer's pending records and, on commit, the offsets that become the
group's (``txn_offsets.winners``) as ordinary commits. Every record then holds its own final
state, so a replay of the partition, or of what compaction keeps of it, rebuilds the same
committed and pending offsets; a transaction whose end was not appended is still pending. The
writes of one producer in one group go one at a time (``producer_turns.py``), so an end lists
every pending record of its producer before it in the log, and none of an older epoch follows.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from brook.errors import BrookError, ErrorCode
from brook_group_coordinator.fencing import OffsetsWriteError
from brook_group_coordinator.group import (
    Group,
    GroupLimits,
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
)
from brook_group_coordinator.offsets import (
    GroupOffsets,
    OffsetLimits,
    TopicPartitionKey,
    check_commit_partition,
)
from brook_group_coordinator.offsets_log import OffsetsLog, PartitionClaims
from brook_group_coordinator.ownership import (
    OFFSETS_TOPIC,
    OwnedPartition,
    PartitionLoad,
    offsets_partition_for,
)
from brook_group_coordinator.partition_loader import claim_and_replay, drop_lost_partition
from brook_group_coordinator.producer_turns import ProducerTurn, ProducerTurns
from brook_group_coordinator.records import (
    FENCE_KEY,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PendingOffsetKey,
    PendingOffsetValue,
    RecordFormatError,
    TxnEndKey,
    TxnEndValue,
    UnknownRecordKindError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from brook_group_coordinator.timers import Timers
from brook_group_coordinator.txn_offsets import GroupTxnOffsets, ProducerTxn, winners

__all__ = [
    "GROUP_COMMIT_BATCH_BYTES_MAX",
    "GROUP_COMMIT_RECORDS_MAX",
    "RECORD_OVERHEAD_BYTES_MAX",
    "CommitPartition",
    "GroupManager",
    "PartitionResult",
    "commit_error",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_V = TypeVar("_V", OffsetCommitValue, PendingOffsetValue)

# How much longer than the member's own timeout a JoinGroup/SyncGroup waits for its answer:
# the state machine's timers answer first; this only guards against a bug leaving it hanging.
ANSWER_MARGIN_MS = 5_000
# Group commit bounds. Bytes: half of the offsets topic's default max.message.bytes (1 MiB +
# 12, the broker default the controllers leave in place): with it, a merged batch is never
# refused as too large where each of its writes alone would have been accepted; counted with
# RECORD_OVERHEAD_BYTES_MAX per record, which over-estimates the encoding. Records: bounds the
# time one batch takes to encode and the number of writers one failure answers.
GROUP_COMMIT_BATCH_BYTES_MAX: Final = 512 * 1024
GROUP_COMMIT_RECORDS_MAX: Final = 2048
# A RecordBatch v2 record's framing at most: length, offset delta, key and value lengths
# (varints of up to 5 bytes), timestamp delta (a varint of up to 10), attributes and header
# count (1 each). The batch header (61 bytes) is left to the margin under max.message.bytes.
RECORD_OVERHEAD_BYTES_MAX: Final = 32


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(frozen=True, slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str = ""
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""


class GroupManager:
    def __init__(
        self,
        *,
        limits: GroupLimits,
        offset_limits: OffsetLimits,
        timers: Timers,
        log: OffsetsLog,
        partition_count: int,
        claims: PartitionClaims | None = None,
        on_partition_lost: Callable[[int, int, bool], None] | None = None,
        batch_bytes_max: int = GROUP_COMMIT_BATCH_BYTES_MAX,
        batch_records_max: int = GROUP_COMMIT_RECORDS_MAX,
    ) -> None:
        """``claims``: how a partition is fenced against older owners before it is replayed
        (None: not at all, for a log only this process writes). ``on_partition_lost(partition,
        coordinator_epoch, fenced)``: called after a failed append dropped a partition.
        ``batch_bytes_max``, ``batch_records_max``: how far queued writes are merged into one
        append (a single write larger than that still goes out, alone)."""
        if batch_bytes_max <= 0 or batch_records_max <= 0:
            raise ValueError(
                f"group commit bounds must be positive: {batch_bytes_max} bytes, "
                f"{batch_records_max} records"
            )
        self._limits = limits
        self._offset_limits = offset_limits
        self._timers = timers
        self._log = log
        self._claims = claims
        self._on_partition_lost = on_partition_lost
        self.partition_count = partition_count
        self.owned: dict[int, OwnedPartition] = {}
        self._groups: dict[str, Group] = {}
        self._offsets: dict[str, GroupOffsets] = {}
        self._txn_offsets: dict[str, GroupTxnOffsets] = {}
        self._producer_turns = ProducerTurns()
        self._batch_bytes_max = batch_bytes_max
        self._batch_records_max = batch_records_max
        self._write_locks: dict[int, asyncio.Lock] = {}
        self._queued: dict[int, deque[_QueuedWrite]] = {}
        # Per partition, the batch whose append is in flight (sent, not answered yet).
        self._sending: dict[int, list[_QueuedWrite]] = {}
        self._flushers: dict[int, asyncio.Task[None]] = {}
        self._writes: set[asyncio.Task[None]] = set()

    # -- ownership --------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.partition_count)

    def check_coordinator(self, group_id: str) -> tuple[ErrorCode, str]:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "the group id is empty"
        if self.partition_count <= 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "__consumer_offsets does not exist yet"
        partition = self.partition_for(group_id)
        owned = self.owned.get(partition)
        if owned is None:
            return ErrorCode.NOT_COORDINATOR, f"__consumer_offsets-{partition} is not owned here"
        if owned.load is PartitionLoad.LOADING:
            return (
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"__consumer_offsets-{partition} is being loaded",
            )
        return ErrorCode.NONE, ""

    async def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Takes ownership of a partition: replays it to rebuild its groups and offsets,
        answering COORDINATOR_LOAD_IN_PROGRESS for them meanwhile."""
        loaded = await claim_and_replay(
            self.owned,
            partition,
            coordinator_epoch,
            self._log,
            self._claims,
            self._write_lock(partition),
        )
        if loaded is None:
            return
        owned, latest = loaded
        for raw_key, (record_offset, raw_value) in latest.items():
            if raw_value is None or raw_key == FENCE_KEY:
                continue
            try:
                key = decode_key(raw_key)
                value = decode_value(key, raw_value)
            except UnknownRecordKindError as e:
                _log.warning(
                    "skipping a __consumer_offsets record of an unknown kind (written by a "
                    "newer coordinator version)",
                    extra={"partition": partition, "kind": e.kind},
                )
                continue
            except RecordFormatError as e:
                # A record we cannot read must not keep every other group of the partition
                # offline; it is reported and skipped.
                _log.error(
                    "skipping unreadable __consumer_offsets record",
                    extra={"partition": partition, "error": str(e)},
                )
                continue
            if isinstance(key, OffsetCommitKey) and isinstance(value, OffsetCommitValue):
                position = (
                    record_offset if value.txn_record_offset is None else value.txn_record_offset
                )
                self._offsets_of(key.group_id).put(key.topic, key.partition, value, position)
                self._group_of(key.group_id)
            elif isinstance(key, GroupMetadataKey) and isinstance(value, GroupMetadataValue):
                self._restore_group(key.group_id, value)
            elif isinstance(key, PendingOffsetKey) and isinstance(value, PendingOffsetValue):
                self._txn_offsets_of(key.group_id).add_pending(
                    key.producer_id, key.topic, key.partition, value, record_offset
                )
                self._group_of(key.group_id)
            elif isinstance(key, TxnEndKey) and isinstance(value, TxnEndValue):
                self._txn_offsets_of(key.group_id).saw_end(key.producer_id, value)
                self._group_of(key.group_id)
        owned.load = PartitionLoad.LOADED

    def unload_partition(self, partition: int) -> None:
        if self.owned.pop(partition, None) is None:
            return
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            self._groups.pop(group_id).transition_to_dead(ErrorCode.NOT_COORDINATOR)
            self._offsets.pop(group_id, None)
            self._txn_offsets.pop(group_id, None)

    def _restore_group(self, group_id: str, value: GroupMetadataValue) -> None:
        group = self._group_of(group_id)
        members = [
            Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=((value.protocol_name, m.subscription),),
                assignment=m.assignment,
            )
            for m in value.members
        ]
        group.restore(
            generation_id=value.generation_id,
            protocol_type=value.protocol_type,
            protocol_name=value.protocol_name,
            leader_id=value.leader_id,
            members=members,
            state_timestamp_ms=value.state_timestamp_ms,
        )

    def _group_of(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = Group(group_id, self._limits, self._timers, self._group_changed)
            self._groups[group_id] = group
        return group

    def _offsets_of(self, group_id: str) -> GroupOffsets:
        offsets = self._offsets.get(group_id)
        if offsets is None:
            offsets = GroupOffsets()
            self._offsets[group_id] = offsets
        return offsets

    def _txn_offsets_of(self, group_id: str) -> GroupTxnOffsets:
        return self._txn_offsets.setdefault(group_id, GroupTxnOffsets())

    # -- persistence ------------------------------------------------------------------------

    def _write_lock(self, partition: int) -> asyncio.Lock:
        return self._write_locks.setdefault(partition, asyncio.Lock())

    async def _append(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        owned: OwnedPartition | None,
        apply: Callable[[int], None] | None = None,
        turn: ProducerTurn | None = None,
        plain_commits: frozenset[tuple[str, str, int]] = frozenset(),
    ) -> int:
        """Appends for the ownership ``owned`` only: a write queued behind a failed one must
        not go out under the next ownership of the partition, unchecked against its state.
        Returns once the append holding the records is acknowledged (see group commit in the
        module docstring): the offset of the first of them (the others follow it).

        ``apply(offset of the first record)``: what the write changes in memory. The flusher
        runs it once the append is acknowledged with the partition still owned as ``owned``,
        in log order, whether or not the caller still waits: a caller cancelled after its
        records were sent never leaves the log with a record that memory lacks. ``turn``: ended
        when the write leaves the queue, whatever became of it (producer_turns.py).
        ``plain_commits``: the (group, topic, partition) of the plain offset commits among the
        records (``_unapplied_commits``)."""
        if not records:
            raise ValueError("an append needs at least one record")
        if owned is None or self.owned.get(partition) is not owned:
            raise BrookError(
                ErrorCode.NOT_COORDINATOR, f"__consumer_offsets-{partition} is not owned here"
            )
        size_bytes = sum(
            len(key) + len(value or b"") + RECORD_OVERHEAD_BYTES_MAX for key, value in records
        )
        write = _QueuedWrite(
            records,
            owned,
            size_bytes,
            apply,
            turn,
            plain_commits,
            asyncio.get_running_loop().create_future(),
        )
        self._queued.setdefault(partition, deque()).append(write)
        if turn is not None:
            turn.handed_over = True
        if partition not in self._flushers:
            self._flushers[partition] = asyncio.get_running_loop().create_task(
                self._flush(partition), name=f"offsets-append-{partition}"
            )
        # Cancelling the caller cancels ``done``: left out if not sent yet, else ignored. The
        # append itself is the flusher's, so one impatient caller never leaves the others'
        # batch with an unknown outcome.
        return await write.done

    async def _flush(self, partition: int) -> None:
        """Sends the partition's queued writes, one merged append at a time, until none is
        left; the only task appending to the partition (claims aside, under the same lock)."""
        queue = self._queued[partition]
        try:
            while queue:
                async with self._write_lock(partition):
                    batch = self._next_batch(partition, queue)
                    if batch:
                        await self._send(partition, batch)
        finally:
            # No await since the loop saw the queue empty: nothing was queued unseen. Left
            # over only if this task was cancelled; those writes were never sent.
            del self._flushers[partition]
            del self._queued[partition]
            _fail(
                queue,
                BrookError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"__consumer_offsets-{partition}: appends stopped before this one was sent",
                ),
            )

    def _next_batch(self, partition: int, queue: deque[_QueuedWrite]) -> list[_QueuedWrite]:
        """The writes at the head of the queue that go out together: those still waiting and
        made for the current ownership, within the group commit bounds. Others are answered."""
        current = self.owned.get(partition)
        batch: list[_QueuedWrite] = []
        size_bytes = 0
        count = 0
        while queue:
            write = queue[0]
            if write.done.done():  # its caller gave up before it was sent
                queue.popleft()
                write.leave()
                continue
            if write.owned is not current:
                queue.popleft()
                _fail(
                    [write],
                    BrookError(
                        ErrorCode.NOT_COORDINATOR,
                        f"__consumer_offsets-{partition} is not owned here",
                    ),
                )
                continue
            if batch and (
                size_bytes + write.size_bytes > self._batch_bytes_max
                or count + len(write.records) > self._batch_records_max
            ):
                break
            queue.popleft()
            batch.append(write)
            size_bytes += write.size_bytes
            count += len(write.records)
        return batch

    async def _send(self, partition: int, batch: list[_QueuedWrite]) -> None:
        owned = batch[0].owned  # the current one: _next_batch keeps no other
        records = [record for write in batch for record in write.records]
        self._sending[partition] = batch
        try:
            last = await self._log.append(partition, records)
        except asyncio.CancelledError:
            _fail(
                batch,
                OffsetsWriteError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"__consumer_offsets-{partition}: the append was cancelled with its "
                    "outcome unknown",
                    fenced=False,
                ),
            )
            raise
        except OffsetsWriteError as e:
            _fail(batch, e)
            self._lose(owned, e)
        except Exception as e:
            _fail(batch, e)
        else:
            # In queue order: a later write of the same key is applied after an earlier one.
            # Not applied if the partition was dropped meanwhile: its next owner replays it.
            still_owned = self.owned.get(partition) is owned
            position = last - len(records) + 1
            for write in batch:
                if still_owned and write.apply is not None:
                    _apply_appended(partition, write.apply, position)
                _settle(write.done, position)
                write.leave()
                position += len(write.records)
        finally:
            del self._sending[partition]

    def _unapplied_commits(self, group_id: str) -> set[TopicPartitionKey]:
        """The group's partitions with a plain commit in flight or queued, to be appended and
        applied: once appended, its record is more recent than every record applied before
        (Kafka keeps the most recent). Not counted: one made for an ownership that is gone
        (never applied here), and a queued one whose caller gave up (left out of its batch,
        ``_next_batch``)."""
        partition = self.partition_for(group_id)
        current = self.owned.get(partition)
        sending = self._sending.get(partition, [])
        queued = [write for write in self._queued.get(partition, ()) if not write.done.done()]
        return {
            (topic, partition_id)
            for write in [*sending, *queued]
            if write.owned is current
            for group, topic, partition_id in write.plain_commits
            if group == group_id
        }

    def _lose(self, owned: OwnedPartition, error: OffsetsWriteError) -> None:
        drop_lost_partition(self, OFFSETS_TOPIC, owned, error, self._on_partition_lost)

    def _group_changed(self, group: Group) -> None:
        value = GroupMetadataValue(
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            generation_id=group.generation_id,
            leader_id=group.leader_id,
            state_timestamp_ms=group.state_timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout_ms,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    subscription=m.metadata_for(group.protocol_name),
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ),
        )
        record = (encode_key(GroupMetadataKey(group.group_id)), encode_value(value))
        partition = self.partition_for(group.group_id)
        task = asyncio.get_running_loop().create_task(
            self._write_group(partition, record, group.group_id, self.owned.get(partition))
        )
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write_group(
        self,
        partition: int,
        record: tuple[bytes, bytes | None],
        group_id: str,
        owned: OwnedPartition | None,
    ) -> None:
        try:
            await self._append(partition, [record], owned)
        except BrookError as e:
            _log.warning("group metadata not stored", extra={"group": group_id, "error": e.message})

    async def close(self) -> None:
        """Waits for queued group-metadata writes and appends (each bounded by the log's own
        timeout)."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        if self._flushers:
            await asyncio.gather(*self._flushers.values(), return_exceptions=True)
        for partition in list(self.owned):
            self.unload_partition(partition)

    # -- the group protocol -----------------------------------------------------------------

    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return JoinResult(error, member_id=request.member_id, message=message)
        group = self._groups.get(group_id)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=request.member_id)
            group = self._group_of(group_id)
        answer: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.join(request, lambda result: _settle(answer, result))
        bound_s = (request.rebalance_timeout_ms + ANSWER_MARGIN_MS) / 1000
        try:
            return await asyncio.wait_for(answer, bound_s)
        except TimeoutError:
            return JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=request.member_id)

    async def sync(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str,
        protocol_name: str,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return SyncResult(error, message=message)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members.get(member_id)
        answer: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        group.sync(
            member_id,
            group_instance_id,
            generation_id,
            protocol_type,
            protocol_name,
            assignments,
            lambda result: _settle(answer, result),
        )
        wait_ms = max(member.session_timeout_ms, member.rebalance_timeout_ms) if member else 0
        try:
            return await asyncio.wait_for(answer, (wait_ms + ANSWER_MARGIN_MS) / 1000)
        except TimeoutError:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> tuple[ErrorCode, str]:
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return error, message
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, ""
        return group.heartbeat(member_id, group_instance_id, generation_id), ""

    def leave(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, str, list[ErrorCode]]:
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return error, message, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, "", [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        return ErrorCode.NONE, "", [group.leave(m, i) for m, i in members]

    # -- offsets ----------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        partitions: Sequence[CommitPartition],
    ) -> list[PartitionResult]:
        error, message = self.check_coordinator(group_id)
        if error is ErrorCode.NONE:
            group = self._groups.get(group_id)
            if group is None:
                if generation_id >= 0 or member_id:
                    error = ErrorCode.ILLEGAL_GENERATION
                else:
                    group = self._group_of(group_id)
            if group is not None:
                error = group.check_commit(member_id, group_instance_id, generation_id)

        def record(p: CommitPartition, now_ms: int) -> tuple[bytes, OffsetCommitValue]:
            key = encode_key(OffsetCommitKey(group_id, p.topic, p.partition))
            return key, OffsetCommitValue(p.offset, p.leader_epoch, p.metadata, now_ms)

        def apply(p: CommitPartition, value: OffsetCommitValue, record_offset: int) -> None:
            self._offsets_of(group_id).put(p.topic, p.partition, value, record_offset)
            self._group_of(group_id)

        return await self._write_commit(
            group_id, error, message, partitions, record, apply, plain=True
        )

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        partitions: Sequence[CommitPartition],
    ) -> list[PartitionResult]:
        """Kafka's TxnOffsetCommit: the offsets become pending offsets of ``producer_id`` in
        the group, invisible to ``fetch`` until ``complete_transaction``. The group is created
        as for a manual commit (generation -1, no member); the member and generation are
        checked when given (``Group.check_txn_commit``). PRODUCER_FENCED: ``producer_epoch``
        is older than the newest this group has seen for the producer id. Checked and written
        in the producer's turn (producer_turns.py)."""

        def record(p: CommitPartition, now_ms: int) -> tuple[bytes, PendingOffsetValue]:
            key = encode_key(PendingOffsetKey(group_id, producer_id, p.topic, p.partition))
            value = PendingOffsetValue(producer_epoch, p.offset, p.leader_epoch, p.metadata, now_ms)
            return key, value

        def apply(p: CommitPartition, value: PendingOffsetValue, record_offset: int) -> None:
            self._txn_offsets_of(group_id).add_pending(
                producer_id, p.topic, p.partition, value, record_offset
            )
            self._group_of(group_id)

        async with self._producer_turns.turn(group_id, producer_id) as turn:
            error, message = self._check_producer_request(group_id, producer_id, producer_epoch)
            group = self._groups.get(group_id)
            if error is ErrorCode.NONE and group is None:
                if generation_id >= 0:
                    error = ErrorCode.ILLEGAL_GENERATION
                elif member_id or group_instance_id is not None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    group = self._group_of(group_id)
            if error is ErrorCode.NONE and group is not None:
                error = group.check_txn_commit(member_id, group_instance_id, generation_id)
            txn_offsets = self._txn_offsets.get(group_id)
            known = txn_offsets.producer(producer_id) if txn_offsets else None
            if (
                error is ErrorCode.NONE
                and known is not None
                and producer_epoch < known.producer_epoch
            ):
                error = ErrorCode.PRODUCER_FENCED
                message = _older_epoch(group_id, producer_id, producer_epoch, known)
            return await self._write_commit(
                group_id, error, message, partitions, record, apply, turn
            )

    def _check_producer_request(
        self, group_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, str]:
        """The checks a TxnCommitOffsets and a CompleteTransaction start with."""
        error, message = self.check_coordinator(group_id)
        if error is ErrorCode.NONE and (producer_id < 0 or producer_epoch < 0):
            return (
                ErrorCode.INVALID_REQUEST,
                f"producer id {producer_id} and epoch {producer_epoch} must be >= 0",
            )
        return error, message

    async def _write_commit(
        self,
        group_id: str,
        error: ErrorCode,
        message: str,
        partitions: Sequence[CommitPartition],
        record: Callable[[CommitPartition, int], tuple[bytes, _V]],
        apply: Callable[[CommitPartition, _V, int], None],
        turn: ProducerTurn | None = None,
        *,
        plain: bool = False,
    ) -> list[PartitionResult]:
        """A commit's writing once its group-level checks gave ``error``: the per-partition
        checks, then one append of the accepted partitions' records (``record``: key and
        value), each applied once appended (``apply``: the partition, its value and its
        record's offset) and ending ``turn`` (see ``_append``). ``plain``: an OffsetCommit's
        (weighed by the end of a transaction while not applied, ``_unapplied_commits``).
        Returns every partition's result."""
        if error is not ErrorCode.NONE:
            return [PartitionResult(p.topic, p.partition, error, message) for p in partitions]
        now_ms = self._timers.now_ms()
        results: list[PartitionResult] = []
        accepted: list[tuple[CommitPartition, bytes, _V]] = []
        for p in partitions:
            code, why = check_commit_partition(
                self._offset_limits, p.topic, p.partition, p.offset, p.metadata
            )
            results.append(PartitionResult(p.topic, p.partition, code, why))
            if code is ErrorCode.NONE:
                key, value = record(p, now_ms)
                accepted.append((p, key, value))
        if not accepted:
            return results
        records = [(key, encode_value(value)) for _, key, value in accepted]

        def apply_all(first: int) -> None:
            for i, (p, _, value) in enumerate(accepted):
                apply(p, value, first + i)

        plain_commits = frozenset((group_id, p.topic, p.partition) for p, _, _ in accepted if plain)
        partition = self.partition_for(group_id)
        try:
            await self._append(
                partition, records, self.owned.get(partition), apply_all, turn, plain_commits
            )
        except BrookError as e:
            failed = {(p.topic, p.partition) for p, _, _ in accepted}
            code = _write_failure(e)
            return [
                PartitionResult(r.topic, r.partition, code, e.message)
                if (r.topic, r.partition) in failed
                else r
                for r in results
            ]
        return results

    async def complete_transaction(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
    ) -> tuple[ErrorCode, str]:
        """The end of ``producer_id``'s transaction for the group (the marker Kafka writes to
        __consumer_offsets): on commit its pending offsets that are more recent than the group's,
        and than any plain commit of their partition still being appended, become the group's
        committed offsets (``txn_offsets.winners``), on abort they are dropped. Answers NONE once
        that is appended, and at once, writing nothing, for an unknown group, a repeat, or a
        producer with nothing pending whose epochs the group already has (newer epochs are written,
        to fence the older). INVALID_PRODUCER_EPOCH: ``producer_epoch`` is older than the newest
        seen for the producer in the group; TRANSACTION_COORDINATOR_FENCED: ``coordinator_epoch`` is
        older than one that already ended a transaction of the producer here. Otherwise what the
        write failed with (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...: retriable). Decided and
        written in the producer's turn (producer_turns.py): it ends every pending offset of the
        producer whose TxnCommitOffsets came before it, and fences those that come after."""
        async with self._producer_turns.turn(group_id, producer_id) as turn:
            error, message = self._check_producer_request(group_id, producer_id, producer_epoch)
            if error is not ErrorCode.NONE:
                return error, message
            if group_id not in self._groups:
                return ErrorCode.NONE, ""
            txn_offsets = self._txn_offsets.get(group_id)
            known = txn_offsets.producer(producer_id) if txn_offsets else None
            if known is not None:
                if producer_epoch < known.producer_epoch:
                    return (
                        ErrorCode.INVALID_PRODUCER_EPOCH,
                        _older_epoch(group_id, producer_id, producer_epoch, known),
                    )
                if coordinator_epoch < known.coordinator_epoch:
                    return (
                        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                        f"coordinator epoch {coordinator_epoch} is older than epoch "
                        f"{known.coordinator_epoch}, which ended a transaction of producer "
                        f"{producer_id} in group {group_id!r}",
                    )
                if (
                    not known.pending
                    and producer_epoch == known.producer_epoch
                    and coordinator_epoch == known.coordinator_epoch
                ):
                    return ErrorCode.NONE, ""
            # The producer's epochs are recorded even with nothing pending: a newer epoch here
            # fences a late TxnCommitOffsets of the older one, as Kafka's marker does.
            pending = dict(known.pending) if known is not None else {}
            # A plain commit of a partition not applied yet will land after the pending record
            # (applied: this is its producer's turn), so the pending offset loses there.
            applied = (
                winners(self._offsets_of(group_id), pending, self._unapplied_commits(group_id))
                if committed
                else []
            )
            end = TxnEndValue(producer_epoch, coordinator_epoch, committed)
            records: list[tuple[bytes, bytes | None]] = [
                (encode_key(PendingOffsetKey(group_id, producer_id, topic, partition)), None)
                for topic, partition in pending
            ]
            records += [
                (encode_key(OffsetCommitKey(group_id, t, p)), encode_value(offset.committed()))
                for (t, p), offset in applied
            ]
            records.append((encode_key(TxnEndKey(group_id, producer_id)), encode_value(end)))

            def apply(_: int) -> None:
                txn_offsets = self._txn_offsets_of(group_id)
                for topic, partition_id in pending:
                    txn_offsets.remove_pending(producer_id, topic, partition_id)
                offsets = self._offsets_of(group_id)
                for (topic, partition_id), offset in applied:
                    offsets.put(topic, partition_id, offset.committed(), offset.record_offset)
                txn_offsets.saw_end(producer_id, end)

            partition = self.partition_for(group_id)
            try:
                await self._append(partition, records, self.owned.get(partition), apply, turn)
            except BrookError as e:
                return _write_failure(e), e.message
            return ErrorCode.NONE, ""

    def fetch(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, str, list[PartitionResult]]:
        """The committed offsets of ``partitions`` (None: every partition with one). With
        ``require_stable``, a partition with pending transactional offsets is answered
        UNSTABLE_OFFSET_COMMIT instead (Kafka's OffsetFetch v7+)."""
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return error, message, []
        offsets = self._offsets.get(group_id) or GroupOffsets()
        txn_offsets = self._txn_offsets.get(group_id) if require_stable else None
        wanted = sorted(offsets.by_partition) if partitions is None else list(partitions)
        results = []
        for topic, partition in wanted:
            value = offsets.get(topic, partition)
            if txn_offsets is not None and txn_offsets.has_pending(topic, partition):
                results.append(
                    PartitionResult(
                        topic,
                        partition,
                        ErrorCode.UNSTABLE_OFFSET_COMMIT,
                        "a transaction has offsets for this partition pending",
                    )
                )
            elif value is None:
                results.append(PartitionResult(topic, partition, ErrorCode.NONE))
            else:
                results.append(
                    PartitionResult(
                        topic,
                        partition,
                        ErrorCode.NONE,
                        offset=value.offset,
                        leader_epoch=value.leader_epoch,
                        metadata=value.metadata,
                    )
                )
        return ErrorCode.NONE, "", results

    # -- administration ---------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def groups(self) -> list[Group]:
        loaded = self._loaded_partitions()
        return [g for g in self._groups.values() if self.partition_for(g.group_id) in loaded]

    def committed_offsets(self) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, offset) of every committed offset of the groups served
        here (their __consumer_offsets partition is loaded), members or not."""
        loaded = self._loaded_partitions()
        return [
            (group_id, topic, partition, value.offset)
            for group_id, offsets in self._offsets.items()
            if self.partition_for(group_id) in loaded
            for (topic, partition), value in offsets.by_partition.items()
        ]

    def _loaded_partitions(self) -> set[int]:
        return {p for p, o in self.owned.items() if o.load is PartitionLoad.LOADED}

    async def delete(self, group_id: str) -> tuple[ErrorCode, str]:
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return error, message
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}"
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} still has members"
        try:
            await self._remove_offsets(
                group_id, list(self._offsets_of(group_id).by_partition), True
            )
        except BrookError as e:
            return _write_failure(e), e.message
        return ErrorCode.NONE, ""

    async def delete_offsets(
        self, group_id: str, keys: list[tuple[str, int]]
    ) -> tuple[ErrorCode, str, dict[tuple[str, int], ErrorCode]]:
        """Kafka's OffsetDelete: (group error, its message, per partition error). The
        partitions of a topic a member subscribes to are refused (GROUP_SUBSCRIBED_TO_TOPIC);
        the committed offsets of the others are removed (a partition without one is answered
        NONE: there is nothing left of it)."""
        error, message = self.check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return error, message, {}
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}", {}
        subscribed = group.subscribed_topics()
        results = {
            key: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if key[0] in subscribed else ErrorCode.NONE
            for key in keys
        }
        committed = self._offsets_of(group_id).by_partition
        doomed = [k for k, code in results.items() if code is ErrorCode.NONE and k in committed]
        if doomed:
            try:
                await self._remove_offsets(group_id, doomed, False)
            except BrookError as e:
                return _write_failure(e), e.message, {}
        return ErrorCode.NONE, "", results

    async def _remove_offsets(
        self, group_id: str, keys: list[tuple[str, int]], remove_group: bool
    ) -> None:
        """Deletes the committed offsets of ``keys``; with ``remove_group``, the group too,
        with its pending transactional offsets and what it knew of their producers (Kafka's
        DeleteGroups drops the pending offsets with the group)."""
        tombstones: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetCommitKey(group_id, t, p)), None) for t, p in keys
        ]
        txn_offsets = self._txn_offsets.get(group_id)
        if remove_group:
            tombstones.append((encode_key(GroupMetadataKey(group_id)), None))
            if txn_offsets is not None:
                tombstones += [
                    (encode_key(PendingOffsetKey(group_id, producer_id, t, p)), None)
                    for producer_id, t, p in txn_offsets.pending_keys()
                ]
                tombstones += [
                    (encode_key(TxnEndKey(group_id, producer_id)), None)
                    for producer_id in txn_offsets.producers
                ]

        def apply(_: int) -> None:
            offsets = self._offsets_of(group_id)
            for topic, partition in keys:
                offsets.remove(topic, partition)
            if remove_group:
                group = self._groups.pop(group_id, None)
                if group is not None:
                    group.transition_to_dead(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                self._offsets.pop(group_id, None)
                self._txn_offsets.pop(group_id, None)

        offsets_partition = self.partition_for(group_id)
        await self._append(offsets_partition, tombstones, self.owned.get(offsets_partition), apply)

    async def expire_offsets(self) -> int:
        """Deletes the offsets past offsets.retention.minutes of groups that have no members,
        and the groups left with nothing; returns how many offsets were removed. As in Kafka,
        an offset with transactional offsets pending for its partition does not expire, and a
        group with any pending is not removed."""
        now_ms = self._timers.now_ms()
        removed = 0
        for group in self.groups():
            empty_since = group.state_timestamp_ms if group.state is GroupState.EMPTY else None
            offsets = self._offsets.get(group.group_id)
            txn_offsets = self._txn_offsets.get(group.group_id) or GroupTxnOffsets()
            retention_ms = self._offset_limits.retention_ms
            expired = (
                [
                    key
                    for key in offsets.expired(now_ms, retention_ms, empty_since)
                    if not txn_offsets.has_pending(*key)
                ]
                if offsets
                else []
            )
            drop_group = (
                group.state is GroupState.EMPTY
                and len(expired) == len(offsets or ())
                and not txn_offsets.has_any_pending()
            )
            if not expired and not drop_group:
                continue
            try:
                await self._remove_offsets(group.group_id, expired, drop_group)
            except BrookError as e:
                _log.warning(
                    "expired offsets not removed",
                    extra={"group": group.group_id, "error": e.message},
                )
                continue
            removed += len(expired)
        return removed


# What a client is told when the write of its commit failed: Kafka's translation of storage
# errors into coordinator errors, so clients re-find or retry as they would with Kafka.
_COMMIT_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.LEADER_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def commit_error(code: ErrorCode) -> ErrorCode:
    return _COMMIT_ERRORS.get(code, code)


def _older_epoch(group_id: str, producer_id: int, producer_epoch: int, known: ProducerTxn) -> str:
    return (
        f"producer {producer_id} epoch {producer_epoch} is older than epoch "
        f"{known.producer_epoch}, seen for it in group {group_id!r}"
    )


def _write_failure(error: BrookError) -> ErrorCode:
    """What a client is told when a write it asked for failed."""
    if isinstance(error, OffsetsWriteError):
        # The partition was dropped: the client re-finds the coordinator and asks again.
        return ErrorCode.NOT_COORDINATOR
    return commit_error(error.code)


@dataclass(slots=True)
class _QueuedWrite:
    records: Sequence[tuple[bytes, bytes | None]]
    owned: OwnedPartition
    # The records' size in a batch, at most (RECORD_OVERHEAD_BYTES_MAX each).
    size_bytes: int
    # What the write changes in memory, and the producer turn it ends (GroupManager._append).
    apply: Callable[[int], None] | None
    turn: ProducerTurn | None
    # The (group, topic, partition) of its plain offset commits.
    plain_commits: frozenset[tuple[str, str, int]]
    # The offset of the write's first record, once appended.
    done: asyncio.Future[int]

    def leave(self) -> None:
        """The write is out of the queue: appended, failed or left out."""
        if self.turn is not None:
            self.turn.end()


def _apply_appended(partition: int, apply: Callable[[int], None], position: int) -> None:
    """Runs a write's ``apply`` for its records, appended from ``position``. One that raises is a
    bug (memory may lack what the log has, until the partition is loaded again): it is logged
    as an invariant violation and goes no further; its writer is still answered as appended
    (the log has its records), and the other writes of the batch are still applied and
    answered, and every turn ends (a turn never ended would block its producer's every later
    TxnCommitOffsets and CompleteTransaction in the group)."""
    try:
        apply(position)
    except Exception:
        _log.exception(
            "invariant violated: applying an appended write failed; memory may lack its records",
            extra={"partition": partition, "offset": position},
        )


def _fail(batch: Iterable[_QueuedWrite], error: BaseException) -> None:
    for write in batch:
        if not write.done.done():
            write.done.set_exception(error)
        write.leave()


def _settle(future: asyncio.Future[_T], result: _T) -> None:
    if not future.done():
        future.set_result(result)
