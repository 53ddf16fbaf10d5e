"""Producer ids from controller blocks (brook/producer_ids.py): lazy fetch, prefetch at 90 %,
the retriable answer while no block is at hand, bounded retries, no id ever handed out twice."""

from __future__ import annotations

import asyncio

import pytest

from brook.errors import ErrorCode
from brook.producer_ids import (
    FETCH_ATTEMPTS_MAX,
    PRODUCER_EPOCH_MAX,
    ProducerIdBlock,
    ProducerIdManager,
    ProducerIdUnavailableError,
    bumped,
)
from brook.rpc.backoff import RetryBackoff

BACKOFF = RetryBackoff(5, 20)
WAIT_S = 5.0


class _Controller:
    """Hands out consecutive blocks of ``size`` ids, after failing ``failures`` times; a
    scripted block can be queued to play a deposed controller."""

    def __init__(self, size: int, failures: int = 0) -> None:
        self.size = size
        self.next_first = 0
        self.failures = failures
        self.calls = 0
        self.scripted: list[ProducerIdBlock] = []
        self.gate: asyncio.Event | None = None

    async def allocate(self) -> ProducerIdBlock:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise ConnectionError("controller unreachable")
        if self.scripted:
            return self.scripted.pop(0)
        block = ProducerIdBlock(self.next_first, self.size)
        self.next_first += self.size
        return block


def test_ids_come_from_consecutive_blocks_and_the_next_is_fetched_at_ninety_percent() -> None:
    async def scenario() -> None:
        controller = _Controller(size=10)
        manager = ProducerIdManager(controller.allocate, BACKOFF)
        try:
            ids = [await manager.generate(WAIT_S) for _ in range(8)]
            assert ids == list(range(8))
            assert controller.calls == 1
            ids.append(await manager.generate(WAIT_S))  # the 9th of 10: prefetch starts
            await asyncio.sleep(0)
            assert controller.calls == 2
            ids += [await manager.generate(WAIT_S) for _ in range(11)]
            assert ids == list(range(20))
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_without_a_block_the_caller_waits_up_to_its_bound_then_gets_a_retriable_error() -> None:
    async def scenario() -> None:
        controller = _Controller(size=10)
        controller.gate = asyncio.Event()
        manager = ProducerIdManager(controller.allocate, BACKOFF)
        try:
            with pytest.raises(ProducerIdUnavailableError) as unavailable:
                await manager.generate(0.05)
            assert unavailable.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert unavailable.value.code.retriable
            controller.gate.set()
            assert await manager.generate(WAIT_S) == 0
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_a_failed_fetch_is_retried_after_a_backoff() -> None:
    async def scenario() -> None:
        controller = _Controller(size=10, failures=3)
        manager = ProducerIdManager(controller.allocate, BACKOFF)
        try:
            assert await manager.generate(WAIT_S) == 0
            assert controller.calls == 4
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_a_fetch_gives_up_after_its_attempts_and_the_next_request_starts_another() -> None:
    async def scenario() -> None:
        controller = _Controller(size=10, failures=FETCH_ATTEMPTS_MAX)
        manager = ProducerIdManager(controller.allocate, BACKOFF)
        try:
            with pytest.raises(ProducerIdUnavailableError, match="ConnectionError"):
                await manager.generate(WAIT_S)
            assert controller.calls == FETCH_ATTEMPTS_MAX
            assert not manager.fetching
            assert await manager.generate(WAIT_S) == 0
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_a_block_overlapping_ids_already_handed_out_is_refused() -> None:
    async def scenario() -> None:
        controller = _Controller(size=10)
        manager = ProducerIdManager(controller.allocate, BACKOFF)
        try:
            ids = [await manager.generate(WAIT_S) for _ in range(5)]
            # A deposed controller answers the prefetch with a block that was already given.
            controller.scripted.append(ProducerIdBlock(0, 10))
            ids += [await manager.generate(WAIT_S) for _ in range(15)]
            assert ids == list(range(20))
            assert not controller.scripted, "the stale block was never offered"
            assert controller.calls >= 3
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_close_cancels_a_fetch_in_flight() -> None:
    async def scenario() -> None:
        controller = _Controller(size=10)
        controller.gate = asyncio.Event()
        manager = ProducerIdManager(controller.allocate, BACKOFF)
        assert manager.try_generate() is None
        assert manager.fetching
        await manager.close()
        assert not manager.fetching

    asyncio.run(scenario())


def test_an_epoch_bump_keeps_the_id_until_the_epoch_is_exhausted() -> None:
    assert bumped(42, 0) == (42, 1)
    assert bumped(42, PRODUCER_EPOCH_MAX - 1) == (42, PRODUCER_EPOCH_MAX)
    assert bumped(42, PRODUCER_EPOCH_MAX) is None
