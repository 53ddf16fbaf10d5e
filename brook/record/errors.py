"""The errors the record-batch codec raises, each carrying the Kafka error code it maps to.

The gateway returns ``error_code`` to Kafka clients unchanged and the storage node puts it in
its gRPC response body, so every failure a client can cause lands in one of these classes.
"""

from __future__ import annotations

from brook.errors import ErrorCode


class RecordError(Exception):
    """A record batch was rejected; ``error_code`` is the Kafka error code to report."""

    error_code: int = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str, *, error_code: int | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class CorruptRecordError(RecordError):
    """CRC mismatch, impossible lengths, truncation or undecodable compressed data."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(RecordError):
    """Well-formed bytes that break a rule: wrong magic (old MessageSet v0/v1), bad attributes."""

    error_code = ErrorCode.INVALID_RECORD


class UnsupportedCompressionError(RecordError):
    """The attributes name a compression codec Kafka does not define (ids 5 to 7)."""

    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class RecordTooLargeError(RecordError):
    """A batch is larger than the configured maximum, or decompresses to more than allowed."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE
