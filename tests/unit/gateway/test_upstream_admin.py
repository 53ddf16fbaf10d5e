"""The gateway's admin calls (``Upstreams.admin``) reach the active controller past one that
hangs and one that fails unexpectedly, end at once on a refusal every controller would repeat,
and answer the Kafka client with a retriable code when no controller answers.

The controllers are real grpc.aio AdminService servers on the loopback, each scripted to
create the topic, answer a gRPC status, or never answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from brook_gateway.upstream import UpstreamError, Upstreams
from scripted_servers import LOOPBACK, ScriptedServicer, hang, serving

from brook.errors import ErrorCode
from brook.v1 import admin_pb2, admin_pb2_grpc

TIMEOUT_MS = 2000
SCENARIO_TIMEOUT_S = 30.0
# A controller's behaviour: None answers, HANG never does, a status fails the call.
HANG = "hang"
Script = grpc.StatusCode | str | None


class _Controller(ScriptedServicer, admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, script: Script, calls: list[int], index: int) -> None:
        super().__init__(index, calls)
        self._script = script

    async def CreateTopics(
        self, request: admin_pb2.CreateTopicsRequest, context: Any
    ) -> admin_pb2.CreateTopicsResponse:
        self.called()
        if self._script == HANG:
            await hang()
        if isinstance(self._script, grpc.StatusCode):
            await context.abort(self._script, "scripted failure")
        return admin_pb2.CreateTopicsResponse(
            topics=[admin_pb2.CreateTopicResult(name=t.name) for t in request.topics]
        )


@asynccontextmanager
async def _controllers(*scripts: Script) -> AsyncIterator[tuple[list[str], list[int]]]:
    """The addresses of controllers behaving as ``scripts`` say, and the indexes called."""
    calls: list[int] = []

    def add(server: grpc.aio.Server, index: int) -> None:
        admin_pb2_grpc.add_AdminServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Controller(scripts[index], calls, index), server
        )

    async with serving(len(scripts), add) as ports:
        yield [f"{LOOPBACK}:{port}" for port in ports], calls


async def _create(addresses: list[str]) -> admin_pb2.CreateTopicsResponse:
    upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=TIMEOUT_MS)
    try:
        response: admin_pb2.CreateTopicsResponse = await upstreams.admin(
            addresses,
            "CreateTopics",
            admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="t")]),
            lambda r: [t.error_code for t in r.topics],
        )
        return response
    finally:
        await upstreams.close()


def _run(scenario: Any) -> None:
    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))


def test_the_call_reaches_the_answering_controller_past_a_hung_and_a_failing_one() -> None:
    async def scenario() -> None:
        async with _controllers(HANG, grpc.StatusCode.INTERNAL, None) as (addresses, calls):
            started = time.monotonic()
            response = await _create(addresses)

            assert time.monotonic() - started < TIMEOUT_MS / 1000
            assert [t.name for t in response.topics] == ["t"]
            assert calls == [0, 1, 2]

    _run(scenario)


def test_a_refusal_every_controller_would_repeat_is_answered_at_once() -> None:
    async def scenario() -> None:
        async with _controllers(grpc.StatusCode.INVALID_ARGUMENT, None) as (addresses, calls):
            with pytest.raises(UpstreamError) as raised:
                await _create(addresses)

            assert raised.value.code is ErrorCode.INVALID_REQUEST
            assert calls == [0]

    _run(scenario)


@pytest.mark.parametrize(
    ("scripts", "code"),
    [
        ((HANG, HANG), ErrorCode.REQUEST_TIMED_OUT),
        ((grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), ErrorCode.NOT_CONTROLLER),
    ],
)
def test_controllers_that_all_fail_leave_the_kafka_client_a_retriable_code(
    scripts: tuple[Script, ...], code: ErrorCode
) -> None:
    async def scenario() -> None:
        async with _controllers(*scripts) as (addresses, calls):
            started = time.monotonic()
            with pytest.raises(UpstreamError) as raised:
                await _create(addresses)

            assert time.monotonic() - started < TIMEOUT_MS / 1000 + 0.5
            assert raised.value.code is code and code.retriable
            assert set(calls) == {0, 1}

    _run(scenario)
