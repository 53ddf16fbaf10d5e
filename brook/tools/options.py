"""What the tools share: exit statuses, ``KEY=VALUE`` options, the console formats' settings,
the look-up of a topic's partitions, and where the cluster is.

Every tool takes one ``--bootstrap-server`` (``add_bootstrap_argument``): GRPC addresses of
controllers or of storage nodes, whichever the operator has at hand; without the option,
the ``bootstrap.servers`` of ``--command-config``, else ``$BROOK_BOOTSTRAP_SERVERS``, else
127.0.0.1:9201 (the first controller of ``brook cluster up``). ``--command-config FILE`` (Kafka
tools' option) is a properties file of the SDK's security settings (``security.protocol``,
``ssl.*``, ``sasl.*``: brook.client.security) and optionally ``bootstrap.servers``;
``apply_command_config`` makes it the security of every channel the command opens
(``brook cluster up --tls`` writes one in ``DIR/tls/client.properties``).

``find_cluster`` asks what each address is and where the rest of the cluster is: a
storage node names the controllers it knows (GetMetadata), a controller lists the storage nodes
(DescribeCluster).

Kept free of gRPC imports at module level (``brook`` imports this file when it starts).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "BOOTSTRAP_SERVERS_ENV",
    "CONSUMER_PRINT_PROPERTIES",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "LINE_READER_PROPERTIES",
    "TIMEOUT_MS_DEFAULT",
    "ClusterAddresses",
    "LineFormat",
    "PrintFormat",
    "ToolError",
    "UsageError",
    "add_bootstrap_argument",
    "add_command_config_argument",
    "apply_command_config",
    "bootstrap_servers",
    "checked_cluster_options",
    "client_settings",
    "find_cluster",
    "non_negative_int",
    "parse_key_values",
    "positive_int",
    "report_error",
    "topic_partition_count",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
TIMEOUT_MS_DEFAULT: Final = 30_000
BOOTSTRAP_SERVERS_ENV: Final = "BROOK_BOOTSTRAP_SERVERS"
DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9201"
# Between GetMetadata attempts while a topic is not known yet (a node still starting).
_METADATA_RETRY_S: Final = 0.2

# Kafka's LineMessageReader settings and defaults.
LINE_READER_PROPERTIES: Final[Mapping[str, str]] = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "ignore.error": "false",
    "null.marker": "",
}
# Kafka's DefaultMessageFormatter settings and defaults.
CONSUMER_PRINT_PROPERTIES: Final[Mapping[str, str]] = {
    "print.timestamp": "false",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "print.key": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.literal": "null",
}


class UsageError(Exception):
    """Bad arguments, properties or client settings: exit status 2, nothing was sent."""


class ToolError(Exception):
    """The cluster refused or did not answer in time: exit status 1."""


def report_error(command: str, error: Exception) -> int:
    """Print ``error`` the way argparse prints usage errors; returns the exit status."""
    status = EXIT_USAGE if isinstance(error, UsageError) else EXIT_FAILED
    sys.stderr.write(f"brook {command}: error: {error}\n")
    return status


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def parse_key_values(items: Sequence[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict; the value may contain ``=`` and may be empty."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} expects KEY=VALUE, got {item!r}")
        key = key.strip()
        if key in result:
            raise UsageError(f"{option} {key} is given twice")
        result[key] = value
    return result


def _properties(items: Sequence[str], known: Mapping[str, str]) -> dict[str, str]:
    given = parse_key_values(items, "--property")
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise UsageError(
            f"unknown --property {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return {**known, **given}


def _flag(properties: Mapping[str, str], name: str) -> bool:
    value = properties[name].strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"--property {name} must be true or false, got {properties[name]!r}")
    return value == "true"


def _separator(properties: Mapping[str, str], name: str) -> bytes:
    value = properties[name].encode("utf-8")
    if not value:
        raise UsageError(f"--property {name} must not be empty")
    return value


@dataclass(frozen=True)
class LineFormat:
    """How the console producer splits a line: ``[headers<delim>][key<sep>]value``."""

    parse_key: bool
    key_separator: bytes
    parse_headers: bool
    headers_delimiter: bytes
    headers_separator: bytes
    headers_key_separator: bytes
    ignore_error: bool
    # A key, value or header value equal to this is sent as null; None: no marker.
    null_marker: bytes | None

    @classmethod
    def from_properties(cls, items: Sequence[str]) -> LineFormat:
        properties = _properties(items, LINE_READER_PROPERTIES)
        marker = properties["null.marker"].encode("utf-8")
        return cls(
            parse_key=_flag(properties, "parse.key"),
            key_separator=_separator(properties, "key.separator"),
            parse_headers=_flag(properties, "parse.headers"),
            headers_delimiter=_separator(properties, "headers.delimiter"),
            headers_separator=_separator(properties, "headers.separator"),
            headers_key_separator=_separator(properties, "headers.key.separator"),
            ignore_error=_flag(properties, "ignore.error"),
            null_marker=marker or None,
        )


@dataclass(frozen=True)
class PrintFormat:
    """What the console consumer prints for a record, in Kafka's field order:
    timestamp, partition, offset, headers, key, value, each followed by key.separator."""

    print_timestamp: bool
    print_partition: bool
    print_offset: bool
    print_headers: bool
    print_key: bool
    print_value: bool
    key_separator: bytes
    line_separator: bytes
    headers_separator: bytes
    headers_key_separator: bytes
    null_literal: bytes

    @classmethod
    def from_properties(cls, items: Sequence[str]) -> PrintFormat:
        properties = _properties(items, CONSUMER_PRINT_PROPERTIES)
        return cls(
            print_timestamp=_flag(properties, "print.timestamp"),
            print_partition=_flag(properties, "print.partition"),
            print_offset=_flag(properties, "print.offset"),
            print_headers=_flag(properties, "print.headers"),
            print_key=_flag(properties, "print.key"),
            print_value=_flag(properties, "print.value"),
            key_separator=properties["key.separator"].encode("utf-8"),
            line_separator=properties["line.separator"].encode("utf-8"),
            headers_separator=properties["headers.separator"].encode("utf-8"),
            headers_key_separator=properties["headers.key.separator"].encode("utf-8"),
            null_literal=properties["null.literal"].encode("utf-8"),
        )


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--bootstrap-server`` and ``--command-config`` options every tool has (read them
    with ``bootstrap_servers``; ``brook`` applies ``--command-config`` itself)."""
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="GRPC addresses of controllers or storage nodes (default: the command config's "
        f"bootstrap.servers, else ${BOOTSTRAP_SERVERS_ENV}, else {DEFAULT_BOOTSTRAP_SERVERS})",
    )
    add_command_config_argument(parser)


