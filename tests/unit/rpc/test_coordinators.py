"""brook.rpc.coordinators: a group's coordinator is found past coordinators that cannot say, a
NOT_COORDINATOR hint names the next one, and a refusal no retry fixes ends the look-up.

The coordinators are real grpc.aio servers on the loopback, each answering FindCoordinator as
a test scripts it, or never (``HANG``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from scripted_servers import LOOPBACK, ScriptedServicer, hang, serving

from brook.errors import ErrorCode
from brook.ports import allocate_free_ports
from brook.rpc.addresses import format_address
from brook.rpc.channels import ChannelPool, SyncChannelPool, channel_options
from brook.rpc.coordinators import (
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator,
    find_coordinator_sync,
    hinted_coordinator,
)
from brook.v1 import common_pb2, group_pb2, group_pb2_grpc

HOST = LOOPBACK
GROUP = "billing"
OWNER_ID = 2002
OWNER_PORT = 9300
SCENARIO_TIMEOUT_S = 30.0
RPC_TIMEOUT_S = 5.0

Answer = Callable[[str], group_pb2.Coordinator]
# A coordinator that accepts the call and never answers (stopped, not dead).
HANG = None


def _owner(key: str) -> group_pb2.Coordinator:
    endpoint = common_pb2.Endpoint(listener="GRPC", host="::1", port=OWNER_PORT)
    return group_pb2.Coordinator(key=key, node_id=OWNER_ID, endpoints=[endpoint])


def _error(code: ErrorCode) -> Answer:
    return lambda key: group_pb2.Coordinator(key=key, error_code=int(code), node_id=-1)  # type: ignore[arg-type]


class _Coordinator(ScriptedServicer, group_pb2_grpc.GroupCoordinatorServiceServicer):
    def __init__(self, answer: Answer | None, calls: list[int], index: int) -> None:
        super().__init__(index, calls)
        self._answer = answer

    async def FindCoordinator(
        self, request: group_pb2.FindCoordinatorRequest, context: Any
    ) -> group_pb2.FindCoordinatorResponse:
        self.called()
        if self._answer is None:
            await hang()
        return group_pb2.FindCoordinatorResponse(coordinators=[self._answer(request.keys[0])])


@asynccontextmanager
async def _running(*answers: Answer | None) -> AsyncIterator[tuple[list[str], list[int]]]:
    """Addresses of coordinators answering in order, and the indexes of those asked."""
    calls: list[int] = []

    def add(server: grpc.aio.Server, index: int) -> None:
        group_pb2_grpc.add_GroupCoordinatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Coordinator(answers[index], calls, index), server
        )

    async with serving(len(answers), add) as ports:
        yield [format_address(HOST, port) for port in ports], calls


def _free_address() -> str:
    return format_address(HOST, allocate_free_ports(1, HOST)[0])


async def _find(addresses: list[str], timeout_s: float = RPC_TIMEOUT_S) -> Coordinator:
    pool = ChannelPool(channel_options())

    def ask(address: str, request: group_pb2.FindCoordinatorRequest, timeout_s: float) -> Any:
        return pool.groups(address).FindCoordinator(request, timeout=timeout_s)

    try:
        return await find_coordinator(GROUP, addresses, ask, time.monotonic() + timeout_s)
    finally:
        await pool.close()


def _run(scenario: Callable[[], Any]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))


def test_the_owner_is_found_past_a_dead_and_a_loading_coordinator() -> None:
    async def scenario() -> None:
        async with _running(_error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), _owner) as (
            addresses,
            calls,
        ):
            found = await _find([_free_address(), *addresses])

        assert found == Coordinator(OWNER_ID, f"[::1]:{OWNER_PORT}")
        assert calls == [0, 1]

    _run(scenario)


def test_no_coordinator_naming_the_owner_is_a_retriable_not_found() -> None:
    async def scenario() -> None:
        async with _running(_error(ErrorCode.NOT_COORDINATOR)) as (addresses, calls):
            with pytest.raises(CoordinatorNotFoundError, match="NOT_COORDINATOR") as raised:
                await _find([*addresses, _free_address()])

        assert raised.value.code is ErrorCode.NOT_COORDINATOR
        assert calls == [0]

    _run(scenario)


def test_an_answer_no_retry_fixes_ends_the_look_up_at_once() -> None:
    async def scenario() -> None:
        async with _running(_error(ErrorCode.INVALID_GROUP_ID), _owner) as (addresses, calls):
            with pytest.raises(CoordinatorRefusedError) as raised:
                await _find(addresses)

        assert raised.value.code is ErrorCode.INVALID_GROUP_ID
        assert calls == [0]

    _run(scenario)


def test_coordinators_that_hang_cost_the_look_up_its_deadline_not_one_timeout_each() -> None:
    async def scenario() -> None:
        async with _running(HANG, HANG, HANG) as (addresses, calls):
            started = time.monotonic()
            with pytest.raises(CoordinatorNotFoundError) as raised:
                await _find(addresses, timeout_s=0.5)
            elapsed_s = time.monotonic() - started

        # Three asks of a full request timeout each would take 3 * 0.5 s.
        assert elapsed_s < 0.5 + 0.4
        assert raised.value.code.retriable
        assert calls == [0]

    _run(scenario)


def test_a_hung_coordinator_leaves_the_next_one_the_time_that_remains() -> None:
    async def scenario() -> None:
        async with _running(HANG, _owner) as (addresses, calls):
            pool = ChannelPool(channel_options())
            given: list[float] = []

            def ask(address: str, request: group_pb2.FindCoordinatorRequest, t: float) -> Any:
                given.append(t)
                # The caller caps each ask as the SDK and the gateway may.
                return pool.groups(address).FindCoordinator(request, timeout=min(t, 0.3))

            try:
                found = await find_coordinator(GROUP, addresses, ask, time.monotonic() + 2.0)
            finally:
                await pool.close()

        assert found.node_id == OWNER_ID
        assert calls == [0, 1]
        assert given[0] <= 2.0 and given[1] <= 2.0 - 0.3

    _run(scenario)


def test_the_blocking_look_up_asks_nothing_after_its_deadline() -> None:
    with SyncChannelPool() as pool:
        with pytest.raises(CoordinatorNotFoundError, match="no group coordinator"):
            find_coordinator_sync(
                GROUP,
                [_free_address()],
                lambda address, request, t: pool.groups(address).FindCoordinator(
                    request, timeout=t
                ),
                time.monotonic() - 1,
            )


def test_a_not_coordinator_hint_names_the_next_coordinator() -> None:
    endpoint = common_pb2.Endpoint(listener="GRPC", host="::1", port=OWNER_PORT)
    hint = common_pb2.NodeHint(node_id=OWNER_ID, endpoints=[endpoint])

    assert hinted_coordinator([ErrorCode.NOT_COORDINATOR], hint) == Coordinator(
        OWNER_ID, f"[::1]:{OWNER_PORT}"
    )
    assert hinted_coordinator([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS], hint) is None
    assert hinted_coordinator([ErrorCode.NOT_COORDINATOR], common_pb2.NodeHint(node_id=-1)) is None
    no_grpc = common_pb2.NodeHint(
        node_id=OWNER_ID,
        endpoints=[common_pb2.Endpoint(listener="PLAINTEXT", host="::1", port=OWNER_PORT)],
    )
    assert hinted_coordinator([ErrorCode.NOT_COORDINATOR], no_grpc) is None
