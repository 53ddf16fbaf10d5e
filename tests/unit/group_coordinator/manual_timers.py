"""A manual clock for the group state machine: time moves only when a test advances it."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

__all__ = ["ManualTimers"]


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimers:
    def __init__(self, start_ms: int = 1_000_000) -> None:
        self._now_ms = start_ms
        self._queue: list[tuple[int, int, _Handle, Callable[[], None]]] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _Handle:
        handle = _Handle()
        heapq.heappush(
            self._queue, (self._now_ms + max(0, delay_ms), next(self._sequence), handle, callback)
        )
        return handle

    def advance(self, delta_ms: int) -> None:
        """Runs, in deadline order, every timer due within the next ``delta_ms``."""
        until_ms = self._now_ms + delta_ms
        while self._queue and self._queue[0][0] <= until_ms:
            due_ms, _, handle, callback = heapq.heappop(self._queue)
            self._now_ms = due_ms
            if not handle.cancelled:
                callback()
        self._now_ms = until_ms

    def live_timers(self) -> int:
        return sum(1 for _, _, handle, _ in self._queue if not handle.cancelled)
