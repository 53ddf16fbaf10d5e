"""Client quota enforcement at the gateway, Kafka's way (seed 001, section 4.9; KIP-13, KIP-124,
KIP-219).

Which quota applies: for each quota key on its own, the first entity in Kafka's precedence
order (brook.security.client_quotas.precedence) that has one, for the request's principal name
(``RequestContext.principal``) and client id (the request header's; null counts as ""). All
requests of one quota group share one measured rate: its user and client id as far as the
entity that matched names them (the default client-id quota is measured per client id, a
user's quota across all its client ids), as Kafka's metric tags do.

What is measured: Produce's request size against ``producer_byte_rate``; Fetch's response size
against ``consumer_byte_rate``; and, for every request but ApiVersions, SaslHandshake and
SaslAuthenticate (served before a SASL client has a principal), the time its handling ran on
the gateway's event loop (waits for other services are not the gateway's work) against
``request_percentage``, as a percentage of one second per second, the way Kafka measures a
request handler thread's time.

How: each rate is Kafka's sampled rate (``SampledRate``): ``quota.window.num`` samples of
``quota.window.size.seconds`` each. A request is recorded first, then its quota checked; a
rate over the quota throttles the client for (rate - quota) / quota x the measured window,
at most one sample window (Kafka's ClientQuotaManager bound), the time it takes the rate to
come back to the quota. The throttle goes back in the response's throttle_time_ms (the
larger of the byte-rate and request-time throttles), and the server mutes the connection (reads
nothing from it) for that long (KIP-219), so a client that ignores throttle_time_ms is held
back all the same. From the first request a quota applies to, the server reads the
connection's requests one at a time, as Kafka reads a channel, so that none pipelined behind a
throttled one passes by its throttle (brook_gateway.server). A throttled Fetch is answered
without data (its bytes are not counted), as Kafka's. No quota configured: nothing is measured
and no request pays for this module.

Bounded: at most ``SENSORS_MAX`` rates are kept; rates idle for a whole window span (which
then measure 0, as a new one would) are dropped first, then the oldest.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Final, TypeVar

from brook.config import ConfigKey, ConfigType, Importance, Range
from brook.metadata.image import QuotaEntity
from brook.security.client_quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    applicable_quota,
)
from brook.telemetry import meter
from brook_gateway.apis import RequestContext
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import RESPONSES, ApiKey
from brook_gateway.protocol.schema import VersionRange, in_range

__all__ = [
    "QUOTA_CONFIG_KEYS",
    "QUOTA_WINDOW_NUM",
    "QUOTA_WINDOW_SIZE_SECONDS",
    "SENSORS_MAX",
    "ClientQuotas",
    "RequestUsage",
    "SampledRate",
    "throttle_time_ms",
]

QUOTA_WINDOW_NUM: Final = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS: Final = "quota.window.size.seconds"
QUOTA_CONFIG_KEYS: Final = (
    ConfigKey(
        QUOTA_WINDOW_NUM,
        ConfigType.INT,
        11,
        "The number of samples a client quota's rate is measured over.",
        Importance.LOW,
        Range(1),
    ),
    ConfigKey(
        QUOTA_WINDOW_SIZE_SECONDS,
        ConfigType.INT,
        1,
        "The time span of each sample of a client quota's rate; also the longest a single "
        "response throttles its client.",
        Importance.LOW,
        Range(1),
    ),
)

SENSORS_MAX: Final = 10_000
"""The most measured rates (quota key, user, client id) kept at once."""

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


class SampledRate:
    """Kafka's Rate over a SampledStat: values summed in ``samples`` samples of ``window_s``
    each (a sample starts with the first value recorded after the previous one ended), divided
    by the time they span, counted as at least ``samples - 1`` whole windows so that a rate
    just started is not overstated. Samples older than the whole span are forgotten."""

    __slots__ = ("_current", "_samples", "_starts_s", "_values", "_window_s", "last_recorded_s")

    def __init__(self, samples: int, window_s: float, now_s: float) -> None:
        assert samples >= 1 and window_s > 0
        self._samples = samples
        self._window_s = window_s
        self._starts_s = [now_s] * samples
        self._values = [0.0] * samples
        self._current = 0
        self.last_recorded_s = now_s

    def record(self, value: float, now_s: float) -> None:
        if now_s >= self._starts_s[self._current] + self._window_s:
            self._current = (self._current + 1) % self._samples
            self._starts_s[self._current] = now_s
            self._values[self._current] = 0.0
        self._values[self._current] += value
        self.last_recorded_s = now_s

    def _purge(self, now_s: float) -> None:
        span_s = self._samples * self._window_s
        for index, start_s in enumerate(self._starts_s):
            if now_s - start_s >= span_s:
                self._starts_s[index] = now_s
                self._values[index] = 0.0

    def window_s(self, now_s: float) -> float:
        """The time the rate is measured over."""
        self._purge(now_s)
        elapsed_s = now_s - min(self._starts_s)
        full_windows = int(elapsed_s // self._window_s)
        if full_windows < self._samples - 1:
            elapsed_s += (self._samples - 1 - full_windows) * self._window_s
        return elapsed_s

    def rate(self, now_s: float) -> float:
        """Per second."""
        window_s = self.window_s(now_s)
        return sum(self._values) / window_s if window_s > 0 else 0.0


def throttle_time_ms(rate: float, quota: float, window_s: float, throttle_max_ms: int) -> int:
    """How long a client measured at ``rate`` over ``window_s`` must send nothing for its rate
    to come back to ``quota`` (Kafka's QuotaUtils.throttleTime), at most ``throttle_max_ms``."""
    if rate <= quota:
        return 0
    return min(round((rate - quota) / quota * window_s * 1000), throttle_max_ms)


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
        byte_quota: tuple[SampledRate, float] | None,
        request_quota: tuple[SampledRate, float] | None,
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
        now_s = quotas.clock()
        byte_throttle_ms = request_throttle_ms = 0
        if self._request_quota is not None:
            rate, quota = self._request_quota
            rate.record(self.busy_s * 100, now_s)
            request_throttle_ms = quotas.throttle_ms(rate, quota, now_s)
        frame = None
        if self._api_key == ApiKey.FETCH and response is not None:
            if self._byte_quota is not None:
                rate, quota = self._byte_quota
                frame = encode(response)
                rate.record(len(frame), now_s)
                byte_throttle_ms = quotas.throttle_ms(rate, quota, now_s)
                if byte_throttle_ms or request_throttle_ms:
                    rate.record(-len(frame), now_s)  # not sent: not counted
            if byte_throttle_ms or request_throttle_ms:
                # A throttled fetch is answered without data, as Kafka's.
                response = {**response, "responses": []}
                frame = None
        elif self._byte_quota is not None:
            rate, quota = self._byte_quota
            rate.record(request_bytes, now_s)
            byte_throttle_ms = quotas.throttle_ms(rate, quota, now_s)
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
        assert window_num >= 1 and window_size_s >= 1
        self._quotas = quotas
        self._window_num = window_num
        self._window_size_s = window_size_s
        self._throttle_max_ms = window_size_s * 1000
        self.clock = clock
        # (quota key, user, client id) -> its rate; "" where the matching entity has no part.
        self._rates: dict[tuple[str, str, str], SampledRate] = {}
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
            byte_quota = self._measured(quotas, byte_key, user, client_id)
        request_quota = None
        if api_key not in _UNMETERED_APIS:
            request_quota = self._measured(quotas, REQUEST_PERCENTAGE, user, client_id)
        if byte_quota is None and request_quota is None:
            return None
        return RequestUsage(self, context, byte_quota, request_quota)

    def _measured(
        self,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        key: str,
        user: str,
        client_id: str,
    ) -> tuple[SampledRate, float] | None:
        found = applicable_quota(quotas, key, user, client_id)
        if found is None:
            return None
        entity, quota = found
        types = {entity_type for entity_type, _ in entity}
        group = (key, user if USER in types else "", client_id if CLIENT_ID in types else "")
        rate = self._rates.get(group)
        if rate is None:
            now_s = self.clock()
            if len(self._rates) >= SENSORS_MAX:
                self._forget_idle(now_s)
            rate = SampledRate(self._window_num, self._window_size_s, now_s)
            self._rates[group] = rate
        return rate, quota

    def _forget_idle(self, now_s: float) -> None:
        span_s = self._window_num * self._window_size_s
        for group, rate in list(self._rates.items()):
            if now_s - rate.last_recorded_s >= span_s:
                del self._rates[group]
        while len(self._rates) >= SENSORS_MAX:
            del self._rates[next(iter(self._rates))]

    def throttle_ms(self, rate: SampledRate, quota: float, now_s: float) -> int:
        return throttle_time_ms(
            rate.rate(now_s), quota, rate.window_s(now_s), self._throttle_max_ms
        )
