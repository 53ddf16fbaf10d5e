"""The gateway's settings: the common ones plus its Kafka-protocol front end.

Listeners: GRPC (health), default GRPC://127.0.0.1:9501, and PLAINTEXT (the Kafka binary
protocol), default PLAINTEXT://127.0.0.1:9092, Kafka's own port, the one every Kafka client
tries first. These are the local launcher's well-known ports for gateway 1. With
kafka.node.port.base set, the gateway also listens on a port per broker id it presents (the
launcher gives gateway 1 the base 9600: broker n on 9600 + n). The gateway stores nothing, so
it has no data directory.
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
from brook_gateway.cluster_view import PORT_MAX
from brook_gateway.quotas import QUOTA_CONFIG_KEYS

__all__ = ["CONFIG_DEF", "KAFKA_NODE_PORT_BASE"]

KAFKA_NODE_PORT_BASE: Final = "kafka.node.port.base"

CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC", "PLAINTEXT"),
    default_listeners="GRPC://127.0.0.1:9501,PLAINTEXT://127.0.0.1:9092,METRICS://127.0.0.1:10501",
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
        ConfigKey(
            KAFKA_NODE_PORT_BASE,
            ConfigType.INT,
            0,
            "When above 0, the gateway also listens, on the PLAINTEXT listener's host, on port "
            "this + n for every storage node n it presents as a Kafka broker, and Metadata "
            "shows broker n there (at the advertised PLAINTEXT host), so every broker id has an "
            "address of its own, as Kafka proxies give them. 0: every broker id a gateway "
            "presents shares its PLAINTEXT address, which some clients mishandle (docs/"
            "decisions.md). Storage node ids must keep this + id at or below 65535; a node past "
            "that is shown at the shared address.",
            Importance.MEDIUM,
            Range(0, PORT_MAX - 1),
        ),
        REQUEST_TIMEOUT_MS,
        *QUOTA_CONFIG_KEYS,
        *MEMBERSHIP_KEYS,
    ),
    checks=MEMBERSHIP_CHECKS,
)
