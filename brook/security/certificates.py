"""A local certificate authority: what ``brook cluster up --tls`` and the tests use to make
TLS files (PEM) for loopback clusters, with the ``cryptography`` package.

``CertificateAuthority.create`` makes a self-signed CA; ``issue`` makes a key and a
certificate signed by it for a common name (the principal it authenticates as, ``User:<CN>``)
and the hosts it serves (subject alternative names: IP addresses and DNS names), written as
a keystore PEM file (key then certificate, Kafka's PEM keystore) readable only by its owner.
Keys are ECDSA P-256: small and fast to make.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["DEFAULT_VALIDITY", "CertificateAuthority", "write_private"]

DEFAULT_VALIDITY: Final = datetime.timedelta(days=365)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def write_private(path: Path, data: bytes) -> None:
    """Writes a file only its owner may read (it holds a private key or a password), whatever
    the mode of a file it replaces."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode through os.open
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@dataclass(frozen=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(
        cls, common_name: str = "Brook local CA", validity: datetime.timedelta = DEFAULT_VALIDITY
    ) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @classmethod
    def load(cls, key_path: Path, certificate_path: Path) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an EC private key")
        return cls(key, x509.load_pem_x509_certificate(certificate_path.read_bytes()))

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def save(self, key_path: Path, certificate_path: Path) -> None:
        """The CA's key (owner-only) and certificate (the truststore of its cluster)."""
        write_private(key_path, _key_pem(self.key))
        certificate_path.write_bytes(self.certificate_pem)

    def issue(
        self,
        keystore: Path,
        common_name: str,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
        *,
        validity: datetime.timedelta = DEFAULT_VALIDITY,
        not_before: datetime.datetime | None = None,
        key_password: str | None = None,
    ) -> Path:
        """Writes a keystore (private key, then the certificate) for ``common_name``, valid for
        ``hosts`` (IP addresses or DNS names) as server and client; returns its path.
        ``not_before`` / ``validity`` place its validity (tests make expired ones)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        alternative_names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alternative_names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alternative_names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if alternative_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative_names), critical=False
            )
        certificate = builder.sign(self.key, hashes.SHA256())
        write_private(
            keystore,
            _key_pem(key, key_password) + certificate.public_bytes(serialization.Encoding.PEM),
        )
        return keystore
