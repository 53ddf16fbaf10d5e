"""``ClientCore``: what the producer's and the consumer's cores share.

Each client (``Producer``/``AsyncProducer``, ``Consumer``/``AsyncConsumer``) keeps its state and
network work in one core that lives on one event loop. Every core has the same base: a
``Notifier`` for callers waiting on its state, a ``ChannelPool`` sized for its traffic, the
cluster ``Metadata`` kept fresh in the background, and the background tasks it started, which
``stop`` cancels before closing the channels. ``start_on_thread`` is how a blocking client gets
its core: on a private ``LoopThread``, which is stopped again if the core cannot start.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from brook.client.config import ClientCommon
from brook.client.metadata import Metadata
from brook.client.runtime import LoopThread, Notifier, Wakeup
from brook.rpc.channels import ChannelPool, channel_options

__all__ = ["CLOSE_MARGIN_S", "ClientCore", "start_on_thread"]

# Extra time the blocking API gives the loop to finish work that is itself bounded (a close,
# a call with its own timeout), before it gives up on the loop.
CLOSE_MARGIN_S = 5.0

_logger = logging.getLogger(__name__)

_Core = TypeVar("_Core", bound="ClientCore")


class ClientCore(abc.ABC):
    """The notifier, channels, metadata and background tasks of one client, on ``loop``."""

    def __init__(
        self,
        config: ClientCommon,
        loop: asyncio.AbstractEventLoop,
        *,
        send_bytes_max: int,
        receive_bytes_max: int,
    ) -> None:
        """``send_bytes_max``/``receive_bytes_max``: the largest message the client's requests
        and their responses may be."""
        self.loop = loop
        self.notifier = Notifier()
        self.network = ChannelPool(
            channel_options(
                client_id=config.client_id,
                send_bytes_max=send_bytes_max,
                receive_bytes_max=receive_bytes_max,
                reconnect_backoff_ms=config.reconnect_backoff_ms,
                reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            ),
            config.security,
        )
        self.metadata = Metadata(
            bootstrap_servers=config.bootstrap_servers,
            network=self.network,
            notifier=self.notifier,
            wakeup=Wakeup(loop),
            backoff=config.retry_backoff,
            request_timeout_ms=config.request_timeout_ms,
            max_age_ms=config.metadata_max_age_ms,
        )
        self._tasks: list[asyncio.Task[None]] = []

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the background work (with ``run_in_background``)."""

    def run_in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` as a task of this core until ``stop``."""
        self._tasks.append(asyncio.create_task(work, name=name))

    async def stop(self) -> None:
        """Cancel the background tasks, wait for them to end, then close every channel
        (cancelling calls still in flight). A task that had failed has its error logged, not
        raised out of the close; the channels close whatever happens, and a cancellation of
        the caller itself (a timeout around ``close``) is not swallowed."""
        try:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks)
            for task in self._tasks:
                if not task.cancelled() and (error := task.exception()) is not None:
                    _logger.error(
                        "client background task had failed",
                        exc_info=error,
                        extra={"task": task.get_name()},
                    )
        finally:
            await self.network.close()


def start_on_thread(
    thread_name: str, make_core: Callable[[asyncio.AbstractEventLoop], _Core]
) -> tuple[LoopThread, _Core]:
    """A ``LoopThread`` named ``thread_name`` with a core made and started on its loop; if
    either fails, the thread is stopped and the error raised."""
    thread = LoopThread(thread_name)
    try:
        core = make_core(thread.loop)
        thread.run(core.start(), CLOSE_MARGIN_S)
    except BaseException:
        thread.stop()
        raise
    return thread, core
