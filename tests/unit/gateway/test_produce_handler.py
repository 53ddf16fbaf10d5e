"""The gateway's Produce handler over a stand-in for the storage nodes: a connection's batches
reach each node in the order the client sent them, and a request naming a partition twice is
refused without being sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from brook_gateway.apis import RequestContext
from brook_gateway.backend import Routed
from brook_gateway.fan_out import Part
from brook_gateway.produce import ProduceAffinity, ProduceCoalescer, _ProduceHandler
from brook_gateway.protocol.frames import RequestHeader
from brook_gateway.protocol.kafka_messages import ApiKey

from brook.errors import ErrorCode
from brook.v1 import storage_pb2

STEP_TIMEOUT_S = 5.0
PEER = "127.0.0.1:50000"
# Partition 0 is led by node A, partition 1 by node B.
LEADERS = {("t", 0): "A", ("t", 1): "B"}


class _Backend:
    """Routes by LEADERS; the rest of the Backend is never reached by successful answers."""

    image: Any = None

    def route(self, items: Iterable[tuple[str, int, Part]]) -> Routed[Part]:
        routed: Routed[Part] = Routed()
        for topic, partition, item in items:
            routed.by_address.setdefault(LEADERS[(topic, partition)], []).append(item)
        return routed


class _Nodes:
    """Records the calls each node gets; a call to B takes a while (A's do not)."""

    def __init__(self) -> None:
        self.appended: dict[str, list[bytes]] = {"A": [], "B": []}
        self.offsets: dict[tuple[str, int], int] = {}

    async def send(
        self, address: str, acks: int, timeout_ms: int, transactional_id: str, parts: list[Part]
    ) -> list[storage_pb2.PartitionProduceResponse]:
        del acks, timeout_ms, transactional_id
        if address == "B":
            await asyncio.sleep(0.05)
        answers = []
        for topic, partition, records in parts:
            self.appended[address].append(records)
            offset = self.offsets.get((topic, partition), 0)
            self.offsets[(topic, partition)] = offset + 1
            answers.append(
                storage_pb2.PartitionProduceResponse(
                    topic=topic, partition=partition, base_offset=offset
                )
            )
        return answers


def _handler(nodes: _Nodes) -> _ProduceHandler:
    return _ProduceHandler(
        _Backend(),  # type: ignore[arg-type]
        ProduceAffinity(),
        ProduceCoalescer(nodes.send, merged_bytes_max=1 << 20),
    )


def _request(acks: int, *parts: tuple[int, bytes]) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {
                "name": "t",
                "partition_data": [{"index": p, "records": records} for p, records in parts],
            }
        ],
    }


def _context(correlation_id: int) -> RequestContext:
    return RequestContext(RequestHeader(ApiKey.PRODUCE, 9, correlation_id, "c"), PEER)


def test_a_request_reaching_two_nodes_is_not_overtaken_at_either_by_the_next() -> None:
    async def scenario() -> None:
        for acks in (1, -1):
            nodes = _Nodes()
            handler = _handler(nodes)
            # As the server does: a task per request, created in the order they arrived.
            first = asyncio.create_task(
                handler.handle(_request(acks, (0, b"R1-p0"), (1, b"R1-p1")), _context(1))
            )
            second = asyncio.create_task(handler.handle(_request(acks, (0, b"R2-p0")), _context(2)))
            async with asyncio.timeout(STEP_TIMEOUT_S):
                answers = await asyncio.gather(first, second)
            assert nodes.appended["A"] == [b"R1-p0", b"R2-p0"], acks
            offsets = [
                [p["base_offset"] for t in answer["responses"] for p in t["partition_responses"]]
                for answer in answers
            ]
            assert offsets == [[0, 0], [1]]

    asyncio.run(scenario())


def test_a_partition_named_twice_in_one_request_is_refused_and_not_sent() -> None:
    async def scenario() -> None:
        nodes = _Nodes()
        handler = _handler(nodes)
        request = _request(1, (0, b"first"), (1, b"other"), (0, b"second"))
        async with asyncio.timeout(STEP_TIMEOUT_S):
            answer = await handler.handle(request, _context(1))
        assert answer is not None
        codes = [p["error_code"] for p in answer["responses"][0]["partition_responses"]]
        assert codes == [ErrorCode.INVALID_REQUEST, ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
        assert nodes.appended == {"A": [], "B": [b"other"]}

    asyncio.run(scenario())