def add_command_config_argument(parser: argparse.ArgumentParser) -> None:
    """``--command-config FILE``: how to reach a secured cluster (``apply_command_config``)."""
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="a properties file with the client's security settings (security.protocol, "
        "ssl.ca.location, ssl.certificate.location, ssl.key.location, ssl.key.password, "
        "sasl.mechanism, sasl.username, sasl.password) and optionally bootstrap.servers, as "
        "brook cluster up --tls writes in DIR/tls/client.properties",
    )


def apply_command_config(args: argparse.Namespace) -> None:
    """Applies a command's ``--command-config`` (if it has one): its security becomes the
    default of every channel the command opens, and its ``bootstrap.servers`` the command's
    ``--bootstrap-server`` when that is not given. UsageError for a file that cannot be read,
    an unknown setting or unusable TLS files."""
    path: Path | None = getattr(args, "command_config", None)
    if path is None:
        return
    from brook.client.config import channel_security
    from brook.config import ConfigError, load_properties
    from brook.rpc.channels import ChannelSecurity, set_default_security

    try:
        settings = {name: raw.value for name, raw in load_properties(path).items()}
        bootstrap = settings.pop("bootstrap.servers", None)
        security = channel_security(settings)
    except ConfigError as error:
        raise UsageError(f"--command-config {path}: {error}") from None
    if bootstrap is not None and getattr(args, "bootstrap_server", "") is None:
        args.bootstrap_server = bootstrap
    set_default_security(security or ChannelSecurity())


