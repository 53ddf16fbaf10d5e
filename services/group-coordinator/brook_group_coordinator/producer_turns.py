"""One transactional write at a time per (group, producer id): a TxnCommitOffsets or a
CompleteTransaction is checked and decided (its producer fencing, which pending offsets an end
drops or commits) only once the producer's previous one in the group has left the append queue
and been applied, even if that one's caller stopped waiting after its records were sent.

So a write never acts on what an earlier write of its producer, still in flight, is about to
change: an end that lands after a pending offset in __consumer_offsets always knows it (and
tombstones it), and a pending offset of an epoch older than an end before it is refused
(PRODUCER_FENCED) instead of landing after that end. Kafka gets this from its marker, which
ends everything of the producer before it in the log; Brook's end lists what it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["ProducerTurn", "ProducerTurns"]


class ProducerTurn:
    """Held from its checks until its write left the append queue, or, if it queued none,
    until its caller is done (``ProducerTurns.turn``)."""

    def __init__(self, ended: asyncio.Future[None]) -> None:
        self._ended = ended
        # Whether a queued write ends the turn (GroupManager._append), not the caller.
        self.handed_over = False

    def end(self) -> None:
        """Lets the producer's next write go ahead; repeating it does nothing."""
        if not self._ended.done():
            self._ended.set_result(None)


class ProducerTurns:
    def __init__(self) -> None:
        self._current: dict[tuple[str, int], asyncio.Future[None]] = {}

    async def _take(self, group_id: str, producer_id: int) -> ProducerTurn:
        """Waits for the turns taken before for the producer in the group to end. A caller
        cancelled while waiting takes none."""
        key = (group_id, producer_id)
        while (current := self._current.get(key)) is not None and not current.done():
            await asyncio.wait([current])
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._current[key] = ended
        ended.add_done_callback(lambda _: self._forget(key, ended))
        return ProducerTurn(ended)

    @asynccontextmanager
    async def turn(self, group_id: str, producer_id: int) -> AsyncIterator[ProducerTurn]:
        """Waits for the producer's turn in the group (``_take``), ending it on leaving unless
        a queued write was handed it."""
        turn = await self._take(group_id, producer_id)
        try:
            yield turn
        finally:
            if not turn.handed_over:
                turn.end()

    def _forget(self, key: tuple[str, int], ended: asyncio.Future[None]) -> None:
        if self._current.get(key) is ended:
            del self._current[key]
