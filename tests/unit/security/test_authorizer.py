"""Kafka's StandardAuthorizer semantics over AccessControlEntryRecords: patterns, wildcards,
DENY over ALLOW, implied operations, super users, allow.everyone.if.no.acl.found, KIP-679's
IDEMPOTENT_WRITE, the configuration keys, and the index following the metadata image."""

from __future__ import annotations

import pytest
from acl_records import acl
from brook_controller.image import ControllerImage
from brook_controller.metadata_view import MetadataView

from brook.config import ConfigError, load_config, service_config_def
from brook.metadata.cache import MetadataCache
from brook.metadata.delta import MetadataUpdate
from brook.security.authorizer import (
    ALL,
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    WRITE,
    Action,
    Authorizer,
)
from brook.security.principal import Principal, user
from brook.v1 import metadata_pb2

ALICE = user("alice")
BOB = user("bob")
HOST = "10.0.0.1"


def authorizer(
    *acls: metadata_pb2.AccessControlEntryRecord,
    super_users: tuple[Principal, ...] = (),
    allow_if_no_acl: bool = False,
) -> Authorizer:
    result = Authorizer(enabled=True, super_users=super_users, allow_if_no_acl=allow_if_no_acl)
    result.load(acls)
    return result


def may(
    auth: Authorizer,
    operation: int,
    resource_type: int,
    name: str,
    principal: Principal = ALICE,
    host: str = HOST,
) -> bool:
    return auth.authorize(principal, host, operation, resource_type, name)


def test_a_prefixed_write_acl_lets_orders_topics_be_written_but_not_read() -> None:
    auth = authorizer(acl(TOPIC, "orders-", WRITE, prefixed=True))
    assert may(auth, WRITE, TOPIC, "orders-eu")
    assert may(auth, WRITE, TOPIC, "orders-")
    assert may(auth, DESCRIBE, TOPIC, "orders-eu"), "WRITE implies DESCRIBE"
    assert not may(auth, READ, TOPIC, "orders-eu")
    assert not may(auth, WRITE, TOPIC, "orders"), "a prefix longer than the name"
    assert not may(auth, WRITE, TOPIC, "payments")
    assert not may(auth, WRITE, TOPIC, "orders-eu", principal=BOB)


def test_literal_acls_name_one_resource_and_the_literal_star_names_every_one() -> None:
    auth = authorizer(acl(TOPIC, "orders", READ), acl(GROUP, "*", READ))
    assert may(auth, READ, TOPIC, "orders")
    assert not may(auth, READ, TOPIC, "orders-eu")
    assert may(auth, READ, GROUP, "any-group")
    assert not may(auth, READ, TOPIC, "*x"), "only the literal name * is a wildcard"


def test_deny_wins_over_every_allow_whatever_pattern_grants_it() -> None:
    auth = authorizer(
        acl(TOPIC, "*", WRITE),
        acl(TOPIC, "orders-", WRITE, prefixed=True),
        acl(TOPIC, "orders-secret", WRITE, deny=True),
    )
    assert may(auth, WRITE, TOPIC, "orders-eu")
    assert not may(auth, WRITE, TOPIC, "orders-secret")


def test_a_deny_of_all_denies_every_operation_but_a_deny_of_one_leaves_the_others() -> None:
    auth = authorizer(
        acl(TOPIC, "t", ALL),
        acl(TOPIC, "t", WRITE, principal="User:bob"),
        acl(TOPIC, "t", READ, principal="User:bob", deny=True),
        acl(TOPIC, "t", ALL, principal="User:carol"),
        acl(TOPIC, "t", ALL, principal="User:carol", deny=True),
    )
    assert may(auth, DELETE, TOPIC, "t")
    assert may(auth, WRITE, TOPIC, "t", principal=BOB)
    assert not may(auth, READ, TOPIC, "t", principal=BOB)
    # A DENY of READ does not deny what READ would imply.
    assert may(auth, DESCRIBE, TOPIC, "t", principal=BOB)
    assert not may(auth, WRITE, TOPIC, "t", principal=user("carol"))


@pytest.mark.parametrize(
    ("granted", "implied"),
    [
        (READ, DESCRIBE),
        (WRITE, DESCRIBE),
        (DELETE, DESCRIBE),
        (ALTER, DESCRIBE),
        (ALTER_CONFIGS, DESCRIBE_CONFIGS),
    ],
)
def test_operations_imply_describe_as_in_kafka(granted: int, implied: int) -> None:
    auth = authorizer(acl(TOPIC, "t", granted))
    assert may(auth, implied, TOPIC, "t")
    assert not may(auth, CREATE, TOPIC, "t")


