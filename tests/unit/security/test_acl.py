"""The ACL model (brook.security.acl): Kafka's validation of bindings, its filter semantics,
and Kafka's names for the command line."""

from __future__ import annotations

import dataclasses

import pytest

from brook.security.acl import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    kafka_name,
    parse_name,
)
from brook.v1 import metadata_pb2

READ_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    Operation.READ,
    Permission.ALLOW,
)


def _with(**changes: object) -> AclBinding:
    return dataclasses.replace(READ_ORDERS, **changes)  # type: ignore[arg-type]


def test_a_valid_binding_survives_the_record_and_proto_round_trips() -> None:
    READ_ORDERS.validate()
    record = READ_ORDERS.to_record(b"\x01" * 16)
    assert record.id == b"\x01" * 16
    assert record.resource_type == metadata_pb2.ACL_RESOURCE_TYPE_TOPIC
    assert record.operation == metadata_pb2.ACL_OPERATION_READ
    assert AclBinding.from_proto(record) == READ_ORDERS
    assert AclBinding.from_proto(READ_ORDERS.to_proto()) == READ_ORDERS


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"resource_type": ResourceType.ANY}, "resource type ANY"),
        ({"resource_type": ResourceType.UNKNOWN}, "resource type UNKNOWN"),
        ({"pattern_type": PatternType.MATCH}, "pattern type MATCH"),
        ({"pattern_type": PatternType.ANY}, "pattern type ANY"),
        ({"operation": Operation.ANY}, "operation ANY"),
        ({"permission": Permission.ANY}, "permission type ANY"),
        ({"permission": Permission.UNKNOWN}, "permission type UNKNOWN"),
        ({"resource_name": ""}, "resource name must not be empty"),
        ({"principal": "alice"}, "not a principal"),
        ({"principal": "User:"}, "not a principal"),
        ({"host": ""}, "host must not be empty"),
        ({"resource_name": "*", "pattern_type": PatternType.PREFIXED}, "LITERAL only"),
        ({"resource_type": ResourceType.CLUSTER, "resource_name": "prod"}, "kafka-cluster"),
    ],
)
def test_kafkas_rules_refuse_an_invalid_binding_naming_the_problem(
    changes: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        _with(**changes).validate()


def test_cluster_wildcard_and_prefixed_bindings_are_valid() -> None:
    _with(resource_type=ResourceType.CLUSTER, resource_name="kafka-cluster").validate()
    _with(resource_name="*").validate()
    _with(resource_name="orders-", pattern_type=PatternType.PREFIXED).validate()
    _with(principal="User:*", host="10.0.0.1", permission=Permission.DENY).validate()


def test_an_unknown_wire_code_reads_as_unknown_and_is_refused() -> None:
    binding = AclBinding.from_proto(
        metadata_pb2.AccessControlEntryRecord(
            resource_type=2,
            resource_name="t",
            pattern_type=3,
            principal="User:a",
            host="*",
            operation=99,  # type: ignore[arg-type]
            permission_type=3,
        )
    )
    assert binding.operation == Operation.UNKNOWN
    with pytest.raises(ValueError, match="operation UNKNOWN"):
        binding.validate()


PREFIXED_ORDERS = _with(resource_name="orders-", pattern_type=PatternType.PREFIXED)
WILDCARD_TOPIC = _with(resource_name="*")
OTHER_TOPIC = _with(resource_name="payments")
GROUP = _with(resource_type=ResourceType.GROUP, resource_name="orders-eu")
ALL_BINDINGS = (READ_ORDERS, PREFIXED_ORDERS, WILDCARD_TOPIC, OTHER_TOPIC, GROUP)


@pytest.mark.parametrize(
    ("selection", "selected"),
    [
        (AclBindingFilter(), ALL_BINDINGS),
        (AclBindingFilter(ResourceType.TOPIC), ALL_BINDINGS[:4]),
        # A name with ANY: the bindings of exactly that name, whatever their pattern type.
        (AclBindingFilter(ResourceType.ANY, "orders-"), (PREFIXED_ORDERS,)),
        (AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL), (READ_ORDERS,)),
        (AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.PREFIXED), ()),
        (AclBindingFilter(pattern_type=PatternType.PREFIXED), (PREFIXED_ORDERS,)),
        # MATCH: what applies to a topic of that name (literal, wildcard, matching prefixes).
        (
            AclBindingFilter(ResourceType.TOPIC, "orders-eu", PatternType.MATCH),
            (PREFIXED_ORDERS, WILDCARD_TOPIC),
        ),
        (
            AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.MATCH),
            (READ_ORDERS, WILDCARD_TOPIC),
        ),
        (
            AclBindingFilter(ResourceType.ANY, "orders-eu", PatternType.MATCH),
            (*ALL_BINDINGS[1:3], GROUP),
        ),
        (AclBindingFilter(principal="User:bob"), ()),
        (AclBindingFilter(principal="User:alice", host="*"), ALL_BINDINGS),
        (AclBindingFilter(host="10.0.0.1"), ()),
        (AclBindingFilter(operation=Operation.WRITE), ()),
        (AclBindingFilter(operation=Operation.READ, permission=Permission.ALLOW), ALL_BINDINGS),
        (AclBindingFilter(permission=Permission.DENY), ()),
    ],
)
def test_filters_select_as_kafkas_do(
    selection: AclBindingFilter, selected: tuple[AclBinding, ...]
) -> None:
    assert tuple(b for b in ALL_BINDINGS if selection.matches(b)) == selected
    assert AclBindingFilter.from_proto(selection.to_proto()) == selection


