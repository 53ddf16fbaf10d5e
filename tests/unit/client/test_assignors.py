"""The leader-side assignors: every partition exactly once, balance, and stickiness."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.client.group.assignors import (
    ASSIGNORS,
    GroupMember,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    assignor_named,
)
from brook.client.group.protocol import Subscription
from brook.client.types import TopicPartition

TOPICS = ("a", "b", "c")

_topic_counts = st.dictionaries(
    st.sampled_from(TOPICS), st.integers(min_value=0, max_value=12), min_size=1
)


@st.composite
def _groups(draw: st.DrawFn) -> tuple[dict[str, int], list[GroupMember]]:
    counts = draw(_topic_counts)
    size = draw(st.integers(min_value=1, max_value=7))
    members = []
    for i in range(size):
        topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
        instance = draw(st.none() | st.just(f"instance-{i}"))
        members.append(GroupMember(f"member-{i}", instance, Subscription(topics)))
    return counts, members


def _check_exactly_once(
    counts: dict[str, int], members: list[GroupMember], result: dict[str, list[TopicPartition]]
) -> None:
    assert set(result) == {m.member_id for m in members}
    given_out = Counter(tp for tps in result.values() for tp in tps)
    assert all(n == 1 for n in given_out.values()), "a partition was assigned twice"
    subscribed = {t for m in members for t in m.subscription.topics}
    expected = {
        TopicPartition(t, p) for t, n in counts.items() if t in subscribed for p in range(n)
    }
    assert set(given_out) == expected
    topics_of = {m.member_id: set(m.subscription.topics) for m in members}
    for member_id, tps in result.items():
        assert all(tp.topic in topics_of[member_id] for tp in tps), "unsubscribed topic given"


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@given(group=_groups())
def test_every_subscribed_partition_is_assigned_exactly_once(
    name: str, group: tuple[dict[str, int], list[GroupMember]]
) -> None:
    counts, members = group
    _check_exactly_once(counts, members, ASSIGNORS[name].assign(counts, members))


@pytest.mark.parametrize("name", ["roundrobin", "sticky"])
@given(
    counts=_topic_counts,
    size=st.integers(min_value=1, max_value=8),
)
def test_identical_subscriptions_are_balanced_within_one(
    name: str, counts: dict[str, int], size: int
) -> None:
    members = [GroupMember(f"m{i}", None, Subscription(sorted(counts))) for i in range(size)]
    result = ASSIGNORS[name].assign(counts, members)
    sizes = [len(tps) for tps in result.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200)
@given(
    counts=_topic_counts,
    before=st.integers(min_value=1, max_value=7),
    leaving=st.integers(min_value=0, max_value=6),
    joining=st.integers(min_value=0, max_value=3),
)
def test_sticky_keeps_the_partitions_of_members_that_stay(
    counts: dict[str, int], before: int, leaving: int, joining: int
) -> None:
    topics = sorted(counts)
    sticky = StickyAssignor()
    first = [GroupMember(f"m{i}", None, Subscription(topics)) for i in range(before)]
    previous = sticky.assign(counts, first)
    stay = [m.member_id for m in first][: max(before - leaving, 1)]
    second = [
        GroupMember(member_id, None, Subscription(topics, None, previous[member_id], 1))
        for member_id in stay
    ] + [GroupMember(f"new{i}", None, Subscription(topics)) for i in range(joining)]
    result = sticky.assign(counts, second)
    _check_exactly_once(counts, second, result)
    total = sum(counts.values())
    floor_share = total // len(second)
    for member_id in stay:
        kept = set(previous[member_id]) & set(result[member_id])
        assert len(kept) >= min(len(previous[member_id]), floor_share)
    sizes = [len(tps) for tps in result.values()]
    assert max(sizes) - min(sizes) <= 1


def test_sticky_gives_a_contested_partition_to_the_newer_generation() -> None:
    tp = TopicPartition("a", 0)
    members = [
        GroupMember("old", None, Subscription(["a"], None, [tp], 3)),
        GroupMember("new", None, Subscription(["a"], None, [tp], 4)),
    ]
    result = StickyAssignor().assign({"a": 2}, members)
    assert result["new"] == [tp]
    assert result["old"] == [TopicPartition("a", 1)]


def test_range_gives_the_first_members_the_extra_partitions_per_topic() -> None:
    # Kafka's range assignor is per topic, so the first member gets each topic's extra one.
    tp = TopicPartition
    members = [GroupMember(f"m{i}", None, Subscription(["a", "b"])) for i in range(2)]
    result = RangeAssignor().assign({"a": 3, "b": 3}, members)
    assert result == {
        "m0": [tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 1)],
        "m1": [tp("a", 2), tp("b", 2)],
    }


def test_static_members_are_ordered_by_instance_id_not_member_id() -> None:
    members = [
        GroupMember("zzz", "instance-a", Subscription(["t"])),
        GroupMember("aaa", "instance-b", Subscription(["t"])),
    ]
    result = RoundRobinAssignor().assign({"t": 2}, members)
    assert result == {"zzz": [TopicPartition("t", 0)], "aaa": [TopicPartition("t", 1)]}


def test_unknown_topics_are_left_unassigned() -> None:
    members = [GroupMember("m", None, Subscription(["missing", "a"]))]
    for assignor in ASSIGNORS.values():
        assert assignor.assign({"a": 1}, members) == {"m": [TopicPartition("a", 0)]}


def test_unknown_strategy_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown partition assignment strategy 'cooperative'"):
        assignor_named("cooperative")
