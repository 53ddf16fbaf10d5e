"""Kafka's topic-level configuration: the names a topic may override, their types, defaults and
valid values, and the node-level (broker) setting each one overrides.

This is the one definition of topic configs. The controller validates CreateTopics and
AlterConfigs against ``TOPIC_CONFIG_DEF`` and answers DescribeConfigs from it; a storage node
layers a topic's overrides on its own defaults, and its partition log's ``LogConfig`` takes the
keys it obeys from here (brook_storage_node/log/log_config.py). The
names, defaults and bounds are Kafka's (its ``TopicConfig`` / ``LogConfig``), except where the
storage engine needs a tighter bound to work at all (a segment must hold one record batch).

    >>> validate_topic_configs({"retention.ms": "-1"})  # None: valid
    >>> validate_topic_configs({"retention.msx": "1"})
    'unknown topic config retention.msx (did you mean retention.ms?)'
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from brook.config import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    ConfigValue,
    Importance,
    OneOf,
    Range,
    RawSetting,
)
from brook.record import BATCH_OVERHEAD

__all__ = [
    "BROKER_SYNONYMS",
    "CLEANUP_COMPACT",
    "CLEANUP_DELETE",
    "COMPRESSION_TYPES",
    "CREATE_TIME",
    "FOLLOWER_THROTTLED_RATE",
    "LEADER_THROTTLED_RATE",
    "LOG_APPEND_TIME",
    "NODE_DYNAMIC_CONFIG_DEF",
    "SEGMENT_INDEX_BYTES_MIN",
    "THROTTLE_ALL",
    "TOPIC_CONFIG_DEF",
    "ThrottledReplicas",
    "describe_type",
    "parse_throttled_replicas",
    "throttled_replica",
    "topic_name_for_broker_config",
    "validate_broker_default_configs",
    "validate_topic_configs",
]

_H = Importance.HIGH
_M = Importance.MEDIUM
_L = Importance.LOW
_LONG = ConfigType.LONG
_DAY_MS: Final = 24 * 60 * 60 * 1000
# Two time index entries (12 bytes each): the slot the active segment keeps for the entry it
# gets when it stops being active, and one ordinary entry. Tighter than Kafka's 4 because
# Brook's time index must hold that reserved slot; the node's log.index.size.max.bytes has
# the same bound, and the log asserts it matches its entry size.
SEGMENT_INDEX_BYTES_MIN: Final = 24
# Kafka's broker- and topic-level compression.type values.
COMPRESSION_TYPES: Final = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"
CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"

# Kafka 3.x still accepts these deprecated topic configs (removed in 4.0) and, with the
# 3.0 message format, ignores them; so does Brook, so that tools and scripts that set them work.
_IGNORED: Final = "[Deprecated, accepted and ignored, as Kafka 3.x does] In "
_RELEASE_VERSION_RE: Final = re.compile(r"^(0\.(8|9|10|11)\.\d+|[1-9]\d*\.\d+)(\.\d+)?(-IV\d+)?$")


@dataclass(frozen=True)
class KafkaReleaseVersion:
    """A Kafka release or metadata version as message.format.version takes it: 0.10.2,
    0.11.0-IV2, 2.8, 3.0-IV1."""

    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, str) or not _RELEASE_VERSION_RE.match(value):
            return "is not a Kafka version such as 0.10.2, 2.8 or 3.0-IV1"
        return None

    def describe(self) -> str:
        return "a Kafka version: 0.8.0 ... 3.x-IVn"


THROTTLE_ALL: Final = "*"
# ASCII digits only: str.isdigit() also accepts characters int() refuses (superscripts).
_THROTTLED_REPLICA_RE: Final = re.compile(r"[0-9]{1,10}:[0-9]{1,10}")


@dataclass(frozen=True)
class ThrottledReplicas:
    """Kafka's throttled-replicas list: ``*`` (every replica) or ``partition:node`` pairs."""

    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, tuple):
            return "is not a list"
        if value == (THROTTLE_ALL,):
            return None
        for entry in value:
            if throttled_replica(str(entry)) is None:
                return f"has {entry!r}, which is not partition:node (or the list is not *)"
        return None

    def describe(self) -> str:
        return "[partition:node,...] or *"


