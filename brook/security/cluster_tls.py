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
    kafka-client.properties  how a Kafka client reaches the gateways' SASL_SSL listeners as
                          the SCRAM user ``admin`` (librdkafka's names: ``kcat -F``,
                          confluent-kafka); owner-only, it holds the password

``service_settings`` is what every process's configuration gets: GRPC:SSL with client
certificates required, SSL for its own channels (security.inter.broker.protocol), the gateway's
Kafka listener as SASL_SSL, and ACL authorization on, with the cluster's processes
(``User:brook``) and the operator (``User:admin``, by certificate or SCRAM password) as super
users: nobody else may do anything until an ACL allows it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from brook.config import STANDARD_AUTHORIZER
from brook.rpc.channels import ChannelSecurity
from brook.security.certificates import CertificateAuthority, write_private
from brook.security.tls import TlsFiles

__all__ = ["ADMIN_COMMON_NAME", "CLUSTER_COMMON_NAME", "TLS_DIR", "ClusterTls"]

TLS_DIR: Final = "tls"
CLUSTER_COMMON_NAME: Final = "brook"
ADMIN_COMMON_NAME: Final = "admin"
CLIENT_PROPERTIES: Final = "client.properties"
KAFKA_CLIENT_PROPERTIES: Final = "kafka-client.properties"
KAFKA_ADMIN_MECHANISM: Final = "SCRAM-SHA-512"
SUPER_USERS: Final = f"User:{CLUSTER_COMMON_NAME};User:{ADMIN_COMMON_NAME}"
KAFKA_LISTENER_PROTOCOL: Final = "SASL_SSL"
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

    @property
    def kafka_client_properties(self) -> Path:
        return self.folder / KAFKA_CLIENT_PROPERTIES

    def kafka_admin_password(self) -> str:
        """The SCRAM password of the Kafka user ``admin`` (made by ``ensure``)."""
        for line in self.kafka_client_properties.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "sasl.password":
                return value.strip()
        raise ValueError(f"{self.kafka_client_properties} names no sasl.password")

    def ensure(self, bootstrap_servers: str, kafka_bootstrap_servers: str = "") -> None:
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
        password = (
            self.kafka_admin_password()
            if self.kafka_client_properties.exists()
            else secrets.token_urlsafe(24)
        )
        kafka_lines = [
            "# Written by brook cluster up --tls: how a Kafka client reaches this cluster's",
            "# gateways (kcat -F this-file, or these settings in confluent-kafka).",
            f"bootstrap.servers={kafka_bootstrap_servers}",
            f"security.protocol={KAFKA_LISTENER_PROTOCOL}",
            f"sasl.mechanism={KAFKA_ADMIN_MECHANISM}",
            f"sasl.username={ADMIN_COMMON_NAME}",
            f"sasl.password={password}",
            f"ssl.ca.location={self.truststore}",
        ]
        write_private(self.kafka_client_properties, ("\n".join(kafka_lines) + "\n").encode())

    def service_settings(self) -> Mapping[str, str]:
        """The settings of every process of the cluster."""
        return {
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": SUPER_USERS,
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