def test_describe_implies_nothing_and_create_does_not_imply_describe() -> None:
    auth = authorizer(acl(TOPIC, "a", DESCRIBE), acl(TOPIC, "b", CREATE))
    assert not may(auth, READ, TOPIC, "a")
    assert not may(auth, DESCRIBE, TOPIC, "b")


def test_principal_and_host_wildcards() -> None:
    auth = authorizer(
        acl(TOPIC, "open", READ, principal="User:*"),
        acl(TOPIC, "local", READ, host="127.0.0.1"),
    )
    assert may(auth, READ, TOPIC, "open", principal=BOB)
    assert may(auth, READ, TOPIC, "local", host="127.0.0.1")
    assert not may(auth, READ, TOPIC, "local", host=HOST)


def test_super_users_are_allowed_everything_even_against_a_deny() -> None:
    admin = user("admin")
    auth = authorizer(acl(TOPIC, "t", ALL, principal="User:*", deny=True), super_users=(admin,))
    assert may(auth, DELETE, TOPIC, "t", principal=admin)
    assert may(auth, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME, principal=admin)
    assert not may(auth, DELETE, TOPIC, "t")


def test_allow_everyone_if_no_acl_found_opens_only_resources_no_acl_names() -> None:
    auth = authorizer(acl(TOPIC, "guarded", READ, principal="User:bob"), allow_if_no_acl=True)
    assert may(auth, WRITE, TOPIC, "unguarded")
    # An ACL for someone else still names the resource: it is closed to alice.
    assert not may(auth, READ, TOPIC, "guarded")
    closed = authorizer(acl(TOPIC, "guarded", READ, principal="User:bob"))
    assert not may(closed, WRITE, TOPIC, "unguarded")


def test_a_prefix_or_wildcard_acl_names_the_resource_for_allow_everyone() -> None:
    auth = authorizer(
        acl(TOPIC, "orders-", READ, prefixed=True, principal="User:bob"), allow_if_no_acl=True
    )
    assert not may(auth, READ, TOPIC, "orders-eu")
    assert may(auth, READ, TOPIC, "payments")


