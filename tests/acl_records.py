"""AccessControlEntryRecords for authorization tests, as the controllers commit them."""

from __future__ import annotations

import itertools

from brook.security.acl import WILDCARD_HOST
from brook.v1 import metadata_pb2

__all__ = ["acl"]

_ids = itertools.count(1)
_DENY = metadata_pb2.ACL_PERMISSION_TYPE_DENY
_ALLOW = metadata_pb2.ACL_PERMISSION_TYPE_ALLOW


def acl(
    resource_type: int,
    name: str,
    operation: int,
    *,
    principal: str = "User:alice",
    host: str = WILDCARD_HOST,
    prefixed: bool = False,
    deny: bool = False,
) -> metadata_pb2.AccessControlEntryRecord:
    """An ALLOW (or, with ``deny``, DENY) of ``operation`` on the resources of
    ``resource_type`` named ``name`` (LITERAL, or PREFIXED with ``prefixed``), with a fresh
    id."""
    return metadata_pb2.AccessControlEntryRecord(
        id=next(_ids).to_bytes(16, "big"),
        resource_type=resource_type,  # type: ignore[arg-type]
        resource_name=name,
        pattern_type=(
            metadata_pb2.ACL_PATTERN_TYPE_PREFIXED
            if prefixed
            else metadata_pb2.ACL_PATTERN_TYPE_LITERAL
        ),
        principal=principal,
        host=host,
        operation=operation,  # type: ignore[arg-type]
        permission_type=(
            metadata_pb2.ACL_PERMISSION_TYPE_DENY
            if deny
            else metadata_pb2.ACL_PERMISSION_TYPE_ALLOW
        ),
    )
