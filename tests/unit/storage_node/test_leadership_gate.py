"""Produce requests that reach a node while it is still opening the log of a partition the
metadata already names it the leader of: they wait, and append in the order they arrived,
instead of failing (a pipelining client without idempotence would retry the failed one after
later ones landed, out of order). The real node serves them in-process; the log's opening is
held on a (threading) event, standing for a slow disk."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from brook_storage_node.log import PartitionLog
from brook_storage_node.replica_manager import ReplicaManager
from storage_node_support import (
    NODE_ID,
    Node,
    QueueMetadataSource,
    batch,
    broker_record,
    delta,
    fetch_request,
    partition_record,
    produce_request,
    run,
    running_node,
    snapshot,
    topic_record,
)

from brook.errors import ErrorCode, error_code
from brook.v1 import storage_pb2

SLOW_TOPIC = "fresh"
READY_TOPIC = "ready"
HELD_S = 10.0
# Long enough for a request to reach the node and take its place at the gate.
ARRIVAL_S = 0.1
REQUESTS = 4
RECORDS_PER_REQUEST = 3


@pytest.fixture
def held_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Opening a log of SLOW_TOPIC blocks (on the log manager's thread) until the event is set."""
    release = threading.Event()
    original: Callable[..., Any] = PartitionLog.open

    def slow_open(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.name.startswith(f"{SLOW_TOPIC}-"):
            release.wait(HELD_S)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "open", slow_open)
    yield release
    release.set()


@asynccontextmanager
async def _becoming_leader(
    tmp_path: Path,
) -> AsyncIterator[tuple[Node, ReplicaManager, asyncio.Future[None]]]:
    """A node leading READY_TOPIC-0 and told it leads the new SLOW_TOPIC-0, still opening its
    log: (the node, its replica manager, the push of that metadata, done once the node has
    applied it)."""
    made: list[QueueMetadataSource] = []

    def build(port: int) -> QueueMetadataSource:
        made.append(
            QueueMetadataSource(
                snapshot(
                    broker_record(NODE_ID, port),
                    topic_record(READY_TOPIC),
                    partition_record(READY_TOPIC, 0),
                )
            )
        )
        return made[-1]

    async with running_node(tmp_path, source_for=build) as node:
        replicas = node.node.replicas
        assert replicas is not None
        new_topic = delta(topic_record(SLOW_TOPIC), partition_record(SLOW_TOPIC, 0), offset=1)
        applying = asyncio.ensure_future(made[0].push(new_topic))
        try:
            for _ in range(200):
                if replicas.view.partition(SLOW_TOPIC, 0) is not None:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the node did not take the new topic's metadata")
            yield node, replicas, applying
        finally:
            applying.cancel()


def test_requests_arriving_while_the_log_opens_append_in_arrival_order(
    tmp_path: Path, held_open: threading.Event
) -> None:
    async def scenario() -> None:
        async with _becoming_leader(tmp_path) as (node, replicas, applying):
            sent = []
            for i in range(REQUESTS):
                acks = storage_pb2.ACKS_ALL if i % 2 else storage_pb2.ACKS_LEADER
                data = batch(RECORDS_PER_REQUEST, prefix=f"req{i}")
                sent.append(
                    asyncio.ensure_future(
                        node.stub.Produce(produce_request(SLOW_TOPIC, 0, data, acks=acks))
                    )
                )
                await asyncio.sleep(ARRIVAL_S)
            assert not any(call.done() for call in sent), "a request did not wait for the log"
            assert len(replicas.gates) == 1

            held_open.set()
            replies = await asyncio.gather(*sent)
            await applying

            assert [error_code(r.partitions[0].error_code) for r in replies] == [
                ErrorCode.NONE
            ] * REQUESTS
            assert [r.partitions[0].base_offset for r in replies] == [
                i * RECORDS_PER_REQUEST for i in range(REQUESTS)
            ]
            fetched = await node.stub.Fetch(fetch_request(SLOW_TOPIC, 0, 0, decode=True))
            values = [r.value for r in fetched.partitions[0].decoded_records]
            assert values == [
                f"req{i}-value-{n}".encode()
                for i in range(REQUESTS)
                for n in range(RECORDS_PER_REQUEST)
            ]
            assert len(replicas.gates) == 0

    run(scenario)


