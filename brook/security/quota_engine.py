"""Client quota measurement, Kafka's way (seed 001, section 4.9; KIP-13, KIP-124): the one
engine behind the gateway's enforcement on Kafka connections (brook_gateway.quotas) and the
storage nodes' on gRPC calls (brook_storage_node.client_quotas).

Which quota applies: for each quota key on its own, the first entity in Kafka's precedence
order (brook.security.client_quotas.precedence) that has one, for the caller's user name and
client id. All requests of one quota group share one measured rate (a ``Sensor``): its user
and client id as far as the entity that matched names them (the default client-id quota is
measured per client id, a user's quota across all its client ids), as Kafka's metric tags do.

How: each rate is Kafka's sampled rate (``SampledRate``): ``quota.window.num`` samples of
``quota.window.size.seconds`` each. A request is recorded first, then its quota checked; a
rate over the quota throttles the client for (rate - quota) / quota x the measured window,
at most one sample window (Kafka's ClientQuotaManager bound), the time it takes the rate to
come back to the quota. What a throttle does to the client is the enforcing server's part.

Bounded: at most ``SENSORS_MAX`` sensors are kept; sensors idle for a whole window span (whose
rates then measure 0, as a new one would) are dropped first, then the oldest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

from brook.config import ConfigKey, ConfigType, Importance, Range
from brook.metadata.image import QuotaEntity
from brook.security.client_quotas import CLIENT_ID, USER, applicable_quota

__all__ = [
    "QUOTA_CONFIG_KEYS",
    "QUOTA_WINDOW_NUM",
    "QUOTA_WINDOW_SIZE_SECONDS",
    "SENSORS_MAX",
    "QuotaSensors",
    "SampledRate",
    "Sensor",
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


class Sensor:
    """One quota group's measured rate, and until when (clock time) its last throttle lasts:
    servers that hold a throttled group's further requests (the storage nodes) wait for it."""

    __slots__ = ("rate", "throttled_until_s")

    def __init__(self, rate: SampledRate) -> None:
        self.rate = rate
        self.throttled_until_s = 0.0


class QuotaSensors:
    """The sensors of one enforcing server, over the client quotas of its metadata image."""

    def __init__(
        self, window_num: int, window_size_s: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        assert window_num >= 1 and window_size_s >= 1
        self._window_num = window_num
        self._window_size_s = window_size_s
        self.throttle_max_ms = window_size_s * 1000
        """The longest one request throttles its client: one sample window."""
        self.clock = clock
        # (quota key, user, client id) -> its sensor; "" where the matching entity has no part.
        self._sensors: dict[tuple[str, str, str], Sensor] = {}

    def __len__(self) -> int:
        return len(self._sensors)

    def measured(
        self,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        key: str,
        user: str,
        client_id: str,
    ) -> tuple[Sensor, float] | None:
        """The sensor of the group ``user``'s requests with ``client_id`` are measured in for
        quota ``key``, and the quota; None when no ``key`` quota applies to them."""
        found = applicable_quota(quotas, key, user, client_id)
        if found is None:
            return None
        entity, quota = found
        types = {entity_type for entity_type, _ in entity}
        group = (key, user if USER in types else "", client_id if CLIENT_ID in types else "")
        sensor = self._sensors.get(group)
        if sensor is None:
            now_s = self.clock()
            if len(self._sensors) >= SENSORS_MAX:
                self._forget_idle(now_s)
            sensor = Sensor(SampledRate(self._window_num, self._window_size_s, now_s))
            self._sensors[group] = sensor
        return sensor, quota

    def _forget_idle(self, now_s: float) -> None:
        span_s = self._window_num * self._window_size_s
        for group, sensor in list(self._sensors.items()):
            if now_s - sensor.rate.last_recorded_s >= span_s:
                del self._sensors[group]
        while len(self._sensors) >= SENSORS_MAX:
            del self._sensors[next(iter(self._sensors))]

    def throttle_ms(self, rate: SampledRate, quota: float, now_s: float) -> int:
        """How long ``rate`` is to be throttled for now against ``quota`` (0: not at all)."""
        return throttle_time_ms(rate.rate(now_s), quota, rate.window_s(now_s), self.throttle_max_ms)

    def record(self, sensor: Sensor, quota: float, value: float, now_s: float) -> int:
        """Records ``value`` in ``sensor`` and checks it against ``quota``: the throttle in ms
        (0: none), which ``sensor.throttled_until_s`` is extended to cover."""
        sensor.rate.record(value, now_s)
        throttle_ms = self.throttle_ms(sensor.rate, quota, now_s)
        if throttle_ms:
            sensor.throttled_until_s = max(sensor.throttled_until_s, now_s + throttle_ms / 1000)
        return throttle_ms
