"""Kafka admin clients administering ACLs through the gateway (CreateAcls, DescribeAcls,
DeleteAcls): confluent-kafka's AdminClient (librdkafka) and kafkajs. What they create is what
the controllers store (read back with Brook's SDK), Kafka's filter semantics select what they
describe and delete, and an invalid binding is refused with INVALID_REQUEST and stored
nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from brook_gateway.protocol.kafka_messages import ApiKey
from node_scripts import run_node_json
from test_gateway_api_versions import librdkafka_log, versions_sent
from test_gateway_fuzz import kafka_gateways, kafka_request

from brook.client.admin import Admin
from brook.errors import ErrorCode
from brook.launcher import LocalCluster
from brook.security.acl import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S: Final = 20.0
NODE_TIMEOUT_S: Final = 90.0
SCRIPT: Final = Path(__file__).with_name("kafkajs_client.mjs")


@pytest.fixture(scope="module")
def brook_admin(compat_cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(compat_cluster.controller_bootstrap_servers) as admin:
        yield admin


def _stored(admin: Admin, principal: str) -> set[AclBinding]:
    return set(admin.describe_acls(AclBindingFilter(principal=principal)))


def _brook(binding: Any) -> AclBinding:
    """A confluent-kafka AclBinding as Brook's (the enum values are Kafka's codes)."""
    return AclBinding(
        ResourceType(binding.restype.value),
        binding.name,
        PatternType(binding.resource_pattern_type.value),
        binding.principal,
        binding.host,
        Operation(binding.operation.value),
        Permission(binding.permission_type.value),
    )


def test_confluent_admin_creates_describes_and_deletes_acls(
    bootstrap: str, brook_admin: Admin
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding as KafkaAclBinding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter as KafkaAclBindingFilter,
    )
    from confluent_kafka.admin import (
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        ResourceType as KafkaResourceType,
    )

    principal = "User:confluent-acls"
    with librdkafka_log() as lines:
        admin = AdminClient(
            {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000, "debug": "protocol"},
            logger=lines.logger,
        )
        write_orders = KafkaAclBinding(
            KafkaResourceType.TOPIC,
            "orders-",
            ResourcePatternType.PREFIXED,
            principal,
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        deny_read = KafkaAclBinding(
            KafkaResourceType.TOPIC,
            "orders-eu",
            ResourcePatternType.LITERAL,
            principal,
            "10.0.0.9",
            AclOperation.READ,
            AclPermissionType.DENY,
        )
        describe_cluster = KafkaAclBinding(
            KafkaResourceType.BROKER,  # Kafka's CLUSTER resource
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        created = admin.create_acls([write_orders, deny_read, describe_cluster])
        for future in created.values():
            assert future.result(CLIENT_TIMEOUT_S) is None
        expected = {_brook(b) for b in (write_orders, deny_read, describe_cluster)}
        assert _stored(brook_admin, principal) == expected

        applying = KafkaAclBindingFilter(
            KafkaResourceType.TOPIC,
            "orders-eu",
            ResourcePatternType.MATCH,
            principal,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        described = admin.describe_acls(applying).result(CLIENT_TIMEOUT_S)
        assert {_brook(b) for b in described} == {_brook(write_orders), _brook(deny_read)}

        topics_of_principal = KafkaAclBindingFilter(
            KafkaResourceType.TOPIC,
            None,
            ResourcePatternType.ANY,
            principal,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        deleted = admin.delete_acls([topics_of_principal])[topics_of_principal].result(
            CLIENT_TIMEOUT_S
        )
        assert {_brook(b) for b in deleted} == {_brook(write_orders), _brook(deny_read)}
        assert _stored(brook_admin, principal) == {_brook(describe_cluster)}

        # The CLUSTER resource has one name: refused with INVALID_REQUEST, nothing stored.
        wrong_cluster = KafkaAclBinding(
            KafkaResourceType.BROKER,
            "prod",
            ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation.ALTER,
            AclPermissionType.ALLOW,
        )
        with pytest.raises(KafkaException) as refused:
            admin.create_acls([wrong_cluster])[wrong_cluster].result(CLIENT_TIMEOUT_S)
        assert refused.value.args[0].name() == "INVALID_REQUEST"
        assert "kafka-cluster" in refused.value.args[0].str()
        assert _stored(brook_admin, principal) == {_brook(describe_cluster)}

        admin.poll(0)  # serves the queued log lines
    for request in ("CreateAcls", "DescribeAcls", "DeleteAcls"):
        assert versions_sent(lines, request) == {2}, request


def test_kafkajs_admin_creates_describes_and_deletes_acls(
    compat_cluster: LocalCluster, brook_admin: Admin
) -> None:
    principal = "User:kafkajs-acls"
    result = run_node_json(
        SCRIPT,
        ["acls", compat_cluster.kafka_bootstrap_servers, principal],
        packages=["kafkajs"],
        timeout_s=NODE_TIMEOUT_S,
    )

    assert result["created"] is True  # kafkajs throws on an error
    described = {
        (r["resourceType"], r["resourceName"], r["resourcePatternType"], acl["operation"])
        for r in result["described"]["resources"]
        for acl in r["acls"]
    }
    # Kafka's codes: TOPIC 2, GROUP 3; LITERAL 3, PREFIXED 4; READ 3, WRITE 4.
    assert described == {(2, "kjs-", 4, 4), (3, "kjs-group", 3, 3)}
    (deleted,) = result["deleted"]["filterResponses"]
    assert deleted["errorCode"] == 0
    assert [(m["resourceName"], m["operation"]) for m in deleted["matchingAcls"]] == [("kjs-", 4)]
    assert _stored(brook_admin, principal) == {
        AclBinding(
            ResourceType.GROUP,
            "kjs-group",
            PatternType.LITERAL,
            principal,
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
    }


@pytest.mark.parametrize("version", range(4))
def test_every_served_version_creates_describes_and_deletes(
    compat_cluster: LocalCluster, brook_admin: Admin, version: int
) -> None:
    """Raw requests at each version: v0 has no pattern type, so it creates and selects
    LITERAL ACLs only (the schemas' default), as with Kafka; a code Brook does not know is
    INVALID_REQUEST."""
    address = kafka_gateways(compat_cluster).address
    principal = f"User:raw-v{version}"
    creation = {
        "resource_type": int(ResourceType.TOPIC),
        "resource_name": "raw",
        "resource_pattern_type": int(PatternType.LITERAL),
        "principal": principal,
        "host": "*",
        "operation": int(Operation.DESCRIBE),
        "permission_type": int(Permission.ALLOW),
    }
    unknown_operation = {**creation, "operation": 99}
    created = kafka_request(
        address,
        ApiKey.CREATE_ACLS,
        version,
        {"creations": [creation, unknown_operation]},
        CLIENT_TIMEOUT_S,
    )
    assert [r["error_code"] for r in created["results"]] == [0, ErrorCode.INVALID_REQUEST]
    if version >= 1:
        brook_admin.create_acls(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    "ra",
                    PatternType.PREFIXED,
                    principal,
                    "*",
                    Operation.READ,
                    Permission.ALLOW,
                )
            ]
        )
    selection = {
        "resource_type_filter": int(ResourceType.TOPIC),
        "resource_name_filter": None,
        "pattern_type_filter": int(PatternType.LITERAL if version == 0 else PatternType.ANY),
        "principal_filter": principal,
        "host_filter": None,
        "operation": int(Operation.ANY),
        "permission_type": int(Permission.ANY),
    }
    described = kafka_request(address, ApiKey.DESCRIBE_ACLS, version, selection, CLIENT_TIMEOUT_S)
    assert described["error_code"] == 0
    patterns = [(r["resource_name"], r.get("pattern_type", 3)) for r in described["resources"]]
    assert patterns == ([("raw", 3)] if version == 0 else [("ra", 4), ("raw", 3)])

    deleted = kafka_request(
        address, ApiKey.DELETE_ACLS, version, {"filters": [selection]}, CLIENT_TIMEOUT_S
    )
    (result,) = deleted["filter_results"]
    assert result["error_code"] == 0
    assert len(result["matching_acls"]) == len(patterns)
    assert _stored(brook_admin, principal) == set()
