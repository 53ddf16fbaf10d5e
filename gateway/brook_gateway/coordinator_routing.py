"""Routing a request to the coordinator that owns its key: a consumer group (its
__consumer_offsets partition) or a transactional id (its __transaction_state partition, owned
by the coordinator owning __consumer_offsets partition ``index % offsets.topic.num.partitions``).

Whichever gateway receives a request forwards it to the key's owning coordinator, found with
the coordinators' FindCoordinator (``brook.rpc.coordinators``, with the key's type) and
cached. A NOT_COORDINATOR answer (ownership moved) is followed through its hint, and an
unreachable owner is looked up again; only when the owner still cannot be reached does the
client get NOT_COORDINATOR, which makes it look the coordinator up again itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from brook.errors import ErrorCode, error_code
from brook.rpc.addresses import GRPC_LISTENER, Endpoint, listener_address
from brook.rpc.coordinators import (
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator,
    hinted_coordinator,
)
from brook.v1 import group_pb2
from brook_gateway.apis import RequestContext
from brook_gateway.backend import Backend
from brook_gateway.protocol.codec import Message
from brook_gateway.upstream import UpstreamError

__all__ = [
    "CONCURRENT_FORWARDS_MAX",
    "OWNER_CACHE_ENTRIES_MAX",
    "CoordinatorRouteError",
    "CoordinatorRouter",
    "Routers",
    "ask_coordinators_listed_here",
    "coordinators_listed_here",
    "gather_bounded",
    "partitions_not_coordinator",
]

# Lookups and calls per forwarded request: the cached owner, a hinted or re-found owner, and
# one more in case ownership moved again during a hand-over.
_ATTEMPTS_MAX: Final = 3
# Bounds the owner cache: clients choose group and transactional ids freely.
OWNER_CACHE_ENTRIES_MAX: Final = 10_000
# Keys of one request (DescribeGroups, DescribeTransactions, ...) forwarded at the same time.
CONCURRENT_FORWARDS_MAX: Final = 32


class CoordinatorRouteError(Exception):
    """A request that reached no coordinator able to answer it; ``code`` is what the Kafka
    client gets (retriable ones make it look the coordinator up again)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CoordinatorRouter:
    """Finds the coordinator owning each key of one type and forwards calls to it, on the
    service ``stub_of(address)`` gives (the group or the transaction service)."""

    def __init__(
        self,
        backend: Backend,
        key_type: group_pb2.CoordinatorType,
        stub_of: Callable[[str], Any],
    ) -> None:
        self._backend = backend
        self._key_type = key_type
        self._stub_of = stub_of
        self._owners: dict[str, Coordinator] = {}

    def _remember(self, key: str, owner: Coordinator) -> None:
        self._owners.pop(key, None)
        while len(self._owners) >= OWNER_CACHE_ENTRIES_MAX:
            del self._owners[next(iter(self._owners))]
        self._owners[key] = owner

    def _address_of(self, node_id: int, endpoints: Iterable[Endpoint]) -> str | None:
        address = listener_address(endpoints)
        if address is None:
            node = self._backend.image.nodes.get(node_id)
            address = None if node is None else node.address(GRPC_LISTENER)
        return address

    async def owner(self, key: str, *, refresh: bool = False) -> Coordinator:
        """The coordinator owning ``key``: cached, or asked of any live coordinator
        (``brook.rpc.coordinators``) within the gateway's request timeout."""
        cached = None if refresh else self._owners.get(key)
        if cached is not None:
            return cached
        upstreams = self._backend.upstreams
        deadline = time.monotonic() + upstreams.request_timeout_s
        coordinators = self._backend.group_coordinator_nodes()
        if not coordinators:
            raise CoordinatorRouteError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator is registered"
            )

        async def ask(
            address: str, request: group_pb2.FindCoordinatorRequest, timeout_s: float
        ) -> group_pb2.FindCoordinatorResponse:
            response: group_pb2.FindCoordinatorResponse = await upstreams.traced_call(
                upstreams.groups(address).FindCoordinator, request, timeout_s
            )
            return response

        try:
            owner = await find_coordinator(
                key,
                [address for _, address in coordinators],
                ask,
                deadline,
                self._address_of,
                key_type=self._key_type,
            )
        except (CoordinatorNotFoundError, CoordinatorRefusedError) as e:
            raise CoordinatorRouteError(e.code, str(e)) from None
        except UpstreamError as e:  # the gateway is stopping
            raise CoordinatorRouteError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from None
        self._remember(key, owner)
        return owner

    async def forward(
        self,
        key: str,
        method: str,
        request: Any,
        error_of: Callable[[Any], int],
        timeout_s: float | None = None,
    ) -> Any:
        """Calls ``method`` of the coordinator owning ``key``, following NOT_COORDINATOR
        hints (the answer's ``coordinator`` field) and looking the owner up again when it does
        not answer. ``error_of``: the answer's code that says whether it came from the owner."""
        upstreams = self._backend.upstreams
        refresh = False
        problem = ""
        for _ in range(_ATTEMPTS_MAX):
            owner = await self.owner(key, refresh=refresh)
            refresh = True
            stub = self._stub_of(owner.address)
            try:
                response = await upstreams.call(getattr(stub, method), request, timeout_s)
            except UpstreamError as e:
                self._owners.pop(key, None)
                problem = f"coordinator {owner.node_id} did not answer: {e}"
                continue
            except asyncio.CancelledError:
                # The request ran out of time waiting on this owner (or the client left):
                # the next request looks the owner up again rather than wait on it again.
                self._owners.pop(key, None)
                raise
            code = error_code(error_of(response))
            if code != ErrorCode.NOT_COORDINATOR:
                return response
            self._owners.pop(key, None)
            problem = f"coordinator {owner.node_id} no longer owns {key!r}"
            hinted = hinted_coordinator(
                (code,), getattr(response, "coordinator", None), self._address_of
            )
            if hinted is not None:
                self._remember(key, hinted)
                refresh = False
        raise CoordinatorRouteError(ErrorCode.NOT_COORDINATOR, problem)