def test_a_filter_with_an_unknown_part_is_refused() -> None:
    AclBindingFilter().validate()
    with pytest.raises(ValueError, match="operation is unknown"):
        AclBindingFilter(operation=Operation.UNKNOWN).validate()
    with pytest.raises(ValueError, match="resource type is unknown"):
        AclBindingFilter(ResourceType.UNKNOWN).validate()


@pytest.mark.parametrize(
    ("kind", "text", "member"),
    [
        (ResourceType, "Topic", ResourceType.TOPIC),
        (ResourceType, "transactional-id", ResourceType.TRANSACTIONAL_ID),
        (ResourceType, "TransactionalId", ResourceType.TRANSACTIONAL_ID),
        (Operation, "ClusterAction", Operation.CLUSTER_ACTION),
        (Operation, "IDEMPOTENT_WRITE", Operation.IDEMPOTENT_WRITE),
        (Operation, "describeconfigs", Operation.DESCRIBE_CONFIGS),
        (Operation, "All", Operation.ALL),
        (Permission, "Allow", Permission.ALLOW),
        (Permission, "deny", Permission.DENY),
        (PatternType, "Prefixed", PatternType.PREFIXED),
        (PatternType, "literal", PatternType.LITERAL),
    ],
)
def test_kafkas_names_parse_in_any_case(kind: type, text: str, member: object) -> None:
    assert parse_name(kind, text) == member


def test_names_print_as_kafka_spells_them_and_unknown_is_no_name() -> None:
    assert kafka_name(Operation.CLUSTER_ACTION) == "ClusterAction"
    assert kafka_name(ResourceType.TRANSACTIONAL_ID) == "TransactionalId"
    assert kafka_name(Operation.IDEMPOTENT_WRITE) == "IdempotentWrite"
    with pytest.raises(ValueError, match="'Unknown' is not an operation"):
        parse_name(Operation, "Unknown")
    with pytest.raises(ValueError, match="Read, Write"):
        parse_name(Operation, "Fly")


def test_bindings_print_as_kafka_acls_lists_them() -> None:
    assert str(PREFIXED_ORDERS) == (
        "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED) "
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    )
