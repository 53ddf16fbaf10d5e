"""The admin client's client-quota types (Kafka's ClientQuotaEntity, ClientQuotaFilterComponent)
and their protobuf forms; ``Admin.alter_client_quotas`` and ``Admin.describe_client_quotas``
use them.

    with Admin("127.0.0.1:9201") as admin:
        limited = ClientQuotaEntity({"client-id": "batch-loader"})
        admin.alter_client_quotas({limited: {"producer_byte_rate": 1048576}})
        print(admin.describe_client_quotas([ClientQuotaFilterComponent.of_entity_type("client-id")]))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from brook.metadata.image import quota_entity, quota_entity_parts
from brook.security.client_quotas import entity_text
from brook.v1 import admin_pb2, metadata_pb2

__all__ = ["ClientQuotaEntity", "ClientQuotaFilterComponent"]


@dataclass(frozen=True, slots=True, init=False)
class ClientQuotaEntity:
    """Who a quota is for: entity type ("user", "client-id") -> name, None for the default
    entity of that type."""

    entries: tuple[tuple[str, str | None], ...]

    def __init__(self, entries: Mapping[str, str | None]) -> None:
        object.__setattr__(self, "entries", tuple(sorted(entries.items())))

    def __str__(self) -> str:
        return entity_text(self.entries)

    def to_proto(self) -> list[metadata_pb2.ClientQuotaEntityPart]:
        return quota_entity_parts(self.entries)

    @classmethod
    def from_proto(cls, parts: Iterable[metadata_pb2.ClientQuotaEntityPart]) -> ClientQuotaEntity:
        return cls(dict(quota_entity(parts)))


_MATCH_TYPES = {
    "exact": admin_pb2.CLIENT_QUOTA_MATCH_TYPE_EXACT,
    "default": admin_pb2.CLIENT_QUOTA_MATCH_TYPE_DEFAULT,
    "any": admin_pb2.CLIENT_QUOTA_MATCH_TYPE_ANY,
}


@dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """Entities with a part of ``entity_type`` named ``match`` ("exact"), the default one
    ("default"), or any ("any")."""

    entity_type: str
    match_type: Literal["exact", "default", "any"]
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, "exact", name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, "default")

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, "any")

    def to_proto(self) -> admin_pb2.ClientQuotaFilterComponent:
        return admin_pb2.ClientQuotaFilterComponent(
            entity_type=self.entity_type,
            match_type=_MATCH_TYPES[self.match_type],
            match=self.match,
        )
