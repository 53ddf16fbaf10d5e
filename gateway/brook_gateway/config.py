"""The gateway's settings: the common ones plus its Kafka-protocol front end.

Listeners: GRPC (health), default GRPC://127.0.0.1:9501, and PLAINTEXT (the Kafka binary
protocol), default PLAINTEXT://127.0.0.1:9092, Kafka's own port, the one every Kafka client
tries first. These are the local launcher's well-known ports for gateway 1. The gateway stores
nothing, so it has no data directory.
"""

from __future__ import annotations

from typing import Final

from brook.config import (
    CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
    REQUEST_TIMEOUT_MS,
    ConfigKey,
    ConfigType,
    Importance,
    Range,
    service_config_def,
)
from brook.membership.config import MEMBERSHIP_CHECKS, MEMBERSHIP_KEYS

__all__ = ["CONFIG_DEF"]

CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC", "PLAINTEXT"),
    default_listeners="GRPC://127.0.0.1:9501,PLAINTEXT://127.0.0.1:9092",
    keys=(
        CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
        ConfigKey(
            "max.connections",
            ConfigType.INT,
            1000,
            "The most Kafka client connections open at once; more are closed as they arrive. "
            "Kafka's default is unbounded; a finite one keeps a connection storm from "
            "exhausting memory and file descriptors.",
            Importance.MEDIUM,
            Range(1),
        ),
        ConfigKey(
            "connections.max.idle.ms",
            ConfigType.LONG,
            600000,
            "A Kafka client connection idle for this long is closed.",
            Importance.MEDIUM,
            Range(1),
        ),
        ConfigKey(
            "max.in.flight.requests.per.connection",
            ConfigType.INT,
            100,
            "The most requests of one Kafka client connection handled at once (clients "
            "pipeline them); the connection is not read further until one is answered, so a "
            "client cannot make the gateway buffer without bound.",
            Importance.LOW,
            Range(1),
        ),
        REQUEST_TIMEOUT_MS,
        *MEMBERSHIP_KEYS,
    ),
    checks=MEMBERSHIP_CHECKS,
)
