"""Real grpc.aio servers on the loopback whose servicers answer as a test scripts them: the
controllers, coordinators and storage nodes of the RPC-plumbing tests.

    async with serving(3, lambda server, index: add_servicer(Scripted(index), server)) as ports:
        ...

``ScriptedServicer`` records which server each call reached (``calls``, shared by all of a
test's servers) and can ``hang``: accept the call and never answer (a process stopped, not
dead), until the server stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import grpc

from brook.rpc.addresses import format_address

__all__ = ["LOOPBACK", "ScriptedServicer", "hang", "serving", "unary_handler"]

LOOPBACK = "127.0.0.1"


async def hang() -> NoReturn:
    """Never returns; the server's stop cancels it."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable: the event is never set")


class ScriptedServicer:
    """The base of a scripted servicer: ``index`` is its server's place, ``calls`` the
    indexes of the servers called, in order."""

    def __init__(self, index: int, calls: list[int]) -> None:
        self.index = index
        self.calls = calls

    def called(self) -> None:
        self.calls.append(self.index)


def unary_handler(
    service: str, method: str, behaviour: Callable[[bytes, Any], Awaitable[bytes]]
) -> grpc.GenericRpcHandler:
    """``/service/method``, a unary method of raw bytes answered by ``behaviour(request,
    context)``: register it with ``server.add_generic_rpc_handlers([...])``."""
    return grpc.method_handlers_generic_handler(
        service, {method: grpc.unary_unary_rpc_method_handler(behaviour)}
    )


@asynccontextmanager
async def serving(
    count: int, add: Callable[[grpc.aio.Server, int], None], host: str = LOOPBACK
) -> AsyncIterator[list[int]]:
    """The ports of ``count`` servers on ``host``, the ``index``-th given its servicers by
    ``add(server, index)``; all stopped on exit."""
    servers: list[grpc.aio.Server] = []
    ports: list[int] = []
    try:
        for index in range(count):
            server = grpc.aio.server()
            add(server, index)
            ports.append(server.add_insecure_port(format_address(host, 0)))
            await server.start()
            servers.append(server)
        yield ports
    finally:
        for server in servers:
            await server.stop(None)
