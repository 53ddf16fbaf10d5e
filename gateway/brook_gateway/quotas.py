"""Client quota enforcement at the gateway, Kafka's way (seed 001, section 4.9; KIP-13, KIP-124,
KIP-219).

Which quota applies, how rates are measured and how long a throttle lasts is the shared
engine's (brook.security.quota_engine): the principal is the request's
(``RequestContext.principal``) and the client id the request header's (null counts as "").

What is measured: Produce's request size against ``producer_byte_rate``; Fetch's response size
against ``consumer_byte_rate``; and, for every request but ApiVersions, SaslHandshake and
SaslAuthenticate (served before a SASL client has a principal), the time its handling ran on
the gateway's event loop (waits for other services are not the gateway's work) against
``request_percentage``, as a percentage of one second per second, the way Kafka measures a
request handler thread's time.

How: the throttle goes back in the response's throttle_time_ms (the larger of the byte-rate
and request-time throttles), and the server mutes the connection (reads nothing from it) for
that long (KIP-219), so a client that ignores throttle_time_ms is held back all the same.
From the first request a quota applies to, the server reads the connection's requests one at
a time, as Kafka reads a channel, so that none pipelined behind a throttled one passes by its
throttle (brook_gateway.server). A throttled Fetch is answered
without data (its bytes are not counted), as Kafka's. No quota configured: nothing is measured
and no request pays for this module.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Final, TypeVar

from brook.metadata.image import QuotaEntity
from brook.security.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from brook.security.quota_engine import QuotaSensors, Sensor
from brook.telemetry import meter
from brook_gateway.apis import RequestContext
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import RESPONSES, ApiKey
from brook_gateway.protocol.schema import VersionRange, in_range

__all__ = ["ClientQuotas", "RequestUsage"]

# Served before a SASL connection has its principal: not charged to anyone's request quota.
_UNMETERED_APIS: Final = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
_BYTE_QUOTAS: Final[dict[int, str]] = {
    ApiKey.PRODUCE: PRODUCER_BYTE_RATE,
    ApiKey.FETCH: CONSUMER_BYTE_RATE,
}
# The versions of each response that carry throttle_time_ms.
_THROTTLE_FIELD_VERSIONS: Final[dict[int, VersionRange]] = {
    key: field.versions
    for key, spec in RESPONSES.items()
    for field in spec.fields
    if field.name == "throttle_time_ms"
}
# The throttle-time histogram's attribute, as Kafka's throttle-time metrics are by quota type.
_QUOTA_TYPES: Final[dict[int, dict[str, str]]] = {
    ApiKey.PRODUCE: {"quota.type": "produce"},
    ApiKey.FETCH: {"quota.type": "fetch"},
}
_REQUEST_QUOTA_TYPE: Final = {"quota.type": "request"}
_T = TypeVar("_T")


class _TimedSteps:
    """Awaits a coroutine, adding the time each of its steps runs to ``busy_s``: the time the
    event loop spent on it, its waits left out."""

    def __init__(self, coroutine: Awaitable[_T], usage: RequestUsage) -> None:
        self._coroutine = coroutine
        self._usage = usage

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self._coroutine.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started_s = time.perf_counter()
            try:
                yielded = steps.throw(thrown) if thrown is not None else steps.send(sent)
            except StopIteration as stop:
                return stop.value
            finally:
                self._usage.busy_s += time.perf_counter() - started_s
            try:
                sent, thrown = (yield yielded), None
            except BaseException as error:  # cancellation included: passed on to the step
                sent, thrown = None, error


class RequestUsage:
    """The quotas that apply to one request, and what it used of them."""

    __slots__ = ("_api_key", "_byte_quota", "_quotas", "_request_quota", "_version", "busy_s")

    def __init__(
        self,
        quotas: ClientQuotas,
        context: RequestContext,
        byte_quota: tuple[Sensor, float] | None,
        request_quota: tuple[Sensor, float] | None,
    ) -> None:
        self._quotas = quotas
        self._api_key = context.header.api_key
        self._version = context.api_version
        self._byte_quota = byte_quota
        self._request_quota = request_quota
        self.busy_s = 0.0

    def timed(self, handling: Awaitable[_T]) -> Awaitable[_T]:
        """``handling``, its time on the event loop counted when a request quota applies."""
        return handling if self._request_quota is None else _TimedSteps(handling, self)

    def answer(
        self, request_bytes: int, response: Message | None, encode: Callable[[Message], bytearray]
    ) -> tuple[bytearray | None, int]:
        """The response frame (``encode``d, with its throttle time) and how long to mute the
        connection for, in ms (0: not throttled)."""
        quotas = self._quotas
        sensors = quotas.sensors
        now_s = sensors.clock()
        byte_throttle_ms = request_throttle_ms = 0
        if self._request_quota is not None:
            sensor, quota = self._request_quota
            request_throttle_ms = sensors.record(sensor, quota, self.busy_s * 100, now_s)
        frame = None
        if self._api_key == ApiKey.FETCH and response is not None:
            if self._byte_quota is not None:
                sensor, quota = self._byte_quota
                frame = encode(response)
                byte_throttle_ms = sensors.record(sensor, quota, len(frame), now_s)
                if byte_throttle_ms or request_throttle_ms:
                    sensor.rate.record(-len(frame), now_s)  # not sent: not counted
            if byte_throttle_ms or request_throttle_ms:
                # A throttled fetch is answered without data, as Kafka's.
                response = {**response, "responses": []}
                frame = None
        elif self._byte_quota is not None:
            sensor, quota = self._byte_quota
            byte_throttle_ms = sensors.record(sensor, quota, request_bytes, now_s)
        throttle_ms = max(byte_throttle_ms, request_throttle_ms)
        quotas.throttles.record(throttle_ms, _QUOTA_TYPES.get(self._api_key, _REQUEST_QUOTA_TYPE))
        if response is None:
            return None, throttle_ms
        if frame is None:
            versions = _THROTTLE_FIELD_VERSIONS.get(self._api_key)
            if throttle_ms and versions is not None and in_range(self._version, versions):
                throttle_ms = max(throttle_ms, response.get("throttle_time_ms") or 0)
                response = {**response, "throttle_time_ms": throttle_ms}
            frame = encode(response)
        return frame, throttle_ms


class ClientQuotas:
    """The gateway's quota enforcement over the client quotas of its metadata image."""

    def __init__(
        self,
        quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        window_num: int,
        window_size_s: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``quotas``: the image's client quotas now (they change as metadata arrives)."""
        self._quotas = quotas
        self.sensors = QuotaSensors(window_num, window_size_s, clock)
        self.throttles = meter(__name__).create_histogram(
            "brook.gateway.quota.throttle.time",
            unit="ms",
            description="Throttle time of requests a client quota applies to (0: not throttled)",
        )

    def usage(self, context: RequestContext) -> RequestUsage | None:
        """What to measure of this request; None when no quota applies to it."""
        quotas = self._quotas()
        if not quotas:
            return None
        api_key = context.header.api_key
        user = context.principal.name
        client_id = context.header.client_id or ""
        byte_key = _BYTE_QUOTAS.get(api_key)
        byte_quota = None
        if byte_key is not None:
            byte_quota = self.sensors.measured(quotas, byte_key, user, client_id)
        request_quota = None
        if api_key not in _UNMETERED_APIS:
            request_quota = self.sensors.measured(quotas, REQUEST_PERCENTAGE, user, client_id)
        if byte_quota is None and request_quota is None:
            return None
        return RequestUsage(self, context, byte_quota, request_quota)
