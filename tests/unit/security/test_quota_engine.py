"""The client quota engine (brook.security.quota_engine): Kafka's sampled rate and throttle
time, which quota applies (Kafka's precedence), how requests are grouped into sensors, the
throttle a sensor carries, and the bound on how many sensors are kept."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from brook.metadata.image import QuotaEntity
from brook.security.client_quotas import applicable_quota, precedence
from brook.security.quota_engine import SENSORS_MAX, QuotaSensors, SampledRate, throttle_time_ms

MB = 1_000_000


# ---------------------------------------------------------------- arithmetic


def test_a_new_rate_is_measured_over_all_but_one_sample_window() -> None:
    rate = SampledRate(samples=11, window_s=1.0, now_s=100.0)
    rate.record(10 * MB, 100.0)
    # 10 MB just now: counted as if over 10 whole windows, not over an instant.
    assert rate.window_s(100.0) == pytest.approx(10.0)
    assert rate.rate(100.0) == pytest.approx(1 * MB)
    # 5.5 s later: 5 whole windows, 5 short of 10, so 5.5 + 5.
    rate.record(2 * MB, 105.5)
    assert rate.window_s(105.5) == pytest.approx(10.5)
    assert rate.rate(105.5) == pytest.approx(12 * MB / 10.5)


def test_samples_older_than_the_whole_span_are_forgotten() -> None:
    rate = SampledRate(samples=3, window_s=1.0, now_s=0.0)
    rate.record(6.0, 0.0)
    rate.record(3.0, 1.0)
    rate.record(3.0, 2.0)
    # Three samples over 2 s span, at least 2 windows.
    assert rate.rate(2.5) == pytest.approx(12.0 / 2.5)
    # At 3.0 the first sample (started at 0.0) is a whole span old.
    assert rate.rate(3.0) == pytest.approx(6.0 / 2.0)
    assert rate.rate(10.0) == 0.0


def test_throttle_time_brings_the_rate_back_to_the_quota_within_the_bound() -> None:
    # 2 MB/s over 10 s against 1 MB/s: 10 MB too many, 10 s at the quota's pace.
    assert throttle_time_ms(2 * MB, 1 * MB, 10.0, 60_000) == 10_000
    assert throttle_time_ms(1.1 * MB, 1 * MB, 10.0, 60_000) == 1_000
    assert throttle_time_ms(2 * MB, 1 * MB, 10.0, 1_000) == 1_000
    assert throttle_time_ms(1 * MB, 1 * MB, 10.0, 1_000) == 0


# ---------------------------------------------------------------- precedence

_LEVELS = precedence("alice", "loader")


@pytest.mark.parametrize("level", range(len(_LEVELS)))
def test_the_most_specific_entity_with_the_key_applies(level: int) -> None:
    """Quotas at this level and every less specific one: this level's applies."""
    quotas = {entity: {"producer_byte_rate": float(i)} for i, entity in enumerate(_LEVELS)}
    for more_specific in _LEVELS[:level]:
        del quotas[more_specific]
    # Other users, client ids and keys are never chosen.
    quotas[(("user", "bob"),)] = {"producer_byte_rate": 99.0}
    quotas[(("client-id", "other"),)] = {"producer_byte_rate": 99.0}
    assert applicable_quota(quotas, "producer_byte_rate", "alice", "loader") == (
        _LEVELS[level],
        float(level),
    )


def test_precedence_is_kafkas_order() -> None:
    assert _LEVELS == (
        (("client-id", "loader"), ("user", "alice")),
        (("client-id", None), ("user", "alice")),
        (("user", "alice"),),
        (("client-id", "loader"), ("user", None)),
        (("client-id", None), ("user", None)),
        (("user", None),),
        (("client-id", "loader"),),
        (("client-id", None),),
    )


def test_each_key_is_looked_up_on_its_own() -> None:
    quotas: Mapping[QuotaEntity, Mapping[str, float]] = {
        (("user", "alice"),): {"producer_byte_rate": 1.0},
        (("client-id", "loader"),): {"consumer_byte_rate": 2.0},
    }
    assert applicable_quota(quotas, "consumer_byte_rate", "alice", "loader") == (
        (("client-id", "loader"),),
        2.0,
    )
    assert applicable_quota(quotas, "request_percentage", "alice", "loader") is None


# ---------------------------------------------------------------- sensors


def test_a_greedy_client_held_until_each_throttle_ends_gets_its_quota() -> None:
    """A client that sends 100 KB whenever its sensor is not throttled (as a storage node holds
    a throttled group's requests): over a minute it gets its quota, within 5 %."""
    now = [0.0]
    sensors = QuotaSensors(2, 1, lambda: now[0])
    quotas = {(("client-id", "greedy"),): {"producer_byte_rate": 1 * MB}}
    sent = 0
    while now[0] < 60.0:
        measured = sensors.measured(quotas, "producer_byte_rate", "ANONYMOUS", "greedy")
        assert measured is not None
        sensor, quota = measured
        now[0] = max(now[0], sensor.throttled_until_s)
        sensors.record(sensor, quota, 100_000, now[0])
        sent += 100_000
        now[0] += 0.001
    assert sent / now[0] == pytest.approx(1 * MB, rel=0.05)


def test_a_throttle_marks_the_sensor_until_it_ends_and_never_shortens_it() -> None:
    now = [0.0]
    sensors = QuotaSensors(2, 1, lambda: now[0])
    quotas = {(("user", "alice"),): {"consumer_byte_rate": 1000.0}}
    measured = sensors.measured(quotas, "consumer_byte_rate", "alice", "any")
    assert measured is not None
    sensor, quota = measured
    assert sensors.record(sensor, quota, 500, 0.0) == 0 and sensor.throttled_until_s == 0.0
    # 3000 bytes over the 1 s a new rate counts at least: 2 s too many, bounded by 1 s.
    assert sensors.record(sensor, quota, 2500, 0.0) == 1000
    assert sensor.throttled_until_s == 1.0
    # A smaller throttle later does not end the longer one early.
    sensor.throttled_until_s = 5.0
    assert sensors.record(sensor, quota, 1, 0.5) > 0
    assert sensor.throttled_until_s == 5.0


def test_requests_share_a_sensor_as_far_as_the_matching_entity_names_them() -> None:
    sensors = QuotaSensors(11, 1)
    quotas = {
        (("client-id", None),): {"producer_byte_rate": 1 * MB},
        (("user", "alice"),): {"producer_byte_rate": 2 * MB},
    }

    def sensor(user: str, client_id: str) -> object:
        measured = sensors.measured(quotas, "producer_byte_rate", user, client_id)
        assert measured is not None
        return measured[0]

    # The default client-id quota: one sensor per client id.
    assert sensor("bob", "a") is not sensor("bob", "b")
    assert sensor("bob", "a") is sensor("carol", "a")
    # A user's quota: one sensor across its client ids.
    assert sensor("alice", "a") is sensor("alice", "b")
    assert sensors.measured(quotas, "consumer_byte_rate", "alice", "a") is None


def test_the_sensors_are_bounded() -> None:
    now = [0.0]
    sensors = QuotaSensors(11, 1, lambda: now[0])
    quotas = {(("client-id", None),): {"producer_byte_rate": 1 * MB}}
    for n in range(SENSORS_MAX + 10):
        measured = sensors.measured(quotas, "producer_byte_rate", "ANONYMOUS", f"client-{n}")
        assert measured is not None
        sensors.record(*measured, 100, now[0])
        now[0] += 0.0001
    assert len(sensors) <= SENSORS_MAX
