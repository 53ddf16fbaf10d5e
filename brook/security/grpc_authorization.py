"""Authorization of every gRPC call to a brook.v1 service (a grpc.aio server interceptor the
runtime installs when ``authorizer.class.name`` is set, brook/server.py).

Each call's method is looked up in brook.security.grpc_rules.METHOD_RULES; the caller's
principal comes from ``principal_of`` (brook/server.py passes brook.security.grpc_identity's:
the client certificate, else SCRAM-checked credentials, else User:ANONYMOUS) and its host from
the peer address. A call that needs an action the caller may not take is refused before the servicer
runs, so it changes nothing: status PERMISSION_DENIED, details naming the Kafka error, the
principal and the action, and the Kafka error code (TOPIC/GROUP/CLUSTER/
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) in the trailing metadata ``brook-error-code``
(brook.rpc.errors.rpc_error reads it). A brook.v1 method without a rule is refused
(CLUSTER_AUTHORIZATION_FAILED): a new method is closed until it has one. Other services
(health, reflection) pass untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final
from urllib.parse import unquote

import grpc

from brook.errors import ErrorCode
from brook.rpc.errors import ERROR_CODE_METADATA_KEY
from brook.rpc.method_handlers import Kind, wrapped
from brook.security.authorizer import Action, Authorizer
from brook.security.grpc_rules import METHOD_RULES, MethodRule
from brook.security.principal import ANONYMOUS, Principal

__all__ = ["AuthorizationInterceptor", "PrincipalOf", "anonymous", "peer_host"]

PrincipalOf = Callable[[Any], Awaitable[Principal]]
"""The principal of a call, from its grpc.aio.ServicerContext (brook.security.grpc_identity:
it may abort the call for a bad credential)."""

_AUTHORIZED_PACKAGE: Final = "brook.v1."


async def anonymous(context: Any) -> Principal:
    """Every caller is User:ANONYMOUS (until the call's identity is established by TLS or
    credentials)."""
    del context
    return ANONYMOUS


def peer_host(peer: str) -> str:
    """The IP address in a gRPC peer string (``ipv4:127.0.0.1:5000``,
    ``ipv6:%5B::1%5D:5000``: grpc percent-encodes the brackets), as ACLs name hosts; the
    string itself for any other kind of peer (unix sockets)."""
    kind, _, address = unquote(peer).partition(":")
    if kind == "ipv4":
        return address.rpartition(":")[0]
    if kind == "ipv6":
        return address.rpartition(":")[0].strip("[]")
    return peer


class AuthorizationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses the calls whose caller lacks what the method's rule needs."""

    def __init__(
        self,
        authorizer: Authorizer,
        principal_of: PrincipalOf = anonymous,
        rules: Mapping[str, MethodRule] | None = None,
    ) -> None:
        self._authorizer = authorizer
        self._principal_of = principal_of
        self._rules = METHOD_RULES if rules is None else rules

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        method = str(handler_call_details.method).lstrip("/")
        if handler is None or not method.startswith(_AUTHORIZED_PACKAGE):
            return handler
        call = _Call(self, method, self._rules.get(method))
        return wrapped(handler, call.checked)


class _Call:
    def __init__(
        self, interceptor: AuthorizationInterceptor, method: str, rule: MethodRule | None
    ) -> None:
        self._authorizer = interceptor._authorizer
        self._principal_of = interceptor._principal_of
        self._method = method
        self._rule = rule

    async def _check(self, request: Any, context: Any) -> Callable[[Action], bool]:
        """Aborts the call if the caller may not make it; returns what the caller may do."""
        principal = await self._principal_of(context)
        host = peer_host(context.peer())
        authorizer = self._authorizer
        if not authorizer.ready and principal not in authorizer.super_users:
            # The process has no metadata yet: a retriable refusal, not an authorization one.
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "not ready to authorize: this process has not received the cluster's metadata "
                "(its ACLs) yet; retry",
            )

        def permits(action: Action) -> bool:
            return authorizer.permits(principal, host, action)

        rule = self._rule
        if rule is None:
            await _deny(
                context,
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{self._method} has no authorization rule",
            )
        elif request is None and rule.reads_request:
            # A client-streaming method whose rule reads the request: a table error.
            await _deny(
                context,
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{self._method}'s rule needs a request it cannot see",
            )
        else:
            denied = authorizer.first_denied(principal, host, rule.actions(request, authorizer))
            if denied is not None:
                await _deny(context, denied.denial_code, f"{principal} may not {denied} ({host})")
        return permits

    def checked(self, kind: Kind, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """``behaviour`` run only once the call is authorized; a client-streaming call is
        authorized before its first message is read."""
        reads_request = kind.startswith("unary")
        if kind == "unary_unary":

            async def answered(request: Any, context: Any) -> Any:
                permits = await self._check(request, context)
                response = await behaviour(request, context)
                rule = self._rule
                if rule is not None and rule.filter_response is not None:
                    rule.filter_response(request, response, permits)
                return response

            return answered
        if not inspect.isasyncgenfunction(behaviour):
            # A client-streaming method, or a streaming one that writes with context.write.

            async def done(request: Any, context: Any) -> Any:
                await self._check(request if reads_request else None, context)
                return await behaviour(request, context)

            return done

        async def streamed(request: Any, context: Any) -> AsyncIterator[Any]:
            await self._check(request if reads_request else None, context)
            async for response in behaviour(request, context):
                yield response

        return streamed


async def _deny(context: Any, code: ErrorCode, why: str) -> None:
    await context.abort(
        grpc.StatusCode.PERMISSION_DENIED,
        f"{code.name}: {why}",
        trailing_metadata=((ERROR_CODE_METADATA_KEY, str(int(code))),),
    )
    raise AssertionError("context.abort returned")