def test_idempotent_write_on_the_cluster_follows_from_write_on_any_topic() -> None:
    """KIP-679: a producer allowed to write somewhere may be idempotent."""
    writer = authorizer(acl(TOPIC, "orders-", WRITE, prefixed=True))
    assert may(writer, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
    reader = authorizer(acl(TOPIC, "orders", READ))
    assert not may(reader, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
    # A WRITE every one of whose topics is denied again grants nothing.
    shadowed = authorizer(
        acl(TOPIC, "orders-eu", WRITE),
        acl(TOPIC, "orders-", WRITE, prefixed=True, deny=True),
    )
    assert not may(shadowed, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
    explicit = authorizer(acl(CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE))
    assert may(explicit, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)


def test_create_of_a_topic_may_be_granted_on_the_cluster() -> None:
    create = Action(TOPIC, "new", CREATE, cluster_grants=True)
    assert authorizer(acl(CLUSTER, CLUSTER_NAME, CREATE)).permits(ALICE, HOST, create)
    assert authorizer(acl(TOPIC, "new", CREATE)).permits(ALICE, HOST, create)
    assert not authorizer(acl(TOPIC, "other", CREATE)).permits(ALICE, HOST, create)


def test_first_denied_names_the_denial_and_its_kafka_error() -> None:
    auth = authorizer(acl(TOPIC, "t", WRITE))
    group = Action(GROUP, "g", READ)
    assert auth.first_denied(ALICE, HOST, [Action(TOPIC, "t", WRITE), group]) == group
    assert group.denial_code.name == "GROUP_AUTHORIZATION_FAILED"
    assert Action(CLUSTER, CLUSTER_NAME, ALTER).denial_code.name == "CLUSTER_AUTHORIZATION_FAILED"
    assert auth.first_denied(ALICE, HOST, [Action(TOPIC, "t", WRITE)]) is None


def test_a_disabled_authorizer_allows_everything() -> None:
    off = Authorizer(enabled=False)
    assert off.authorize(ALICE, HOST, DELETE, TOPIC, "anything")
    assert off.first_denied(ALICE, HOST, [Action(CLUSTER, CLUSTER_NAME, ALTER)]) is None


def _grant_record(grant: metadata_pb2.AccessControlEntryRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(access_control_entry=grant)


def _revoke_record(grant: metadata_pb2.AccessControlEntryRecord) -> metadata_pb2.MetadataRecord:
    revoked = metadata_pb2.RemoveAccessControlEntryRecord(id=grant.id)
    return metadata_pb2.MetadataRecord(remove_access_control_entry=revoked)


def test_a_metadata_cache_keeps_the_authorizer_on_its_acls() -> None:
    """What the storage nodes, coordinators and gateways do (MetadataCache.feed)."""
    cache = MetadataCache()
    auth = Authorizer(enabled=True)
    cache.feed(auth)
    grant = acl(TOPIC, "t", READ)
    cache.replay(MetadataUpdate(False, 0, (_grant_record(grant),)))
    assert may(auth, READ, TOPIC, "t")
    cache.replay(MetadataUpdate(False, 1, (_revoke_record(grant),)))
    assert not may(auth, READ, TOPIC, "t")
    cache.replay(MetadataUpdate(True, 5, (_grant_record(grant),)))
    assert may(auth, READ, TOPIC, "t"), "a snapshot replaces the ACLs"


def test_the_controllers_view_keeps_the_authorizer_on_its_acls() -> None:
    view = MetadataView(retained_records_max=10)
    auth = Authorizer(enabled=True)
    view.feed(auth)
    grant = acl(TOPIC, "t", READ)
    view.append(0, [_grant_record(grant)])
    assert may(auth, READ, TOPIC, "t")
    view.append(1, [_revoke_record(grant)])
    assert not may(auth, READ, TOPIC, "t")
    loaded = ControllerImage()
    loaded.apply(_grant_record(grant))
    view.reset(loaded)
    assert may(auth, READ, TOPIC, "t")


def _config(settings: dict[str, str]) -> Authorizer:
    definition = service_config_def(
        listener_names=("GRPC",), default_listeners="GRPC://127.0.0.1:9000", keys=()
    )
    return Authorizer.from_config(
        load_config(definition, overrides=[f"{k}={v}" for k, v in settings.items()], environ={})
    )


def test_the_configuration_turns_the_authorizer_on_with_kafkas_names() -> None:
    assert not _config({"node.id": "1"}).enabled
    standard = _config(
        {
            "node.id": "1",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin; User:brook",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    assert standard.enabled
    assert standard.super_users == {user("admin"), user("brook")}
    assert standard.allow_if_no_acl
    assert _config({"node.id": "1", "authorizer.class.name": "brook"}).enabled


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("authorizer.class.name", "kafka.security.authorizer.AclAuthorizer", "authorizer"),
        ("super.users", "alice", "principal"),
    ],
)
def test_bad_authorization_settings_are_configuration_errors(
    key: str, value: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        _config({"node.id": "1", key: value})


def test_until_the_first_metadata_arrives_only_super_users_pass() -> None:
    """A process that has not received its metadata knows no ACL yet: answering from none
    would let allow.everyone.if.no.acl.found open what a DENY closes (Kafka's StandardAuthorizer
    refuses everyone but super users until its first load)."""
    cache = MetadataCache()
    auth = Authorizer(enabled=True, super_users=(BOB,), allow_if_no_acl=True)
    cache.feed(auth)
    assert not may(auth, READ, TOPIC, "t")
    assert not auth.authorize_any(ALICE, HOST, WRITE, TOPIC)
    assert may(auth, READ, TOPIC, "t", principal=BOB)
    deny = acl(TOPIC, "t", READ, deny=True)
    cache.replay(MetadataUpdate(True, 3, (_grant_record(deny),)))
    assert not may(auth, READ, TOPIC, "t")
    assert may(auth, READ, TOPIC, "other"), "no ACL names it: allowed everyone"


def test_the_first_metadata_makes_the_authorizer_ready_whatever_it_holds() -> None:
    """Ready on the first update received, with or without ACL records in it: a controller
    whose log holds none, and a storage node serving static topics (its one snapshot has no
    log offset)."""
    view = MetadataView(retained_records_max=10)
    auth = Authorizer(enabled=True, allow_if_no_acl=True)
    view.feed(auth)
    assert not auth.ready
    broker = metadata_pb2.MetadataRecord(broker=metadata_pb2.BrokerRecord(node_id=1))
    view.append(0, [broker])
    assert auth.ready and may(auth, READ, TOPIC, "t")

    cache = MetadataCache()
    static = Authorizer(enabled=True, allow_if_no_acl=True)
    cache.feed(static)
    cache.replay(MetadataUpdate(True, -1, ()))
    assert static.ready and may(static, READ, TOPIC, "t")
    assert Authorizer(enabled=False).ready
