"""Client settings take Kafka's names and defaults, from a dict or keyword arguments."""

from __future__ import annotations

import pytest

from brook.client.config import (
    CONSUMER_CONFIG_DEF,
    PRODUCER_CONFIG_DEF,
    OffsetResetStrategy,
    consumer_config,
    producer_config,
)
from brook.config import ConfigError
from brook.record import Compression
from brook.v1 import common_pb2, storage_pb2

# Kafka's documented producer and consumer defaults (linger.ms: 5 since Kafka 4.0, KIP-1030).
KAFKA_PRODUCER_DEFAULTS = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 16384,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "compression.type": "none",
    "retries": 2147483647,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "delivery.timeout.ms": 120000,
    "request.timeout.ms": 30000,
    "max.in.flight.requests.per.connection": 5,
    "max.request.size": 1048576,
    "partitioner.ignore.keys": False,
    "client.id": "",
    "metadata.max.age.ms": 300000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
}
KAFKA_CONSUMER_DEFAULTS = {
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 1048576,
    "max.poll.records": 500,
    "auto.offset.reset": "latest",
    "isolation.level": "read_uncommitted",
    "check.crcs": True,
    "request.timeout.ms": 30000,
    "default.api.timeout.ms": 60000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
}


@pytest.mark.parametrize(("name", "default"), KAFKA_PRODUCER_DEFAULTS.items())
def test_producer_defaults_are_kafkas(name: str, default: object) -> None:
    assert PRODUCER_CONFIG_DEF.key(name).default == default


@pytest.mark.parametrize(("name", "default"), KAFKA_CONSUMER_DEFAULTS.items())
def test_consumer_defaults_are_kafkas(name: str, default: object) -> None:
    assert CONSUMER_CONFIG_DEF.key(name).default == default


def test_dict_settings_use_kafkas_names() -> None:
    config = producer_config(
        {
            "bootstrap.servers": "10.0.0.1:9101,10.0.0.2:9101",
            "acks": "1",
            "linger.ms": "20",
            "compression.type": "lz4",
        }
    )

    assert config.bootstrap_servers == ("10.0.0.1:9101", "10.0.0.2:9101")
    assert config.acks == storage_pb2.ACKS_LEADER
    assert config.linger_ms == 20
    assert config.compression is Compression.LZ4


def test_keyword_settings_use_underscores_and_python_values() -> None:
    config = consumer_config(
        bootstrap_servers=["10.0.0.1:9101"],
        auto_offset_reset="earliest",
        check_crcs=False,
        max_poll_records=10,
        isolation_level="read_committed",
    )

    assert config.bootstrap_servers == ("10.0.0.1:9101",)
    assert config.auto_offset_reset is OffsetResetStrategy.EARLIEST
    assert config.check_crcs is False
    assert config.max_poll_records == 10
    assert config.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED


@pytest.mark.parametrize(
    ("acks", "expected"),
    [
        ("0", storage_pb2.ACKS_NONE),
        (0, storage_pb2.ACKS_NONE),
        (1, storage_pb2.ACKS_LEADER),
        ("all", storage_pb2.ACKS_ALL),
        (-1, storage_pb2.ACKS_ALL),
    ],
)
def test_acks_map_onto_the_contracts_enum(acks: object, expected: int) -> None:
    assert producer_config(acks=acks).acks == expected


def test_unknown_setting_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"linger\.msx is not a producer setting"):
        producer_config({"linger.msx": 5})


def test_setting_given_twice_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"linger\.ms is given twice"):
        producer_config({"linger.ms": 5}, linger_ms=6)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"batch.size": -1}, "batch.size"),
        ({"acks": "2"}, "acks"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"linger.ms": "soon"}, "is not an integer"),
        ({"bootstrap.servers": "no-port"}, "bootstrap.servers"),
        ({"linger.ms": 1.5}, "is not a string, integer, boolean or list"),
    ],
)
def test_invalid_values_are_rejected_with_the_settings_name(
    settings: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        producer_config(settings)


def test_delivery_timeout_must_cover_linger_and_one_request() -> None:
    with pytest.raises(ConfigError, match=r"delivery\.timeout\.ms=1000 must be at least"):
        producer_config({"delivery.timeout.ms": 1000, "request.timeout.ms": 1000, "linger.ms": 5})


def test_fetch_long_poll_must_end_before_the_request_times_out() -> None:
    with pytest.raises(ConfigError, match=r"fetch\.max\.wait\.ms=5000 must not exceed"):
        consumer_config({"fetch.max.wait.ms": 5000, "request.timeout.ms": 1000})


def test_retry_backoff_above_its_maximum_becomes_a_constant_backoff() -> None:
    config = producer_config({"retry.backoff.ms": 5000, "retry.backoff.max.ms": 1000})

    assert (config.retry_backoff.base_ms, config.retry_backoff.max_ms) == (1000, 1000)


def test_settings_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        producer_config(["bootstrap.servers=x:1"])  # type: ignore[arg-type]
