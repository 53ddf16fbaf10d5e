"""The partition assignors a consumer group's leader runs: Kafka's range, roundrobin, sticky
and cooperative-sticky.

The coordinator does not assign partitions: it elects a leader among the members and hands
it every member's subscription (``protocol.Subscription``); the leader runs the assignor the
group agreed on and returns each member's share in SyncGroup. The names are Kafka's, so a
group can mix Brook consumers and Kafka clients using the same assignor.

Every assignor is a pure function of its input; members are ordered by group.instance.id (if
set) and then member id, so a static member keeps its place across restarts.

Each assignor names the rebalance protocols it supports (Kafka's ``supportedProtocols``): under
EAGER every member gives up all its partitions before it rejoins; under COOPERATIVE (KIP-429) a
member keeps its partitions through the rebalance, gives up only those the new assignment
moves away, and then rejoins so that they can be handed to their new owner. A consumer uses
COOPERATIVE only when every assignor it lists supports it (``rebalance_protocol``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from brook.client.group.protocol import Subscription
from brook.client.types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "CooperativeStickyAssignor",
    "GroupMember",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "assignor_named",
    "rebalance_protocol",
]


class RebalanceProtocol(enum.Enum):
    """How members give up partitions in a rebalance (Kafka's ConsumerPartitionAssignor
    .RebalanceProtocol)."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"


_EAGER_ONLY: Final = (RebalanceProtocol.EAGER,)


@dataclass(frozen=True)
class GroupMember:
    """One member as the leader sees it in the JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    subscription: Subscription

    @property
    def sort_key(self) -> tuple[int, str, str]:
        # Static members first, by instance id: their order survives restarts (a restarted
        # static member gets a new member id).
        if self.group_instance_id is not None:
            return (0, self.group_instance_id, self.member_id)
        return (1, "", self.member_id)


class Assignor(Protocol):
    """A client-side assignor: ``name`` is what JoinGroup advertises; ``protocols`` the
    rebalance protocols it can run under."""

    name: str
    protocols: tuple[RebalanceProtocol, ...]

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, list[TopicPartition]]:
        """Each member id's partitions. Topics absent from ``partitions_per_topic`` (unknown
        to the cluster) are not assigned; every member id appears in the answer."""
        ...


def _ordered(members: Iterable[GroupMember]) -> list[GroupMember]:
    return sorted(members, key=lambda m: m.sort_key)


def _all_partitions(
    partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
) -> list[TopicPartition]:
    """Every partition of a topic some member subscribes to, sorted."""
    topics = sorted(
        {t for m in members for t in m.subscription.topics if partitions_per_topic.get(t, 0) > 0}
    )
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


class RangeAssignor:
    """Per topic, consecutive ranges of partitions to the subscribed members in order; the
    first ``partitions % members`` members get one more (Kafka's RangeAssignor)."""

    name = "range"
    protocols: tuple[RebalanceProtocol, ...] = _EAGER_ONLY

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, list[TopicPartition]]:
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        ordered = _ordered(members)
        topics = sorted({t for m in members for t in m.subscription.topics})
        for topic in topics:
            count = partitions_per_topic.get(topic, 0)
            subscribed = [m for m in ordered if topic in m.subscription.topics]
            if count <= 0 or not subscribed:
                continue
            share, extra = divmod(count, len(subscribed))
            for i, member in enumerate(subscribed):
                start = share * i + min(i, extra)
                length = share + (1 if i < extra else 0)
                result[member.member_id] += [
                    TopicPartition(topic, p) for p in range(start, start + length)
                ]
        return result


class RoundRobinAssignor:
    """All partitions in (topic, partition) order dealt to the members in turn, skipping a
    member not subscribed to the partition's topic (Kafka's RoundRobinAssignor)."""

    name = "roundrobin"
    protocols: tuple[RebalanceProtocol, ...] = _EAGER_ONLY

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, list[TopicPartition]]:
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        ordered = _ordered(members)
        if not ordered:
            return result
        subscribed = [frozenset(m.subscription.topics) for m in ordered]
        turn = 0
        for tp in _all_partitions(partitions_per_topic, members):
            # Some member subscribes to every topic _all_partitions lists, so this ends
            # within one lap.
            while tp.topic not in subscribed[turn % len(ordered)]:
                turn += 1
            result[ordered[turn % len(ordered)].member_id].append(tp)
            turn += 1
        return result


