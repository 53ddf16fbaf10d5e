"""TLS of a service's gRPC: the GRPC listener's server credentials, with certificates re-read
when their files change, and the security of the channels the service opens to the other
processes of the cluster.

- The GRPC listener serves TLS when ``listener.security.protocol.map`` maps GRPC to SSL, with
  the keystore (``ssl.keystore.location``) as its certificate. ``ssl.client.auth=required``
  refuses, in the handshake, every client without a certificate that chains to the truststore.
  gRPC's Python API can only require a client certificate or not ask for one, so
  ``requested`` (and ``none``) do not ask: on gRPC a client is then known by the credentials
  it sends (``authorization: Basic``) or is anonymous — never more privileged than Kafka's
  ``requested`` would make it. GRPC mapped to a SASL protocol is a configuration error.
- Every new handshake asks ``ReloadingServerCredentials`` for the certificates; it re-reads
  the files when their modification time or size changed (``TlsFiles.stamp``), so a renewed
  certificate or CA bundle is served from the next connection on, without a restart. Files
  that no longer load are logged and the previous ones keep being served.
- ``security.inter.broker.protocol`` (Kafka's name) is the protocol of this process's own
  channels to the other Brook processes: SSL makes them TLS, verifying the servers against the
  truststore and presenting the keystore as the client certificate (the process's principal,
  ``User:<CN>``). The keystore is read at start-up: channels opened later present the
  certificate the process started with.

``GrpcSecurity.from_config`` reads and checks everything (TlsError naming the file and the
problem), so the runtime refuses to start with bad TLS files as it does with bad settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

import grpc

from brook.config import Config, ConfigKey, ConfigType, Importance, OneOf
from brook.rpc.channels import ChannelSecurity
from brook.security.tls import ReloadingFiles, TlsError, TlsFiles, security_protocol

__all__ = [
    "GRPC_LISTENER",
    "INTER_BROKER_PROTOCOL",
    "INTER_BROKER_PROTOCOLS",
    "GrpcSecurity",
    "ReloadingServerCredentials",
    "outgoing_security",
]

_log = logging.getLogger(__name__)

GRPC_LISTENER: Final = "GRPC"
INTER_BROKER_PROTOCOLS: Final = ("PLAINTEXT", "SSL")

INTER_BROKER_PROTOCOL: Final = ConfigKey(
    "security.inter.broker.protocol",
    ConfigType.STRING,
    "PLAINTEXT",
    "The protocol of this process's gRPC channels to the other Brook processes: PLAINTEXT or "
    "SSL (TLS, the servers verified against ssl.truststore.location, this process's "
    "ssl.keystore.location presented as its client certificate). Set SSL on every process "
    "of a cluster whose GRPC listeners are SSL.",
    Importance.MEDIUM,
    OneOf(INTER_BROKER_PROTOCOLS),
)


class ReloadingServerCredentials:
    """The GRPC listener's TLS: gRPC asks ``fetch`` for the certificates at every handshake,
    and gets new ones once the files changed (and load)."""

    def __init__(self, files: TlsFiles) -> None:
        """Reads the files; raises TlsError."""
        self._required = files.client_auth == "required"
        self._configurations = ReloadingFiles(files, self._configuration)

    @property
    def reloads(self) -> int:
        return self._configurations.reloads

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._configurations.current,
            self.fetch,
            require_client_authentication=self._required,
        )

    def fetch(self) -> Any:
        """New certificates if the files changed since the last look and load, else None
        (gRPC then keeps the ones it has)."""
        return self._configurations.refresh()

    def _configuration(self, files: TlsFiles) -> Any:
        material = files.material()
        if self._required and not material.ca_pem:
            raise TlsError(
                "ssl.client.auth=required needs ssl.truststore.location to verify client "
                "certificates"
            )
        return grpc.ssl_server_certificate_configuration(
            [(material.key_pem, material.chain_pem)],
            root_certificates=material.ca_pem if self._required else None,
        )


def outgoing_security(config: Config) -> ChannelSecurity:
    """The security of the process's channels (``security.inter.broker.protocol``); raises
    TlsError."""
    if config.get_string("security.inter.broker.protocol") == "PLAINTEXT":
        return ChannelSecurity()
    files = TlsFiles.from_config(config)
    if files.keystore is None:
        raise TlsError(
            "security.inter.broker.protocol=SSL needs ssl.keystore.location: the client "
            "certificate the other processes know this one by"
        )
    material = files.material()
    return ChannelSecurity(
        tls=True,
        ca_pem=material.ca_pem or None,
        key_pem=material.key_pem,
        chain_pem=material.chain_pem,
    )


@dataclass(frozen=True)
class GrpcSecurity:
    """A service's gRPC security, read and checked from its configuration."""

    server: ReloadingServerCredentials | None
    """The GRPC listener's TLS; None: plaintext."""
    channels: ChannelSecurity
    """Its channels to the other processes."""

    @classmethod
    def from_config(cls, config: Config) -> GrpcSecurity:
        """Raises TlsError naming the setting or file and the problem."""
        protocol = security_protocol(config, GRPC_LISTENER)
        if protocol not in ("PLAINTEXT", "SSL"):
            raise TlsError(
                f"listener.security.protocol.map maps GRPC to {protocol}: the GRPC listener is "
                "PLAINTEXT or SSL (on SSL, gRPC clients may also send credentials)"
            )
        server = None
        if protocol == "SSL":
            files = TlsFiles.from_config(config)
            server = ReloadingServerCredentials(files)
            if files.client_auth == "requested":
                _log.warning(
                    "ssl.client.auth=requested: gRPC cannot ask for an optional client "
                    "certificate, so the GRPC listener asks for none (clients are known by "
                    "their credentials, else anonymous); use required for mutual TLS"
                )
        return cls(server, outgoing_security(config))
