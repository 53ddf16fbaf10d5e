"""The storage node's request limits, from configuration, and the in-flight produce budget.

Enforced where:

- request size: socket.request.max.bytes, by the gRPC server itself (brook.server): a larger
  request fails with RESOURCE_EXHAUSTED before any handler sees it;
- requests at once: queued.max.requests, also by the gRPC server (maximum_concurrent_rpcs);
  Subscribe streams count against it for as long as they are open;
- memory: queued.max.request.bytes bounds the bytes of produce requests being processed at
  once (``InFlightBytes``). gRPC has already read a request when its handler runs, so
  queueing it would hold its memory while waiting; instead a request that does not fit is
  refused at once with RESOURCE_EXHAUSTED (retriable), and its memory is freed;
- response size: fetch.max.bytes bounds the record bytes of one Fetch response and of one
  Subscribe message, whatever the request asks for (the progress rule may exceed it by the
  rest of one batch, as in Kafka);
- waits: request.timeout.ms bounds a Fetch's max_wait_ms and an acks=all produce's timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from brook.config import Config

__all__ = ["InFlightBytes", "StorageLimits"]


@dataclass(frozen=True, slots=True)
class StorageLimits:
    fetch_bytes_max: int
    """fetch.max.bytes: record bytes of one Fetch response or Subscribe message."""
    wait_ms_max: int
    """request.timeout.ms: the longest long-poll or acks=all wait."""
    produce_bytes_in_flight_max: int
    """queued.max.request.bytes."""

    @classmethod
    def from_config(cls, config: Config) -> StorageLimits:
        return cls(
            fetch_bytes_max=config.get_int("fetch.max.bytes"),
            wait_ms_max=config.get_int("request.timeout.ms"),
            produce_bytes_in_flight_max=config.get_int("queued.max.request.bytes"),
        )


class InFlightBytes:
    """A byte budget shared by concurrent requests; used only from the event loop."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"the in-flight byte limit must be >= 1, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self._in_use_bytes = 0

    @property
    def in_use_bytes(self) -> int:
        return self._in_use_bytes

    def try_acquire(self, size_bytes: int) -> bool:
        """Take ``size_bytes`` of the budget if they fit; False (nothing taken) if not."""
        if size_bytes < 0:
            raise ValueError(f"cannot acquire a negative size {size_bytes}")
        if self._in_use_bytes + size_bytes > self.limit_bytes:
            return False
        self._in_use_bytes += size_bytes
        return True

    def release(self, size_bytes: int) -> None:
        assert 0 <= size_bytes <= self._in_use_bytes, (size_bytes, self._in_use_bytes)
        self._in_use_bytes -= size_bytes
