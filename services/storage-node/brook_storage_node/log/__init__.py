"""The storage node's partition logs: segments, indexes, recovery, retention (seed 001, 4.2, 5.4).

A library with no networking. ``LogManager`` opens and owns every partition of the node's data
directories; ``PartitionLog`` is one partition's log (append, read, truncate, retention, look
up by time); ``LogConfig`` its Kafka-named settings. Module names follow Kafka's log layer:
log_segment, offset_index, time_index, loader (recovery), log_validator (append rules),
leader_epoch, checkpoints, retention, log_manager.
"""

from brook_storage_node.log.errors import (
    InvalidTimestampError,
    InvariantViolationError,
    LogClosedError,
    LogError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    StaleLeaderEpochError,
    UnexpectedAppendOffsetError,
)
from brook_storage_node.log.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)
from brook_storage_node.log.log_config import TOPIC_LOG_CONFIG_DEF, LogConfig
from brook_storage_node.log.log_manager import LogManager, LogManagerConfig
from brook_storage_node.log.log_validator import AppendOrigin
from brook_storage_node.log.node_config import node_log_config, node_log_manager_config
from brook_storage_node.log.partition_log import FetchData, LogAppendInfo, PartitionLog
from brook_storage_node.log.time_index import TimestampOffset
from brook_storage_node.log.topic_partition import TopicPartition

__all__ = [
    "TOPIC_LOG_CONFIG_DEF",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AppendOrigin",
    "EpochEntry",
    "FetchData",
    "InvalidTimestampError",
    "InvariantViolationError",
    "LeaderEpochFileCache",
    "LogAppendInfo",
    "LogClosedError",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogManagerConfig",
    "LogStorageError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordListTooLargeError",
    "StaleLeaderEpochError",
    "TimestampOffset",
    "TopicPartition",
    "UnexpectedAppendOffsetError",
    "node_log_config",
    "node_log_manager_config",
]
