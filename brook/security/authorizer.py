"""Who may do what: Kafka's StandardAuthorizer over the ACLs in the metadata image.

Every service holds one ``Authorizer`` (built from its configuration by the runtime,
brook/server.py) and feeds it the image's ``AccessControlEntryRecord``s whenever they change
(``follow``: on a snapshot or a delta with ``security_changed``); the index is rebuilt then,
never per request. ``authorize`` answers one action with Kafka's rules:

- ``authorizer.class.name`` empty: authorization is off and everything is allowed (Kafka's
  default); ``org.apache.kafka.metadata.authorizer.StandardAuthorizer`` or ``brook`` turns it on.
- A principal in ``super.users`` is always allowed.
- An ACL applies when its resource type is the action's, its pattern matches the resource name
  (LITERAL: the same name, or the name ``*``; PREFIXED: a prefix of the name), its principal is
  the caller's or ``User:*`` and its host is the caller's address or ``*``.
- A DENY that applies to the operation (or to ALL) wins over every ALLOW.
- Otherwise an ALLOW of the operation, of ALL, or of an operation implying it allows:
  READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
- No ACL at all on the resource (for anyone): ``allow.everyone.if.no.acl.found`` decides
  (false by default, so a resource without ACLs is closed).
- IDEMPOTENT_WRITE on the cluster is also granted by WRITE on any topic (KIP-679), as Kafka's
  ``authorizeByResourceType`` decides it.

Mutated only from one event loop (the one that follows metadata), and never across an await.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from brook.config import (
    ALLOW_EVERYONE_IF_NO_ACL_FOUND,
    AUTHORIZER_CLASS_NAME,
    SUPER_USERS,
    Config,
    parse_super_users,
)
from brook.errors import ErrorCode
from brook.metadata.delta import MetadataDelta
from brook.metadata.image import MetadataImage
from brook.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from brook.security.principal import WILDCARD, Principal
from brook.v1 import metadata_pb2

__all__ = [
    "ALL",
    "ALTER",
    "ALTER_CONFIGS",
    "CLUSTER",
    "CLUSTER_ACTION",
    "CLUSTER_NAME",
    "CREATE",
    "DELETE",
    "DESCRIBE",
    "DESCRIBE_CONFIGS",
    "GROUP",
    "IDEMPOTENT_WRITE",
    "READ",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "WILDCARD_RESOURCE",
    "WRITE",
    "Action",
    "Authorizer",
    "cluster_action",
    "operation_name",
    "resource_type_name",
]

_EMPTY_IMAGE: Final = MetadataImage()

# The model's codes (brook.security.acl), as the plain ints the records hold.
TOPIC: Final = int(ResourceType.TOPIC)
GROUP: Final = int(ResourceType.GROUP)
CLUSTER: Final = int(ResourceType.CLUSTER)
TRANSACTIONAL_ID: Final = int(ResourceType.TRANSACTIONAL_ID)

ALL: Final = int(Operation.ALL)
READ: Final = int(Operation.READ)
WRITE: Final = int(Operation.WRITE)
CREATE: Final = int(Operation.CREATE)
DELETE: Final = int(Operation.DELETE)
ALTER: Final = int(Operation.ALTER)
DESCRIBE: Final = int(Operation.DESCRIBE)
CLUSTER_ACTION: Final = int(Operation.CLUSTER_ACTION)
DESCRIBE_CONFIGS: Final = int(Operation.DESCRIBE_CONFIGS)
ALTER_CONFIGS: Final = int(Operation.ALTER_CONFIGS)
IDEMPOTENT_WRITE: Final = int(Operation.IDEMPOTENT_WRITE)

_ANY_PRINCIPAL: Final = str(WILDCARD)

_DENY: Final = int(Permission.DENY)
_ALLOW: Final = int(Permission.ALLOW)
_LITERAL: Final = int(PatternType.LITERAL)
_PREFIXED: Final = int(PatternType.PREFIXED)

# The operations an ALLOW of each operation grants besides itself (Kafka's implication rules).
_IMPLIED: Final[Mapping[int, frozenset[int]]] = {
    READ: frozenset({DESCRIBE}),
    WRITE: frozenset({DESCRIBE}),
    DELETE: frozenset({DESCRIBE}),
    ALTER: frozenset({DESCRIBE}),
    ALTER_CONFIGS: frozenset({DESCRIBE_CONFIGS}),
}

# A resource name no ACL can name literally: asking about it finds only the wildcard and
# prefix ACLs (Kafka's authorizeByResourceType checks the name "hardcode" for the same reason).
_UNNAMED_RESOURCE: Final = "\0"


def operation_name(operation: int) -> str:
    """Kafka's name of an operation: READ, DESCRIBE_CONFIGS, ..."""
    return Operation(operation).name


