"""The consumer's group API refuses misuse with clear errors, before anything changes."""

from __future__ import annotations

import pytest
from storage_double import RunningDouble

from brook.client import BrookClientError, ConfigError, Consumer, TopicPartition
from brook.client.config import consumer_config


def test_group_settings_have_kafkas_defaults() -> None:
    config = consumer_config()
    assert config.group_id is None
    assert config.group_instance_id is None
    assert (config.session_timeout_ms, config.heartbeat_interval_ms) == (45000, 3000)
    assert config.max_poll_interval_ms == 300000
    assert (config.enable_auto_commit, config.auto_commit_interval_ms) == (True, 5000)
    assert config.partition_assignment_strategy == ("range",)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"partition.assignment.strategy": "cooperative"}, "is not one of range"),
        ({"partition.assignment.strategy": ""}, "must name at least one assignor"),
        ({"heartbeat.interval.ms": 10_000, "session.timeout.ms": 6000}, "must not exceed"),
        ({"group.id": ""}, "must not be empty"),
        ({"session.timeout.ms": 0}, "session.timeout.ms"),
    ],
)
def test_bad_group_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        consumer_config(settings)


def test_subscribe_without_a_group_id_is_refused(double: RunningDouble) -> None:
    with Consumer(bootstrap_servers=double.address) as consumer:
        with pytest.raises(BrookClientError, match=r"subscribe needs group\.id"):
            consumer.subscribe(["events"])
        with pytest.raises(BrookClientError, match=r"commit needs group\.id"):
            consumer.commit({TopicPartition("events", 0): 1})


def test_assign_and_subscribe_exclude_each_other(double: RunningDouble) -> None:
    with Consumer(bootstrap_servers=double.address, group_id="g") as consumer:
        consumer.assign([TopicPartition("events", 0)])
        with pytest.raises(BrookClientError, match="manually assigned partitions"):
            consumer.subscribe(["events"])
        consumer.assign([])
        consumer.subscribe(["events"])
        with pytest.raises(BrookClientError, match="the consumer is subscribed"):
            consumer.assign([TopicPartition("events", 0)])
        assert consumer.assignment() == set()


@pytest.mark.parametrize("topics", [[""], [3], None, []])
def test_subscribe_refuses_bad_topic_names(double: RunningDouble, topics: object) -> None:
    with Consumer(bootstrap_servers=double.address, group_id="g") as consumer:
        with pytest.raises((TypeError, ValueError)):
            consumer.subscribe(topics)  # type: ignore[arg-type]
        assert consumer.group_metadata().generation_id == -1


def test_commit_refuses_negative_offsets(double: RunningDouble) -> None:
    with Consumer(bootstrap_servers=double.address, group_id="g") as consumer:
        with pytest.raises(ValueError, match="committed offset of events-0"):
            consumer.commit({TopicPartition("events", 0): -1})


def test_poll_while_no_coordinator_is_reachable_returns_nothing_within_its_timeout(
    double: RunningDouble,
) -> None:
    # The double lists no group coordinator: the join keeps retrying in the background.
    with Consumer(
        bootstrap_servers=double.address, group_id="g", default_api_timeout_ms=2000
    ) as consumer:
        consumer.subscribe(["events"])
        assert consumer.poll(0.3) == []
        assert consumer.assignment() == set()
