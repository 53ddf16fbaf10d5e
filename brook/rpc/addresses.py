"""Addresses of Brook's endpoints: the one way to write, pick and read ``host:port``.

- ``format_address(host, port)`` writes the address a gRPC target, a socket API and a person
  take: an IPv6 literal bracketed (``[::1]:9092``), host names and IPv4 unchanged. gRPC reads an
  unbracketed ``::1:9092`` as a host name, so a node advertising IPv6 is unreachable without it.
- ``listener_address(endpoints, listener)`` picks the named listener (GRPC unless said
  otherwise) out of a node's registered endpoints and formats it; None when the node registers
  no such listener or it has no usable host and port. There is no fallback to another listener:
  the controller refuses a registration without GRPC, and any other listener speaks another
  protocol.
- ``parse_address(text)`` is the inverse of ``format_address``: strict, ``(host, port)`` or a
  ValueError saying what is wrong with the text.

Kafka's Metadata response carries a broker's host and port as separate fields; those stay
unbracketed (a Kafka client brackets them itself), so nothing here is used for them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Final, Protocol

__all__ = ["GRPC_LISTENER", "Endpoint", "format_address", "listener_address", "parse_address"]

GRPC_LISTENER: Final = "GRPC"
PORT_MIN: Final = 1
PORT_MAX: Final = 65535

_HOST_LABEL: Final = r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOSTNAME_RE: Final = re.compile(rf"^(?=.{{1,253}}$){_HOST_LABEL}(\.{_HOST_LABEL})*$")


class Endpoint(Protocol):
    """One registered listener of a node: ``common_pb2.Endpoint`` or anything shaped like it."""

    @property
    def listener(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def format_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host (any host containing ':') bracketed: ``[::1]:9092``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listener_address(endpoints: Iterable[Endpoint], listener: str = GRPC_LISTENER) -> str | None:
    """The formatted address of the endpoint named ``listener``; None if there is none, or it
    has no host or a port outside 1..65535."""
    for endpoint in endpoints:
        if endpoint.listener == listener:
            if not endpoint.host or not PORT_MIN <= endpoint.port <= PORT_MAX:
                return None
            return format_address(endpoint.host, endpoint.port)
    return None


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as ``(host, port)``, the host unbracketed.
    Raises ValueError with the reason."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1 : end + 2] != ":":
            raise ValueError(f"'{text}' is not [ipv6]:port")
        host, port_text = text[1:end], text[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"'{host}' is not an IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"'{text}' has no port (expected host:port)")
        if not host:
            raise ValueError(f"'{text}' has no host (expected host:port)")
        if ":" in host:
            raise ValueError(f"'{text}': write IPv6 addresses in brackets, [{host}]:{port_text}")
        if not _HOSTNAME_RE.match(host):
            raise ValueError(f"'{host}' is not a valid host name or address")
    if not (port_text.isascii() and port_text.isdigit()):
        raise ValueError(f"port '{port_text}' is not a number")
    port = int(port_text)
    if not PORT_MIN <= port <= PORT_MAX:
        raise ValueError(f"port {port} is outside {PORT_MIN}..{PORT_MAX}")
    return host, port
