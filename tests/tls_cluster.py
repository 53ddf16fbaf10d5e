"""What the tests of a ``tls=True`` cluster (``brook cluster up --tls``) share: its TLS files,
and the operator's Admin and client settings (the ``admin`` certificate, a super user)."""

from __future__ import annotations

from typing import Final

from brook.client import Admin
from brook.launcher import LocalCluster
from brook.security.cluster_tls import ClusterTls

__all__ = ["ADMIN_TIMEOUT_MS", "cluster_tls", "operator_admin", "operator_settings"]

ADMIN_TIMEOUT_MS: Final = 30_000


def cluster_tls(cluster: LocalCluster) -> ClusterTls:
    assert cluster.tls is not None, "the cluster was not started with tls=True"
    return cluster.tls


def operator_admin(cluster: LocalCluster) -> Admin:
    """An Admin with the operator's certificate."""
    return Admin(
        cluster.controller_bootstrap_servers,
        default_api_timeout_ms=ADMIN_TIMEOUT_MS,
        security=cluster_tls(cluster).admin_security(),
    )


def operator_settings(cluster: LocalCluster, node: str) -> dict[str, object]:
    """confluent-kafka's (and the SDK's) settings of the operator's certificate, to ``node``'s
    GRPC listener."""
    tls = cluster_tls(cluster)
    return {
        "bootstrap.servers": cluster.grpc_address(node),
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.truststore),
        "ssl.certificate.location": str(tls.admin_keystore),
        "ssl.key.location": str(tls.admin_keystore),
    }
