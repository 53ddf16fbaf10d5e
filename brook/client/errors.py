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
    "CommitFailedError",
    "ConfigError",
    "FencedInstanceIdError",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "ProducerFencedError",
    "RecordTooLargeError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionStateError",
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


class ProducerFencedError(ApiError):
    """Another producer instance took over this producer's id with a newer epoch: this one
    may not write again. Fatal: every pending and later send fails with it; close the
    producer (a new one gets a producer id of its own)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.PRODUCER_FENCED, message)


class TransactionStateError(BrookClientError):
    """A transactional method called in the wrong state (Kafka's IllegalStateException): send
    outside a transaction, begin_transaction twice, commit before init_transactions... Nothing
    was done; the producer is as it was."""


class TransactionAbortableError(BrookClientError):
    """The open transaction cannot commit: one of its sends (or its offsets) failed, the cause
    is ``__cause__``. Call abort_transaction(), then begin a new transaction; the producer
    stays usable (Kafka's abortable error)."""


class TransactionAbortedError(BrookClientError):
    """The record was not written: its transaction was aborted before it was sent (Kafka's
    TransactionAbortedException)."""


class ClientTimeoutError(BrookClientError, TimeoutError):
    """A bounded wait ran out: delivery.timeout.ms, max.block.ms or a caller's timeout."""


class CommitFailedError(BrookClientError):
    """An offset commit was refused because the group rebalanced (or dropped this member)
    since the partitions were assigned: another member may own them now, so the offsets were
    not committed. The consumer rejoins on its next poll; records processed since the last
    successful commit may be delivered again (to whichever member gets the partitions)."""


class FencedInstanceIdError(ApiError):
    """Another consumer started with this consumer's ``group.instance.id``: this one was
    fenced out of the group and can only be closed."""

    def __init__(self, group_instance_id: str, during: str) -> None:
        self.group_instance_id = group_instance_id
        super().__init__(
            ErrorCode.FENCED_INSTANCE_ID,
            f"{during}: another consumer joined with group.instance.id={group_instance_id!r}; "
            "this one is fenced and must be closed",
        )


class ClientClosedError(BrookClientError):
    """The producer or consumer is closed (or was closed before the operation finished)."""


def api_error(code: ErrorCode, message: str) -> ApiError:
    """The most specific ApiError for ``code``."""
    if code is ErrorCode.MESSAGE_TOO_LARGE:
        return RecordTooLargeError(message)
    if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return UnknownTopicOrPartitionError(message)
    return ApiError(code, message)
