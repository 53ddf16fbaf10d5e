"""The quorum client: how every process reaches the active controller (the Raft leader).

Writes to the controllers (the control plane's RPCs, Kafka's admin operations) must reach the
active controller. A call goes to the controller that last accepted one; a follower answers
NOT_CONTROLLER, with a NodeHint naming the leader where the RPC has one, which the call
follows at once. Without a hint (an election is under way, or the RPC has no hint field), when
a controller does not answer or fails the call in a way another controller may not
(``FAILOVER_STATUSES``: unreachable, timed out, an internal or unknown error, shedding load), or
when the leader answers REQUEST_TIMED_OUT (its quorum did not commit in time; the change may
still commit, so a retried creation can answer TOPIC_ALREADY_EXISTS, as with Kafka's admin
client), the call forgets the leader and tries the next controller at once, or the one a
``locate`` function names (Admin asks DescribeQuorum); it backs off (``brook.rpc.backoff``) only
after a full round of the known controllers has failed, or when a hint names back a controller
just left (an election: waiting is better than ping-pong). A gRPC failure that every controller
would repeat (INVALID_ARGUMENT, UNIMPLEMENTED, PERMISSION_DENIED, a message over the size limit,
...) ends the call at once with ``ControllerCallFailedError``.

Every call is bounded three ways: by its deadline; each attempt by ``ATTEMPT_SHARE`` of the time
left (at least ``ATTEMPT_MIN_S``), so that a leader that accepts calls but never answers
(stopped, not dead) leaves time to try another; and by ``ATTEMPTS_MAX`` attempts, so two
controllers that keep naming each other cannot hold a call in a loop. When they run out the call
raises ``ControllerUnavailableError``, whose ``code`` is the retriable Kafka error a broker
would answer: REQUEST_TIMED_OUT when the last controller tried did not answer in time or
answered so, NOT_CONTROLLER otherwise.

``ControllerQuorum`` holds what a process knows (the controllers' addresses, the leader as last
seen); ``LeaderSearch`` is one call's walk, without I/O, so that the asyncio processes
(``call_active_controller``) and the blocking Admin (``call_active_controller_sync``) drive the
same rules. Both raise ``ControllerUnavailableError`` when the walk runs out.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, TypeVar

import grpc

from brook.errors import ErrorCode, error_code
from brook.rpc.addresses import listener_address, parse_address
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2

__all__ = [
    "ATTEMPTS_MAX",
    "ATTEMPT_MIN_S",
    "ATTEMPT_SHARE",
    "FAILOVER_STATUSES",
    "RETRY_CODES",
    "UNREACHABLE_STATUSES",
    "ControllerCallFailedError",
    "ControllerQuorum",
    "ControllerUnavailableError",
    "LeaderSearch",
    "attempts_within",
    "call_active_controller",
    "call_active_controller_sync",
    "fails_over",
    "hint_address",
]

# Enough to walk a 5-controller quorum twice and follow a hint after each step.
ATTEMPTS_MAX: Final = 20
# The part of the time left one attempt may take, and its floor (never past the deadline).
ATTEMPT_SHARE: Final = 0.5
ATTEMPT_MIN_S: Final = 0.5
# The codes after which another controller (or the same one, later) may answer differently.
RETRY_CODES: Final = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})
# The gRPC failures that say nothing about the request: the controller was not reached.
UNREACHABLE_STATUSES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
# The gRPC failures after which another controller may answer: those, and one controller's
# trouble (an unexpected error, an aborted call, shedding load).
FAILOVER_STATUSES: Final = UNREACHABLE_STATUSES | frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)

_R = TypeVar("_R")
_log = logging.getLogger(__name__)


class ControllerUnavailableError(Exception):
    """No active controller answered a call within its deadline or attempts, or one failed it
    with a gRPC error no retry fixes (``ControllerCallFailedError``); ``problem`` is what the
    last attempt met, ``code`` the Kafka error standing for the outcome (retriable here:
    NOT_CONTROLLER or REQUEST_TIMED_OUT)."""

    def __init__(
        self, message: str, problem: str = "", code: ErrorCode = ErrorCode.NOT_CONTROLLER
    ) -> None:
        super().__init__(message)
        self.problem = problem or message
        self.code = code


class ControllerCallFailedError(ControllerUnavailableError):
    """A controller failed the call with a gRPC error that every controller would repeat (a
    malformed request, an RPC it lacks, a refusal): ``code`` is the Kafka error standing for
    it (``brook.rpc.errors``), not retriable."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message, code=code)


