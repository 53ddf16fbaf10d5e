"""Who is asking: Kafka's principal (``User:alice``), the one identity model of every listener.

A Kafka connection's principal comes from SASL (the user name) or a TLS client certificate
(its subject's common name); a gRPC call's from its client certificate or the credentials in
its metadata (brook.security.grpc_identity). Without any, it is ``User:ANONYMOUS``, as in
Kafka. ACLs (brook.security.acl) and quotas name principals in this form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ANONYMOUS", "USER_TYPE", "WILDCARD", "Principal", "user"]

USER_TYPE: Final = "User"


@dataclass(frozen=True, slots=True, order=True)
class Principal:
    """A principal: its type (always ``User`` for those Brook authenticates) and name."""

    type: str
    name: str

    def __post_init__(self) -> None:
        if not self.type or ":" in self.type:
            raise ValueError(f"principal type {self.type!r} must be non-empty and without ':'")
        if not self.name:
            raise ValueError("a principal's name must not be empty")

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``Type:name``; raises ValueError naming the problem."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{text!r} is not a principal (expected Type:name, e.g. User:alice)")
        return cls(kind, name)


def user(name: str) -> Principal:
    """``User:<name>``."""
    return Principal(USER_TYPE, name)


ANONYMOUS: Final = user("ANONYMOUS")
"""The principal of a client that did not authenticate."""

WILDCARD: Final = user("*")
"""In an ACL: every principal."""
