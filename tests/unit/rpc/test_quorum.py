"""brook.rpc.quorum: a call reaches the active controller by hints or in turn, within its bounds.

The controllers are real grpc.aio servers on the IPv4 loopback (the IPv6 one for the test of a
hint's endpoint turning into a bracketed address gRPC can dial, which fails, not skips, where
::1 is missing).
Each answers as scripted: as leader, NOT_CONTROLLER, a gRPC failure, or never (it hangs). The
blocking variant is driven through Admin's rules (a ``locate`` naming the leader) against the
same servers, run on their own loop thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import grpc
import pytest
from cluster_fixture import require_ipv6_loopback
from scripted_servers import LOOPBACK, hang, serving

from brook.errors import ErrorCode
from brook.ports import allocate_free_ports
from brook.rpc.addresses import format_address
from brook.rpc.backoff import RetryBackoff
from brook.rpc.channels import ChannelPool, SyncChannelPool, channel_options
from brook.rpc.quorum import (
    ATTEMPTS_MAX,
    ControllerCallFailedError,
    ControllerQuorum,
    ControllerUnavailableError,
    LeaderSearch,
    call_active_controller,
    call_active_controller_sync,
)
from brook.v1 import common_pb2, controller_pb2, controller_pb2_grpc

HOST = LOOPBACK
IPV6_HOST = "::1"
BACKOFF = RetryBackoff(10, 10)
TIMEOUT_S = 5.0
SCENARIO_TIMEOUT_S = 30.0


class _Controllers:
    """Controllers sharing who leads; each records the calls it gets in ``calls``."""

    def __init__(self, host: str = HOST) -> None:
        self.host = host
        self.leader_id = -1
        self.hints = True
        self.failing: dict[int, grpc.StatusCode] = {}
        self.hanging: set[int] = set()
        self.ports: dict[int, int] = {}
        self.calls: list[int] = []

    def address(self, node_id: int) -> str:
        return format_address(self.host, self.ports[node_id])

    def hint(self) -> common_pb2.NodeHint:
        if not self.hints or self.leader_id not in self.ports:
            return common_pb2.NodeHint(node_id=-1)
        endpoint = common_pb2.Endpoint(
            listener="GRPC", host=self.host, port=self.ports[self.leader_id]
        )
        return common_pb2.NodeHint(node_id=self.leader_id, endpoints=[endpoint])


class _Controller(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, controllers: _Controllers, node_id: int) -> None:
        self._controllers = controllers
        self._node_id = node_id

    async def RegisterBroker(
        self, request: controller_pb2.RegisterBrokerRequest, context: Any
    ) -> controller_pb2.RegisterBrokerResponse:
        self._controllers.calls.append(self._node_id)
        if self._node_id in self._controllers.hanging:
            await hang()
        status = self._controllers.failing.get(self._node_id)
        if status is not None:
            await context.abort(status, "scripted failure")
        if self._node_id != self._controllers.leader_id:
            return controller_pb2.RegisterBrokerResponse(
                error_code=int(ErrorCode.NOT_CONTROLLER),  # type: ignore[arg-type]
                controller=self._controllers.hint(),
            )
        return controller_pb2.RegisterBrokerResponse(broker_epoch=7)

    async def DescribeQuorum(
        self, request: controller_pb2.DescribeQuorumRequest, context: Any
    ) -> controller_pb2.DescribeQuorumResponse:
        leader = self._controllers.leader_id
        voters = [
            controller_pb2.QuorumVoter(
                node_id=node_id,
                endpoints=[
                    common_pb2.Endpoint(listener="GRPC", host=self._controllers.host, port=port)
                ],
            )
            for node_id, port in self._controllers.ports.items()
        ]
        return controller_pb2.DescribeQuorumResponse(leader_id=leader, voters=voters)


@asynccontextmanager
async def _running(count: int = 3, host: str = HOST) -> AsyncIterator[_Controllers]:
    controllers = _Controllers(host)

    def add(server: grpc.aio.Server, index: int) -> None:
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Controller(controllers, 1001 + index), server
        )

    async with serving(count, add, host) as ports:
        controllers.ports = {1001 + index: port for index, port in enumerate(ports)}
        yield controllers


def _free_address() -> str:
    return format_address(HOST, allocate_free_ports(1, HOST)[0])


async def _register(
    controllers: _Controllers, quorum: ControllerQuorum, **bounds: Any
) -> tuple[controller_pb2.RegisterBrokerResponse, str]:
    pool = ChannelPool(channel_options(reconnect_backoff_ms=10, reconnect_backoff_max_ms=10))

    async def send(address: str, timeout_s: float) -> controller_pb2.RegisterBrokerResponse:
        response: controller_pb2.RegisterBrokerResponse = await pool.controller(
            address
        ).RegisterBroker(controller_pb2.RegisterBrokerRequest(node_id=1), timeout=timeout_s)
        return response

    try:
        return await call_active_controller(
            quorum,
            "RegisterBroker",
            send,
            lambda r: [r.error_code],
            lambda r: r.controller,
            backoff=BACKOFF,
            **{"timeout_s": TIMEOUT_S, **bounds},
        )
    finally:
        await pool.close()


def _run(scenario: Any) -> None:
    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))


def test_a_call_follows_the_not_controller_hint_to_an_ipv6_leader() -> None:
    require_ipv6_loopback()

    async def scenario() -> None:
        async with _running(host=IPV6_HOST) as controllers:
            controllers.leader_id = 1003
            quorum = ControllerQuorum([controllers.address(1001), controllers.address(1002)])

            response, address = await _register(controllers, quorum)

            assert response.broker_epoch == 7
            assert address == f"[::1]:{controllers.ports[1003]}"
            # The follower once, then straight to the leader it named (learnt for later).
            assert controllers.calls == [1001, 1003]
            assert quorum.leader_address == address
            assert address in quorum.addresses
            await _register(controllers, quorum)
            assert controllers.calls == [1001, 1003, 1003]

    _run(scenario)


def test_without_hints_the_controllers_are_tried_in_turn_past_one_that_is_down() -> None:
    async def scenario() -> None:
        async with _running() as controllers:
            controllers.leader_id = 1003
            controllers.hints = False
            quorum = ControllerQuorum(
                [controllers.address(1001), _free_address(), controllers.address(1003)]
            )

            _, address = await _register(controllers, quorum)

            assert address == controllers.address(1003)
            assert controllers.calls == [1001, 1003]

    _run(scenario)


def test_a_quorum_without_a_leader_fails_within_the_attempt_bound() -> None:
    async def scenario() -> None:
        async with _running() as controllers:
            quorum = ControllerQuorum([controllers.address(n) for n in controllers.ports])
            started = time.monotonic()

            with pytest.raises(ControllerUnavailableError, match="NOT_CONTROLLER") as raised:
                await _register(controllers, quorum)

            assert raised.value.code is ErrorCode.NOT_CONTROLLER
            assert len(controllers.calls) == ATTEMPTS_MAX
            assert time.monotonic() - started < TIMEOUT_S

    _run(scenario)


def test_a_call_ends_at_its_deadline_when_no_controller_answers() -> None:
    async def scenario() -> None:
        quorum = ControllerQuorum([_free_address(), _free_address()])
        started = time.monotonic()

        with pytest.raises(ControllerUnavailableError, match="no active controller"):
            await _register(_Controllers(), quorum, timeout_s=0.5)

        assert time.monotonic() - started < 0.5 + 1.0

    _run(scenario)


def test_a_call_reaches_the_leader_past_a_hung_and_a_failing_controller_in_time() -> None:
    async def scenario() -> None:
        async with _running() as controllers:
            controllers.leader_id = 1003
            controllers.hints = False
            controllers.hanging.add(1001)
            controllers.failing[1002] = grpc.StatusCode.INTERNAL
            quorum = ControllerQuorum([controllers.address(n) for n in controllers.ports])
            quorum.follow(controllers.address(1001))  # the hung one was the leader
            started = time.monotonic()

            _, address = await _register(controllers, quorum, timeout_s=2.0)

            assert time.monotonic() - started < 2.0
            assert address == controllers.address(1003)
            assert controllers.calls == [1001, 1002, 1003]

    _run(scenario)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.INVALID_REQUEST),
        (grpc.StatusCode.UNIMPLEMENTED, ErrorCode.UNSUPPORTED_VERSION),
        (grpc.StatusCode.PERMISSION_DENIED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    ],
)
def test_a_grpc_failure_every_controller_would_repeat_ends_the_call_at_once(
    status: grpc.StatusCode, code: ErrorCode
) -> None:
    async def scenario() -> None:
        async with _running() as controllers:
            controllers.leader_id = 1002
            controllers.failing[1001] = status
            quorum = ControllerQuorum([controllers.address(1001), controllers.address(1002)])

            with pytest.raises(ControllerCallFailedError) as raised:
                await _register(controllers, quorum)

            assert raised.value.code is code
            assert controllers.calls == [1001]

    _run(scenario)


def test_controllers_that_never_answer_end_the_call_timed_out_at_its_deadline() -> None:
    async def scenario() -> None:
        async with _running(2) as controllers:
            controllers.hanging.update(controllers.ports)
            quorum = ControllerQuorum([controllers.address(n) for n in controllers.ports])
            started = time.monotonic()

            with pytest.raises(ControllerUnavailableError) as raised:
                await _register(controllers, quorum, timeout_s=1.0)

            assert time.monotonic() - started < 1.0 + 0.5
            assert raised.value.code is ErrorCode.REQUEST_TIMED_OUT
            # Each attempt took a part of the time left, so both controllers were tried.
            assert set(controllers.calls) == set(controllers.ports)

    _run(scenario)


def test_the_back_off_comes_after_a_full_round_of_the_controllers() -> None:
    now = [0.0]
    quorum = ControllerQuorum(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
    search = LeaderSearch(
        quorum, "test", deadline_s=10.0, clock=lambda: now[0], backoff=RetryBackoff(100, 100)
    )
    waits = []
    for _ in range(6):
        attempt = search.next_attempt()
        assert attempt is not None
        waits.append(search.answered(attempt[0], [ErrorCode.NOT_CONTROLLER], None))

    assert waits == [0.0, 0.0, 0.1, 0.0, 0.0, 0.1]


def test_an_attempt_takes_a_share_of_the_time_left_so_a_hung_leader_cannot_take_it_all() -> None:
    now = [0.0]
    quorum = ControllerQuorum(["127.0.0.1:1", "127.0.0.1:2"])
    search = LeaderSearch(
        quorum, "test", deadline_s=8.0, clock=lambda: now[0], backoff=RetryBackoff(100, 100)
    )

    assert search.next_attempt() == ("127.0.0.1:1", 4.0)
    now[0] = 7.8
    # Never less than the floor, never past the deadline.
    assert search.next_attempt() == ("127.0.0.1:2", pytest.approx(0.2))


def test_two_hints_in_a_row_back_off_instead_of_ping_ponging() -> None:
    now = [0.0]
    quorum = ControllerQuorum(["[::1]:1", "[::1]:2"])
    search = LeaderSearch(
        quorum, "test", deadline_s=10.0, clock=lambda: now[0], backoff=RetryBackoff(100, 100)
    )

    def hint(port: int) -> common_pb2.NodeHint:
        endpoint = common_pb2.Endpoint(listener="GRPC", host=IPV6_HOST, port=port)
        return common_pb2.NodeHint(node_id=port, endpoints=[endpoint])

    first = search.next_attempt()
    assert first is not None and first[0] == "[::1]:1"
    assert search.answered("[::1]:1", [ErrorCode.NOT_CONTROLLER], hint(2)) == 0.0
    second = search.next_attempt()
    assert second is not None and second[0] == "[::1]:2"
    # The hinted leader names the first again: an election, so wait the back-off.
    assert search.answered("[::1]:2", [ErrorCode.NOT_CONTROLLER], hint(1)) == 0.1
    assert quorum.leader_address is None


@contextmanager
def _controllers_on_a_thread() -> Iterator[_Controllers]:
    """The controllers served on a loop of their own, for a blocking client."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[_Controllers] = loop.create_future()
    stop = asyncio.Event()

    async def serve() -> None:
        async with _running() as controllers:
            ready.set_result(controllers)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(SCENARIO_TIMEOUT_S)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(SCENARIO_TIMEOUT_S)
        loop.close()


async def _wait(future: asyncio.Future[_Controllers]) -> _Controllers:
    return await future


def test_the_blocking_call_finds_the_leader_that_locate_names() -> None:
    with _controllers_on_a_thread() as controllers, SyncChannelPool() as pool:
        controllers.leader_id = 1002
        quorum = ControllerQuorum([controllers.address(1001)])

        def locate(timeout_s: float) -> str | None:
            answer = pool.controller(controllers.address(1001)).DescribeQuorum(
                controller_pb2.DescribeQuorumRequest(), timeout=timeout_s
            )
            leader = next(v for v in answer.voters if v.node_id == answer.leader_id)
            return format_address(leader.endpoints[0].host, leader.endpoints[0].port)

        response, address = call_active_controller_sync(
            quorum,
            "RegisterBroker",
            lambda a, t: pool.controller(a).RegisterBroker(
                controller_pb2.RegisterBrokerRequest(node_id=1), timeout=t
            ),
            lambda r: [r.error_code],
            timeout_s=TIMEOUT_S,
            attempt_timeout_s=TIMEOUT_S,
            backoff=BACKOFF,
            locate=locate,
        )

        assert response.broker_epoch == 7
        assert address == controllers.address(1002)
        assert controllers.calls == [1002]
