"""The client every non-controller process uses to talk to the controller quorum.

Writes (RegisterBroker, BrokerHeartbeat, AlterPartition, AllocateProducerIds) must reach the
active controller, the Raft leader: ``brook.rpc.quorum`` finds it (following NOT_CONTROLLER
hints, backing off by retry.backoff.ms up to retry.backoff.max.ms), each call bounded by
request.timeout.ms or the caller's smaller deadline and by ``ATTEMPTS_MAX`` attempts.

Reads that any controller serves (WatchMetadata, DescribeCluster) go where the caller says;
``next_address`` hands out the controllers in turn.

The client keeps the newest controller epoch (Raft term) seen on any answer
(``observe_epoch``): two controllers can briefly both believe they lead, and everything this
process does must ignore the one with the older term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import grpc

from brook.config import Config
from brook.errors import ErrorCode, error_code
from brook.rpc.backoff import RetryBackoff
from brook.rpc.channels import METADATA_RECEIVE_BYTES_MAX, ChannelPool, channel_options
from brook.rpc.errors import rpc_error
from brook.rpc.quorum import (
    ATTEMPTS_MAX,
    ControllerQuorum,
    ControllerUnavailableError,
    call_active_controller,
)
from brook.v1 import admin_pb2, common_pb2, controller_pb2

__all__ = [
    "ATTEMPTS_MAX",
    "ControllerAnswer",
    "ControllerClient",
    "ControllerClientSettings",
    "ControllerUnavailableError",
]


class _ControllerResponse(Protocol):
    """What every ControllerService write answers with."""

    @property
    def error_code(self) -> Any: ...

    @property
    def error_message(self) -> str: ...

    @property
    def controller(self) -> common_pb2.NodeHint: ...


_Response = TypeVar("_Response", bound=_ControllerResponse)


@dataclass(frozen=True)
class ControllerAnswer(Generic[_Response]):
    """A controller's answer and the address of the controller that gave it."""

    response: _Response
    address: str

    @property
    def error_code(self) -> ErrorCode:
        return error_code(int(self.response.error_code))


@dataclass(frozen=True)
class ControllerClientSettings:
    bootstrap_servers: tuple[str, ...]
    """host:port of the controllers' GRPC listeners."""
    request_timeout_ms: int
    retry_backoff: RetryBackoff

    @classmethod
    def from_config(cls, config: Config) -> ControllerClientSettings:
        return cls(
            bootstrap_servers=tuple(
                hp.address for hp in config.get_host_ports("controller.quorum.bootstrap.servers")
            ),
            request_timeout_ms=config.get_int("request.timeout.ms"),
            retry_backoff=RetryBackoff(
                config.get_int("retry.backoff.ms"), config.get_int("retry.backoff.max.ms")
            ),
        )


class ControllerClient:
    """Channels to the controllers and the calls of the control plane. Create, use and close
    it on one event loop."""

    def __init__(self, settings: ControllerClientSettings) -> None:
        self.settings = settings
        self._quorum = ControllerQuorum(settings.bootstrap_servers)
        # A restarted controller must be reachable again at once, not after gRPC's default
        # reconnect back-off of up to two minutes.
        self._channels = ChannelPool(
            channel_options(
                receive_bytes_max=METADATA_RECEIVE_BYTES_MAX,
                reconnect_backoff_ms=settings.retry_backoff.base_ms,
                reconnect_backoff_max_ms=settings.retry_backoff.max_ms,
            )
        )
        self.controller_epoch = -1

    # -- epochs -------------------------------------------------------------------------------

    def observe_epoch(self, epoch: int) -> bool:
        """Record a controller epoch seen on an answer; False if it is older than the newest
        seen, in which case the answer comes from a deposed controller and must be ignored."""
        if epoch < self.controller_epoch:
            return False
        self.controller_epoch = epoch
        return True

    # -- addresses and channels -----------------------------------------------------------------

    @property
    def addresses(self) -> Sequence[str]:
        """Every controller address known: the bootstrap servers, then those learnt from hints."""
        return self._quorum.addresses

    @property
    def leader_address(self) -> str | None:
        """The controller that last accepted a write, None if unknown."""
        return self._quorum.leader_address

    def next_address(self) -> str:
        """The known controllers in turn (for reads any controller serves)."""
        return self._quorum.next_address()

    async def close(self) -> None:
        await self._channels.close()

    # -- calls ----------------------------------------------------------------------------------

    def _timeout_s(self, timeout_s: float | None) -> float:
        limit_s = self.settings.request_timeout_ms / 1000
        return limit_s if timeout_s is None else min(timeout_s, limit_s)

    async def _write(
        self,
        method: str,
        request: Any,
        timeout_s: float | None,
        attempt_timeout_s: float | None = None,
    ) -> ControllerAnswer[Any]:
        """``request`` answered by the active controller (``brook.rpc.quorum``): any code but
        NOT_CONTROLLER and REQUEST_TIMED_OUT, which are retried. ControllerUnavailableError
        when the deadline or ATTEMPTS_MAX runs out first."""

        async def send(address: str, attempt_s: float) -> Any:
            return await getattr(self._channels.controller(address), method)(
                request, timeout=attempt_s
            )

        response, address = await call_active_controller(
            self._quorum,
            method,
            send,
            lambda r: [r.error_code],
            lambda r: r.controller,
            timeout_s=self._timeout_s(timeout_s),
            backoff=self.settings.retry_backoff,
            attempt_timeout_s=attempt_timeout_s,
        )
        return ControllerAnswer(response, address)

    async def register_broker(
        self, request: controller_pb2.RegisterBrokerRequest, timeout_s: float | None = None
    ) -> ControllerAnswer[controller_pb2.RegisterBrokerResponse]:
        return await self._write("RegisterBroker", request, timeout_s)

    async def broker_heartbeat(
        self,
        request: controller_pb2.BrokerHeartbeatRequest,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
    ) -> ControllerAnswer[controller_pb2.BrokerHeartbeatResponse]:
        return await self._write("BrokerHeartbeat", request, timeout_s, attempt_timeout_s)

    async def alter_partition(
        self, request: controller_pb2.AlterPartitionRequest, timeout_s: float | None = None
    ) -> ControllerAnswer[controller_pb2.AlterPartitionResponse]:
        return await self._write("AlterPartition", request, timeout_s)

    async def allocate_producer_ids(
        self, request: controller_pb2.AllocateProducerIdsRequest, timeout_s: float | None = None
    ) -> ControllerAnswer[controller_pb2.AllocateProducerIdsResponse]:
        return await self._write("AllocateProducerIds", request, timeout_s)

    async def describe_cluster(
        self, address: str, timeout_s: float | None = None
    ) -> admin_pb2.DescribeClusterResponse:
        """DescribeCluster, answered by the controller at ``address`` (one attempt).
        ControllerUnavailableError if it does not answer in time."""
        try:
            response: admin_pb2.DescribeClusterResponse = await self._channels.admin(
                address
            ).DescribeCluster(
                admin_pb2.DescribeClusterRequest(), timeout=self._timeout_s(timeout_s)
            )
        except grpc.aio.AioRpcError as error:
            raise ControllerUnavailableError(
                f"DescribeCluster to controller {address}: {rpc_error(error)[1]}"
            ) from None
        return response

    def watch_metadata(self, address: str, request: controller_pb2.WatchMetadataRequest) -> Any:
        """The WatchMetadata stream of the controller at ``address`` (a grpc.aio call: read it
        with ``read()``, end it with ``cancel()``). Long-lived, so it has no deadline: the
        watcher bounds how long it waits for each message instead."""
        return self._channels.controller(address).WatchMetadata(request)