def throttled_replica(entry: str) -> tuple[int, int] | None:
    """One ``partition:node`` entry of a throttled-replicas list as (partition, node); None
    when it is not one (``*``, or malformed)."""
    if not _THROTTLED_REPLICA_RE.fullmatch(entry):
        return None
    partition, _, node = entry.partition(":")
    return int(partition), int(node)


def parse_throttled_replicas(value: str) -> frozenset[tuple[int, int]] | None:
    """A valid throttled-replicas value as (partition, node) pairs; None means every one.
    ValueError for a malformed entry."""
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    if entries == [THROTTLE_ALL]:
        return None
    pairs = [throttled_replica(entry) for entry in entries]
    if None in pairs:
        raise ValueError(f"{value!r} is not a throttled-replicas list")
    return frozenset(pair for pair in pairs if pair is not None)


TOPIC_CONFIG_DEF: Final = ConfigDef(
    [
        ConfigKey(
            "cleanup.policy",
            ConfigType.LIST,
            (CLEANUP_DELETE,),
            "delete: retention.ms / retention.bytes delete old segments. compact: keep the "
            "latest record per key (retention by time and size does not apply).",
            _M,
            OneOf((CLEANUP_DELETE, CLEANUP_COMPACT)),
        ),
        ConfigKey(
            "compression.type",
            ConfigType.STRING,
            "producer",
            "The compression of stored batches: producer keeps what the producer sent.",
            _M,
            OneOf(COMPRESSION_TYPES),
        ),
        ConfigKey(
            "delete.retention.ms",
            _LONG,
            _DAY_MS,
            "How long tombstones are kept on a compacted topic.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "file.delete.delay.ms",
            _LONG,
            60_000,
            "A deleted segment's files are renamed *.deleted and removed this much later, so "
            "reads that already hold the segment finish first.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "flush.messages",
            _LONG,
            INT64_MAX,
            "fsync the log after this many messages (offsets). By default Brook, like Kafka, "
            "relies on replication and the OS for durability.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "flush.ms",
            _LONG,
            INT64_MAX,
            "fsync the log when it has gone this long without one (checked every "
            "log.flush.scheduler.interval.ms).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "follower.replication.throttled.replicas",
            ConfigType.LIST,
            (),
            "partition:node pairs (or * for all) whose replication is throttled on the "
            "follower node: that node fetches them within its follower.replication.throttled."
            "rate while it is not in the ISR.",
            _M,
            ThrottledReplicas(),
        ),
        ConfigKey(
            "index.interval.bytes",
            ConfigType.INT,
            4096,
            "Bytes of log between two index entries: a read scans at most about this much to "
            "find its batch.",
            _M,
            Range(0, INT32_MAX),
        ),
        ConfigKey(
            "leader.replication.throttled.replicas",
            ConfigType.LIST,
            (),
            "partition:node pairs (or * for all) whose replication is throttled on the "
            "leader node: it serves them to followers outside the ISR within its "
            "leader.replication.throttled.rate.",
            _M,
            ThrottledReplicas(),
        ),
        ConfigKey(
            "local.retention.bytes",
            _LONG,
            -2,
            "Local retention by size with tiered storage; -2 means retention.bytes.",
            _M,
            Range(-2),
        ),
        ConfigKey(
            "local.retention.ms",
            _LONG,
            -2,
            "Local retention by time with tiered storage; -2 means retention.ms.",
            _M,
            Range(-2),
        ),
        ConfigKey(
            "max.compaction.lag.ms",
            _LONG,
            INT64_MAX,
            "The longest a record stays uncompacted.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "max.message.bytes",
            ConfigType.INT,
            1024 * 1024 + 12,
            "Largest record batch (compressed, log framing included) an append accepts.",
            _M,
            Range(BATCH_OVERHEAD, INT32_MAX),
        ),
        ConfigKey(
            "message.downconversion.enable",
            ConfigType.BOOLEAN,
            True,
            _IGNORED + "Kafka: whether fetches of older versions get records converted to the "
            "message format they understand.",
            _L,
        ),
        ConfigKey(
            "message.format.version",
            ConfigType.STRING,
            "3.0-IV1",
            _IGNORED + "Kafka: the message format of appended records; every record is stored "
            "as RecordBatch v2 (the format of 0.11 and later).",
            _M,
            KafkaReleaseVersion(),
        ),
        ConfigKey(
            "message.timestamp.after.max.ms",
            _LONG,
            INT64_MAX,
            "With CreateTime, the furthest a batch's timestamp may be ahead of the leader's clock.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "message.timestamp.before.max.ms",
            _LONG,
            INT64_MAX,
            "With CreateTime, the furthest a batch's timestamp may be behind the leader's clock.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "message.timestamp.difference.max.ms",
            _LONG,
            INT64_MAX,
            "With CreateTime, reject a batch whose first or largest timestamp is further than "
            "this from the leader's clock (deprecated in Kafka for the two settings above).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "message.timestamp.type",
            ConfigType.STRING,
            CREATE_TIME,
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch "
            "with the leader's clock when it is appended.",
            _M,
            OneOf((CREATE_TIME, LOG_APPEND_TIME)),
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            ConfigType.DOUBLE,
            0.5,
            "The share of a compacted log that must be uncompacted before it is compacted.",
            _M,
            Range(0, 1),
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            _LONG,
            0,
            "The shortest a record stays uncompacted.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "min.insync.replicas",
            ConfigType.INT,
            1,
            "With acks=all, the fewest in-sync replicas a write needs to be accepted.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "preallocate",
            ConfigType.BOOLEAN,
            False,
            "Whether segment files are preallocated on disk when created.",
            _M,
        ),
        ConfigKey(
            "remote.storage.enable",
            ConfigType.BOOLEAN,
            False,
            "Whether the topic uses tiered storage.",
            _M,
        ),
        ConfigKey(
            "retention.bytes",
            _LONG,
            -1,
            "Delete the oldest segments while the partition is larger than this; -1 means no "
            "size limit.",
            _H,
            Range(-1),
        ),
        ConfigKey(
            "retention.ms",
            _LONG,
            7 * _DAY_MS,
            "Delete a segment once its newest record is older than this; -1 keeps data forever.",
            _H,
            Range(-1),
        ),
        ConfigKey(
            "segment.bytes",
            ConfigType.INT,
            1024 * 1024 * 1024,
            "Size of one segment file. Retention deletes whole segments, so smaller segments "
            "mean finer retention and more files.",
            _H,
            # Tighter than Kafka's 14: a Brook segment must hold at least one v2 batch. Positions
            # in a segment are int32 (index entries).
            Range(BATCH_OVERHEAD, INT32_MAX),
        ),
        ConfigKey(
            "segment.index.bytes",
            ConfigType.INT,
            10 * 1024 * 1024,
            "Size of the offset and time index of the active segment (preallocated, trimmed "
            "when the segment rolls). A full index rolls the segment.",
            _M,
            Range(SEGMENT_INDEX_BYTES_MIN, INT32_MAX),
        ),
        ConfigKey(
            "segment.jitter.ms",
            _LONG,
            0,
            "Up to this much is subtracted from segment.ms per segment, so partitions created "
            "together do not all roll at once.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "segment.ms",
            _LONG,
            7 * _DAY_MS,
            "Roll the active segment once its first batch is this old, even if it is not full, "
            "so that retention can delete old data.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            ConfigType.BOOLEAN,
            False,
            "Whether a replica outside the ISR may become leader when no ISR member is alive "
            "(restores availability, loses committed records).",
            _M,
        ),
    ]
)

