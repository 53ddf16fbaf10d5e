"""Users' SCRAM credentials (Kafka's AlterUserScramCredentials / DescribeUserScramCredentials):
what the controller accepts, the records it commits, and what it tells about them.

An alteration names credentials by (user, mechanism): an upsertion carries the salt, the
iteration count and the SaltedPassword the client derived (the password never reaches the
cluster), from which the controller computes the StoredKey and ServerKey it stores
(brook.security.scram.credential); a deletion removes one mechanism's credential. Results are
per user, as Kafka's: a user with any invalid item (an empty name, an unknown mechanism, the
same mechanism twice in one request, iterations out of 4096..16384, an empty salt, a salted
password that is not one digest long, the deletion of a credential that does not exist) gets
that item's error and none of its items apply; the other users' still do.

A description lists each user's mechanisms and iteration counts, never a salt or a key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from brook.errors import BrookError, ErrorCode
from brook.metadata.image import MetadataImage
from brook.security.scram import ScramMechanism, credential, mechanism_by_code
from brook.v1 import admin_pb2, metadata_pb2
from brook_controller.changes import ChangeSet

__all__ = ["alter_credentials", "describe_credentials"]

_Item = admin_pb2.ScramCredentialDeletion | admin_pb2.ScramCredentialUpsertion


def alter_credentials(
    changes: ChangeSet,
    deletions: Sequence[admin_pb2.ScramCredentialDeletion],
    upsertions: Sequence[admin_pb2.ScramCredentialUpsertion],
) -> list[admin_pb2.AlterUserScramCredentialsResult]:
    """Records every valid user's changes in ``changes``; one result per user, in the order
    first named."""
    by_user: dict[str, list[_Item]] = {}
    alterations: list[_Item] = [*deletions, *upsertions]
    for item in alterations:
        by_user.setdefault(item.name, []).append(item)
    results = []
    for name, items in by_user.items():
        result = admin_pb2.AlterUserScramCredentialsResult(user=name)
        try:
            decided = [_decide(changes, item, items) for item in items]
        except BrookError as error:
            result.error_code = error.code  # type: ignore[assignment]
            result.error_message = error.message
        else:
            for item, record in zip(items, decided, strict=True):
                if record is None:
                    changes.remove_scram_credential(item.name, item.mechanism)
                else:
                    changes.put_scram_credential(record)
        results.append(result)
    return results


def _decide(
    changes: ChangeSet, item: _Item, users_items: Sequence[_Item]
) -> metadata_pb2.UserScramCredentialRecord | None:
    """The record an upsertion stores, or None for a valid deletion; BrookError if ``item``
    is invalid (``users_items``: every item of its user in the request)."""
    if not item.name:
        raise BrookError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name must not be empty")
    mechanism = _mechanism(item.mechanism)
    if sum(other.mechanism == item.mechanism for other in users_items) > 1:
        raise BrookError(
            ErrorCode.DUPLICATE_RESOURCE,
            f"the request alters the {mechanism.name} credential of {item.name!r} more than once",
        )
    if isinstance(item, admin_pb2.ScramCredentialDeletion):
        if changes.scram_credential(item.name, item.mechanism) is None:
            raise BrookError(
                ErrorCode.RESOURCE_NOT_FOUND,
                f"{item.name!r} has no {mechanism.name} credential to delete",
            )
        return None
    digest_size = len(mechanism.hash(b""))
    if len(item.salted_password) != digest_size:
        raise BrookError(
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"a {mechanism.name} salted password is {digest_size} bytes, not "
            f"{len(item.salted_password)}",
        )
    try:
        return credential(mechanism, item.name, item.salted_password, item.salt, item.iterations)
    except ValueError as error:
        raise BrookError(ErrorCode.UNACCEPTABLE_CREDENTIAL, str(error)) from None


def _mechanism(code: int) -> ScramMechanism:
    try:
        return mechanism_by_code(code)
    except ValueError:
        raise BrookError(
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            f"unknown SCRAM mechanism {code} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)",
        ) from None


def describe_credentials(
    image: MetadataImage, users: Sequence[str]
) -> list[admin_pb2.DescribeUserScramCredentialsResult]:
    """The mechanisms and iteration counts of each user named (every user with a credential,
    by name, when none is), one result per distinct name."""
    by_user: dict[str, list[metadata_pb2.UserScramCredentialRecord]] = {}
    for (name, _), record in image.scram_credentials.items():
        by_user.setdefault(name, []).append(record)
    named = Counter(users)
    results = []
    for name in named if named else sorted(by_user):
        result = admin_pb2.DescribeUserScramCredentialsResult(user=name)
        if named[name] > 1:
            result.error_code = ErrorCode.DUPLICATE_RESOURCE  # type: ignore[assignment]
            result.error_message = f"the request names {name!r} more than once"
        elif name not in by_user:
            result.error_code = ErrorCode.RESOURCE_NOT_FOUND  # type: ignore[assignment]
            result.error_message = f"{name!r} has no SCRAM credential"
        else:
            result.credential_infos.extend(
                admin_pb2.ScramCredentialInfo(mechanism=r.mechanism, iterations=r.iterations)
                for r in sorted(by_user[name], key=lambda r: r.mechanism)
            )
        results.append(result)
    return results
