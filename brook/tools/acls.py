"""``brook acls``: add, remove and list ACLs, as Kafka's kafka-acls.sh.

    brook acls --add --allow-principal User:alice --operation Write --operation Describe \\
        --topic orders- --resource-pattern-type prefixed
    brook acls --add --deny-principal User:mallory --deny-host 10.0.0.9 --operation Read --topic t
    brook acls --add --allow-principal User:bob --consumer --topic events --group billing
    brook acls --list [--topic events --resource-pattern-type match] [--principal User:alice]
    brook acls --remove --allow-principal User:alice --operation Write --topic orders- \\
        --resource-pattern-type prefixed --force

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and
``--cluster``. ``--add`` creates, for every resource, one ACL per allowed principal, host
(``--allow-host``, default ``*``) and operation (``--operation``, Kafka's names, default
``All``), and likewise for the denied ones. ``--producer`` (Write, Describe and Create on the
topics; Write and Describe on the transactional ids; IdempotentWrite on the cluster with
``--idempotent``) and ``--consumer`` (Read and Describe on the topics, Read on the groups)
stand for the usual operations. ``--remove`` deletes the ACLs so described, or, without a
principal, every ACL of the resources (asking first unless ``--force``). ``--list`` prints the
ACLs of the resources (every ACL without one), optionally only those of ``--principal``s.
``--resource-pattern-type``: literal (the default) or prefixed; match and any for ``--list``
and ``--remove`` (Kafka's filter meanings). Exit status: 0 on success, 1 when the cluster
refused a change or did not answer, 2 for bad usage (an operation a resource type does not
have, a malformed principal, ...).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from brook.admin_cli import EXIT_FAILED, EXIT_OK, UsageError, handler
from brook.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    kafka_name,
    parse_name,
)
from brook.security.principal import Principal

if TYPE_CHECKING:
    from brook.client.admin import Admin

__all__ = ["add_acls_command", "bindings_to_add", "filters_to_remove", "list_filters"]

_RESOURCE_OPTIONS = (
    ("topic", ResourceType.TOPIC),
    ("group", ResourceType.GROUP),
    ("transactional_id", ResourceType.TRANSACTIONAL_ID),
)


def add_acls_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "acls",
        help="add, remove and list ACLs (kafka-acls)",
        description="Add, remove or list ACLs (Kafka's resource patterns, principals, hosts, "
        "operations and permissions), as Kafka's kafka-acls.sh.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="create ACLs")
    action.add_argument("--remove", action="store_true", help="delete ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    for option, what in (
        ("--allow-principal", "a principal (Type:name) the ACLs allow"),
        ("--deny-principal", "a principal (Type:name) the ACLs deny"),
        ("--allow-host", f"a host the allowed principals may come from (default {WILDCARD_HOST})"),
        ("--deny-host", f"a host the denied principals are denied from (default {WILDCARD_HOST})"),
        ("--principal", "with --list: only the ACLs of this principal"),
    ):
        parser.add_argument(option, action="append", default=[], metavar="VALUE", help=what)
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="an operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
        "DescribeConfigs, AlterConfigs, IdempotentWrite, All); default All",
    )
    parser.add_argument("--topic", action="append", default=[], metavar="NAME")
    parser.add_argument("--group", action="append", default=[], metavar="NAME")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        default="literal",
        choices=("literal", "prefixed", "match", "any"),
        type=str.lower,
        help="how resource names match (default literal; match and any select ACLs)",
    )
    parser.add_argument(
        "--producer", action="store_true", help="the operations a producer needs (with --add)"
    )
    parser.add_argument(
        "--idempotent",
        action="store_true",
        help="with --producer: IdempotentWrite on the cluster too",
    )
    parser.add_argument(
        "--consumer", action="store_true", help="the operations a consumer needs (with --add)"
    )
    parser.add_argument(
        "--force", action="store_true", help="with --remove: do not ask for confirmation"
    )
    handler(parser, _acls)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [
        (resource_type, name)
        for option, resource_type in _RESOURCE_OPTIONS
        for name in getattr(args, option)
    ]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    for resource_type, name in resources:
        if not name:
            raise UsageError(f"an empty {kafka_name(resource_type)} name")
    return resources


def _pattern_type(args: argparse.Namespace) -> PatternType:
    return parse_name(PatternType, args.resource_pattern_type)


def _principals(texts: Sequence[str]) -> list[str]:
    for text in texts:
        try:
            Principal.parse(text)
        except ValueError as problem:
            raise UsageError(str(problem)) from None
    return list(texts)


def _operations(texts: Sequence[str]) -> list[Operation]:
    operations: list[Operation] = []
    for text in texts:
        try:
            operation = parse_name(Operation, text)
        except ValueError as problem:
            raise UsageError(str(problem)) from None
        if operation == Operation.ANY:
            raise UsageError("Any is not an operation an ACL can name")
        operations.append(operation)
    return operations or [Operation.ALL]


def _checked(resource_type: ResourceType, operations: Iterable[Operation]) -> None:
    """kafka-acls refuses an operation the resource type does not have."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    wrong = [op for op in operations if op not in supported]
    if wrong:
        raise UsageError(
            f"{kafka_name(resource_type)} does not support "
            f"{', '.join(kafka_name(op) for op in wrong)} (only "
            f"{', '.join(sorted(kafka_name(op) for op in supported))})"
        )


