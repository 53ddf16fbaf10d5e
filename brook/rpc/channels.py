"""gRPC channels: the one options builder and the one pool every Brook process opens them with.

``channel_options`` is the only list of channel settings: keepalive pings during calls (a peer
that died without closing its connection is noticed during a long request, an idle process
costs nothing), message size limits, gRPC's reconnect back-off (bounded by the caller's, not
gRPC's default of up to two minutes, so a restarted process is reachable again at once), a
private subchannel pool (no back-off state inherited from another client's connection to a
process that has since restarted) and the user agent.

``ChannelPool`` keeps one asyncio channel per address, reused by every call of its owner (the
SDK's producers and consumers, the controller client, the gateway, the group coordinator's
offsets log): one HTTP/2 connection multiplexes them all. ``SyncChannelPool`` is the same for
blocking callers (Admin). ``sync_channel`` opens one blocking channel for a one-off call
(health checks, probes, tools). Nothing else in Brook opens a channel
(``tests/static/test_import_graph.py``).

``client_id_metadata`` is the call metadata that names a client's ``client.id`` to the servers
(``brook-client-id``): the SDK sends it with its Produce and Fetch calls, and the storage nodes
apply the client id's quotas by it (brook_storage_node.client_quotas).

``ChannelSecurity`` says how a channel reaches its server: plaintext, or TLS (the server's
certificate checked against given CA certificates or the system's, and the server's name
against the address's host), optionally with a client certificate (mutual TLS) and a user name
and password sent with every call as ``authorization: Basic base64(user:password)``, which is
only ever sent over TLS. Every pool and channel takes one; those given none use the process's
default (``default_security``), which the service runtime sets once from its configuration
(``security.inter.broker.protocol``) and ``brook``'s ``--command-config`` from the operator's
client properties. Until then it is plaintext.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from typing import Any, Final, TypeAlias, TypeVar
from urllib.parse import quote

import grpc

from brook.closing import Closing
from brook.v1 import (
    admin_pb2_grpc,
    controller_pb2_grpc,
    group_pb2_grpc,
    replica_pb2_grpc,
    storage_pb2_grpc,
    transaction_pb2_grpc,
)

__all__ = [
    "CLIENT_ID_METADATA_KEY",
    "ENVELOPE_BYTES_MAX",
    "KEEPALIVE_TIMEOUT_MS",
    "KEEPALIVE_TIME_MS",
    "METADATA_RECEIVE_BYTES_MAX",
    "RECONNECT_BACKOFF_MAX_MS_DEFAULT",
    "RECONNECT_BACKOFF_MS_DEFAULT",
    "ChannelOptions",
    "ChannelPool",
    "ChannelPoolClosedError",
    "ChannelSecurity",
    "SyncChannelPool",
    "channel_options",
    "client_id_metadata",
    "default_security",
    "set_default_security",
    "sync_channel",
]

# Pings only while calls are active. 60 s stays far above the servers' default minimum ping
# interval, so a server never answers our pings with GOAWAY (too_many_pings).
KEEPALIVE_TIME_MS: Final = 60_000
KEEPALIVE_TIMEOUT_MS: Final = 20_000
# Room for the protobuf envelope around the record bytes of a request or response.
ENVELOPE_BYTES_MAX: Final = 64 * 1024
# gRPC's reconnect back-off for callers that name none (Admin, health checks, tools).
RECONNECT_BACKOFF_MS_DEFAULT: Final = 100
RECONNECT_BACKOFF_MAX_MS_DEFAULT: Final = 1000

CLIENT_ID_METADATA_KEY: Final = "brook-client-id"
"""The call metadata key naming the caller's client id, percent-encoded (UTF-8) so that any
client id is a valid metadata value."""

ChannelOptions: TypeAlias = Sequence[tuple[str, Any]]
_Stub = TypeVar("_Stub")

try:
    _VERSION = importlib_metadata.version("brook")
except importlib_metadata.PackageNotFoundError:  # running from a source tree
    _VERSION = "0"


# The largest WatchMetadata message a process takes: a snapshot is one message holding the
# whole image (about 70 bytes a partition), so gRPC's default 4 MiB receive limit would cut a
# cluster off its metadata at some 60,000 partitions. 256 MiB bounds what one message may make
# a process hold; the controllers send at most their socket.request.max.bytes (100 MiB by
# default, some 1.4 million partitions), so the smaller of the two is the real limit.
METADATA_RECEIVE_BYTES_MAX: Final = 256 * 1024 * 1024


def channel_options(
    *,
    client_id: str = "",
    send_bytes_max: int | None = None,
    receive_bytes_max: int | None = None,
    reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS_DEFAULT,
    reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS_DEFAULT,
) -> list[tuple[str, Any]]:
    """The settings of a channel. ``send_bytes_max`` / ``receive_bytes_max``: the largest
    payload (records) of one message, to which the envelope is added; None keeps gRPC's
    default (4 MiB received, unlimited sent), -1 removes the limit. ``client_id`` is shown in
    the user agent the server sees."""
    if reconnect_backoff_ms < 0 or reconnect_backoff_max_ms < 0:
        raise ValueError(
            f"reconnect back-off must not be negative: {reconnect_backoff_ms}, "
            f"{reconnect_backoff_max_ms}"
        )
    agent = f"brook-python/{_VERSION}" + (f" ({client_id})" if client_id else "")
    options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.initial_reconnect_backoff_ms", max(reconnect_backoff_ms, 1)),
        ("grpc.min_reconnect_backoff_ms", max(reconnect_backoff_ms, 1)),
        ("grpc.max_reconnect_backoff_ms", max(reconnect_backoff_max_ms, reconnect_backoff_ms, 1)),
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.primary_user_agent", agent),
    ]
    for name, limit in (
        ("grpc.max_send_message_length", send_bytes_max),
        ("grpc.max_receive_message_length", receive_bytes_max),
    ):
        if limit is not None:
            options.append((name, -1 if limit < 0 else limit + ENVELOPE_BYTES_MAX))
    return options


def client_id_metadata(client_id: str) -> tuple[tuple[str, str], ...]:
    """The call metadata naming ``client_id`` (``CLIENT_ID_METADATA_KEY``); "" is named too,
    as Kafka's empty client id is a client id like any other."""
    return ((CLIENT_ID_METADATA_KEY, quote(client_id, safe="")),)