def fails_over(error: grpc.Call | grpc.aio.AioRpcError) -> bool:
    """Whether another controller (or this one, later) may answer the call ``error`` ended:
    a status in ``FAILOVER_STATUSES`` but a message over gRPC's size limit, which every
    controller refuses alike."""
    if error.code() not in FAILOVER_STATUSES:
        return False
    return rpc_error(error)[0] is not ErrorCode.RECORD_LIST_TOO_LARGE


def hint_address(hint: common_pb2.NodeHint | None) -> str | None:
    """host:port of the hinted node's GRPC endpoint, None if the hint names none."""
    if hint is None or hint.node_id < 0:
        return None
    return listener_address(hint.endpoints)


def attempts_within(timeout_s: float, backoff: RetryBackoff) -> int:
    """An attempt bound that leaves the deadline the binding one, for callers whose back-off
    is short and constant (Admin, the gateway): riding out an election takes many attempts."""
    return ATTEMPTS_MAX + math.ceil(timeout_s * 1000 / max(backoff.base_ms, 1))


class ControllerQuorum:
    """The controllers one process knows: the bootstrap addresses, then those learnt from
    hints, and the one that last accepted a call. Not thread-safe."""

    def __init__(self, bootstrap_servers: Sequence[str]) -> None:
        if not bootstrap_servers:
            raise ValueError("a controller quorum needs at least one controller address")
        for address in bootstrap_servers:
            parse_address(address)
        self.bootstrap_servers = tuple(bootstrap_servers)
        self._addresses: list[str] = list(dict.fromkeys(bootstrap_servers))
        self.leader_address: str | None = None
        """The controller that last accepted a call, None if unknown."""
        self._turn = 0

    @property
    def addresses(self) -> Sequence[str]:
        return tuple(self._addresses)

    def next_address(self) -> str:
        """The known controllers in turn (also for reads any controller serves)."""
        address = self._addresses[self._turn % len(self._addresses)]
        self._turn += 1
        return address

    def follow(self, address: str) -> None:
        """``address`` leads, as a hint or an answer says."""
        if address not in self._addresses:
            self._addresses.append(address)
        self.leader_address = address

    def passed_over(self, address: str) -> None:
        """The controller at ``address`` did not accept a call: it is not the leader, and the
        turn moves past it if it is next."""
        self.leader_address = None
        if (
            len(self._addresses) > 1
            and self._addresses[self._turn % len(self._addresses)] == address
        ):
            self._turn += 1


class LeaderSearch:
    """One call's walk to the active controller (see the module doc), without I/O: the
    driver asks ``next_attempt`` where to send and for how long, reports the outcome, and
    waits the returned back-off."""

    def __init__(
        self,
        quorum: ControllerQuorum,
        what: str,
        *,
        deadline_s: float,
        clock: Callable[[], float],
        backoff: RetryBackoff,
        attempts_max: int = ATTEMPTS_MAX,
    ) -> None:
        self._quorum = quorum
        self._what = what
        self._deadline_s = deadline_s
        self._clock = clock
        self._backoff = backoff
        self._attempts_left = attempts_max
        self._failures = 0
        self._redirected = False
        self._timed_out = False
        self.problem = "no controller was tried"

    def next_attempt(
        self, locate: Callable[[float], str | None] | None = None
    ) -> tuple[str, float] | None:
        """(address, seconds the attempt may take: ``ATTEMPT_SHARE`` of those left, at least
        ``ATTEMPT_MIN_S``, at most all), or None when the deadline or the attempts have run
        out. Without a known leader, ``locate`` (given the seconds left) may name it;
        otherwise the controllers are tried in turn."""
        remaining_s = self._deadline_s - self._clock()
        if remaining_s <= 0 or self._attempts_left <= 0:
            return None
        self._attempts_left -= 1
        address = self._quorum.leader_address
        if address is None and locate is not None:
            address = locate(remaining_s)
            remaining_s = self._deadline_s - self._clock()
            if remaining_s <= 0:
                return None
        attempt_s = min(remaining_s, max(remaining_s * ATTEMPT_SHARE, ATTEMPT_MIN_S))
        return (address or self._quorum.next_address()), attempt_s

    def answered(
        self, address: str, codes: Iterable[int], hint: common_pb2.NodeHint | None
    ) -> float | None:
        """The controller at ``address`` answered with ``codes``: None if the call is done
        (it leads), otherwise the seconds to wait before the next attempt."""
        retry = {error_code(c) for c in codes} & RETRY_CODES
        if not retry:
            self._quorum.follow(address)
            self._failures = 0
            return None
        self.problem = f"controller {address}: {', '.join(sorted(c.name for c in retry))}"
        self._timed_out = ErrorCode.NOT_CONTROLLER not in retry
        hinted = hint_address(hint) if ErrorCode.NOT_CONTROLLER in retry else None
        if hinted is not None and hinted != address:
            if not self._redirected:
                # Straight to the leader it names.
                self._quorum.follow(hinted)
                self._redirected = True
                return 0.0
            # A second redirection in a row: the quorum is electing, and waiting is better
            # than ping-pong.
            return self._fail(address, back_off=True)
        return self._fail(address)

    def unreachable(self, address: str, error: grpc.RpcError) -> float:
        """The call to ``address`` failed in gRPC: the seconds to wait before the next attempt,
        or ControllerCallFailedError when every controller would fail it alike
        (``fails_over``)."""
        assert isinstance(error, grpc.Call | grpc.aio.AioRpcError)
        code, message = rpc_error(error)
        if not fails_over(error):
            raise ControllerCallFailedError(
                f"{self._what} to controller {address} failed: {message}", code
            ) from None
        self.problem = f"controller {address}: {message}"
        self._timed_out = error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        return self._fail(address)

    def _fail(self, address: str, *, back_off: bool = False) -> float:
        """Passes over ``address``: the wait before the next attempt, the back-off after each
        full round of the known controllers (or when ``back_off``), none otherwise."""
        self._quorum.passed_over(address)
        self._redirected = False
        self._failures += 1
        rounds, within_round = divmod(self._failures, len(self._quorum.addresses))
        if within_round and not back_off:
            _log.debug("%s: trying another controller (%s)", self._what, self.problem)
            return 0.0
        wait_s = min(backoff_s(self._backoff, max(rounds, 1)), self._deadline_s - self._clock())
        _log.debug("%s: trying another controller in %.3f s (%s)", self._what, wait_s, self.problem)
        return max(wait_s, 0.0)

    def exhausted(self) -> ControllerUnavailableError:
        return ControllerUnavailableError(
            f"{self._what}: no active controller answered in time (last: {self.problem})",
            self.problem,
            ErrorCode.REQUEST_TIMED_OUT if self._timed_out else ErrorCode.NOT_CONTROLLER,
        )