def _operations_by_resource(
    args: argparse.Namespace, resources: Sequence[tuple[ResourceType, str]]
) -> list[tuple[ResourceType, str, list[Operation]]]:
    """Each resource with its operations: --operation's, or --producer's and --consumer's."""
    if not (args.producer or args.consumer):
        if args.idempotent:
            raise UsageError("--idempotent goes with --producer")
        operations = _operations(args.operation)
        for resource_type, _ in resources:
            _checked(resource_type, operations)
        return [(resource_type, name, operations) for resource_type, name in resources]
    if args.operation or args.cluster:
        raise UsageError("--producer and --consumer take no --operation or --cluster")
    if not args.topic:
        raise UsageError("--producer and --consumer need --topic")
    if args.consumer and not args.group:
        raise UsageError("--consumer needs --group")
    wanted: dict[ResourceType, list[Operation]] = {}
    if args.producer:
        wanted[ResourceType.TOPIC] = [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE]
        wanted[ResourceType.TRANSACTIONAL_ID] = [Operation.WRITE, Operation.DESCRIBE]
    if args.consumer:
        wanted.setdefault(ResourceType.TOPIC, []).extend([Operation.READ, Operation.DESCRIBE])
        wanted[ResourceType.GROUP] = [Operation.READ]
    plan = [
        (resource_type, name, list(dict.fromkeys(wanted.get(resource_type, []))))
        for resource_type, name in resources
    ]
    if args.producer and args.idempotent:
        plan.append((ResourceType.CLUSTER, CLUSTER_NAME, [Operation.IDEMPOTENT_WRITE]))
    return [entry for entry in plan if entry[2]]


