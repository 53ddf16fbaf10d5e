"""Following the metadata log through the controllers' WatchMetadata stream.

``MetadataWatcher.updates`` yields what the controllers send, a snapshot first and then deltas,
each stamped with its metadata log offset, and keeps the stream going whatever happens to the
controller serving it:

- any controller serves the stream, so a broken one is replaced by the next controller, after
  an exponential back-off with jitter; a stream silent for ``idle_reconnect_s`` is replaced too
  (a controller that stopped without closing its connections says nothing at all);
- a reconnection resumes after the last offset yielded. The generator only runs again once
  its consumer asks for the next message, that is once it has applied the previous one, so
  that offset is the last one applied; the controller sends what follows it, or a snapshot
  if it no longer holds that part of the log;
- a message stamped with a controller epoch older than the newest this process has seen comes
  from a deposed controller: it is dropped, and the stream is resumed elsewhere (dropping it
  and reading on would leave a hole in the log);
- a message at or below the last offset yielded (a controller further behind than the previous
  one) is skipped: it would take the image back in time.

``AppliedMetadataOffset`` is the offset the process has applied: heartbeats report it, and a
node waits on it before it leads again after losing its lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Final

import grpc

from brook.membership.controller_client import ControllerClient
from brook.rpc.backoff import backoff_s
from brook.rpc.errors import rpc_error
from brook.v1 import controller_pb2

__all__ = ["WATCH_IDLE_RECONNECT_S", "AppliedMetadataOffset", "MetadataWatcher"]

# The controllers send nothing while the metadata does not change, so silence alone cannot
# tell a quiet cluster from a hung controller; resuming is cheap (no snapshot when the offset
# is still held), so a silent stream is simply replaced this often.
WATCH_IDLE_RECONNECT_S: Final = 10.0
NO_OFFSET: Final = -1

_log = logging.getLogger(__name__)


class AppliedMetadataOffset:
    """The metadata log offset this process has applied (-1: nothing yet). Advanced by whoever
    applies the updates; read and awaited on the event loop."""

    def __init__(self) -> None:
        self._offset = NO_OFFSET
        self._changed = asyncio.Event()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def offset(self) -> int:
        return self._offset

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the loop, must not block) each time the offset moves."""
        self._callbacks.append(callback)

    def advance(self, offset: int) -> None:
        if offset == self._offset:
            return
        self._offset = offset
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for callback in self._callbacks:
            callback()

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        """Whether the applied offset reached ``offset`` within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._offset < offset:
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining_s)
            except TimeoutError:
                return False
        return True


class MetadataWatcher:
    def __init__(
        self,
        client: ControllerClient,
        node_id: int,
        *,
        idle_reconnect_s: float = WATCH_IDLE_RECONNECT_S,
    ) -> None:
        if idle_reconnect_s <= 0:
            raise ValueError("idle_reconnect_s must be positive")
        self._client = client
        self._node_id = node_id
        self._idle_reconnect_s = idle_reconnect_s
        self._position = NO_OFFSET
        self._have_image = False
        self.reconnects = 0

    @property
    def position(self) -> int:
        """The offset of the last message yielded (-1 before the first snapshot)."""
        return self._position

    async def updates(self) -> AsyncIterator[controller_pb2.WatchMetadataResponse]:
        """The metadata stream, until the consumer stops iterating (or cancels)."""
        failures = 0
        while True:
            address = self._client.next_address()
            request = controller_pb2.WatchMetadataRequest(
                node_id=self._node_id,
                after_offset=self._position if self._have_image else NO_OFFSET,
            )
            call = self._client.watch_metadata(address, request)
            reason = ""
            try:
                while True:
                    try:
                        message = await asyncio.wait_for(call.read(), self._idle_reconnect_s)
                    except TimeoutError:
                        reason = f"nothing for {self._idle_reconnect_s:g} s"
                        # Silence is not a failure: resume elsewhere at once.
                        failures = 0
                        break
                    if message is grpc.aio.EOF:
                        reason = "the controller ended the stream"
                        failures += 1
                        break
                    failures = 0
                    if not self._client.observe_epoch(message.controller_epoch):
                        reason = (
                            f"it sent controller epoch {message.controller_epoch}, older than "
                            f"{self._client.controller_epoch}"
                        )
                        failures += 1
                        _log.warning("ignoring a deposed controller's metadata from %s", address)
                        break
                    if self._have_image and message.offset <= self._position:
                        continue
                    self._have_image = True
                    self._position = message.offset
                    yield message
            except grpc.aio.AioRpcError as error:
                reason = rpc_error(error)[1]
                failures += 1
            finally:
                call.cancel()
            self.reconnects += 1
            wait_s = backoff_s(self._client.settings.retry_backoff, failures) if failures else 0.0
            # A quiet cluster replaces its silent streams all the time, and a controller that
            # stays away fails every attempt: a line for the first failure is enough.
            _log.log(
                logging.INFO if failures == 1 else logging.DEBUG,
                "metadata stream from controller %s ended (%s); resuming after offset %d in %.3f s",
                address,
                reason,
                self._position,
                wait_s,
            )
            if wait_s > 0:
                await asyncio.sleep(wait_s)
