"""Every Kafka API the gateway serves declares how it is authorized, and the declaration is
enforced: driven by the dispatcher's registry, so an API added without a declaration, or one
that lets a caller without ACLs through, fails here.

The gateway is the real Kafka server with the real handlers (brook_gateway.app's
``kafka_dispatcher``) and an authorizer that is on with no ACLs; its backend's image has no
node at all, so a request that got past authorization would be answered with routing errors,
never with an authorization failure. Each API is sent, at its lowest and highest served
version, a request naming a resource of every kind it names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from acl_records import acl
from brook_gateway.apis import ApiHandler, Dispatcher
from brook_gateway.app import kafka_dispatcher
from brook_gateway.authorization import NO_AUTHORIZATION, Authorization
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.protocol.codec import Message, codec_for
from brook_gateway.protocol.kafka_messages import REQUESTS, ApiKey
from brook_gateway.protocol.schema import FieldSpec, in_range
from brook_gateway.upstream import Upstreams
from gateway_support import RawClient, running_server

from brook.errors import ErrorCode
from brook.security.authorizer import DESCRIBE, TOPIC, TRANSACTIONAL_ID, WRITE, Authorizer
from brook.security.principal import ANONYMOUS
from brook.v1 import metadata_pb2

DENIALS = {
    int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
    int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
}
# AddPartitionsToTxn answers the partitions it did not add because another was denied.
NOT_ATTEMPTED = int(ErrorCode.OPERATION_NOT_ATTEMPTED)
# The APIs anyone may call: ApiVersions, and the listings that show only what the caller may
# describe.
# The SASL APIs are how a client authenticates (their own state rules answer them: a handshake
# after authentication is ILLEGAL_SASL_STATE, see test_gateway_sasl.py).
OPEN_TO_ANYONE = {
    ApiKey.API_VERSIONS,
    ApiKey.LIST_GROUPS,
    ApiKey.LIST_TRANSACTIONS,
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
}
# Requests of these shapes would be refused before authorization for reasons of their own.
OVERRIDES: dict[ApiKey, Message] = {ApiKey.PRODUCE: {"acks": -1}}


def _dispatcher(
    authorizer: Authorizer | None, image: ClusterImage | None = None
) -> tuple[Dispatcher, Upstreams]:
    upstreams = Upstreams(message_bytes_max=1 << 20, request_timeout_ms=1000)
    backend = Backend(node_id=1, image=image or ClusterImage(), upstreams=upstreams, controllers=())
    return kafka_dispatcher(backend, authorizer), upstreams


def _registered(dispatcher: Dispatcher) -> Iterator[ApiHandler]:
    for api_key, _, _ in dispatcher.advertised():
        handler = dispatcher.handler(api_key)
        assert handler is not None
        yield handler


def _filled_fields(fields: tuple[FieldSpec, ...], version: int, message: Message) -> Message:
    """``message`` with a name in every string field and one element in every list of names,
    structs or partition indexes."""
    for field in fields:
        if not in_range(version, field.versions):
            continue
        if field.fields:
            # The encoder gives every field left out its default.
            element = _filled_fields(field.fields, version, {})
            message[field.name] = [element] if field.array else element
        elif field.type == "string":
            message[field.name] = ["t"] if field.array else "t"
        elif field.type == "int32" and field.array:
            message[field.name] = [0]
    return message


def filled_request(api_key: ApiKey, version: int) -> Message:
    spec = REQUESTS[api_key]
    request = _filled_fields(spec.fields, version, codec_for(spec, version).default())
    return request | OVERRIDES.get(api_key, {})


def error_codes(message: Any) -> list[int]:
    if isinstance(message, dict):
        own = [v for k, v in message.items() if k.endswith("error_code") and isinstance(v, int)]
        return own + [code for value in message.values() for code in error_codes(value)]
    if isinstance(message, list):
        return [code for value in message for code in error_codes(value)]
    return []


def test_every_registered_api_declares_its_authorization() -> None:
    dispatcher, _ = _dispatcher(None)
    registered = list(_registered(dispatcher))
    assert len(registered) > 30
    for handler in registered:
        assert isinstance(handler.authorization, Authorization), handler.api_key.name
        assert handler.authorization.summary, handler.api_key.name
    checking_nothing = {h.api_key for h in registered if h.authorization.checks_nothing}
    assert checking_nothing == {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    }


def test_a_handler_without_a_declaration_cannot_be_registered() -> None:
    async def handle(request: Message, context: Any) -> Message:
        return {}

    with pytest.raises(TypeError, match="authorization"):
        ApiHandler(ApiKey.HEARTBEAT, handle, versions=(0, 4))  # type: ignore[call-arg]
    declared = ApiHandler(ApiKey.HEARTBEAT, handle, versions=(0, 4), authorization=NO_AUTHORIZATION)
    undeclared = object.__new__(ApiHandler)
    for name in ("api_key", "handle", "versions"):
        object.__setattr__(undeclared, name, getattr(declared, name))
    with pytest.raises(ValueError, match="no authorization declaration"):
        Dispatcher().register(undeclared)


def test_a_caller_without_acls_is_refused_every_api_with_the_kafka_error() -> None:
    authorizer = Authorizer(enabled=True)
    dispatcher, upstreams = _dispatcher(authorizer)
    cases = [
        (handler.api_key, version)
        for handler in _registered(dispatcher)
        if handler.api_key not in OPEN_TO_ANYONE
        for version in sorted(set(handler.versions))
    ]

    async def run() -> dict[tuple[ApiKey, int], Message]:
        answers: dict[tuple[ApiKey, int], Message] = {}
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            try:
                for correlation_id, (api_key, version) in enumerate(cases):
                    await client.send(
                        api_key, version, correlation_id, filled_request(api_key, version)
                    )
                    answered_id, answer = await client.receive(api_key, version)
                    assert answered_id == correlation_id
                    answers[(api_key, version)] = answer
            finally:
                await client.close()
        await upstreams.close()
        return answers

    for (api_key, version), answer in asyncio.run(run()).items():
        codes = {code for code in error_codes(answer) if code}
        assert codes & DENIALS, (api_key.name, version, answer)
        assert codes <= DENIALS | {NOT_ATTEMPTED}, (api_key.name, version, answer)


def _partitions(*topics: str) -> list[Message]:
    return [{"name": name, "partition_data": [{"index": 0, "records": None}]} for name in topics]


def test_denied_parts_of_a_request_are_refused_and_the_rest_served() -> None:
    """ANONYMOUS may write the topics prefixed ``orders-`` (so describe them), describe
    ``public`` and write the transactional id ``tx``: nothing else."""
    authorizer = Authorizer(enabled=True)
    authorizer.load(
        [
            acl(TOPIC, "orders-", WRITE, prefixed=True, principal=str(ANONYMOUS)),
            acl(TOPIC, "public", DESCRIBE, principal=str(ANONYMOUS)),
            acl(TRANSACTIONAL_ID, "tx", WRITE, principal=str(ANONYMOUS)),
        ]
    )
    image = ClusterImage()
    dispatcher, upstreams = _dispatcher(authorizer, image)
    image.apply(
        True,
        2,
        [
            metadata_pb2.MetadataRecord(
                topic=metadata_pb2.TopicRecord(name=name, topic_id=bytes([i + 1]) * 16)
            )
            for i, name in enumerate(("orders-eu", "public", "secret"))
        ],
    )
    requests: list[tuple[ApiKey, int, Message]] = [
        (
            ApiKey.PRODUCE,
            9,
            {"acks": -1, "timeout_ms": 1000, "topic_data": _partitions("orders-eu", "secret")},
        ),
        (
            ApiKey.FETCH,
            12,
            {"topics": [{"topic": "orders-eu", "partitions": [{"partition": 0}]}]},
        ),
        (ApiKey.METADATA, 12, {"topics": None}),
        (ApiKey.METADATA, 12, {"topics": [{"name": "secret"}, {"name": "public"}]}),
        (
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            {
                "v3_and_below_transactional_id": "tx",
                "v3_and_below_topics": [
                    {"name": "orders-eu", "partitions": [0]},
                    {"name": "secret", "partitions": [0]},
                ],
            },
        ),
    ]

    async def run() -> list[Message]:
        answers = []
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            try:
                for correlation_id, (api_key, version, body) in enumerate(requests):
                    full = codec_for(REQUESTS[api_key], version).default() | body
                    await client.send(api_key, version, correlation_id, full)
                    answers.append((await client.receive(api_key, version))[1])
            finally:
                await client.close()
        await upstreams.close()
        return answers

    produced, fetched, every_topic, named, added = asyncio.run(run())
    by_topic = {t["name"]: t["partition_responses"][0]["error_code"] for t in produced["responses"]}
    assert by_topic["secret"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # Past authorization: the image has no partition to route it to.
    assert by_topic["orders-eu"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Writing orders-* is not reading it.
    (fetched_topic,) = fetched["responses"]
    assert fetched_topic["partitions"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert sorted(t["name"] for t in every_topic["topics"]) == ["orders-eu", "public"]
    assert {t["name"]: t["error_code"] for t in named["topics"]} == {
        "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "public": ErrorCode.NONE,
    }
    assert {
        t["name"]: t["results_by_partition"][0]["partition_error_code"]
        for t in added["results_by_topic_v3_and_below"]
    } == {
        "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "orders-eu": ErrorCode.OPERATION_NOT_ATTEMPTED,
    }


def test_a_denied_produce_with_acks_0_is_not_answered() -> None:
    """Kafka answers no acks=0 Produce, refused or not: the next request's answer is the next
    frame on the connection."""
    dispatcher, upstreams = _dispatcher(Authorizer(enabled=True))
    produce = codec_for(REQUESTS[ApiKey.PRODUCE], 9).default() | {
        "acks": 0,
        "timeout_ms": 1000,
        "topic_data": _partitions("secret"),
    }

    async def run() -> int:
        async with running_server(dispatcher) as server:
            client = await RawClient.connect(server.port)
            try:
                await client.send(ApiKey.PRODUCE, 9, 1, produce)
                await client.send(ApiKey.API_VERSIONS, 3, 2, filled_request(ApiKey.API_VERSIONS, 3))
                answered_id, _ = await client.receive(ApiKey.API_VERSIONS, 3)
            finally:
                await client.close()
        await upstreams.close()
        return answered_id

    assert asyncio.run(run()) == 2
