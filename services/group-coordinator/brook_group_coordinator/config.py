"""The group coordinator's settings: the common ones plus Kafka's group.* and offsets.* settings,
and the transaction coordinator's transaction.* and transactional.id.* ones.

Listener: GRPC (GroupCoordinatorService, TransactionCoordinatorService, health), default
GRPC://127.0.0.1:9401, the local launcher's well-known port for coordinator 1. State:
group.coordinator.state.dir (the local view that makes restarts fast; the durable copy is
__consumer_offsets), by default
./.brook/group-coordinator-<node.id>.

The partition count and replication factor of __consumer_offsets and __transaction_state are
the controller's settings (offsets.topic.*, transaction.state.log.*): the controller creates
the topics, and coordinators read their partition counts from metadata, so the two can never
disagree.
"""

from __future__ import annotations

from typing import Final

from brook.config import (
    CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
    INT32_MAX,
    REQUEST_TIMEOUT_MS,
    ConfigKey,
    ConfigType,
    Importance,
    NonEmptyString,
    Range,
    check_not_greater,
    service_config_def,
    service_data_dir_default,
)
from brook.membership.config import MEMBERSHIP_CHECKS, MEMBERSHIP_KEYS
from brook.security.grpc_tls import INTER_BROKER_PROTOCOL
from brook.security.tls import TLS_KEYS

__all__ = ["CONFIG_DEF"]

_H = Importance.HIGH
_M = Importance.MEDIUM
_L = Importance.LOW
_INT = ConfigType.INT


CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC",),
    default_listeners="GRPC://127.0.0.1:9401,METRICS://127.0.0.1:10401",
    keys=(
        CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
        ConfigKey(
            "group.coordinator.state.dir",
            ConfigType.STRING,
            service_data_dir_default("group-coordinator"),
            "The directory of this coordinator's local view of group state; created if missing. "
            "Losing it costs only a longer replay of __consumer_offsets.",
            _H,
            NonEmptyString(),
        ),
        ConfigKey(
            "group.min.session.timeout.ms",
            _INT,
            6000,
            "The shortest session timeout a member may ask for. Shorter sessions detect failed "
            "consumers sooner but cost more heartbeats.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "group.max.session.timeout.ms",
            _INT,
            1800000,
            "The longest session timeout a member may ask for. Longer sessions give consumers "
            "more time between polls but detect failures later.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "group.initial.rebalance.delay.ms",
            _INT,
            3000,
            "How long the first rebalance of an empty group waits for more members to join, "
            "so that a group starting up does not rebalance once per member.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "group.max.size",
            _INT,
            INT32_MAX,
            "The most members one group may have; more are refused with GROUP_MAX_SIZE_REACHED.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "offsets.retention.minutes",
            _INT,
            10080,
            "How long the committed offsets of a group with no members are kept.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "offsets.retention.check.interval.ms",
            ConfigType.LONG,
            600000,
            "How often expired offsets are looked for.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "offset.metadata.max.bytes",
            _INT,
            4096,
            "The largest metadata string a client may commit with an offset; larger commits "
            "fail with OFFSET_METADATA_TOO_LARGE.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "offsets.commit.timeout.ms",
            _INT,
            5000,
            "How long an offset commit waits for every replica of its __consumer_offsets "
            "partition before it fails with REQUEST_TIMED_OUT.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "offsets.load.buffer.size",
            _INT,
            5242880,
            "How many bytes of __consumer_offsets are read at a time while loading a "
            "partition's groups.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "transaction.max.timeout.ms",
            _INT,
            900000,
            "The longest transaction timeout a producer may ask for; InitProducerId with a "
            "longer one fails with INVALID_TRANSACTION_TIMEOUT.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "transactional.id.expiration.ms",
            _INT,
            604800000,
            "How long a transactional id with no transaction in progress is kept without any "
            "change of its state before it is removed.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            _INT,
            10000,
            "How often ongoing transactions past their timeout are looked for and aborted.",
            _L,
            Range(1),
        ),
        ConfigKey(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            _INT,
            3600000,
            "How often expired transactional ids (transactional.id.expiration.ms) are removed.",
            _L,
            Range(1),
        ),
        *MEMBERSHIP_KEYS,
        *TLS_KEYS,
        INTER_BROKER_PROTOCOL,
        REQUEST_TIMEOUT_MS,
    ),
    checks=(
        check_not_greater("group.min.session.timeout.ms", "group.max.session.timeout.ms"),
        *MEMBERSHIP_CHECKS,
    ),
)
