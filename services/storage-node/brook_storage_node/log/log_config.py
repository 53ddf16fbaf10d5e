"""Per-partition log settings: the topic configs the log obeys, as a typed value.

Topic configs are defined once, in ``brook.topic_config.TOPIC_CONFIG_DEF`` (names, types,
defaults, bounds, docs), which the controller validates CreateTopics and AlterConfigs against.
``TOPIC_LOG_CONFIG_DEF`` is the part of it the log obeys, built from those very keys, so the
two cannot disagree. ``LogConfig`` is the typed, immutable value a ``PartitionLog`` reads; topic
overrides are layered on the node's defaults with ``LogConfig.with_overrides``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from brook.config import INT64_MAX, ConfigDef, ConfigValue, RawSetting
from brook.record import TimestampType
from brook.topic_config import (
    CLEANUP_COMPACT,
    CLEANUP_DELETE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    SEGMENT_INDEX_BYTES_MIN,
    TOPIC_CONFIG_DEF,
)

LONG_MAX: Final = INT64_MAX
OFFSET_INDEX_ENTRY_BYTES: Final = 8
TIME_INDEX_ENTRY_BYTES: Final = 12
# The time index keeps one slot for the entry a segment gets when it stops being active, so
# segment.index.bytes must allow at least that one and one ordinary entry.
assert SEGMENT_INDEX_BYTES_MIN >= 2 * TIME_INDEX_ENTRY_BYTES

# The topic configs a partition log obeys -> LogConfig field. Their names, types, defaults and
# bounds are brook.topic_config's; the others (min.insync.replicas, compression.type, ...)
# belong to other layers.
_FIELD_OF_KEY: Final[Mapping[str, str]] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    # Compaction (cleanup.policy=compact): the cleaner's per-topic settings (log/cleaner.py).
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}

TOPIC_LOG_CONFIG_DEF: Final = ConfigDef([TOPIC_CONFIG_DEF.key(name) for name in _FIELD_OF_KEY])


def field_of(name: str) -> str:
    """The LogConfig field holding a topic config the log obeys."""
    return _FIELD_OF_KEY[name]


def _default(name: str) -> int:
    value = TOPIC_LOG_CONFIG_DEF.key(name).default
    assert isinstance(value, int) and not isinstance(value, bool), name
    return value


def _default_ratio(name: str) -> float:
    value = TOPIC_LOG_CONFIG_DEF.key(name).default
    assert isinstance(value, float), name
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings one partition log obeys; defaults are Kafka's (see TOPIC_LOG_CONFIG_DEF)."""

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    retention_ms: int = _default("retention.ms")
    retention_bytes: int = _default("retention.bytes")
    max_message_bytes: int = _default("max.message.bytes")
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_difference_max_ms: int = _default("message.timestamp.difference.max.ms")
    cleanup_policy: frozenset[str] = field(default=frozenset({CLEANUP_DELETE}))
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    delete_retention_ms: int = _default("delete.retention.ms")
    min_cleanable_dirty_ratio: float = _default_ratio("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")

    def __post_init__(self) -> None:
        # A LogConfig built in code gets the same bounds as one parsed from properties.
        problems = []
        for name, attr in _FIELD_OF_KEY.items():
            key = TOPIC_LOG_CONFIG_DEF.key(name)
            value = _to_config_value(getattr(self, attr))
            reason = key.validator(value) if key.validator is not None else None
            if reason is not None:
                problems.append(f"{name}={value!r} {reason}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def delete_retention_enabled(self) -> bool:
        """Whether retention.ms / retention.bytes delete segments (cleanup.policy has delete)."""
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (cleanup.policy has compact)."""
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def offset_index_entries_max(self) -> int:
        return self.segment_index_bytes // OFFSET_INDEX_ENTRY_BYTES

    @property
    def time_index_entries_max(self) -> int:
        return self.segment_index_bytes // TIME_INDEX_ENTRY_BYTES

    def with_overrides(
        self, overrides: Mapping[str, str], source: str = "topic config"
    ) -> LogConfig:
        """This config with Kafka-named topic overrides applied (``{"retention.ms": "1000"}``).

        Raises brook.config.ConfigError naming every invalid setting; nothing is applied then.
        Names that are not log settings (min.insync.replicas, compression.type, ...) belong to
        other layers and are ignored here.
        """
        raw = {
            name: RawSetting(value, source)
            for name, value in overrides.items()
            if name in TOPIC_LOG_CONFIG_DEF
        }
        if not raw:
            return self
        parsed = TOPIC_LOG_CONFIG_DEF.parse(raw)
        changes: dict[str, Any] = {
            _FIELD_OF_KEY[name]: _from_config_value(name, parsed.get(name)) for name in raw
        }
        return dataclasses.replace(self, **changes)

    def to_properties(self) -> dict[str, str]:
        """Every setting by its Kafka name, as text (what DescribeConfigs shows)."""
        out = {}
        for name, attr in _FIELD_OF_KEY.items():
            value = _to_config_value(getattr(self, attr))
            out[name] = ",".join(value) if isinstance(value, tuple) else str(value)
        return out


assert set(_FIELD_OF_KEY.values()) == {field.name for field in dataclasses.fields(LogConfig)}

_TIMESTAMP_TYPE_NAMES: Final = {
    TimestampType.CREATE_TIME: CREATE_TIME,
    TimestampType.LOG_APPEND_TIME: LOG_APPEND_TIME,
}


def _to_config_value(value: object) -> ConfigValue:
    if isinstance(value, TimestampType):
        return _TIMESTAMP_TYPE_NAMES[value]
    if isinstance(value, frozenset):
        return tuple(sorted(value))
    assert isinstance(value, int | float), value
    return value


def _from_config_value(name: str, value: ConfigValue) -> object:
    if name == "message.timestamp.type":
        return (
            TimestampType.LOG_APPEND_TIME if value == LOG_APPEND_TIME else TimestampType.CREATE_TIME
        )
    if name == "cleanup.policy":
        assert isinstance(value, tuple)
        return frozenset(value)
    return value
