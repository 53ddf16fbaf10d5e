"""The gateway's SCRAM credential APIs when no controller answers: a Kafka client gets a
retriable error for every user it named (once each), or for the whole description, over a
real Kafka-protocol connection."""

from __future__ import annotations

import asyncio

from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.scram_apis import scram_handlers
from brook_gateway.upstream import Upstreams
from gateway_support import RawClient, dispatcher_with_api_versions, running_server

from brook.errors import ErrorCode
from brook.ports import allocate_free_ports

REQUEST_TIMEOUT_MS = 500
RETRIABLE = {int(ErrorCode.NOT_CONTROLLER), int(ErrorCode.REQUEST_TIMED_OUT)}


def test_without_a_controller_every_user_and_the_description_fail_retriably() -> None:
    async def scenario() -> None:
        (nobody_listens,) = allocate_free_ports(1)
        upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=REQUEST_TIMEOUT_MS)
        backend = Backend(
            node_id=1,
            image=ClusterImage(),
            upstreams=upstreams,
            controllers=(f"127.0.0.1:{nobody_listens}",),
        )
        dispatcher = dispatcher_with_api_versions()
        for handler in scram_handlers(backend):
            dispatcher.register(handler)
        try:
            async with running_server(dispatcher) as server:
                client = await RawClient.connect(server.port)
                await client.send(
                    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                    0,
                    1,
                    {
                        "deletions": [{"name": "bob", "mechanism": 1}],
                        "upsertions": [
                            {
                                "name": name,
                                "mechanism": 2,
                                "iterations": 4096,
                                "salt": b"salt",
                                "salted_password": b"\0" * 64,
                            }
                            for name in ("alice", "bob")
                        ],
                    },
                )
                _, altered = await client.receive(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
                await client.send(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 2, {"users": None})
                _, described = await client.receive(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
                await client.close()
        finally:
            await upstreams.close()

        assert [r["user"] for r in altered["results"]] == ["bob", "alice"]
        assert {r["error_code"] for r in altered["results"]} <= RETRIABLE
        assert described["error_code"] in RETRIABLE
        assert described["results"] == []

    asyncio.run(scenario())
