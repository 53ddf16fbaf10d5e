"""The node's log settings (``log.*`` in its properties) as the log layer's config values.

The storage node declares its settings in brook_storage_node.config with Kafka's broker names
(``log.segment.bytes``, ``log.retention.hours``, ...); a topic's own settings override these
defaults by the topic-level names (``segment.bytes``, ``retention.ms``, see log_config.py).
Settings the node does not declare keep Kafka's defaults.

The reading is here, in the log package, as Kafka keeps its server log settings beside
LogConfig in its storage module: it needs only a parsed ``brook.config.Config``, so the log
imports nothing of the node (the node's config imports the log, never the reverse).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from brook.config import Config, resolve_duration_ms
from brook.record import TimestampType
from brook.topic_config import BROKER_SYNONYMS, LOG_APPEND_TIME
from brook_storage_node.log.log_cleaner_manager import LogCleanerManagerConfig
from brook_storage_node.log.log_config import LONG_MAX, TOPIC_LOG_CONFIG_DEF, LogConfig, field_of
from brook_storage_node.log.log_manager import LogManagerConfig

MS_PER_MINUTE: Final = 60 * 1000
MS_PER_HOUR: Final = 60 * MS_PER_MINUTE

# Topic configs whose node default is not one integer setting read as is: durations with unit
# variants (resolved by the helpers below) and the non-integer ones.
_RESOLVED_SEPARATELY: Final = frozenset(
    {
        "segment.ms",
        "segment.jitter.ms",
        "retention.ms",
        "message.timestamp.type",
        "cleanup.policy",
        "min.cleanable.dirty.ratio",
    }
)
# LogConfig field -> the node setting that gives its default (Kafka's broker synonym).
_LOG_FIELDS: Final[Mapping[str, str]] = {
    field_of(key.name): BROKER_SYNONYMS[key.name]
    for key in TOPIC_LOG_CONFIG_DEF.keys
    if key.name not in _RESOLVED_SEPARATELY
}
_MANAGER_FIELDS: Final[Mapping[str, str]] = {
    "num_recovery_threads_per_data_dir": "num.recovery.threads.per.data.dir",
    "background_threads": "background.threads",
    "log_retention_check_interval_ms": "log.retention.check.interval.ms",
    "log_flush_scheduler_interval_ms": "log.flush.scheduler.interval.ms",
    "log_flush_offset_checkpoint_interval_ms": "log.flush.offset.checkpoint.interval.ms",
    "log_flush_start_offset_checkpoint_interval_ms": (
        "log.flush.start.offset.checkpoint.interval.ms"
    ),
    "replica_high_watermark_checkpoint_interval_ms": (
        "replica.high.watermark.checkpoint.interval.ms"
    ),
    "producer_id_expiration_ms": "producer.id.expiration.ms",
    "producer_id_expiration_check_interval_ms": "producer.id.expiration.check.interval.ms",
}


def _given(config: Config, fields: Mapping[str, str]) -> dict[str, Any]:
    """The fields whose node setting is declared and has a value (null means "not set")."""
    chosen = {}
    for field_name, setting in fields.items():
        if setting in config.definition:
            value = config.get_optional_int(setting)
            if value is not None:
                chosen[field_name] = value
    return chosen


def node_log_config(config: Config) -> LogConfig:
    """The default LogConfig of every partition on this node (before topic overrides).

    Raises ValueError naming the setting if a value the node accepts is one no log can use
    (a segment or batch limit below one batch header, an index below two time entries).
    """
    chosen = _given(config, _LOG_FIELDS)
    chosen.setdefault("flush_ms", LONG_MAX)  # null log.flush.interval.ms: never by time
    chosen["segment_ms"] = log_roll_ms(config)
    chosen["segment_jitter_ms"] = log_roll_jitter_ms(config)
    chosen["retention_ms"] = log_retention_ms(config)
    timestamp_type = BROKER_SYNONYMS["message.timestamp.type"]
    if timestamp_type in config.definition:
        name = config.get_string(timestamp_type)
        chosen["message_timestamp_type"] = (
            TimestampType.LOG_APPEND_TIME if name == LOG_APPEND_TIME else TimestampType.CREATE_TIME
        )
    cleanup_policy = BROKER_SYNONYMS["cleanup.policy"]
    if cleanup_policy in config.definition:
        chosen["cleanup_policy"] = frozenset(config.get_list(cleanup_policy))
    ratio = BROKER_SYNONYMS["min.cleanable.dirty.ratio"]
    if ratio in config.definition:
        chosen["min_cleanable_dirty_ratio"] = config.get_double(ratio)
    return LogConfig(**chosen)


def node_log_manager_config(config: Config) -> LogManagerConfig:
    """The log manager's settings: data directories, threads, background intervals and the
    log cleaner's settings.

    Raises ValueError naming the setting if the cleaner's settings do not fit together (a
    dedupe buffer too small to give each thread one map entry).
    """
    log_dirs = tuple(Path(path) for path in config.get_list("log.dirs"))
    return LogManagerConfig(
        log_dirs=log_dirs,
        cleaner=node_log_cleaner_config(config),
        **_given(config, _MANAGER_FIELDS),
    )


def node_log_cleaner_config(config: Config) -> LogCleanerManagerConfig:
    """The log cleaner's settings (log.cleaner.*); undeclared ones keep Kafka's defaults."""
    chosen: dict[str, Any] = {}
    for field_name, setting, read in (
        ("enable", "log.cleaner.enable", config.get_bool),
        ("threads", "log.cleaner.threads", config.get_int),
        ("dedupe_buffer_size", "log.cleaner.dedupe.buffer.size", config.get_int),
        ("io_buffer_size", "log.cleaner.io.buffer.size", config.get_int),
        ("io_buffer_load_factor", "log.cleaner.io.buffer.load.factor", config.get_double),
        ("io_max_bytes_per_second", "log.cleaner.io.max.bytes.per.second", config.get_double),
        ("backoff_ms", "log.cleaner.backoff.ms", config.get_int),
    ):
        if setting in config.definition:
            chosen[field_name] = read(setting)
    return LogCleanerManagerConfig(**chosen)


def log_retention_ms(config: Config) -> int:
    """Effective retention time: log.retention.ms > .minutes > .hours; -1 means unlimited."""
    ms = resolve_duration_ms(
        config,
        (
            ("log.retention.ms", 1),
            ("log.retention.minutes", MS_PER_MINUTE),
            ("log.retention.hours", MS_PER_HOUR),
        ),
    )
    return -1 if ms < 0 else ms


def log_roll_ms(config: Config) -> int:
    """Effective segment age limit: log.roll.ms > log.roll.hours."""
    return resolve_duration_ms(config, (("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR)))


def log_roll_jitter_ms(config: Config) -> int:
    """Effective roll jitter: log.roll.jitter.ms > log.roll.jitter.hours."""
    return resolve_duration_ms(
        config, (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR))
    )
