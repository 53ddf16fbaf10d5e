"""How a client reaches the cluster securely: confluent-kafka's setting names, made into the
``ChannelSecurity`` of the client's channels.

- ``security.protocol``: PLAINTEXT, SSL (TLS; with ``ssl.certificate.location`` and
  ``ssl.key.location``, mutual TLS: the client is ``User:<certificate CN>``) or SASL_SSL (TLS,
  and ``sasl.username`` / ``sasl.password`` sent with every call as ``authorization: Basic``,
  which the servers check against the SCRAM credentials of the cluster's metadata). Left unset,
  the client uses the process's default channel security (plaintext unless the process is a
  Brook service or ``brook`` was given ``--command-config``), so a client made in a process
  that already knows how to reach its cluster needs no settings of its own.
- ``ssl.ca.location``: the PEM CA bundle the servers' certificates must chain to (unset: the
  system's CAs). ``ssl.key.password`` decrypts an encrypted ``ssl.key.location``.
- ``sasl.mechanism``: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; on gRPC every mechanism sends the
  password over TLS (the servers verify it against the stored SCRAM credential), so it only
  documents what the cluster stores.

SASL_PLAINTEXT is refused: credentials are never sent in the clear. Settings that the chosen
protocol would ignore (a certificate with PLAINTEXT, a password without SASL_SSL) are errors,
so a typo cannot silently downgrade a connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from brook.config import Config, ConfigError, ConfigKey, ConfigType, Importance, OneOf
from brook.rpc.channels import ChannelSecurity
from brook.security.tls import TlsError, TlsFiles

__all__ = [
    "CLIENT_SECURITY_PROTOCOLS",
    "SASL_MECHANISMS",
    "SECURITY_KEYS",
    "SECURITY_KEY_NAMES",
    "check_security",
    "security_from_config",
]

CLIENT_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SSL_FILES: Final = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")

SECURITY_KEYS: Final = (
    ConfigKey(
        "security.protocol",
        ConfigType.STRING,
        "PLAINTEXT",
        "How the client talks to the cluster's gRPC listeners: PLAINTEXT, SSL (TLS) or "
        "SASL_SSL (TLS with sasl.username and sasl.password). Left unset: the process's "
        "default (plaintext, unless brook's --command-config or a Brook service set one).",
        Importance.MEDIUM,
        OneOf(CLIENT_SECURITY_PROTOCOLS),
    ),
    ConfigKey(
        "ssl.ca.location",
        ConfigType.STRING,
        "",
        "A PEM file of the CA certificates the servers' certificates must chain to. Empty: "
        "the system's CAs.",
        Importance.LOW,
    ),
    ConfigKey(
        "ssl.certificate.location",
        ConfigType.STRING,
        "",
        "The client's certificate chain (PEM), for servers that require mutual TLS; needs "
        "ssl.key.location. The client's principal is User:<its subject common name>.",
        Importance.LOW,
    ),
    ConfigKey(
        "ssl.key.location",
        ConfigType.STRING,
        "",
        "The private key (PEM) of ssl.certificate.location.",
        Importance.LOW,
    ),
    ConfigKey(
        "ssl.key.password",
        ConfigType.PASSWORD,
        None,
        "The password of ssl.key.location, if it is encrypted.",
        Importance.LOW,
    ),
    ConfigKey(
        "sasl.mechanism",
        ConfigType.STRING,
        "PLAIN",
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. On gRPC the password is sent over TLS with "
        "every call and checked against the cluster's SCRAM credentials, whichever is named.",
        Importance.LOW,
        OneOf(SASL_MECHANISMS),
    ),
    ConfigKey(
        "sasl.username",
        ConfigType.STRING,
        "",
        "The user name for SASL_SSL.",
        Importance.MEDIUM,
    ),
    ConfigKey(
        "sasl.password",
        ConfigType.PASSWORD,
        None,
        "The password for SASL_SSL.",
        Importance.MEDIUM,
    ),
)


SECURITY_KEY_NAMES: Final = frozenset(key.name for key in SECURITY_KEYS)


def check_security(config: Config) -> str | None:
    """The security settings agree with each other (a ConfigDef check)."""
    protocol = config.get_string("security.protocol")
    given_files = [name for name in _SSL_FILES if config.get_string(name)]
    if config.is_set("ssl.key.password"):
        given_files.append("ssl.key.password")
    credentials = [
        name
        for name, given in (
            ("sasl.username", bool(config.get_string("sasl.username"))),
            ("sasl.password", config.is_set("sasl.password")),
        )
        if given
    ]
    if protocol == "PLAINTEXT" and given_files:
        return f"{', '.join(given_files)} need security.protocol SSL or SASL_SSL"
    if protocol != "SASL_SSL" and credentials:
        return f"{', '.join(credentials)} need security.protocol=SASL_SSL"
    if protocol == "SASL_SSL" and len(credentials) < 2:
        return "security.protocol=SASL_SSL needs sasl.username and sasl.password"
    if bool(config.get_string("ssl.certificate.location")) != bool(
        config.get_string("ssl.key.location")
    ):
        return "ssl.certificate.location and ssl.key.location go together"
    return None


def security_from_config(config: Config) -> ChannelSecurity | None:
    """The client's channel security (None: the process's default, when security.protocol is
    not given); reads the files, raising ConfigError naming the file and the problem."""
    if config.source("security.protocol").startswith("default"):
        return None
    protocol = config.get_string("security.protocol")
    if protocol == "PLAINTEXT":
        return ChannelSecurity()
    key = config.get_string("ssl.key.location")
    ca = config.get_string("ssl.ca.location")
    files = TlsFiles(
        keystore=Path(key) if key else None,
        truststore=Path(ca) if ca else None,
        key_password=(
            config.get_password("ssl.key.password").value()
            if config.is_set("ssl.key.password")
            else None
        ),
        certificate=Path(config.get_string("ssl.certificate.location")) if key else None,
    )
    try:
        if files.keystore is not None:
            material = files.material()
            key_pem, chain_pem, ca_pem = material.key_pem, material.chain_pem, material.ca_pem
        else:
            key_pem, chain_pem, ca_pem = None, None, files.truststore_pem()
    except TlsError as e:
        raise ConfigError([str(e)]) from None
    username = password = None
    if protocol == "SASL_SSL":
        username = config.get_string("sasl.username")
        password = config.get_password("sasl.password").value()
    return ChannelSecurity(
        tls=True,
        ca_pem=ca_pem or None,
        key_pem=key_pem,
        chain_pem=chain_pem,
        username=username,
        password=password,
    )
