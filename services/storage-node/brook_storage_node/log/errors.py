"""The partition log's errors, each carrying the Kafka error code a client or peer is told.

Bad record bytes are rejected by the codec (``brook.record.RecordError`` and subclasses, which
carry codes too); these are the failures that belong to the log itself. Both families expose
``error_code`` so a caller maps either one to a response without a table.

Apart from them, ``InvariantViolationError``: not a failure to report but a bug to find.
"""

from __future__ import annotations

from brook.errors import ErrorCode

UNKNOWN_SERVER_ERROR = int(ErrorCode.UNKNOWN_SERVER_ERROR)
OFFSET_OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)
RECORD_LIST_TOO_LARGE = int(ErrorCode.RECORD_LIST_TOO_LARGE)
INVALID_TIMESTAMP = int(ErrorCode.INVALID_TIMESTAMP)
KAFKA_STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)
NOT_LEADER_OR_FOLLOWER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


class LogError(Exception):
    """A log operation was refused or failed; ``error_code`` is the Kafka error code."""

    error_code: int = UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    """The offset is below the log start offset or above the log end offset."""

    error_code = OFFSET_OUT_OF_RANGE


class RecordListTooLargeError(LogError):
    """One append is larger than a whole segment (segment.bytes) could ever hold."""

    error_code = RECORD_LIST_TOO_LARGE


class InvalidTimestampError(LogError):
    """A CreateTime batch's timestamp is too far from the broker's clock.

    The bound is message.timestamp.difference.max.ms.
    """

    error_code = INVALID_TIMESTAMP


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose offsets go backwards or start below the log end offset.

    Never a client's fault: the replica fetcher sent the wrong range, so it must truncate or
    refetch. Kafka has no wire code for it either (it is UNKNOWN_SERVER_ERROR if it escapes).
    """


class StaleLeaderEpochError(LogError):
    """A leader append in an epoch older than the latest in the log's epoch history.

    A race, not a bug: the append read its epoch, then leadership moved away and back (a
    newer epoch recorded) before it reached the log. Writing it would corrupt the history
    followers truncate by, so it is refused with nothing written, NOT_LEADER_OR_FOLLOWER: the
    client refreshes its metadata and sends the batch again.
    """

    error_code = NOT_LEADER_OR_FOLLOWER


class LogStorageError(LogError):
    """The disk failed under the log (I/O error, disk full, unreadable checkpoint).

    KAFKA_STORAGE_ERROR tells clients to retry elsewhere: the replica may be unusable.
    """

    error_code = KAFKA_STORAGE_ERROR


class SwapIncompleteError(LogStorageError):
    """The disk failed after a cleaned segment's swap was committed (its ``.swap`` file is or
    may be on disk), before the swap was finished. The new segment's files must stay: the next
    open finishes the swap from them (loader.py). The log is offline until then."""


class LogClosedError(LogStorageError):
    """The log was closed (shutdown or partition deleted) while a caller still held it."""


class InvariantViolationError(Exception):
    """A value crossing a boundary breaks an invariant that replication relies on: a high
    watermark past the log end offset, a leader epoch going backwards, offsets that are not
    dense where a leader assigns them. Always a bug in Brook, never a client's, a peer's or
    the disk's fault, so it is no ``LogError`` and has no error code: it fails the operation
    loudly instead of being clamped into a silent corruption. Raised before anything is
    changed. Where it surfaces: a client request's partition is answered UNKNOWN_SERVER_ERROR
    and the error logged with its traceback (``brook_storage_node.errors.error_result``); a
    metadata change the replica manager cannot take up leaves the partition failed, logged
    with its traceback; a follower's replica fetch logs it (rate-limited, no traceback) and
    pauses that partition for replica.fetch.backoff.ms before fetching it again.

    A leader epoch gone stale while a leader append was on its way is a race, not a bug:
    ``StaleLeaderEpochError``.

    The storage node's one exception for invariant violations, the log's and the replicas'
    (partition.py) alike; legitimate clamps (a follower's high watermark bounded by its own
    log end) stay clamps, each with its reason at the place it is made.
    """