def bootstrap_servers(option: str | None) -> list[str]:
    """The addresses ``--bootstrap-server`` gave, else ``$BROOK_BOOTSTRAP_SERVERS``, else
    DEFAULT_BOOTSTRAP_SERVERS; UsageError when one is not HOST:PORT."""
    from brook.config import parse_host_port

    text = option
    if text is None:
        text = os.environ.get(BOOTSTRAP_SERVERS_ENV) or DEFAULT_BOOTSTRAP_SERVERS
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise UsageError("--bootstrap-server names no address")
    for address in addresses:
        try:
            parse_host_port(address)
        except ValueError as error:
            raise UsageError(f"--bootstrap-server: {error}") from None
    return addresses


def checked_cluster_options(args: argparse.Namespace) -> list[str]:
    """The bootstrap servers of a command with ``--bootstrap-server`` and ``--timeout-ms``;
    UsageError when either is bad (before anything is sent)."""
    if args.timeout_ms <= 0:
        raise UsageError(f"--timeout-ms must be positive, got {args.timeout_ms}")
    return bootstrap_servers(args.bootstrap_server)


@dataclass(frozen=True)
class ClusterAddresses:
    """Where a tool's cluster is, as its bootstrap servers told (``find_cluster``)."""

    controllers: tuple[str, ...]
    """The controllers' GRPC addresses: those named, or those the named storage nodes know.
    Empty when only storage nodes running without controllers (static.topics) were named."""
    storage_nodes: tuple[str, ...]
    """The storage nodes named; empty when controllers were named."""

    def admin_bootstrap(self) -> tuple[tuple[str, ...], Literal["controller", "storage_node"]]:
        """The bootstrap servers and role for an Admin client: the controllers, or the
        storage nodes when no controller is known (operations on groups and transactions
        still work)."""
        if self.controllers:
            return self.controllers, "controller"
        return self.storage_nodes, "storage_node"

    def storage_node_addresses(self, timeout_ms: int) -> tuple[str, ...]:
        """The storage nodes named, else every unfenced one the controllers list; ToolError
        when the controllers do not answer in time or list none."""
        if self.storage_nodes:
            return self.storage_nodes
        from brook.client.admin import Admin
        from brook.client.errors import BrookClientError

        try:
            with Admin(self.controllers, default_api_timeout_ms=timeout_ms) as admin:
                nodes = admin.describe_cluster().nodes
        except BrookClientError as error:
            raise ToolError(f"the controllers did not list the storage nodes: {error}") from None
        found = tuple(
            node.endpoints["GRPC"]
            for node in nodes
            if node.role == "storage_node" and not node.fenced and "GRPC" in node.endpoints
        )
        if not found:
            raise ToolError(
                f"the controllers at {','.join(self.controllers)} list no live storage node"
            )
        return found