BROKER_SYNONYMS: Final[Mapping[str, str]] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.format.version": "log.message.format.version",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
"""Topic config name -> the node-level setting whose value a topic without an override gets
(Kafka's LogConfig synonyms; only the highest-precedence one where Kafka has several, such as
log.retention.ms over log.retention.minutes and log.retention.hours)."""

_TOPIC_BY_BROKER_NAME: Final = {broker: topic for topic, broker in BROKER_SYNONYMS.items()}

LEADER_THROTTLED_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE: Final = "follower.replication.throttled.rate"
NODE_DYNAMIC_CONFIG_DEF: Final = ConfigDef(
    (
        ConfigKey(
            FOLLOWER_THROTTLED_RATE,
            _LONG,
            INT64_MAX,
            "Bytes per second a storage node may fetch, as a follower, of the replicas its "
            "topics list in follower.replication.throttled.replicas (Kafka's replication "
            "quota; set per node or as every node's default).",
            _M,
            Range(1),
        ),
        ConfigKey(
            LEADER_THROTTLED_RATE,
            _LONG,
            INT64_MAX,
            "Bytes per second a storage node may send, as a leader, of the replicas its "
            "topics list in leader.replication.throttled.replicas.",
            _M,
            Range(1),
        ),
    )
)
"""Dynamic node configs that are not defaults of a topic config."""

