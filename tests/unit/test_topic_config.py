"""The topic-level configuration names, values and node-level synonyms (brook.topic_config)."""

from __future__ import annotations

import pytest

from brook.topic_config import (
    BROKER_SYNONYMS,
    TOPIC_CONFIG_DEF,
    validate_broker_default_configs,
    validate_topic_configs,
)


@pytest.mark.parametrize(
    "configs",
    [
        {},
        {"retention.ms": "-1", "cleanup.policy": "compact,delete"},
        {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"},
        {"min.cleanable.dirty.ratio": "0.9", "compression.type": "zstd"},
    ],
)
def test_valid_topic_configs_pass(configs: dict[str, str]) -> None:
    assert validate_topic_configs(configs) is None


@pytest.mark.parametrize(
    ("configs", "reason"),
    [
        ({"retention.msx": "1"}, "unknown topic config retention.msx (did you mean retention.ms?)"),
        ({"log.retention.ms": "1"}, "unknown topic config log.retention.ms"),
        ({"retention.ms": "-2"}, 'retention.ms="-2" is less than the minimum -1'),
        ({"segment.bytes": "10"}, 'segment.bytes="10" is less than the minimum 61'),
        ({"cleanup.policy": "shred"}, 'cleanup.policy="shred" is not one of delete, compact'),
        ({"preallocate": "yes"}, 'preallocate="yes" is not a boolean'),
    ],
)
def test_unknown_names_and_invalid_values_are_named_in_the_reason(
    configs: dict[str, str], reason: str
) -> None:
    problem = validate_topic_configs(configs)

    assert problem is not None and problem.startswith(reason)


def test_node_defaults_are_validated_under_their_node_level_names() -> None:
    assert validate_broker_default_configs({"log.retention.ms": "1000"}) is None
    assert validate_broker_default_configs({"log.retention.ms": "x"}) == (
        'log.retention.ms="x" is not an integer (from the request)'
    )
    problem = validate_broker_default_configs({"retention.ms": "1"})
    assert problem is not None and problem.startswith("unknown dynamic node config")


def test_every_synonym_names_a_topic_config() -> None:
    assert set(BROKER_SYNONYMS) <= {key.name for key in TOPIC_CONFIG_DEF.keys}
