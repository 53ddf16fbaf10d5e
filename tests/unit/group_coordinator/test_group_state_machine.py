"""The classic group state machine on a manual clock: joins, generations, sync, heartbeats,
leaving, session and rebalance timeouts, the initial rebalance delay, static membership and
Kafka's errors."""

from __future__ import annotations

from brook_group_coordinator.group import (
    Group,
    GroupLimits,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from manual_timers import ManualTimers

from brook.client.group.protocol import Subscription, encode_subscription
from brook.client.types import TopicPartition
from brook.errors import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 30_000
INITIAL_DELAY_MS = 3_000
LIMITS = GroupLimits(
    session_timeout_ms_min=6_000,
    session_timeout_ms_max=60_000,
    initial_rebalance_delay_ms=INITIAL_DELAY_MS,
    members_max=10,
)


def state_of(group: Group) -> GroupState:
    """Read through a call, so the type checker does not narrow the state across actions."""
    return group.state


class Harness:
    def __init__(self, limits: GroupLimits = LIMITS) -> None:
        self.timers = ManualTimers()
        self.changes = 0
        self.group = Group("g", limits, self.timers, self._changed)

    def _changed(self, _: Group) -> None:
        self.changes += 1

    def join(
        self,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub"),),
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
    ) -> list[JoinResult]:
        answers: list[JoinResult] = []
        self.group.join(
            JoinRequest(
                member_id=member_id,
                group_instance_id=instance,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=REBALANCE_MS,
                protocol_type=protocol_type,
                protocols=protocols,
                client_id="c",
            ),
            answers.append,
        )
        return answers

    def advance_until_answered(self, answers: list[JoinResult]) -> None:
        """Moves time in initial-delay steps until the join is answered (session timers,
        which start at the answer, are not run past)."""
        for _ in range(REBALANCE_MS // INITIAL_DELAY_MS + 1):
            if answers:
                return
            self.timers.advance(INITIAL_DELAY_MS)
        raise AssertionError("the join was not answered within the rebalance timeout")

    def new_member(self) -> str:
        """A dynamic member's id, after the MEMBER_ID_REQUIRED round trip."""
        (first,) = self.join()
        assert first.error is ErrorCode.MEMBER_ID_REQUIRED
        return first.member_id

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None
    ) -> list[SyncResult]:
        answers: list[SyncResult] = []
        self.group.sync(member_id, None, generation, "", "", assignments or {}, answers.append)
        return answers

    def stable_group(self, count: int) -> list[str]:
        """`count` dynamic members in a STABLE group, the first one the leader."""
        ids = [self.new_member() for _ in range(count)]
        waits = [self.join(i) for i in ids]
        self.advance_until_answered(waits[0])
        results = [w[0] for w in waits]
        generation = results[0].generation_id
        leader = results[0].leader_id
        for member_id in ids:
            if member_id != leader:
                self.sync(member_id, generation)
        self.sync(leader, generation, {i: i.encode() for i in ids})
        assert self.group.state is GroupState.STABLE
        return [leader, *[i for i in ids if i != leader]]


def test_first_join_without_member_id_is_told_member_id_required() -> None:
    h = Harness()
    (answer,) = h.join()
    assert answer.error is ErrorCode.MEMBER_ID_REQUIRED
    assert answer.member_id
    assert state_of(h.group) is GroupState.EMPTY


def test_initial_rebalance_delay_gathers_members_into_one_generation() -> None:
    h = Harness()
    a, b = h.new_member(), h.new_member()
    wait_a = h.join(a)
    h.timers.advance(INITIAL_DELAY_MS - 1)
    assert wait_a == [] and state_of(h.group) is GroupState.PREPARING_REBALANCE
    wait_b = h.join(b)
    # B arrived during the delay: the delay is extended once more.
    h.timers.advance(INITIAL_DELAY_MS)
    assert wait_a == [] or wait_a[0].generation_id == 1
    h.timers.advance(INITIAL_DELAY_MS)
    assert wait_a[0].error is ErrorCode.NONE and wait_b[0].error is ErrorCode.NONE
    assert wait_a[0].generation_id == wait_b[0].generation_id == 1
    leader = wait_a[0].leader_id
    leader_answer = wait_a[0] if leader == a else wait_b[0]
    assert {m.member_id for m in leader_answer.members} == {a, b}
    follower_answer = wait_b[0] if leader == a else wait_a[0]
    assert follower_answer.members == ()
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE


def test_leader_sync_hands_every_member_its_assignment_and_stabilises() -> None:
    h = Harness()
    a, b = h.new_member(), h.new_member()
    wait = h.join(a)
    h.join(b)
    h.advance_until_answered(wait)
    generation = h.group.generation_id
    leader = h.group.leader_id
    follower = b if leader == a else a
    follower_sync = h.sync(follower, generation)
    assert follower_sync == []
    leader_sync = h.sync(leader, generation, {a: b"pa", b: b"pb"})
    assert state_of(h.group) is GroupState.STABLE
    assert follower_sync[0].assignment == (b"pb" if follower == b else b"pa")
    assert leader_sync[0].assignment == (b"pa" if leader == a else b"pb")
    assert follower_sync[0].protocol_name == "range"
    assert h.changes >= 1


def test_heartbeat_with_old_generation_is_illegal_generation() -> None:
    h = Harness()
    leader, _ = h.stable_group(2)
    assert h.group.heartbeat(leader, None, h.group.generation_id) is ErrorCode.NONE
    assert (
        h.group.heartbeat(leader, None, h.group.generation_id - 1) is ErrorCode.ILLEGAL_GENERATION
    )
    assert h.group.heartbeat("nobody", None, h.group.generation_id) is ErrorCode.UNKNOWN_MEMBER_ID


def test_new_member_makes_existing_members_heartbeat_rebalance_in_progress() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    generation = h.group.generation_id
    newcomer = h.new_member()
    wait_new = h.join(newcomer)
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
    assert h.group.heartbeat(follower, None, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.sync(follower, generation)[0].error is ErrorCode.REBALANCE_IN_PROGRESS
    wait_leader, wait_follower = h.join(leader), h.join(follower)
    # Everyone rejoined: the join completes at once, without waiting for the timeout.
    for wait in (wait_new, wait_leader, wait_follower):
        assert wait[0].error is ErrorCode.NONE
        assert wait[0].generation_id == generation + 1


def test_member_that_does_not_rejoin_within_rebalance_timeout_is_removed() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    generation = h.group.generation_id
    wait_leader = h.join(leader)  # the leader forces a rebalance
    step_ms = SESSION_MS // 2
    # The follower keeps its session alive with heartbeats but never rejoins.
    for _ in range(REBALANCE_MS // step_ms - 1):
        h.timers.advance(step_ms)
        assert h.group.heartbeat(follower, None, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    h.timers.advance(step_ms - 1)
    assert wait_leader == []
    h.timers.advance(1)
    assert wait_leader[0].generation_id == generation + 1
    assert set(h.group.members) == {leader}
    assert h.group.heartbeat(follower, None, generation + 1) is ErrorCode.UNKNOWN_MEMBER_ID


def test_member_without_heartbeats_expires_after_session_timeout_and_group_rebalances() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    h.timers.advance(SESSION_MS // 2)
    assert h.group.heartbeat(leader, None, h.group.generation_id) is ErrorCode.NONE
    h.timers.advance(SESSION_MS // 2 - 1)
    assert follower in h.group.members
    h.timers.advance(1)
    assert follower not in h.group.members
    assert h.group.heartbeat(leader, None, h.group.generation_id) is (
        ErrorCode.REBALANCE_IN_PROGRESS
    )
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE


def test_leave_removes_member_and_last_leave_empties_group() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    assert h.group.leave(follower, None) is ErrorCode.NONE
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
    assert h.group.leave(follower, None) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.group.leave(leader, None) is ErrorCode.NONE
    assert state_of(h.group) is GroupState.EMPTY
    assert h.timers.live_timers() == 0


def test_session_timeout_outside_bounds_is_invalid_session_timeout() -> None:
    h = Harness()
    (low,) = h.join(session_ms=LIMITS.session_timeout_ms_min - 1)
    (high,) = h.join(session_ms=LIMITS.session_timeout_ms_max + 1)
    assert low.error is high.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.group.members == {}


def test_join_with_unknown_member_id_is_unknown_member_id() -> None:
    (answer,) = Harness().join("made-up")
    assert answer.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_protocols_in_no_common_with_group_are_inconsistent_group_protocol() -> None:
    h = Harness()
    h.stable_group(1)
    member = h.new_member()
    (answer,) = h.join(member, protocols=(("roundrobin", b""),))
    assert answer.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    (other_type,) = h.join(protocol_type="connect")
    assert other_type.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_chosen_is_the_one_every_member_supports() -> None:
    h = Harness()
    a, b = h.new_member(), h.new_member()
    h.join(a, protocols=(("sticky", b"1"), ("range", b"2")))
    wait = h.join(b, protocols=(("range", b"3"),))
    h.advance_until_answered(wait)
    assert wait[0].protocol_name == "range"


def test_group_max_size_refuses_extra_member() -> None:
    h = Harness(GroupLimits(6_000, 60_000, 0, members_max=1))
    h.join(h.new_member())
    (answer,) = h.join()
    assert answer.error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_static_member_restart_keeps_generation_and_assignment_without_rebalance() -> None:
    h = Harness()
    wait = h.join(instance="i-1")
    wait_other = h.join(instance="i-2")
    h.advance_until_answered(wait)
    generation = h.group.generation_id
    leader = wait[0].leader_id
    ids = [wait[0].member_id, wait_other[0].member_id]
    h.sync(leader, generation, {i: f"assigned-{i}".encode() for i in ids})
    follower = next(i for i in ids if i != leader)
    follower_instance = "i-1" if follower == wait[0].member_id else "i-2"
    # The follower restarts: it has lost its member id and joins with only its instance id.
    (rejoin,) = h.join(instance=follower_instance)
    assert rejoin.error is ErrorCode.NONE
    assert rejoin.generation_id == generation
    assert state_of(h.group) is GroupState.STABLE
    (sync,) = h.sync(rejoin.member_id, generation)
    assert sync.assignment == f"assigned-{follower}".encode()
    # The old incarnation is fenced.
    assert (
        h.group.heartbeat(follower, follower_instance, generation) is ErrorCode.FENCED_INSTANCE_ID
    )


def test_restarted_static_leader_is_told_to_skip_assignment() -> None:
    h = Harness()
    wait = h.join(instance="i-1")
    h.advance_until_answered(wait)
    h.sync(wait[0].member_id, h.group.generation_id, {wait[0].member_id: b"x"})
    (rejoin,) = h.join(instance="i-1")
    assert rejoin.skip_assignment and rejoin.leader_id == rejoin.member_id
    assert state_of(h.group) is GroupState.STABLE


def test_static_member_restart_during_rebalance_fences_old_pending_join() -> None:
    h = Harness()
    wait = h.join(instance="i-1")
    rejoin = h.join(instance="i-1")
    assert rejoin == []  # still waiting for the initial delay
    assert wait[0].error is ErrorCode.FENCED_INSTANCE_ID


def test_leave_with_other_member_id_for_instance_is_fenced_instance_id() -> None:
    h = Harness()
    wait = h.join(instance="i-1")
    h.advance_until_answered(wait)
    assert h.group.leave("stale-id", "i-1") is ErrorCode.FENCED_INSTANCE_ID
    assert h.group.leave(wait[0].member_id, "i-1") is ErrorCode.NONE


def test_commit_checks_follow_kafka() -> None:
    h = Harness()
    assert h.group.check_commit("", None, -1) is ErrorCode.NONE
    leader, follower = h.stable_group(2)
    generation = h.group.generation_id
    assert h.group.check_commit("", None, -1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.group.check_commit(leader, None, generation) is ErrorCode.NONE
    assert h.group.check_commit(leader, None, generation + 5) is ErrorCode.ILLEGAL_GENERATION
    h.join(leader)
    h.join(follower)
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE
    assert h.group.check_commit(leader, None, generation + 1) is ErrorCode.REBALANCE_IN_PROGRESS


def test_txn_commit_checks_follow_kip_447() -> None:
    h = Harness()
    static = h.join(instance="i-1")
    h.advance_until_answered(static)
    member_id, generation = static[0].member_id, h.group.generation_id
    h.sync(member_id, generation, {member_id: b"x"})
    check = h.group.check_txn_commit
    # Without member and generation: accepted whatever the group's state (older clients).
    assert check("", None, -1) is ErrorCode.NONE
    assert check(member_id, "i-1", generation) is ErrorCode.NONE
    assert check("stale-id", "i-1", generation) is ErrorCode.FENCED_INSTANCE_ID
    assert check(member_id, "i-2", generation) is ErrorCode.UNKNOWN_MEMBER_ID
    assert check("stranger", None, generation) is ErrorCode.UNKNOWN_MEMBER_ID
    assert check(member_id, None, generation + 1) is ErrorCode.ILLEGAL_GENERATION
    h.join(instance="i-2")
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
    # A rebalance in progress does not refuse it, unlike a plain commit.
    assert check(member_id, "i-1", generation) is ErrorCode.NONE


def test_dead_group_answers_waiting_members_and_cancels_every_timer() -> None:
    h = Harness()
    member = h.new_member()
    wait = h.join(member)
    h.group.transition_to_dead(ErrorCode.NOT_COORDINATOR)
    assert wait[0].error is ErrorCode.NOT_COORDINATOR
    assert h.timers.live_timers() == 0
    (late,) = h.join()
    assert late.error is ErrorCode.COORDINATOR_NOT_AVAILABLE


# -- static membership (KIP-345) -----------------------------------------------------------------


def _stable_static_pair(h: Harness) -> tuple[JoinResult, JoinResult]:
    """Two static members (instances i-1, i-2) in a STABLE group, each assigned its own id."""
    waits = [h.join(instance="i-1"), h.join(instance="i-2")]
    h.advance_until_answered(waits[0])
    first, second = waits[0][0], waits[1][0]
    h.sync(
        first.leader_id,
        h.group.generation_id,
        {r.member_id: r.member_id.encode() for r in (first, second)},
    )
    assert state_of(h.group) is GroupState.STABLE
    return first, second


def test_static_join_with_unknown_member_id_replaces_the_old_member_id() -> None:
    h = Harness()
    first, second = _stable_static_pair(h)
    (rejoin,) = h.join(instance="i-2")
    assert rejoin.error is ErrorCode.NONE and rejoin.member_id != second.member_id
    assert set(h.group.members) == {first.member_id, rejoin.member_id}
    member = h.group.member_for_instance("i-2")
    assert member is not None and member.member_id == rejoin.member_id


def test_the_replaced_member_id_is_fenced_on_every_request_kind() -> None:
    h = Harness()
    _, old = _stable_static_pair(h)
    generation = h.group.generation_id
    (new,) = h.join(instance="i-2")
    assert h.group.heartbeat(old.member_id, "i-2", generation) is ErrorCode.FENCED_INSTANCE_ID
    synced: list[SyncResult] = []
    h.group.sync(old.member_id, "i-2", generation, "", "", {}, synced.append)
    assert [s.error for s in synced] == [ErrorCode.FENCED_INSTANCE_ID]
    (joined,) = h.join(old.member_id, instance="i-2")
    assert joined.error is ErrorCode.FENCED_INSTANCE_ID
    assert h.group.check_commit(old.member_id, "i-2", generation) is ErrorCode.FENCED_INSTANCE_ID
    assert h.group.leave(old.member_id, "i-2") is ErrorCode.FENCED_INSTANCE_ID
    # None of them disturbed the new incarnation or the group.
    assert state_of(h.group) is GroupState.STABLE
    assert h.group.heartbeat(new.member_id, "i-2", generation) is ErrorCode.NONE
    assert h.group.check_commit(new.member_id, "i-2", generation) is ErrorCode.NONE


def test_static_rejoin_with_unchanged_metadata_keeps_the_generation_and_assignment() -> None:
    h = Harness()
    first, old = _stable_static_pair(h)
    generation, changes = h.group.generation_id, h.changes
    (new,) = h.join(instance="i-2")
    assert (new.generation_id, new.leader_id) == (generation, first.member_id)
    assert state_of(h.group) is GroupState.STABLE
    # The new member id is persisted at once, so a coordinator taking over knows it.
    assert h.changes == changes + 1
    (synced,) = h.sync(new.member_id, generation)
    assert synced.assignment == old.member_id.encode()
    # The other member was not asked to rejoin.
    assert h.group.heartbeat(first.member_id, "i-1", generation) is ErrorCode.NONE


def test_static_rejoin_with_changed_metadata_rebalances() -> None:
    h = Harness()
    first, _ = _stable_static_pair(h)
    generation = h.group.generation_id
    waiting = h.join(instance="i-2", protocols=(("range", b"other-topics"),))
    assert waiting == [] and state_of(h.group) is GroupState.PREPARING_REBALANCE
    assert h.group.heartbeat(first.member_id, "i-1", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    h.join(first.member_id, instance="i-1")
    assert waiting[0].error is ErrorCode.NONE and waiting[0].generation_id == generation + 1


def test_a_cooperative_static_restart_keeps_the_assignment_unless_its_topics_change() -> None:
    # A cooperative consumer's metadata carries the partitions it owns and its generation; a
    # restart always changes them (it owns nothing yet), and that alone must not rebalance.
    def cooperative(topics: list[str], owned: int, generation: int) -> tuple[tuple[str, bytes]]:
        owned_partitions = [TopicPartition(topics[0], p) for p in range(owned)]
        subscription = Subscription(
            topics, owned_partitions=owned_partitions, generation_id=generation
        )
        return (("cooperative-sticky", encode_subscription(subscription, version=2)),)

    h = Harness()
    waits = [
        h.join(instance="i-1", protocols=cooperative(["t"], 1, -1)),
        h.join(instance="i-2", protocols=cooperative(["t"], 1, -1)),
    ]
    h.advance_until_answered(waits[0])
    first, second = waits[0][0], waits[1][0]
    h.sync(first.leader_id, h.group.generation_id, {first.member_id: b"a", second.member_id: b"b"})
    generation = h.group.generation_id
    (restarted,) = h.join(instance="i-2", protocols=cooperative(["t"], 0, -1))
    assert restarted.generation_id == generation and state_of(h.group) is GroupState.STABLE
    (synced,) = h.sync(restarted.member_id, generation)
    assert synced.assignment == b"b"
    # Another subscription is a change the group must rebalance for.
    waiting = h.join(instance="i-2", protocols=cooperative(["t", "u"], 0, -1))
    assert waiting == [] and state_of(h.group) is GroupState.PREPARING_REBALANCE


def test_static_rejoin_while_completing_rebalance_rebalances_so_the_new_id_is_assigned() -> None:
    h = Harness()
    first, second = _stable_static_pair(h)
    leader_join = h.join(first.member_id, instance="i-1")
    h.join(second.member_id, instance="i-2")
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE
    assert {m.member_id for m in leader_join[0].members} == {first.member_id, second.member_id}
    # i-2 restarts after the leader was handed the member list with its old id: an assignment
    # keyed by that id would leave the new one with nothing, so the group rebalances.
    rejoin = h.join(instance="i-2")
    assert rejoin == [] and state_of(h.group) is GroupState.PREPARING_REBALANCE
    stale = {first.member_id: b"a", second.member_id: b"b"}
    assert [s.error for s in h.sync(first.member_id, leader_join[0].generation_id, stale)] == [
        ErrorCode.REBALANCE_IN_PROGRESS
    ]
    leader_again = h.join(first.member_id, instance="i-1")
    new = rejoin[0]
    assert new.error is ErrorCode.NONE
    assert {m.member_id for m in leader_again[0].members} == {first.member_id, new.member_id}
    waiting = h.sync(new.member_id, new.generation_id)
    h.sync(first.member_id, new.generation_id, {first.member_id: b"a", new.member_id: b"b"})
    assert [s.assignment for s in waiting] == [b"b"]


def test_static_member_session_expiry_removes_it_and_frees_its_instance_id() -> None:
    h = Harness()
    first, second = _stable_static_pair(h)
    generation = h.group.generation_id
    # Only i-1 heartbeats; i-2's session runs out.
    for _ in range(3):
        h.timers.advance(SESSION_MS // 2)
        h.group.heartbeat(first.member_id, "i-1", generation)
    assert second.member_id not in h.group.members
    assert h.group.member_for_instance("i-2") is None
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
    # Its old id is now unknown rather than fenced, and the instance id joins as a new member.
    assert h.group.heartbeat(second.member_id, "i-2", generation) is ErrorCode.UNKNOWN_MEMBER_ID
    back = h.join(instance="i-2")
    h.join(first.member_id, instance="i-1")
    assert back[0].error is ErrorCode.NONE and back[0].member_id != second.member_id
    assert back[0].generation_id == generation + 1
