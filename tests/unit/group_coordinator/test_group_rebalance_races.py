"""The group state machine where a rebalance races with its members' requests, as when a member
joins a group whose leader must rejoin: answers for joins pending when the rebalance completes,
joins re-sent or retried, SyncGroup and heartbeats in each rebalance state, and pending members
(told MEMBER_ID_REQUIRED) that never come back. Each case is Kafka's classic coordinator's."""

from __future__ import annotations

from brook_group_coordinator.group import GroupState
from test_group_state_machine import SESSION_MS, Harness, state_of

from brook.errors import ErrorCode


def test_leader_rejoining_for_a_newcomer_gets_one_generation_naming_both_members() -> None:
    h = Harness()
    (leader,) = h.stable_group(1)
    old_generation = h.group.generation_id
    newcomer = h.new_member()
    wait_new = h.join(newcomer)
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
    assert h.group.heartbeat(leader, None, old_generation) is ErrorCode.REBALANCE_IN_PROGRESS
    # A SyncGroup of the old generation while the group prepares is told to rejoin.
    assert h.sync(leader, old_generation)[0].error is ErrorCode.REBALANCE_IN_PROGRESS
    assert wait_new == []
    wait_leader = h.join(leader)
    generation = old_generation + 1
    assert [w[0].generation_id for w in (wait_leader, wait_new)] == [generation, generation]
    assert wait_leader[0].leader_id == wait_new[0].leader_id == leader
    assert {m.member_id for m in wait_leader[0].members} == {leader, newcomer}
    assert wait_new[0].members == ()
    follower_sync = h.sync(newcomer, generation)
    assert follower_sync == []
    h.sync(leader, generation, {leader: b"a", newcomer: b"b"})
    assert state_of(h.group) is GroupState.STABLE
    assert follower_sync[0].assignment == b"b"


def test_heartbeats_in_completing_rebalance_keep_a_member_that_has_not_synced_yet() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    h.join(leader)
    wait_follower = h.join(follower)
    generation = wait_follower[0].generation_id
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE
    for _ in range(4):
        h.timers.advance(SESSION_MS // 2)
        assert h.group.heartbeat(leader, None, generation) is ErrorCode.NONE
        assert h.group.heartbeat(follower, None, generation) is ErrorCode.NONE
    assert set(h.group.members) == {leader, follower}
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE


def test_join_resent_in_completing_rebalance_is_answered_with_the_same_generation() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    first = h.join(leader)
    h.join(follower)
    # The leader lost its answer and sends the same join again: no new rebalance.
    again = h.join(leader)
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE
    assert again[0].error is ErrorCode.NONE
    assert again[0].generation_id == first[0].generation_id
    assert {m.member_id for m in again[0].members} == {leader, follower}


def test_join_retried_while_pending_replaces_the_first_which_is_told_to_rejoin() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    newcomer = h.new_member()
    wait_new = h.join(newcomer)
    first = h.join(leader)
    retried = h.join(leader)
    assert first[0].error is ErrorCode.REBALANCE_IN_PROGRESS
    assert retried == [] and wait_new == []
    wait_follower = h.join(follower)
    for wait in (retried, wait_new, wait_follower):
        assert wait[0].error is ErrorCode.NONE
        assert wait[0].generation_id == h.group.generation_id
    assert len(first) == 1


def test_pending_member_that_never_returns_holds_the_rebalance_only_for_its_session() -> None:
    h = Harness()
    leader, follower = h.stable_group(2)
    h.new_member()
    assert h.group.leave(follower, None) is ErrorCode.NONE
    wait_leader = h.join(leader)
    # Every member has rejoined, but a client that was handed a member id may still join.
    assert wait_leader == []
    h.timers.advance(SESSION_MS)
    assert wait_leader[0].error is ErrorCode.NONE
    assert [m.member_id for m in wait_leader[0].members] == [leader]
    assert state_of(h.group) is GroupState.COMPLETING_REBALANCE
