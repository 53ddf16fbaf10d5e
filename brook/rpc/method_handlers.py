"""Rebuilding a grpc.aio method handler around new behaviour: what a server interceptor that
wraps calls (brook/rpc/server_telemetry.py, brook/security/grpc_authorization.py) does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import grpc

__all__ = ["Kind", "wrapped"]

Kind = Literal["unary_unary", "unary_stream", "stream_unary", "stream_stream"]
"""Whether a method takes (first) and gives (second) one message or a stream of them."""


def wrapped(handler: Any, wrap: Callable[[Kind, Callable[..., Any]], Callable[..., Any]]) -> Any:
    """``handler`` (a grpc.RpcMethodHandler) with its behaviour replaced by ``wrap(kind,
    behaviour)``, with the same (de)serializers."""
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            wrap("unary_unary", handler.unary_unary), **options
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrap("unary_stream", handler.unary_stream), **options
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            wrap("stream_unary", handler.stream_unary), **options
        )
    return grpc.stream_stream_rpc_method_handler(
        wrap("stream_stream", handler.stream_stream), **options
    )
