"""Producer ids for InitProducerId, from blocks the controllers allocate (Kafka's
RPCProducerIdManager): the storage nodes' for idempotent producers, the transaction
coordinators' for transactional ones.

The controllers hand out disjoint blocks of ids through Raft (AllocateProducerIds), so ids are
unique across the cluster and across controller failover. A process takes ids from its
current block; the first request fetches a block, and once ``PREFETCH_RATIO`` of the current
one is used the next is fetched in the background, so a busy process rarely waits. While no id
is at hand the caller waits for the fetch in flight, for at most the time it is given; after
that it is told COORDINATOR_LOAD_IN_PROGRESS, Kafka's retriable answer in the same situation
("Producer ID block is full. Waiting for next block"). A failed fetch is retried after
retry.backoff.ms growing to retry.backoff.max.ms; each fetch is bounded by request.timeout.ms
(the controller client's deadline), and a fetch gives up after ``FETCH_ATTEMPTS_MAX`` failures
in a row (the next request starts another).

A block that does not lie wholly above every id already handed out is refused and logged: an
answer from a deposed controller must never make an id repeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from brook.errors import ErrorCode
from brook.membership import ClusterMembership
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.v1 import controller_pb2

__all__ = [
    "FETCH_ATTEMPTS_MAX",
    "PREFETCH_RATIO",
    "PRODUCER_EPOCH_MAX",
    "ProducerIdBlock",
    "ProducerIdManager",
    "ProducerIdUnavailableError",
    "controller_blocks",
]

_log = logging.getLogger(__name__)

PREFETCH_RATIO: Final = 0.9
# Failed fetches in a row before the fetch gives up; the next InitProducerId starts another.
FETCH_ATTEMPTS_MAX: Final = 10
# Kafka bumps an epoch up to Short.MAX_VALUE - 1 and hands out a new id after that, so the
# epoch never wraps into a value an old instance could still hold.
PRODUCER_EPOCH_MAX: Final = 32766


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    first_producer_id: int
    size: int

    @property
    def end(self) -> int:
        """The first id after the block."""
        return self.first_producer_id + self.size


class ProducerIdUnavailableError(Exception):
    """No producer id is at hand yet (COORDINATOR_LOAD_IN_PROGRESS: retry shortly)."""

    code: Final = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


Allocate = Callable[[], Awaitable[ProducerIdBlock]]


def controller_blocks(membership: ClusterMembership, node_id: int) -> Allocate:
    """``Allocate`` asking the controllers (AllocateProducerIds, bounded by request.timeout.ms,
    the controller client's deadline) as node ``node_id`` in its current broker epoch."""

    async def allocate() -> ProducerIdBlock:
        answer = await membership.client.allocate_producer_ids(
            controller_pb2.AllocateProducerIdsRequest(
                node_id=node_id, broker_epoch=membership.lifecycle.broker_epoch
            )
        )
        if answer.error_code is not ErrorCode.NONE:
            raise RuntimeError(
                f"controller {answer.address}: {answer.error_code.name}: "
                f"{answer.response.error_message}"
            )
        return ProducerIdBlock(answer.response.first_producer_id, answer.response.size)

    return allocate


class ProducerIdManager:
    """Create and use on one event loop; ``close`` cancels a fetch in flight.

    ``allocate`` asks the controllers for a block and raises any Exception when it cannot
    get one (it must bound its own duration).
    """

    def __init__(self, allocate: Allocate, retry_backoff: RetryBackoff) -> None:
        self._allocate = allocate
        self._retry_backoff = retry_backoff
        self._current: ProducerIdBlock | None = None
        self._next_id = -1
        self._next_block: ProducerIdBlock | None = None
        # Every id below this has been handed out or belongs to a block already taken.
        self._floor = 0
        self._fetch: asyncio.Task[None] | None = None
        self._failures = 0
        self._arrived = asyncio.Event()
        self._closed = False
        self.last_error = ""

    async def close(self) -> None:
        self._closed = True
        fetch = self._fetch
        if fetch is not None:
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)

    @property
    def fetching(self) -> bool:
        return self._fetch is not None and not self._fetch.done()

    def try_generate(self) -> int | None:
        """The next id, or None when none is at hand (a fetch is then under way)."""
        producer_id = self._take_available()
        if producer_id is None:
            self._start_fetch()
        return producer_id

    def _take_available(self) -> int | None:
        block = self._current
        if block is None or self._next_id >= block.end:
            if self._next_block is not None:
                block = self._current = self._next_block
                self._next_block = None
                self._next_id = block.first_producer_id
            else:
                self._current = None
                return None
        producer_id = self._next_id
        self._next_id += 1
        used = self._next_id - block.first_producer_id
        if self._next_block is None and used >= block.size * PREFETCH_RATIO:
            self._start_fetch()
        return producer_id

    async def generate(self, wait_s: float) -> int:
        """The next id, waiting up to ``wait_s`` for a block; ProducerIdUnavailableError if
        none arrives in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_s, 0.0)
        producer_id = self.try_generate()
        while producer_id is None:
            remaining_s = deadline - loop.time()
            # A fetch that gave up is not restarted within one call: the caller's retry will.
            if remaining_s <= 0 or self._closed or not self.fetching:
                detail = f" (last failure: {self.last_error})" if self.last_error else ""
                raise ProducerIdUnavailableError(
                    "this process is still fetching a block of producer ids from the "
                    f"controllers{detail}; retry shortly"
                )
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining_s)
            except TimeoutError:
                pass
            producer_id = self._take_available()
        return producer_id

    def _start_fetch(self) -> None:
        if self._closed or self.fetching:
            return
        self._fetch = asyncio.get_running_loop().create_task(
            self._fetch_block(), name="producer-id-block"
        )

    async def _fetch_block(self) -> None:
        try:
            await self._fetch_attempts()
        finally:
            # Waiters learn at once that this fetch is over, whatever its outcome.
            self._arrived.set()

    async def _fetch_attempts(self) -> None:
        for attempt in range(1, FETCH_ATTEMPTS_MAX + 1):
            if self._closed:
                return
            try:
                block = await self._allocate()
            except Exception as exc:
                self._failed(f"{type(exc).__name__}: {exc}")
            else:
                if block.size <= 0 or block.first_producer_id < self._floor:
                    self._failed(
                        f"refused block [{block.first_producer_id}, {block.end}): empty, or "
                        f"overlapping ids already handed out (all below {self._floor})"
                    )
                    _log.error("producer id block: %s", self.last_error)
                else:
                    self._floor = block.end
                    self._failures = 0
                    self.last_error = ""
                    if self._current is None:
                        self._current = block
                        self._next_id = block.first_producer_id
                    else:
                        self._next_block = block
                    _log.info(
                        "producer id block [%d, %d) received", block.first_producer_id, block.end
                    )
                    return
            if attempt < FETCH_ATTEMPTS_MAX:
                await asyncio.sleep(backoff_s(self._retry_backoff, self._failures))

    def _failed(self, reason: str) -> None:
        self._failures += 1
        self.last_error = reason
        _log.warning("cannot get a producer id block (attempt %d): %s", self._failures, reason)
        # Waiters learn of the failure at once instead of at their deadline.
        self._arrived.set()


def bumped(producer_id: int, producer_epoch: int) -> tuple[int, int] | None:
    """KIP-360's bump of a non-transactional producer: the same id one epoch on, or None when
    the epoch is exhausted and a new id must be handed out."""
    if producer_epoch >= PRODUCER_EPOCH_MAX:
        return None
    return producer_id, producer_epoch + 1