@dataclass(frozen=True, slots=True)
class Routers:
    """The gateway's two routers: groups (GroupCoordinatorService) and transactional ids
    (TransactionCoordinatorService), each with its own owner cache."""

    groups: CoordinatorRouter
    transactions: CoordinatorRouter

    @classmethod
    def of(cls, backend: Backend) -> Routers:
        upstreams = backend.upstreams
        return cls(
            CoordinatorRouter(backend, group_pb2.COORDINATOR_TYPE_GROUP, upstreams.groups),
            CoordinatorRouter(
                backend, group_pb2.COORDINATOR_TYPE_TRANSACTION, upstreams.transactions
            ),
        )


async def gather_bounded(
    calls: list[Callable[[], Awaitable[Message]]],
) -> list[Message]:
    """Runs ``calls`` at most CONCURRENT_FORWARDS_MAX at a time; results in call order."""
    slots = asyncio.Semaphore(CONCURRENT_FORWARDS_MAX)

    async def one(call: Callable[[], Awaitable[Message]]) -> Message:
        async with slots:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


def partitions_not_coordinator(response: Any) -> int:
    """NOT_COORDINATOR when an answer made of per-partition results (CommitOffsets,
    TxnCommitOffsets, AddPartitionsToTxn) says the coordinator does not own the key, else 0:
    the ``error_of`` of ``CoordinatorRouter.forward`` for them."""
    codes = {int(p.error_code) for p in response.partitions}
    return ErrorCode.NOT_COORDINATOR if ErrorCode.NOT_COORDINATOR in codes else 0


async def ask_coordinators_listed_here(
    backend: Backend,
    context: RequestContext,
    ask: Callable[[str], Awaitable[Any]],
) -> tuple[ErrorCode, list[Any]]:
    """``ask(address)`` of every coordinator ``coordinators_listed_here`` names, at once: (the
    listing's error code, the answers). A coordinator that does not answer makes the code
    COORDINATOR_NOT_AVAILABLE, one that answers an error (its ``error_code``) that error; the
    others' answers are listed all the same, as Kafka's brokers list what they can."""
    addresses = coordinators_listed_here(backend, context)
    results = await asyncio.gather(*(ask(a) for a in addresses), return_exceptions=True)
    code = ErrorCode.NONE
    answers = []
    for result in results:
        if isinstance(result, UpstreamError):
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            continue
        if isinstance(result, BaseException):
            raise result
        if result.error_code != ErrorCode.NONE:
            code = error_code(result.error_code)
        answers.append(result)
    return code, answers


def coordinators_listed_here(backend: Backend, context: RequestContext) -> list[str]:
    """GRPC addresses of the coordinators whose keys a listing request on this connection
    lists (ListGroups, ListTransactions): each broker lists the keys whose coordinator
    FindCoordinator names as that broker, so asking every broker lists each key once
    (decisions.md, "ListGroups is split by broker"). A connection to a broker's own port asks
    for that broker; one to the bootstrap listener for every broker this gateway presents."""
    image = backend.image
    brokers = image.kafka_brokers(context.listener)
    mine = []
    for node_id, address in backend.group_coordinator_nodes():
        broker = image.coordinator_broker(brokers, node_id)
        if broker is None:
            continue
        if context.broker_id is None:
            if broker.gateway_id == backend.node_id:
                mine.append(address)
        elif broker.node_id == context.broker_id:
            mine.append(address)
    return mine
