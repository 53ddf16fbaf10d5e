"""Kafka's client quotas: who a quota is for (its entity), what it limits (its key) and which
quota applies to a request (precedence).

An entity is a user, a client id, or a user and a client id together; either name may be the
default of its type (every user, every client id, without a quota of its own). Entities are the
image's ``QuotaEntity`` (brook/metadata/image.py): (entity type, name or None for the default)
parts sorted by type. The controller validates alterations with ``entity_problem`` and
``value_problem`` (brook_controller/client_quotas.py); the quota engine that the gateways and
the storage nodes enforce them with looks them up with ``applicable_quota``
(brook/security/quota_engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from brook.metadata.image import QuotaEntity

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "ENTITY_TYPES",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "applicable_quota",
    "entity_problem",
    "entity_text",
    "precedence",
    "value_problem",
]

USER: Final = "user"
CLIENT_ID: Final = "client-id"
ENTITY_TYPES: Final = (USER, CLIENT_ID)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
QUOTA_KEYS: Final = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
"""The quotas Brook enforces (Kafka's names). Byte rates are whole bytes per second; the
request percentage is of one request handler's time, as in Kafka (200 is two handlers' worth)."""

_WHOLE_KEYS: Final = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})


def entity_problem(parts: list[tuple[str, str | None]]) -> str | None:
    """Why these (entity type, name or None) parts are not a quota entity; None if they are."""
    if not parts:
        return "the quota entity is empty (name a user, a client id or both)"
    types = [entity_type for entity_type, _ in parts]
    for entity_type, name in parts:
        if entity_type not in ENTITY_TYPES:
            return (
                f"entity type {entity_type!r} is not supported (the types are "
                f"{', '.join(ENTITY_TYPES)})"
            )
        if types.count(entity_type) > 1:
            return f"the quota entity names entity type {entity_type!r} twice"
        if name == "":
            return f"the {entity_type} name is empty (the default {entity_type} has no name)"
    return None


def value_problem(key: str, value: float) -> str | None:
    """Why ``value`` cannot be quota ``key``'s; None if it can."""
    if key not in QUOTA_KEYS:
        return f"unknown quota key {key!r} (the keys are {', '.join(QUOTA_KEYS)})"
    if not value > 0 or value == float("inf"):
        return f"{key} must be a positive finite number, not {value}"
    if key in _WHOLE_KEYS and value != int(value):
        return f"{key} is whole bytes per second, not {value}"
    return None


def entity_text(entity: QuotaEntity) -> str:
    """``user=alice, client-id=<default>``: an entity as operators read it."""
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity)


def precedence(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    """The entities whose quota could apply to ``user``'s requests with ``client_id``, most
    specific first (Kafka's order): user and client id, user and the default client id, user,
    the default user and client id, the default user and the default client id, the default
    user, client id, the default client id."""
    return (
        ((CLIENT_ID, client_id), (USER, user)),
        ((CLIENT_ID, None), (USER, user)),
        ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)),
        ((CLIENT_ID, None), (USER, None)),
        ((USER, None),),
        ((CLIENT_ID, client_id),),
        ((CLIENT_ID, None),),
    )


def applicable_quota(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[QuotaEntity, float] | None:
    """The first entity in ``precedence`` order with a ``key`` quota, and its value; None when
    no quota limits the client. Each key is looked up on its own, as in Kafka: a user's produce
    quota does not hide a client id's fetch quota."""
    for entity in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None:
            value = values.get(key)
            if value is not None:
                return entity, value
    return None
