"""The controller's ACL decisions: CreateAcls, DescribeAcls and DeleteAcls over the image's
AccessControlEntryRecords (Kafka's AclControlManager).

Each creation is validated on its own (Kafka's rules, brook.security.acl): an invalid one gets
INVALID_REQUEST naming the problem and the valid ones of the request are committed together,
each under 16 fresh random bytes. A binding that exists already, or that the request names
twice, is stored once. Each deletion filter removes every ACL it matches and reports them; an
ACL two filters match is reported by both and removed once. A request may create, or delete,
at most ``ACLS_PER_REQUEST_MAX`` ACLs (Kafka's bound on the records of one user operation):
beyond that every item fails and nothing changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Final

from brook.errors import ErrorCode
from brook.security.acl import AclBinding, AclBindingFilter
from brook.v1 import admin_pb2, metadata_pb2
from brook_controller.changes import ChangeSet
from brook_controller.image import acls_key

__all__ = ["ACLS_PER_REQUEST_MAX", "create_acls", "delete_acls", "describe_acls"]

ACLS_PER_REQUEST_MAX: Final = 10_000


_INVALID: Final = int(ErrorCode.INVALID_REQUEST)


def _problem(item: AclBinding | AclBindingFilter) -> str | None:
    """Why Kafka refuses the binding or filter, or None."""
    try:
        item.validate()
    except ValueError as problem:
        return str(problem)
    return None


def _too_many(count: int, what: str) -> str:
    return f"the request would {what} {count} ACLs, more than {ACLS_PER_REQUEST_MAX} at once"


def _stored(acls: Iterable[metadata_pb2.AccessControlEntryRecord]) -> set[AclBinding]:
    return {AclBinding.from_proto(acl) for acl in acls}


def create_acls(
    changes: ChangeSet, creations: Sequence[admin_pb2.AclBinding]
) -> list[admin_pb2.CreateAclsResult]:
    """Adds the valid bindings not stored yet to ``changes``; one result per creation."""
    if len(creations) > ACLS_PER_REQUEST_MAX:
        message = _too_many(len(creations), "create")
        return [
            admin_pb2.CreateAclsResult(error_code=_INVALID, error_message=message)  # type: ignore[arg-type]
            for _ in creations
        ]
    changes.require(acls_key())
    known = _stored(changes.image.acls.values())
    results = []
    for creation in creations:
        binding = AclBinding.from_proto(creation)
        problem = _problem(binding)
        if problem is not None:
            results.append(
                admin_pb2.CreateAclsResult(error_code=_INVALID, error_message=problem)  # type: ignore[arg-type]
            )
            continue
        if binding not in known:
            known.add(binding)
            changes.put_acl(binding.to_record(uuid.uuid4().bytes))
        results.append(admin_pb2.CreateAclsResult())
    return results


def describe_acls(
    acls: Iterable[metadata_pb2.AccessControlEntryRecord],
    request_filter: admin_pb2.AclBindingFilter,
) -> admin_pb2.DescribeAclsResponse:
    """The stored ACLs the filter matches, in a stable order (resource, then entry)."""
    selection = AclBindingFilter.from_proto(request_filter)
    problem = _problem(selection)
    if problem is not None:
        return admin_pb2.DescribeAclsResponse(error_code=_INVALID, error_message=problem)  # type: ignore[arg-type]
    matched = sorted(
        (binding for binding in _stored(acls) if selection.matches(binding)), key=_order
    )
    return admin_pb2.DescribeAclsResponse(acls=[binding.to_proto() for binding in matched])


def delete_acls(
    changes: ChangeSet, filters: Sequence[admin_pb2.AclBindingFilter]
) -> list[admin_pb2.DeleteAclsFilterResult]:
    """Removes, in ``changes``, every ACL each valid filter matches; one result per filter."""
    changes.require(acls_key())
    stored = sorted(
        ((AclBinding.from_proto(acl), acl_id) for acl_id, acl in changes.image.acls.items()),
        key=lambda pair: _order(pair[0]),
    )
    results = []
    doomed: set[bytes] = set()
    for request_filter in filters:
        selection = AclBindingFilter.from_proto(request_filter)
        problem = _problem(selection)
        if problem is not None:
            results.append(
                admin_pb2.DeleteAclsFilterResult(error_code=_INVALID, error_message=problem)  # type: ignore[arg-type]
            )
            continue
        matched = [(binding, acl_id) for binding, acl_id in stored if selection.matches(binding)]
        doomed.update(acl_id for _, acl_id in matched)
        results.append(
            admin_pb2.DeleteAclsFilterResult(
                matching_acls=[binding.to_proto() for binding, _ in matched]
            )
        )
    if len(doomed) > ACLS_PER_REQUEST_MAX:
        message = _too_many(len(doomed), "delete")
        return [
            admin_pb2.DeleteAclsFilterResult(error_code=_INVALID, error_message=message)  # type: ignore[arg-type]
            for _ in filters
        ]
    for acl_id in sorted(doomed):
        changes.remove_acl(acl_id)
    return results


def _order(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission,
    )
