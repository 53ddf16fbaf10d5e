"""Kafka's ACL model: bindings, the filters that select them, and Kafka's names for their parts.

An ``AclBinding`` is one access control entry (Kafka's AclBinding: a resource pattern and an
entry): *principal* from *host* is allowed or denied *operation* on the resources of a type
whose names match a pattern (``LITERAL``: that name, or every name for ``*``; ``PREFIXED``:
every name starting with it). It is stored in the metadata log as an
``AccessControlEntryRecord`` under a 16-byte id. ``AclBinding.validate`` applies Kafka's rules
for a binding that is to be created; ``AclBindingFilter.matches`` is Kafka's filter semantics,
which CreateAcls' duplicate check, DescribeAcls and DeleteAcls all use.

Enum values are Kafka's wire codes, which are also those of the metadata proto enums
(AclResourceType, AclPatternType, AclOperation, AclPermissionType). Kafka's names for the
command line (``Topic``, ``ClusterAction``, ``Allow``, ``Prefixed``, ...) parse case-insensitively
and with or without underscores; bindings print as kafka-acls lists them.

This module is the one home of the model: the authorizer (brook.security.authorizer) decides
whether a concrete resource is covered, using the same enums.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Self, TypeVar

from brook.security.principal import Principal
from brook.v1 import admin_pb2, metadata_pb2

__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "WILDCARD_HOST",
    "WILDCARD_RESOURCE",
    "AclBinding",
    "AclBindingFilter",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
    "kafka_name",
    "parse_name",
]

WILDCARD_RESOURCE: Final = "*"
"""A LITERAL resource name that matches every resource of its type."""
WILDCARD_HOST: Final = "*"
"""An ACL host that matches every client address."""
CLUSTER_NAME: Final = "kafka-cluster"
"""The only name of the CLUSTER resource (Kafka's)."""


class ResourceType(enum.IntEnum):
    UNKNOWN = metadata_pb2.ACL_RESOURCE_TYPE_UNSPECIFIED
    ANY = metadata_pb2.ACL_RESOURCE_TYPE_ANY
    TOPIC = metadata_pb2.ACL_RESOURCE_TYPE_TOPIC
    GROUP = metadata_pb2.ACL_RESOURCE_TYPE_GROUP
    CLUSTER = metadata_pb2.ACL_RESOURCE_TYPE_CLUSTER
    TRANSACTIONAL_ID = metadata_pb2.ACL_RESOURCE_TYPE_TRANSACTIONAL_ID
    DELEGATION_TOKEN = metadata_pb2.ACL_RESOURCE_TYPE_DELEGATION_TOKEN
    USER = metadata_pb2.ACL_RESOURCE_TYPE_USER


class PatternType(enum.IntEnum):
    UNKNOWN = metadata_pb2.ACL_PATTERN_TYPE_UNSPECIFIED
    ANY = metadata_pb2.ACL_PATTERN_TYPE_ANY
    MATCH = metadata_pb2.ACL_PATTERN_TYPE_MATCH
    LITERAL = metadata_pb2.ACL_PATTERN_TYPE_LITERAL
    PREFIXED = metadata_pb2.ACL_PATTERN_TYPE_PREFIXED


class Operation(enum.IntEnum):
    UNKNOWN = metadata_pb2.ACL_OPERATION_UNSPECIFIED
    ANY = metadata_pb2.ACL_OPERATION_ANY
    ALL = metadata_pb2.ACL_OPERATION_ALL
    READ = metadata_pb2.ACL_OPERATION_READ
    WRITE = metadata_pb2.ACL_OPERATION_WRITE
    CREATE = metadata_pb2.ACL_OPERATION_CREATE
    DELETE = metadata_pb2.ACL_OPERATION_DELETE
    ALTER = metadata_pb2.ACL_OPERATION_ALTER
    DESCRIBE = metadata_pb2.ACL_OPERATION_DESCRIBE
    CLUSTER_ACTION = metadata_pb2.ACL_OPERATION_CLUSTER_ACTION
    DESCRIBE_CONFIGS = metadata_pb2.ACL_OPERATION_DESCRIBE_CONFIGS
    ALTER_CONFIGS = metadata_pb2.ACL_OPERATION_ALTER_CONFIGS
    IDEMPOTENT_WRITE = metadata_pb2.ACL_OPERATION_IDEMPOTENT_WRITE
    CREATE_TOKENS = metadata_pb2.ACL_OPERATION_CREATE_TOKENS
    DESCRIBE_TOKENS = metadata_pb2.ACL_OPERATION_DESCRIBE_TOKENS


class Permission(enum.IntEnum):
    UNKNOWN = metadata_pb2.ACL_PERMISSION_TYPE_UNSPECIFIED
    ANY = metadata_pb2.ACL_PERMISSION_TYPE_ANY
    DENY = metadata_pb2.ACL_PERMISSION_TYPE_DENY
    ALLOW = metadata_pb2.ACL_PERMISSION_TYPE_ALLOW


SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, frozenset[Operation]]] = {
    resource_type: frozenset({Operation.ALL, *operations})
    for resource_type, operations in (
        (
            ResourceType.TOPIC,
            (
                Operation.READ,
                Operation.WRITE,
                Operation.CREATE,
                Operation.DESCRIBE,
                Operation.DELETE,
                Operation.ALTER,
                Operation.DESCRIBE_CONFIGS,
                Operation.ALTER_CONFIGS,
            ),
        ),
        (ResourceType.GROUP, (Operation.READ, Operation.DESCRIBE, Operation.DELETE)),
        (
            ResourceType.CLUSTER,
            (
                Operation.CREATE,
                Operation.CLUSTER_ACTION,
                Operation.DESCRIBE_CONFIGS,
                Operation.ALTER_CONFIGS,
                Operation.IDEMPOTENT_WRITE,
                Operation.ALTER,
                Operation.DESCRIBE,
            ),
        ),
        (ResourceType.TRANSACTIONAL_ID, (Operation.DESCRIBE, Operation.WRITE)),
        (ResourceType.DELEGATION_TOKEN, (Operation.DESCRIBE,)),
        (ResourceType.USER, (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS)),
    )
}
"""The operations that mean something on each resource type (kafka-acls refuses the others;
the brokers store any)."""