def test_a_request_whose_timeout_passes_at_the_gate_fails_and_appends_nothing(
    tmp_path: Path, held_open: threading.Event
) -> None:
    async def scenario() -> None:
        async with _becoming_leader(tmp_path) as (node, replicas, applying):
            impatient = await node.stub.Produce(
                produce_request(SLOW_TOPIC, 0, batch(2, prefix="late"), timeout_ms=200)
            )
            result = impatient.partitions[0]
            assert error_code(result.error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert "becoming the leader" in result.error_message

            held_open.set()
            await applying
            after = await node.stub.Produce(
                produce_request(SLOW_TOPIC, 0, batch(2, prefix="ok"), timeout_ms=5000)
            )
            assert error_code(after.partitions[0].error_code) is ErrorCode.NONE
            assert after.partitions[0].base_offset == 0
            fetched = await node.stub.Fetch(fetch_request(SLOW_TOPIC, 0, 0, decode=True))
            assert [r.value for r in fetched.partitions[0].decoded_records] == [
                b"ok-value-0",
                b"ok-value-1",
            ]
            assert len(replicas.gates) == 0

    run(scenario)


def test_shutdown_answers_requests_still_waiting_at_a_gate(
    tmp_path: Path, held_open: threading.Event
) -> None:
    async def scenario() -> None:
        async with _becoming_leader(tmp_path) as (node, replicas, applying):
            waiting = asyncio.ensure_future(
                node.stub.Produce(produce_request(SLOW_TOPIC, 0, batch(1)))
            )
            await asyncio.sleep(ARRIVAL_S)
            assert not waiting.done()

            replicas.wake_all()
            reply = await asyncio.wait_for(waiting, 5.0)
            assert error_code(reply.partitions[0].error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
            held_open.set()
            await applying

    run(scenario)


def _request(*parts: tuple[str, bytes], timeout_ms: int = 5000) -> storage_pb2.ProduceRequest:
    return storage_pb2.ProduceRequest(
        acks=storage_pb2.ACKS_ALL,
        timeout_ms=timeout_ms,
        partitions=[
            storage_pb2.PartitionProduceData(topic=topic, partition=0, records=data)
            for topic, data in parts
        ],
    )


def test_a_later_request_does_not_overtake_a_waiting_one_on_a_partition_already_led(
    tmp_path: Path, held_open: threading.Event
) -> None:
    async def scenario() -> None:
        async with _becoming_leader(tmp_path) as (node, replicas, applying):
            both = asyncio.ensure_future(
                node.stub.Produce(
                    _request(
                        (READY_TOPIC, batch(1, prefix="first")),
                        (SLOW_TOPIC, batch(1, prefix="fresh")),
                    )
                )
            )
            await asyncio.sleep(ARRIVAL_S)
            later = asyncio.ensure_future(
                node.stub.Produce(_request((READY_TOPIC, batch(1, prefix="second"))))
            )
            await asyncio.sleep(ARRIVAL_S)
            assert not later.done(), "the later request appended while the earlier one waited"

            held_open.set()
            replies = await asyncio.gather(both, later)
            await applying

            for reply in replies:
                assert [error_code(p.error_code) for p in reply.partitions] == [
                    ErrorCode.NONE
                ] * len(reply.partitions)
            fetched = await node.stub.Fetch(fetch_request(READY_TOPIC, 0, 0, decode=True))
            assert [r.value for r in fetched.partitions[0].decoded_records] == [
                b"first-value-0",
                b"second-value-0",
            ]
            assert len(replicas.gates) == 0

    run(scenario)


def test_a_partition_named_twice_appends_both_at_its_turn_in_order(
    tmp_path: Path, held_open: threading.Event
) -> None:
    async def scenario() -> None:
        async with _becoming_leader(tmp_path) as (node, replicas, applying):
            repeated = asyncio.ensure_future(
                node.stub.Produce(
                    _request((SLOW_TOPIC, batch(1, prefix="a")), (SLOW_TOPIC, batch(1, prefix="b")))
                )
            )
            await asyncio.sleep(ARRIVAL_S)
            behind = asyncio.ensure_future(
                node.stub.Produce(_request((SLOW_TOPIC, batch(1, prefix="ok"))))
            )
            await asyncio.sleep(ARRIVAL_S)

            held_open.set()
            opened = time.monotonic()
            twice, appended = await asyncio.gather(repeated, behind)
            await applying

            # The repeat takes one place at the gate: both its entries append, in order, when
            # the log is open, and the request behind it after them.
            assert time.monotonic() - opened < 2.0
            assert [error_code(p.error_code) for p in twice.partitions] == [ErrorCode.NONE] * 2
            assert [p.base_offset for p in twice.partitions] == [0, 1]
            assert error_code(appended.partitions[0].error_code) is ErrorCode.NONE
            assert appended.partitions[0].base_offset == 2
            assert len(replicas.gates) == 0

    run(scenario)
