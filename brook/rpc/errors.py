"""Transport failures as Kafka error codes (``rpc_error``), so that retry decisions are made in
one vocabulary, whether a node answered with a code or did not answer at all.
"""

from __future__ import annotations

import grpc

from brook.errors import ErrorCode, error_code

__all__ = ["ERROR_CODE_METADATA_KEY", "rpc_error"]

ERROR_CODE_METADATA_KEY = "brook-error-code"
"""Trailing metadata of a refused call naming the Kafka error it stands for (an authorization
denial's TOPIC_AUTHORIZATION_FAILED, ...), as a decimal number."""


def rpc_error(error: grpc.aio.AioRpcError | grpc.Call) -> tuple[ErrorCode, str]:
    """The Kafka error code standing for a failed call, and a message naming the cause."""
    status = error.code()
    details = error.details() or ""
    message = f"gRPC {status.name}: {details}" if details else f"gRPC {status.name}"
    if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED):
        return ErrorCode.NETWORK_EXCEPTION, message
    if status is grpc.StatusCode.DEADLINE_EXCEEDED:
        return ErrorCode.REQUEST_TIMED_OUT, message
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED:
        # gRPC's own size check says "larger than max"; anything else is the node shedding
        # load (its in-flight or memory limits), which passes.
        if "larger than max" in details:
            return ErrorCode.RECORD_LIST_TOO_LARGE, message
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED, message
    if status is grpc.StatusCode.INVALID_ARGUMENT:
        return ErrorCode.INVALID_REQUEST, message
    if status is grpc.StatusCode.UNIMPLEMENTED:
        return ErrorCode.UNSUPPORTED_VERSION, message
    if status in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return _named_error(error) or ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message
    return ErrorCode.UNKNOWN_SERVER_ERROR, message


def _named_error(error: grpc.aio.AioRpcError | grpc.Call) -> ErrorCode | None:
    """The Kafka error a refused call's trailing metadata names, if it names one."""
    for key, value in error.trailing_metadata() or ():
        if key == ERROR_CODE_METADATA_KEY:
            try:
                return error_code(int(value))
            except ValueError:
                return None
    return None