async def call_active_controller(
    quorum: ControllerQuorum,
    what: str,
    send: Callable[[str, float], Awaitable[_R]],
    codes_of: Callable[[_R], Iterable[int]],
    hint_of: Callable[[_R], common_pb2.NodeHint | None],
    *,
    timeout_s: float,
    backoff: RetryBackoff,
    attempt_timeout_s: float | None = None,
    attempts_max: int = ATTEMPTS_MAX,
) -> tuple[_R, str]:
    """The answer of the active controller to ``send(address, timeout_s)`` (a grpc.aio call),
    and that controller's address. ``attempt_timeout_s``, if given, bounds each attempt
    further than ``LeaderSearch.next_attempt`` does (a heartbeat must not wait long on one
    controller)."""
    loop = asyncio.get_running_loop()
    search = LeaderSearch(
        quorum,
        what,
        deadline_s=loop.time() + timeout_s,
        clock=loop.time,
        backoff=backoff,
        attempts_max=attempts_max,
    )
    while (attempt := search.next_attempt()) is not None:
        address, attempt_s = attempt
        try:
            response = await send(address, min(attempt_s, attempt_timeout_s or attempt_s))
        except grpc.aio.AioRpcError as error:
            wait_s: float | None = search.unreachable(address, error)
        else:
            wait_s = search.answered(address, codes_of(response), hint_of(response))
            if wait_s is None:
                return response, address
        if wait_s:
            await asyncio.sleep(wait_s)
    raise search.exhausted()


def call_active_controller_sync(
    quorum: ControllerQuorum,
    what: str,
    send: Callable[[str, float], _R],
    codes_of: Callable[[_R], Iterable[int]],
    *,
    timeout_s: float,
    attempt_timeout_s: float,
    backoff: RetryBackoff,
    locate: Callable[[float], str | None],
    attempts_max: int = ATTEMPTS_MAX,
) -> tuple[_R, str]:
    """``call_active_controller`` for blocking callers, whose RPCs carry no hint: while no
    leader is known, ``locate(seconds_left)`` names it (Admin asks DescribeQuorum)."""
    search = LeaderSearch(
        quorum,
        what,
        deadline_s=time.monotonic() + timeout_s,
        clock=time.monotonic,
        backoff=backoff,
        attempts_max=attempts_max,
    )
    while (attempt := search.next_attempt(locate)) is not None:
        address, attempt_s = attempt
        try:
            response = send(address, min(attempt_s, attempt_timeout_s))
        except grpc.RpcError as error:
            wait_s: float | None = search.unreachable(address, error)
        else:
            wait_s = search.answered(address, codes_of(response), None)
            if wait_s is None:
                return response, address
        if wait_s:
            time.sleep(wait_s)
    raise search.exhausted()
