"""The TLS files of a local cluster (``brook cluster up --tls``): a CA of its own, one
keystore every process serves and connects with, and one for the operator's tools, in the
cluster directory's ``tls/`` folder, made on the first start and kept across runs.

Layout of ``<dir>/tls/``::

    ca.key, ca.pem        the cluster's CA (its key readable by the owner only); ca.pem is
                          every process's truststore
    brook.pem             the processes' keystore: key and certificate, CN ``brook``
                          (principal User:brook, the cluster's super user), valid for the
                          cluster's host, 127.0.0.1 and localhost
    admin.pem             the operator's keystore, CN ``admin`` (principal User:admin)
    client.properties     how a client reaches the cluster: ``brook ... --command-config``,
                          or confluent-kafka's / the SDK's settings for the GRPC listeners

``service_settings`` is what every process's configuration gets: GRPC:SSL with client
certificates required, and SSL for its own channels (security.inter.broker.protocol).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from brook.rpc.channels import ChannelSecurity
from brook.security.certificates import CertificateAuthority
from brook.security.tls import TlsFiles

__all__ = ["ADMIN_COMMON_NAME", "CLUSTER_COMMON_NAME", "TLS_DIR", "ClusterTls"]

TLS_DIR: Final = "tls"
CLUSTER_COMMON_NAME: Final = "brook"
ADMIN_COMMON_NAME: Final = "admin"
CLIENT_PROPERTIES: Final = "client.properties"
# Kafka's default map with GRPC mapped to SSL.
_PROTOCOL_MAP: Final = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
    "GRPC:SSL,METRICS:PLAINTEXT,PLAINTEXT_NODES:PLAINTEXT"
)


@dataclass(frozen=True)
class ClusterTls:
    """The TLS files of the cluster in ``directory`` (the cluster directory)."""

    directory: Path
    host: str

    @property
    def folder(self) -> Path:
        return self.directory / TLS_DIR

    @property
    def truststore(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.folder / f"{CLUSTER_COMMON_NAME}.pem"

    @property
    def admin_keystore(self) -> Path:
        return self.folder / f"{ADMIN_COMMON_NAME}.pem"

    @property
    def client_properties(self) -> Path:
        return self.folder / CLIENT_PROPERTIES

    def ensure(self, bootstrap_servers: str) -> None:
        """Makes what is missing: the CA and both keystores on the first start (kept
        afterwards: processes and clients keep trusting the same CA), and the client
        properties naming ``bootstrap_servers`` (rewritten on every start, as nodes come
        and go)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        ca_key = self.folder / "ca.key"
        if not (ca_key.exists() and self.truststore.exists()):
            # Named apart from every other cluster's CA (a common name is at most 64 bytes).
            authority = CertificateAuthority.create(f"Brook local CA {secrets.token_hex(4)}")
            authority.save(ca_key, self.truststore)
            for stale in (self.keystore, self.admin_keystore):
                stale.unlink(missing_ok=True)
        else:
            authority = CertificateAuthority.load(ca_key, self.truststore)
        hosts = tuple(dict.fromkeys((self.host, "127.0.0.1", "localhost")))
        if not self.keystore.exists():
            authority.issue(self.keystore, CLUSTER_COMMON_NAME, hosts)
        if not self.admin_keystore.exists():
            authority.issue(self.admin_keystore, ADMIN_COMMON_NAME, ())
        lines = [
            "# Written by brook cluster up --tls: how a client reaches this cluster's GRPC",
            "# listeners (brook COMMAND --command-config this-file, or these settings in a",
            "# Producer, Consumer or brook.client.channel_security).",
            f"bootstrap.servers={bootstrap_servers}",
            "security.protocol=SSL",
            f"ssl.ca.location={self.truststore}",
            f"ssl.certificate.location={self.admin_keystore}",
            f"ssl.key.location={self.admin_keystore}",
        ]
        self.client_properties.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def service_settings(self) -> Mapping[str, str]:
        """The settings of every process of the cluster."""
        # Engineer F's authorizer adds super.users (User:brook for the processes, and
        # User:admin for the operator's tools) here once the key exists.
        return {
            "listener.security.protocol.map": _PROTOCOL_MAP,
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.location": str(self.truststore),
            "ssl.client.auth": "required",
            "security.inter.broker.protocol": "SSL",
        }

    def admin_security(self) -> ChannelSecurity:
        """The operator's channel security (the launcher's own health checks use it)."""
        material = TlsFiles(self.admin_keystore, self.truststore).material()
        return ChannelSecurity(
            tls=True,
            ca_pem=material.ca_pem,
            key_pem=material.key_pem,
            chain_pem=material.chain_pem,
        )
