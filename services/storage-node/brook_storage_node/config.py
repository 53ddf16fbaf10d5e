"""The storage node's settings: the common ones plus Kafka's broker log and replication settings.

Names and defaults are Kafka's wherever Kafka has the concept (seed 000/002 configuration
tables, current Kafka for replica.lag.time.max.ms). Listener: GRPC, default
GRPC://127.0.0.1:9101 (StorageService, ReplicaService and health). Data: log.dirs, by default
./.brook/storage-<node.id> relative to the working directory, so several nodes started from one
directory never share a log dir. Joining the cluster (registration, heartbeats, the lease) takes
the shared settings of brook.membership, unless static.topics makes the node stand alone.

Time settings with several units follow Kafka's hierarchy; read them through `log_retention_ms`,
`log_roll_ms` and `log_roll_jitter_ms` (brook_storage_node.log.node_config), never the raw keys.
"""

from __future__ import annotations

import sys
from typing import Final

from brook.config import (
    CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
    INT32_MAX,
    INT64_MAX,
    REQUEST_TIMEOUT_MS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    Config,
    ConfigKey,
    ConfigType,
    ConfigValue,
    Importance,
    NonEmptyList,
    OneOf,
    Range,
    check_not_greater,
    service_config_def,
    service_data_dir_default,
)
from brook.membership.config import MEMBERSHIP_CHECKS, MEMBERSHIP_KEYS
from brook.record import BATCH_OVERHEAD
from brook.security.grpc_tls import INTER_BROKER_PROTOCOL
from brook.security.quota_engine import QUOTA_CONFIG_KEYS
from brook.security.tls import TLS_KEYS
from brook.topic_config import (
    CLEANUP_COMPACT,
    CLEANUP_DELETE,
    COMPRESSION_TYPES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    SEGMENT_INDEX_BYTES_MIN,
)
from brook_storage_node.log.log_cleaner_manager import DEDUPE_BYTES_PER_ENTRY
from brook_storage_node.log.node_config import node_log_cleaner_config
from brook_storage_node.metadata_source import parse_static_topics

__all__ = ["CONFIG_DEF"]

# The periodic tasks sleep for these intervals; asyncio's timers overflow near Long.MAX_VALUE.
INTERVAL_MS_MAX: Final = INT32_MAX


class StaticTopics:
    """Validates static.topics: each entry topic:partitions[:config=value...]."""

    def __call__(self, value: ConfigValue) -> str | None:
        if not isinstance(value, tuple):
            return "is not a list"
        try:
            parse_static_topics(value)
        except ValueError as exc:
            return str(exc)
        return None

    def describe(self) -> str:
        return "topic:partitions[:config=value...], ..."


def _check_cleaner(config: Config) -> str | None:
    """The log.cleaner.* settings together (each thread's share of the dedupe buffer)."""
    try:
        node_log_cleaner_config(config)
    except ValueError as exc:
        return str(exc)
    return None


# Java's Double.MAX_VALUE: Kafka's "unlimited" log.cleaner.io.max.bytes.per.second.
DOUBLE_MAX: Final = sys.float_info.max

_H = Importance.HIGH
_M = Importance.MEDIUM
_L = Importance.LOW
_INT = ConfigType.INT
_LONG = ConfigType.LONG


CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC",),
    default_listeners="GRPC://127.0.0.1:9101,METRICS://127.0.0.1:10101",
    keys=(
        ConfigKey(
            "log.dirs",
            ConfigType.LIST,
            service_data_dir_default("storage"),
            "The directories holding this node's partition replicas, comma-separated; created "
            "if missing.",
            _H,
            NonEmptyList(),
        ),
        CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
        ConfigKey(
            "broker.rack",
            ConfigType.STRING,
            None,
            "The rack (or zone) of this node, used to spread a partition's replicas across "
            "racks. Null: not rack-aware.",
            _M,
        ),
        ConfigKey(
            "log.segment.bytes",
            _INT,
            1073741824,
            "The largest size of one segment file; a larger append rolls a new segment.",
            _H,
            Range(BATCH_OVERHEAD),
        ),
        ConfigKey(
            "log.roll.ms",
            _LONG,
            None,
            "The longest time before a new segment is rolled. Null: log.roll.hours decides.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "log.roll.hours",
            _INT,
            168,
            "The longest time before a new segment is rolled, in hours; used when log.roll.ms "
            "is not set.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "log.roll.jitter.ms",
            _LONG,
            None,
            "The most a segment's roll time is brought forward at random, so that partitions "
            "do not all roll at once. Null: log.roll.jitter.hours decides.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "log.roll.jitter.hours",
            _INT,
            0,
            "As log.roll.jitter.ms, in hours; used when log.roll.jitter.ms is not set.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "log.retention.ms",
            _LONG,
            None,
            "How long a segment is kept before deletion; -1: no time limit. Null: "
            "log.retention.minutes, then log.retention.hours decide.",
            _H,
            Range(-1),
        ),
        ConfigKey(
            "log.retention.minutes",
            _INT,
            None,
            "As log.retention.ms, in minutes; used when log.retention.ms is not set.",
            _H,
            Range(-1),
        ),
        ConfigKey(
            "log.retention.hours",
            _INT,
            168,
            "As log.retention.ms, in hours; used when neither log.retention.ms nor "
            "log.retention.minutes is set.",
            _H,
            Range(-1),
        ),
        ConfigKey(
            "log.retention.bytes",
            _LONG,
            -1,
            "The most bytes a partition keeps; whole segments are deleted beyond it. -1: no "
            "size limit.",
            _H,
            Range(-1),
        ),
        ConfigKey(
            "log.retention.check.interval.ms",
            _LONG,
            300000,
            "How often segments are checked against the retention limits.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "producer.id.expiration.ms",
            _INT,
            86400000,
            "How long a partition keeps an idempotent producer's state (epoch, last sequences) "
            "after its last batch; a producer idle longer must restart its sequences.",
            _L,
            Range(1),
        ),
        ConfigKey(
            "producer.id.expiration.check.interval.ms",
            _INT,
            600000,
            "How often idle producers are looked for (producer.id.expiration.ms).",
            _L,
            Range(1, INTERVAL_MS_MAX),
        ),
        ConfigKey(
            "transaction.partition.verification.enable",
            ConfigType.BOOLEAN,
            True,
            "Whether a partition leader asks the transaction coordinator (AddPartitionsToTxn "
            "verify_only, KIP-890 part 1) before a transactional batch opens a transaction of "
            "its producer, and refuses it (INVALID_TXN_STATE) unless the partition is in the "
            "producer's ongoing transaction at that epoch, or a marker came in between: a "
            "delayed batch of an aborted transaction cannot start a new one. A transactional "
            "batch then needs the Produce request's transactional_id.",
            _L,
        ),
        ConfigKey(
            "log.segment.delete.delay.ms",
            _LONG,
            60000,
            "How long a deleted segment's files are kept (renamed *.deleted) before removal, so "
            "that reads already using them finish. Default of the topic setting "
            "file.delete.delay.ms.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "log.index.size.max.bytes",
            _INT,
            10485760,
            "The largest size of a segment's offset (and time) index; a full index rolls the "
            "segment. At least two time index entries (24 bytes).",
            _M,
            Range(SEGMENT_INDEX_BYTES_MIN),
        ),
        ConfigKey(
            "log.index.interval.bytes",
            _INT,
            4096,
            "How many log bytes lie between two offset index entries: smaller means denser "
            "indexes and shorter scans.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "log.flush.interval.messages",
            _LONG,
            INT64_MAX,
            "How many records may be appended to a partition before it is fsynced. The default "
            "(never) relies on replication and the OS, as Kafka does.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "log.flush.interval.ms",
            _LONG,
            None,
            "How long appended records may stay unsynced before an fsync. Null: never by time.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "log.flush.scheduler.interval.ms",
            _LONG,
            3000,
            "How often logs are checked against flush.ms, and deleted segment files whose "
            "log.segment.delete.delay.ms has passed are removed. Kafka 0.8's default: later "
            "Kafkas default to Long.MAX_VALUE, which silently disables flush.ms.",
            _H,
            Range(1, INTERVAL_MS_MAX),
        ),
        ConfigKey(
            "log.flush.offset.checkpoint.interval.ms",
            _INT,
            60000,
            "How often the recovery points (how far each log is known to be on disk) are "
            "written; recovery after a crash starts from them.",
            _H,
            Range(1, INTERVAL_MS_MAX),
        ),
        ConfigKey(
            "log.flush.start.offset.checkpoint.interval.ms",
            _INT,
            60000,
            "How often the log start offsets (moved by DeleteRecords and retention) are written.",
            _H,
            Range(1, INTERVAL_MS_MAX),
        ),
        ConfigKey(
            "message.max.bytes",
            _INT,
            1048588,
            "The largest record batch this node accepts (after compression); larger ones are "
            "rejected with MESSAGE_TOO_LARGE.",
            _H,
            Range(BATCH_OVERHEAD),
        ),
        ConfigKey(
            "log.message.timestamp.type",
            ConfigType.STRING,
            CREATE_TIME,
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with "
            "the leader's clock. Default of the topic setting message.timestamp.type.",
            _M,
            OneOf((CREATE_TIME, LOG_APPEND_TIME)),
        ),
        ConfigKey(
            "log.message.timestamp.difference.max.ms",
            _LONG,
            INT64_MAX,
            "With CreateTime, a batch whose timestamps are further than this from the leader's "
            "clock is rejected with INVALID_TIMESTAMP. Default of the topic setting "
            "message.timestamp.difference.max.ms.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "log.cleanup.policy",
            ConfigType.LIST,
            (CLEANUP_DELETE,),
            "delete: retention.ms and retention.bytes delete old segments; compact: keep the "
            "latest record per key. Default of the topic setting cleanup.policy.",
            _M,
            OneOf((CLEANUP_DELETE, CLEANUP_COMPACT)),
        ),
        ConfigKey(
            "log.cleaner.enable",
            ConfigType.BOOLEAN,
            True,
            "Whether the log cleaner runs: it compacts the logs of cleanup.policy=compact "
            "topics (keeping the last record of every key). Without it those logs grow "
            "without bound.",
            _M,
        ),
        ConfigKey(
            "log.cleaner.threads",
            _INT,
            1,
            "Threads cleaning logs, each one log at a time.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "log.cleaner.dedupe.buffer.size",
            _LONG,
            134217728,
            "Memory for the cleaner's key -> offset maps, shared equally by the "
            "log.cleaner.threads (24 bytes per key); a dirty section with more keys than a "
            "thread's map holds is cleaned in several passes.",
            _M,
            Range(DEDUPE_BYTES_PER_ENTRY),
        ),
        ConfigKey(
            "log.cleaner.io.buffer.size",
            _INT,
            524288,
            "Bytes the cleaner reads per I/O.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "log.cleaner.io.buffer.load.factor",
            ConfigType.DOUBLE,
            0.9,
            "The share of a key -> offset map's slots the cleaner fills before it ends a pass.",
            _M,
            Range(0.01, 1),
        ),
        ConfigKey(
            "log.cleaner.io.max.bytes.per.second",
            ConfigType.DOUBLE,
            DOUBLE_MAX,
            "The most bytes per second all cleaner threads together read and write. The "
            "default (Double.MAX_VALUE, as Kafka's) is unlimited.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "log.cleaner.backoff.ms",
            _LONG,
            15000,
            "How long a cleaner thread sleeps when no log needs cleaning.",
            _M,
            Range(1, INTERVAL_MS_MAX),
        ),
        ConfigKey(
            "log.cleaner.delete.retention.ms",
            _LONG,
            86400000,
            "How long tombstones (and transaction markers) stay in a compacted log after its "
            "cleaner reached them. Default of the topic setting delete.retention.ms.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "log.cleaner.min.cleanable.ratio",
            ConfigType.DOUBLE,
            0.5,
            "The dirty share (bytes not yet compacted / compactable bytes) a log reaches "
            "before the cleaner takes it. Default of the topic setting "
            "min.cleanable.dirty.ratio.",
            _M,
            Range(0, 1),
        ),
        ConfigKey(
            "log.cleaner.min.compaction.lag.ms",
            _LONG,
            0,
            "How long a record stays uncompacted at least: segments with newer records are "
            "not cleaned. Default of the topic setting min.compaction.lag.ms.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "log.cleaner.max.compaction.lag.ms",
            _LONG,
            INT64_MAX,
            "How long a record stays uncompacted at most: a log whose oldest dirty record is "
            "older is cleaned whatever its dirty ratio. Default of the topic setting "
            "max.compaction.lag.ms.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "compression.type",
            ConfigType.STRING,
            "producer",
            "The codec of the batches this node builds from plain records (ProduceRecords "
            "without a compression of its own): producer or uncompressed mean none. Unlike "
            "Kafka, batches produced as RecordBatch bytes are never recompressed: they are "
            "stored as the producer built them. Default of the topic setting compression.type.",
            _M,
            OneOf(COMPRESSION_TYPES),
        ),
        ConfigKey(
            "num.recovery.threads.per.data.dir",
            _INT,
            1,
            "Threads per log dir that validate segments after an unclean shutdown.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "background.threads",
            _INT,
            10,
            "Threads for the log's background work: retention, flushes and checkpoints.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "replica.fetch.max.bytes",
            _INT,
            1048576,
            "The most bytes a follower asks for per partition in one fetch (a larger first "
            "batch is still returned, so replication always makes progress).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "replica.fetch.response.max.bytes",
            _INT,
            10485760,
            "The most bytes of one fetch response across all partitions on the replication stream.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "replica.fetch.wait.max.ms",
            _INT,
            500,
            "How long the leader may hold a follower's fetch waiting for "
            "replica.fetch.min.bytes. Must not exceed replica.lag.time.max.ms.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "replica.fetch.min.bytes",
            _INT,
            1,
            "The fewest bytes a follower's fetch waits for (up to replica.fetch.wait.max.ms).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "replica.fetch.backoff.ms",
            _INT,
            1000,
            "How long a follower waits before fetching again after a fetch error.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "replica.lag.time.max.ms",
            _LONG,
            30000,
            "A follower that has not caught up to the leader's end of log for this long is "
            "removed from the ISR.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "replica.high.watermark.checkpoint.interval.ms",
            _LONG,
            5000,
            "How often the high watermarks are written to disk.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "min.insync.replicas",
            _INT,
            1,
            "With acks=all, the fewest ISR members that must have a batch before it is "
            "acknowledged; fewer ISR members make the write fail with NOT_ENOUGH_REPLICAS.",
            _H,
            Range(1),
        ),
        UNCLEAN_LEADER_ELECTION_ENABLE,
        ConfigKey(
            "fetch.max.bytes",
            _INT,
            57671680,
            "The most bytes returned for one consumer fetch across all partitions.",
            _M,
            Range(1024),
        ),
        *MEMBERSHIP_KEYS,
        *TLS_KEYS,
        INTER_BROKER_PROTOCOL,
        *QUOTA_CONFIG_KEYS,
        REQUEST_TIMEOUT_MS,
        ConfigKey(
            "queued.max.request.bytes",
            _LONG,
            209715200,
            "The most bytes of produce requests this node processes at once; a produce "
            "request that would exceed it is rejected with gRPC RESOURCE_EXHAUSTED (retriable) "
            "instead of growing memory. Kafka's default, -1, means unbounded; Brook bounds it.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "static.topics",
            ConfigType.LIST,
            (),
            "For development and tests without controllers. Empty (the default): the node "
            "joins the cluster through the controllers (controller.quorum.bootstrap.servers) "
            "and serves what their metadata gives it. Not empty: the node contacts no "
            "controller and serves exactly these topics, as topic:partitions[:config=value...] "
            "entries, comma-separated (e.g. orders:6,events:3:retention.ms=3600000), leading "
            "every listed partition (leader epoch 0, replicas and ISR just itself). Topic "
            "configs are the topic-level names (retention.ms, segment.bytes, "
            "max.message.bytes, compression.type, min.insync.replicas, ...); their values "
            "cannot contain commas. Removing a topic from the list stops serving it but keeps "
            "its data on disk.",
            _H,
            StaticTopics(),
        ),
    ),
    checks=(
        check_not_greater(
            "socket.request.max.bytes",
            "queued.max.request.bytes",
            "a produce request of the largest size could never be admitted",
        ),
        check_not_greater(
            "replica.fetch.wait.max.ms",
            "replica.lag.time.max.ms",
            "a follower whose fetch may wait longer than the lag limit drops out of the ISR "
            "while idle",
        ),
        _check_cleaner,
        check_not_greater(
            "message.max.bytes",
            "socket.request.max.bytes",
            "a batch of message.max.bytes must fit in one request",
        ),
        *MEMBERSHIP_CHECKS,
    ),
)