@dataclass(frozen=True, slots=True)
class ChannelSecurity:
    """How channels reach servers. ``tls`` False: plaintext, and nothing else may be set.
    ``tls`` True: the server's certificate must chain to ``ca_pem`` (a PEM bundle; None: the
    system's CAs) and name the address's host; ``key_pem`` with ``chain_pem`` (PEM, the key
    unencrypted) is the client certificate for servers that require one; ``username`` with
    ``password`` are sent with every call (``authorization: Basic``)."""

    tls: bool = False
    ca_pem: bytes | None = None
    key_pem: bytes | None = field(default=None, repr=False)
    chain_pem: bytes | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.tls and any(
            v is not None
            for v in (self.ca_pem, self.key_pem, self.chain_pem, self.username, self.password)
        ):
            raise ValueError(
                "certificates and credentials need TLS: a plaintext channel would send them "
                "in the clear"
            )
        if (self.key_pem is None) != (self.chain_pem is None):
            raise ValueError("a client certificate needs both its private key and its chain")
        if (self.username is None) != (self.password is None):
            raise ValueError("credentials need both a user name and a password")
        if self.username is not None and ":" in self.username:
            raise ValueError(f"a user name must not contain ':' ({self.username!r})")

    @property
    def authorization(self) -> str | None:
        """The ``authorization`` metadata value sent with every call, None without
        credentials."""
        if self.username is None or self.password is None:
            return None
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"

    def credentials(self) -> grpc.ChannelCredentials | None:
        """gRPC's channel credentials (None: plaintext)."""
        if not self.tls:
            return None
        transport = grpc.ssl_channel_credentials(
            root_certificates=self.ca_pem,
            private_key=self.key_pem,
            certificate_chain=self.chain_pem,
        )
        authorization = self.authorization
        if authorization is None:
            return transport
        return grpc.composite_channel_credentials(
            transport, grpc.metadata_call_credentials(_BasicAuthorization(authorization))
        )


class _BasicAuthorization:
    """A gRPC ``AuthMetadataPlugin``: adds the ``authorization`` header to every call (gRPC
    runs call credentials only on TLS channels)."""

    def __init__(self, value: str) -> None:
        self._metadata = (("authorization", value),)

    def __call__(
        self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback
    ) -> None:
        callback(self._metadata, None)


_default_security = ChannelSecurity()


def default_security() -> ChannelSecurity:
    """The security of the channels that name none: plaintext until set."""
    return _default_security


def set_default_security(security: ChannelSecurity) -> None:
    """Sets the process's default channel security. The service runtime calls it once at
    start-up (``security.inter.broker.protocol``), ``brook`` once per command
    (``--command-config``); channels and pools already made keep theirs."""
    global _default_security
    _default_security = security


