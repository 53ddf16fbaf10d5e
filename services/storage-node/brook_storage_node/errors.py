"""The errors the storage node reports per partition, and how exceptions become them.

Every per-partition result carries a Kafka ``ErrorCode`` and a message (docs/architecture.md).
Three families of exception reach a request handler: ``PartitionError`` (this module: the
partition is unknown, led elsewhere, fenced, short of replicas, timed out), the codec's
``RecordError`` (a bad batch) and the log's ``LogError`` (out of range, disk failure); each
carries its code. Anything else is a bug: it is logged with its traceback and reported as
UNKNOWN_SERVER_ERROR for that partition only, so one bad request never takes the node down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, cast

from brook.errors import ErrorCode, error_code
from brook.metadata.info import EndpointInfo, endpoint_protos
from brook.record import RecordError, read_header, validate_batches
from brook.record.batch import MAGIC_OFFSET, Buffer
from brook.v1 import common_pb2, errors_pb2
from brook_storage_node.log import LogError

__all__ = [
    "ErrorResult",
    "LeaderHint",
    "PartitionError",
    "error_result",
    "first_rejected_batch",
    "leader_hint_proto",
    "wire_code",
]

_log = logging.getLogger(__name__)

# Magic bytes of Kafka's MessageSet formats before RecordBatch v2 (at the same byte offset).
_OLD_MAGICS: Final = (0, 1)


@dataclass(frozen=True, slots=True)
class LeaderHint:
    """Who leads a partition now, as this node's metadata says (for NOT_LEADER_OR_FOLLOWER)."""

    leader_id: int
    leader_epoch: int
    endpoints: tuple[EndpointInfo, ...]


class PartitionError(Exception):
    """A request cannot be served for one partition; ``code`` is the Kafka error code."""

    def __init__(
        self, code: ErrorCode, message: str, *, leader_hint: LeaderHint | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.leader_hint = leader_hint


@dataclass(frozen=True, slots=True)
class ErrorResult:
    code: ErrorCode
    message: str
    leader_hint: LeaderHint | None = None
    batch_index: int | None = None
    """For a rejected produce: the batch (or record) at fault, when known."""


def wire_code(code: ErrorCode) -> errors_pb2.ErrorCode:
    """``code`` as the contract's enum (same numbers: Kafka's)."""
    return cast(errors_pb2.ErrorCode, int(code))


def leader_hint_proto(hint: LeaderHint) -> common_pb2.LeaderHint:
    return common_pb2.LeaderHint(
        leader_id=hint.leader_id,
        leader_epoch=hint.leader_epoch,
        endpoints=endpoint_protos(hint.endpoints),
    )


def error_result(
    exc: BaseException, *, records: Buffer | None = None, max_batch_bytes: int | None = None
) -> ErrorResult:
    """The result to report for ``exc``. Given the produced ``records`` and the topic's batch
    limit, a codec error also names the batch at fault, and an old-format MessageSet is
    reported as UNSUPPORTED_FOR_MESSAGE_FORMAT (the contract's code for magic 0 and 1)."""
    if isinstance(exc, PartitionError):
        return ErrorResult(exc.code, str(exc), exc.leader_hint)
    if isinstance(exc, RecordError):
        code = error_code(exc.error_code)
        index = None
        if records is not None and max_batch_bytes is not None:
            rejected = first_rejected_batch(records, max_batch_bytes)
            if rejected is not None:
                index, old_format = rejected
                if old_format:
                    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
        return ErrorResult(code, str(exc), batch_index=index)
    if isinstance(exc, LogError):
        return ErrorResult(error_code(exc.error_code), str(exc))
    _log.error("unexpected error serving a partition", exc_info=exc)
    return ErrorResult(
        ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}"
    )


def first_rejected_batch(records: Buffer, max_batch_bytes: int) -> tuple[int, bool] | None:
    """(index, is an old MessageSet) of the first batch the codec rejects, or None if each
    batch passes on its own. Runs only after an append failed, so it may re-validate."""
    view = memoryview(records)
    position = 0
    index = 0
    while position < len(view):
        if len(view) - position > MAGIC_OFFSET and view[position + MAGIC_OFFSET] in _OLD_MAGICS:
            return index, True
        try:
            header = read_header(view, position)
            validate_batches(
                view[position : position + header.size], max_batch_bytes=max_batch_bytes
            )
        except RecordError:
            return index, False
        position += header.size
        index += 1
    return None
