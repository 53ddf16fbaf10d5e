"""Options every Brook source and sink shares: where the cluster is and the client settings.

As in Spark's Kafka connector, ``kafka.bootstrap.servers`` is required and every other
``kafka.``-prefixed option goes to the client with the prefix removed (``kafka.client.id``
becomes the SDK's ``client.id``). Brook's bootstrap servers are its storage nodes' gRPC
addresses (the SDK producer's and consumer's ``bootstrap.servers``), not the gateway's Kafka
listener. Spark passes options case-insensitively
(lower-cased keys); the names in error messages are Spark's spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = [
    "BOOTSTRAP_OPTION",
    "OptionError",
    "client_config",
    "flag",
    "option",
    "require_bootstrap",
]

BOOTSTRAP_OPTION: Final = "kafka.bootstrap.servers"
_CLIENT_PREFIX: Final = "kafka."


class OptionError(ValueError):
    """A bad or missing option, raised on the driver before any task runs; the message names
    the option as Spark's Kafka connector spells it."""


def option(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` (any case), or None when it is not given."""
    wanted = name.lower()
    for key, value in options.items():
        if key.lower() == wanted:
            return value
    return None


def require_bootstrap(options: Mapping[str, str]) -> str:
    """``kafka.bootstrap.servers``, or OptionError when it is missing or empty."""
    servers = option(options, BOOTSTRAP_OPTION)
    if servers is None or not servers.strip():
        raise OptionError(
            f"Option '{BOOTSTRAP_OPTION}' must be specified for configuring Brook consumer "
            "and producer (the storage nodes' gRPC addresses, host:port[,host:port...])"
        )
    return servers.strip()


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The SDK client settings in ``options``: every ``kafka.*`` option with its prefix
    removed, ``bootstrap.servers`` among them (OptionError when it is missing)."""
    require_bootstrap(options)
    return {
        key[len(_CLIENT_PREFIX) :]: value
        for key, value in options.items()
        if key.lower().startswith(_CLIENT_PREFIX)
    }


def flag(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    """Boolean option ``name`` (``true``/``false``, any case), ``default`` when not given;
    OptionError for anything else."""
    value = option(options, name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"Option '{name}' must be 'true' or 'false', not {value!r}")
    return lowered == "true"
