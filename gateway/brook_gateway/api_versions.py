"""ApiVersions: the first request of every Kafka client, and how it learns what to send."""

from __future__ import annotations

import re
from typing import Final

from brook.errors import ErrorCode
from brook_gateway.apis import RECOMMENDED_VERSIONS, ApiHandler, Dispatcher, RequestContext
from brook_gateway.authorization import NO_AUTHORIZATION
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey

__all__ = ["api_versions_handler", "unsupported_version_response"]

# KIP-511: client software name and version are limited to this so they are safe as metric
# tags; Kafka answers INVALID_REQUEST to anything else.
_SOFTWARE_PATTERN: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _api_keys(dispatcher: Dispatcher) -> list[Message]:
    return [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, low, high in dispatcher.advertised()
    ]


def api_versions_handler(dispatcher: Dispatcher) -> ApiHandler:
    """The handler advertising what `dispatcher` answers (read at request time, so APIs
    registered later are included)."""

    async def handle(request: Message, context: RequestContext) -> Message:
        error = ErrorCode.NONE
        if context.api_version >= 3:
            name = request["client_software_name"]
            version = request["client_software_version"]
            if not (_SOFTWARE_PATTERN.fullmatch(name) and _SOFTWARE_PATTERN.fullmatch(version)):
                error = ErrorCode.INVALID_REQUEST
        return {
            "error_code": int(error),
            "api_keys": _api_keys(dispatcher),
            "throttle_time_ms": 0,
        }

    return ApiHandler(
        ApiKey.API_VERSIONS,
        handle,
        versions=RECOMMENDED_VERSIONS[ApiKey.API_VERSIONS],
        authorization=NO_AUTHORIZATION,
    )


def unsupported_version_response(dispatcher: Dispatcher) -> Message:
    """The v0-layout answer to an ApiVersions request newer than the gateway serves: error
    UNSUPPORTED_VERSION and, as Kafka sends, the ApiVersions range itself, from which the
    client picks the version to retry with."""
    return {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": [e for e in _api_keys(dispatcher) if e["api_key"] == ApiKey.API_VERSIONS],
    }
