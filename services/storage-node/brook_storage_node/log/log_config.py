"""Per-partition log settings, named and defaulted as Kafka's topic-level configs.

``TOPIC_LOG_CONFIG_DEF`` declares them once (names, types, defaults, bounds, docs) with the
shared ``brook.config`` machinery, so the controller can validate a CreateTopics request and
the docs can print the table from the same definitions the log obeys. ``LogConfig`` is the
typed, immutable value a ``PartitionLog`` reads; topic overrides are layered on the node's
defaults with ``LogConfig.with_overrides``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from brook.config import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigKey,
    ConfigType,
    ConfigValue,
    Importance,
    OneOf,
    Range,
    RawSetting,
)
from brook.record import BATCH_OVERHEAD, TimestampType

LONG_MAX: Final = INT64_MAX
OFFSET_INDEX_ENTRY_BYTES: Final = 8
TIME_INDEX_ENTRY_BYTES: Final = 12
# The time index keeps one slot for the entry a segment gets when it stops being active, so it
# must hold at least that one and one ordinary entry.
SEGMENT_INDEX_BYTES_MIN: Final = 2 * TIME_INDEX_ENTRY_BYTES

CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"
CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"

_DAY_MS: Final = 24 * 60 * 60 * 1000

TOPIC_LOG_CONFIG_DEF: Final = ConfigDef(
    [
        ConfigKey(
            "segment.bytes",
            ConfigType.INT,
            1024 * 1024 * 1024,
            "Size of one segment file. Retention deletes whole segments, so smaller segments "
            "mean finer retention and more files.",
            Importance.HIGH,
            # Positions in a segment are int32 (index entries), and a segment must hold a batch.
            Range(BATCH_OVERHEAD, INT32_MAX),
        ),
        ConfigKey(
            "segment.ms",
            ConfigType.LONG,
            7 * _DAY_MS,
            "Roll the active segment once its first batch is this old, even if it is not full, "
            "so that retention can delete old data.",
            Importance.MEDIUM,
            Range(1),
        ),
        ConfigKey(
            "segment.jitter.ms",
            ConfigType.LONG,
            0,
            "Up to this much is subtracted from segment.ms per segment, so partitions created "
            "together do not all roll at once.",
            Importance.LOW,
            Range(0),
        ),
        ConfigKey(
            "segment.index.bytes",
            ConfigType.INT,
            10 * 1024 * 1024,
            "Size of the offset and time index of the active segment (preallocated, trimmed "
            "when the segment rolls). A full index rolls the segment.",
            Importance.MEDIUM,
            Range(SEGMENT_INDEX_BYTES_MIN, INT32_MAX),
        ),
        ConfigKey(
            "index.interval.bytes",
            ConfigType.INT,
            4096,
            "Bytes of log between two index entries: a read scans at most about this much to "
            "find its batch.",
            Importance.MEDIUM,
            Range(0, INT32_MAX),
        ),
        ConfigKey(
            "flush.messages",
            ConfigType.LONG,
            LONG_MAX,
            "fsync the log after this many messages (offsets). By default Brook, like Kafka, "
            "relies on replication and the OS for durability.",
            Importance.MEDIUM,
            Range(1),
        ),
        ConfigKey(
            "flush.ms",
            ConfigType.LONG,
            LONG_MAX,
            "fsync the log when it has gone this long without one (checked every "
            "log.flush.scheduler.interval.ms).",
            Importance.MEDIUM,
            Range(0),
        ),
        ConfigKey(
            "retention.ms",
            ConfigType.LONG,
            7 * _DAY_MS,
            "Delete a segment once its newest record is older than this; -1 keeps data forever.",
            Importance.HIGH,
            Range(-1),
        ),
        ConfigKey(
            "retention.bytes",
            ConfigType.LONG,
            -1,
            "Delete the oldest segments while the partition is larger than this; -1 means no "
            "size limit.",
            Importance.HIGH,
            Range(-1),
        ),
        ConfigKey(
            "max.message.bytes",
            ConfigType.INT,
            1024 * 1024 + 12,
            "Largest record batch (compressed, log framing included) an append accepts.",
            Importance.HIGH,
            Range(BATCH_OVERHEAD, INT32_MAX),
        ),
        ConfigKey(
            "message.timestamp.type",
            ConfigType.STRING,
            CREATE_TIME,
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch "
            "with the leader's clock when it is appended.",
            Importance.MEDIUM,
            OneOf((CREATE_TIME, LOG_APPEND_TIME)),
        ),
        ConfigKey(
            "message.timestamp.difference.max.ms",
            ConfigType.LONG,
            LONG_MAX,
            "With CreateTime, reject a batch whose first or largest timestamp is further than "
            "this from the leader's clock.",
            Importance.MEDIUM,
            Range(0),
        ),
        ConfigKey(
            "cleanup.policy",
            ConfigType.LIST,
            (CLEANUP_DELETE,),
            "delete: retention.ms / retention.bytes delete old segments. compact: keep the "
            "latest record per key (retention by time and size does not apply).",
            Importance.MEDIUM,
            OneOf((CLEANUP_DELETE, CLEANUP_COMPACT)),
        ),
        ConfigKey(
            "file.delete.delay.ms",
            ConfigType.LONG,
            60_000,
            "A deleted segment's files are renamed *.deleted and removed this much later, so "
            "reads that already hold the segment finish first.",
            Importance.LOW,
            Range(0),
        ),
    ]
)


def _default(name: str) -> int:
    value = TOPIC_LOG_CONFIG_DEF.key(name).default
    assert isinstance(value, int) and not isinstance(value, bool), name
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
}
assert set(_FIELD_OF_KEY) == {key.name for key in TOPIC_LOG_CONFIG_DEF.keys}

_TIMESTAMP_TYPE_NAMES: Final = {
    TimestampType.CREATE_TIME: CREATE_TIME,
    TimestampType.LOG_APPEND_TIME: LOG_APPEND_TIME,
}


def _to_config_value(value: object) -> ConfigValue:
    if isinstance(value, TimestampType):
        return _TIMESTAMP_TYPE_NAMES[value]
    if isinstance(value, frozenset):
        return tuple(sorted(value))
    assert isinstance(value, int), value
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
