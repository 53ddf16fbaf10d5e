"""The gateway's SASL mechanisms and front door (brook_gateway/sasl.py, server.py): SCRAM
against RFC 7677's test vector, every malformed or dishonest message refused, PLAIN checked
against the SCRAM credential, and, through a real KafkaServer on loopback (TLS from a local CA
included), the principal each connection gets in its RequestContext."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import pytest
from brook_gateway.apis import ApiHandler, Dispatcher, RequestContext
from brook_gateway.authorization import NO_AUTHORIZATION
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import decode_response, encode_request
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.sasl import (
    SASL_FRAME_BYTES_MAX,
    AuthenticationFailed,
    CredentialLookup,
    PlainServer,
    ScramServer,
    sasl_handlers,
)
from brook_gateway.server import KafkaListener
from gateway_support import READ_TIMEOUT_S, dispatcher_with_api_versions, running_server
from sasl_client import KafkaConnection, ScramClient, authenticate, plain_token

from brook.errors import ErrorCode
from brook.security.certificates import CertificateAuthority
from brook.security.scram import MECHANISMS, credential, new_credential, salted_password
from brook.security.tls import ReloadingServerContext, TlsFiles
from brook.v1 import metadata_pb2

SHA_256: Final = MECHANISMS["SCRAM-SHA-256"]
SHA_512: Final = MECHANISMS["SCRAM-SHA-512"]

# RFC 7677, section 3.
RFC_SALT: Final = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST: Final = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE: Final = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST: Final = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL: Final = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL: Final = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

Credentials = dict[tuple[str, int], metadata_pb2.UserScramCredentialRecord]


def _rfc_credentials() -> Credentials:
    salted = salted_password(SHA_256, "pencil", RFC_SALT, 4096)
    return {("user", SHA_256.code): credential(SHA_256, "user", salted, RFC_SALT, 4096)}


def _lookup(credentials: Credentials) -> CredentialLookup:
    return lambda name, code: credentials.get((name, code))


def _rfc_server() -> ScramServer:
    return ScramServer(SHA_256, _lookup(_rfc_credentials()), nonce=RFC_SERVER_NONCE)


def test_scram_sha_256_follows_rfc_7677s_exchange_byte_for_byte() -> None:
    server = _rfc_server()
    assert asyncio.run(server.step(RFC_CLIENT_FIRST)) == RFC_SERVER_FIRST
    assert server.principal is None
    assert asyncio.run(server.step(RFC_CLIENT_FINAL)) == RFC_SERVER_FINAL
    assert str(server.principal) == "User:user"


def _final_with(replace: tuple[bytes, bytes]) -> bytes:
    return RFC_CLIENT_FINAL.replace(*replace)


@pytest.mark.parametrize(
    ("first", "final", "message"),
    [
        # A proof made from another password.
        (RFC_CLIENT_FIRST, _final_with((b"p=dHzb", b"p=eHzb")), "invalid credentials"),
        # The exchange's nonce must come back in full.
        (RFC_CLIENT_FIRST, _final_with((b"hNlF$k0,", b"hNlF$k1,")), "wrong nonce"),
        (RFC_CLIENT_FIRST, _final_with((b"c=biws", b"c=eSws")), "channel binding"),
        (RFC_CLIENT_FIRST, b"c=biws,r=x", "no proof"),
        (RFC_CLIENT_FIRST, _final_with((b"p=dHzb", b"p=!!zb")), "bad base64"),
        (b"p=tls-unique,,n=user,r=abc", b"", "channel binding is not supported"),
        (b"x,,n=user,r=abc", b"", "channel binding flag"),
        (b"n,,r=abc,n=user", b"", "expected n=<user>,r=<nonce>"),
        (b"n,,n=us=er,r=abc", b"", "bad escape"),
        (b"n,,n=user,r=a,bc", b"", "bad extension"),
        (b"n,,n=user,r=abc,tokenauth=true", b"", "Delegation tokens"),
        (b"n,a=admin,n=user,r=abc", b"", "authorization id"),
        (b"n,,n=user,r=\x7f", b"", "bad nonce"),
        (b"\xff\xfe", b"", "not UTF-8"),
        (b"n,n=user", b"", "no GS2 header"),
    ],
)
def test_a_malformed_or_dishonest_scram_message_fails_the_exchange(
    first: bytes, final: bytes, message: str
) -> None:
    server = _rfc_server()

    async def exchange() -> None:
        await server.step(first)
        await server.step(final)

    with pytest.raises(AuthenticationFailed, match=message):
        asyncio.run(exchange())
    assert server.principal is None


def test_an_unknown_user_gets_a_whole_exchange_with_a_stable_salt_then_the_same_failure() -> None:
    servers = [ScramServer(SHA_512, _lookup({})) for _ in range(2)]
    client = ScramClient("SCRAM-SHA-512", "nobody", "pw")
    firsts = [asyncio.run(s.step(client.first())) for s in servers]
    salts = {dict(a.split("=", 1) for a in f.decode().split(","))["s"] for f in firsts}
    assert len(salts) == 1  # asking twice shows the same salt, as for a real user
    with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism"):
        asyncio.run(servers[0].step(client.final(firsts[0])))


def test_scram_accepts_librdkafkas_doubled_client_nonce() -> None:
    client_nonce = b"rOprNGfwEbeRWgbNEkqO"
    server = _rfc_server()
    asyncio.run(server.step(RFC_CLIENT_FIRST))
    doubled = RFC_CLIENT_FINAL.replace(b"r=", b"r=" + client_nonce)
    # The proof covers the message as sent, so the RFC's proof no longer matches: the nonce
    # check passed, the credential check decides.
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        asyncio.run(server.step(doubled))


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (plain_token("alice", "secret"), None),
        (plain_token("alice", "secret", authzid="alice"), None),
        (plain_token("alice", "wrong"), "Invalid username or password"),
        (plain_token("nobody", "secret"), "Invalid username or password"),
        (plain_token("alice", "secret", authzid="admin"), "authorization id"),
        (b"alice\0secret", "expected 3 tokens"),
        (plain_token("alice", ""), "not specified"),
    ],
)
def test_plain_is_checked_against_the_users_scram_credential(
    token: bytes, message: str | None
) -> None:
    credentials = {("alice", SHA_256.code): new_credential(SHA_256, "alice", "secret", 4096)}
    server = PlainServer(_lookup(credentials))
    if message is None:
        assert asyncio.run(server.step(token)) == b""
        assert str(server.principal) == "User:alice"
    else:
        with pytest.raises(AuthenticationFailed, match=message):
            asyncio.run(server.step(token))
        assert server.principal is None


# -- through a KafkaServer on loopback


def _principal_echo() -> Dispatcher:
    """ApiVersions, the SASL APIs, and Metadata answering with the request's principal and
    listener as its cluster id."""
    dispatcher = dispatcher_with_api_versions()
    for handler in sasl_handlers():
        dispatcher.register(handler)

    async def metadata(request: Message, context: RequestContext) -> Message:
        del request
        return {
            "brokers": [],
            "cluster_id": f"{context.principal}@{context.listener}",
            "controller_id": -1,
            "topics": [],
        }

    dispatcher.register(
        ApiHandler(ApiKey.METADATA, metadata, versions=(0, 12), authorization=NO_AUTHORIZATION)
    )
    return dispatcher


def _who(connection: KafkaConnection) -> str | None:
    answer = connection.request(ApiKey.METADATA, 9, {"topics": None})
    return None if answer is None else answer["cluster_id"]


class _Tls:
    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority.create()
        self.truststore = directory / "ca.pem"
        self.ca.save(directory / "ca.key", self.truststore)
        self.server = self.ca.issue(directory / "server.pem", "gateway")
        self.client = self.ca.issue(directory / "client.pem", "carol")

    def context(self, client_auth: str) -> ReloadingServerContext:
        return ReloadingServerContext(
            TlsFiles(self.server, self.truststore, client_auth=client_auth)
        )

    def client_context(self, with_certificate: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.truststore))
        if with_certificate:
            context.load_cert_chain(str(self.client))
        return context


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[_Tls]:
    yield _Tls(tmp_path)


def _serve(
    scenario: Callable[[dict[str, int]], None],
    listeners: Sequence[KafkaListener],
    credentials: Credentials | None = None,
) -> None:
    async def run() -> None:
        async with running_server(
            _principal_echo(), listeners, _lookup(credentials or {})
        ) as server:
            await asyncio.to_thread(scenario, server.ports)

    asyncio.run(run())


def test_the_principal_is_the_sasl_user_the_certificates_cn_or_anonymous(tls: _Tls) -> None:
    credentials = {("dave", SHA_512.code): new_credential(SHA_512, "dave", "pw", 4096)}
    listeners = [
        KafkaListener("PLAINTEXT", "127.0.0.1", 0),
        KafkaListener("SSL", "127.0.0.1", 0, tls.context("requested")),
        KafkaListener("SASL_SSL", "127.0.0.1", 0, tls.context("none"), ("SCRAM-SHA-512",)),
    ]

    def scenario(ports: dict[str, int]) -> None:
        with KafkaConnection(("127.0.0.1", ports["PLAINTEXT"])) as c:
            assert _who(c) == "User:ANONYMOUS@PLAINTEXT"
        for with_certificate, who in ((True, "User:carol"), (False, "User:ANONYMOUS")):
            context = tls.client_context(with_certificate)
            with KafkaConnection(("127.0.0.1", ports["SSL"]), context) as c:
                assert _who(c) == f"{who}@SSL"
        with KafkaConnection(("127.0.0.1", ports["SASL_SSL"]), tls.client_context(False)) as c:
            answer = authenticate(c, "SCRAM-SHA-512", "dave", "pw")
            assert answer is not None and answer["error_code"] == 0
            assert answer["session_lifetime_ms"] == 0  # no re-authentication (KIP-368)
            assert _who(c) == "User:dave@SASL_SSL"

    _serve(scenario, listeners, credentials)


def test_a_required_client_certificate_refuses_clients_without_one(tls: _Tls) -> None:
    listeners = [KafkaListener("SSL", "127.0.0.1", 0, tls.context("required"))]

    def scenario(ports: dict[str, int]) -> None:
        with KafkaConnection(("127.0.0.1", ports["SSL"]), tls.client_context(True)) as c:
            assert _who(c) == "User:carol@SSL"
        # TLS 1.3 reports the refusal after the client's side of the handshake: at the
        # first read at the latest.
        with pytest.raises((ssl.SSLError, ConnectionResetError, AssertionError)):
            with KafkaConnection(("127.0.0.1", ports["SSL"]), tls.client_context(False)) as c:
                assert _who(c) is not None

    _serve(scenario, listeners)


def test_before_authentication_a_large_frame_or_another_request_closes_the_connection() -> None:
    listeners = [KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, None, ("PLAIN",))]

    def scenario(ports: dict[str, int]) -> None:
        address = ("127.0.0.1", ports["SASL_PLAINTEXT"])
        with KafkaConnection(address) as c:
            c.send_frame(b"\0" * (SASL_FRAME_BYTES_MAX + 1))
            assert c.closed_by_peer()
        with KafkaConnection(address) as c:
            assert _who(c) is None  # Metadata before authenticating: closed
        with KafkaConnection(address) as c:
            handshake = c.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
            assert handshake is not None and handshake["error_code"] == 0
            # A second handshake is not the token expected: closed without an answer.
            assert c.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) is None
        with KafkaConnection(address) as c:
            answer = authenticate(c, "PLAIN", "nobody", "pw")
            assert answer is not None
            assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert c.closed_by_peer()

    _serve(scenario, listeners)


def test_a_connection_that_does_not_authenticate_in_time_is_closed() -> None:
    listeners = [KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, None, ("PLAIN",))]

    def scenario(ports: dict[str, int]) -> None:
        with KafkaConnection(("127.0.0.1", ports["SASL_PLAINTEXT"])) as c:
            versions = c.request(ApiKey.API_VERSIONS, 0, {})
            assert versions is not None and versions["error_code"] == 0
            assert c.closed_by_peer()  # within the 0.2 s bound (the read waits up to 10 s)

    async def run() -> None:
        async with running_server(
            _principal_echo(), listeners, _lookup({}), authentication_timeout_ms=200
        ) as server:
            await asyncio.to_thread(scenario, server.ports)

    asyncio.run(run())


def test_connections_in_their_tls_handshake_count_against_max_connections(tls: _Tls) -> None:
    """A client that opens sockets and never finishes a handshake holds at most
    max.connections of them: the next one is closed at once, and once the stalled ones go
    a client gets in again."""
    listeners = [KafkaListener("SSL", "127.0.0.1", 0, tls.context("none"))]

    def scenario(ports: dict[str, int]) -> None:
        address = ("127.0.0.1", ports["SSL"])
        stalled = [socket.create_connection(address, timeout=READ_TIMEOUT_S) for _ in range(2)]
        try:
            with KafkaConnection(address, tls.client_context(False)) as refused:
                raise AssertionError(f"a third connection was let in: {refused}")
        except (ssl.SSLError, ConnectionError, OSError):
            pass
        finally:
            for held in stalled:
                held.close()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            try:
                with KafkaConnection(address, tls.client_context(False)) as c:
                    assert _who(c) == "User:ANONYMOUS@SSL"
                    return
            except (ssl.SSLError, ConnectionError, OSError):
                # The server notices the stalled sockets' close as it reads them.
                if time.monotonic() > deadline:
                    raise

    async def run() -> None:
        async with running_server(
            _principal_echo(), listeners, _lookup({}), connections_max=2
        ) as server:
            await asyncio.to_thread(scenario, server.ports)

    asyncio.run(run())


def _handshake_over(
    sock: socket.socket, client: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
) -> None:
    """Runs a memory-BIO TLS client's handshake over ``sock``, leaving in ``outgoing`` what it
    still has to send (TLS 1.3: its Finished message)."""
    while True:
        try:
            client.do_handshake()
            return
        except ssl.SSLWantReadError:
            if outgoing.pending:
                sock.sendall(outgoing.read())
            data = sock.recv(65536)
            assert data, "the server closed during the handshake"
            incoming.write(data)


def test_a_request_sent_with_the_last_handshake_message_is_served_as_the_certificates(
    tls: _Tls,
) -> None:
    """A TLS 1.3 client may send its first request in the same segment as its Finished: the
    server hands the request over before the upgrade completes, and it must still be served,
    as the certificate's principal (not anonymously, before the certificate is known)."""
    listeners = [KafkaListener("SSL", "127.0.0.1", 0, tls.context("required"))]

    def scenario(ports: dict[str, int]) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = tls.client_context(True).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        with socket.create_connection(("127.0.0.1", ports["SSL"]), READ_TIMEOUT_S) as sock:
            _handshake_over(sock, client, incoming, outgoing)
            client.write(encode_request(ApiKey.METADATA, 9, 1, "early", {"topics": None}))
            sock.sendall(outgoing.read())  # the Finished and the request, in one segment
            received = b""
            while True:
                data = sock.recv(65536)
                assert data, "closed before answering"
                incoming.write(data)
                try:
                    received += client.read(65536)
                except ssl.SSLWantReadError:
                    continue
                size = int.from_bytes(received[:4], "big")
                if len(received) >= 4 + size:
                    break
        correlation_id, answer = decode_response(ApiKey.METADATA, 9, received[4 : 4 + size])
        assert correlation_id == 1
        assert answer["cluster_id"] == "User:carol@SSL"

    _serve(scenario, listeners)
