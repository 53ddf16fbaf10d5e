"""One consumer group: Kafka's classic group state machine.

States (Kafka's names): EMPTY (no members; offsets may remain), PREPARING_REBALANCE (waiting
for every member to rejoin, bounded by the largest rebalance timeout), COMPLETING_REBALANCE
(generation chosen, waiting for the leader's assignment), STABLE, DEAD (deleted, or its
__consumer_offsets partition moved away).

The machine is synchronous and single-threaded (it runs on the event loop): JoinGroup and
SyncGroup are answered through callbacks because their answers wait for other members, and
every wait is a timer from ``Timers``, never a polling loop. Durability is the manager's job:
``on_change`` is called whenever the persisted shape of the group (generation, members,
assignment) changes, and the manager writes it to __consumer_offsets.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from brook.client.group.protocol import CONSUMER_PROTOCOL_TYPE, decode_subscription
from brook.errors import ErrorCode
from brook_group_coordinator.timers import TimerHandle, Timers

__all__ = [
    "Group",
    "GroupLimits",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "JoinedMember",
    "Member",
    "SyncResult",
]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupLimits:
    session_timeout_ms_min: int
    session_timeout_ms_max: int
    initial_rebalance_delay_ms: int
    members_max: int


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    # (assignor name, opaque metadata), in the member's order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str = ""
    protocol_name: str = ""
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()
    message: str = ""


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str = ""
    protocol_name: str = ""
    assignment: bytes = b""
    message: str = ""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    session_timer: TimerHandle | None = field(default=None, repr=False)

    def metadata_for(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}


def _subscription_key(protocol_type: str, metadata: bytes) -> object:
    """What of a member's metadata is its subscription (see Group._subscription_changed):
    a consumer's topics and rack, or, for other protocol types and unreadable bytes, the bytes."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return metadata
    try:
        subscription = decode_subscription(metadata)
    except ValueError:
        return metadata
    return (sorted(set(subscription.topics)), subscription.rack_id)


def _new_member_id(prefix: str) -> str:
    # Kafka's shape: the client id (or instance id) and a random suffix.
    return f"{prefix or 'member'}-{uuid.uuid4()}"


