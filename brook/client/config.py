"""Producer and consumer settings: Kafka's client configuration names, Kafka's defaults.

A client takes its settings as a dict, the way confluent-kafka and the Java client do, as
keyword arguments with ``_`` for ``.``, or both (naming one setting in both is an error)::

    Producer({"bootstrap.servers": "127.0.0.1:9101", "linger.ms": 10})
    Producer(bootstrap_servers="127.0.0.1:9101", linger_ms=10, compression_type="lz4")

Every client also takes confluent-kafka's security settings (``security.protocol``, ``ssl.*``,
``sasl.*``: brook.client.security); ``channel_security`` makes them into the
``ChannelSecurity`` an ``Admin`` client takes.

Values may be written as Kafka writes them (strings) or as Python values (int, bool, a list of
hosts). Every value is parsed and validated by ``brook.config`` before anything starts; an
unknown name is an error rather than Kafka's warning, because a mistyped client setting
silently falling back to its default is a bug that is hard to find.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from brook.client.security import SECURITY_KEYS, check_security, security_from_config
from brook.config import (
    INT32_MAX,
    Config,
    ConfigCheck,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    HostPortList,
    Importance,
    NonEmptyString,
    OneOf,
    Range,
    RawSetting,
    check_not_greater,
)
from brook.record import Compression
from brook.rpc.backoff import RetryBackoff
from brook.rpc.channels import ChannelSecurity
from brook.v1 import common_pb2, storage_pb2

__all__ = [
    "CONSUMER_CONFIG_DEF",
    "PRODUCER_CONFIG_DEF",
    "ClientCommon",
    "ConsumerConfig",
    "OffsetResetStrategy",
    "ProducerConfig",
    "channel_security",
    "consumer_config",
    "producer_config",
]

ClientSettings = Mapping[str, object]

_H = Importance.HIGH
_M = Importance.MEDIUM
_L = Importance.LOW
_INT = ConfigType.INT
_LONG = ConfigType.LONG

_COMPRESSION_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
_COMPRESSION_BY_NAME: Final = {name: Compression(i) for i, name in enumerate(_COMPRESSION_NAMES)}
_ACKS: Final = {
    "0": storage_pb2.ACKS_NONE,
    "1": storage_pb2.ACKS_LEADER,
    "all": storage_pb2.ACKS_ALL,
    "-1": storage_pb2.ACKS_ALL,
}


def _common_keys() -> tuple[ConfigKey, ...]:
    return (
        ConfigKey(
            "bootstrap.servers",
            ConfigType.LIST,
            ("127.0.0.1:9101",),
            "host:port of one or more storage nodes' GRPC listeners, comma-separated. Any one "
            "reachable node is enough: it tells the client about every other node and which "
            "node leads each partition. The default is the first node of `brook cluster up`.",
            _H,
            HostPortList(),
        ),
        ConfigKey(
            "client.id",
            ConfigType.STRING,
            "",
            "A name for this client, sent in the gRPC user agent and with each produce and "
            "fetch (the storage nodes apply its client quotas), and used in thread names and "
            "log lines.",
            _M,
        ),
        ConfigKey(
            "request.timeout.ms",
            _INT,
            30000,
            "The longest the client waits for the answer to one request before it treats the "
            "request as failed (and retries it when retries allow).",
            _M,
            Range(1),
        ),
        ConfigKey(
            "retry.backoff.ms",
            _LONG,
            100,
            "The first wait before retrying a failed request or metadata refresh; each further "
            "attempt doubles it, with 20% jitter, up to retry.backoff.max.ms.",
            _L,
            Range(0),
        ),
        ConfigKey(
            "retry.backoff.max.ms",
            _LONG,
            1000,
            "The longest wait between retries of the same request. When it is less than "
            "retry.backoff.ms it is used as a constant back-off, as in Kafka.",
            _L,
            Range(0),
        ),
        ConfigKey(
            "reconnect.backoff.ms",
            _LONG,
            50,
            "The first wait before reconnecting to a node the client could not reach.",
            _L,
            Range(0),
        ),
        ConfigKey(
            "reconnect.backoff.max.ms",
            _LONG,
            1000,
            "The longest wait between attempts to reconnect to a node.",
            _L,
            Range(0),
        ),
        ConfigKey(
            "metadata.max.age.ms",
            _LONG,
            300000,
            "How long cached metadata is trusted before it is refreshed, even without an "
            "error suggesting that leadership changed.",
            _L,
            Range(0),
        ),
        *SECURITY_KEYS,
    )


def _check_delivery_timeout(config: Config) -> str | None:
    # Kafka's rule: a record must be allowed to linger and then wait for one full request.
    needed = config.get_int("linger.ms") + config.get_int("request.timeout.ms")
    if config.get_int("delivery.timeout.ms") >= needed:
        return None
    return (
        f"delivery.timeout.ms={config.get_int('delivery.timeout.ms')} must be at least "
        f"linger.ms + request.timeout.ms = {needed}"
    )


# Kafka's bounds for an idempotent producer: the node remembers the last five batches of
# each producer per partition, so more unacknowledged batches could not be deduplicated.
IDEMPOTENCE_IN_FLIGHT_MAX: Final = 5


def _idempotence_conflicts(config: Config) -> list[str]:
    """The settings that rule idempotence out, as Kafka's producer names them."""
    conflicts = []
    if config.get_string("acks") not in ("all", "-1"):
        conflicts.append(f"acks={config.get_string('acks')} (it needs acks=all)")
    if config.get_int("retries") == 0:
        conflicts.append("retries=0 (it needs retries > 0)")
    in_flight = config.get_int("max.in.flight.requests.per.connection")
    if in_flight > IDEMPOTENCE_IN_FLIGHT_MAX:
        conflicts.append(
            f"max.in.flight.requests.per.connection={in_flight} (it needs at most "
            f"{IDEMPOTENCE_IN_FLIGHT_MAX})"
        )
    return conflicts


