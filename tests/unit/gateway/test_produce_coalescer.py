"""The gateway's ProduceCoalescer: Produce requests pipelined by one client connection to one
storage node become fewer calls, without reordering a partition's batches or mixing up whose
answer is whose."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from brook_gateway.produce import ProduceCoalescer
from brook_gateway.upstream import UpstreamError
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from brook.errors import ErrorCode
from brook.v1 import storage_pb2

STEP_TIMEOUT_S = 5.0
ACKS = storage_pb2.ACKS_LEADER
NODE = "127.0.0.1:9001"
CONNECTION = "127.0.0.1:50000"

Part = tuple[str, int, bytes]


@dataclass
class RecordingNode:
    """Stands in for the storage node's Produce: records each call and answers every partition
    with an offset of its own; while ``hold`` is set, each call waits for its gate."""

    hold: bool = False
    fail_with: BaseException | None = None
    calls: list[list[Part]] = field(default_factory=list)
    transactional_ids: list[str] = field(default_factory=list)
    gates: list[asyncio.Event] = field(default_factory=list)
    next_offset: int = 0

    async def send(
        self, address: str, acks: int, timeout_ms: int, transactional_id: str, parts: list[Part]
    ) -> Sequence[storage_pb2.PartitionProduceResponse]:
        del address, acks, timeout_ms
        self.calls.append(list(parts))
        self.transactional_ids.append(transactional_id)
        gate = asyncio.Event()
        self.gates.append(gate)
        if self.hold:
            await gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        responses = []
        for topic, partition, _ in parts:
            responses.append(
                storage_pb2.PartitionProduceResponse(
                    topic=topic, partition=partition, base_offset=self.next_offset
                )
            )
            self.next_offset += 1
        return responses

    def release(self, index: int) -> None:
        self.gates[index].set()

    def release_all(self) -> None:
        self.hold = False
        for gate in self.gates:
            gate.set()


Answer = asyncio.Task[Sequence[storage_pb2.PartitionProduceResponse]]


async def settle() -> None:
    """Lets every task that can run do so (a hand-over takes a few loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def started(
    coalescer: ProduceCoalescer,
    *parts: Part,
    connection: str = CONNECTION,
    node: str = NODE,
    acks: storage_pb2.Acks = ACKS,
    transactional_id: str = "",
) -> Answer:
    async def produce() -> Sequence[storage_pb2.PartitionProduceResponse]:
        return await coalescer.enqueue(connection, node, acks, 1000, list(parts), transactional_id)

    task = asyncio.create_task(produce())
    await settle()
    return task


async def finish(*tasks: Answer) -> list[list[tuple[str, int, int]]]:
    async with asyncio.timeout(STEP_TIMEOUT_S):
        results = await asyncio.gather(*tasks)
    return [[(r.topic, r.partition, r.base_offset) for r in result] for result in results]


def test_requests_queued_behind_a_call_travel_together_in_the_next_call() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = await started(coalescer, ("t", 0, b"a"))
        queued = [await started(coalescer, ("t", p, b"b")) for p in (1, 2, 3)]
        assert len(node.calls) == 1
        node.release_all()
        answers = await finish(first, *queued)
        assert node.calls == [[("t", 0, b"a")], [("t", 1, b"b"), ("t", 2, b"b"), ("t", 3, b"b")]]
        # Each request gets the answers to its own partitions, from the call that carried it.
        assert answers == [[("t", 0, 0)], [("t", 1, 1)], [("t", 2, 2)], [("t", 3, 3)]]
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_an_idle_lane_sends_a_request_at_once_without_waiting_for_company() -> None:
    async def scenario() -> None:
        node = RecordingNode()
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        assert await finish(await started(coalescer, ("t", 0, b"a"))) == [[("t", 0, 0)]]
        assert await finish(await started(coalescer, ("t", 0, b"b"))) == [[("t", 0, 1)]]
        assert node.calls == [[("t", 0, b"a")], [("t", 0, b"b")]]

    asyncio.run(scenario())


def test_a_call_carries_a_partition_many_times_in_the_order_the_client_sent() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = await started(coalescer, ("t", 9, b"x"))
        a = await started(coalescer, ("t", 0, b"A"))
        b = await started(coalescer, ("t", 0, b"B"), ("t", 1, b"B"))
        c = await started(coalescer, ("t", 1, b"C"))
        d = await started(coalescer, ("t", 2, b"D"))
        node.release_all()
        results = await finish(first, a, b, c, d)
        # Everything queued behind the first call goes in the next, in arrival order: the node
        # appends a call's entries in order, so each partition's batches keep theirs.
        assert node.calls[1:] == [
            [("t", 0, b"A"), ("t", 0, b"B"), ("t", 1, b"B"), ("t", 1, b"C"), ("t", 2, b"D")],
        ]
        # Each request is answered from its own slice of the call's answers.
        assert results[1:] == [
            [("t", 0, 1)],
            [("t", 0, 2), ("t", 1, 3)],
            [("t", 1, 4)],
            [("t", 2, 5)],
        ]

    asyncio.run(scenario())


def test_a_request_that_does_not_fit_ends_the_call_so_none_overtakes_it() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=10)
        first = await started(coalescer, ("t", 9, b"x"))
        a = await started(coalescer, ("t", 0, b"123456"))
        b = await started(coalescer, ("t", 0, b"abcdef"))
        c = await started(coalescer, ("t", 1, b"C"))
        node.release_all()
        await finish(first, a, b, c)
        assert node.calls[1:] == [[("t", 0, b"123456")], [("t", 0, b"abcdef"), ("t", 1, b"C")]]

    asyncio.run(scenario())


