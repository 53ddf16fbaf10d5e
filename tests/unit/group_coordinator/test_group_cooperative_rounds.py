"""What KIP-429's incremental cooperative rebalancing needs of the classic group state machine
(on a manual clock): members' metadata, owned partitions included, reaches the leader byte for
byte; a follower that rejoins with new metadata while the group is stable (a cooperative
member after giving partitions up) starts the follow-up round; members keep committing with
their generation while the group waits for them to rejoin."""

from __future__ import annotations

from brook_group_coordinator.group import GroupState
from test_group_state_machine import Harness, state_of

from brook.client.group.protocol import Subscription, encode_subscription
from brook.client.types import TopicPartition
from brook.errors import ErrorCode


def _metadata(owned: list[int], generation: int) -> tuple[tuple[str, bytes], ...]:
    owned_tps = [TopicPartition("t", p) for p in owned]
    subscription = Subscription(["t"], None, owned_tps, generation)
    return (("cooperative-sticky", encode_subscription(subscription, version=2)),)


def test_a_follower_rejoining_with_fewer_owned_partitions_starts_the_follow_up_round() -> None:
    h = Harness()
    newcomer, holder = h.new_member(), h.new_member()
    # The newcomer joins first and leads; the holder held every partition so far.
    wait_leader = h.join(newcomer, protocols=_metadata([], -1))
    h.join(holder, protocols=_metadata([0, 1, 2, 3], 1))
    h.advance_until_answered(wait_leader)
    leader, follower = newcomer, holder
    assert wait_leader[0].leader_id == leader
    generation = h.group.generation_id
    h.sync(follower, generation)
    # The first round of a cooperative rebalance: the holder keeps 0 and 1 and must give 2 and
    # 3 up; the leader gets nothing yet.
    h.sync(leader, generation, {leader: b"", follower: b"0 1"})
    assert state_of(h.group) is GroupState.STABLE

    after_revoking = _metadata([0, 1], generation)
    wait_follower = h.join(follower, protocols=after_revoking)
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
    assert wait_follower == []
    # The leader learns of the round from its heartbeat and may still commit meanwhile.
    assert h.group.heartbeat(leader, None, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.check_commit(leader, None, generation) is ErrorCode.NONE
    wait_leader = h.join(leader, protocols=_metadata([], generation))
    assert wait_leader[0].generation_id == wait_follower[0].generation_id == generation + 1
    leader_view = {m.member_id: m.metadata for m in wait_leader[0].members}
    assert leader_view[follower] == after_revoking[0][1]


def test_a_follower_rejoining_with_the_same_metadata_while_stable_gets_the_generation() -> None:
    # Kafka's rule: only new metadata (or the leader) makes a rejoin start a rebalance.
    h = Harness()
    leader, follower = h.stable_group(2)
    generation = h.group.generation_id
    (answer,) = h.join(follower)
    assert answer.error is ErrorCode.NONE and answer.generation_id == generation
    assert state_of(h.group) is GroupState.STABLE
    h.join(leader)
    assert state_of(h.group) is GroupState.PREPARING_REBALANCE