def _check_idempotence(config: Config) -> str | None:
    # Kafka 3.x: only an explicit enable.idempotence=true makes a conflict an error; the
    # default gives way to explicitly chosen acks/retries/in-flight settings. A
    # transactional.id needs idempotence, so with one every conflict is an error (as Kafka).
    if config.get_optional_string("transactional.id") is not None:
        return _check_transactional(config)
    if config.source("enable.idempotence").startswith("default") or not config.get_bool(
        "enable.idempotence"
    ):
        return None
    conflicts = _idempotence_conflicts(config)
    if not conflicts:
        return None
    return (
        f"enable.idempotence=true conflicts with {', '.join(conflicts)}; set "
        "enable.idempotence=false to use these settings"
    )


def _check_two_phase(config: Config) -> str | None:
    if config.get_bool("transaction.two.phase.commit.enable") and (
        config.get_optional_string("transactional.id") is None
    ):
        return "transaction.two.phase.commit.enable=true needs a transactional.id"
    return None


def _check_transactional(config: Config) -> str | None:
    transactional_id = config.get_optional_string("transactional.id")
    if not config.get_bool("enable.idempotence"):
        return (
            f"transactional.id={transactional_id!r} needs enable.idempotence=true (a "
            "transaction's batches are sequenced under its producer id)"
        )
    conflicts = _idempotence_conflicts(config)
    if not conflicts:
        return None
    return (
        f"transactional.id={transactional_id!r} needs idempotence, which conflicts with "
        f"{', '.join(conflicts)}"
    )


