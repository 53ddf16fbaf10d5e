"""Kafka's exponential retry back-off with jitter, one implementation for the SDK, the
membership clients and the services: ``RetryBackoff`` holds the settings
(``retry.backoff.ms``, ``retry.backoff.max.ms``), ``backoff_s`` the wait before the next attempt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["RetryBackoff", "backoff_s"]

# Kafka's ExponentialBackoff jitter: each wait is scaled by a random factor in [0.8, 1.2].
BACKOFF_JITTER = 0.2


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """Kafka's exponential back-off: base * 2^(attempt-1), capped, with +-20% jitter."""

    base_ms: int
    max_ms: int


def backoff_s(backoff: RetryBackoff, attempts: int) -> float:
    """The wait before attempt ``attempts + 1``: Kafka's exponential back-off with jitter."""
    if backoff.max_ms <= backoff.base_ms:
        return backoff.base_ms / 1000
    exponent = min(max(attempts - 1, 0), 30)
    wait_ms = min(backoff.base_ms * (2**exponent), backoff.max_ms)
    jitter = random.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER)
    wait_s: float = min(wait_ms * jitter, backoff.max_ms) / 1000
    return wait_s
