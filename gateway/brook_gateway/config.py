"""The gateway's settings: the common ones plus its Kafka-protocol front end.

Listeners: GRPC (health), default GRPC://127.0.0.1:9501, and one or more Kafka listeners
(the Kafka binary protocol) named as Kafka names them: PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL (their security protocols from listener.security.protocol.map, by default the same
as their names); the default is PLAINTEXT://127.0.0.1:9092, Kafka's own port, the one every
Kafka client tries first. These are the local launcher's well-known ports for gateway 1. With
kafka.node.port.base set, the gateway also listens on a port per broker id it presents, for
each Kafka listener (the launcher gives gateway 1 the base 9600: broker n on 9600 + n). TLS
listeners take the ssl.* keys (brook.security.tls), SASL listeners sasl.enabled.mechanisms.
The gateway stores nothing, so it has no data directory.
"""

from __future__ import annotations

from typing import Final

from brook.config import (
    CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
    REQUEST_TIMEOUT_MS,
    Config,
    ConfigKey,
    ConfigType,
    Importance,
    Listener,
    OneOf,
    Range,
    service_config_def,
)
from brook.membership.config import MEMBERSHIP_CHECKS, MEMBERSHIP_KEYS
from brook.security.grpc_tls import INTER_BROKER_PROTOCOL
from brook.security.quota_engine import QUOTA_CONFIG_KEYS
from brook.security.tls import TLS_KEYS, security_protocol, uses_tls
from brook_gateway.cluster_view import KAFKA_LISTENERS, PORT_MAX
from brook_gateway.sasl import SASL_MECHANISMS

__all__ = [
    "CONFIG_DEF",
    "KAFKA_NODE_PORT_BASE",
    "KAFKA_NODE_PORT_STRIDE",
    "SASL_ENABLED_MECHANISMS",
    "kafka_listeners",
]

KAFKA_NODE_PORT_BASE: Final = "kafka.node.port.base"
KAFKA_NODE_PORT_STRIDE: Final = "kafka.node.port.stride"
SASL_ENABLED_MECHANISMS: Final = "sasl.enabled.mechanisms"


def kafka_listeners(config: Config) -> tuple[Listener, ...]:
    """The gateway's Kafka listeners, in the order of ``listeners``."""
    return tuple(
        listener for listener in config.get_listeners() if listener.name in KAFKA_LISTENERS
    )


def _check_kafka_listeners(config: Config) -> str | None:
    listeners = kafka_listeners(config)
    if not listeners:
        return f"listeners has no Kafka listener (one or more of {', '.join(KAFKA_LISTENERS)})"
    protocols = {listener.name: security_protocol(config, listener.name) for listener in listeners}
    tls = [name for name, protocol in protocols.items() if uses_tls(protocol)]
    if tls and not config.get_string("ssl.keystore.location"):
        return f"the {tls[0]} listener uses TLS: set ssl.keystore.location"
    sasl = [name for name, protocol in protocols.items() if protocol.startswith("SASL_")]
    if sasl and not config.get_list(SASL_ENABLED_MECHANISMS):
        return f"the {sasl[0]} listener uses SASL: sasl.enabled.mechanisms must not be empty"
    return None


CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC",),
    optional_listener_names=KAFKA_LISTENERS,
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
            "When above 0, the gateway also listens, on its first Kafka listener's host and "
            "with its security, on port this + n for every storage node n it presents as a "
            "Kafka broker, and Metadata shows broker n there (at the advertised host), so "
            "every broker id has an address of its own, as Kafka proxies give them; each "
            "further Kafka listener (in listeners order) likewise from this + i * "
            "kafka.node.port.stride. 0: every broker id a gateway presents shares its "
            "listener's address, which some clients mishandle (docs/decisions.md). Storage "
            "node ids must keep the port at or below 65535 and below the next listener's "
            "ports; a node past that is shown at the shared address.",
            Importance.MEDIUM,
            Range(0, PORT_MAX - 1),
        ),
        ConfigKey(
            KAFKA_NODE_PORT_STRIDE,
            ConfigType.INT,
            100,
            "With kafka.node.port.base set and several Kafka listeners, the distance between "
            "the per-broker ports of consecutive listeners: the i-th Kafka listener in "
            "listeners (from 0) shows broker n at kafka.node.port.base + i * this + n.",
            Importance.LOW,
            Range(1, PORT_MAX),
        ),
        ConfigKey(
            SASL_ENABLED_MECHANISMS,
            ConfigType.LIST,
            SASL_MECHANISMS,
            "The SASL mechanisms SASL_PLAINTEXT and SASL_SSL listeners offer. PLAIN is checked "
            "against the user's SCRAM credential (use it over TLS only: the password crosses "
            "the wire); SCRAM-SHA-256 and SCRAM-SHA-512 never send it.",
            Importance.MEDIUM,
            OneOf(SASL_MECHANISMS),
        ),
        REQUEST_TIMEOUT_MS,
        *QUOTA_CONFIG_KEYS,
        *MEMBERSHIP_KEYS,
        *TLS_KEYS,
        INTER_BROKER_PROTOCOL,
    ),
    checks=(*MEMBERSHIP_CHECKS, _check_kafka_listeners),
)
