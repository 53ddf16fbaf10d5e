"""A consumer's membership of its group: the client half of Kafka's classic group protocol.

``ConsumerCoordinator`` lives on the consumer's event loop. It finds the group coordinator
(GetMetadata on a storage node lists the coordinators, FindCoordinator on any of them names the
group's owner), joins the group (JoinGroup, then SyncGroup; the leader runs the assignor),
heartbeats in the background, fetches committed offsets for a new assignment and commits
offsets with the member's generation. It never calls application code: the consumer's
``poll`` (in the application's thread) revokes and assigns partitions and runs the listener
around ``join``: under the eager protocol every member gives up all its partitions before it
rejoins; under the cooperative one (KIP-429) a member tells the leader what it holds
(``join``'s ``owned``) and gives up only what the assignment moved away, afterwards.

Errors follow Kafka's consumer:

- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a coordinator
  that does not answer: forget it, back off, find it again (a NodeHint in the answer is used
  directly).
- REBALANCE_IN_PROGRESS (heartbeat): rejoin. UNKNOWN_MEMBER_ID: forget the member id and
  rejoin; ILLEGAL_GENERATION: forget the generation and rejoin.
- FENCED_INSTANCE_ID: another process uses our group.instance.id; fatal, raised from poll.
- A commit refused with REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID is
  ``CommitFailedError``: the partitions may already belong to another member.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

# One committed-offset type for the whole SDK: Admin's group offsets and the consumer's.
from brook.client.admin import OffsetAndMetadata
from brook.client.config import ConsumerConfig
from brook.client.errors import (
    ApiError,
    ClientTimeoutError,
    CommitFailedError,
    FencedInstanceIdError,
    api_error,
)
from brook.client.group.assignors import (
    Assignor,
    GroupMember,
    RebalanceProtocol,
    assignor_named,
    rebalance_protocol,
)
from brook.client.group.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from brook.client.metadata import Metadata
from brook.client.runtime import Notifier, Wakeup
from brook.client.types import TopicPartition
from brook.errors import ErrorCode, error_code
from brook.reserved import OFFSETS_TOPIC
from brook.rpc.addresses import listener_address
from brook.rpc.backoff import backoff_s
from brook.rpc.channels import ChannelPool
from brook.rpc.coordinators import (
    COORDINATOR_ERRORS,
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator,
    hinted_coordinator,
)
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, group_pb2, storage_pb2

__all__ = [
    "ConsumerCoordinator",
    "ConsumerGroupMetadata",
    "CoordinatorLocator",
    "MemberState",
    "offset_commit_partitions",
    "storage_node_locator",
]

_log = logging.getLogger(__name__)

# Commit answers after which the partitions may already be someone else's.
_COMMIT_FAILED = frozenset(
    {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}
)
# Kafka's consumer gives a JoinGroup this long beyond the rebalance timeout, since the
# coordinator holds it for up to that long by design.
_JOIN_MARGIN_MS = 5000
_T = TypeVar("_T")

# Returns the host:port of coordinators to send FindCoordinator to.
CoordinatorLocator = Callable[[], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Where a consumer stands in its group (Kafka's ConsumerGroupMetadata): generation -1
    and an empty member id while it is not a member."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


def offset_commit_partitions(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> list[group_pb2.OffsetCommitPartition]:
    """``offsets`` as a commit request carries them (CommitOffsets, TxnCommitOffsets)."""
    return [
        group_pb2.OffsetCommitPartition(
            topic=tp.topic,
            partition=tp.partition,
            committed_offset=om.offset,
            committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
            metadata=om.metadata,
        )
        for tp, om in offsets.items()
    ]


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


def storage_node_locator(
    metadata: Metadata, network: ChannelPool, bootstrap_servers: Sequence[str], timeout_s: float
) -> CoordinatorLocator:
    """Coordinators as any storage node's GetMetadata lists them (role GROUP_COORDINATOR)."""

    async def locate() -> list[str]:
        known = list(metadata.cluster.brokers.values())
        random.shuffle(known)
        candidates = known + [a for a in bootstrap_servers if a not in known]
        # Naming one small topic keeps the answer small (no topics means all of them).
        request = storage_pb2.GetMetadataRequest(topics=[OFFSETS_TOPIC])
        for address in candidates:
            try:
                response = await network.storage(address).GetMetadata(request, timeout=timeout_s)
            except grpc.aio.AioRpcError:
                continue
            found = [
                listener_address(b.endpoints)
                for b in response.brokers
                if b.role == common_pb2.NODE_ROLE_GROUP_COORDINATOR and not b.fenced
            ]
            return [a for a in found if a is not None]
        return []

    return locate


