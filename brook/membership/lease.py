"""The node's own view of its lease: whether it may act as a partition leader right now.

The controllers fence a node whose last heartbeat is older than broker.session.timeout.ms and
move its leaderships to other in-sync replicas. The node must stop leading no later than
that, even when it cannot reach any controller to be told. So it keeps its own clock on the
lease: a heartbeat *sent* at t and answered "not fenced" keeps it until t + the lease; the
controllers count from when they *received* that heartbeat, which is later, so the node always
gives up first. ``active`` reads the clock on every call: leadership ends at expiry exactly,
not when some timer gets to run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

__all__ = ["NOT_JOINED", "BrokerLease", "LeaseListener"]

NOT_JOINED: Final = "this node has not been unfenced by the controllers yet"


class LeaseListener(Protocol):
    """Told when the node gains or loses the right to lead; called on the event loop."""

    def on_lease_acquired(self) -> None: ...

    def on_lease_lost(self, reason: str) -> None: ...


class BrokerLease:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # None: not granted (never, or revoked); else the clock time at which it lapses.
        self._expires_at: float | None = None
        self._reason = NOT_JOINED

    @property
    def active(self) -> bool:
        return self._expires_at is not None and self._clock() < self._expires_at

    @property
    def expires_at(self) -> float | None:
        return self._expires_at

    @property
    def inactive_reason(self) -> str:
        """Why the node may not lead now ("" while the lease is active)."""
        if self._expires_at is None:
            return self._reason
        if self._clock() < self._expires_at:
            return ""
        return (
            "its lease with the controllers has expired (no successful heartbeat within "
            "broker.session.timeout.ms)"
        )

    def grant(self, expires_at: float) -> None:
        self._expires_at = expires_at

    def revoke(self, reason: str) -> None:
        self._expires_at = None
        self._reason = reason