class Group:
    """One group's members, generation and state. Not thread-safe: call it from one thread."""

    def __init__(
        self,
        group_id: str,
        limits: GroupLimits,
        timers: Timers,
        on_change: Callable[[Group], None],
    ) -> None:
        self.group_id = group_id
        self._limits = limits
        self._timers = timers
        self._on_change = on_change
        self.state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type = ""
        self.protocol_name = ""
        self.leader_id = ""
        self.members: dict[str, Member] = {}
        self._static_members: dict[str, str] = {}
        # Dynamic members told MEMBER_ID_REQUIRED that have not joined with their id yet.
        self._pending: dict[str, TimerHandle] = {}
        self._rebalance_timer: TimerHandle | None = None
        self._initial_delay_remaining_ms = 0
        self._initial_delay_active = False
        self._new_member_added = False
        # When the group last changed state: retention of an empty group's offsets counts
        # from when it became empty (Kafka's currentStateTimestamp).
        self.state_timestamp_ms = timers.now_ms()

    # -- queries ----------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return not self.members

    def member_for_instance(self, group_instance_id: str) -> Member | None:
        member_id = self._static_members.get(group_instance_id)
        return self.members.get(member_id) if member_id is not None else None

    # -- JoinGroup --------------------------------------------------------------------------

    def join(self, request: JoinRequest, respond: JoinCallback) -> None:
        error = self._check_join(request)
        if error is not None:
            respond(JoinResult(error[0], member_id=request.member_id, message=error[1]))
            return
        if not request.member_id:
            if request.group_instance_id is not None:
                self._join_static_unknown(request, respond)
            else:
                self._join_dynamic_unknown(request, respond)
            return
        if request.member_id in self._pending:
            if len(self.members) >= self._limits.members_max:
                self._drop_pending(request.member_id)
                respond(_full(request.member_id))
                return
            self._drop_pending(request.member_id)
            self._add_member(request, request.member_id, respond)
            return
        self._join_known(request, respond)

    def _check_join(self, request: JoinRequest) -> tuple[ErrorCode, str] | None:
        limits = self._limits
        if not (
            limits.session_timeout_ms_min
            <= request.session_timeout_ms
            <= limits.session_timeout_ms_max
        ):
            return (
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session_timeout_ms {request.session_timeout_ms} is outside "
                f"[{limits.session_timeout_ms_min}, {limits.session_timeout_ms_max}] "
                "(group.min.session.timeout.ms, group.max.session.timeout.ms)",
            )
        if request.rebalance_timeout_ms <= 0:
            return ErrorCode.INVALID_REQUEST, "rebalance_timeout_ms must be positive"
        if self.state is GroupState.DEAD:
            # The group was deleted or its partition moved: the client must find it again.
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group is being unloaded or deleted"
        if not request.protocol_type or not request.protocols:
            return (
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                "a join needs a protocol type and at least one protocol",
            )
        if len({name for name, _ in request.protocols}) != len(request.protocols):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol names repeat"
        if self.members:
            if request.protocol_type != self.protocol_type:
                return (
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"the group's protocol type is {self.protocol_type!r}, "
                    f"not {request.protocol_type!r}",
                )
            others = [m for m in self.members.values() if m.member_id != request.member_id]
            if others:
                common = set.intersection(*(m.protocol_names() for m in others))
                if not common & {name for name, _ in request.protocols}:
                    return (
                        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                        f"no protocol in common with the group's members ({sorted(common)})",
                    )
        if request.member_id and request.group_instance_id is not None:
            known = self._static_members.get(request.group_instance_id)
            if known is not None and known != request.member_id:
                return (
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"instance {request.group_instance_id!r} belongs to another member now",
                )
        if (
            request.member_id
            and request.member_id not in self.members
            and request.member_id not in self._pending
        ):
            return ErrorCode.UNKNOWN_MEMBER_ID, f"no member {request.member_id!r} in the group"
        return None

    def _join_dynamic_unknown(self, request: JoinRequest, respond: JoinCallback) -> None:
        if len(self.members) + len(self._pending) >= self._limits.members_max:
            respond(_full(""))
            return
        member_id = _new_member_id(request.client_id)
        # A pending id expires like a session, so clients that never come back cost nothing.
        self._pending[member_id] = self._timers.call_later(
            request.session_timeout_ms, lambda: self._drop_pending(member_id)
        )
        respond(
            JoinResult(
                ErrorCode.MEMBER_ID_REQUIRED,
                member_id=member_id,
                message="join again with this member id",
            )
        )

    def _drop_pending(self, member_id: str) -> None:
        timer = self._pending.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        self._maybe_complete_join()

    def _join_static_unknown(self, request: JoinRequest, respond: JoinCallback) -> None:
        assert request.group_instance_id is not None
        existing = self.member_for_instance(request.group_instance_id)
        if existing is None:
            if len(self.members) + len(self._pending) >= self._limits.members_max:
                respond(_full(""))
                return
            self._add_member(request, _new_member_id(request.group_instance_id), respond)
            return
        # A restarted static member takes its old place: the old incarnation is fenced.
        old_id = existing.member_id
        new_id = _new_member_id(request.group_instance_id)
        _fence(existing)
        old_protocols = existing.protocols
        del self.members[old_id]
        existing.member_id = new_id
        existing.client_id = request.client_id
        existing.client_host = request.client_host
        existing.session_timeout_ms = request.session_timeout_ms
        existing.rebalance_timeout_ms = request.rebalance_timeout_ms
        existing.protocols = request.protocols
        self.members[new_id] = existing
        self._static_members[request.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if self.state is GroupState.PREPARING_REBALANCE:
            existing.awaiting_join = respond
            self._maybe_complete_join()
            return
        if self.state is GroupState.STABLE and not self._subscription_changed(
            old_protocols, request.protocols
        ):
            # The point of static membership: no rebalance. The leader keeps the current
            # assignment (skip_assignment) instead of recomputing it.
            self._restart_session(existing)
            self._on_change(self)
            respond(
                self._join_result(existing, skip_assignment=existing.member_id == self.leader_id)
            )
            return
        # Otherwise a rebalance: while COMPLETING_REBALANCE the leader may already hold the
        # member list with the old member id, and would assign the new one nothing (Kafka
        # rebalances here too).
        existing.awaiting_join = respond
        self._prepare_rebalance()

    def subscribed_topics(self) -> set[str]:
        """The topics the members' subscriptions name (consumer protocol groups; none for
        other protocol types, whose metadata Brook cannot read)."""
        topics: set[str] = set()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return topics
        for member in self.members.values():
            for _, metadata in member.protocols:
                try:
                    topics.update(decode_subscription(metadata).topics)
                except ValueError:
                    continue
        return topics

    def _subscription_changed(
        self, old: tuple[tuple[str, bytes], ...], new: tuple[tuple[str, bytes], ...]
    ) -> bool:
        """Whether a restarted static member's protocols (already in place) change what the
        group agreed on: the protocol the group would select, or the subscription in its
        metadata. For consumers that is the topics and rack, not the owned partitions and
        generation a cooperative member's metadata carries, nor the assignor's user data:
        every restart changes those, and rebalancing on them would defeat static membership."""
        if self._select_protocol() != self.protocol_name:
            return True
        name = self.protocol_name
        before = dict(old).get(name, b"")
        after = dict(new).get(name, b"")
        return _subscription_key(self.protocol_type, before) != _subscription_key(
            self.protocol_type, after
        )

    def _join_known(self, request: JoinRequest, respond: JoinCallback) -> None:
        member = self.members[request.member_id]
        changed = member.protocols != request.protocols
        if member.awaiting_join is not None:
            # A retried join replaces the earlier one, which is told to retry (Kafka does the
            # same with its older callback).
            member.awaiting_join(
                JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id)
            )
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.protocols = request.protocols
        member.client_id = request.client_id or member.client_id
        member.client_host = request.client_host or member.client_host
        if self.state is GroupState.PREPARING_REBALANCE:
            member.awaiting_join = respond
            self._maybe_complete_join()
        elif self.state is GroupState.COMPLETING_REBALANCE and not changed:
            # The member lost the join answer; it gets the same generation again.
            respond(self._join_result(member, skip_assignment=False))
        elif self.state is GroupState.STABLE and not changed and member.member_id != self.leader_id:
            respond(self._join_result(member, skip_assignment=False))
        else:
            # A follower with new protocols, or the leader (which rejoins to force a
            # rebalance, e.g. when its subscription's metadata changed).
            member.awaiting_join = respond
            self._prepare_rebalance()

    def _add_member(self, request: JoinRequest, member_id: str, respond: JoinCallback) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            awaiting_join=respond,
        )
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self._static_members[request.group_instance_id] = member_id
        self._new_member_added = True
        if self.state in (
            GroupState.EMPTY,
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
        ):
            self._prepare_rebalance()
        else:
            self._maybe_complete_join()

    # -- rebalance --------------------------------------------------------------------------

    def _prepare_rebalance(self) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._fail_syncs(ErrorCode.REBALANCE_IN_PROGRESS)
        rebalance_timeout_ms = max(
            (m.rebalance_timeout_ms for m in self.members.values()), default=0
        )
        was_empty = self.state is GroupState.EMPTY
        self._set_state(GroupState.PREPARING_REBALANCE)
        self._cancel_rebalance_timer()
        if was_empty and self._limits.initial_rebalance_delay_ms > 0:
            # Kafka's initial delayed join: a group starting up waits for more members,
            # extending the wait while they keep arriving, but never past the rebalance
            # timeout, so that N starting consumers cause one rebalance, not N.
            delay_ms = min(self._limits.initial_rebalance_delay_ms, rebalance_timeout_ms)
            self._initial_delay_remaining_ms = rebalance_timeout_ms - delay_ms
            self._initial_delay_active = True
            self._new_member_added = False
            self._rebalance_timer = self._timers.call_later(delay_ms, self._initial_delay_expired)
            return
        self._initial_delay_active = False
        self._rebalance_timer = self._timers.call_later(rebalance_timeout_ms, self._complete_join)
        self._maybe_complete_join()

    def _initial_delay_expired(self) -> None:
        self._rebalance_timer = None
        if self._new_member_added and self._initial_delay_remaining_ms > 0:
            delay_ms = min(
                self._limits.initial_rebalance_delay_ms, self._initial_delay_remaining_ms
            )
            self._initial_delay_remaining_ms -= delay_ms
            self._new_member_added = False
            self._rebalance_timer = self._timers.call_later(delay_ms, self._initial_delay_expired)
            return
        self._initial_delay_active = False
        self._complete_join()

    def _maybe_complete_join(self) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE or self._initial_delay_active:
            return
        if self._pending:
            return
        if all(m.awaiting_join is not None for m in self.members.values()):
            self._complete_join()

    def _complete_join(self) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        self._cancel_rebalance_timer()
        self._initial_delay_active = False
        for member in [m for m in self.members.values() if m.awaiting_join is None]:
            self._remove(member)
        self.generation_id += 1
        for member in self.members.values():
            member.assignment = b""
        if not self.members:
            self.protocol_name = ""
            self.leader_id = ""
            self._set_state(GroupState.EMPTY)
            self._on_change(self)
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._set_state(GroupState.COMPLETING_REBALANCE)
        for member in list(self.members.values()):
            respond = member.awaiting_join
            member.awaiting_join = None
            self._restart_session(member)
            if respond is not None:
                respond(self._join_result(member, skip_assignment=False))

    def _select_protocol(self) -> str:
        members = list(self.members.values())
        candidates = set.intersection(*(m.protocol_names() for m in members))
        votes: dict[str, int] = {}
        for member in members:
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        # Ties go to the leader's (or first member's) preference, so the choice is stable.
        first = self.members.get(self.leader_id) or members[0]
        order = [name for name, _ in first.protocols if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def _join_result(self, member: Member, *, skip_assignment: bool) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        members = (
            tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                for m in self.members.values()
            )
            if is_leader
            else ()
        )
        return JoinResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            skip_assignment=skip_assignment,
            members=members,
        )

    # -- SyncGroup --------------------------------------------------------------------------

    def sync(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str,
        protocol_name: str,
        assignments: Mapping[str, bytes],
        respond: SyncCallback,
    ) -> None:
        error = self._check_member(member_id, group_instance_id)
        if error is None and generation_id != self.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and (
            (protocol_type and protocol_type != self.protocol_type)
            or (protocol_name and protocol_name != self.protocol_name)
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is None and self.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            respond(SyncResult(error))
            return
        member = self.members[member_id]
        if self.state is GroupState.STABLE:
            respond(self._sync_result(member))
            return
        # COMPLETING_REBALANCE
        if member.awaiting_sync is not None:
            member.awaiting_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = respond
        if member_id == self.leader_id:
            for m in self.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            self._set_state(GroupState.STABLE)
            self._on_change(self)
            for m in self.members.values():
                waiting = m.awaiting_sync
                m.awaiting_sync = None
                if waiting is not None:
                    waiting(self._sync_result(m))

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.NONE,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            assignment=member.assignment,
        )

    def _fail_syncs(self, error: ErrorCode) -> None:
        for member in self.members.values():
            member.assignment = b""
            waiting = member.awaiting_sync
            member.awaiting_sync = None
            if waiting is not None:
                waiting(SyncResult(error))

    # -- Heartbeat, LeaveGroup, commits -----------------------------------------------------

    def _check_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group_instance_id is not None:
            known = self._static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def heartbeat(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self._check_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member = self.members[member_id]
        self._restart_session(member)
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group_instance_id is not None:
            member = self.member_for_instance(group_instance_id)
            if member is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            # An empty member id with an instance id is an admin removing a static member.
            if member_id and member.member_id != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        else:
            if member_id in self._pending:
                self._drop_pending(member_id)
                return ErrorCode.NONE
            found = self.members.get(member_id)
            if found is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member = found
        self._remove_and_rebalance(member)
        return ErrorCode.NONE

    def check_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether an offset commit from this member may be written (Kafka's order of checks).
        A commit with generation -1 and no member id is a manual-assignment commit, allowed
        only while the group has no members."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and not member_id and self.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if group_instance_id is not None:
            known = self._static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        # A commit is proof of life, as in Kafka.
        self._restart_session(self.members[member_id])
        return ErrorCode.NONE

    def check_txn_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether a transactional offset commit may be written (Kafka's TxnOffsetCommit,
        KIP-447): the member and generation are checked only when the request names them, a
        rebalance in progress does not refuse it, and it is no proof of the member's life."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.NONE
        if group_instance_id is not None:
            known = self._static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        elif member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # -- sessions and removal ---------------------------------------------------------------

    def _restart_session(self, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member_id = member.member_id
        member.session_timer = self._timers.call_later(
            member.session_timeout_ms, lambda: self._session_expired(member, member_id)
        )

    def _session_expired(self, member: Member, member_id: str) -> None:
        member.session_timer = None
        if self.members.get(member_id) is not member:
            return
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            # A member waiting on us is alive by definition; the rebalance timeout or the
            # leader's own session bounds that wait.
            self._restart_session(member)
            return
        self._remove_and_rebalance(member)

    def _remove(self, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        _fence(member, ErrorCode.UNKNOWN_MEMBER_ID)
        self.members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            if self._static_members.get(member.group_instance_id) == member.member_id:
                del self._static_members[member.group_instance_id]

    def _remove_and_rebalance(self, member: Member) -> None:
        self._remove(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance()
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()

    def transition_to_dead(self, error: ErrorCode) -> None:
        """Unloads or deletes the group: every waiting member gets ``error`` (the client then
        looks for the coordinator again) and every timer is cancelled."""
        self._cancel_rebalance_timer()
        for timer in self._pending.values():
            timer.cancel()
        self._pending.clear()
        for member in list(self.members.values()):
            if member.session_timer is not None:
                member.session_timer.cancel()
                member.session_timer = None
            _fence(member, error)
        self._set_state(GroupState.DEAD)

    def _cancel_rebalance_timer(self) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    def _set_state(self, state: GroupState) -> None:
        self.state = state
        self.state_timestamp_ms = self._timers.now_ms()

    # -- loading ----------------------------------------------------------------------------

    def restore(
        self,
        *,
        generation_id: int,
        protocol_type: str,
        protocol_name: str,
        leader_id: str,
        members: list[Member],
        state_timestamp_ms: int,
    ) -> None:
        """Takes the persisted shape of the group after a load: STABLE with its members, whose
        sessions start now (they must heartbeat to this coordinator to stay), or EMPTY."""
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members = {m.member_id: m for m in members}
        self._static_members = {
            m.group_instance_id: m.member_id for m in members if m.group_instance_id is not None
        }
        self.state = GroupState.STABLE if members else GroupState.EMPTY
        self.state_timestamp_ms = state_timestamp_ms
        for member in members:
            self._restart_session(member)


def _fence(member: Member, error: ErrorCode = ErrorCode.FENCED_INSTANCE_ID) -> None:
    join, sync = member.awaiting_join, member.awaiting_sync
    member.awaiting_join = None
    member.awaiting_sync = None
    if join is not None:
        join(JoinResult(error, member_id=member.member_id))
    if sync is not None:
        sync(SyncResult(error))


def _full(member_id: str) -> JoinResult:
    return JoinResult(
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        member_id=member_id,
        message="the group has reached group.max.size members",
    )
