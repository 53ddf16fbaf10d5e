"""Client quotas on the controller: validating and committing AlterClientQuotas, answering
DescribeClientQuotas from the image.

An alteration entry is all or nothing: a bad entity, an unknown key, a value that is not
positive (or not whole bytes for a byte rate) or a key named twice fails the entry with
INVALID_REQUEST and changes none of its quotas. Removing a quota the entity does not have is
not an error (Kafka's). Committed values are ClientQuotaRecords, applied by every process into
``MetadataImage.client_quotas``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from brook.errors import BrookError, ErrorCode
from brook.metadata.image import (
    QuotaEntity,
    quota_entity,
    quota_entity_order,
    quota_entity_parts,
)
from brook.security.client_quotas import ENTITY_TYPES, entity_problem, value_problem
from brook.v1 import admin_pb2
from brook_controller.changes import ChangeSet

__all__ = ["alter_client_quotas", "describe_client_quotas"]


def _invalid(message: str) -> BrookError:
    return BrookError(ErrorCode.INVALID_REQUEST, message)


def alter_client_quotas(changes: ChangeSet, alteration: admin_pb2.ClientQuotaAlteration) -> None:
    """Stages one entry's operations; raises INVALID_REQUEST, staging nothing, if any of them
    is invalid."""
    entity = quota_entity(alteration.entity)
    problem = entity_problem(list(entity))
    if problem is not None:
        raise _invalid(problem)
    keys = [op.key for op in alteration.ops]
    staged: list[tuple[str, float | None]] = []
    for op in alteration.ops:
        if keys.count(op.key) > 1:
            raise _invalid(f"the entry alters {op.key!r} twice")
        problem = value_problem(op.key, 1.0 if op.remove else op.value)
        if problem is not None:
            raise _invalid(problem)
        staged.append((op.key, None if op.remove else op.value))
    for key, value in staged:
        changes.put_client_quota(entity, key, value)


def describe_client_quotas(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    components: Iterable[admin_pb2.ClientQuotaFilterComponent],
    strict: bool,
) -> list[admin_pb2.ClientQuotaEntry]:
    """The entries of the entities the filter matches, in a stable order; raises
    INVALID_REQUEST for a malformed filter."""
    wanted: dict[str, tuple[bool, str | None]] = {}  # type -> (exact, name) or (False, None)
    for component in components:
        entity_type = component.entity_type
        if entity_type not in ENTITY_TYPES:
            raise _invalid(
                f"entity type {entity_type!r} is not supported (the types are "
                f"{', '.join(ENTITY_TYPES)})"
            )
        if entity_type in wanted:
            raise _invalid(f"the filter names entity type {entity_type!r} twice")
        has_match = component.HasField("match")
        match_type = component.match_type
        if match_type == admin_pb2.CLIENT_QUOTA_MATCH_TYPE_EXACT:
            if not has_match:
                raise _invalid(f"an exact match of {entity_type} needs a name")
            wanted[entity_type] = (True, component.match)
        elif match_type in (
            admin_pb2.CLIENT_QUOTA_MATCH_TYPE_DEFAULT,
            admin_pb2.CLIENT_QUOTA_MATCH_TYPE_ANY,
        ):
            if has_match:
                raise _invalid(f"a default or any-name match of {entity_type} takes no name")
            wanted[entity_type] = (match_type == admin_pb2.CLIENT_QUOTA_MATCH_TYPE_DEFAULT, None)
        else:
            raise _invalid(f"unknown match type {match_type} for {entity_type}")
    entries = []
    for entity in sorted(quotas, key=quota_entity_order):
        names = dict(entity)
        if strict and len(names) != len(wanted):
            continue
        if all(
            entity_type in names and (not exact or names[entity_type] == name)
            for entity_type, (exact, name) in wanted.items()
        ):
            entries.append(
                admin_pb2.ClientQuotaEntry(entity=quota_entity_parts(entity), values=quotas[entity])
            )
    return entries
