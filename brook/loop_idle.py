"""How idle a process's event loop is: the share of wall time it spends waiting in select.

Every Brook service handles all its requests on one asyncio event loop, so the loop's idle share
is what Kafka's request-handler pool reports as RequestHandlerAvgIdlePercent: near 1 the
process has headroom, near 0 requests queue behind each other. The monitor times the loop's
selector calls (the only place a loop waits), which costs two clock reads per loop iteration.

It reads the loop's private `_selector` (asyncio's selector event loops, the default on Linux and
macOS); on a loop without one `install` returns False and nothing is measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = ["WINDOW_S", "LoopIdleMonitor"]

WINDOW_S: Final = 10.0
"""The idle ratio covers at least this much of the recent past (and at most about twice that,
or the time since the previous reading if readings are rarer)."""


class LoopIdleMonitor:
    """Measures one event loop's idle time, from `install` until `uninstall`. Read it from any
    thread (the values are single floats)."""

    def __init__(
        self, *, window_s: float = WINDOW_S, clock_s: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_s
        self._clock_s = clock_s
        self._selector: Any = None
        self._timed_select: Callable[[float | None], Any] | None = None
        self._idle_s = 0.0
        self._selecting_since: float | None = None
        now_s = clock_s()
        # (wall clock, idle seconds) at the start of the current and the previous window.
        self._older = self._newer = (now_s, 0.0)

    def install(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Starts timing `loop`'s waits; False if the loop has no selector to time or another
        monitor times it already (one per loop: a second would only count the same waits)."""
        selector = getattr(loop, "_selector", None)
        if selector is None or self._selector is not None or "select" in vars(selector):
            return False
        select = selector.select

        def timed_select(timeout: float | None = None) -> Any:
            self._selecting_since = started_s = self._clock_s()
            try:
                return select(timeout)
            finally:
                self._selecting_since = None
                self._idle_s += self._clock_s() - started_s

        selector.select = timed_select
        self._selector = selector
        self._timed_select = timed_select
        now_s = self._clock_s()
        self._older = self._newer = (now_s, self.idle_seconds())
        return True

    def uninstall(self) -> None:
        """Stops timing (the loop's selector is its own again)."""
        if self._selector is not None:
            if vars(self._selector).get("select") is self._timed_select:
                del self._selector.select
            self._selector = None

    def idle_seconds(self) -> float:
        """Seconds the loop has spent waiting since `install`, a wait in progress included."""
        since = self._selecting_since
        ongoing = 0.0 if since is None else max(0.0, self._clock_s() - since)
        return self._idle_s + ongoing

    def idle_ratio(self) -> float:
        """The share of wall time the loop waited, 0..1, over the recent window (WINDOW_S)."""
        now_s = self._clock_s()
        idle_s = self.idle_seconds()
        if now_s - self._newer[0] >= self._window_s:
            self._older, self._newer = self._newer, (now_s, idle_s)
        wall_s = now_s - self._older[0]
        if wall_s <= 0:
            return 1.0
        return min(1.0, max(0.0, (idle_s - self._older[1]) / wall_s))