def resource_type_name(resource_type: int) -> str:
    """Kafka's name of a resource type: TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID."""
    return ResourceType(resource_type).name


_DENIAL_CODES: Final[Mapping[int, ErrorCode]] = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a request needs: ``operation`` on the resource (``resource_type``,
    ``name``)."""

    resource_type: int
    name: str
    operation: int
    cluster_grants: bool = False
    """The same operation on the cluster grants it too (CREATE of a topic, as Kafka's
    CreateTopics and auto-creation allow)."""

    @property
    def denial_code(self) -> ErrorCode:
        """Kafka's error for a denial: TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
        return _DENIAL_CODES.get(self.resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    def __str__(self) -> str:
        return (
            f"{operation_name(self.operation)} on {resource_type_name(self.resource_type)} "
            f"{self.name!r}"
        )


def cluster_action(operation: int) -> Action:
    """``operation`` on the cluster."""
    return Action(CLUSTER, CLUSTER_NAME, operation)


_Acl = metadata_pb2.AccessControlEntryRecord


@dataclass(slots=True)
class _TypeIndex:
    """The ACLs of one resource type, by how they match a name."""

    literal: dict[str, list[metadata_pb2.AccessControlEntryRecord]] = field(default_factory=dict)
    prefixed: dict[str, list[metadata_pb2.AccessControlEntryRecord]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)
    """The lengths of the prefixes in ``prefixed``, ascending."""

    def matching(self, name: str) -> list[metadata_pb2.AccessControlEntryRecord]:
        """Every ACL whose pattern matches ``name``, whoever it names."""
        found = list(self.literal.get(name, ()))
        if name != WILDCARD_RESOURCE:
            found.extend(self.literal.get(WILDCARD_RESOURCE, ()))
        for length in self.prefix_lengths:
            if length > len(name):
                break
            found.extend(self.prefixed.get(name[:length], ()))
        return found


class Authorizer:
    """Answers whether a principal connecting from a host may perform an operation on a
    resource; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        enabled: bool,
        super_users: Iterable[Principal] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._index: dict[int, _TypeIndex] = {}
        self._image: MetadataImage | None = None
        # Whether the ACLs are the cluster's (see ``use``): until then only super users pass.
        self._ready = False

    @classmethod
    def from_config(cls, config: Config) -> Authorizer:
        """The authorizer the security keys describe (validated by the configuration)."""
        return cls(
            enabled=bool(config.get_string(AUTHORIZER_CLASS_NAME)),
            super_users=parse_super_users(config.get_string(SUPER_USERS)),
            allow_if_no_acl=config.get_bool(ALLOW_EVERYONE_IF_NO_ACL_FOUND),
        )

    def load(self, acls: Iterable[metadata_pb2.AccessControlEntryRecord]) -> None:
        """Replaces the ACLs the answers come from (and makes the authorizer ready: see
        ``use``)."""
        index: dict[int, _TypeIndex] = {}
        for acl in acls:
            by_type = index.setdefault(acl.resource_type, _TypeIndex())
            if acl.pattern_type == _LITERAL:
                by_type.literal.setdefault(acl.resource_name, []).append(acl)
            elif acl.pattern_type == _PREFIXED and acl.resource_name:
                by_type.prefixed.setdefault(acl.resource_name, []).append(acl)
        for by_type in index.values():
            by_type.prefix_lengths = sorted({len(prefix) for prefix in by_type.prefixed})
        self._index = index
        self._ready = True

    def use(self, image: MetadataImage, *, received: bool = True) -> None:
        """Answers from ``image``'s ACLs (loaded now; not at all while off) and resolves topic
        ids in it. ``received``: the image holds the process's metadata (False: it has not
        received any yet). Until it has, the authorizer is not ready: it refuses everyone but
        the super users, as Kafka's StandardAuthorizer does until its first load, rather than
        answering from no ACLs at all (which would let allow.everyone.if.no.acl.found open
        what a DENY closes); callers that can make the client retry do (``ready``)."""
        self._image = image
        if self.enabled:
            self.load(image.acls.values())
            self._ready = received

    @property
    def ready(self) -> bool:
        """Whether the ACLs are the cluster's (always, when authorization is off)."""
        return self._ready or not self.enabled

    def follow(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Keeps up with ``image`` after the update ``delta`` describes (the process received
        metadata: from now on the authorizer is ready): reloads the ACLs if it changed them."""
        if delta.snapshot or delta.security_changed or image is not self._image or not self._ready:
            self.use(image)

    @property
    def image(self) -> MetadataImage:
        """The image last followed (an empty one before the first): its SCRAM credentials
        authenticate gRPC callers (brook.security.grpc_identity)."""
        return _EMPTY_IMAGE if self._image is None else self._image

    def topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with ``topic_id`` in the image last followed; None if unknown
        (rules that name topics by id check the name, as Kafka does)."""
        topic = None if self._image is None else self._image.topics.get(topic_id)
        return None if topic is None else topic.name

    def authorize(
        self,
        principal: Principal,
        host: str,
        operation: int,
        resource_type: int,
        resource_name: str,
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may perform ``operation`` on the
        resource (``resource_type``, ``resource_name``)."""
        if not self.enabled or principal in self.super_users:
            return True
        if not self._ready:
            return False
        if self._decide(principal, host, operation, resource_type, resource_name):
            return True
        if resource_type == CLUSTER and operation == IDEMPOTENT_WRITE:
            return self.authorize_any(principal, host, WRITE, TOPIC)
        return False

    def permits(self, principal: Principal, host: str, action: Action) -> bool:
        """Whether ``principal`` connecting from ``host`` may take ``action``."""
        allowed = self.authorize(
            principal, host, action.operation, action.resource_type, action.name
        )
        if allowed or not action.cluster_grants:
            return allowed
        return self.authorize(principal, host, action.operation, CLUSTER, CLUSTER_NAME)

    def first_denied(
        self, principal: Principal, host: str, actions: Iterable[Action]
    ) -> Action | None:
        """The first of ``actions`` that ``principal`` may not take; None if it may take all."""
        if not self.enabled or principal in self.super_users:
            return None
        for action in actions:
            if not self.permits(principal, host, action):
                return action
        return None

    def authorize_any(
        self, principal: Principal, host: str, operation: int, resource_type: int
    ) -> bool:
        """Whether ``principal`` may perform ``operation`` on at least one resource of
        ``resource_type`` (Kafka's ``authorizeByResourceType``): an ALLOW that applies to
        the caller and is not covered by a DENY (a DENY of the same literal name, a DENY
        prefix of its name, or a DENY of every name)."""
        if not self.enabled or principal in self.super_users:
            return True
        if not self._ready:
            return False
        if self._decide(principal, host, operation, resource_type, _UNNAMED_RESOURCE):
            return True
        by_type = self._index.get(resource_type)
        if by_type is None:
            return False
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allowed: list[tuple[int, str]] = []
        patterns_by_type: tuple[tuple[int, dict[str, list[_Acl]]], ...] = (
            (_LITERAL, by_type.literal),
            (_PREFIXED, by_type.prefixed),
        )
        for pattern_type, patterns in patterns_by_type:
            for name, acls in patterns.items():
                for acl in acls:
                    if not _names_caller(acl, principal, host) or acl.operation not in (
                        operation,
                        ALL,
                    ):
                        continue
                    if acl.permission_type == _DENY:
                        if pattern_type == _LITERAL and name == WILDCARD_RESOURCE:
                            return False
                        (deny_literal if pattern_type == _LITERAL else deny_prefixed).add(name)
                    elif acl.permission_type == _ALLOW:
                        if pattern_type == _LITERAL and name == WILDCARD_RESOURCE:
                            return True
                        allowed.append((pattern_type, name))
        for pattern_type, name in allowed:
            if pattern_type == _LITERAL and name in deny_literal:
                continue
            if not any(name[:length] in deny_prefixed for length in range(1, len(name) + 1)):
                return True
        return False

    def _decide(
        self,
        principal: Principal,
        host: str,
        operation: int,
        resource_type: int,
        resource_name: str,
    ) -> bool:
        by_type = self._index.get(resource_type)
        acls = by_type.matching(resource_name) if by_type is not None else []
        if not acls:
            return self.allow_if_no_acl
        allowed = False
        for acl in acls:
            if not _names_caller(acl, principal, host):
                continue
            if acl.permission_type == _DENY:
                if acl.operation in (operation, ALL):
                    return False
            elif acl.permission_type == _ALLOW and (
                acl.operation in (operation, ALL)
                or operation in _IMPLIED.get(acl.operation, frozenset())
            ):
                allowed = True
        return allowed


def _names_caller(
    acl: metadata_pb2.AccessControlEntryRecord, principal: Principal, host: str
) -> bool:
    """Whether ``acl`` applies to ``principal`` connecting from ``host``."""
    return acl.principal in (_ANY_PRINCIPAL, str(principal)) and acl.host in (WILDCARD_HOST, host)
