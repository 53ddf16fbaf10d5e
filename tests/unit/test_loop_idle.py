"""The event loop's idle share (Kafka's RequestHandlerAvgIdlePercent): near 1 for a loop that
waits, near 0 for one kept busy, and the loop is its own again after uninstall."""

from __future__ import annotations

import asyncio
import time

from brook.loop_idle import LoopIdleMonitor

WINDOW_S = 0.2
PHASE_S = 0.5


async def _busy(seconds: float) -> None:
    """Holds the loop without yielding, as a CPU-bound request handler would."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def test_a_waiting_loop_reads_idle_and_a_busy_loop_reads_busy() -> None:
    loop = asyncio.new_event_loop()
    monitor = LoopIdleMonitor(window_s=WINDOW_S)
    try:
        assert monitor.install(loop)
        loop.run_until_complete(asyncio.sleep(PHASE_S))
        assert monitor.idle_ratio() > 0.8
        assert monitor.idle_seconds() >= PHASE_S * 0.8

        idle_before = monitor.idle_seconds()
        loop.run_until_complete(_busy(PHASE_S))
        assert monitor.idle_ratio() < 0.2
        assert monitor.idle_seconds() - idle_before < PHASE_S * 0.2
    finally:
        monitor.uninstall()
        loop.close()


def test_one_monitor_per_loop_and_uninstall_gives_the_loop_back() -> None:
    loop = asyncio.new_event_loop()
    monitor = LoopIdleMonitor()
    try:
        assert monitor.install(loop)
        assert not monitor.install(loop)
        assert not LoopIdleMonitor().install(loop)
        monitor.uninstall()
        measured = monitor.idle_seconds()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert monitor.idle_seconds() == measured
        assert "select" not in vars(loop._selector)  # type: ignore[attr-defined]
    finally:
        loop.close()
