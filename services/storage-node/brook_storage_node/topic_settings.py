"""A topic's effective settings on this node: the node's defaults with the topic's overrides.

Topic overrides use Kafka's topic-level names, as ``brook.topic_config.TOPIC_CONFIG_DEF``
declares them for the whole cluster (the controller validates CreateTopics against the same
definition). The node uses two kinds: the log's own (retention.ms, segment.bytes,
max.message.bytes, ...), layered on the node's ``LogConfig`` with ``LogConfig.with_overrides``,
and the two the serving layer reads, compression.type and min.insync.replicas. Other valid
topic configs (compaction, throttling, tiered storage) have no effect here yet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from brook.config import Config, ConfigError, RawSetting
from brook.record import Compression
from brook.topic_config import COMPRESSION_TYPES, TOPIC_CONFIG_DEF, validate_topic_configs
from brook_storage_node.log import TOPIC_LOG_CONFIG_DEF, LogConfig, node_log_config

__all__ = [
    "TopicDefaults",
    "TopicSettings",
    "check_topic_configs",
    "resolve_topic_settings",
]

_log = logging.getLogger(__name__)

# The codec each of Kafka's compression.type values (brook.topic_config) builds with.
_COMPRESSION_OF_TYPE: Final[Mapping[str, Compression]] = {
    "producer": Compression.NONE,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
assert set(_COMPRESSION_OF_TYPE) == set(COMPRESSION_TYPES)


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """What serving one topic's partitions obeys."""

    log_config: LogConfig
    min_insync_replicas: int
    compression: Compression
    """The codec for batches the node builds (compression.type; producer means none)."""


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """The node's defaults, before any topic override."""

    settings: TopicSettings

    @classmethod
    def from_config(cls, config: Config) -> TopicDefaults:
        return cls(
            TopicSettings(
                log_config=node_log_config(config),
                min_insync_replicas=config.get_int("min.insync.replicas"),
                compression=_COMPRESSION_OF_TYPE[config.get_string("compression.type")],
            )
        )


def _parse(configs: Mapping[str, str], source: str) -> Config:
    """The topic configs parsed against the cluster's definition (ConfigError if invalid)."""
    return TOPIC_CONFIG_DEF.parse(
        {name: RawSetting(value, source) for name, value in configs.items()}
    )


def check_topic_configs(configs: Mapping[str, str], source: str) -> None:
    """ValueError naming the first unknown topic config, or every invalid value (the
    controller's check, brook.topic_config.validate_topic_configs)."""
    problem = validate_topic_configs(configs, source)
    if problem is not None:
        raise ValueError(problem)


def resolve_topic_settings(
    topic: str, defaults: TopicDefaults, overrides: Mapping[str, str]
) -> TopicSettings:
    """The node defaults with ``overrides`` applied. An override that is unknown or invalid
    (metadata written by a newer or buggy controller) is logged and skipped, never fatal: the
    node keeps serving the topic with its defaults for that setting."""
    base = defaults.settings
    if not overrides:
        return base
    source = f"topic {topic}"
    for name in overrides:
        if name not in TOPIC_CONFIG_DEF:
            _log.warning("topic %s: ignoring unknown topic config %s", topic, name)
    log_config = base.log_config
    for name, value in overrides.items():
        if name in TOPIC_LOG_CONFIG_DEF:
            try:
                log_config = log_config.with_overrides({name: value}, source)
            except (ConfigError, ValueError) as exc:
                _log.error("topic %s: ignoring invalid config: %s", topic, exc)
    min_insync, compression = base.min_insync_replicas, base.compression
    for name in ("min.insync.replicas", "compression.type"):
        if name not in overrides:
            continue
        try:
            parsed = _parse({name: overrides[name]}, source)
        except ConfigError as exc:
            _log.error("topic %s: ignoring invalid config: %s", topic, exc)
            continue
        if name == "min.insync.replicas":
            min_insync = parsed.get_int(name)
        else:
            compression = _COMPRESSION_OF_TYPE[parsed.get_string(name)]
    return TopicSettings(
        log_config=log_config,
        min_insync_replicas=min_insync,
        compression=compression,
    )
