"""SCRAM credentials (RFC 5802, RFC 7677): what is stored for a user and how it is derived.

A server never keeps a password: for each mechanism it keeps the salt, the iteration count,
StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server
Key"), where SaltedPassword = PBKDF2-HMAC(password, salt, iterations). That is what the
UserScramCredentialRecord of the metadata log holds, and all the gateway's SASL exchanges and
the gRPC credential check need. Kafka's AlterUserScramCredentials carries the SaltedPassword
(the client salts and hashes), so ``credential`` starts from it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

from brook.v1 import metadata_pb2

__all__ = [
    "ITERATIONS_DEFAULT",
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "MECHANISMS",
    "ScramMechanism",
    "client_key",
    "credential",
    "mechanism_by_code",
    "new_credential",
    "new_salt",
    "salted_password",
    "stored_key",
    "verify_password",
]

# Kafka's bounds: fewer than 4096 iterations are refused (RFC 7677's minimum), more than
# 16384 too.
ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384
ITERATIONS_DEFAULT: Final = 8192
SALT_BYTES: Final = 32


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, metadata code and hash."""

    name: str
    code: int
    hash_name: str

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


MECHANISMS: Final = {
    mechanism.name: mechanism
    for mechanism in (
        ScramMechanism("SCRAM-SHA-256", metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_256, "sha256"),
        ScramMechanism("SCRAM-SHA-512", metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512, "sha512"),
    )
}
"""By SASL mechanism name."""


def mechanism_by_code(code: int) -> ScramMechanism:
    """The mechanism of a ScramMechanism code; ValueError for an unknown one."""
    for mechanism in MECHANISMS.values():
        if mechanism.code == code:
            return mechanism
    raise ValueError(f"unknown SCRAM mechanism code {code}")


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """SaltedPassword: PBKDF2-HMAC of the password (UTF-8; RFC 5802's SASLprep is not applied,
    as in Kafka's clients)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Client Key")


def stored_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hash(client_key(mechanism, salted))


def credential(
    mechanism: ScramMechanism,
    name: str,
    salted: bytes,
    salt: bytes,
    iterations: int,
) -> metadata_pb2.UserScramCredentialRecord:
    """The record stored for ``name`` from its SaltedPassword; ValueError if the iteration
    count is out of bounds or the salt is empty."""
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(
            f"iterations must be between {ITERATIONS_MIN} and {ITERATIONS_MAX}, not {iterations}"
        )
    if not salt:
        raise ValueError("the salt must not be empty")
    return metadata_pb2.UserScramCredentialRecord(
        name=name,
        mechanism=mechanism.code,  # type: ignore[arg-type]
        salt=salt,
        stored_key=stored_key(mechanism, salted),
        server_key=mechanism.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def new_salt() -> bytes:
    """A fresh random salt."""
    return secrets.token_bytes(SALT_BYTES)


def new_credential(
    mechanism: ScramMechanism, name: str, password: str, iterations: int = ITERATIONS_DEFAULT
) -> metadata_pb2.UserScramCredentialRecord:
    """A credential with a fresh random salt, from a password."""
    salt = new_salt()
    return credential(
        mechanism, name, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def verify_password(record: metadata_pb2.UserScramCredentialRecord, password: str) -> bool:
    """Whether ``password`` is the one ``record`` was made from (constant-time comparison).
    Costs the record's iterations of PBKDF2: callers that check often cache the outcome."""
    mechanism = mechanism_by_code(record.mechanism)
    salted = salted_password(mechanism, password, record.salt, record.iterations)
    return hmac.compare_digest(stored_key(mechanism, salted), record.stored_key)
