"""Time for the group state machine: a clock and one-shot timers behind a small interface.

The state machine never sleeps and never polls: every deadline (a session expiring, a
rebalance giving up on members, the initial rebalance delay) is a timer it sets and cancels.
The service runs them on the event loop; tests drive them with a manual clock, so a 30 s
session timeout takes no wall time to prove.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["LoopTimers", "TimerHandle", "Timers"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds (commit timestamps and retention are wall-clock in Kafka)."""
        ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopTimers:
    """Timers on the running asyncio event loop; callbacks run on the loop thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_later(max(0, delay_ms) / 1000, callback)
