"""Replication throttles (Kafka's replication quotas, KIP-73), as a reassignment uses them.

Two dynamic node configs bound the bytes per second a node moves of *throttled* replicas:
``follower.replication.throttled.rate`` what it fetches as a follower, and
``leader.replication.throttled.rate`` what it serves as a leader. A replica is throttled when
its topic's ``follower.replication.throttled.replicas`` (``leader...`` on the leader side)
lists ``partition:node`` for this node, or is ``*``. Replicas in the ISR are never throttled:
the limit is for copies catching up, never for the ones acks=all waits on.

``ReplicationQuota`` is a bucket that may run into debt: a transfer of n bytes moves the time
the next throttled transfer may start by n / rate, so over any stretch longer than one
transfer the throttled bytes stay within the rate, and a transfer is never split. Each
throttled transfer is kept small (``chunk_bytes``: a tenth of a second of the rate), so the
debt is too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping

from brook.config import INT64_MAX
from brook.metadata.image import BROKER
from brook.topic_config import NODE_DYNAMIC_CONFIG_DEF, parse_throttled_replicas
from brook_storage_node.metadata_view import MetadataView

__all__ = ["ReplicationQuota", "is_throttled", "node_throttle_rate"]

# The smallest throttled transfer: the leader sends at least one batch anyway.
CHUNK_BYTES_MIN = 1024
# A throttled transfer carries at most this long of the rate.
CHUNK_SECONDS = 0.1


def node_throttle_rate(view: MetadataView, node_id: int, name: str) -> int | None:
    """The node's ``name`` rate (its own dynamic config, else every node's dynamic default);
    None when unlimited."""
    configs = view.image.configs
    for resource in ((BROKER, str(node_id)), (BROKER, "")):
        value = configs.get(resource, {}).get(name)
        if value is not None:
            rate = int(value)
            return None if rate >= INT64_MAX else rate
    default = NODE_DYNAMIC_CONFIG_DEF.key(name).default
    assert isinstance(default, int)
    return None if default >= INT64_MAX else default


@functools.lru_cache(maxsize=1024)
def _throttled_pairs(value: str) -> frozenset[tuple[int, int]] | None:
    try:
        return parse_throttled_replicas(value)
    except ValueError:
        # Validation refuses such a value; should one get through, replication must go on
        # (unthrottled) rather than fail every fetch of the node.
        return frozenset()


def is_throttled(topic_configs: Mapping[str, str], name: str, partition: int, node_id: int) -> bool:
    """Whether the topic's ``name`` list (leader.replication.throttled.replicas or the
    follower one) names ``partition`` on ``node_id``."""
    value = topic_configs.get(name)
    if not value:
        return False
    pairs = _throttled_pairs(value)
    return pairs is None or (partition, node_id) in pairs


class ReplicationQuota:
    """A bytes-per-second bound shared by every throttled transfer of one side of a node."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next_s = 0.0

    def delay_s(self, rate: int | None) -> float:
        """How long until a throttled transfer may start (0: now)."""
        if rate is None:
            return 0.0
        return max(0.0, self._next_s - self._clock())

    def record(self, size: int, rate: int | None) -> None:
        """Counts a throttled transfer of ``size`` bytes."""
        if rate is None or size <= 0:
            return
        self._next_s = max(self._next_s, self._clock()) + size / rate

    @staticmethod
    def chunk_bytes(rate: int | None, limit: int) -> int:
        """The most one throttled transfer should carry, given the usual ``limit``."""
        if rate is None:
            return limit
        return max(CHUNK_BYTES_MIN, min(limit, int(rate * CHUNK_SECONDS)))