_TYPE_NAMES: Final = {
    ConfigType.INT: "int",
    ConfigType.LONG: "long",
    ConfigType.DOUBLE: "double",
    ConfigType.BOOLEAN: "boolean",
    ConfigType.STRING: "string",
    ConfigType.LIST: "list",
    ConfigType.PASSWORD: "password",
}


def describe_type(name: str) -> str:
    """Kafka's type name (int, long, list, ...) of a topic config."""
    return _TYPE_NAMES[TOPIC_CONFIG_DEF.key(name).type]


def _unknown(name: str, known: list[str], kind: str) -> str:
    suggestion = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {suggestion[0]}?)" if suggestion else ""
    return f"unknown {kind} {name}{hint}"


def validate_topic_configs(configs: Mapping[str, str], source: str = "the request") -> str | None:
    """None if every name is a topic config and every value valid for it, else the reason (one
    line naming the first unknown setting, or every invalid value, each with ``source``)."""
    known = [key.name for key in TOPIC_CONFIG_DEF.keys]
    for name in sorted(configs):
        if name not in TOPIC_CONFIG_DEF:
            return _unknown(name, known, "topic config")
    raw = {name: RawSetting(value, source) for name, value in configs.items()}
    try:
        TOPIC_CONFIG_DEF.parse(raw)
    except ConfigError as error:
        return "; ".join(error.problems)
    return None


def validate_broker_default_configs(configs: Mapping[str, str]) -> str | None:
    """The same for cluster-wide or per-node dynamic configs: defaults of topic configs named
    by their node-level names (log.retention.ms rather than retention.ms), and the node-only
    dynamic configs (NODE_DYNAMIC_CONFIG_DEF)."""
    problems: list[str] = []
    for name in sorted(configs):
        if name in NODE_DYNAMIC_CONFIG_DEF:
            try:
                NODE_DYNAMIC_CONFIG_DEF.parse({name: RawSetting(configs[name], "the request")})
            except ConfigError as error:
                problems.extend(error.problems)
            continue
        topic_name = _TOPIC_BY_BROKER_NAME.get(name)
        if topic_name is None:
            node_names = [key.name for key in NODE_DYNAMIC_CONFIG_DEF.keys]
            known = sorted([*_TOPIC_BY_BROKER_NAME, *node_names])
            return _unknown(name, known, "dynamic node config")
        problem = validate_topic_configs({topic_name: configs[name]})
        if problem is not None:
            problems.append(name + problem.removeprefix(topic_name))
    return "; ".join(problems) if problems else None


def topic_name_for_broker_config(name: str) -> str | None:
    """The topic config a node-level setting provides the default of, if any."""
    return _TOPIC_BY_BROKER_NAME.get(name)
