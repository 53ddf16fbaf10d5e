"""The principal of a gRPC call (brook.security.grpc_identity) on real grpc.aio servers over
real TLS, with certificates made here by ``cryptography``: client certificates name their
common name, Basic credentials are checked against SCRAM credentials over TLS only."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from scripted_servers import unary_handler

from brook.metadata.image import MetadataImage
from brook.ports import allocate_free_ports
from brook.security.grpc_identity import GrpcIdentity, basic_credentials
from brook.security.principal import ANONYMOUS
from brook.security.scram import ITERATIONS_MAX, MECHANISMS, new_credential
from brook.v1 import metadata_pb2

METHOD = "/test.Identity/Who"
RPC_TIMEOUT_S = 10


@dataclass(frozen=True)
class Pki:
    """PEM bytes of a CA, a server certificate (127.0.0.1) and a client certificate."""

    ca: bytes
    server_key: bytes
    server_cert: bytes
    client_key: bytes
    client_cert: bytes


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    common_name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None = None,
    issuer_key: ec.EllipticCurvePrivateKey | None = None,
    *,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key or key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test-ca", ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    return Pki(
        ca=ca.public_bytes(pem),
        server_key=_pem_key(server_key),
        server_cert=_certificate(
            "server", server_key, ca.subject, ca_key, server=True
        ).public_bytes(pem),
        client_key=_pem_key(client_key),
        client_cert=_certificate("alice", client_key, ca.subject, ca_key).public_bytes(pem),
    )


def _image(*credentials: metadata_pb2.UserScramCredentialRecord) -> MetadataImage:
    image = MetadataImage()
    for credential in credentials:
        image.apply(metadata_pb2.MetadataRecord(user_scram_credential=credential))
    return image


Call = Callable[[list[tuple[str, str]]], Awaitable[str]]


@asynccontextmanager
async def _server(
    identity: GrpcIdentity, pki: Pki, *, tls: bool, client_certificate: bool = False
) -> AsyncIterator[Call]:
    """A server answering the caller's principal, and a function calling it with metadata."""

    async def who(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return str(await identity.principal_of(context)).encode()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([unary_handler("test.Identity", "Who", who)])
    (port,) = allocate_free_ports(1)
    address = f"127.0.0.1:{port}"
    if tls:
        server.add_secure_port(
            address,
            grpc.ssl_server_credentials(
                [(pki.server_key, pki.server_cert)],
                root_certificates=pki.ca,
                require_client_auth=client_certificate,
            ),
        )
        channel = grpc.aio.secure_channel(
            address,
            grpc.ssl_channel_credentials(
                pki.ca,
                pki.client_key if client_certificate else None,
                pki.client_cert if client_certificate else None,
            ),
        )
    else:
        server.add_insecure_port(address)
        channel = grpc.aio.insecure_channel(address)
    await server.start()

    async def call(metadata: list[tuple[str, str]]) -> str:
        answer = await channel.unary_unary(METHOD)(b"", metadata=metadata, timeout=RPC_TIMEOUT_S)
        assert isinstance(answer, bytes)
        return answer.decode()

    try:
        yield call
    finally:
        await channel.close()
        await server.stop(None)


async def _refused(call: Call, metadata: list[tuple[str, str]]) -> str:
    """The details of the UNAUTHENTICATED status the call ends with."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(metadata)
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED, refused.value
    return refused.value.details() or ""


SHA512 = MECHANISMS["SCRAM-SHA-512"]
SHA256 = MECHANISMS["SCRAM-SHA-256"]


def test_a_verified_client_certificate_names_the_caller(pki: Pki) -> None:
    identity = GrpcIdentity(lambda: _image(new_credential(SHA512, "bob", "pw")))

    async def scenario() -> None:
        async with _server(identity, pki, tls=True, client_certificate=True) as call:
            assert await call([]) == "User:alice"
            # The certificate is the stronger proof: credentials beside it are not looked at.
            assert await call([basic_credentials("bob", "pw")]) == "User:alice"

    asyncio.run(scenario())


def test_basic_credentials_over_tls_are_checked_against_the_scram_credentials(pki: Pki) -> None:
    image = _image(new_credential(SHA256, "bob", "right"), new_credential(SHA512, "carol", "pw2"))
    identity = GrpcIdentity(lambda: image)

    async def scenario() -> None:
        async with _server(identity, pki, tls=True) as call:
            assert await call([]) == str(ANONYMOUS)
            assert await call([basic_credentials("bob", "right")]) == "User:bob"
            assert await call([basic_credentials("carol", "pw2")]) == "User:carol"
            wrong = await _refused(call, [basic_credentials("bob", "wrong")])
            unknown = await _refused(call, [basic_credentials("nobody", "right")])
            assert wrong == unknown, "the answer does not tell which users exist"
            assert "wrong user name or password" in wrong
            for malformed in (
                "Bearer abc",
                "Basic !!!",
                "Basic " + base64.b64encode(b"x").decode(),
            ):
                details = await _refused(call, [("authorization", malformed)])
                assert "Basic base64(user:password)" in details

    asyncio.run(scenario())


def test_credentials_over_plaintext_are_refused_even_when_right(pki: Pki) -> None:
    identity = GrpcIdentity(lambda: _image(new_credential(SHA512, "bob", "right")))

    async def scenario() -> None:
        async with _server(identity, pki, tls=False) as call:
            assert await call([]) == str(ANONYMOUS)
            details = await _refused(call, [basic_credentials("bob", "right")])
            assert "TLS" in details and "plaintext" in details

    asyncio.run(scenario())


def test_a_changed_password_is_refused_at_once_despite_the_cache(pki: Pki) -> None:
    images = [_image(new_credential(SHA512, "bob", "old"))]
    identity = GrpcIdentity(lambda: images[-1])

    async def scenario() -> None:
        async with _server(identity, pki, tls=True) as call:
            assert await call([basic_credentials("bob", "old")]) == "User:bob"
            assert identity.cached_checks == 1
            images.append(_image(new_credential(SHA512, "bob", "new")))
            await _refused(call, [basic_credentials("bob", "old")])
            assert await call([basic_credentials("bob", "new")]) == "User:bob"
            images.append(_image())  # the user deleted
            await _refused(call, [basic_credentials("bob", "new")])

    asyncio.run(scenario())


def test_the_cache_is_bounded() -> None:
    users = [f"user-{i}" for i in range(5)]
    image = _image(*(new_credential(SHA256, name, "pw") for name in users))
    identity = GrpcIdentity(lambda: image, cache_entries_max=2)

    async def scenario() -> None:
        for name in users:
            assert await identity.password_matches(name, "pw")
            assert identity.cached_checks <= 2
        assert not await identity.password_matches(users[0], "other")

    asyncio.run(scenario())


def test_checks_run_off_the_event_loop() -> None:
    """PBKDF2 at the highest iteration count, several checks at once: the loop keeps
    turning (a check run on the loop would stall it for its whole duration)."""
    image = _image(new_credential(SHA512, "bob", "pw", iterations=ITERATIONS_MAX))
    identity = GrpcIdentity(lambda: image, cache_entries_max=0)

    async def scenario() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        started = loop.time()
        results = await asyncio.gather(*(identity.password_matches("bob", "pw") for _ in range(6)))
        elapsed = loop.time() - started
        done.set()
        await ticking
        assert all(results)
        return ticks, elapsed

    # On the loop, it would turn about once between checks.
    ticks, elapsed = asyncio.run(scenario())
    assert ticks > 100, f"the loop turned only {ticks} times in {elapsed:.3f} s of checks"
