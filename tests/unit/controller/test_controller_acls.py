"""ACL administration (CreateAcls / DescribeAcls / DeleteAcls) through the SDK and
``brook acls``, against a real (single-voter) controller: what is committed to the metadata
log, Kafka's validation and filter semantics, and the per-request bound."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterator

import pytest
from brook_controller.acls import ACLS_PER_REQUEST_MAX
from controller_support import InProcessController

from brook.cli import main
from brook.client.admin import Admin
from brook.client.errors import ApiError
from brook.errors import ErrorCode
from brook.security.acl import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from brook.v1 import admin_pb2, admin_pb2_grpc


@pytest.fixture
def controller(tmp_path: pytest.TempPathFactory) -> Iterator[InProcessController]:
    with InProcessController(tmp_path) as running:  # type: ignore[arg-type]
        running.wait_until_leader()
        yield running


@pytest.fixture
def admin(controller: InProcessController) -> Iterator[Admin]:
    with Admin(controller.address, default_api_timeout_ms=10_000) as client:
        yield client


WRITE_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders-",
    PatternType.PREFIXED,
    "User:alice",
    "*",
    Operation.WRITE,
    Permission.ALLOW,
)
READ_ORDERS = dataclasses.replace(
    WRITE_ORDERS,
    resource_name="orders-eu",
    pattern_type=PatternType.LITERAL,
    operation=Operation.READ,
)
DENY_GROUP = AclBinding(
    ResourceType.GROUP,
    "billing",
    PatternType.LITERAL,
    "User:mallory",
    "10.0.0.9",
    Operation.READ,
    Permission.DENY,
)


def _stored(controller: InProcessController) -> list[AclBinding]:
    """The ACLs in the committed metadata (a snapshot of the log), checking their ids."""
    acls = controller.image().acls
    assert all(len(acl_id) == 16 and acl.id == acl_id for acl_id, acl in acls.items())
    return sorted((AclBinding.from_proto(acl) for acl in acls.values()), key=str)


def test_created_acls_are_committed_once_each_and_an_invalid_one_alone_fails(
    controller: InProcessController, admin: Admin
) -> None:
    bad_cluster = dataclasses.replace(
        DENY_GROUP, resource_type=ResourceType.CLUSTER, resource_name="prod"
    )

    results = admin.create_acls([WRITE_ORDERS, bad_cluster, DENY_GROUP])

    assert results[WRITE_ORDERS] is None and results[DENY_GROUP] is None
    error = results[bad_cluster]
    assert isinstance(error, ApiError) and error.code == ErrorCode.INVALID_REQUEST
    assert "kafka-cluster" in error.message
    assert _stored(controller) == sorted([WRITE_ORDERS, DENY_GROUP], key=str)

    # Creating what exists (and naming it twice) adds nothing.
    assert admin.create_acls([WRITE_ORDERS, WRITE_ORDERS, READ_ORDERS]) == {
        WRITE_ORDERS: None,
        READ_ORDERS: None,
    }
    assert _stored(controller) == sorted([WRITE_ORDERS, READ_ORDERS, DENY_GROUP], key=str)


def test_describe_selects_with_kafkas_filter_semantics(admin: Admin) -> None:
    assert admin.create_acls([WRITE_ORDERS, READ_ORDERS, DENY_GROUP]) == dict.fromkeys(
        [WRITE_ORDERS, READ_ORDERS, DENY_GROUP]
    )

    assert set(admin.describe_acls(AclBindingFilter())) == {WRITE_ORDERS, READ_ORDERS, DENY_GROUP}
    applying = AclBindingFilter(ResourceType.TOPIC, "orders-eu", PatternType.MATCH)
    assert set(admin.describe_acls(applying)) == {WRITE_ORDERS, READ_ORDERS}
    literal = AclBindingFilter(ResourceType.TOPIC, "orders-eu", PatternType.LITERAL)
    assert admin.describe_acls(literal) == [READ_ORDERS]
    assert admin.describe_acls(AclBindingFilter(permission=Permission.DENY)) == [DENY_GROUP]
    assert admin.describe_acls(AclBindingFilter(principal="User:bob")) == []
    with pytest.raises(ApiError) as refused:
        admin.describe_acls(AclBindingFilter(operation=Operation.UNKNOWN))
    assert refused.value.code == ErrorCode.INVALID_REQUEST


def test_delete_removes_every_match_and_reports_it_per_filter(
    controller: InProcessController, admin: Admin
) -> None:
    admin.create_acls([WRITE_ORDERS, READ_ORDERS, DENY_GROUP])
    alice = AclBindingFilter(principal="User:alice")
    orders_eu = AclBindingFilter(ResourceType.TOPIC, "orders-eu", PatternType.LITERAL)
    invalid = AclBindingFilter(permission=Permission.UNKNOWN)

    results = admin.delete_acls([alice, orders_eu, invalid])

    assert set(results[alice]) == {WRITE_ORDERS, READ_ORDERS}  # type: ignore[arg-type]
    # An ACL two filters match is reported by both (and removed once).
    assert results[orders_eu] == [READ_ORDERS]
    error = results[invalid]
    assert isinstance(error, ApiError) and error.code == ErrorCode.INVALID_REQUEST
    assert _stored(controller) == [DENY_GROUP]
    assert admin.delete_acls([alice]) == {alice: []}


def test_a_request_beyond_the_bound_changes_nothing(
    controller: InProcessController, admin: Admin
) -> None:
    many = [
        dataclasses.replace(WRITE_ORDERS, resource_name=f"t{i}")
        for i in range(ACLS_PER_REQUEST_MAX + 1)
    ]
    stub = admin_pb2_grpc.AdminServiceStub(controller._channel)  # type: ignore[no-untyped-call]
    response = stub.CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[b.to_proto() for b in many]), timeout=30
    )
    assert len(response.results) == len(many)
    assert {r.error_code for r in response.results} == {ErrorCode.INVALID_REQUEST}
    assert "more than 10000" in response.results[0].error_message
    assert _stored(controller) == []


def _brook_acls(controller: InProcessController, arguments: str) -> None:
    """``brook acls ARGUMENTS`` against the controller, in this process; it must succeed."""
    status = main(["acls", "--bootstrap-server", controller.address, *shlex.split(arguments)])
    assert status == 0, arguments


def _allow_alice(resource_type: ResourceType, name: str, operation: Operation) -> AclBinding:
    return AclBinding(
        resource_type, name, PatternType.LITERAL, "User:alice", "*", operation, Permission.ALLOW
    )


def test_brook_acls_adds_lists_and_removes_like_kafka_acls(
    controller: InProcessController, admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    add = "--add --allow-principal User:alice"
    _brook_acls(
        controller, f"{add} --operation Write --topic orders- --resource-pattern-type prefixed"
    )
    _brook_acls(controller, f"{add} --consumer --topic events --group billing")
    _brook_acls(
        controller,
        "--add --deny-principal User:mallory --deny-host 10.0.0.9 --operation Describe --cluster",
    )
    capsys.readouterr()

    assert set(admin.describe_acls(AclBindingFilter(principal="User:alice"))) == {
        WRITE_ORDERS,
        _allow_alice(ResourceType.TOPIC, "events", Operation.READ),
        _allow_alice(ResourceType.TOPIC, "events", Operation.DESCRIBE),
        _allow_alice(ResourceType.GROUP, "billing", Operation.READ),
    }
    _brook_acls(controller, "--list --topic orders-eu --resource-pattern-type match")
    assert capsys.readouterr().out == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders-, "
        "patternType=PREFIXED)`:\n"
        " \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n\n"
    )
    _brook_acls(controller, "--list --cluster")
    assert "(principal=User:mallory, host=10.0.0.9, operation=DESCRIBE, permissionType=DENY)" in (
        capsys.readouterr().out
    )

    # Without a principal, --remove deletes every ACL of the resource.
    _brook_acls(controller, "--remove --topic events --force")
    assert "name=events" in capsys.readouterr().out
    assert admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, "events")) == []
    _brook_acls(
        controller,
        "--remove --allow-principal User:alice --operation Write "
        "--topic orders- --resource-pattern-type prefixed --force",
    )
    assert WRITE_ORDERS not in admin.describe_acls(AclBindingFilter())


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("--add --allow-principal User:a --operation Write --group g",
         "Group does not support Write"),
        ("--add --allow-principal alice --topic t", "not a principal"),
        ("--add --topic t", "needs --allow-principal or --deny-principal"),
        ("--add --allow-principal User:a", "--add needs a resource"),
        ("--add --allow-principal User:a --topic t --resource-pattern-type match",
         "literal or prefixed"),
        ("--add --allow-host 10.0.0.1 --topic t", "--allow-host needs"),
        ("--add --allow-principal User:a --operation Fly --topic t", "'Fly' is not an operation"),
        ("--add --allow-principal User:a --topic '*' --resource-pattern-type prefixed",
         "LITERAL only"),
        ("--remove --force", "--remove needs a resource"),
    ],
)  # fmt: skip
def test_brook_acls_refuses_bad_usage_before_asking_the_cluster(
    arguments: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # No cluster listens here: a usage error is found first.
    assert main(["acls", "--bootstrap-server", "127.0.0.1:1", *shlex.split(arguments)]) == 2
    assert problem in capsys.readouterr().err