PRODUCER_CONFIG_DEF: Final = ConfigDef(
    (
        *_common_keys(),
        ConfigKey(
            "enable.idempotence",
            ConfigType.BOOLEAN,
            True,
            "Write each record exactly once per partition despite retries: the producer gets "
            "a producer id and numbers its batches, and the leader drops a batch it already "
            "has. Needs acks=all, retries > 0 and max.in.flight.requests.per.connection <= 5; "
            "when it is not set explicitly and one of those is set otherwise, idempotence is "
            "off (as in Kafka 3.x).",
            _H,
        ),
        ConfigKey(
            "acks",
            ConfigType.STRING,
            "all",
            "How many replicas must have a record before it is acknowledged: 0 (none; offsets "
            "are reported as -1), 1 (the leader), all or -1 (every in-sync replica).",
            _H,
            OneOf(tuple(_ACKS)),
        ),
        ConfigKey(
            "linger.ms",
            _LONG,
            5,
            "How long a partition's batch waits for more records before it is sent when it is "
            "not yet full (Kafka's default since 4.0, KIP-1030).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "batch.size",
            _INT,
            16384,
            "The size a partition's batch is filled to before it is sent (uncompressed bytes, "
            "header included). A record larger than this is sent in a batch of its own; 0 "
            "sends every record alone.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "buffer.memory",
            _LONG,
            33554432,
            "The bytes of records the producer holds while they wait to be sent or "
            "acknowledged. When it is used up, send blocks (up to max.block.ms) until "
            "acknowledged batches free room.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "max.block.ms",
            _LONG,
            60000,
            "The longest send blocks: waiting for buffer memory, or for the metadata of a "
            "topic it has not seen. When the metadata does not name the topic by then, the "
            "record's future fails with UNKNOWN_TOPIC_OR_PARTITION.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "compression.type",
            ConfigType.STRING,
            "none",
            "The codec of the record batches the producer builds.",
            _H,
            OneOf(_COMPRESSION_NAMES),
        ),
        ConfigKey(
            "retries",
            _INT,
            INT32_MAX,
            "How many times a batch that failed with a retriable error is sent again; "
            "delivery.timeout.ms bounds the whole attempt in any case.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "delivery.timeout.ms",
            _INT,
            120000,
            "The longest a record may take from send to acknowledgement, retries included; "
            "after it the record's future fails. Must be at least linger.ms + "
            "request.timeout.ms.",
            _M,
            Range(0),
        ),
        ConfigKey(
            "max.in.flight.requests.per.connection",
            _INT,
            5,
            "The most produce requests waiting for an answer from one node. Without "
            "idempotence a partition never has more than one request in flight, so retries "
            "cannot reorder its records; with it, each request carries one batch per partition "
            "and sequence numbers keep up to this many (at most 5) in order.",
            _L,
            Range(1),
        ),
        ConfigKey(
            "max.request.size",
            _INT,
            1048576,
            "The largest produce request, and so the largest record, the producer sends. "
            "send raises RecordTooLargeError for a larger record.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "transactional.id",
            ConfigType.STRING,
            None,
            "Makes the producer transactional: init_transactions() registers this id with its "
            "transaction coordinator (fencing any earlier producer with the same id), and "
            "records are then sent inside begin_transaction() ... commit_transaction() or "
            "abort_transaction(). Needs idempotence (acks=all, retries > 0, "
            "max.in.flight.requests.per.connection <= 5).",
            _L,
            NonEmptyString(),
        ),
        ConfigKey(
            "transaction.timeout.ms",
            _INT,
            60000,
            "The longest a transaction may stay open before its coordinator aborts it (and "
            "fences this producer's epoch); bounded by the coordinators' "
            "transaction.max.timeout.ms.",
            _L,
            Range(1),
        ),
        ConfigKey(
            "transaction.two.phase.commit.enable",
            ConfigType.BOOLEAN,
            False,
            "Two-phase commit (KIP-939): init_transactions() marks the transactional id's "
            "transactions as two-phase, which the coordinator never aborts for "
            "transaction.timeout.ms; prepare_transaction() then leaves the transaction open for "
            "another process to commit or abort (Admin.complete_transaction). Needs "
            "transactional.id.",
            _L,
        ),
        ConfigKey(
            "partitioner.ignore.keys",
            ConfigType.BOOLEAN,
            False,
            "Place keyed records as if they had no key (sticky partitioning) instead of by "
            "murmur2 of the key.",
            _M,
        ),
    ),
    (_check_delivery_timeout, _check_idempotence, _check_two_phase, check_security),
)


def _check_assignors_listed(config: Config) -> str | None:
    if config.get_list("partition.assignment.strategy"):
        return None
    return "partition.assignment.strategy must name at least one assignor"