def test_a_call_carries_at_most_the_merged_bytes_and_a_larger_request_goes_alone() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=10)
        first = await started(coalescer, ("t", 0, b"x"))
        small = [await started(coalescer, ("t", p, b"12345")) for p in (1, 2, 3)]
        big = await started(coalescer, ("t", 4, b"0123456789abcdef"))
        node.release_all()
        await finish(first, *small, big)
        assert [len(call) for call in node.calls] == [1, 2, 1, 1]
        assert node.calls[3] == [("t", 4, b"0123456789abcdef")]

    asyncio.run(scenario())


def test_a_failed_call_fails_every_request_it_carried_and_the_lane_goes_on() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = await started(coalescer, ("t", 0, b"a"))
        carried = [await started(coalescer, ("t", p, b"b")) for p in (1, 2)]
        node.release(0)
        await finish(first)
        await settle()
        assert node.calls[1] == [("t", 1, b"b"), ("t", 2, b"b")]
        node.fail_with = UpstreamError(ErrorCode.NETWORK_EXCEPTION, "node gone")
        node.release(1)
        async with asyncio.timeout(STEP_TIMEOUT_S):
            outcomes = await asyncio.gather(*carried, return_exceptions=True)
        for outcome in outcomes:
            assert isinstance(outcome, UpstreamError)
            assert outcome.code == ErrorCode.NETWORK_EXCEPTION
        node.fail_with = None
        node.release_all()
        assert await finish(await started(coalescer, ("t", 0, b"c"))) == [[("t", 0, 1)]]
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_a_cancelled_waiting_request_is_never_sent_and_blocks_nobody() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = await started(coalescer, ("t", 0, b"a"))
        gone = await started(coalescer, ("t", 1, b"gone"))
        after = await started(coalescer, ("t", 1, b"after"))
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        node.release_all()
        await finish(first, after)
        assert node.calls == [[("t", 0, b"a")], [("t", 1, b"after")]]
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_a_request_that_stops_waiting_leaves_its_call_and_the_order_alone() -> None:
    """The request whose call is in flight is cancelled (its deadline, its connection): the
    call goes on, and the next request is still sent only after it returned."""

    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = await started(coalescer, ("t", 0, b"a"))
        second = await started(coalescer, ("t", 0, b"b"))
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await settle()
        assert node.calls == [[("t", 0, b"a")]], "the second overtook the first"
        node.release_all()
        assert await finish(second) == [[("t", 0, 1)]]
        assert node.calls == [[("t", 0, b"a")], [("t", 0, b"b")]]
        await settle()
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_the_requests_a_call_carried_are_answered_though_its_first_stops_waiting() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = await started(coalescer, ("t", 0, b"a"))
        sender = await started(coalescer, ("t", 1, b"b"))
        rider = await started(coalescer, ("t", 2, b"b"))
        node.release(0)
        await finish(first)
        await settle()
        assert node.calls[1] == [("t", 1, b"b"), ("t", 2, b"b")]
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        node.release_all()
        assert await finish(rider) == [[("t", 2, 2)]]
        await settle()
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_a_cancelled_call_fails_what_it_carried_and_what_waited_behind_it() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True, fail_with=asyncio.CancelledError())
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        carried = await started(coalescer, ("t", 0, b"a"))
        behind = await started(coalescer, ("t", 0, b"b"))
        node.release_all()
        async with asyncio.timeout(STEP_TIMEOUT_S):
            outcomes = await asyncio.gather(carried, behind, return_exceptions=True)
        assert [type(o) for o in outcomes] == [UpstreamError, UpstreamError]
        assert all(o.code == ErrorCode.REQUEST_TIMED_OUT for o in outcomes)  # type: ignore[union-attr]
        assert node.calls == [[("t", 0, b"a")]]
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_connections_and_nodes_have_lanes_of_their_own() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        one = await started(coalescer, ("t", 0, b"a"), connection="127.0.0.1:1")
        other = await started(coalescer, ("t", 0, b"b"), connection="127.0.0.1:2")
        elsewhere = await started(coalescer, ("u", 0, b"c"), node="127.0.0.1:9002")
        # None waits for another's call.
        assert len(node.calls) == 3
        assert coalescer.lanes == 3
        node.release_all()
        await finish(one, other, elsewhere)
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_acks_and_transactional_ids_have_lanes_of_their_own() -> None:
    """An acks=all call carries its lane's transactional id (the node verifies transactional
    batches with it), so requests of another id, or other acks, never ride along."""

    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        all_ = storage_pb2.ACKS_ALL
        first = await started(coalescer, ("t", 0, b"a"), acks=all_, transactional_id="tx")
        leader = await started(coalescer, ("t", 0, b"b"))
        other = await started(coalescer, ("t", 0, b"c"), acks=all_, transactional_id="ty")
        queued = await started(coalescer, ("t", 0, b"d"), acks=all_, transactional_id="tx")
        assert node.calls == [[("t", 0, b"a")], [("t", 0, b"b")], [("t", 0, b"c")]]
        assert coalescer.lanes == 3
        node.release_all()
        await finish(first, leader, other, queued)
        assert node.calls[3] == [("t", 0, b"d")]
        assert node.transactional_ids == ["tx", "", "ty", "tx"]
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_merged_bytes_max_below_one_is_refused() -> None:
    node = RecordingNode()
    with pytest.raises(ValueError, match="merged_bytes_max"):
        ProduceCoalescer(node.send, merged_bytes_max=0)