def sync_channel(
    address: str,
    options: ChannelOptions | None = None,
    security: ChannelSecurity | None = None,
) -> grpc.Channel:
    """A blocking channel to ``address`` (host:port) for a one-off call; the caller closes it
    (``with sync_channel(...) as channel:``). ``options`` None: ``channel_options()``; an
    empty list: gRPC's own defaults. ``security`` None: ``default_security()``."""
    listed = list(channel_options() if options is None else options)
    credentials = (security or _default_security).credentials()
    if credentials is None:
        return grpc.insecure_channel(address, options=listed)
    return grpc.secure_channel(address, credentials, options=listed)


class ChannelPoolClosedError(RuntimeError):
    """A channel was asked of a pool that is closed (its owner is stopping)."""


class ChannelPool:
    """One asyncio channel per address, and the stubs over it. Create, use and close it on
    the owner's event loop. ``security`` None: ``default_security()`` as it is when the pool
    is made."""

    def __init__(self, options: ChannelOptions, security: ChannelSecurity | None = None) -> None:
        self._options = list(options)
        self.security = security or _default_security
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[Callable[[Any], Any], str], Any] = {}
        self._closed = False

    def channel(self, address: str) -> grpc.aio.Channel:
        """The channel to ``address`` (host:port), opened on first use."""
        channel = self._channels.get(address)
        if channel is None:
            if self._closed:
                raise ChannelPoolClosedError(f"the channels are closed (asked for {address})")
            channel = self.dedicated(address, self._options, self.security)
            self._channels[address] = channel
        return channel

    @staticmethod
    def dedicated(
        address: str, options: ChannelOptions, security: ChannelSecurity | None = None
    ) -> grpc.aio.Channel:
        """A channel of its own to ``address``, outside any pool, for traffic that must not
        share a connection (the replica fetcher's streams); the caller closes it.
        ``security`` None: ``default_security()``."""
        credentials = (security or _default_security).credentials()
        if credentials is None:
            return grpc.aio.insecure_channel(address, options=list(options))
        return grpc.aio.secure_channel(address, credentials, options=list(options))

    def _stub(self, factory: Callable[[grpc.aio.Channel], _Stub], address: str) -> _Stub:
        stub: _Stub | None = self._stubs.get((factory, address))
        if stub is None:
            stub = factory(self.channel(address))
            self._stubs[(factory, address)] = stub
        return stub

    def storage(self, address: str) -> storage_pb2_grpc.StorageServiceStub:
        return self._stub(storage_pb2_grpc.StorageServiceStub, address)

    def replica(self, address: str) -> replica_pb2_grpc.ReplicaServiceStub:
        return self._stub(replica_pb2_grpc.ReplicaServiceStub, address)

    def groups(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        return self._stub(group_pb2_grpc.GroupCoordinatorServiceStub, address)

    def transactions(self, address: str) -> transaction_pb2_grpc.TransactionCoordinatorServiceStub:
        return self._stub(transaction_pb2_grpc.TransactionCoordinatorServiceStub, address)

    def controller(self, address: str) -> controller_pb2_grpc.ControllerServiceStub:
        return self._stub(controller_pb2_grpc.ControllerServiceStub, address)

    def admin(self, address: str) -> admin_pb2_grpc.AdminServiceStub:
        return self._stub(admin_pb2_grpc.AdminServiceStub, address)

    async def close(self) -> None:
        """Closes every channel, cancelling calls in flight; later requests for a channel
        raise ChannelPoolClosedError."""
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            await channel.close(grace=None)


class SyncChannelPool(Closing):
    """``ChannelPool`` for blocking callers: one channel per address; not thread-safe.
    ``options`` None: ``channel_options()``; an empty list: gRPC's own defaults. ``security``
    None: ``default_security()`` as it is when the pool is made."""

    def __init__(
        self, options: ChannelOptions | None = None, security: ChannelSecurity | None = None
    ) -> None:
        self._options = list(channel_options() if options is None else options)
        self._security = security or _default_security
        self._channels: dict[str, grpc.Channel] = {}
        self._closed = False

    def channel(self, address: str) -> grpc.Channel:
        if self._closed:
            raise ChannelPoolClosedError(f"the channels are closed (asked for {address})")
        channel = self._channels.get(address)
        if channel is None:
            channel = sync_channel(address, self._options, self._security)
            self._channels[address] = channel
        return channel

    def storage(self, address: str) -> storage_pb2_grpc.StorageServiceStub:
        return storage_pb2_grpc.StorageServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def groups(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        return group_pb2_grpc.GroupCoordinatorServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def transactions(self, address: str) -> transaction_pb2_grpc.TransactionCoordinatorServiceStub:
        return transaction_pb2_grpc.TransactionCoordinatorServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def controller(self, address: str) -> controller_pb2_grpc.ControllerServiceStub:
        return controller_pb2_grpc.ControllerServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def admin(self, address: str) -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._closed = True
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
