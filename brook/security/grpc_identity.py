"""The principal of a gRPC call: who is asking a Brook service.

In order:

1. A TLS client certificate: ``User:<its subject's common name>``. gRPC names the peer only
   once the handshake verified the certificate against the server's trust store (Brook's
   servers require and verify client certificates whenever they accept them), so the name in
   the call's auth context is one the CA vouched for. Credentials sent beside a certificate
   are not looked at: the certificate is the stronger proof.
2. ``authorization: Basic base64(user:password)`` in the call's metadata, accepted only over
   TLS (over plaintext the password has been exposed on the wire: the call is refused, so the
   mistake shows at once). The password is checked against the user's SCRAM credentials in the
   metadata image (brook.security.scram.verify_password; either mechanism's will do): the
   stored keys only prove a password, never reveal it. An unknown user's password is checked
   against decoy credentials (both mechanisms, default iterations), so timing does not tell
   which users exist.
3. Nothing: ``User:ANONYMOUS``.

A bad or malformed credential aborts the call with UNAUTHENTICATED and a message naming the
problem (never which of user or password was wrong).

A check costs PBKDF2 at the credential's iteration count (milliseconds): it runs in a worker
thread, at most ``concurrent_checks_max`` at a time, never on the event loop. Successful checks
are remembered in a bounded LRU cache keyed by (user, a keyed hash of the password, the
credential's stored key): a changed or deleted credential is therefore never matched again,
and its entries age out. Failed checks are not cached.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, NoReturn

import grpc

from brook.metadata.image import MetadataImage
from brook.security.principal import ANONYMOUS, Principal, user
from brook.security.scram import MECHANISMS, new_credential, verify_password

__all__ = ["AUTHORIZATION_KEY", "GrpcIdentity", "basic_credentials"]

AUTHORIZATION_KEY: Final = "authorization"
"""The call metadata key of credentials (HTTP's header, lower case as gRPC requires)."""
CACHE_ENTRIES_DEFAULT: Final = 1024
CONCURRENT_CHECKS_DEFAULT: Final = 2
# Larger values are not credentials a client would send: refused before decoding.
_AUTHORIZATION_BYTES_MAX: Final = 4096
_BASIC: Final = "basic"
_TLS: Final = b"ssl"


def basic_credentials(user_name: str, password: str) -> tuple[str, str]:
    """The call metadata entry carrying ``user_name`` and ``password`` (for clients)."""
    token = base64.b64encode(f"{user_name}:{password}".encode()).decode()
    return AUTHORIZATION_KEY, f"Basic {token}"


class GrpcIdentity:
    """Tells the principal of each call a server handles; one per server process.

    ``image_getter`` returns the process's current metadata image (its SCRAM credentials);
    it is called on every check that needs them, so credential changes apply at once."""

    def __init__(
        self,
        image_getter: Callable[[], MetadataImage],
        *,
        cache_entries_max: int = CACHE_ENTRIES_DEFAULT,
        concurrent_checks_max: int = CONCURRENT_CHECKS_DEFAULT,
    ) -> None:
        if cache_entries_max < 0 or concurrent_checks_max < 1:
            raise ValueError("the cache may not be negative, and at least one check must run")
        self._image = image_getter
        self._cache_entries_max = cache_entries_max
        # (user, keyed hash of the password, stored key) -> None, least recently used first.
        self._verified: OrderedDict[tuple[str, bytes, bytes], None] = OrderedDict()
        self._checks = asyncio.Semaphore(concurrent_checks_max)
        # Keys the password hashes of the cache: they match nothing outside this process.
        self._cache_key = secrets.token_bytes(32)
        # What an unknown user's password is checked against (see the module doc).
        decoy_password = secrets.token_hex(16)
        self._decoys = [new_credential(m, "", decoy_password) for m in MECHANISMS.values()]

    async def principal_of(self, context: grpc.aio.ServicerContext) -> Principal:
        """The call's principal; aborts the call (UNAUTHENTICATED) for a bad credential."""
        auth = context.auth_context()
        common_names = auth.get("x509_common_name")
        if common_names:
            return user(common_names[0].decode(errors="replace"))
        header = _authorization(context)
        if header is None:
            return ANONYMOUS
        if _TLS not in auth.get("transport_security_type", ()):
            await _refuse(
                context,
                "credentials are accepted over TLS only: this connection is plaintext, so the "
                "password has crossed the network in clear (change it) and was not checked",
            )
        credentials = _parse_basic(header)
        if credentials is None:
            await _refuse(
                context, "the authorization metadata is not 'Basic base64(user:password)'"
            )
        name, password = credentials
        if not await self.password_matches(name, password):
            await _refuse(context, "authentication failed: wrong user name or password")
        return user(name)

    async def password_matches(self, name: str, password: str) -> bool:
        """Whether ``password`` is ``name``'s by any of its SCRAM credentials in the image (a
        check of the kind SASL PLAIN needs too): from the cache, else in a worker thread."""
        image = self._image()
        credentials = [
            found
            for mechanism in MECHANISMS.values()
            if (found := image.scram_credentials.get((name, mechanism.code))) is not None
        ]
        secret = hmac.new(self._cache_key, password.encode(), hashlib.sha256).digest()
        for credential in credentials:
            key = (name, secret, credential.stored_key)
            if key in self._verified:
                self._verified.move_to_end(key)
                return True
        async with self._checks:
            for credential in credentials or self._decoys:
                if await asyncio.to_thread(verify_password, credential, password):
                    if credentials:
                        self._remember((name, secret, credential.stored_key))
                        return True
        return False

    def _remember(self, key: tuple[str, bytes, bytes]) -> None:
        if self._cache_entries_max == 0:
            return
        self._verified[key] = None
        self._verified.move_to_end(key)
        while len(self._verified) > self._cache_entries_max:
            self._verified.popitem(last=False)

    @property
    def cached_checks(self) -> int:
        """How many successful checks are remembered (at most ``cache_entries_max``)."""
        return len(self._verified)


def _authorization(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_KEY:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None


def _parse_basic(header: str) -> tuple[str, str] | None:
    """(user, password) of a ``Basic`` header; None if it is not one or is malformed."""
    if len(header) > _AUTHORIZATION_BYTES_MAX:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != _BASIC:
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    if not sep or not name or not password:
        return None
    return name, password


async def _refuse(context: grpc.aio.ServicerContext, message: str) -> NoReturn:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
    raise AssertionError("abort returned")  # grpc.aio's abort always raises
