"""The committed metadata as the event loop sees it, and the WatchMetadata streams served from it.

The state machine runs on the Raft engine's thread; ``MetadataView`` keeps its own copy of the
image on the event loop, fed with the same records in the same order through
``loop.call_soon_threadsafe`` (``loop_listener``). So request handlers read metadata without
locks, and a handler whose proposal has committed finds it in the view (the engine resolves
the proposal through the same queue, after the records).

The latest ``retained_records_max`` records are kept with their offsets, so a watcher resumes
from the offset it last applied; one that asks for an older offset, or falls further behind
than that, gets a fresh snapshot instead. Nothing is queued per watcher: each reads the shared
window at its own pace.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable, Sequence

from brook.metadata.delta import MetadataDelta
from brook.security.authorizer import Authorizer
from brook.v1 import controller_pb2, metadata_pb2
from brook_controller.image import ControllerImage
from brook_controller.state_machine import StateListener

__all__ = ["WATCH_RECORDS_PER_RESPONSE_MAX", "MetadataView"]

# Deltas are sent in messages of at most this many records, so one message stays small
# whatever the backlog of a watcher that was slow.
WATCH_RECORDS_PER_RESPONSE_MAX = 1000


class _LoopListener:
    """Forwards the state machine's notifications to the view, on the loop, in order."""

    def __init__(self, view: MetadataView, loop: asyncio.AbstractEventLoop) -> None:
        self._view = view
        self._loop = loop

    def on_records(self, offset: int, records: Sequence[metadata_pb2.MetadataRecord]) -> None:
        self._post(self._view.append, offset, tuple(records))

    def on_reset(self, image: ControllerImage) -> None:
        self._post(self._view.reset, image)

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the process is exiting


class MetadataView:
    def __init__(self, retained_records_max: int) -> None:
        if retained_records_max < 1:
            raise ValueError("retained_records_max must be at least 1")
        self.image = ControllerImage()
        self._retained: collections.deque[tuple[int, metadata_pb2.MetadataRecord]] = (
            collections.deque(maxlen=retained_records_max)
        )
        self._changed = asyncio.Event()
        # Node id -> the offset of its current registration (Kafka's rule: a node has caught
        # up once it has applied the record that registered it).
        self._registration_offsets: dict[int, int] = {}
        # Offset of the image as first loaded, for nodes registered before it.
        self._loaded_offset = -1
        self._authorizer: Authorizer | None = None

    def feed(self, authorizer: Authorizer) -> None:
        """Keeps ``authorizer``'s ACLs the image's from now on."""
        self._authorizer = authorizer
        # Ready once the state machine has delivered the log (append or reset).
        authorizer.use(self.image, received=self.image.offset >= 0)

    def loop_listener(self, loop: asyncio.AbstractEventLoop) -> StateListener:
        return _LoopListener(self, loop)

    @property
    def offset(self) -> int:
        return self.image.offset

    # ------------------------------------------------------------------ updates (loop)

    def append(self, last_offset: int, records: Sequence[metadata_pb2.MetadataRecord]) -> None:
        first_offset = last_offset - len(records) + 1
        if first_offset != self.image.offset + 1:
            # Cannot happen while the engine delivers in order; a gap would corrupt every
            # watcher, so fail loudly rather than serve it.
            raise AssertionError(
                f"metadata records at {first_offset} after offset {self.image.offset}"
            )
        security_changed = False
        for record in records:
            delta = MetadataDelta()
            self.image.apply(record, delta)
            security_changed |= delta.security_changed
            for node_id, broker in delta.changed_brokers.items():
                previous = delta.previous_brokers[node_id]
                if previous is None or previous.broker_epoch != broker.broker_epoch:
                    self._registration_offsets[node_id] = self.image.offset
            self._retained.append((self.image.offset, record))
        if self._authorizer is not None and (security_changed or not self._authorizer.ready):
            self._authorizer.use(self.image)
        self._wake()

    def reset(self, image: ControllerImage) -> None:
        self.image = image
        self._retained.clear()
        self._loaded_offset = image.offset
        self._registration_offsets = {}
        if self._authorizer is not None:
            self._authorizer.use(image)
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # ------------------------------------------------------------------ queries

    def registration_offset(self, node_id: int) -> int:
        return self._registration_offsets.get(node_id, self._loaded_offset)

    def records_after(
        self, offset: int, limit: int
    ) -> list[tuple[int, metadata_pb2.MetadataRecord]] | None:
        """Up to ``limit`` records after ``offset``; [] if none yet; None if the records right
        after ``offset`` are no longer retained (the caller needs a snapshot)."""
        if offset >= self.image.offset:
            return []
        if not self._retained or self._retained[0][0] > offset + 1:
            return None
        start = offset + 1 - self._retained[0][0]
        return [self._retained[i] for i in range(start, min(len(self._retained), start + limit))]

    async def wait_for_change(self, timeout_s: float) -> None:
        """Returns at the next change, or after ``timeout_s``."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            pass

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """Waits until the view has reached ``offset``; False if ``timeout_s`` ran out first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.image.offset < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self.wait_for_change(remaining)
        return True

    def snapshot_response(self, epoch: int) -> controller_pb2.WatchMetadataResponse:
        return controller_pb2.WatchMetadataResponse(
            snapshot=True,
            offset=self.image.offset,
            controller_epoch=epoch,
            records=list(self.image.records()),
        )

    async def watch(
        self,
        after_offset: int,
        epoch: Callable[[], int],
        stop: asyncio.Event,
        idle_timeout_s: float,
    ) -> AsyncIterator[controller_pb2.WatchMetadataResponse]:
        """A snapshot (unless ``after_offset`` can be resumed from), then every committed
        record after it, until ``stop`` is set. ``idle_timeout_s`` bounds each wait, so a
        closed stream is noticed."""
        position = after_offset
        if position < 0 or self.records_after(position, 1) is None:
            yield self.snapshot_response(epoch())
            position = self.image.offset
        while not stop.is_set():
            batch = self.records_after(position, WATCH_RECORDS_PER_RESPONSE_MAX)
            if batch is None:
                yield self.snapshot_response(epoch())
                position = self.image.offset
                continue
            if batch:
                position = batch[-1][0]
                yield controller_pb2.WatchMetadataResponse(
                    snapshot=False,
                    offset=position,
                    controller_epoch=epoch(),
                    records=[record for _, record in batch],
                )
                continue
            # Caught up (or ahead of this controller, after moving from one further along):
            # wait for the next change.
            await self.wait_for_change(idle_timeout_s)