def test_a_lane_whose_call_task_died_before_its_first_step_is_not_stuck() -> None:
    async def scenario() -> None:
        node = RecordingNode()
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        first = coalescer.enqueue(CONNECTION, NODE, ACKS, 1000, [("t", 0, b"a")])
        [lane] = coalescer._lanes.values()
        assert lane.call is not None
        lane.call.cancel()  # as the loop's cancel-all at shutdown may, before it ever ran
        await asyncio.sleep(0)
        second = coalescer.enqueue(CONNECTION, NODE, ACKS, 1000, [("t", 0, b"b")])
        async with asyncio.timeout(STEP_TIMEOUT_S):
            outcomes = await asyncio.gather(first, second, return_exceptions=True)
        # Each is answered or failed; none waits for a call that will never come.
        assert not isinstance(outcomes[1], BaseException)
        assert b"b" in [records for call in node.calls for _, _, records in call]
        await settle()
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_close_fails_what_the_lanes_carry_and_leaves_no_task() -> None:
    async def scenario() -> None:
        node = RecordingNode(hold=True)
        coalescer = ProduceCoalescer(node.send, merged_bytes_max=1 << 20)
        carried = await started(coalescer, ("t", 0, b"a"))
        waiting = await started(coalescer, ("t", 0, b"b"))
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await coalescer.close()
            outcomes = await asyncio.gather(carried, waiting, return_exceptions=True)
        assert [type(o) for o in outcomes] == [UpstreamError, UpstreamError]
        await settle()
        assert coalescer.lanes == 0

    asyncio.run(scenario())


def test_a_call_is_traced_as_its_first_requests_child() -> None:
    """Every call of a lane runs under the span of the first request it carries, not of the
    request that happened to open the lane."""

    async def scenario() -> None:
        seen: list[object] = []
        node = RecordingNode(hold=True)

        async def send(*args: Any) -> Sequence[storage_pb2.PartitionProduceResponse]:
            seen.append(trace.get_current_span())
            return await node.send(*args)

        coalescer = ProduceCoalescer(send, merged_bytes_max=1 << 20)
        tracer = TracerProvider().get_tracer(__name__)
        spans = []

        def enqueue(name: str, records: bytes) -> asyncio.Future[Any]:
            # The request's span lasts until it is answered, as the server's does.
            span = tracer.start_span(name)
            spans.append(span)
            with trace.use_span(span, end_on_exit=False):
                return coalescer.enqueue(CONNECTION, NODE, ACKS, 1000, [("t", 0, records)])

        first = enqueue("R1", b"a")
        await settle()
        second = enqueue("R2", b"b")
        node.release_all()
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await asyncio.gather(first, second)
        assert seen == spans
        for span in spans:
            span.end()

    asyncio.run(scenario())


def test_a_lane_whose_call_breaks_answers_every_request_and_the_next_starts_afresh() -> None:
    """A bug in a call (here, an answer that is no list) must not strand the requests it
    carried or those waiting behind it; the lane's next request gets a lane of its own."""

    async def scenario() -> None:
        calls = 0
        gate = asyncio.Event()

        async def send(*args: Any) -> Sequence[storage_pb2.PartitionProduceResponse]:
            nonlocal calls
            calls += 1
            if calls == 1:
                await gate.wait()
                return None  # type: ignore[return-value]
            parts = args[-1]
            return [storage_pb2.PartitionProduceResponse(topic=t, partition=p) for t, p, _ in parts]

        coalescer = ProduceCoalescer(send, merged_bytes_max=1 << 20)
        carried = await started(coalescer, ("t", 0, b"a"))
        waiting = await started(coalescer, ("t", 0, b"b"))
        gate.set()
        async with asyncio.timeout(STEP_TIMEOUT_S):
            outcomes = await asyncio.gather(carried, waiting, return_exceptions=True)
        assert [type(o) for o in outcomes] == [UpstreamError, UpstreamError]
        assert outcomes[0].code == ErrorCode.UNKNOWN_SERVER_ERROR  # type: ignore[union-attr]
        await settle()
        assert coalescer.lanes == 0
        assert await finish(await started(coalescer, ("t", 0, b"c"))) == [[("t", 0, 0)]]

    asyncio.run(scenario())
