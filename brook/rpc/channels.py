"""gRPC channels to storage nodes and group coordinators: one per address, reused, and closed
with the client (the SDK's producers and consumers, and the group coordinator's offsets log).

A channel multiplexes every request of a client to that node over one HTTP/2 connection, so
the producer's concurrent produce requests and the consumer's long-polls share it. The
keepalive settings are every Brook process's, whoever opens the channel.
"""

from __future__ import annotations

from importlib import metadata as importlib_metadata
from typing import Any

import grpc

from brook.v1 import group_pb2_grpc, storage_pb2_grpc

__all__ = ["ENVELOPE_BYTES_MAX", "KEEPALIVE_TIMEOUT_MS", "KEEPALIVE_TIME_MS", "Network"]

# Pings only while calls are active (a dead node is noticed during a long request, an idle
# client costs nothing). 60 s stays far above the servers' default minimum ping interval, so
# a node never answers our pings with GOAWAY (too_many_pings).
KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
# Room for the protobuf envelope around the record bytes of a request or response.
ENVELOPE_BYTES_MAX = 64 * 1024

try:
    _VERSION = importlib_metadata.version("brook")
except importlib_metadata.PackageNotFoundError:  # running from a source tree
    _VERSION = "0"


class Network:
    """The channels of one client. Create and use it on the client's event loop."""

    def __init__(
        self,
        *,
        client_id: str,
        send_bytes_max: int,
        receive_bytes_max: int,
        reconnect_backoff_ms: int,
        reconnect_backoff_max_ms: int,
    ) -> None:
        agent = f"brook-python/{_VERSION}" + (f" ({client_id})" if client_id else "")
        self._options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", send_bytes_max + ENVELOPE_BYTES_MAX),
            ("grpc.max_receive_message_length", receive_bytes_max + ENVELOPE_BYTES_MAX),
            ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.initial_reconnect_backoff_ms", max(reconnect_backoff_ms, 1)),
            ("grpc.min_reconnect_backoff_ms", max(reconnect_backoff_ms, 1)),
            ("grpc.max_reconnect_backoff_ms", max(reconnect_backoff_max_ms, 1)),
            # A private subchannel pool: no back-off state inherited from other clients'
            # connections to a node that has since restarted.
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.primary_user_agent", agent),
        ]
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, storage_pb2_grpc.StorageServiceStub] = {}
        self._group_stubs: dict[str, group_pb2_grpc.GroupCoordinatorServiceStub] = {}
        self._closed = False

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if self._closed:
                raise RuntimeError("the client's network is closed")
            channel = grpc.aio.insecure_channel(address, options=self._options)
            self._channels[address] = channel
        return channel

    def storage(self, address: str) -> storage_pb2_grpc.StorageServiceStub:
        """The StorageService stub for the node at ``address`` (host:port)."""
        stub = self._stubs.get(address)
        if stub is None:
            stub = storage_pb2_grpc.StorageServiceStub(self._channel(address))  # type: ignore[no-untyped-call]
            self._stubs[address] = stub
        return stub

    def groups(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        """The GroupCoordinatorService stub for the coordinator at ``address`` (host:port)."""
        stub = self._group_stubs.get(address)
        if stub is None:
            stub = group_pb2_grpc.GroupCoordinatorServiceStub(self._channel(address))  # type: ignore[no-untyped-call]
            self._group_stubs[address] = stub
        return stub

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        self._group_stubs.clear()
        for channel in channels:
            await channel.close(grace=None)
