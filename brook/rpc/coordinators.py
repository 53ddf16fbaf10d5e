"""Finding a consumer group's (or a transactional id's) coordinator, and following it when it
moves: one set of rules for the SDK's consumers, producers, Admin and the gateway (Kafka's
FindCoordinator and NOT_COORDINATOR).

Any group coordinator answers FindCoordinator for any group from its directory of owners (and,
with ``key_type`` COORDINATOR_TYPE_TRANSACTION, for any transactional id: the transaction
coordinator lives in the same processes), so a look-up asks the known coordinators in turn
until one names the owner (``find_coordinator``, ``find_coordinator_sync``). An answer of
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS
(``COORDINATOR_ERRORS``), or any other retriable code, or no answer, moves on to the next; when
none names the owner by the caller's deadline the look-up raises ``CoordinatorNotFoundError``,
which the caller retries after its back-off. Each ask may take only the time left before that
deadline, so N coordinators that hang cost the caller its deadline, not N request timeouts. A
code no retry fixes (INVALID_GROUP_ID, say) raises ``CoordinatorRefusedError`` at once.

A group call answered NOT_COORDINATOR carries a NodeHint naming the new owner when the
answering coordinator knows it; ``hinted_coordinator`` turns it into the coordinator to try
next, without a look-up.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import grpc

from brook.errors import ErrorCode, error_code
from brook.rpc.addresses import Endpoint, listener_address
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, group_pb2

__all__ = [
    "COORDINATOR_ERRORS",
    "Coordinator",
    "CoordinatorNotFoundError",
    "CoordinatorRefusedError",
    "find_coordinator",
    "find_coordinator_sync",
    "hinted_coordinator",
]

# Answers that mean "this is not (or not yet) the coordinator to ask": the group moved, its
# new owner is still replaying __consumer_offsets, or it has no owner yet.
COORDINATOR_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)

# A node's GRPC address from its id and the endpoints an answer gives (None: it has none).
AddressOf = Callable[[int, Iterable[Endpoint]], str | None]
_Request = group_pb2.FindCoordinatorRequest
_Response = group_pb2.FindCoordinatorResponse
# FindCoordinator sent to the coordinator at an address, to be answered within the seconds given.
Ask = Callable[[str, _Request, float], Awaitable[_Response]]
AskSync = Callable[[str, _Request, float], _Response]


@dataclass(frozen=True, slots=True)
class Coordinator:
    """The coordinator owning a group: its node id and GRPC address."""

    node_id: int
    address: str


class CoordinatorNotFoundError(Exception):
    """No coordinator named the group's owner; retriable. ``code`` is the Kafka error that
    stands for it (COORDINATOR_NOT_AVAILABLE unless an answer said otherwise)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CoordinatorRefusedError(Exception):
    """A coordinator answered FindCoordinator with a code no retry fixes (``code``)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _endpoint_address(node_id: int, endpoints: Iterable[Endpoint]) -> str | None:
    return listener_address(endpoints)


def hinted_coordinator(
    codes: Iterable[ErrorCode],
    hint: common_pb2.NodeHint | None,
    address_of: AddressOf = _endpoint_address,
) -> Coordinator | None:
    """The new owner named by an answer with ``codes`` (its own and its parts'), None unless
    one is NOT_COORDINATOR and the hint names a node with a GRPC endpoint."""
    if ErrorCode.NOT_COORDINATOR not in codes or hint is None or hint.node_id < 0:
        return None
    address = address_of(hint.node_id, hint.endpoints)
    return None if address is None else Coordinator(hint.node_id, address)


# What a key names, by key type, for messages.
_KIND: Final[Mapping[int, str]] = {
    group_pb2.COORDINATOR_TYPE_GROUP: "group",
    group_pb2.COORDINATOR_TYPE_TRANSACTION: "transactional id",
}


class _Search:
    """One look-up's bookkeeping, without I/O (both drivers below share it)."""

    def __init__(self, key: str, address_of: AddressOf, key_type: int) -> None:
        self.key = key
        self.request = group_pb2.FindCoordinatorRequest(
            key_type=key_type,  # type: ignore[arg-type]
            keys=[key],
        )
        self._kind = _KIND[key_type]
        self._address_of = address_of
        self._problems: list[str] = []
        self._code = ErrorCode.COORDINATOR_NOT_AVAILABLE

    def answered(self, address: str, response: _Response | grpc.RpcError) -> Coordinator | None:
        """The owner ``address`` named, or None (the next coordinator is asked): ``response``
        is its answer or the gRPC failure of the call."""
        if isinstance(response, grpc.RpcError):
            assert isinstance(response, grpc.Call | grpc.aio.AioRpcError)
            self._problems.append(f"{address}: {rpc_error(response)[1]}")
            return None
        found = next((c for c in response.coordinators if c.key == self.key), None)
        if found is None:
            self._problems.append(f"{address} answered without the {self._kind}")
            return None
        code = error_code(found.error_code)
        if code is ErrorCode.NONE:
            owner = self._address_of(found.node_id, found.endpoints)
            if owner is not None:
                return Coordinator(found.node_id, owner)
            self._problems.append(f"{address} named node {found.node_id} without a GRPC endpoint")
        elif code in COORDINATOR_ERRORS or code.retriable:
            self._code = code
            self._problems.append(f"{address}: {code.name} {found.error_message}".rstrip())
        else:
            raise CoordinatorRefusedError(
                code, f"FindCoordinator({self.key}): {found.error_message or code.name}"
            )
        return None

    def exhausted(self) -> CoordinatorNotFoundError:
        problems = "; ".join(self._problems) or "no group coordinator is registered"
        return CoordinatorNotFoundError(
            self._code, f"no coordinator named the owner of {self._kind} {self.key!r}: {problems}"
        )


async def find_coordinator(
    key: str,
    candidates: Iterable[str],
    ask: Ask,
    deadline_s: float,
    address_of: AddressOf = _endpoint_address,
    key_type: int = group_pb2.COORDINATOR_TYPE_GROUP,
) -> Coordinator:
    """The coordinator owning ``key`` (a group id, or a transactional id with ``key_type``
    COORDINATOR_TYPE_TRANSACTION), asking the coordinators at ``candidates`` in
    order with ``ask(address, request, timeout_s)`` (a grpc.aio call). The look-up ends by
    ``deadline_s`` (time.monotonic), the caller's: each ask may take only the time that
    remains, so coordinators that hang cannot hold the caller past it (a
    ``CoordinatorNotFoundError`` then, which is retriable)."""
    search = _Search(key, address_of, key_type)

    async def asked(address: str, timeout_s: float) -> _Response | grpc.RpcError:
        try:
            return await ask(address, search.request, timeout_s)
        except grpc.aio.AioRpcError as error:
            return error

    for address in candidates:
        if (timeout_s := deadline_s - time.monotonic()) <= 0:
            break
        if (found := search.answered(address, await asked(address, timeout_s))) is not None:
            return found
    raise search.exhausted()


def find_coordinator_sync(
    key: str,
    candidates: Iterable[str],
    ask: AskSync,
    deadline_s: float,
    key_type: int = group_pb2.COORDINATOR_TYPE_GROUP,
) -> Coordinator:
    """``find_coordinator`` for blocking callers (Admin), with the same deadline rule."""
    search = _Search(key, _endpoint_address, key_type)

    def asked(address: str, timeout_s: float) -> _Response | grpc.RpcError:
        try:
            return ask(address, search.request, timeout_s)
        except grpc.RpcError as error:
            return error

    for address in candidates:
        if (timeout_s := deadline_s - time.monotonic()) <= 0:
            break
        if (found := search.answered(address, asked(address, timeout_s))) is not None:
            return found
    raise search.exhausted()
