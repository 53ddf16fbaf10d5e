"""SASL on the gateway's SASL_PLAINTEXT and SASL_SSL listeners: Kafka's exchange
(SaslHandshake 17, then SaslAuthenticate 36 frames, or raw tokens after a v0 handshake) with
the PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 mechanisms, checked against the SCRAM credentials
of the metadata (``UserScramCredentialRecord``, brook.security.scram).

``SaslAuthenticator`` is one connection's state, driven by the connection (server.py) with
every frame that arrives until it is ``complete``:

- before the handshake: ApiVersions (served as usual) or SaslHandshake; a SaslHandshake for a
  mechanism not in ``sasl.enabled.mechanisms`` is answered UNSUPPORTED_SASL_MECHANISM with the
  enabled ones, and the connection closed;
- after it: SaslAuthenticate (handshake v1) or raw size-prefixed tokens (handshake v0, as
  clients older than Kafka 1.0 send them), until the mechanism is done; a failure is answered
  SASL_AUTHENTICATION_FAILED with a message (a raw token has no error field: the connection
  just closes) and the connection closed;
- any other request, a second handshake, or a frame over ``SASL_FRAME_BYTES_MAX`` closes the
  connection, as Kafka does (its IllegalSaslStateException / InvalidRequestException).

Once complete, the connection's principal is ``User:<name>`` and every request is served;
SaslHandshake and SaslAuthenticate are then answered ILLEGAL_SASL_STATE by ``sasl_handlers``,
as on a listener without SASL. Re-authentication (KIP-368) is not offered: SaslAuthenticate
v1's session_lifetime_ms is 0, so clients never re-authenticate and a session lasts as long as
its connection (a user removed later keeps the connections it has).

PLAIN is checked against the user's SCRAM credential (SCRAM-SHA-512's if it has one, else
SCRAM-SHA-256's): PBKDF2 of the password with that salt and iteration count, in a worker
thread, as it costs milliseconds. A SCRAM exchange (RFC 5802, RFC 7677) needs no PBKDF2 on
the server. Unknown users are not told apart from wrong passwords: both fail at the same step
with the same message, PLAIN after the same PBKDF2 and SCRAM after a whole exchange with a salt
derived from the name (stable across attempts) and ``ITERATIONS_DEFAULT``. Channel binding is
not offered (no -PLUS mechanisms): a client-first message asking for it (``p=``) fails; ``y``
(the client supports it, thinks the server does not) is accepted, as RFC 5802 allows when no
-PLUS mechanism was advertised. SCRAM extensions are ignored except ``tokenauth`` (Kafka's
delegation tokens), which Brook has not: refused. SASLprep is not applied to names or
passwords (as Kafka's clients and brook.security.scram). A client-final nonce of the client's
nonce followed by the whole exchange nonce is accepted besides the exact one: librdkafka
before 2.6.1 sends that (librdkafka#4895), Kafka 3.8.1-3.9 accepted it, and kcat as Debian
ships it has such a librdkafka; the server nonce is still checked in full.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hmac
import secrets
from collections.abc import Callable
from typing import Final, Protocol

from brook.errors import ErrorCode
from brook.security.principal import Principal, user
from brook.security.scram import (
    ITERATIONS_DEFAULT,
    MECHANISMS,
    SALT_BYTES,
    ScramMechanism,
    verify_password,
)
from brook.v1 import metadata_pb2
from brook_gateway.apis import RECOMMENDED_VERSIONS, ApiHandler, RequestContext
from brook_gateway.authorization import NO_AUTHORIZATION
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import FRAME_SIZE_BYTES, decode_request, encode_response
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.protocol.primitives import ProtocolError

__all__ = [
    "PLAIN",
    "SASL_FRAME_BYTES_MAX",
    "SASL_MECHANISMS",
    "AuthenticationFailed",
    "CredentialLookup",
    "PlainServer",
    "SaslAuthenticator",
    "SaslError",
    "ScramServer",
    "sasl_handlers",
]

# PLAIN passwords checked at once, per server (each a PBKDF2 in a worker thread).
PLAIN_CHECKS_MAX: Final = 2

PLAIN: Final = "PLAIN"
SASL_MECHANISMS: Final = (PLAIN, *MECHANISMS)
"""Every mechanism the gateway can offer (``sasl.enabled.mechanisms`` picks among them)."""
SASL_FRAME_BYTES_MAX: Final = 8 * 1024
"""The largest frame a connection may send before it has authenticated (its ApiVersions,
handshake and tokens are a few hundred bytes); a larger one closes the connection. Kafka's
``sasl.server.max.receive.size`` plays this part."""
NAME_BYTES_MAX: Final = 1024
"""User names longer than this are refused (a SCRAM credential's name is far shorter)."""

# Kafka's messages, so clients' logs read the same as against Kafka.
_PLAIN_FAILED: Final = "Authentication failed: Invalid username or password"
_SCRAM_FAILED: Final = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism {mechanism}"
)
_TOKEN_AUTH_EXTENSION: Final = "tokenauth"
_NONCE_BYTES: Final = 24
# SCRAM credentials tried for PLAIN, strongest first.
_PLAIN_CREDENTIALS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256")
_ALLOWED_BEFORE_HANDSHAKE: Final = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE})

