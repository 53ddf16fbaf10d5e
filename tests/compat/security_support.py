"""What the gateway's security tests share: TLS files from a local CA, SCRAM users in the
metadata, and a gateway process with every Kafka listener (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL) in front of a cluster the launcher started.

Users: ``create_user`` is the one way the tests make them, through the SDK's Admin
(AlterUserScramCredentials), as an operator does.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from brook.client.admin import Admin, UserScramCredentialUpsertion
from brook.health import HealthStatus, wait_until_serving
from brook.launcher import LocalCluster
from brook.ports import allocate_free_port_block, allocate_free_ports
from brook.security.certificates import CertificateAuthority

GATEWAY_START_TIMEOUT_MS: Final = 60_000
GATEWAY_STOP_TIMEOUT_S: Final = 10.0
KAFKA_LISTENERS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Per-broker ports 2 apart per listener (kafka.node.port.stride): storage node 1 is at
# base + 1, base + 3, base + 5, base + 7 on the four listeners.
NODE_PORT_STRIDE: Final = 2
GATEWAY_NODE_ID: Final = 3001


def create_user(cluster: LocalCluster, name: str, password: str, mechanism: str) -> None:
    """Gives user ``name`` a SCRAM credential for ``mechanism`` (SCRAM-SHA-256 or -512) made
    from ``password``, committed to the metadata when this returns."""
    with Admin(cluster.controller_bootstrap_servers) as admin:
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(name, password, mechanism)]
        )
    assert errors == {name: None}, errors


@dataclass(frozen=True)
class TlsFiles:
    """A CA, the gateway's keystore, and client keystores: trusted, expired, foreign."""

    truststore: Path
    gateway_keystore: Path
    client_keystore: Path
    """CN "alice-cert", issued by the truststore's CA."""
    expired_keystore: Path
    foreign_keystore: Path
    """Issued by a CA the gateway does not trust."""
    foreign_truststore: Path


def make_tls_files(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create()
    foreign = CertificateAuthority.create("Somebody else's CA")
    ca.save(directory / "ca.key", directory / "ca.pem")
    foreign.save(directory / "foreign-ca.key", directory / "foreign-ca.pem")
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    return TlsFiles(
        truststore=directory / "ca.pem",
        gateway_keystore=ca.issue(directory / "gateway.pem", "brook-gateway"),
        client_keystore=ca.issue(directory / "alice.pem", "alice-cert"),
        expired_keystore=ca.issue(
            directory / "expired.pem",
            "expired-cert",
            not_before=long_ago,
            validity=datetime.timedelta(days=1),
        ),
        foreign_keystore=foreign.issue(directory / "mallory.pem", "mallory"),
        foreign_truststore=directory / "foreign-ca.pem",
    )


@dataclass(frozen=True)
class SecureGateway:
    """A gateway process with every Kafka listener."""

    ports: Mapping[str, int]
    """Kafka listener name -> its bootstrap port."""
    node_ports: Mapping[str, int]
    """Kafka listener name -> its port for storage node 1."""
    process: subprocess.Popen[bytes]
    log: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def alive(self) -> bool:
        return self.process.poll() is None


@contextmanager
def secure_gateway(
    cluster: LocalCluster,
    directory: Path,
    tls: TlsFiles,
    settings: Mapping[str, str] | None = None,
) -> Iterator[SecureGateway]:
    """A gateway joined to ``cluster`` with the four Kafka listeners on free ports, the TLS
    files of ``tls`` and per-broker ports for storage node 1 on each listener; ``settings``
    override the rest. Terminated on the way out."""
    directory.mkdir(parents=True, exist_ok=True)
    grpc, *kafka = allocate_free_ports(1 + len(KAFKA_LISTENERS))
    base = allocate_free_port_block(NODE_PORT_STRIDE * len(KAFKA_LISTENERS)) - 1
    ports = dict(zip(KAFKA_LISTENERS, kafka, strict=True))
    listeners = ",".join(
        [f"GRPC://127.0.0.1:{grpc}", *(f"{n}://127.0.0.1:{p}" for n, p in ports.items())]
    )
    config = {
        "node.id": str(GATEWAY_NODE_ID),
        "listeners": listeners,
        "controller.quorum.bootstrap.servers": cluster.controller_bootstrap_servers,
        "kafka.node.port.base": str(base),
        "kafka.node.port.stride": str(NODE_PORT_STRIDE),
        "ssl.keystore.location": str(tls.gateway_keystore),
        "ssl.truststore.location": str(tls.truststore),
        "ssl.client.auth": "requested",
        **(settings or {}),
    }
    config_path = directory / "gateway.properties"
    config_path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    log = directory / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "brook_gateway", "--config", str(config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        result = wait_until_serving(
            f"127.0.0.1:{grpc}",
            timeout_ms=GATEWAY_START_TIMEOUT_MS,
            abort_reason=lambda: None if process.poll() is None else "exited",
        )
        assert result.status is HealthStatus.SERVING, (result.describe(), log.read_text())
        node_ports = {
            name: base + i * NODE_PORT_STRIDE + 1 for i, name in enumerate(KAFKA_LISTENERS)
        }
        yield SecureGateway(ports, node_ports, process, log)
    finally:
        process.terminate()
        try:
            process.wait(GATEWAY_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