class _Retry(Exception):
    """An attempt failed in a way the next attempt may fix (after back-off)."""

    def __init__(self, reason: str, *, forget_coordinator: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.forget_coordinator = forget_coordinator


class ConsumerCoordinator:
    """One consumer's membership of ``group_id``; every coroutine runs on the consumer's loop.

    The application thread only reads ``rejoin_needed``, ``fatal_error``, ``state``,
    ``generation_id`` and ``member_id`` (plain attributes) and sets ``last_poll``.
    """

    def __init__(
        self,
        *,
        group_id: str,
        group_instance_id: str | None,
        config: ConsumerConfig,
        metadata: Metadata,
        network: ChannelPool,
        notifier: Notifier,
        wakeup: Wakeup,
        locator: CoordinatorLocator,
        assignors: Sequence[str],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
    ) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self._config = config
        self._metadata = metadata
        self._notifier = notifier
        self._wakeup = wakeup
        self._locator = locator
        self._assignors: list[Assignor] = [assignor_named(name) for name in assignors]
        self.rebalance_protocol = rebalance_protocol(self._assignors)
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._max_poll_interval_ms = max_poll_interval_ms
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._network = network
        self._coordinator: Coordinator | None = None
        self._coordinator_failures = 0

        self.member_id = ""
        self.generation_id = -1
        self.protocol_name = ""
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self.fatal_error: BaseException | None = None
        self.topics: tuple[str, ...] = ()
        self.assignment: list[TopicPartition] = []
        # What the member holds while it joins (cooperative: it keeps them through the join).
        self._owned_at_join: list[TopicPartition] = []
        self.last_poll = time.monotonic()
        self.is_leader = False
        # The leader watches the partition counts it assigned from (Kafka: metadata
        # snapshot); a change means the assignment is stale.
        self._assigned_counts: dict[str, int] = {}
        self._joining = False
        self._next_heartbeat = 0.0

    # -- application-facing state -----------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Follow exactly ``topics``; a different set needs a rejoin."""
        wanted = tuple(sorted(set(topics)))
        if wanted != self.topics:
            self.topics = wanted
            self.rejoin_needed = True
        self._metadata.set_topics(set(wanted) | set(self._assigned_counts))

    def metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata(
            self.group_id, self.generation_id, self.member_id, self.group_instance_id
        )

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def _reset(self, *, member_id: bool, reason: str) -> None:
        _log.info("group %s: %s; rejoining", self.group_id, reason)
        if member_id:
            self.member_id = ""
        self.generation_id = -1
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self._notifier.notify()

    def _fatal(self, error: BaseException) -> BaseException:
        self.fatal_error = error
        self.state = MemberState.UNJOINED
        self._notifier.notify()
        return error

    # -- finding the coordinator ------------------------------------------------------------

    def _forget_coordinator(self, hinted: Coordinator | None = None) -> None:
        """Drops the coordinator, for the one a NOT_COORDINATOR hint names if any."""
        self._coordinator = hinted

    async def _coordinator_address(self) -> str:
        """The coordinator's address, looked up (within request.timeout.ms) when unknown."""
        if self._coordinator is not None:
            return self._coordinator.address
        deadline = time.monotonic() + self._request_timeout_s
        addresses = await self._locator()
        if not addresses:
            raise _Retry("no group coordinator is registered with the cluster yet")
        random.shuffle(addresses)

        def ask(
            address: str, request: group_pb2.FindCoordinatorRequest, timeout_s: float
        ) -> Awaitable[group_pb2.FindCoordinatorResponse]:
            return self._network.groups(address).FindCoordinator(  # type: ignore[no-any-return]
                request, timeout=timeout_s
            )

        try:
            self._coordinator = await find_coordinator(self.group_id, addresses, ask, deadline)
        except CoordinatorNotFoundError as error:
            raise _Retry(str(error)) from None
        except CoordinatorRefusedError as error:
            raise api_error(error.code, str(error)) from None
        return self._coordinator.address

    async def _call(self, method: str, request: Any, timeout_s: float) -> Any:
        """``method`` on the group's coordinator; transport failures become _Retry."""
        address = await self._coordinator_address()
        try:
            return await getattr(self._network.groups(address), method)(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            code, text = rpc_error(error)
            if code is ErrorCode.REQUEST_TIMED_OUT:
                raise _Retry(f"{method} to {address} timed out") from None
            raise _Retry(f"{method} to {address}: {text}", forget_coordinator=True) from None

    async def _with_retries(
        self, what: str, attempt: Callable[[], Awaitable[_T]], deadline: float
    ) -> _T:
        """``attempt`` until it returns, raises a non-_Retry error, or ``deadline`` passes."""
        failures = 0
        while True:
            try:
                result = await attempt()
            except _Retry as retry:
                if retry.forget_coordinator:
                    self._forget_coordinator()
                failures += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ClientTimeoutError(
                        f"{what} for group {self.group_id} did not finish in time: {retry.reason}"
                    ) from None
                _log.debug("group %s: %s failed, retrying: %s", self.group_id, what, retry.reason)
                await asyncio.sleep(min(backoff_s(self._config.retry_backoff, failures), remaining))
                continue
            return result

    def _check_coordinator_error(self, code: ErrorCode, hint: common_pb2.NodeHint | None) -> None:
        if code in COORDINATOR_ERRORS:
            self._forget_coordinator(hinted_coordinator((code,), hint))
            raise _Retry(f"coordinator answered {code.name}")

    # -- joining ----------------------------------------------------------------------------

    def _subscription_bytes(self, assignor: Assignor) -> bytes:
        # Only the sticky assignors read owned partitions; leaving them out for the others
        # keeps a member's metadata the same across restarts, which is what lets a restarted
        # static member return without a rebalance (the coordinator compares the bytes).
        if RebalanceProtocol.COOPERATIVE in assignor.protocols:
            # What the member holds now: under COOPERATIVE the leader must not give these to
            # anyone else this round; under EAGER the member gave everything up already.
            return encode_subscription(
                Subscription(
                    list(self.topics), None, list(self._owned_at_join), self.generation_id
                ),
                version=2,
            )
        if assignor.name == "sticky":
            return encode_subscription(
                Subscription(list(self.topics), None, list(self.assignment), self.generation_id),
                version=2,
            )
        return encode_subscription(Subscription(list(self.topics)), version=1)

    async def join(
        self, deadline: float, owned: Sequence[TopicPartition] = ()
    ) -> list[TopicPartition]:
        """Join (or rejoin) the group and return this member's assignment. ``owned`` is what
        the member holds while it joins (KIP-429: a cooperative member keeps its partitions
        until the assignment says which to give up).

        Raises ClientTimeoutError at ``deadline`` (the caller may call again; the member id
        is kept), FencedInstanceIdError, or an ApiError the group cannot get past.
        """
        if self.fatal_error is not None:
            raise self.fatal_error
        self._joining = True
        self._owned_at_join = list(owned)
        self.state = MemberState.REBALANCING
        try:
            return await self._with_retries("JoinGroup", self._join_once, deadline)
        finally:
            self._joining = False

    async def _join_once(self) -> list[TopicPartition]:
        self.rejoin_needed = False
        rebalance_timeout_ms = self._max_poll_interval_ms
        request = group_pb2.JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self._session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=[
                group_pb2.JoinGroupProtocol(name=a.name, metadata=self._subscription_bytes(a))
                for a in self._assignors
            ],
            client_id=self._config.client_id,
        )
        timeout_s = max(self._request_timeout_s, (rebalance_timeout_ms + _JOIN_MARGIN_MS) / 1000)
        response = await self._call("JoinGroup", request, timeout_s)
        code = error_code(response.error_code)
        self._check_coordinator_error(code, response.coordinator)
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            raise _Retry("joining again with the member id the coordinator gave")
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            raise _Retry("the coordinator did not know our member id")
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            raise _Retry("a rebalance started while joining")
        if code is ErrorCode.FENCED_INSTANCE_ID:
            raise self._fatal(FencedInstanceIdError(self.group_instance_id or "", "JoinGroup"))
        if code is not ErrorCode.NONE:
            raise api_error(
                code, f"JoinGroup({self.group_id}): {response.error_message or code.name}"
            )
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.protocol_name = response.protocol_name
        self.is_leader = response.leader_id == self.member_id
        assignments: list[group_pb2.SyncGroupAssignment] = []
        if self.is_leader and not response.skip_assignment:
            assignments = await self._assign(response.protocol_name, list(response.members))
        sync = group_pb2.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=self.protocol_name,
            assignments=assignments,
        )
        answer = await self._call("SyncGroup", sync, timeout_s)
        code = error_code(answer.error_code)
        self._check_coordinator_error(code, answer.coordinator)
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            raise _Retry("a rebalance started while syncing")
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if code is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation_id = -1
            raise _Retry(f"SyncGroup answered {code.name}")
        if code is ErrorCode.FENCED_INSTANCE_ID:
            raise self._fatal(FencedInstanceIdError(self.group_instance_id or "", "SyncGroup"))
        if code is not ErrorCode.NONE:
            raise api_error(
                code, f"SyncGroup({self.group_id}): {answer.error_message or code.name}"
            )
        try:
            assignment = decode_assignment(bytes(answer.assignment))
        except ValueError as error:
            raise api_error(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {self.group_id}: the leader's assignment cannot be read: {error}",
            ) from None
        self.assignment = list(dict.fromkeys(assignment.partitions))
        self.state = MemberState.STABLE
        self._next_heartbeat = time.monotonic() + self._heartbeat_interval_s
        self.last_poll = time.monotonic()
        self._wakeup.set()
        _log.info(
            "group %s: member %s joined generation %d with %d partitions",
            self.group_id,
            self.member_id,
            self.generation_id,
            len(self.assignment),
        )
        return list(self.assignment)

    async def _assign(
        self, protocol_name: str, members: list[group_pb2.JoinGroupMember]
    ) -> list[group_pb2.SyncGroupAssignment]:
        assignor = assignor_named(protocol_name)
        parsed: list[GroupMember] = []
        for member in members:
            try:
                subscription = decode_subscription(bytes(member.metadata))
            except ValueError as error:
                # One unreadable member must not stall the group: it gets nothing.
                _log.warning(
                    "group %s: member %s sent unreadable metadata (%s)",
                    self.group_id,
                    member.member_id,
                    error,
                )
                subscription = Subscription([])
            instance = member.group_instance_id if member.HasField("group_instance_id") else None
            parsed.append(GroupMember(member.member_id, instance, subscription))
        topics = {t for m in parsed for t in m.subscription.topics}
        counts = await self._partition_counts(topics)
        self._assigned_counts = counts
        self._metadata.set_topics(set(self.topics) | topics)
        result = assignor.assign(counts, parsed)
        return [
            group_pb2.SyncGroupAssignment(
                member_id=member_id, assignment=encode_assignment(Assignment(tps))
            )
            for member_id, tps in result.items()
        ]

    async def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        """Each topic's partition count (0 when the cluster says it does not exist), waiting
        up to request.timeout.ms for metadata of topics not seen yet."""
        self._metadata.add_topics(topics)
        deadline = time.monotonic() + self._request_timeout_s
        while True:
            version = self._notifier.version
            cluster = self._metadata.cluster
            unknown = [t for t in topics if t not in cluster.topics and t not in cluster.missing]
            remaining = deadline - time.monotonic()
            if not unknown or remaining <= 0:
                return {
                    t: cluster.topics[t].num_partitions if t in cluster.topics else 0
                    for t in topics
                }
            self._metadata.request_update()
            await self._notifier.wait_async(version, remaining)

    # -- heartbeats -------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeats, the max.poll.interval.ms check and the leader's metadata watch."""
        while True:
            now = time.monotonic()
            timeout_s: float | None = self._heartbeat_interval_s
            if self.fatal_error is None and self.member_id and self.generation_id >= 0:
                if not self._joining:
                    await self._check_poll_interval(now)
                    self._watch_metadata()
                if self.generation_id >= 0 and not self._joining:
                    if now >= self._next_heartbeat:
                        await self._heartbeat()
                        continue
                    timeout_s = self._next_heartbeat - now
            await self._wakeup.wait(timeout_s)

    async def _check_poll_interval(self, now: float) -> None:
        if (now - self.last_poll) * 1000 <= self._max_poll_interval_ms:
            return
        _log.warning(
            "group %s: poll was not called for more than max.poll.interval.ms=%d; leaving the "
            "group so that its partitions go to members that make progress",
            self.group_id,
            self._max_poll_interval_ms,
        )
        await self.leave("consumer poll timeout has expired")
        self._reset(member_id=not self.is_static, reason="max.poll.interval.ms expired")

    def _watch_metadata(self) -> None:
        if not self.is_leader or self.state is not MemberState.STABLE or self.rejoin_needed:
            return
        cluster = self._metadata.cluster
        for topic, count in self._assigned_counts.items():
            info = cluster.topics.get(topic)
            now_count = info.num_partitions if info is not None else count
            if topic in cluster.missing:
                now_count = 0
            if now_count != count:
                _log.info(
                    "group %s: %s now has %d partitions (assigned with %d); rebalancing",
                    self.group_id,
                    topic,
                    now_count,
                    count,
                )
                self.rejoin_needed = True
                self._notifier.notify()
                return

    async def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self._heartbeat_interval_s
        request = group_pb2.HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )
        generation = self.generation_id
        try:
            response = await self._call(
                "Heartbeat", request, min(self._request_timeout_s, self._session_timeout_ms / 1000)
            )
        except _Retry as retry:
            if retry.forget_coordinator:
                self._forget_coordinator()
            self._coordinator_backoff()
            return
        if self._joining or generation != self.generation_id:
            return  # a join overtook this heartbeat; its answer is about the old generation
        code = error_code(response.error_code)
        if code is ErrorCode.NONE:
            self._coordinator_failures = 0
        elif code in COORDINATOR_ERRORS:
            self._forget_coordinator(hinted_coordinator((code,), response.coordinator))
            self._coordinator_backoff()
        elif code is ErrorCode.REBALANCE_IN_PROGRESS:
            if not self.rejoin_needed:
                _log.info("group %s: rebalance in progress; rejoining", self.group_id)
                self.rejoin_needed = True
                self._notifier.notify()
        elif code is ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset(member_id=True, reason="the coordinator no longer knows this member")
        elif code is ErrorCode.ILLEGAL_GENERATION:
            self._reset(member_id=False, reason="the generation is no longer current")
        elif code is ErrorCode.FENCED_INSTANCE_ID:
            self._fatal(FencedInstanceIdError(self.group_instance_id or "", "Heartbeat"))
        else:
            _log.warning("group %s: heartbeat answered %s", self.group_id, code.name)

    def _coordinator_backoff(self) -> None:
        self._coordinator_failures += 1
        self._next_heartbeat = time.monotonic() + min(
            backoff_s(self._config.retry_backoff, self._coordinator_failures),
            self._heartbeat_interval_s,
        )

    # -- offsets ----------------------------------------------------------------------------

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition], deadline: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None: nothing committed)."""
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata | None]:
            response = await self._call(
                "FetchOffsets",
                group_pb2.FetchOffsetsRequest(
                    group_id=self.group_id,
                    # read_committed: answered UNSTABLE_OFFSET_COMMIT (retried) while a
                    # transaction's offsets for a partition are pending, as Kafka's consumer.
                    require_stable=self._config.isolation_level
                    == common_pb2.ISOLATION_LEVEL_READ_COMMITTED,
                    partitions=[
                        common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                        for tp in wanted
                    ],
                ),
                self._request_timeout_s,
            )
            code = error_code(response.error_code)
            self._check_coordinator_error(code, response.coordinator)
            if code.retriable:
                raise _Retry(f"FetchOffsets answered {code.name}")
            if code is not ErrorCode.NONE:
                raise api_error(code, f"FetchOffsets({self.group_id}): {response.error_message}")
            result: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
            for p in response.partitions:
                tp = TopicPartition(p.topic, p.partition)
                part_code = error_code(p.error_code)
                if part_code.retriable:
                    raise _Retry(f"FetchOffsets answered {part_code.name} for {tp}")
                if part_code is not ErrorCode.NONE:
                    raise api_error(
                        part_code, f"committed offset of {tp.topic}-{tp.partition}: {part_code}"
                    )
                if tp in result and p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch
                    result[tp] = OffsetAndMetadata(
                        p.committed_offset, p.metadata, epoch if epoch >= 0 else None
                    )
            return result

        return await self._with_retries("FetchOffsets", attempt, deadline)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        deadline: float,
        *,
        group_managed: bool,
    ) -> None:
        """Commit ``offsets`` (the next offsets to read) and return when the coordinator has
        acknowledged them. With ``group_managed`` the commit carries the member id and
        generation and fails with CommitFailedError when they are no longer current."""
        if not offsets:
            return
        if self.fatal_error is not None:
            raise self.fatal_error
        if group_managed and (self.generation_id < 0 or self._joining):
            raise CommitFailedError(
                f"group {self.group_id} is rebalancing: the offsets cannot be committed now; "
                "the partitions may go to another member"
            )
        generation = self.generation_id if group_managed else -1
        member_id = self.member_id if group_managed else ""
        request = group_pb2.CommitOffsetsRequest(
            group_id=self.group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=self.group_instance_id if group_managed else None,
            partitions=offset_commit_partitions(offsets),
        )

        async def attempt() -> None:
            response = await self._call("CommitOffsets", request, self._request_timeout_s)
            codes = {error_code(p.error_code) for p in response.partitions}
            if codes & COORDINATOR_ERRORS:
                self._forget_coordinator(hinted_coordinator(codes, response.coordinator))
                raise _Retry("coordinator moved: " + ", ".join(c.name for c in codes))
            self._raise_commit_errors(response, generation)

        await self._with_retries("CommitOffsets", attempt, deadline)

    def _raise_commit_errors(
        self, response: group_pb2.CommitOffsetsResponse, generation: int
    ) -> None:
        failed = [p for p in response.partitions if p.error_code != 0]
        if not failed:
            return
        codes = {error_code(p.error_code) for p in failed}
        if ErrorCode.FENCED_INSTANCE_ID in codes:
            raise self._fatal(FencedInstanceIdError(self.group_instance_id or "", "CommitOffsets"))
        if codes & _COMMIT_FAILED:
            if generation == self.generation_id:
                self._reset(
                    member_id=ErrorCode.UNKNOWN_MEMBER_ID in codes,
                    reason="an offset commit was refused with "
                    + ", ".join(c.name for c in codes & _COMMIT_FAILED),
                )
            raise CommitFailedError(
                f"group {self.group_id} rebalanced or removed this member "
                f"({', '.join(sorted(c.name for c in codes))}); the partitions may already "
                "belong to another member, so these offsets were not committed"
            )
        retriable = [c for c in codes if c.retriable]
        if retriable and len(retriable) == len(codes):
            raise _Retry("commit answered " + ", ".join(c.name for c in retriable))
        first = failed[0]
        code = error_code(first.error_code)
        raise api_error(
            code,
            f"commit of {first.topic}-{first.partition}: {first.error_message or code.name}",
        )

    # -- leaving ----------------------------------------------------------------------------

    async def leave(self, reason: str) -> None:
        """LeaveGroup for a dynamic member (a static one stays until its session expires, as
        in Kafka, so a restart does not rebalance); bounded by request.timeout.ms."""
        member_id = self.member_id
        if member_id and not self.is_static and self.fatal_error is None:
            request = group_pb2.LeaveGroupRequest(
                group_id=self.group_id,
                members=[group_pb2.LeavingMember(member_id=member_id, reason=reason)],
            )
            try:
                async with asyncio.timeout(self._request_timeout_s):
                    response = await self._call("LeaveGroup", request, self._request_timeout_s)
                code = error_code(response.error_code)
                if code is not ErrorCode.NONE:
                    _log.info("group %s: LeaveGroup answered %s", self.group_id, code.name)
            except (_Retry, TimeoutError, ApiError) as error:
                _log.info("group %s: could not leave cleanly: %s", self.group_id, error)
            self.member_id = ""
        self.generation_id = -1
        self.state = MemberState.UNJOINED
        self.assignment = []
        self.rejoin_needed = True
