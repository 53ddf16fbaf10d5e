"""The settings of a process that joins the cluster through the controllers (storage nodes
now; group coordinators and gateways later). Each such service lists ``MEMBERSHIP_KEYS`` and
``MEMBERSHIP_CHECKS`` in its own definition, next to controller.quorum.bootstrap.servers and
request.timeout.ms, which every service already shares."""

from __future__ import annotations

from typing import Final

from brook.config import Config, ConfigKey, ConfigType, Importance, Range, check_not_greater

__all__ = ["MEMBERSHIP_CHECKS", "MEMBERSHIP_KEYS"]

MEMBERSHIP_KEYS: Final = (
    ConfigKey(
        "broker.heartbeat.interval.ms",
        ConfigType.INT,
        2000,
        "How often this node renews its lease with the controller; it must stay well below "
        "broker.session.timeout.ms. While the node is fenced it also heartbeats as soon as it "
        "has applied more metadata, so that it is unfenced without waiting a whole interval.",
        Importance.MEDIUM,
        Range(1),
    ),
    ConfigKey(
        "broker.session.timeout.ms",
        ConfigType.INT,
        9000,
        "How long this node keeps acting as a partition leader without a successful heartbeat "
        "(counted from when that heartbeat was sent, the smaller of this and the lease the "
        "controller grants). Past it the node answers NOT_LEADER_OR_FOLLOWER until the "
        "controller unfences it again, because the controller fences a node whose lease has "
        "expired and moves its leaderships. Set it as on the controllers.",
        Importance.MEDIUM,
        Range(1),
    ),
    ConfigKey(
        "initial.broker.registration.timeout.ms",
        ConfigType.INT,
        60000,
        "How long start-up waits to register with the controllers, catch up with the "
        "metadata and be unfenced; past it the process exits with status 1. A node restarted "
        "right after a crash waits here until the controllers have expired the lease of its "
        "previous incarnation (broker.session.timeout.ms).",
        Importance.MEDIUM,
        Range(1),
    ),
    ConfigKey(
        "retry.backoff.ms",
        ConfigType.INT,
        100,
        "The first wait before a request to the controllers is tried again (another "
        "controller, a reconnected metadata stream); each further failure doubles it, with "
        "20% jitter, up to retry.backoff.max.ms.",
        Importance.LOW,
        Range(0),
    ),
    ConfigKey(
        "retry.backoff.max.ms",
        ConfigType.INT,
        1000,
        "The longest wait between two attempts of a request to the controllers.",
        Importance.LOW,
        Range(0),
    ),
)


def _check_heartbeat_below_session(config: Config) -> str | None:
    interval_ms = config.get_int("broker.heartbeat.interval.ms")
    session_ms = config.get_int("broker.session.timeout.ms")
    if interval_ms < session_ms:
        return None
    return (
        f"broker.heartbeat.interval.ms={interval_ms} must be below "
        f"broker.session.timeout.ms={session_ms}: the lease would lapse between two heartbeats"
    )


MEMBERSHIP_CHECKS: Final = (
    _check_heartbeat_below_session,
    check_not_greater("retry.backoff.ms", "retry.backoff.max.ms"),
)
