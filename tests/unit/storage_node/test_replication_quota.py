"""Replication throttles: which replicas a topic's lists throttle, and the quota's rate."""

from __future__ import annotations

import pytest
from brook_storage_node.replication_quota import ReplicationQuota, is_throttled

from brook.topic_config import validate_topic_configs

LISTED = "follower.replication.throttled.replicas"


def test_a_list_throttles_the_named_partition_on_the_named_node_only() -> None:
    configs = {LISTED: "0:4, 2:4,1:5"}
    assert is_throttled(configs, LISTED, 0, 4)
    assert is_throttled(configs, LISTED, 2, 4)
    assert not is_throttled(configs, LISTED, 1, 4)
    assert not is_throttled(configs, LISTED, 0, 5)
    assert not is_throttled({}, LISTED, 0, 4)
    assert is_throttled({LISTED: "*"}, LISTED, 7, 9)


@pytest.mark.parametrize("value", ["0-4", "a:1", "*,0:1", "0:"])
def test_a_malformed_list_is_refused(value: str) -> None:
    problem = validate_topic_configs({LISTED: value})
    assert problem is not None and LISTED in problem


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_quota_spaces_transfers_to_the_rate_over_time() -> None:
    clock = _Clock()
    quota = ReplicationQuota(clock)
    rate = 100_000
    moved = 0
    # A transfer whenever the quota allows one, for 10 s of simulated time.
    while clock.now < 110.0:
        delay = quota.delay_s(rate)
        if delay > 0:
            clock.now += delay
            continue
        size = ReplicationQuota.chunk_bytes(rate, 1 << 20)
        quota.record(size, rate)
        moved += size
    # Within one transfer (a tenth of a second of the rate) of the rate times the time.
    chunk = ReplicationQuota.chunk_bytes(rate, 1 << 20)
    assert chunk == rate // 10
    assert 10 * rate - chunk <= moved <= 10 * rate + chunk


def test_an_unlimited_quota_never_delays_and_chunks_are_bounded() -> None:
    quota = ReplicationQuota(_Clock())
    quota.record(10 << 20, None)
    assert quota.delay_s(None) == 0.0
    assert ReplicationQuota.chunk_bytes(None, 4096) == 4096
    assert ReplicationQuota.chunk_bytes(10 << 20, 1 << 20) == 1 << 20
    assert ReplicationQuota.chunk_bytes(10, 1 << 20) == 1024  # at least a batch's worth


@pytest.mark.parametrize("value", ["0:\u00b2", "\u0661:1", "1:99999999999"])
def test_entries_int_would_refuse_or_overflow_are_refused(value: str) -> None:
    problem = validate_topic_configs({LISTED: value})
    assert problem is not None and LISTED in problem