_E = TypeVar("_E", ResourceType, PatternType, Operation, Permission)


def kafka_name(member: ResourceType | PatternType | Operation | Permission) -> str:
    """Kafka's command-line name: ``Topic``, ``TransactionalId``, ``ClusterAction``,
    ``Allow``, ``Prefixed``."""
    return "".join(word.capitalize() for word in member.name.split("_"))


def parse_name(kind: type[_E], text: str) -> _E:
    """The member of ``kind`` that ``text`` names (``ClusterAction``, ``cluster_action``,
    ``CLUSTER-ACTION``); UNKNOWN is never a name. ValueError listing the names otherwise."""
    folded = text.replace("_", "").replace("-", "").lower()
    for member in kind:
        if member.name != "UNKNOWN" and member.name.replace("_", "").lower() == folded:
            return member
    names = ", ".join(kafka_name(m) for m in kind if m.name != "UNKNOWN")
    word = _KIND_WORDS[kind]
    article = "an" if word[0] in "aeiou" else "a"
    raise ValueError(f"{text!r} is not {article} {word} (one of {names})")


_KIND_WORDS: Final[Mapping[type, str]] = {
    ResourceType: "resource type",
    PatternType: "resource pattern type",
    Operation: "operation",
    Permission: "permission type",
}


def _member(kind: type[_E], code: int) -> _E:
    """The member for a wire code; UNKNOWN for a code this version does not know (as Kafka)."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is allowed (or denied) ``operation`` on the
    resources of ``resource_type`` whose names match ``resource_name`` by ``pattern_type``."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """Kafka's rules for a binding to be created; ValueError naming the first problem."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise ValueError(f"invalid resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(
                f"invalid pattern type {self.pattern_type.name} (only LITERAL or PREFIXED)"
            )
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise ValueError(f"invalid operation {self.operation.name}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise ValueError(f"invalid permission type {self.permission.name}")
        if not self.resource_name:
            raise ValueError("the resource name must not be empty")
        if self.resource_name == WILDCARD_RESOURCE and self.pattern_type != PatternType.LITERAL:
            raise ValueError(f"the wildcard resource name {WILDCARD_RESOURCE!r} is LITERAL only")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise ValueError(
                f"the only valid name of the CLUSTER resource is {CLUSTER_NAME!r}, not "
                f"{self.resource_name!r}"
            )
        Principal.parse(self.principal)
        if not self.host:
            raise ValueError(f"the host must not be empty ({WILDCARD_HOST!r}: every host)")

    def to_proto(self) -> admin_pb2.AclBinding:
        return admin_pb2.AclBinding(
            resource_type=self.resource_type.value,
            resource_name=self.resource_name,
            pattern_type=self.pattern_type.value,
            principal=self.principal,
            host=self.host,
            operation=self.operation.value,
            permission_type=self.permission.value,
        )

    @classmethod
    def from_proto(
        cls, message: admin_pb2.AclBinding | metadata_pb2.AccessControlEntryRecord
    ) -> Self:
        """From an admin AclBinding or a stored AccessControlEntryRecord (same fields)."""
        return cls(
            _member(ResourceType, message.resource_type),
            message.resource_name,
            _member(PatternType, message.pattern_type),
            message.principal,
            message.host,
            _member(Operation, message.operation),
            _member(Permission, message.permission_type),
        )

    def to_record(self, acl_id: bytes) -> metadata_pb2.AccessControlEntryRecord:
        return metadata_pb2.AccessControlEntryRecord(
            id=acl_id,
            resource_type=self.resource_type.value,
            resource_name=self.resource_name,
            pattern_type=self.pattern_type.value,
            principal=self.principal,
            host=self.host,
            operation=self.operation.value,
            permission_type=self.permission.value,
        )

    def resource_pattern(self) -> str:
        """kafka-acls' text of the resource pattern."""
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, "
            f"name={self.resource_name}, patternType={self.pattern_type.name})"
        )

    def entry(self) -> str:
        """kafka-acls' text of the access control entry."""
        return (
            f"(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission.name})"
        )

    def __str__(self) -> str:
        return f"{self.resource_pattern()} {self.entry()}"


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects ACLs (Kafka's AclBindingFilter). ANY matches every value of its field, a None
    name, principal or host every one; pattern type MATCH selects the bindings that would
    apply to a resource named ``resource_name``: LITERAL ones of that name or the wildcard,
    and PREFIXED ones whose prefix it starts with."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        """A filter with an UNKNOWN part matches nothing Kafka can name: ValueError, as
        Kafka refuses it."""
        for part in (
            self.resource_type,
            self.pattern_type,
            self.operation,
            self.permission,
        ):
            if part.name == "UNKNOWN":
                raise ValueError(f"the filter's {_KIND_WORDS[type(part)]} is unknown")

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if not self._entry_matches(binding):
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type != PatternType.MATCH:
            return name == binding.resource_name
        if binding.pattern_type == PatternType.LITERAL:
            return binding.resource_name in (name, WILDCARD_RESOURCE)
        return binding.pattern_type == PatternType.PREFIXED and name.startswith(
            binding.resource_name
        )

    def _entry_matches(self, binding: AclBinding) -> bool:
        return (
            self.principal in (None, binding.principal)
            and self.host in (None, binding.host)
            and self.operation in (Operation.ANY, binding.operation)
            and self.permission in (Permission.ANY, binding.permission)
        )

    def to_proto(self) -> admin_pb2.AclBindingFilter:
        message = admin_pb2.AclBindingFilter(
            resource_type=self.resource_type.value,
            pattern_type=self.pattern_type.value,
            operation=self.operation.value,
            permission_type=self.permission.value,
        )
        if self.resource_name is not None:
            message.resource_name = self.resource_name
        if self.principal is not None:
            message.principal = self.principal
        if self.host is not None:
            message.host = self.host
        return message

    @classmethod
    def from_proto(cls, message: admin_pb2.AclBindingFilter) -> Self:
        return cls(
            _member(ResourceType, message.resource_type),
            message.resource_name if message.HasField("resource_name") else None,
            _member(PatternType, message.pattern_type),
            message.principal if message.HasField("principal") else None,
            message.host if message.HasField("host") else None,
            _member(Operation, message.operation),
            _member(Permission, message.permission_type),
        )
