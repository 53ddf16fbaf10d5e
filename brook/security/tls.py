"""TLS for every listener and client of Brook: Kafka's configuration names, PEM files, and
certificates re-read when their files change, without a restart.

Settings (Kafka's names; the PEM form only):

- ``listener.security.protocol.map``: NAME:PROTOCOL pairs; a listener is TLS when its
  protocol is SSL or SASL_SSL (``security_protocol``).
- ``ssl.keystore.location``: one PEM file holding the private key and the certificate chain
  (the node's own certificate first), Kafka's ``ssl.keystore.type=PEM``; ``ssl.key.password``
  decrypts an encrypted key.
- ``ssl.truststore.location``: the PEM bundle of CA certificates a peer's certificate must
  chain to.
- ``ssl.client.auth``: none | requested | required: whether a TLS listener asks clients for a
  certificate (required: refuses those without one that chains to the truststore).

``TlsFiles`` reads them (``material()`` parses and checks the files: key and certificate
match, each file parses) and tells when they changed (``changed()``, by modification time and
size). ``ReloadingServerContext`` is the ``ssl.SSLContext`` an asyncio server listens with:
each handshake is handed the context made from the newest files, so a renewed certificate or
trust store is served from the next connection on, and a broken renewal is logged and the
previous files keep being served.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from brook.config import Config, ConfigKey, ConfigType, Importance, OneOf, Password

__all__ = [
    "CLIENT_AUTH_VALUES",
    "SECURITY_PROTOCOLS",
    "TLS_KEYS",
    "ReloadingFiles",
    "ReloadingServerContext",
    "TlsError",
    "TlsFiles",
    "TlsMaterial",
    "protocol_map",
    "security_protocol",
    "uses_tls",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH_VALUES: Final = ("none", "requested", "required")
# How often a listener looks at its files' modification times, at most.
RELOAD_CHECK_INTERVAL_S: Final = 1.0
# PEM files larger than this are refused (a keystore or CA bundle is a few KiB).
PEM_BYTES_MAX: Final = 1024 * 1024

_DEFAULT_MAP: Final = (
    "PLAINTEXT:PLAINTEXT",
    "SSL:SSL",
    "SASL_PLAINTEXT:SASL_PLAINTEXT",
    "SASL_SSL:SASL_SSL",
    "GRPC:PLAINTEXT",
    "METRICS:PLAINTEXT",
    "PLAINTEXT_NODES:PLAINTEXT",
)


def _check_map(value: object) -> str | None:
    if not isinstance(value, tuple):
        return "is not a list"
    try:
        _parse_map(value)
    except ValueError as e:
        return str(e)
    return None


def _parse_map(entries: tuple[str, ...]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        if not sep or not name:
            raise ValueError(f"'{entry}' is not of the form LISTENER_NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"'{entry}': {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        if name in mapping:
            raise ValueError(f"listener {name} appears more than once")
        mapping[name] = protocol
    return mapping


class _ProtocolMap:
    def __call__(self, value: object) -> str | None:
        return _check_map(value)

    def describe(self) -> str:
        return "LISTENER_NAME:PROTOCOL pairs, protocol one of " + ", ".join(SECURITY_PROTOCOLS)


TLS_KEYS: Final = (
    ConfigKey(
        "listener.security.protocol.map",
        ConfigType.LIST,
        _DEFAULT_MAP,
        "The security protocol of each listener, as LISTENER_NAME:PROTOCOL pairs (PLAINTEXT, "
        "SSL, SASL_PLAINTEXT, SASL_SSL). A listener absent from the map is PLAINTEXT. Map GRPC "
        "to SSL to serve gRPC over TLS.",
        Importance.MEDIUM,
        _ProtocolMap(),
    ),
    ConfigKey(
        "ssl.keystore.type",
        ConfigType.STRING,
        "PEM",
        "The format of ssl.keystore.location; only PEM is supported.",
        Importance.LOW,
        OneOf(("PEM",)),
    ),
    ConfigKey(
        "ssl.keystore.location",
        ConfigType.STRING,
        "",
        "A PEM file with this process's private key and certificate chain (its own "
        "certificate first). Required by a TLS listener and by mutual TLS to other processes. "
        "Re-read when it changes.",
        Importance.HIGH,
    ),
    ConfigKey(
        "ssl.key.password",
        ConfigType.PASSWORD,
        None,
        "The password of the private key in ssl.keystore.location, if it is encrypted.",
        Importance.HIGH,
    ),
    ConfigKey(
        "ssl.truststore.type",
        ConfigType.STRING,
        "PEM",
        "The format of ssl.truststore.location; only PEM is supported.",
        Importance.LOW,
        OneOf(("PEM",)),
    ),
    ConfigKey(
        "ssl.truststore.location",
        ConfigType.STRING,
        "",
        "A PEM bundle of the CA certificates peers' certificates must chain to (clients' "
        "certificates on a TLS listener, servers' on outgoing TLS connections). Empty: the "
        "system's CAs for outgoing connections, and no client certificate can be verified. "
        "Re-read when it changes.",
        Importance.HIGH,
    ),
    ConfigKey(
        "ssl.client.auth",
        ConfigType.STRING,
        "none",
        "Whether TLS listeners (GRPC mapped to SSL, the gateway's SSL listener; a SASL_SSL "
        "listener authenticates by SASL and asks for none, as Kafka since KIP-684) ask clients "
        "for a certificate: none, requested (verified if "
        "given) or required (connections without a valid one are refused). A client's "
        "certificate names its principal, User:<subject common name>.",
        Importance.MEDIUM,
        OneOf(CLIENT_AUTH_VALUES),
    ),
)


class TlsError(Exception):
    """A TLS file is missing, unreadable or invalid; the message says which and why."""


def protocol_map(config: Config) -> dict[str, str]:
    """``listener.security.protocol.map`` as listener name -> security protocol."""
    return _parse_map(config.get_list("listener.security.protocol.map"))


def security_protocol(config: Config, listener_name: str) -> str:
    """The security protocol of a listener (PLAINTEXT when the map does not name it)."""
    return protocol_map(config).get(listener_name, "PLAINTEXT")


def uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """The parsed contents of the TLS files, PEM-encoded: the private key (unencrypted,
    PKCS#8; gRPC takes no password), the certificate chain and the CA bundle (empty: none)."""

    key_pem: bytes
    chain_pem: bytes
    ca_pem: bytes
    subject_common_name: str
    """The common name of the keystore's certificate: the principal it authenticates as."""
    not_after: float
    """When the keystore's certificate expires (seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where a process's TLS files are and how clients are asked for certificates."""

    keystore: Path | None
    truststore: Path | None
    key_password: str | None = None
    client_auth: str = "none"
    certificate: Path | None = None
    """The certificate chain when it has a file of its own (confluent-kafka's
    ssl.certificate.location beside ssl.key.location); the key is then the keystore's."""

    @classmethod
    def from_config(cls, config: Config) -> TlsFiles:
        keystore = config.get_string("ssl.keystore.location")
        truststore = config.get_string("ssl.truststore.location")
        password: Password | None = (
            config.get_password("ssl.key.password") if config.is_set("ssl.key.password") else None
        )
        return cls(
            keystore=Path(keystore) if keystore else None,
            truststore=Path(truststore) if truststore else None,
            key_password=password.value() if password is not None else None,
            client_auth=config.get_string("ssl.client.auth"),
        )

    def stamp(self) -> tuple[tuple[int, int], ...]:
        """The files' (modification time, size): changes when a file is replaced."""
        stamps = []
        for path in (self.keystore, self.truststore, self.certificate):
            if path is None:
                continue
            try:
                info = path.stat()
            except OSError:
                stamps.append((-1, -1))
            else:
                stamps.append((info.st_mtime_ns, info.st_size))
        return tuple(stamps)

    def material(self) -> TlsMaterial:
        """Reads and checks the files; raises TlsError naming the file and the problem."""
        if self.keystore is None:
            raise TlsError("ssl.keystore.location is not set: a TLS listener needs a keystore")
        keystore = _read_pem(self.keystore, "ssl.keystore.location")
        certificates = keystore
        if self.certificate is not None:
            certificates = _read_pem(self.certificate, "ssl.certificate.location")
        try:
            key = serialization.load_pem_private_key(
                keystore,
                password=self.key_password.encode() if self.key_password is not None else None,
            )
        except (ValueError, TypeError) as e:
            raise TlsError(f"{self.keystore}: no usable private key ({e})") from None
        try:
            chain = x509.load_pem_x509_certificates(certificates)
        except ValueError as e:
            raise TlsError(f"{self.certificate or self.keystore}: no certificate ({e})") from None
        if not _same_key(key, chain[0]):
            raise TlsError(f"{self.keystore}: the first certificate is not the private key's")
        ca_pem = self.truststore_pem()
        names = chain[0].subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return TlsMaterial(
            key_pem=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            chain_pem=b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain),
            ca_pem=ca_pem,
            subject_common_name=str(names[0].value) if names else "",
            not_after=chain[0].not_valid_after_utc.timestamp(),
        )

    def truststore_pem(self) -> bytes:
        """The CA bundle, checked (empty: no truststore); raises TlsError."""
        if self.truststore is None:
            return b""
        ca_pem = _read_pem(self.truststore, "ssl.truststore.location")
        try:
            x509.load_pem_x509_certificates(ca_pem)
        except ValueError as e:
            raise TlsError(f"{self.truststore}: no CA certificate ({e})") from None
        return ca_pem

    def server_context(self) -> ssl.SSLContext:
        """A server-side context from the current files; raises TlsError."""
        material = self.material()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(context, material)
        if self.client_auth != "none":
            if not material.ca_pem:
                raise TlsError(
                    f"ssl.client.auth={self.client_auth} needs ssl.truststore.location to "
                    "verify client certificates"
                )
            context.load_verify_locations(cadata=material.ca_pem.decode())
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth == "required" else ssl.CERT_OPTIONAL
            )
        return context


