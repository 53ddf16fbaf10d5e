"""``with``/``async with`` for Brook's closable objects: one definition of the protocol.

A class that owns resources released by ``close()`` (the SDK's clients, Admin, a channel pool)
derives from ``Closing`` and writes only ``close``; ``with obj:`` then closes it on the way out,
whether the block raised or not. ``AsyncClosing`` is the asyncio form, for objects that also
``start()`` on the way in.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

__all__ = ["AsyncClosing", "Closing"]


class Closing(abc.ABC):
    """``with obj:`` returns ``obj`` and calls ``obj.close()`` on the way out."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing(abc.ABC):
    """``async with obj:`` awaits ``obj.start()``, and ``obj.close()`` on the way out."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
