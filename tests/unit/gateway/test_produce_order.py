"""The gateway's PartitionOrder: a connection's acks=all Produce requests reach the storage
node one at a time per partition, in the order the client sent them, while requests for other
partitions (or from other connections) go on at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from brook_gateway.produce import PartitionOrder

STEP_TIMEOUT_S = 5.0
CONNECTION = "127.0.0.1:50000"
OTHER_CONNECTION = "127.0.0.1:50001"


class Node:
    """Records when each request's call starts; each call lasts until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    async def call(self, name: str) -> None:
        self.started.append(name)
        gate = self.gates.setdefault(name, asyncio.Event())
        await gate.wait()

    def release(self, name: str) -> None:
        self.gates.setdefault(name, asyncio.Event()).set()


def _request(
    order: PartitionOrder,
    node: Node,
    connection: str,
    name: str,
    partitions: list[tuple[str, int]],
) -> Callable[[], Awaitable[None]]:
    """A Produce handler's use of PartitionOrder: enter on arrival, then wait, call, leave."""
    before, mine = order.enter(connection, partitions)

    async def run() -> None:
        try:
            for previous in before:
                await asyncio.shield(previous)
            await node.call(name)
        finally:
            order.leave(connection, partitions, before, mine)

    return run


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_partitions_requests_go_one_at_a_time_in_arrival_order() -> None:
    async def scenario() -> None:
        order, node = PartitionOrder(), Node()
        runs = [
            _request(order, node, CONNECTION, "first", [("t", 0)]),
            _request(order, node, CONNECTION, "second", [("t", 0)]),
            _request(order, node, CONNECTION, "third", [("t", 0), ("t", 1)]),
        ]
        tasks = [asyncio.create_task(run()) for run in reversed(runs)]  # started out of order
        await _settle()
        assert node.started == ["first"]
        node.release("first")
        await _settle()
        assert node.started == ["first", "second"]
        node.release("second")
        await _settle()
        assert node.started == ["first", "second", "third"]
        node.release("third")
        await asyncio.wait_for(asyncio.gather(*tasks), STEP_TIMEOUT_S)
        assert order.partitions == 0, "finished requests are forgotten"

    asyncio.run(scenario())


def test_other_partitions_and_other_connections_do_not_wait() -> None:
    async def scenario() -> None:
        order, node = PartitionOrder(), Node()
        runs = [
            _request(order, node, CONNECTION, "slow", [("t", 0)]),
            _request(order, node, CONNECTION, "other-partition", [("t", 1)]),
            _request(order, node, OTHER_CONNECTION, "other-connection", [("t", 0)]),
        ]
        tasks = [asyncio.create_task(run()) for run in runs]
        await _settle()
        assert sorted(node.started) == ["other-connection", "other-partition", "slow"]
        for name in node.started:
            node.release(name)
        await asyncio.wait_for(asyncio.gather(*tasks), STEP_TIMEOUT_S)

    asyncio.run(scenario())


def test_a_cancelled_request_lets_the_next_go_without_overtaking_the_one_before() -> None:
    async def scenario() -> None:
        order, node = PartitionOrder(), Node()
        first = asyncio.create_task(_request(order, node, CONNECTION, "first", [("t", 0)])())
        second = asyncio.create_task(_request(order, node, CONNECTION, "second", [("t", 0)])())
        third = asyncio.create_task(_request(order, node, CONNECTION, "third", [("t", 0)])())
        await _settle()
        second.cancel()  # the client went away while "second" waited for "first"
        await _settle()
        assert node.started == ["first"], "the cancelled one must not release the third early"
        node.release("first")
        await _settle()
        assert node.started == ["first", "third"]
        node.release("third")
        await asyncio.wait_for(asyncio.gather(first, third), STEP_TIMEOUT_S)
        assert second.cancelled()

    asyncio.run(scenario())


def test_only_large_requests_are_waited_for() -> None:
    """A small call reaches the node in one frame, in send order; only a large one can be
    overtaken, so only large ones hold the requests behind them."""

    async def scenario() -> None:
        order = PartitionOrder()
        small_before, small = order.enter(CONNECTION, [("t", 0)], large=False)
        assert small_before == []
        after_small_before, after_small = order.enter(CONNECTION, [("t", 0)], large=True)
        assert after_small_before == [], "nothing waits for a small request"
        behind_large, behind = order.enter(CONNECTION, [("t", 0)], large=False)
        assert behind_large == [after_small], "a request waits for an earlier large one"
        for before, mine in ((small_before, small), (after_small_before, after_small)):
            order.leave(CONNECTION, [("t", 0)], before, mine)
        order.leave(CONNECTION, [("t", 0)], behind_large, behind)
        await _settle()
        assert order.partitions == 0

    asyncio.run(scenario())