def _read_pem(path: Path, key: str) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(PEM_BYTES_MAX + 1)
    except OSError as e:
        raise TlsError(f"{key}={path}: {e.strerror or e}") from None
    if len(data) > PEM_BYTES_MAX:
        raise TlsError(f"{key}={path}: larger than {PEM_BYTES_MAX} bytes")
    return data


def _same_key(key: PrivateKeyTypes, certificate: x509.Certificate) -> bool:
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    return bool(
        key.public_key().public_bytes(encoding, public)
        == certificate.public_key().public_bytes(encoding, public)
    )


def _load_chain(context: ssl.SSLContext, material: TlsMaterial) -> None:
    """ssl loads a key and chain only from files: through a private temporary file, removed
    at once."""
    fd, name = tempfile.mkstemp(prefix="brook-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(material.key_pem + material.chain_pem)
        context.load_cert_chain(name)
    finally:
        os.unlink(name)


class ReloadingFiles(Generic[_T]):
    """What a listener makes from its TLS files (``make``: a context, gRPC's certificate
    configuration), made again when the files change (``TlsFiles.stamp``). A renewal that
    cannot be made is logged and the previous one stays current."""

    def __init__(self, files: TlsFiles, make: Callable[[TlsFiles], _T]) -> None:
        """Makes the first one; raises TlsError (or ssl.SSLError) for unusable files."""
        self.files = files
        self._make = make
        self._lock = threading.Lock()
        self._stamp = files.stamp()
        self.current = make(files)
        self.reloads = 0

    def refresh(self) -> _T | None:
        """Makes it again if the files changed since the last look; the new one (now
        current), or None when the files did not change or the new ones cannot be used."""
        with self._lock:
            stamp = self.files.stamp()
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            try:
                made = self._make(self.files)
            except (TlsError, ssl.SSLError, OSError) as e:
                _log.error(
                    "TLS files changed but cannot be loaded; still serving the previous ones",
                    extra={"reason": str(e)},
                )
                return None
            self.current = made
            self.reloads += 1
            _log.info("TLS files reloaded", extra={"keystore": str(self.files.keystore)})
            return made


class ReloadingServerContext:
    """The context an asyncio TLS server is created with. Every handshake is switched (in the
    SNI callback, which OpenSSL calls for every ClientHello) to the context made from the
    newest files, checked at most once a second; a renewal that fails to load is logged and
    the previous context stays."""

    def __init__(self, files: TlsFiles) -> None:
        self._contexts = ReloadingFiles(files, TlsFiles.server_context)
        self._checked = time.monotonic()
        self.context = files.server_context()
        self.context.sni_callback = self._on_hello

    @property
    def current(self) -> ssl.SSLContext:
        """The context new handshakes use."""
        return self._contexts.current

    @property
    def reloads(self) -> int:
        return self._contexts.reloads

    def reload_if_changed(self) -> bool:
        """Re-reads the files if they changed; True if a new context now serves."""
        self._checked = time.monotonic()
        return self._contexts.refresh() is not None

    def _on_hello(
        self,
        connection: ssl.SSLObject | ssl.SSLSocket,
        server_name: str | None,
        context: ssl.SSLContext,
    ) -> None:
        if time.monotonic() - self._checked >= RELOAD_CHECK_INTERVAL_S:
            self.reload_if_changed()
        connection.context = self._contexts.current
