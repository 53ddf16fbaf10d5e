"""Log settings: Kafka's names and defaults, topic overrides, and clear rejection of bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from brook_storage_node.config import CONFIG_DEF
from brook_storage_node.log import TOPIC_LOG_CONFIG_DEF, LogConfig
from brook_storage_node.log.node_config import node_log_config, node_log_manager_config

from brook.config import Config, ConfigError, Importance, Range, RawSetting
from brook.record import TimestampType
from brook.topic_config import TOPIC_CONFIG_DEF, validate_topic_configs


def test_defaults_are_kafkas_topic_defaults() -> None:
    config = LogConfig()
    assert config.to_properties() == {
        "segment.bytes": "1073741824",
        "segment.ms": "604800000",
        "segment.jitter.ms": "0",
        "segment.index.bytes": "10485760",
        "index.interval.bytes": "4096",
        "flush.messages": "9223372036854775807",
        "flush.ms": "9223372036854775807",
        "retention.ms": "604800000",
        "retention.bytes": "-1",
        "max.message.bytes": "1048588",
        "message.timestamp.type": "CreateTime",
        "message.timestamp.difference.max.ms": "9223372036854775807",
        "cleanup.policy": "delete",
        "file.delete.delay.ms": "60000",
        "delete.retention.ms": "86400000",
        "min.cleanable.dirty.ratio": "0.5",
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": "9223372036854775807",
    }
    assert {key.name for key in TOPIC_LOG_CONFIG_DEF.keys} == set(config.to_properties())


def test_topic_overrides_apply_over_the_nodes_defaults() -> None:
    node_defaults = LogConfig(retention_ms=1_000)
    topic = node_defaults.with_overrides(
        {
            "segment.bytes": "1048576",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact,delete",
            "min.insync.replicas": "2",  # not a log setting: another layer's
        }
    )
    assert topic.segment_bytes == 1_048_576
    assert topic.retention_ms == 1_000
    assert topic.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    assert topic.cleanup_policy == frozenset({"compact", "delete"})
    assert topic.with_overrides({}) is topic


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("segment.bytes", "10", "less than the minimum 61"),
        ("segment.bytes", "lots", "not an integer"),
        ("retention.ms", "-2", "less than the minimum -1"),
        ("message.timestamp.type", "WallClock", "not one of CreateTime, LogAppendTime"),
        ("cleanup.policy", "delete,shred", "not one of delete, compact"),
        ("segment.index.bytes", "8", "less than the minimum 24"),
    ],
)
def test_invalid_values_are_rejected_naming_the_setting(name: str, value: str, reason: str) -> None:
    base = LogConfig()
    with pytest.raises(ConfigError) as raised:
        base.with_overrides({name: value, "retention.bytes": "5"})
    message = str(raised.value)
    assert name in message and value in message and reason in message
    assert base == LogConfig()


def test_configs_built_in_code_are_checked_too() -> None:
    with pytest.raises(ValueError, match=r"index\.interval\.bytes"):
        LogConfig(index_interval_bytes=-1)


def _node_config(**settings: str) -> Config:
    raw = {"node.id": "1", "log.dirs": "/data/a,/data/b", **settings}
    return CONFIG_DEF.parse({name: RawSetting(value, "test") for name, value in raw.items()})


def test_node_log_settings_become_the_default_log_config() -> None:
    config = node_log_config(
        _node_config(
            **{
                "log.segment.bytes": "2048",
                "log.roll.hours": "2",
                "log.retention.minutes": "5",
                "log.retention.bytes": "99999",
                "log.index.interval.bytes": "128",
                "log.flush.interval.ms": "250",
                "message.max.bytes": "1000",
            }
        )
    )
    assert (config.segment_bytes, config.segment_ms, config.retention_ms) == (
        2048,
        7_200_000,
        300_000,
    )
    assert (config.retention_bytes, config.index_interval_bytes, config.flush_ms) == (
        99999,
        128,
        250,
    )
    assert config.max_message_bytes == 1000
    assert node_log_config(_node_config()) == LogConfig(retention_ms=7 * 24 * 3_600_000)


def test_node_settings_give_the_log_managers_directories_and_intervals() -> None:
    config = node_log_manager_config(
        _node_config(
            **{
                "num.recovery.threads.per.data.dir": "4",
                "log.retention.check.interval.ms": "1000",
                "replica.high.watermark.checkpoint.interval.ms": "700",
            }
        )
    )
    assert config.log_dirs == (Path("/data/a"), Path("/data/b"))
    assert config.num_recovery_threads_per_data_dir == 4
    assert config.log_retention_check_interval_ms == 1000
    assert config.replica_high_watermark_checkpoint_interval_ms == 700


def test_a_node_segment_size_too_small_for_a_batch_is_rejected_by_name() -> None:
    # The node's own configuration refuses it, before any log sees it.
    with pytest.raises(ConfigError, match=r'log\.segment\.bytes="20" is less than the minimum 61'):
        node_log_config(_node_config(**{"log.segment.bytes": "20"}))


# Kafka's LogConfig defines every one of these topic configs with importance MEDIUM; the log's
# own copy of the definition once said LOW, HIGH and LOW (issue #15).
@pytest.mark.parametrize("name", ["segment.jitter.ms", "max.message.bytes", "file.delete.delay.ms"])
def test_log_and_topic_config_give_kafkas_importance_medium(name: str) -> None:
    assert TOPIC_LOG_CONFIG_DEF.key(name).importance is Importance.MEDIUM
    assert TOPIC_CONFIG_DEF.key(name).importance is Importance.MEDIUM


@pytest.mark.parametrize("name", sorted(key.name for key in TOPIC_LOG_CONFIG_DEF.keys))
def test_the_logs_config_is_the_topic_config_definition(name: str) -> None:
    log_key, topic_key = TOPIC_LOG_CONFIG_DEF.key(name), TOPIC_CONFIG_DEF.key(name)
    assert (log_key.type, log_key.default, log_key.importance, log_key.doc) == (
        topic_key.type,
        topic_key.default,
        topic_key.importance,
        topic_key.doc,
    )
    assert log_key.validator == topic_key.validator
    # The log's default is the topic config's default, and each bound is enforced alike.
    assert LogConfig().to_properties()[name] == _as_text(topic_key.default)
    if isinstance(topic_key.validator, Range):
        for value in _around(topic_key.validator):
            topic_accepts = validate_topic_configs({name: str(value)}) is None
            try:
                LogConfig().with_overrides({name: str(value)})
            except ConfigError:
                log_accepts = False
            else:
                log_accepts = True
            assert log_accepts == topic_accepts, (name, value)


def _as_text(value: object) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def _around(bounds: Range) -> list[int]:
    values = []
    for bound in (bounds.min_value, bounds.max_value):
        if isinstance(bound, int):
            values.extend((bound - 1, bound, bound + 1))
    return values