_CONSUMER_CHECKS: tuple[ConfigCheck, ...] = (
    _check_assignors_listed,
    check_security,
    check_not_greater(
        "fetch.max.wait.ms",
        "request.timeout.ms",
        "a fetch long-poll must end before the request times out",
    ),
    check_not_greater(
        "heartbeat.interval.ms",
        "session.timeout.ms",
        "a member must heartbeat more often than its session expires",
    ),
)
# The assignors the group leader can run (brook.client.group.assignors); eager protocol only.
ASSIGNMENT_STRATEGIES: Final = ("range", "roundrobin", "sticky", "cooperative-sticky")

CONSUMER_CONFIG_DEF: Final = ConfigDef(
    (
        *_common_keys(),
        ConfigKey(
            "fetch.min.bytes",
            _INT,
            1,
            "The least data a fetch waits for (up to fetch.max.wait.ms) before the node answers.",
            _H,
            Range(0),
        ),
        ConfigKey(
            "fetch.max.wait.ms",
            _INT,
            500,
            "The longest a node holds a fetch when less than fetch.min.bytes is available.",
            _L,
            Range(0),
        ),
        ConfigKey(
            "fetch.max.bytes",
            _INT,
            52428800,
            "The most record bytes one fetch returns from one node (a first batch larger than "
            "this is still returned, so the consumer always makes progress).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "max.partition.fetch.bytes",
            _INT,
            1048576,
            "The most record bytes one fetch returns for one partition (with the same "
            "exception for a first batch).",
            _H,
            Range(0),
        ),
        ConfigKey(
            "max.poll.records",
            _INT,
            500,
            "The most records one poll returns.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "auto.offset.reset",
            ConfigType.STRING,
            "latest",
            "Where to start when a partition has no position or its position is out of range: "
            "earliest, latest, or none (raise instead).",
            _M,
            OneOf(("latest", "earliest", "none")),
        ),
        ConfigKey(
            "isolation.level",
            ConfigType.STRING,
            "read_uncommitted",
            "read_committed: poll returns only records of committed transactions (and "
            "non-transactional ones), up to the last stable offset, and a group's committed "
            "offsets are read only once no transactional commit of them is pending; "
            "read_uncommitted returns every record up to the high watermark.",
            _M,
            OneOf(("read_uncommitted", "read_committed")),
        ),
        ConfigKey(
            "check.crcs",
            ConfigType.BOOLEAN,
            True,
            "Verify the CRC-32C of every fetched batch before handing out its records.",
            _L,
        ),
        ConfigKey(
            "default.api.timeout.ms",
            _INT,
            60000,
            "The bound of the consumer calls that take no timeout (position, "
            "offsets_for_times, commit, committed, close).",
            _M,
            Range(0),
        ),
        ConfigKey(
            "group.id",
            ConfigType.STRING,
            None,
            "The consumer group this consumer belongs to. Needed by subscribe (the group's "
            "coordinator shares the subscribed topics' partitions among its members) and by "
            "commit and committed (offsets are stored per group).",
            _H,
            NonEmptyString(),
        ),
        ConfigKey(
            "group.instance.id",
            ConfigType.STRING,
            None,
            "Makes the consumer a static member: a restart within session.timeout.ms takes "
            "its old place in the group without a rebalance, and close does not leave the "
            "group. Must be unique within the group.",
            _M,
            NonEmptyString(),
        ),
        ConfigKey(
            "session.timeout.ms",
            _INT,
            45000,
            "A member whose heartbeats stop for this long is removed from the group and its "
            "partitions are reassigned. Must lie within the coordinator's "
            "group.min.session.timeout.ms and group.max.session.timeout.ms.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "heartbeat.interval.ms",
            _INT,
            3000,
            "How often the consumer heartbeats to its group coordinator (in the background); "
            "a rebalance is noticed within one interval. Keep it at most a third of "
            "session.timeout.ms.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "max.poll.interval.ms",
            _INT,
            300000,
            "The longest the application may go between two polls. A consumer that does not "
            "poll for this long leaves the group (its partitions go to the others); it is "
            "also the rebalance timeout the coordinator waits for members to rejoin.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "enable.auto.commit",
            ConfigType.BOOLEAN,
            True,
            "Commit the positions of the records poll returned every auto.commit.interval.ms "
            "(from poll), before partitions are revoked and on close.",
            _M,
        ),
        ConfigKey(
            "auto.commit.interval.ms",
            _INT,
            5000,
            "How often positions are committed when enable.auto.commit is true.",
            _L,
            Range(0),
        ),
        ConfigKey(
            "partition.assignment.strategy",
            ConfigType.LIST,
            ("range",),
            "The assignors this consumer supports, most preferred first; the group uses the "
            "first one every member supports. range and roundrobin are Kafka's; sticky keeps "
            "partitions where they are as far as balance allows (eager protocol); "
            "cooperative-sticky does too, and when it is the only one listed the consumer "
            "rebalances incrementally (KIP-429): it keeps its partitions through a rebalance "
            "and gives up only those that move.",
            _M,
            OneOf(ASSIGNMENT_STRATEGIES),
        ),
    ),
    _CONSUMER_CHECKS,
)


