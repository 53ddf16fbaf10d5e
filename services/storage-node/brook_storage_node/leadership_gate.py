"""Produce requests that arrive while this node is becoming a partition's leader wait for it,
in arrival order, instead of failing.

The metadata names the new leader before the node has opened the partition's log (creating a
topic, moving a leadership here): clients see the leader and send at once. Answering those
first requests NOT_LEADER_OR_FOLLOWER makes a client without idempotence that pipelines
requests retry the refused batch after later ones were appended, so its records land out of
order. Kafka's broker, serving one request per connection at a time, would rarely show this;
here requests wait at a gate for the partition, one after another in the order they came, and
the gate goes once the last of them has appended: a request arriving later finds no gate and
cannot overtake them.

``ReplicaManager`` owns the gates: one is made when a request names a partition the node is
becoming the leader of (``enter``; the request's other partitions get open gates, so that it
cannot be overtaken there either), and the manager settles them whenever a partition's state
changes. A settled gate lets its requests through one at a time; whether the partition is led
by then (or failed, or moved away), the request's own lookup tells.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

from brook_storage_node.log import TopicPartition

__all__ = ["AppendTurns", "LeadershipGates"]


class _Gate:
    __slots__ = ("queue", "settled")

    def __init__(self) -> None:
        self.queue: deque[asyncio.Future[None]] = deque()
        self.settled = False


class AppendTurns:
    """One request's places at the gates of its partitions; ``release`` exactly once."""

    def __init__(
        self, gates: LeadershipGates, places: list[tuple[TopicPartition, asyncio.Future[None]]]
    ) -> None:
        self._gates = gates
        self._places = places

    async def wait(self, timeout_s: float) -> set[TopicPartition]:
        """Wait until it is this request's turn at every gate, at most ``timeout_s``; the
        partitions whose turn did not come, where the request gives up its place at once (it
        must not append to them)."""
        turns = [turn for _, turn in self._places if not turn.done()]
        if turns:
            await asyncio.wait(turns, timeout=max(timeout_s, 0.0))
        late = {tp for tp, turn in self._places if not turn.done()}
        if late:
            kept = []
            for tp, turn in self._places:
                if tp in late:
                    self._gates.leave(tp, turn)
                else:
                    kept.append((tp, turn))
            self._places = kept
        return late

    def release(self) -> None:
        """This request has appended (or given up): the next one at each gate may go."""
        places, self._places = self._places, []
        for tp, turn in places:
            self._gates.leave(tp, turn)


class LeadershipGates:
    """The gates of the partitions this node is becoming the leader of. ``becoming(tp)``
    says whether the node is on its way to lead ``tp`` (named leader, not leading yet)."""

    def __init__(self, becoming: Callable[[TopicPartition], bool]) -> None:
        self._becoming = becoming
        self._gates: dict[TopicPartition, _Gate] = {}

    def __len__(self) -> int:
        return len(self._gates)

    def enter(self, tps: Sequence[TopicPartition]) -> AppendTurns | None:
        """Take this request's place at the gates of its partitions; None when none of them
        has or needs one (the usual case: the node leads them all, or none is on its way).
        Call on arrival, before the request's first await, so that places follow arrival
        order.

        Once one partition needs a gate, the request takes a place at every one of its
        partitions, an open gate for those already led: it appends to none of them before its
        turn comes at the others, and a later request for an already-led partition must not
        append there before it."""
        gates = self._gates
        for tp in tps:
            if tp in gates or self._becoming(tp):
                break
        else:
            return None
        places: list[tuple[TopicPartition, asyncio.Future[None]]] = []
        # A partition named twice (its entries appended in order) takes one place, not two.
        for tp in dict.fromkeys(tps):
            gate = gates.get(tp)
            becoming = self._becoming(tp)
            if gate is None:
                gate = gates[tp] = _Gate()
                gate.settled = not becoming
            elif gate.settled and becoming:
                # Leadership came here again while the gate still drained.
                gate.settled = False
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            gate.queue.append(turn)
            places.append((tp, turn))
            self._grant(gate)
        return AppendTurns(self, places)

    def settle(self) -> None:
        """A partition's state changed: every gate whose partition is no longer becoming
        lets its requests through, one at a time."""
        for tp, gate in list(self._gates.items()):
            if not gate.settled and not self._becoming(tp):
                gate.settled = True
                self._grant(gate)
                self._drop_if_done(tp, gate)

    def open_all(self) -> None:
        """Shutdown: nobody waits any longer."""
        for gate in self._gates.values():
            gate.settled = True
            for turn in gate.queue:
                if not turn.done():
                    turn.set_result(None)
        self._gates.clear()

    def leave(self, tp: TopicPartition, turn: asyncio.Future[None]) -> None:
        gate = self._gates.get(tp)
        if not turn.done():
            turn.cancel()
        if gate is None:
            return
        try:
            gate.queue.remove(turn)
        except ValueError:
            return
        self._grant(gate)
        self._drop_if_done(tp, gate)

    @staticmethod
    def _grant(gate: _Gate) -> None:
        if gate.settled and gate.queue and not gate.queue[0].done():
            gate.queue[0].set_result(None)

    def _drop_if_done(self, tp: TopicPartition, gate: _Gate) -> None:
        # An empty gate goes even if not yet open: the next request makes a new one if the
        # partition is still on its way.
        if not gate.queue and self._gates.get(tp) is gate:
            del self._gates[tp]