def find_cluster(addresses: Sequence[str], timeout_ms: int) -> ClusterAddresses:
    """What each bootstrap address is: a storage node answers GetMetadata, naming the
    controllers it knows; a controller answers that it has no StorageService (UNIMPLEMENTED).
    Asks again after a pause while none answers, until ``timeout_ms`` (then ToolError). An
    address that does not answer while another did is taken for the same kind as the first
    that did (a list of controllers with one down still names the others)."""
    import grpc

    from brook.reserved import OFFSETS_TOPIC
    from brook.rpc.channels import sync_channel
    from brook.v1 import storage_pb2, storage_pb2_grpc

    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        controllers: list[str] = []
        storage_nodes: list[str] = []
        silent: list[str] = []
        problems: list[str] = []
        for address in addresses:
            remaining_s = max(0.001, deadline - time.monotonic())
            with sync_channel(address) as channel:
                stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
                try:
                    answer = stub.GetMetadata(
                        # Naming one small topic keeps the answer small.
                        storage_pb2.GetMetadataRequest(topics=[OFFSETS_TOPIC]),
                        timeout=remaining_s,
                    )
                except grpc.RpcError as error:
                    assert isinstance(error, grpc.Call)
                    if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                        controllers.append(address)
                    else:
                        silent.append(address)
                        problems.append(f"{address}: {error.code().name}")
                    continue
            storage_nodes.append(address)
            controllers.extend(answer.controller_addresses)
        if controllers or storage_nodes:
            named_controllers = len(controllers) > 0 and not storage_nodes
            if named_controllers:
                controllers.extend(silent)
            else:
                storage_nodes.extend(silent)
            return ClusterAddresses(
                tuple(dict.fromkeys(controllers)), tuple(dict.fromkeys(storage_nodes))
            )
        if time.monotonic() + _METADATA_RETRY_S >= deadline:
            raise ToolError(
                f"no answer from the bootstrap servers within {timeout_ms} ms "
                f"({'; '.join(problems)})"
            )
        time.sleep(_METADATA_RETRY_S)


def client_settings(
    bootstrap_server: str | None,
    properties: Mapping[str, str],
    timeout_ms: int,
    **defaults: str,
) -> dict[str, object]:
    """Client settings: ``defaults`` < ``properties`` < ``--bootstrap-server`` (as in Kafka's
    tools, the dedicated option wins). ``bootstrap.servers`` then names storage nodes: the
    addresses given (by the option, else the property, else as ``bootstrap_servers`` says)
    may be controllers, whose storage nodes are found (``find_cluster``, within
    ``timeout_ms``; ToolError when the cluster does not answer)."""
    settings: dict[str, object] = {**defaults, **properties}
    if bootstrap_server is None and "bootstrap.servers" in properties:
        bootstrap_server = properties["bootstrap.servers"]
    cluster = find_cluster(bootstrap_servers(bootstrap_server), timeout_ms)
    settings["bootstrap.servers"] = ",".join(cluster.storage_node_addresses(timeout_ms))
    return settings


def topic_partition_count(bootstrap_servers: Sequence[str], topic: str, timeout_ms: int) -> int:
    """How many partitions ``topic`` has, asking the storage nodes' GetMetadata.

    Retries while no node answers or the topic's partitions are not all known yet (a node
    still starting); raises ToolError when the topic does not exist or ``timeout_ms`` passes.
    """
    import grpc

    from brook.client.metadata import EMPTY_CLUSTER, parse_metadata
    from brook.rpc.channels import sync_channel
    from brook.v1 import storage_pb2, storage_pb2_grpc

    deadline = time.monotonic() + timeout_ms / 1000
    problem = "no answer yet"
    while True:
        for address in bootstrap_servers:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                break
            with sync_channel(address) as channel:
                stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
                try:
                    response = stub.GetMetadata(
                        storage_pb2.GetMetadataRequest(topics=[topic]), timeout=remaining_s
                    )
                except grpc.RpcError as error:
                    assert isinstance(error, grpc.Call)
                    problem = f"{address}: {error.code().name}: {error.details()}"
                    continue
            view, _ = parse_metadata(response, EMPTY_CLUSTER, [topic])
            if topic in view.missing:
                raise ToolError(f"unknown topic {topic!r}: {view.missing[topic]}")
            info = view.topics.get(topic)
            if info is not None:
                return info.num_partitions
            problem = f"{address} does not know all partitions of {topic!r} yet"
        if time.monotonic() + _METADATA_RETRY_S >= deadline:
            raise ToolError(
                f"the partitions of topic {topic!r} were not found within {timeout_ms} ms "
                f"(last problem: {problem})"
            )
        time.sleep(_METADATA_RETRY_S)