def _entries(
    args: argparse.Namespace,
) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) of every allowed and denied principal and host."""
    for principals, hosts, kind in (
        (args.allow_principal, args.allow_host, "allow"),
        (args.deny_principal, args.deny_host, "deny"),
    ):
        if hosts and not principals:
            raise UsageError(f"--{kind}-host needs --{kind}-principal")
        if any(not host for host in hosts):
            raise UsageError(f"an empty --{kind}-host")
    return [
        (principal, host, permission)
        for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, Permission.ALLOW),
            (args.deny_principal, args.deny_host, Permission.DENY),
        )
        for principal, host in itertools.product(_principals(principals), hosts or [WILDCARD_HOST])
    ]


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    """The ACLs ``--add`` creates; UsageError for what kafka-acls refuses."""
    pattern_type = _pattern_type(args)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    resources = _resources(args)
    if not resources and not (args.producer and args.idempotent):
        raise UsageError("--add needs a resource: --topic, --group, --transactional-id, --cluster")
    entries = _entries(args)
    if not entries:
        raise UsageError("--add needs --allow-principal or --deny-principal")
    bindings = [
        AclBinding(
            resource_type,
            name,
            PatternType.LITERAL if resource_type == ResourceType.CLUSTER else pattern_type,
            principal,
            host,
            operation,
            permission,
        )
        for resource_type, name, operations in _operations_by_resource(args, resources)
        for principal, host, permission in entries
        for operation in operations
    ]
    for binding in bindings:
        try:
            binding.validate()
        except ValueError as problem:
            raise UsageError(f"{binding}: {problem}") from None
    return list(dict.fromkeys(bindings))


def filters_to_remove(args: argparse.Namespace) -> list[AclBindingFilter]:
    """The filters ``--remove`` deletes with: the described ACLs, or every ACL of each
    resource when no principal is named."""
    resources = _resources(args)
    if not resources:
        raise UsageError(
            "--remove needs a resource: --topic, --group, --transactional-id, --cluster"
        )
    if args.producer or args.consumer:
        raise UsageError("--producer and --consumer go with --add")
    pattern_type = _pattern_type(args)
    entries = _entries(args)
    if not entries:
        if args.operation:
            raise UsageError("--operation with --remove needs a principal")
        return [AclBindingFilter(t, name, pattern_type) for t, name in resources]
    operations = _operations(args.operation)
    return [
        AclBindingFilter(t, name, pattern_type, principal, host, operation, permission)
        for t, name in resources
        for principal, host, permission in entries
        for operation in operations
    ]


def list_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """The filters ``--list`` shows the ACLs of."""
    if args.allow_principal or args.deny_principal or args.operation:
        raise UsageError("--list selects by resource and --principal only")
    resources = _resources(args)
    principals: list[str | None] = list(_principals(args.principal)) or [None]
    if not resources:
        return [AclBindingFilter(principal=p) for p in principals]
    pattern_type = _pattern_type(args)
    return [
        AclBindingFilter(t, name, pattern_type, principal=p)
        for t, name in resources
        for p in principals
    ]


def print_grouped(bindings: Iterable[AclBinding], heading: str) -> None:
    """kafka-acls' listing: each resource pattern, then its entries."""
    by_pattern: dict[str, list[str]] = {}
    for binding in bindings:
        by_pattern.setdefault(binding.resource_pattern(), []).append(binding.entry())
    for pattern, entries in by_pattern.items():
        print(f"{heading} `{pattern}`:")
        for entry in dict.fromkeys(entries):
            print(f" \t{entry}")
        print()


def _acls(admin: Admin, args: argparse.Namespace) -> int:
    if args.add:
        return _add(admin, args)
    if args.remove:
        return _remove(admin, args)
    _list(admin, list_filters(args))
    return EXIT_OK


def _add(admin: Admin, args: argparse.Namespace) -> int:
    bindings = bindings_to_add(args)
    print_grouped(bindings, "Adding ACLs for resource")
    status = EXIT_OK
    for binding, error in admin.create_acls(bindings, timeout_ms=args.timeout_ms).items():
        if error is not None:
            print(f"Error on {binding}: {error.code.name}: {error.message}", file=sys.stderr)
            status = EXIT_FAILED
    return status


def _remove(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.errors import ApiError

    filters = filters_to_remove(args)
    if not args.force:
        answer = input("Are you sure you want to remove ACLs matching the given filters? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Nothing removed.")
            return EXIT_OK
    status = EXIT_OK
    removed: list[AclBinding] = []
    for acl_filter, result in admin.delete_acls(filters, timeout_ms=args.timeout_ms).items():
        if isinstance(result, ApiError):
            print(f"Error on {acl_filter}: {result.code.name}: {result.message}", file=sys.stderr)
            status = EXIT_FAILED
        else:
            removed.extend(result)
    print_grouped(removed, "Removed ACLs for resource")
    if not removed and status == EXIT_OK:
        print("No ACL matched.")
    return status


def _list(admin: Admin, filters: Sequence[AclBindingFilter]) -> None:
    found: list[AclBinding] = []
    for acl_filter in filters:
        found.extend(admin.describe_acls(acl_filter))
    print_grouped(dict.fromkeys(found), "Current ACLs for resource")