class StickyAssignor:
    """Balanced, and moving as few partitions as balance allows (Kafka's StickyAssignor,
    eager protocol).

    Each member keeps the partitions it reports owning (``Subscription.owned_partitions``; when
    two claim one, the claim of the higher generation wins); the rest go to the least loaded
    member subscribed to their topic; then, while some member has two more partitions than
    another that could take one of them, a partition moves, one it did not own first. With
    identical subscriptions the result is balanced (sizes differ by at most one) and every
    staying member keeps min(owned, partitions // members) of its partitions.
    """

    name = "sticky"
    protocols: tuple[RebalanceProtocol, ...] = _EAGER_ONLY

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, list[TopicPartition]]:
        ordered = _ordered(members)
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        if not ordered:
            return result
        topics_of = {m.member_id: frozenset(m.subscription.topics) for m in ordered}
        partitions = _all_partitions(partitions_per_topic, members)
        existing = set(partitions)
        owner: dict[TopicPartition, tuple[int, str]] = {}
        for member in ordered:
            generation = member.subscription.generation_id
            for tp in member.subscription.owned_partitions:
                if tp not in existing or tp.topic not in topics_of[member.member_id]:
                    continue
                claim = owner.get(tp)
                if claim is None or generation > claim[0]:
                    owner[tp] = (generation, member.member_id)
        owned_by = {tp: member_id for tp, (_, member_id) in owner.items()}
        held: dict[str, set[TopicPartition]] = {m.member_id: set() for m in ordered}
        for tp, member_id in owned_by.items():
            held[member_id].add(tp)
        position = {m.member_id: i for i, m in enumerate(ordered)}

        def load_key(member_id: str) -> tuple[int, int]:
            return (len(held[member_id]), position[member_id])

        # Partitions with fewer candidates first, so a member that alone can take a topic is
        # not filled up with partitions others could have taken.
        candidates = {
            tp: [m.member_id for m in ordered if tp.topic in topics_of[m.member_id]]
            for tp in partitions
        }
        free = sorted(
            (tp for tp in partitions if tp not in owned_by),
            key=lambda tp: (len(candidates[tp]), tp),
        )
        for tp in free:
            chosen = min(candidates[tp], key=load_key)
            held[chosen].add(tp)
        self._balance(held, candidates, owned_by)
        for member_id, tps in held.items():
            result[member_id] = sorted(tps)
        return result

    @staticmethod
    def _balance(
        held: dict[str, set[TopicPartition]],
        candidates: Mapping[TopicPartition, list[str]],
        owned_by: Mapping[TopicPartition, str],
    ) -> None:
        # Each move takes a partition from a member with a sizes to one with b <= a - 2, so
        # the sum of squared sizes strictly falls: the loop ends.
        while True:
            moved = False
            for giver in sorted(held, key=lambda m: -len(held[m])):
                size = len(held[giver])
                # Partitions the giver did not own before move first (stickiness).
                for tp in sorted(held[giver], key=lambda t: (owned_by.get(t) == giver, t)):
                    takers = [m for m in candidates[tp] if len(held[m]) < size - 1]
                    if not takers:
                        continue
                    taker = min(takers, key=lambda m: (len(held[m]), m))
                    held[giver].discard(tp)
                    held[taker].add(tp)
                    moved = True
                    break
                if moved:
                    break
            if not moved:
                return


class CooperativeStickyAssignor:
    """The sticky assignment, handed out without taking a partition from a member that still
    holds it (Kafka's CooperativeStickyAssignor, KIP-429).

    Members report the partitions they hold in their subscription (``owned_partitions``). The
    assignment is ``StickyAssignor``'s, except that a partition some other member reports
    holding is left out this round: the holder, not finding it in its own assignment, gives it
    up and rejoins, and the next round (where nobody else claims it) hands it to its new owner.
    So no partition is ever assigned while another member may still be reading it, and the
    group reaches the sticky, balanced assignment after at most one more round. A partition two
    members claim (a stale claim) is withheld from both, so both give it up, and it is assigned
    afresh in the next round.

    Under EAGER (a member also listing an eager-only assignor) members claim nothing, since
    they gave everything up before joining, and this is the sticky assignment.
    """

    name = "cooperative-sticky"
    protocols: tuple[RebalanceProtocol, ...] = (
        RebalanceProtocol.EAGER,
        RebalanceProtocol.COOPERATIVE,
    )

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, list[TopicPartition]]:
        target = _STICKY.assign(partitions_per_topic, members)
        claimants: dict[TopicPartition, set[str]] = {}
        for member in members:
            for tp in member.subscription.owned_partitions:
                claimants.setdefault(tp, set()).add(member.member_id)
        return {
            member_id: [tp for tp in tps if claimants.get(tp, set()) <= {member_id}]
            for member_id, tps in target.items()
        }


_STICKY: Final = StickyAssignor()

ASSIGNORS: Final[Mapping[str, Assignor]] = {
    a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), _STICKY, CooperativeStickyAssignor())
}


def assignor_named(name: str) -> Assignor:
    """The assignor called ``name``; ValueError lists the known names."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(
            f"unknown partition assignment strategy {name!r}; known: {', '.join(ASSIGNORS)}"
        ) from None


def rebalance_protocol(assignors: Sequence[Assignor]) -> RebalanceProtocol:
    """COOPERATIVE when every one of a consumer's assignors supports it, else EAGER (Kafka's
    rule: whichever assignor the group picks, the member must be able to follow it)."""
    if assignors and all(RebalanceProtocol.COOPERATIVE in a.protocols for a in assignors):
        return RebalanceProtocol.COOPERATIVE
    return RebalanceProtocol.EAGER
