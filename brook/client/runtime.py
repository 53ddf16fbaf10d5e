"""What lets one asyncio core serve both the blocking and the asyncio API.

The clients' network work always runs on an event loop: the application's own loop for
``AsyncProducer``/``AsyncConsumer``, or a ``LoopThread`` (a daemon thread running a private
loop) for the blocking ``Producer``/``Consumer``. Application threads and that loop meet
through two small primitives:

- ``Wakeup``: an asyncio.Event on the client's loop that any thread may set; repeated sets
  before the loop wakes cost one flag test each, so a hot path can call it freely.
- ``Notifier``: the other direction. The loop calls ``notify()`` when state that callers
  wait for has changed (metadata, buffer memory, fetched data); a blocked thread or a
  coroutine on any loop wakes and re-checks its condition. Versions make the check-then-wait
  race free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

from brook.client.errors import ClientClosedError, ClientTimeoutError

__all__ = [
    "LoopThread",
    "Notifier",
    "Steps",
    "Wakeup",
    "drive",
    "drive_async",
    "resolve_future",
]

T = TypeVar("T")

# How long stopping a LoopThread waits for its tasks to finish after cancelling them.
LOOP_STOP_TIMEOUT_S = 5.0


def resolve_future(future: asyncio.Future[None]) -> None:
    """Complete ``future`` with None from any thread (a no-op if done or its loop closed)."""
    loop = future.get_loop()
    if asyncio._get_running_loop() is loop:
        if not future.done():
            future.set_result(None)
        return
    with contextlib.suppress(RuntimeError):  # the loop was closed: nobody is waiting
        loop.call_soon_threadsafe(_set_if_pending, future)


def _set_if_pending(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Wakeup:
    """An event on ``loop`` that any thread may set."""

    __slots__ = ("_event", "_loop", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self._pending = False

    def set(self) -> None:
        if self._pending:
            return
        self._pending = True
        if asyncio._get_running_loop() is self._loop:
            self._event.set()
        else:
            with contextlib.suppress(RuntimeError):  # loop closed: the client is gone
                self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout_s: float | None) -> None:
        """Until set or ``timeout_s`` (None: no bound) passes. The caller re-examines its
        state afterwards, so a set that lands while it does so is never lost: the flag is
        cleared before the caller looks."""
        try:
            if timeout_s is None:
                await self._event.wait()
            elif timeout_s > 0:
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
                # arrives as the event is set, and a cancelled task would then run on.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_s):
                        await self._event.wait()
            else:
                await asyncio.sleep(0)  # due now: still let the loop's other tasks run
        finally:
            self._event.clear()
            self._pending = False


class Notifier:
    """Wakes threads and coroutines waiting for a change; see the module docstring."""

    __slots__ = ("_async_waiters", "_cond", "_version")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._version = 0
        self._async_waiters: list[asyncio.Future[None]] = []

    @property
    def version(self) -> int:
        return self._version

    def notify(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for future in waiters:
            resolve_future(future)

    def wait(self, version: int, timeout_s: float) -> None:
        """Block until the version moves past ``version`` or ``timeout_s`` passes."""
        with self._cond:
            if self._version == version and timeout_s > 0:
                self._cond.wait(timeout_s)

    async def wait_async(self, version: int, timeout_s: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._cond:
            if self._version != version or timeout_s <= 0:
                return
            self._async_waiters.append(future)
        try:
            await asyncio.wait((future,), timeout=timeout_s)
        finally:
            if not future.done():
                with self._cond, contextlib.suppress(ValueError):
                    self._async_waiters.remove(future)
                future.cancel()


# A blocking operation written once for both APIs: a generator that yields
# (notifier version, seconds to wait) whenever it must wait for a change, and returns its
# result. ``drive`` runs it in a thread, ``drive_async`` in a coroutine.
Steps = Generator[tuple[int, float], None, T]


def drive(steps: Steps[T], notifier: Notifier) -> T:
    try:
        while True:
            version, timeout_s = next(steps)
            notifier.wait(version, timeout_s)
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        steps.close()


async def drive_async(steps: Steps[T], notifier: Notifier) -> T:
    try:
        while True:
            version, timeout_s = next(steps)
            await notifier.wait_async(version, timeout_s)
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        steps.close()


class LoopThread:
    """A private event loop in a daemon thread, for the blocking clients."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            with contextlib.suppress(RuntimeError):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        """Run ``coro`` on the loop and wait for its result (at most ``timeout_s``: then it is
        cancelled and ClientTimeoutError raised)."""
        if not self._thread.is_alive():
            coro.close()
            raise ClientClosedError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if future.done():
                # The coroutine's own TimeoutError (a ClientTimeoutError saying which bound
                # ran out): concurrent.futures.TimeoutError is TimeoutError since 3.11.
                raise
            future.cancel()
            raise ClientTimeoutError(f"operation did not finish within {timeout_s} s") from None

    def stop(self) -> None:
        """Cancel whatever still runs on the loop, stop it and join the thread (bounded)."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop)
        self._thread.join(LOOP_STOP_TIMEOUT_S + 1)

    async def _cancel_all(self) -> None:
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=LOOP_STOP_TIMEOUT_S)
        self.loop.stop()
