"""Every gRPC method of every brook.v1 service has an authorization rule, and the runtime's
interceptor (brook/security/grpc_authorization.py) enforces it: driven by the service
descriptors, so a method added to a .proto without a rule fails here.

The server is a real grpc.aio server with the interceptor in front of servicers that answer
every method with an empty response ("reached"); a caller without ACLs is refused with
PERMISSION_DENIED and the Kafka error code before the servicer runs, a super user reaches it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from acl_records import acl
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from brook.errors import ErrorCode
from brook.rpc.errors import ERROR_CODE_METADATA_KEY, rpc_error
from brook.security.authorizer import READ, TOPIC, Authorizer
from brook.security.grpc_authorization import AuthorizationInterceptor, peer_host
from brook.security.grpc_rules import METHOD_RULES
from brook.security.principal import Principal, user
from brook.v1 import (
    admin_pb2,
    controller_pb2,
    group_pb2,
    replica_pb2,
    storage_pb2,
    transaction_pb2,
)

CALL_TIMEOUT_S = 5.0
PRINCIPAL_KEY = "test-principal"
SUPER_USER = user("brook")
MALLORY = user("mallory")
SERVICES: tuple[ServiceDescriptor, ...] = tuple(
    service
    for module in (
        admin_pb2,
        controller_pb2,
        group_pb2,
        replica_pb2,
        storage_pb2,
        transaction_pb2,
    )
    for service in module.DESCRIPTOR.services_by_name.values()
)
METHODS: tuple[MethodDescriptor, ...] = tuple(m for s in SERVICES for m in s.methods)
# The methods a caller without any ACL may still call: the quorum's and the cluster's
# whereabouts (Kafka's Metadata brokers and controller), and the listings that show only what
# the caller may describe. GetMetadata answers a named topic the caller may not describe with
# TOPIC_AUTHORIZATION_FAILED in place of its metadata, as Kafka's Metadata does
# (tests/integration/test_acl_enforcement.py).
OPEN_TO_ANYONE = {
    "brook.v1.StorageService/GetMetadata",
    "brook.v1.AdminService/DescribeCluster",
    "brook.v1.ControllerService/DescribeQuorum",
    "brook.v1.GroupCoordinatorService/ListGroups",
    "brook.v1.TransactionCoordinatorService/ListTransactions",
}


def _name(method: MethodDescriptor) -> str:
    return f"{method.containing_service.full_name}/{method.name}"


def _message_class(descriptor: Any) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def filled(message: Message) -> Message:
    """``message`` with every string, bytes and repeated field given a value, so a rule
    finds resources to check."""
    for field in message.DESCRIPTOR.fields:
        repeated = field.is_repeated
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                continue
            if repeated:
                filled(getattr(message, field.name).add())
            else:
                filled(getattr(message, field.name))
        elif field.type == FieldDescriptor.TYPE_STRING:
            value: Any = "t"
            (getattr(message, field.name).append if repeated else _setter(message, field))(value)
        elif field.type == FieldDescriptor.TYPE_BYTES:
            (getattr(message, field.name).append if repeated else _setter(message, field))(
                bytes(16)
            )
    return message


def _setter(message: Message, field: Any) -> Callable[[Any], None]:
    return lambda value: setattr(message, field.name, value)


def _reaching_handler(service: ServiceDescriptor) -> grpc.GenericRpcHandler:
    """Every method of ``service``, answered with an empty response."""
    handlers = {}
    for method in service.methods:
        request_class = _message_class(method.input_type)
        response_class = _message_class(method.output_type)
        options = {
            "request_deserializer": request_class.FromString,
            "response_serializer": response_class.SerializeToString,
        }
        if method.client_streaming and method.server_streaming:

            async def both(requests: Any, context: Any) -> AsyncIterator[Any]:
                del requests, context
                return
                yield

            handlers[method.name] = grpc.stream_stream_rpc_method_handler(both, **options)
        elif method.server_streaming:

            async def streamed(request: Any, context: Any) -> AsyncIterator[Any]:
                del request, context
                return
                yield

            handlers[method.name] = grpc.unary_stream_rpc_method_handler(streamed, **options)
        else:

            def unary(response_class: type[Message]) -> Callable[..., Any]:
                async def answered(request: Any, context: Any) -> Message:
                    del request, context
                    return response_class()

                return answered

            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                unary(response_class), **options
            )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


async def _principal_from_metadata(context: Any) -> Principal:
    return Principal.parse(dict(context.invocation_metadata())[PRINCIPAL_KEY])


@asynccontextmanager
async def _server(authorizer: Authorizer) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server(
        interceptors=(AuthorizationInterceptor(authorizer, _principal_from_metadata),)
    )
    server.add_generic_rpc_handlers(tuple(_reaching_handler(s) for s in SERVICES))
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)


async def _call(
    channel: grpc.aio.Channel,
    method: MethodDescriptor,
    principal: Principal,
    request: Message | None = None,
) -> grpc.StatusCode | grpc.aio.AioRpcError:
    """OK if the call reached the servicer, else the error it ended with; ``request`` defaults
    to a filled one."""
    path = f"/{_name(method)}"
    if request is None:
        request = filled(_message_class(method.input_type)())
    response_class = _message_class(method.output_type)
    kwargs: dict[str, Any] = {
        "request_serializer": type(request).SerializeToString,
        "response_deserializer": response_class.FromString,
    }
    metadata = ((PRINCIPAL_KEY, str(principal)),)
    try:
        if method.client_streaming:
            stream_call = channel.stream_stream(path, **kwargs)(
                iter([request]), metadata=metadata, timeout=CALL_TIMEOUT_S
            )
            async for _ in stream_call:
                pass
        elif method.server_streaming:
            async for _ in channel.unary_stream(path, **kwargs)(
                request, metadata=metadata, timeout=CALL_TIMEOUT_S
            ):
                pass
        else:
            await channel.unary_unary(path, **kwargs)(
                request, metadata=metadata, timeout=CALL_TIMEOUT_S
            )
    except grpc.aio.AioRpcError as error:
        return error
    return grpc.StatusCode.OK


def _every_method(
    authorizer: Authorizer, principal: Principal
) -> dict[str, grpc.StatusCode | grpc.aio.AioRpcError]:
    """How each method's call by ``principal`` with a filled request ended."""

    async def run() -> dict[str, grpc.StatusCode | grpc.aio.AioRpcError]:
        async with _server(authorizer) as channel:
            return {_name(m): await _call(channel, m, principal) for m in METHODS}

    return asyncio.run(run())


