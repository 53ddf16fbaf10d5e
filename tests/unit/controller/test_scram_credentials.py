"""Users' SCRAM credentials through AdminService (the SDK and raw requests), against a real
(single-voter) controller: what is committed, what is refused, what is told."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from controller_support import InProcessController

from brook.client.admin import (
    Admin,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from brook.client.errors import ApiError
from brook.errors import ErrorCode
from brook.security.scram import MECHANISMS, new_salt, salted_password, verify_password
from brook.v1 import admin_pb2, admin_pb2_grpc, metadata_pb2

SHA256 = metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_256
SHA512 = metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512
RPC_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessController]:
    """One controller for the module; each test uses user names of its own."""
    with InProcessController(tmp_path_factory.mktemp("controller")) as running:
        yield running


@pytest.fixture
def admin(controller: InProcessController) -> Iterator[Admin]:
    with Admin(controller.address, default_api_timeout_ms=10_000) as client:
        yield client


def _alter(
    controller: InProcessController,
    upsertions: list[admin_pb2.ScramCredentialUpsertion] = [],  # noqa: B006 (never mutated)
    deletions: list[admin_pb2.ScramCredentialDeletion] = [],  # noqa: B006
) -> dict[str, tuple[int, str]]:
    with grpc.insecure_channel(controller.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        response = stub.AlterUserScramCredentials(
            admin_pb2.AlterUserScramCredentialsRequest(upsertions=upsertions, deletions=deletions),
            timeout=RPC_TIMEOUT_S,
        )
    return {r.user: (r.error_code, r.error_message) for r in response.results}


def _upsertion(
    name: str,
    password: str = "pw",
    mechanism: int = SHA512,
    iterations: int = 4096,
    salt: bytes | None = None,
) -> admin_pb2.ScramCredentialUpsertion:
    salt = new_salt() if salt is None else salt
    by_code = {m.code: m for m in MECHANISMS.values()}
    hashed = (
        salted_password(by_code[mechanism], password, salt or b"-", iterations)
        if mechanism in by_code and 0 < iterations <= 20_000
        else b"\0" * 64
    )
    return admin_pb2.ScramCredentialUpsertion(
        name=name,
        mechanism=mechanism,  # type: ignore[arg-type]
        iterations=iterations,
        salt=salt,
        salted_password=hashed,
    )


def _credentials(controller: InProcessController, name: str) -> dict[int, int]:
    """The committed credentials of ``name``: mechanism -> iterations."""
    return {
        mechanism: record.iterations
        for (user, mechanism), record in controller.image().scram_credentials.items()
        if user == name
    }


def test_a_user_added_from_a_password_is_stored_as_keys_that_verify_it(
    controller: InProcessController, admin: Admin
) -> None:
    assert admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion("alice", "s3cret", "SCRAM-SHA-256", iterations=4096),
            UserScramCredentialUpsertion("alice", "s3cret", "SCRAM-SHA-512"),
        ]
    ) == {"alice": None}

    stored = {m: controller.image().scram_credentials[("alice", m)] for m in (SHA256, SHA512)}
    for record in stored.values():
        assert verify_password(record, "s3cret")
        assert not verify_password(record, "s3cret ")
    assert admin.describe_user_scram_credentials(["alice"]) == {
        "alice": (
            ScramCredentialInfo("SCRAM-SHA-256", 4096),
            ScramCredentialInfo("SCRAM-SHA-512", 8192),
        )
    }
    # A description tells mechanisms and iteration counts: no salt or key is in the answer.
    with grpc.insecure_channel(controller.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        raw = stub.DescribeUserScramCredentials(
            admin_pb2.DescribeUserScramCredentialsRequest(users=["alice"]), timeout=RPC_TIMEOUT_S
        ).SerializeToString()
    for record in stored.values():
        for secret in (record.salt, record.stored_key, record.server_key):
            assert secret not in raw


def test_a_new_password_replaces_the_old_one(controller: InProcessController, admin: Admin) -> None:
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("bob", "first")])
    assert admin.alter_user_scram_credentials([UserScramCredentialUpsertion("bob", "second")]) == {
        "bob": None
    }

    record = controller.image().scram_credentials[("bob", SHA512)]
    assert verify_password(record, "second")
    assert not verify_password(record, "first")


@pytest.mark.parametrize(
    ("item", "code"),
    [
        (_upsertion(""), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsertion("carol", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsertion("carol", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsertion("carol", salt=b""), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (_upsertion("carol", mechanism=0), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (_upsertion("carol", mechanism=3), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (
            admin_pb2.ScramCredentialUpsertion(
                name="carol", mechanism=SHA256, iterations=4096, salt=b"s", salted_password=b"x"
            ),
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
        ),
    ],
    ids=[
        "empty-name",
        "too-few-iterations",
        "too-many-iterations",
        "empty-salt",
        "unspecified-mechanism",
        "unknown-mechanism",
        "short-salted-password",
    ],
)
def test_an_invalid_upsertion_changes_nothing_of_its_user_and_the_others_apply(
    controller: InProcessController,
    admin: Admin,
    item: admin_pb2.ScramCredentialUpsertion,
    code: ErrorCode,
) -> None:
    """The invalid item's user also had a valid item in the request: neither applies."""
    valid_of_same_user = _upsertion(item.name, mechanism=SHA256 if item.mechanism != SHA256 else 2)
    results = _alter(controller, upsertions=[valid_of_same_user, item, _upsertion("dave")])

    assert results[item.name][0] == code, results
    assert results[item.name][1], "the error is explained"
    assert results["dave"] == (ErrorCode.NONE, "")
    assert _credentials(controller, item.name) == {}
    assert _credentials(controller, "dave") == {SHA512: 4096}


