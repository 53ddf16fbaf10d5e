"""gRPC over TLS in one process: a real grpc.aio server with the GRPC listener's credentials
(brook/security/grpc_tls.py), real channels (brook/rpc/channels.py), real handshakes with
certificates of a local CA; the settings that turn it on and what they refuse."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from brook.client import channel_security
from brook.config import Config, ConfigDef, ConfigError, RawSetting
from brook.rpc.channels import ChannelPool, ChannelSecurity, channel_options
from brook.security.certificates import CertificateAuthority
from brook.security.grpc_tls import INTER_BROKER_PROTOCOL, GrpcSecurity, ReloadingServerCredentials
from brook.security.tls import TLS_KEYS, TlsError, TlsFiles

CALL_TIMEOUT_S = 5.0
TEST_TIMEOUT_S = 60.0


class _Recorder(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Keeps the metadata of every call the server receives."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, Any]] = []

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        self.metadata.append(dict(details.invocation_metadata))
        return await continuation(details)


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    authority = CertificateAuthority.create()
    authority.save(tmp_path / "ca.key", tmp_path / "ca.pem")
    authority.issue(tmp_path / "server.pem", "brook")
    return authority


@asynccontextmanager
async def _server(files: TlsFiles, recorder: _Recorder | None = None) -> AsyncIterator[str]:
    server = grpc.aio.server(interceptors=[recorder] if recorder else [])
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", ReloadingServerCredentials(files).credentials())
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def _security(
    keystore: Path | None,
    truststore: Path,
    username: str | None = None,
    password: str | None = None,
) -> ChannelSecurity:
    if keystore is None:
        return ChannelSecurity(tls=True, ca_pem=truststore.read_bytes())
    material = TlsFiles(keystore, truststore).material()
    return ChannelSecurity(
        tls=True,
        ca_pem=material.ca_pem,
        key_pem=material.key_pem,
        chain_pem=material.chain_pem,
        username=username,
        password=password,
    )


async def _status(address: str, security: ChannelSecurity) -> grpc.StatusCode:
    pool = ChannelPool(channel_options(), security)
    try:
        stub = health_pb2_grpc.HealthStub(pool.channel(address))
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        assert isinstance(error, grpc.aio.AioRpcError)
        return error.code()
    finally:
        await pool.close()
    return grpc.StatusCode.OK


def _served_serial(address: str, ca_path: Path, keystore: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca_path))
    context.load_cert_chain(keystore)
    context.set_alpn_protocols(["h2"])
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S) as raw:
        with context.wrap_socket(raw, server_hostname=host) as connection:
            der = connection.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_mutual_tls_lets_in_a_certified_client_with_its_credentials_and_refuses_others(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    asyncio.run(asyncio.wait_for(_mutual_tls(ca, tmp_path), TEST_TIMEOUT_S))


async def _mutual_tls(ca: CertificateAuthority, tmp_path: Path) -> None:
    files = TlsFiles(tmp_path / "server.pem", tmp_path / "ca.pem", client_auth="required")
    client = ca.issue(tmp_path / "alice.pem", "alice", ())
    recorder = _Recorder()
    async with _server(files, recorder) as address:
        security = _security(client, tmp_path / "ca.pem", username="alice", password="s3cret")
        assert await _status(address, security) is grpc.StatusCode.OK
        assert recorder.metadata[-1]["authorization"] == "Basic YWxpY2U6czNjcmV0"

        calls = len(recorder.metadata)
        no_certificate = _security(None, tmp_path / "ca.pem")
        assert await _status(address, no_certificate) is grpc.StatusCode.UNAVAILABLE
        assert await _status(address, ChannelSecurity()) is grpc.StatusCode.UNAVAILABLE
        assert len(recorder.metadata) == calls


def test_without_required_client_auth_a_client_needs_only_to_trust_the_server(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    asyncio.run(asyncio.wait_for(_no_client_auth(ca, tmp_path), TEST_TIMEOUT_S))


async def _no_client_auth(ca: CertificateAuthority, tmp_path: Path) -> None:
    files = TlsFiles(tmp_path / "server.pem", tmp_path / "ca.pem", client_auth="none")
    async with _server(files) as address:
        assert await _status(address, _security(None, tmp_path / "ca.pem")) is grpc.StatusCode.OK
        other_ca = CertificateAuthority.create("elsewhere")
        other_ca.save(tmp_path / "other.key", tmp_path / "other.pem")
        distrusting = _security(None, tmp_path / "other.pem")
        assert await _status(address, distrusting) is grpc.StatusCode.UNAVAILABLE


def test_a_renewed_keystore_is_served_from_the_next_connection_and_a_broken_one_is_not(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    asyncio.run(asyncio.wait_for(_renewal(ca, tmp_path), TEST_TIMEOUT_S))


async def _renewal(ca: CertificateAuthority, tmp_path: Path) -> None:
    keystore = tmp_path / "server.pem"
    files = TlsFiles(keystore, tmp_path / "ca.pem", client_auth="required")
    client = ca.issue(tmp_path / "alice.pem", "alice", ())
    async with _server(files) as address:
        first = await asyncio.to_thread(_served_serial, address, tmp_path / "ca.pem", client)

        ca.issue(tmp_path / "renewed.pem", "brook").replace(keystore)
        renewed = x509.load_pem_x509_certificates(keystore.read_bytes())[0].serial_number
        served = await asyncio.to_thread(_served_serial, address, tmp_path / "ca.pem", client)
        assert served == renewed != first

        keystore.write_bytes(b"not a keystore")
        served = await asyncio.to_thread(_served_serial, address, tmp_path / "ca.pem", client)
        assert served == renewed
        assert await _status(address, _security(client, tmp_path / "ca.pem")) is (
            grpc.StatusCode.OK
        )


_DEFINITION = ConfigDef((*TLS_KEYS, INTER_BROKER_PROTOCOL))


def _config(**settings: str) -> Config:
    return _DEFINITION.parse(
        {name.replace("_", "."): RawSetting(value, "test") for name, value in settings.items()}
    )


def test_grpc_security_is_plaintext_by_default() -> None:
    security = GrpcSecurity.from_config(_config())
    assert security.server is None
    assert security.channels == ChannelSecurity()


def test_grpc_security_names_what_is_wrong(ca: CertificateAuthority, tmp_path: Path) -> None:
    keystore = str(tmp_path / "server.pem")
    cases = {
        "maps GRPC to SASL_SSL": _config(listener_security_protocol_map="GRPC:SASL_SSL"),
        f"{tmp_path / 'nope.pem'}: No such file": _config(
            listener_security_protocol_map="GRPC:SSL",
            ssl_keystore_location=str(tmp_path / "nope.pem"),
        ),
        "ssl.client.auth=required needs ssl.truststore.location": _config(
            listener_security_protocol_map="GRPC:SSL",
            ssl_keystore_location=keystore,
            ssl_client_auth="required",
        ),
        "security.inter.broker.protocol=SSL needs ssl.keystore.location": _config(
            security_inter_broker_protocol="SSL"
        ),
    }
    for expected, config in cases.items():
        with pytest.raises(TlsError, match=expected):
            GrpcSecurity.from_config(config)


def test_inter_broker_ssl_presents_the_keystore(ca: CertificateAuthority, tmp_path: Path) -> None:
    config = _config(
        security_inter_broker_protocol="SSL",
        ssl_keystore_location=str(tmp_path / "server.pem"),
        ssl_truststore_location=str(tmp_path / "ca.pem"),
    )
    channels = GrpcSecurity.from_config(config).channels
    material = TlsFiles(tmp_path / "server.pem", tmp_path / "ca.pem").material()
    assert channels.tls and channels.chain_pem == material.chain_pem
    assert channels.ca_pem == ca.certificate_pem


def test_client_security_settings_take_confluent_kafkas_names(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    client = ca.issue(tmp_path / "alice.pem", "alice", ())
    security = channel_security(
        {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(tmp_path / "ca.pem"),
            "ssl.certificate.location": str(client),
            "ssl.key.location": str(client),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "s3cret",
        }
    )
    assert security is not None and security.tls
    assert security.authorization == "Basic YWxpY2U6czNjcmV0"
    assert security.chain_pem == TlsFiles(client, None).material().chain_pem
    assert channel_security({}) is None
    assert channel_security({"security.protocol": "PLAINTEXT"}) == ChannelSecurity()


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"ssl.ca.location": "ca.pem"}, "need security.protocol SSL or SASL_SSL"),
        ({"security.protocol": "SSL", "sasl.username": "a"}, "need security.protocol=SASL_SSL"),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.username and sasl.password"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "SASL_PLAINTEXT"),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "c.pem"},
            "ssl.certificate.location and ssl.key.location go together",
        ),
        ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "nonexistent"),
    ],
)
def test_client_security_settings_that_would_not_protect_are_refused(
    settings: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        channel_security(settings)


def test_channel_security_never_sends_secrets_without_tls() -> None:
    with pytest.raises(ValueError, match="need TLS"):
        ChannelSecurity(username="alice", password="s3cret")
    with pytest.raises(ValueError, match="both a user name and a password"):
        ChannelSecurity(tls=True, username="alice")
