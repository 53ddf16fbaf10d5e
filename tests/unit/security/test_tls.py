"""TLS files and the reloading server context: a real asyncio TLS server on loopback, real
handshakes, certificates made by the local CA (brook/security/certificates.py)."""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from brook.security.certificates import CertificateAuthority
from brook.security.tls import ReloadingServerContext, TlsError, TlsFiles


def _client_context(ca: CertificateAuthority, keystore: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.certificate_pem.decode())
    if keystore is not None:
        context.load_cert_chain(keystore)
    return context


@asynccontextmanager
async def _echo_server(context: ssl.SSLContext) -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await reader.readexactly(4))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _exchange(port: int, context: ssl.SSLContext) -> bytes:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context), 10
    )
    try:
        writer.write(b"ping")
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(4), 10)
    finally:
        writer.close()


def _server_common_name(port: int, context: ssl.SSLContext) -> str:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            subject = dict(item[0] for item in tls.getpeercert()["subject"])
            return str(subject["commonName"])


def test_material_names_the_certificate_and_refuses_a_key_that_is_not_the_certificates(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority.create()
    ca.save(tmp_path / "ca.key", tmp_path / "ca.pem")
    keystore = ca.issue(tmp_path / "node.pem", "brook", key_password="secret")
    files = TlsFiles(keystore, tmp_path / "ca.pem", key_password="secret")
    assert files.material().subject_common_name == "brook"

    other = ca.issue(tmp_path / "other.pem", "other")
    mixed = tmp_path / "mixed.pem"
    key_end = other.read_bytes().index(b"-----BEGIN CERTIFICATE-----")
    mixed.write_bytes(
        other.read_bytes()[:key_end]
        + keystore.read_bytes()[keystore.read_bytes().index(b"-----BEGIN CERTIFICATE-----") :]
    )
    with pytest.raises(TlsError, match="not the private key's"):
        TlsFiles(mixed, None).material()
    with pytest.raises(TlsError, match="no usable private key"):
        TlsFiles(keystore, None, key_password="wrong").material()
    with pytest.raises(TlsError, match=r"ssl\.keystore\.location"):
        TlsFiles(tmp_path / "missing.pem", None).material()


def test_required_client_auth_refuses_clients_without_a_certificate_or_with_a_foreign_one(
    tmp_path: Path,
) -> None:
    asyncio.run(asyncio.wait_for(_refuses_clients_without_a_valid_certificate(tmp_path), 60))


async def _refuses_clients_without_a_valid_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority.create()
    ca.save(tmp_path / "ca.key", tmp_path / "ca.pem")
    files = TlsFiles(
        ca.issue(tmp_path / "server.pem", "brook"), tmp_path / "ca.pem", client_auth="required"
    )
    foreign = CertificateAuthority.create("someone else's CA")
    expired_start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)
    async with _echo_server(ReloadingServerContext(files).context) as port:
        good = ca.issue(tmp_path / "alice.pem", "alice")
        assert await _exchange(port, _client_context(ca, good)) == b"ping"
        for keystore in (
            None,
            foreign.issue(tmp_path / "foreign.pem", "alice"),
            ca.issue(
                tmp_path / "expired.pem",
                "alice",
                not_before=expired_start,
                validity=datetime.timedelta(days=1),
            ),
        ):
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                await _exchange(port, _client_context(ca, keystore))


def test_a_renewed_certificate_is_served_from_the_next_connection_without_a_restart(
    tmp_path: Path,
) -> None:
    asyncio.run(asyncio.wait_for(_serves_a_renewed_certificate(tmp_path), 60))


async def _serves_a_renewed_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority.create()
    ca.save(tmp_path / "ca.key", tmp_path / "ca.pem")
    keystore = ca.issue(tmp_path / "server.pem", "first")
    reloading = ReloadingServerContext(TlsFiles(keystore, tmp_path / "ca.pem"))
    client = _client_context(ca)
    async with _echo_server(reloading.context) as port:
        assert await asyncio.to_thread(_server_common_name, port, client) == "first"
        renewed = ca.issue(tmp_path / "renewed.pem", "second")
        os.replace(renewed, keystore)
        assert reloading.reload_if_changed()
        assert await asyncio.to_thread(_server_common_name, port, client) == "second"

        keystore.write_bytes(b"not a keystore")
        assert not reloading.reload_if_changed()
        assert await asyncio.to_thread(_server_common_name, port, client) == "second"
