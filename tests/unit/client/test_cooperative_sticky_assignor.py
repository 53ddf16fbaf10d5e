"""The cooperative-sticky assignor over whole cooperative rebalances (KIP-429): members report
what they hold, give up what their assignment leaves out and rejoin; the test plays the rounds
and checks that no partition is ever handed to a member while another holds it, that the
group settles balanced within one extra round, and that members keep what balance allows."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.client.group.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    GroupMember,
    RebalanceProtocol,
    StickyAssignor,
    assignor_named,
    rebalance_protocol,
)
from brook.client.group.protocol import Subscription
from brook.client.types import TopicPartition

TOPICS = ("a", "b")
# A membership change settles in its first round plus the one its revocations cause.
ROUNDS_TO_SETTLE_MAX = 2

Held = dict[str, set[TopicPartition]]


class Group:
    """Members and what each holds; ``rebalance`` plays cooperative rounds until no member has
    anything to give up, checking every round's assignment against what members hold."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.held: Held = {}
        self.generation = 0
        self.assignor = CooperativeStickyAssignor()

    def join(self, member_id: str) -> None:
        self.held[member_id] = set()

    def leave(self, member_id: str) -> None:
        del self.held[member_id]

    def round(self) -> bool:
        """One JoinGroup/SyncGroup round; True when some member gave something up."""
        members = [
            GroupMember(
                m, None, Subscription(sorted(self.counts), None, sorted(h), self.generation)
            )
            for m, h in self.held.items()
        ]
        result = self.assignor.assign(self.counts, members)
        self.generation += 1
        given_out = Counter(tp for tps in result.values() for tp in tps)
        assert all(n == 1 for n in given_out.values()), "a partition was assigned twice"
        for member_id, tps in result.items():
            for tp in tps:
                others = [m for m, h in self.held.items() if m != member_id and tp in h]
                assert not others, f"{tp} given to {member_id} while {others} hold it"
        revoked = False
        for member_id, tps in result.items():
            if self.held[member_id] - set(tps):
                revoked = True
            self.held[member_id] = set(tps)
        return revoked

    def rebalance(self) -> int:
        """Rounds until settled; fails past ROUNDS_TO_SETTLE_MAX."""
        for rounds in range(1, ROUNDS_TO_SETTLE_MAX + 1):
            if not self.round():
                return rounds
        assert not self.round(), "the group did not settle"
        raise AssertionError(f"the group needed more than {ROUNDS_TO_SETTLE_MAX} rounds")

    def check_settled(self) -> None:
        every = [tp for h in self.held.values() for tp in h]
        expected = {TopicPartition(t, p) for t, n in self.counts.items() for p in range(n)}
        assert Counter(every) == Counter(expected), "not every partition is held exactly once"
        sizes = [len(h) for h in self.held.values()]
        assert max(sizes) - min(sizes) <= 1, f"unbalanced: {sizes}"


_counts = st.dictionaries(
    st.sampled_from(TOPICS), st.integers(min_value=0, max_value=12), min_size=1
)
_changes = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=3)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(counts=_counts, first=st.integers(min_value=1, max_value=5), changes=_changes)
def test_members_joining_and_leaving_settle_balanced_and_never_share_a_partition(
    counts: dict[str, int], first: int, changes: list[tuple[int, int]]
) -> None:
    group = Group(counts)
    names = (f"m{i}" for i in range(1000))
    for _ in range(first):
        group.join(next(names))
    group.rebalance()
    group.check_settled()
    for leaving, joining in changes:
        before = {m: set(h) for m, h in group.held.items()}
        for member_id in sorted(group.held)[: min(leaving, len(group.held) - 1)]:
            group.leave(member_id)
        for _ in range(joining):
            group.join(next(names))
        rounds = group.rebalance()
        group.check_settled()
        stayed = [m for m in group.held if m in before]
        floor_share = sum(counts.values()) // len(group.held)
        for member_id in stayed:
            kept = before[member_id] & group.held[member_id]
            assert len(kept) >= min(len(before[member_id]), floor_share)
        if not joining:
            # Members only left: the others gain and give up nothing, in one round.
            assert rounds == 1
            assert all(before[m] <= group.held[m] for m in stayed)


def test_a_new_member_gets_moved_partitions_only_after_their_holder_gave_them_up() -> None:
    group = Group({"a": 4})
    group.join("m1")
    assert group.rebalance() == 1
    group.join("m2")
    assert group.round() is True  # m1 gives up two partitions; m2 gets nothing yet
    assert len(group.held["m1"]) == 2 and group.held["m2"] == set()
    assert group.round() is False
    assert len(group.held["m2"]) == 2
    group.check_settled()


def test_a_partition_claimed_by_two_members_is_withheld_from_both_then_assigned_once() -> None:
    tp0, tp1 = TopicPartition("a", 0), TopicPartition("a", 1)
    members = [
        GroupMember("old", None, Subscription(["a"], None, [tp0], 3)),
        GroupMember("new", None, Subscription(["a"], None, [tp0], 4)),
    ]
    assignor = CooperativeStickyAssignor()
    first = assignor.assign({"a": 2}, members)
    assert tp0 not in first["old"] + first["new"]
    # Both gave tp0 up (neither was assigned it); the next round hands it out once.
    members = [
        GroupMember("old", None, Subscription(["a"], None, first["old"], 5)),
        GroupMember("new", None, Subscription(["a"], None, first["new"], 5)),
    ]
    second = assignor.assign({"a": 2}, members)
    assert sorted(second["old"] + second["new"]) == [tp0, tp1]


def test_the_newer_generation_keeps_its_other_partitions() -> None:
    tp = TopicPartition
    members = [
        GroupMember("stale", None, Subscription(["a"], None, [tp("a", 0), tp("a", 1)], 2)),
        GroupMember("current", None, Subscription(["a"], None, [tp("a", 1), tp("a", 2)], 3)),
    ]
    result = CooperativeStickyAssignor().assign({"a": 4}, members)
    # tp1 is contested: withheld; the current member keeps tp2, the stale one tp0.
    assert tp("a", 2) in result["current"] and tp("a", 0) in result["stale"]
    assert tp("a", 1) not in result["stale"] + result["current"]


def test_without_claims_it_is_the_sticky_assignment() -> None:
    members = [GroupMember(f"m{i}", None, Subscription(["a", "b"])) for i in range(3)]
    counts = {"a": 5, "b": 4}
    assert CooperativeStickyAssignor().assign(counts, members) == StickyAssignor().assign(
        counts, members
    )


@pytest.mark.parametrize(
    ("names", "protocol"),
    [
        (["cooperative-sticky"], RebalanceProtocol.COOPERATIVE),
        (["cooperative-sticky", "range"], RebalanceProtocol.EAGER),
        (["sticky"], RebalanceProtocol.EAGER),
        (["range", "roundrobin"], RebalanceProtocol.EAGER),
    ],
)
def test_a_consumer_is_cooperative_only_when_every_assignor_it_lists_is(
    names: list[str], protocol: RebalanceProtocol
) -> None:
    assert rebalance_protocol([assignor_named(n) for n in names]) is protocol


def test_kafkas_name_is_registered() -> None:
    assert ASSIGNORS["cooperative-sticky"].name == "cooperative-sticky"
