"""confluent-kafka's AdminClient (librdkafka) managing users' SCRAM credentials through the
gateway (AlterUserScramCredentials / DescribeUserScramCredentials): what it stores verifies the
password, descriptions tell mechanisms and iterations only, and Kafka's errors come back for
what must change nothing. (The SCRAM types are imported from confluent_kafka.admin._scram:
confluent_kafka.admin re-exports them without declaring it, which mypy refuses.)"""

from __future__ import annotations

from typing import Any

import pytest
from cluster_fixture import metadata_image
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from brook.launcher import LocalCluster
from brook.security.scram import verify_password
from brook.v1 import metadata_pb2

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 20.0


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def _error_code(future: Any) -> int:
    with pytest.raises(KafkaException) as failed:
        future.result(CLIENT_TIMEOUT_S)
    code = failed.value.args[0].code()
    assert isinstance(code, int)
    return code


def _upsertion(user: str, mechanism: Any, iterations: int, password: bytes) -> Any:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)


def test_confluent_admin_adds_describes_and_deletes_a_scram_user(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    upserted = admin.alter_user_scram_credentials(
        [
            _upsertion("compat-alice", ScramMechanism.SCRAM_SHA_256, 4096, b"pw-256"),
            UserScramCredentialUpsertion(
                "compat-alice",
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                b"pw-512",
                b"a salt of our own",
            ),
        ]
    )
    assert upserted["compat-alice"].result(CLIENT_TIMEOUT_S) is None

    described = admin.describe_user_scram_credentials(["compat-alice"])
    infos = described["compat-alice"].result(CLIENT_TIMEOUT_S).scram_credential_infos
    assert sorted((info.mechanism, info.iterations) for info in infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 8192),
    ]

    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("compat-alice", ScramMechanism.SCRAM_SHA_256)]
    )
    assert deleted["compat-alice"].result(CLIENT_TIMEOUT_S) is None
    everyone = admin.describe_user_scram_credentials().result(CLIENT_TIMEOUT_S)
    assert [
        (i.mechanism, i.iterations) for i in everyone["compat-alice"].scram_credential_infos
    ] == [(ScramMechanism.SCRAM_SHA_512, 8192)]


def test_what_the_client_salted_verifies_the_password_at_the_controller(
    bootstrap: str, compat_cluster: LocalCluster
) -> None:
    admin = _admin(bootstrap)
    admin.alter_user_scram_credentials(
        [_upsertion("compat-bob", ScramMechanism.SCRAM_SHA_512, 4096, b"hunter2")]
    )["compat-bob"].result(CLIENT_TIMEOUT_S)

    image = metadata_image(compat_cluster)
    assert image is not None, "no controller answered"
    record = image.scram_credentials[("compat-bob", metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512)]
    assert verify_password(record, "hunter2")
    assert not verify_password(record, "hunter3")


def test_confluent_admin_gets_kafkas_errors_and_nothing_changes(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    assert (
        _error_code(admin.describe_user_scram_credentials(["compat-nobody"])["compat-nobody"])
        == KafkaError.RESOURCE_NOT_FOUND
    )
    missing = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("compat-nobody", ScramMechanism.SCRAM_SHA_256)]
    )
    assert _error_code(missing["compat-nobody"]) == KafkaError.RESOURCE_NOT_FOUND

    too_few = admin.alter_user_scram_credentials(
        [_upsertion("compat-carol", ScramMechanism.SCRAM_SHA_256, 1000, b"pw")]
    )
    assert _error_code(too_few["compat-carol"]) == KafkaError.UNACCEPTABLE_CREDENTIAL
    twice = admin.alter_user_scram_credentials(
        [
            _upsertion("compat-carol", ScramMechanism.SCRAM_SHA_256, 4096, b"pw"),
            UserScramCredentialDeletion("compat-carol", ScramMechanism.SCRAM_SHA_256),
        ]
    )
    assert _error_code(twice["compat-carol"]) == KafkaError.DUPLICATE_RESOURCE
    assert (
        _error_code(admin.describe_user_scram_credentials(["compat-carol"])["compat-carol"])
        == KafkaError.RESOURCE_NOT_FOUND
    )