CredentialLookup = Callable[[str, int], metadata_pb2.UserScramCredentialRecord | None]
"""(user name, ScramMechanism code) -> the user's credential for it, None if it has none."""


class SaslError(Exception):
    """The client broke the exchange (an unexpected request, a malformed frame): the
    connection is closed without an answer. The message is the reason logged."""


class AuthenticationFailed(Exception):
    """The client is not who it claims or its message is malformed; the message is what the
    client is told (SASL_AUTHENTICATION_FAILED's error_message)."""


class MechanismServer(Protocol):
    """The server side of one mechanism's exchange for one connection."""

    @property
    def principal(self) -> Principal | None:
        """Who authenticated, once the exchange is complete; None before."""

    async def step(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises AuthenticationFailed."""


class PlainServer:
    """PLAIN (RFC 4616): one token, ``authzid NUL authcid NUL password``. The password costs a
    PBKDF2 to check (in a worker thread); ``checks`` bounds how many run at once across the
    connections that share it, so a flood of PLAIN attempts cannot take every core."""

    def __init__(
        self, credentials: CredentialLookup, checks: asyncio.Semaphore | None = None
    ) -> None:
        self._credentials = credentials
        self._checks = checks if checks is not None else asyncio.Semaphore(PLAIN_CHECKS_MAX)
        self._principal: Principal | None = None

    @property
    def principal(self) -> Principal | None:
        return self._principal

    async def step(self, token: bytes) -> bytes:
        if self._principal is not None:
            raise AuthenticationFailed("PLAIN takes one message; the exchange is over")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(
                "Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts))
            )
        try:
            authzid, name, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not name or not password or len(parts[1]) > NAME_BYTES_MAX:
            raise AuthenticationFailed(
                "Authentication failed: username or password not specified, or too long"
            )
        if authzid and authzid != name:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        record = None
        for mechanism_name in _PLAIN_CREDENTIALS:
            record = self._credentials(name, MECHANISMS[mechanism_name].code)
            if record is not None:
                break
        # An unknown user costs the same PBKDF2 as a known one.
        checked = record if record is not None else _unknown_user_credential(name)
        async with self._checks:
            verified = await asyncio.to_thread(verify_password, checked, password)
        if record is None or not verified:
            raise AuthenticationFailed(_PLAIN_FAILED)
        self._principal = user(name)
        return b""


class _ScramStage(enum.Enum):
    CLIENT_FIRST = 1
    CLIENT_FINAL = 2
    DONE = 3


class ScramServer:
    """SCRAM-SHA-256/512 (RFC 5802): client-first -> server-first (the client's nonce plus
    ours, the salt, the iterations), client-final (proof) -> server-final (our signature)."""

    def __init__(
        self, mechanism: ScramMechanism, credentials: CredentialLookup, nonce: str | None = None
    ) -> None:
        """``nonce``: the server's nonce (tests fix it); random by default."""
        self._mechanism = mechanism
        self._credentials = credentials
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(_NONCE_BYTES)
        self._stage = _ScramStage.CLIENT_FIRST
        self._name = ""
        self._known = False
        self._record: metadata_pb2.UserScramCredentialRecord | None = None
        self._gs2_header = ""
        self._client_nonce = ""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._principal: Principal | None = None

    @property
    def principal(self) -> Principal | None:
        return self._principal

    async def step(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        if self._stage is _ScramStage.CLIENT_FIRST:
            return self._client_first(message).encode()
        if self._stage is _ScramStage.CLIENT_FINAL:
            return self._client_final(message).encode()
        raise AuthenticationFailed("the SCRAM exchange is already complete")

    def _client_first(self, message: str) -> str:
        # gs2-header: cbind-flag "," [authzid] "," ; then the bare message.
        flag, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2:
            raise AuthenticationFailed("Invalid SCRAM client first message: no GS2 header")
        if flag.startswith("p="):
            raise AuthenticationFailed(
                "Invalid SCRAM client first message: channel binding is not supported"
            )
        if flag not in ("n", "y"):
            raise AuthenticationFailed(
                f"Invalid SCRAM client first message: channel binding flag {flag!r}"
            )
        if authzid and not authzid.startswith("a="):
            raise AuthenticationFailed("Invalid SCRAM client first message: bad authzid")
        attributes = bare.split(",")
        if (
            len(attributes) < 2
            or not attributes[0].startswith("n=")
            or not (attributes[1].startswith("r="))
        ):
            raise AuthenticationFailed(
                "Invalid SCRAM client first message: expected n=<user>,r=<nonce>"
            )
        name = _unescape_name(attributes[0][2:])
        client_nonce = attributes[1][2:]
        if not client_nonce or not _printable_nonce(client_nonce):
            raise AuthenticationFailed("Invalid SCRAM client first message: bad nonce")
        for extension in attributes[2:]:
            key, eq, value = extension.partition("=")
            if not eq or not key:
                raise AuthenticationFailed("Invalid SCRAM client first message: bad extension")
            if key == _TOKEN_AUTH_EXTENSION and value.lower() == "true":
                raise AuthenticationFailed("Delegation tokens are not supported")
        if authzid and _unescape_name(authzid[2:]) != name:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._name = name
        self._record = self._credentials(name, self._mechanism.code)
        self._known = self._record is not None
        if self._record is None:
            self._record = _unknown_user_credential(name, self._mechanism)
        self._gs2_header = f"{flag},{authzid},"
        self._client_nonce = client_nonce
        self._nonce = client_nonce + self._server_nonce
        self._first_bare = bare
        record = self._record
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(record.salt).decode()},i={record.iterations}"
        )
        self._stage = _ScramStage.CLIENT_FINAL
        return self._server_first

    def _client_final(self, message: str) -> str:
        self._stage = _ScramStage.DONE  # one attempt: any failure ends the exchange
        without_proof, sep, proof_text = message.rpartition(",p=")
        attributes = without_proof.split(",")
        if not sep or len(attributes) < 2:
            raise AuthenticationFailed("Invalid SCRAM client final message: no proof")
        channel, nonce = attributes[0], attributes[1]
        if not channel.startswith("c=") or not nonce.startswith("r="):
            raise AuthenticationFailed(
                "Invalid SCRAM client final message: expected c=<binding>,r=<nonce>"
            )
        try:
            binding = base64.b64decode(channel[2:], validate=True)
            proof = base64.b64decode(proof_text, validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed("Invalid SCRAM client final message: bad base64") from None
        if binding != self._gs2_header.encode():
            raise AuthenticationFailed(
                "Invalid SCRAM client final message: channel binding "
                "does not match the client first message"
            )
        # librdkafka before 2.6.1 (Debian's kcat among them) sends its own nonce twice
        # (librdkafka#4895); Kafka 3.8.1-3.9 accepted that, and so do we: the whole server
        # nonce is still there, and the proof covers the message as sent.
        if nonce[2:] not in (self._nonce, self._client_nonce + self._nonce):
            raise AuthenticationFailed("Invalid SCRAM client final message: wrong nonce")
        record = self._record
        assert record is not None
        mechanism = self._mechanism
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = mechanism.hmac(record.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed(_SCRAM_FAILED.format(mechanism=mechanism.name))
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matches = hmac.compare_digest(mechanism.hash(client_key), record.stored_key)
        if not (matches and self._known):
            raise AuthenticationFailed(_SCRAM_FAILED.format(mechanism=mechanism.name))
        self._principal = user(self._name)
        server_signature = mechanism.hmac(record.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}"


def _unescape_name(name: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "="; any other "=" is malformed."""
    if len(name.encode()) > NAME_BYTES_MAX or not name:
        raise AuthenticationFailed("Invalid SCRAM user name: empty or too long")
    out = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise AuthenticationFailed("Invalid SCRAM user name: bad escape")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _printable_nonce(nonce: str) -> bool:
    return all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


# A secret of this process that keys unknown users' salts: stable for a name (an attacker
# asking twice sees the same salt, as for a real user) and unguessable.
_UNKNOWN_USER_KEY: Final = secrets.token_bytes(32)
_UNKNOWN_USER_MECHANISM: Final = MECHANISMS["SCRAM-SHA-512"]


def _unknown_user_credential(
    name: str, mechanism: ScramMechanism = _UNKNOWN_USER_MECHANISM
) -> metadata_pb2.UserScramCredentialRecord:
    """A credential no password matches (random keys), with a salt derived from ``name``."""
    salt = hmac.new(_UNKNOWN_USER_KEY, name.encode(), "sha256").digest()[:SALT_BYTES]
    size = len(mechanism.hash(b""))
    return metadata_pb2.UserScramCredentialRecord(
        name=name,
        mechanism=mechanism.code,  # type: ignore[arg-type]
        salt=salt,
        stored_key=secrets.token_bytes(size),
        server_key=secrets.token_bytes(size),
        iterations=ITERATIONS_DEFAULT,
    )


class _Stage(enum.Enum):
    HANDSHAKE = 1
    AUTHENTICATE = 2
    COMPLETE = 3
    FAILED = 4


class SaslAuthenticator:
    """One connection's SASL exchange on a SASL listener (see the module docstring)."""

    def __init__(
        self,
        enabled: tuple[str, ...],
        credentials: CredentialLookup,
        plain_checks: asyncio.Semaphore | None = None,
    ) -> None:
        assert enabled and all(m in SASL_MECHANISMS for m in enabled), enabled
        self._enabled = enabled
        self._credentials = credentials
        self._plain_checks = plain_checks
        self._stage = _Stage.HANDSHAKE
        self._raw_tokens = False
        self._mechanism: MechanismServer | None = None
        self.failure: str | None = None
        """Why the exchange failed (the connection closes once the answer is written)."""

    @property
    def complete(self) -> bool:
        return self._stage is _Stage.COMPLETE

    @property
    def failed(self) -> bool:
        return self._stage is _Stage.FAILED

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a bare token (after a v0 handshake), not a Kafka request."""
        return self._stage is _Stage.AUTHENTICATE and self._raw_tokens

    @property
    def principal(self) -> Principal | None:
        """The authenticated principal once complete."""
        if self._mechanism is None or not self.complete:
            return None
        return self._mechanism.principal

    def check_request(self, api_key: int) -> None:
        """Raises SaslError if a request with ``api_key`` may not come now (the connection
        closes). ApiVersions is served by the dispatcher; the others by ``respond``."""
        assert not self.complete
        if self._stage is _Stage.HANDSHAKE and api_key in _ALLOWED_BEFORE_HANDSHAKE:
            return
        if self._stage is _Stage.AUTHENTICATE and api_key == ApiKey.SASL_AUTHENTICATE:
            return
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"API key {api_key}"
        raise SaslError(f"unexpected request {name} during the SASL exchange ({self._stage.name})")

    async def respond(self, frame: bytes) -> bytearray:
        """The answer to a SaslHandshake or SaslAuthenticate frame (``check_request`` passed),
        or to a raw token (``expects_raw_token``), size prefix included. Raises SaslError for
        a malformed frame; after a failure the answer says so and ``failed`` is set."""
        if self.expects_raw_token:
            token = await self._step(frame)
            if token is None:
                raise SaslError(f"authentication failed: {self.failure}")
            return bytearray(len(token).to_bytes(FRAME_SIZE_BYTES, "big") + token)
        try:
            header, request = decode_request(frame)
        except ProtocolError as e:
            raise SaslError(f"malformed request during the SASL exchange: {e}") from None
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            response = self._handshake(request, header.api_version)
        else:
            token = await self._step(request["auth_bytes"])
            response = {
                "error_code": int(
                    ErrorCode.NONE if token is not None else ErrorCode.SASL_AUTHENTICATION_FAILED
                ),
                "error_message": self.failure,
                "auth_bytes": token or b"",
                "session_lifetime_ms": 0,
            }
        return encode_response(header.api_key, header.api_version, header.correlation_id, response)

    def _handshake(self, request: Message, version: int) -> Message:
        mechanism: str = request["mechanism"]
        if mechanism not in self._enabled:
            self._stage = _Stage.FAILED
            self.failure = f"unsupported SASL mechanism {mechanism!r}"
            return {
                "error_code": int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                "mechanisms": list(self._enabled),
            }
        self._mechanism = (
            PlainServer(self._credentials, self._plain_checks)
            if mechanism == PLAIN
            else ScramServer(MECHANISMS[mechanism], self._credentials)
        )
        self._raw_tokens = version == 0
        self._stage = _Stage.AUTHENTICATE
        return {"error_code": int(ErrorCode.NONE), "mechanisms": list(self._enabled)}

    async def _step(self, token: bytes) -> bytes | None:
        """The mechanism's answer; None (and ``failed``) if authentication failed."""
        assert self._mechanism is not None
        try:
            answer = await self._mechanism.step(token)
        except AuthenticationFailed as e:
            self._stage = _Stage.FAILED
            self.failure = str(e)
            return None
        if self._mechanism.principal is not None:
            self._stage = _Stage.COMPLETE
        return answer


def sasl_handlers() -> tuple[ApiHandler, ...]:
    """SaslHandshake and SaslAuthenticate where no exchange is under way (a listener without
    SASL, or after authentication): ILLEGAL_SASL_STATE, as Kafka answers. Registered so that
    ApiVersions advertises them: clients look for them before authenticating."""

    async def handshake(request: Message, context: RequestContext) -> Message:
        del request, context
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}

    async def authenticate(request: Message, context: RequestContext) -> Message:
        del request, context
        return {
            "error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }

    return (
        ApiHandler(
            ApiKey.SASL_HANDSHAKE,
            handshake,
            versions=RECOMMENDED_VERSIONS[ApiKey.SASL_HANDSHAKE],
            authorization=NO_AUTHORIZATION,
        ),
        ApiHandler(
            ApiKey.SASL_AUTHENTICATE,
            authenticate,
            authorization=NO_AUTHORIZATION,
            versions=RECOMMENDED_VERSIONS[ApiKey.SASL_AUTHENTICATE],
        ),
    )
