"""What a topic may be called, shared by the controller (which refuses to create an invalid
name) and the gateway (which answers a Metadata request naming one with
INVALID_TOPIC_EXCEPTION, as Kafka does, so clients fail at once instead of waiting for the
topic to appear).

    >>> topic_name_problem("orders.v1")  # None: valid
    >>> topic_name_problem("a b")
    "the topic name 'a b' contains characters other than ASCII letters, digits, '.', '_' and '-'"
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CLUSTER_TOPIC_PREFIX", "TOPIC_NAME_CHARS_MAX", "topic_name_problem"]

TOPIC_NAME_CHARS_MAX: Final = 249
# Names starting with this belong to the cluster itself (__consumer_offsets, Kafka's
# __transaction_state and __cluster_metadata): never created on a client's demand.
CLUSTER_TOPIC_PREFIX: Final = "__"
_TOPIC_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_problem(name: str) -> str | None:
    """Kafka's rules for a topic name; None if it is valid."""
    if not name:
        return "the topic name is empty"
    if name in (".", ".."):
        return f"the topic name cannot be {name!r}"
    if len(name) > TOPIC_NAME_CHARS_MAX:
        return f"the topic name is {len(name)} characters long; the limit is {TOPIC_NAME_CHARS_MAX}"
    if not _TOPIC_NAME_RE.match(name):
        return (
            f"the topic name {name!r} contains characters other than ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return None