class OffsetResetStrategy(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ClientCommon:
    """The settings every client has: where the cluster is, and how to talk to it."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    request_timeout_ms: int
    retry_backoff: RetryBackoff
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    metadata_max_age_ms: int
    security: ChannelSecurity | None
    """The channels' security; None: the process's default (security.protocol not given)."""


@dataclass(frozen=True, slots=True)
class ProducerConfig(ClientCommon):
    acks: int  # storage_pb2.Acks value
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    compression: Compression
    retries: int
    delivery_timeout_ms: int
    max_in_flight_requests_per_connection: int
    max_request_size: int
    partitioner_ignore_keys: bool
    enable_idempotence: bool
    # True when enable.idempotence was given explicitly (not defaulted): a cluster without
    # producer ids is then an error rather than a reason to go on without idempotence.
    idempotence_explicit: bool
    transactional_id: str | None
    transaction_timeout_ms: int
    transaction_two_phase_commit: bool


@dataclass(frozen=True, slots=True)
class ConsumerConfig(ClientCommon):
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    auto_offset_reset: OffsetResetStrategy
    isolation_level: int  # common_pb2.IsolationLevel value
    check_crcs: bool
    default_api_timeout_ms: int
    group_id: str | None
    group_instance_id: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    partition_assignment_strategy: tuple[str, ...]


def producer_config(settings: ClientSettings | None = None, **kwargs: object) -> ProducerConfig:
    """Parse and validate producer settings; raises ConfigError naming every problem."""
    config = _parse(PRODUCER_CONFIG_DEF, "producer", settings, kwargs)
    return ProducerConfig(
        *_common_fields(config),
        acks=_ACKS[config.get_string("acks")],
        linger_ms=config.get_int("linger.ms"),
        batch_size=config.get_int("batch.size"),
        buffer_memory=config.get_int("buffer.memory"),
        max_block_ms=config.get_int("max.block.ms"),
        compression=_COMPRESSION_BY_NAME[config.get_string("compression.type")],
        retries=config.get_int("retries"),
        delivery_timeout_ms=config.get_int("delivery.timeout.ms"),
        max_in_flight_requests_per_connection=config.get_int(
            "max.in.flight.requests.per.connection"
        ),
        max_request_size=config.get_int("max.request.size"),
        partitioner_ignore_keys=config.get_bool("partitioner.ignore.keys"),
        enable_idempotence=config.get_bool("enable.idempotence")
        and not _idempotence_conflicts(config),
        idempotence_explicit=not config.source("enable.idempotence").startswith("default")
        or config.get_optional_string("transactional.id") is not None,
        transactional_id=config.get_optional_string("transactional.id"),
        transaction_timeout_ms=config.get_int("transaction.timeout.ms"),
        transaction_two_phase_commit=config.get_bool("transaction.two.phase.commit.enable"),
    )


def consumer_config(settings: ClientSettings | None = None, **kwargs: object) -> ConsumerConfig:
    """Parse and validate consumer settings; raises ConfigError naming every problem."""
    config = _parse(CONSUMER_CONFIG_DEF, "consumer", settings, kwargs)
    isolation = (
        common_pb2.ISOLATION_LEVEL_READ_COMMITTED
        if config.get_string("isolation.level") == "read_committed"
        else common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
    )
    return ConsumerConfig(
        *_common_fields(config),
        fetch_min_bytes=config.get_int("fetch.min.bytes"),
        fetch_max_wait_ms=config.get_int("fetch.max.wait.ms"),
        fetch_max_bytes=config.get_int("fetch.max.bytes"),
        max_partition_fetch_bytes=config.get_int("max.partition.fetch.bytes"),
        max_poll_records=config.get_int("max.poll.records"),
        auto_offset_reset=OffsetResetStrategy(config.get_string("auto.offset.reset")),
        isolation_level=isolation,
        check_crcs=config.get_bool("check.crcs"),
        default_api_timeout_ms=config.get_int("default.api.timeout.ms"),
        group_id=config.get_optional_string("group.id"),
        group_instance_id=config.get_optional_string("group.instance.id"),
        session_timeout_ms=config.get_int("session.timeout.ms"),
        heartbeat_interval_ms=config.get_int("heartbeat.interval.ms"),
        max_poll_interval_ms=config.get_int("max.poll.interval.ms"),
        enable_auto_commit=config.get_bool("enable.auto.commit"),
        auto_commit_interval_ms=config.get_int("auto.commit.interval.ms"),
        partition_assignment_strategy=tuple(
            dict.fromkeys(config.get_list("partition.assignment.strategy"))
        ),
    )


def _common_fields(
    config: Config,
) -> tuple[tuple[str, ...], str, int, RetryBackoff, int, int, int, ChannelSecurity | None]:
    """The ClientCommon fields, in their order; raises ConfigError for unusable TLS files."""
    backoff_ms = config.get_int("retry.backoff.ms")
    backoff_max_ms = config.get_int("retry.backoff.max.ms")
    return (
        tuple(str(hp) for hp in config.get_host_ports("bootstrap.servers")),
        config.get_string("client.id"),
        config.get_int("request.timeout.ms"),
        RetryBackoff(min(backoff_ms, backoff_max_ms), backoff_max_ms),
        config.get_int("reconnect.backoff.ms"),
        config.get_int("reconnect.backoff.max.ms"),
        config.get_int("metadata.max.age.ms"),
        security_from_config(config),
    )


_SECURITY_CONFIG_DEF: Final = ConfigDef(SECURITY_KEYS, (check_security,))


def channel_security(
    settings: ClientSettings | None = None, **kwargs: object
) -> ChannelSecurity | None:
    """The ChannelSecurity of confluent-kafka's security settings (``security.protocol``,
    ``ssl.*``, ``sasl.*``; None when security.protocol is not given: the process's default),
    for an ``Admin`` client; raises ConfigError naming every problem."""
    return security_from_config(_parse(_SECURITY_CONFIG_DEF, "security", settings, kwargs))


def _parse(
    definition: ConfigDef,
    kind: str,
    settings: ClientSettings | None,
    kwargs: Mapping[str, object],
) -> Config:
    raw: dict[str, RawSetting] = {}
    problems: list[str] = []
    if settings is not None and not isinstance(settings, Mapping):
        raise ConfigError(
            [f"{kind} settings must be a mapping of names to values, got {type(settings).__name__}"]
        )
    sources: list[tuple[str, str, object]] = [
        (str(name), f"{kind} settings", value) for name, value in (settings or {}).items()
    ]
    sources += [
        (name.replace("_", "."), f"keyword argument {name}", value)
        for name, value in kwargs.items()
    ]
    for name, source, value in sources:
        if name not in definition:
            problems.append(f"{name} is not a {kind} setting (from {source})")
            continue
        if name in raw:
            problems.append(f"{name} is given twice (from {raw[name].source} and {source})")
            continue
        try:
            raw[name] = RawSetting(_written_form(value), source)
        except TypeError as e:
            problems.append(f"{name}={value!r} {e} (from {source})")
    if problems:
        raise ConfigError(problems)
    return definition.parse(raw)


def _written_form(value: object) -> str:
    """The value as Kafka's properties syntax writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    raise TypeError("is not a string, integer, boolean or list of strings")