def test_the_same_user_and_mechanism_twice_is_a_duplicate_and_changes_nothing(
    controller: InProcessController,
) -> None:
    _alter(controller, upsertions=[_upsertion("erin", mechanism=SHA256)])

    results = _alter(
        controller,
        upsertions=[_upsertion("erin", "new"), _upsertion("erin", "newer")],
        deletions=[admin_pb2.ScramCredentialDeletion(name="erin", mechanism=SHA256)],
    )
    assert results["erin"][0] == ErrorCode.DUPLICATE_RESOURCE
    assert _credentials(controller, "erin") == {SHA256: 4096}

    # One mechanism deleted and the other added in one request: both apply.
    results = _alter(
        controller,
        upsertions=[_upsertion("erin", mechanism=SHA512)],
        deletions=[admin_pb2.ScramCredentialDeletion(name="erin", mechanism=SHA256)],
    )
    assert results == {"erin": (ErrorCode.NONE, "")}
    assert _credentials(controller, "erin") == {SHA512: 4096}


def test_deleting_removes_the_credential_and_unknown_ones_are_not_found(
    controller: InProcessController, admin: Admin
) -> None:
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("frank", "pw")])

    results = admin.alter_user_scram_credentials(
        [
            UserScramCredentialDeletion("frank", "SCRAM-SHA-512"),
            UserScramCredentialDeletion("nobody", "SCRAM-SHA-512"),
        ]
    )
    assert results["frank"] is None
    assert isinstance(results["nobody"], ApiError)
    assert results["nobody"].code is ErrorCode.RESOURCE_NOT_FOUND
    assert _credentials(controller, "frank") == {}

    again = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("frank", "SCRAM-SHA-512")]
    )["frank"]
    assert isinstance(again, ApiError) and again.code is ErrorCode.RESOURCE_NOT_FOUND


def test_describing_unknown_or_repeated_users_fails_for_them_and_all_lists_by_name(
    controller: InProcessController, admin: Admin
) -> None:
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(name, "pw") for name in ("zoe", "yann")]
    )

    with pytest.raises(ApiError) as missing:
        admin.describe_user_scram_credentials(["zoe", "nobody"])
    assert missing.value.code is ErrorCode.RESOURCE_NOT_FOUND
    with grpc.insecure_channel(controller.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        response = stub.DescribeUserScramCredentials(
            admin_pb2.DescribeUserScramCredentialsRequest(users=["zoe", "zoe", "yann"]),
            timeout=RPC_TIMEOUT_S,
        )
    assert [(r.user, r.error_code) for r in response.results] == [
        ("zoe", ErrorCode.DUPLICATE_RESOURCE),
        ("yann", ErrorCode.NONE),
    ]

    everyone = admin.describe_user_scram_credentials()
    assert list(everyone) == sorted(everyone)
    assert {"zoe", "yann"} <= set(everyone)


def test_the_sdk_refuses_an_unknown_mechanism_or_an_empty_password_before_sending(
    admin: Admin,
) -> None:
    with pytest.raises(ValueError, match="SCRAM-SHA-1"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("g", "pw", "SCRAM-SHA-1")])
    with pytest.raises(ValueError, match="empty"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("g", "")])
