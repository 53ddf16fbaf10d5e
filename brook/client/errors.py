"""What the SDK raises, and the futures it fails: every error a caller can catch.

Errors the storage node reports carry Kafka's error code (``ApiError.code``) and say whether the
same operation may succeed if tried again (``retriable``), exactly as the server sent them; the
producer has already retried the retriable ones until ``delivery.timeout.ms`` when it gives up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from brook.config import ConfigError
from brook.errors import BrookError, ErrorCode

if TYPE_CHECKING:
    from brook.client.types import TopicPartition

__all__ = [
    "ApiError",
    "BrookClientError",
    "ClientClosedError",
    "ClientTimeoutError",
    "ConfigError",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "UnknownTopicOrPartitionError",
    "api_error",
]


class BrookClientError(Exception):
    """Base of every error the SDK raises (configuration errors are ``ConfigError``)."""


class ApiError(BrookClientError, BrookError):
    """An operation failed with a Kafka error code (``code``), usually sent by the server."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        BrookError.__init__(self, code, message)


class RecordTooLargeError(ApiError):
    """A record is larger than ``max.request.size`` or ``buffer.memory`` (raised by send)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.MESSAGE_TOO_LARGE, message)


class UnknownTopicOrPartitionError(ApiError):
    """The topic or partition does not exist, or did not appear in metadata within the bound."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message)


class OffsetOutOfRangeError(ApiError):
    """A fetch position is outside the log and ``auto.offset.reset`` is ``none``.

    ``offsets`` maps each affected partition to the position that was out of range; seek to
    a valid offset to continue.
    """

    def __init__(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.offsets = dict(offsets)
        described = ", ".join(f"{tp.topic}-{tp.partition} at {pos}" for tp, pos in offsets.items())
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"fetch position out of range and auto.offset.reset=none: {described}",
        )


class NoOffsetForPartitionError(BrookClientError):
    """A partition has no position and ``auto.offset.reset`` is ``none``: seek first."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        self.partitions = list(partitions)
        described = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
        super().__init__(
            f"no position for {described} and auto.offset.reset=none; call seek() "
            "(or seek_to_beginning/seek_to_end) before poll()"
        )


class ClientTimeoutError(BrookClientError, TimeoutError):
    """A bounded wait ran out: delivery.timeout.ms, max.block.ms or a caller's timeout."""


class ClientClosedError(BrookClientError):
    """The producer or consumer is closed (or was closed before the operation finished)."""


def api_error(code: ErrorCode, message: str) -> ApiError:
    """The most specific ApiError for ``code``."""
    if code is ErrorCode.MESSAGE_TOO_LARGE:
        return RecordTooLargeError(message)
    if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return UnknownTopicOrPartitionError(message)
    return ApiError(code, message)
