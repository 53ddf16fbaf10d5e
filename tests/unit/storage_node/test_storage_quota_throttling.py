"""Who the storage node's client quotas hold (brook_storage_node.client_quotas), on a real
grpc.aio server: the client id of the call metadata the SDK sends, any client id included;
the cluster's own calls (a super user's, or an unauthenticated call naming no client id) not
measured; and calls of a throttled group held until its throttle has passed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager

import grpc
from brook_storage_node.client_quotas import StorageQuotas
from scripted_servers import LOOPBACK, serving, unary_handler

from brook.metadata.image import MetadataImage, QuotaEntity
from brook.rpc.channels import client_id_metadata
from brook.security.grpc_identity import GrpcIdentity
from brook.security.principal import ANONYMOUS, Principal

METHOD = "/test.Quotas/Produce"
RPC_TIMEOUT_S = 10
NOT_MEASURED = "-"

Call = Callable[[int, tuple[tuple[str, str], ...]], Awaitable[str]]


@asynccontextmanager
async def _server(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    super_users: Collection[Principal] = (),
) -> AsyncIterator[Call]:
    """A server that admits each call as the storage node admits a Produce and answers its
    throttle in ms (``NOT_MEASURED`` when no quota applies), and a function calling it with
    a request of so many bytes and call metadata."""
    identity = GrpcIdentity(MetadataImage)
    storage_quotas = StorageQuotas(lambda: quotas, identity, super_users, 2, 1)

    async def produce(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        call = await storage_quotas.admit(context, "producer_byte_rate", "produce")
        if call is None:
            return NOT_MEASURED.encode()
        return str(storage_quotas.record(call, len(request))).encode()

    async with serving(
        1,
        lambda server, _: server.add_generic_rpc_handlers(
            [unary_handler("test.Quotas", "Produce", produce)]
        ),
    ) as (port,):
        async with grpc.aio.insecure_channel(f"{LOOPBACK}:{port}") as channel:

            async def call(size: int, metadata: tuple[tuple[str, str], ...]) -> str:
                answer = await channel.unary_unary(METHOD)(
                    b"p" * size, metadata=metadata, timeout=RPC_TIMEOUT_S
                )
                assert isinstance(answer, bytes)
                return answer.decode()

            yield call


def test_the_client_id_is_the_one_the_sdk_sends_whatever_its_characters() -> None:
    async def scenario() -> None:
        name = "lädt/100% ✓"
        quotas = {(("client-id", name),): {"producer_byte_rate": 1000.0}}
        async with _server(quotas) as call:
            # 1500 bytes over the 1 s a new rate counts at least: half a window over.
            assert await call(1500, client_id_metadata(name)) == "500"
            assert await call(1500, client_id_metadata("lädt")) == NOT_MEASURED

    asyncio.run(scenario())


def test_the_clusters_own_calls_are_not_measured() -> None:
    async def scenario() -> None:
        quotas = {(("client-id", None),): {"producer_byte_rate": 1000.0}}
        async with _server(quotas) as call:
            # An unauthenticated call naming no client id: one of the cluster's processes.
            assert await call(5000, ()) == NOT_MEASURED
            # The empty client id is a client id: the default client-id quota applies.
            assert await call(1500, client_id_metadata("")) == "500"
        async with _server(quotas, super_users={ANONYMOUS}) as call:
            # A super user (the gateway, the coordinators) is never measured.
            assert await call(5000, client_id_metadata("gateway")) == NOT_MEASURED

    asyncio.run(scenario())


def test_calls_of_a_throttled_group_wait_until_its_throttle_has_passed() -> None:
    async def scenario() -> None:
        quotas = {(("client-id", "greedy"),): {"producer_byte_rate": 1000.0}}
        async with _server(quotas) as call:
            metadata = client_id_metadata("greedy")
            started = time.monotonic()
            assert await call(1500, metadata) == "500"
            # Throttled for 500 ms from the first call's recording: the next is held so long
            # (and, over the quota again, throttled itself).
            assert int(await call(500, metadata)) > 0
            assert time.monotonic() - started >= 0.5 - 0.005
            # Another client id is not held.
            other_started = time.monotonic()
            assert await call(10, client_id_metadata("other")) == NOT_MEASURED
            assert time.monotonic() - other_started < 0.4

    asyncio.run(scenario())
