"""The client every non-controller process uses to talk to the controller quorum.

Writes (RegisterBroker, BrokerHeartbeat, AlterPartition, AllocateProducerIds) must reach the
active controller, the Raft leader. The client sends them to the controller that last accepted
one; a follower answers NOT_CONTROLLER with a NodeHint naming the leader, which the client
follows at once. Without a hint (an election is under way), when a controller does not answer,
or when the leader answers REQUEST_TIMED_OUT (its quorum did not commit in time), the client
tries the next controller after an exponential back-off with jitter (retry.backoff.ms up to
retry.backoff.max.ms). Every call is bounded twice: by a deadline, request.timeout.ms or the
caller's smaller one, which also bounds each attempt; and by ``ATTEMPTS_MAX`` attempts, so
two controllers that keep naming each other cannot hold a call in a loop.

Reads that any controller serves (WatchMetadata, DescribeCluster) go where the caller says;
``next_address`` hands out the controllers in turn.

The client keeps the newest controller epoch (Raft term) seen on any answer
(``observe_epoch``): two controllers can briefly both believe they lead, and everything this
process does must ignore the one with the older term.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

import grpc

from brook.config import Config, parse_host_port
from brook.errors import ErrorCode, error_code
from brook.rpc.addresses import listener_address
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.rpc.channels import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from brook.rpc.errors import rpc_error
from brook.v1 import admin_pb2, admin_pb2_grpc, common_pb2, controller_pb2, controller_pb2_grpc

__all__ = [
    "ATTEMPTS_MAX",
    "ControllerAnswer",
    "ControllerClient",
    "ControllerClientSettings",
    "ControllerUnavailableError",
]

# Enough to walk a 5-controller quorum twice and follow a hint after each step.
ATTEMPTS_MAX: Final = 20
# The codes after which another controller (or the same one, later) may answer differently.
_RETRY_CODES: Final = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})
_RETRY_STATUSES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)

_log = logging.getLogger(__name__)


class ControllerUnavailableError(Exception):
    """No active controller answered a call within its deadline or attempts; the message
    says what the last attempt met. Operating condition, not a defect: callers retry later."""


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


def hint_address(hint: common_pb2.NodeHint) -> str | None:
    """host:port of the hinted node's GRPC endpoint, None if the hint names none."""
    if hint.node_id < 0:
        return None
    return listener_address(hint.endpoints)


class ControllerClient:
    """Channels to the controllers and the calls of the control plane. Create, use and close
    it on one event loop."""

    def __init__(self, settings: ControllerClientSettings) -> None:
        if not settings.bootstrap_servers:
            raise ValueError("a controller client needs at least one controller address")
        for address in settings.bootstrap_servers:
            parse_host_port(address)
        self.settings = settings
        self._addresses: list[str] = list(dict.fromkeys(settings.bootstrap_servers))
        self._leader: str | None = None
        self._turn = 0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._options: list[tuple[str, Any]] = [
            # A restarted controller must be reachable again at once, not after gRPC's
            # default reconnect back-off of up to two minutes.
            ("grpc.initial_reconnect_backoff_ms", max(settings.retry_backoff.base_ms, 1)),
            ("grpc.min_reconnect_backoff_ms", max(settings.retry_backoff.base_ms, 1)),
            ("grpc.max_reconnect_backoff_ms", max(settings.retry_backoff.max_ms, 1)),
            # Pings during calls only: a WatchMetadata stream to a controller that died
            # without closing its connection is noticed (the SDK's values; see its network).
            ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.use_local_subchannel_pool", 1),
        ]
        self.controller_epoch = -1
        self._closed = False

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
        return tuple(self._addresses)

    @property
    def leader_address(self) -> str | None:
        """The controller that last accepted a write, None if unknown."""
        return self._leader

    def next_address(self) -> str:
        """The known controllers in turn (for reads any controller serves)."""
        address = self._addresses[self._turn % len(self._addresses)]
        self._turn += 1
        return address

    def _learn(self, address: str) -> None:
        if address not in self._addresses:
            self._addresses.append(address)

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if self._closed:
                raise RuntimeError("the controller client is closed")
            channel = grpc.aio.insecure_channel(address, options=self._options)
            self._channels[address] = channel
        return channel

    def controller_stub(self, address: str) -> Any:
        return controller_pb2_grpc.ControllerServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            await channel.close(grace=None)

    # -- calls ----------------------------------------------------------------------------------

    def _deadline(self, timeout_s: float | None) -> float:
        limit_s = self.settings.request_timeout_ms / 1000
        chosen = limit_s if timeout_s is None else min(timeout_s, limit_s)
        return asyncio.get_running_loop().time() + chosen

    async def _write(
        self,
        method: str,
        request: Any,
        timeout_s: float | None,
        attempt_timeout_s: float | None = None,
    ) -> ControllerAnswer[Any]:
        """Sends ``request`` to the active controller (see the module doc); the answer carries
        any code but NOT_CONTROLLER and REQUEST_TIMED_OUT, which are retried. Each attempt
        may take ``attempt_timeout_s`` (by default all the time left), so that a controller
        that accepts connections but never answers (stopped, not dead) leaves time to try
        another. ControllerUnavailableError when the deadline or ATTEMPTS_MAX runs out first."""
        loop = asyncio.get_running_loop()
        deadline = self._deadline(timeout_s)
        problem = "no controller was tried"
        failures = 0
        redirected = False
        for _ in range(ATTEMPTS_MAX):
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                break
            address = self._leader if self._leader is not None else self.next_address()
            if attempt_timeout_s is not None:
                remaining_s = min(remaining_s, attempt_timeout_s)
            try:
                response = await getattr(self.controller_stub(address), method)(
                    request, timeout=remaining_s
                )
            except grpc.aio.AioRpcError as error:
                if error.code() not in _RETRY_STATUSES:
                    raise ControllerUnavailableError(
                        f"{method} to controller {address} failed: {rpc_error(error)[1]}"
                    ) from None
                problem = f"controller {address}: {rpc_error(error)[1]}"
                redirected = False
            else:
                code = error_code(int(response.error_code))
                if code not in _RETRY_CODES:
                    self._leader = address
                    return ControllerAnswer(response, address)
                problem = f"controller {address}: {code.name}: {response.error_message}"
                hinted = (
                    hint_address(response.controller) if code is ErrorCode.NOT_CONTROLLER else None
                )
                if hinted is not None and hinted != address and not redirected:
                    # Straight to the leader it names; a second redirection in a row means
                    # the quorum is electing, and waiting is better than ping-pong.
                    self._learn(hinted)
                    self._leader = hinted
                    redirected = True
                    continue
                redirected = False
            self._leader = None
            failures += 1
            wait_s = min(backoff_s(self.settings.retry_backoff, failures), deadline - loop.time())
            _log.debug("%s: trying another controller in %.3f s (%s)", method, wait_s, problem)
            if wait_s > 0:
                await asyncio.sleep(wait_s)
        raise ControllerUnavailableError(
            f"{method}: no active controller answered in time (last: {problem})"
        )

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
        stub = admin_pb2_grpc.AdminServiceStub(self.channel(address))  # type: ignore[no-untyped-call]
        remaining_s = self._deadline(timeout_s) - asyncio.get_running_loop().time()
        try:
            response: admin_pb2.DescribeClusterResponse = await stub.DescribeCluster(
                admin_pb2.DescribeClusterRequest(), timeout=max(remaining_s, 0.001)
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
        return self.controller_stub(address).WatchMetadata(request)