def test_every_method_of_every_service_has_a_rule_and_every_rule_a_method() -> None:
    names = {_name(m) for m in METHODS}
    assert len(names) == len(METHODS)
    missing = sorted(names - METHOD_RULES.keys())
    assert not missing, f"gRPC methods without an authorization rule: {missing}"
    stale = sorted(METHOD_RULES.keys() - names)
    assert not stale, f"rules for methods that do not exist: {stale}"
    for method in METHODS:
        if method.client_streaming:
            assert not METHOD_RULES[_name(method)].reads_request, (
                f"{_name(method)} streams its requests: its rule cannot read them"
            )


def test_a_caller_without_acls_is_refused_every_method_with_the_kafka_error() -> None:
    authorizer = Authorizer(enabled=True, super_users=(SUPER_USER,))
    authorizer.load(())  # the cluster's ACLs: none
    outcomes = _every_method(authorizer, MALLORY)
    reached = {name for name, outcome in outcomes.items() if outcome == grpc.StatusCode.OK}
    assert reached == OPEN_TO_ANYONE
    for method in METHODS:
        name = _name(method)
        outcome = outcomes[name]
        if name in OPEN_TO_ANYONE:
            continue
        assert isinstance(outcome, grpc.aio.AioRpcError), name
        assert outcome.code() is grpc.StatusCode.PERMISSION_DENIED, (name, outcome)
        request = filled(_message_class(method.input_type)())
        expected = next(iter(METHOD_RULES[name].actions(request, authorizer))).denial_code
        trailer = dict(outcome.trailing_metadata() or ())
        assert trailer[ERROR_CODE_METADATA_KEY] == str(int(expected)), name
        assert rpc_error(outcome)[0] is expected, name
        assert str(MALLORY) in (outcome.details() or ""), name


def test_a_super_user_reaches_every_method() -> None:
    outcomes = _every_method(Authorizer(enabled=True, super_users=(SUPER_USER,)), SUPER_USER)
    refused = {name: outcome for name, outcome in outcomes.items() if outcome != grpc.StatusCode.OK}
    assert not refused


def test_an_acl_lets_its_principal_through_and_health_stays_open() -> None:
    authorizer = Authorizer(enabled=True)
    authorizer.load([acl(TOPIC, "t", READ, principal=str(MALLORY))])
    fetch = storage_pb2.DESCRIPTOR.services_by_name["StorageService"].methods_by_name["Fetch"]
    produce = storage_pb2.DESCRIPTOR.services_by_name["StorageService"].methods_by_name["Produce"]

    async def run() -> tuple[Any, Any, Any]:
        async with _server(authorizer) as channel:
            checked = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S
            )
            return (
                checked,
                await _call(channel, fetch, MALLORY),
                await _call(
                    channel,
                    produce,
                    MALLORY,
                    storage_pb2.ProduceRequest(
                        partitions=[storage_pb2.PartitionProduceData(topic="t")]
                    ),
                ),
            )

    checked, fetched, produced = asyncio.run(run())
    assert checked.status == health_pb2.HealthCheckResponse.SERVING
    assert fetched == grpc.StatusCode.OK
    assert isinstance(produced, grpc.aio.AioRpcError)
    assert rpc_error(produced)[0] is ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:5000", "127.0.0.1"),
        ("ipv6:[::1]:5000", "::1"),
        ("ipv6:%5B::1%5D:5000", "::1"),
        ("unix:/tmp/socket", "unix:/tmp/socket"),
    ],
)
def test_the_callers_host_is_the_peers_address(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_before_its_metadata_arrives_a_process_answers_unavailable_but_to_super_users() -> None:
    """Not ready (no ACLs known yet): a retriable refusal, not an authorization failure."""
    authorizer = Authorizer(enabled=True, super_users=(SUPER_USER,), allow_if_no_acl=True)
    outcomes = _every_method(authorizer, MALLORY)
    for name, outcome in outcomes.items():
        assert isinstance(outcome, grpc.aio.AioRpcError), name
        assert outcome.code() is grpc.StatusCode.UNAVAILABLE, (name, outcome)
    assert all(o == grpc.StatusCode.OK for o in _every_method(authorizer, SUPER_USER).values())
