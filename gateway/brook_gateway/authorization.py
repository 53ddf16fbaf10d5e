"""How each Kafka API is authorized: the declaration every ApiHandler carries, and its
enforcement.

An ``Authorization`` names, in Kafka's terms (brook.security.authorizer.Action), what a
request needs:

- ``request``: actions the whole request needs (READ on a JoinGroup's group, WRITE on an
  EndTxn's transactional id, ALTER on the cluster for a reassignment); the first one denied
  answers the whole request with the handler's ``error_response`` and that denial's code
  (GROUP_AUTHORIZATION_FAILED, ...), without running the handler;
- ``items``: actions each element of a list in the request needs (WRITE on each topic a
  Produce writes to): denied elements are answered with their denial code (per resource type:
  TOPIC_AUTHORIZATION_FAILED, ...) and taken out of the request the handler sees, so nothing
  happens to them; the rest are served as usual. ``all_or_nothing`` rules (AddPartitionsToTxn,
  as Kafka) answer every other element OPERATION_NOT_ATTEMPTED instead;
- ``filter_response``: removes from a response what the caller may not see (topics from
  Metadata's every-topic list, groups from ListGroups).

The declaration is mandatory: ``ApiHandler`` has no default for it and the dispatcher refuses a
handler without one, so a new API cannot be served without saying how it is authorized.
``NO_AUTHORIZATION`` is the explicit "none" (ApiVersions, the SASL handshake). With the
authorizer off (authorizer.class.name empty) handlers run unwrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from brook.errors import ErrorCode
from brook.security.authorizer import (
    DESCRIBE,
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    Action,
    Authorizer,
    cluster_action,
)
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.schema import HI, VersionRange, in_range

if TYPE_CHECKING:
    from brook_gateway.apis import ApiHandler, RequestContext

__all__ = [
    "NO_AUTHORIZATION",
    "Authorization",
    "ItemActions",
    "Items",
    "Permits",
    "RequestActions",
    "all_of",
    "authorized",
    "named",
    "on_cluster",
    "on_group",
    "only_describable",
    "topic_items",
    "transactional_id_write",
]

Permits = Callable[[Action], bool]
"""Whether the request's principal, from its host, may take an action."""
RequestActions = Callable[[Message, "RequestContext"], Iterable[Action]]
"""What a whole request needs."""
ItemActions = Callable[[Any, Message, "RequestContext"], Iterable[Action]]
"""What one element of a list in a request (given the request) needs."""
ResponseFilter = Callable[[Message, Message, "RequestContext", Permits], None]
"""Removes from a response (given the request) what the caller may not see."""


def _no_actions(request: Message, context: RequestContext) -> Iterable[Action]:
    del request, context
    return ()


@dataclass(frozen=True, slots=True)
class Items:
    """Authorization of each element of one list of the request."""

    request_key: str
    """The list in the request (``topic_data``, ``topics``, ``groups_names``...)."""
    response_key: str
    """Where the response answers each element (the list the handler's ``error_response``
    builds from the request's)."""
    actions: ItemActions
    """What one element (given the request it is part of) needs."""
    versions: VersionRange = (0, HI)
    """The versions whose requests carry the list under ``request_key``."""
    all_or_nothing: bool = False
    """A denied element fails the whole request: the others are answered
    OPERATION_NOT_ATTEMPTED and the handler does not run."""
    serve_empty: bool = False
    """The handler still runs when every element is denied (Metadata answers the brokers;
    Produce with acks=0 answers nothing)."""


@dataclass(frozen=True, slots=True)
class Authorization:
    """An API's authorization declaration (see the module docstring)."""

    summary: str
    """The rule in words (docs/decisions.md's table)."""
    request: RequestActions = _no_actions
    items: tuple[Items, ...] = ()
    filter_response: ResponseFilter | None = None

    @property
    def checks_nothing(self) -> bool:
        return self.request is _no_actions and not self.items and self.filter_response is None


NO_AUTHORIZATION: Final = Authorization("none")
"""For the APIs Kafka serves to anyone (ApiVersions, SaslHandshake, SaslAuthenticate)."""


def on_cluster(operation: int) -> RequestActions:
    """``operation`` on the cluster."""

    def actions(request: Message, context: RequestContext) -> Iterable[Action]:
        del request, context
        return (cluster_action(operation),)

    return actions


def on_group(operation: int, key: str = "group_id") -> RequestActions:
    """``operation`` on the group the request names in ``key``."""

    def actions(request: Message, context: RequestContext) -> Iterable[Action]:
        del context
        return (Action(GROUP, request[key], operation),)

    return actions


def transactional_id_write(key: str = "transactional_id") -> RequestActions:
    """WRITE on the transactional id the request names in ``key``, if it names one."""

    def actions(request: Message, context: RequestContext) -> Iterable[Action]:
        del context
        transactional_id = request.get(key)
        return (Action(TRANSACTIONAL_ID, transactional_id, WRITE),) if transactional_id else ()

    return actions


def all_of(*parts: RequestActions) -> RequestActions:
    """Everything each of ``parts`` needs, in order."""

    def actions(request: Message, context: RequestContext) -> Iterable[Action]:
        return [action for part in parts for action in part(request, context)]

    return actions


def named(resource_type: int, operation: int) -> ItemActions:
    """``operation`` on the resource of ``resource_type`` an element of a list of names
    (group ids, topic names, transactional ids) names."""

    def actions(name: str, request: Message, context: RequestContext) -> Iterable[Action]:
        del request, context
        return (Action(resource_type, name, operation),)

    return actions


def topic_items(
    request_key: str,
    response_key: str,
    operation: int,
    *,
    name_key: str = "name",
    versions: VersionRange = (0, HI),
    all_or_nothing: bool = False,
    serve_empty: bool = False,
) -> Items:
    """``operation`` on each topic of a list whose elements name it in ``name_key``."""

    def actions(item: Any, request: Message, context: RequestContext) -> Iterable[Action]:
        del request, context
        return (Action(TOPIC, item[name_key], operation),)

    return Items(
        request_key,
        response_key,
        actions,
        versions,
        all_or_nothing=all_or_nothing,
        serve_empty=serve_empty,
    )


def only_describable(
    list_key: str,
    resource_type: int,
    name_key: str,
    *,
    keep_errors: bool = False,
    cluster_sees_all: bool = False,
) -> ResponseFilter:
    """Keeps, of a response's ``list_key``, the elements whose resource (named in
    ``name_key``) the caller may DESCRIBE; ``keep_errors``: and those answered with an error
    (a denial among them); ``cluster_sees_all``: all of them for a caller with DESCRIBE on the
    cluster (Kafka's ListGroups)."""

    def filter_response(
        request: Message, response: Message, context: RequestContext, permits: Permits
    ) -> None:
        del request, context
        if cluster_sees_all and permits(cluster_action(DESCRIBE)):
            return
        response[list_key] = [
            element
            for element in response[list_key]
            if (keep_errors and element["error_code"])
            or permits(Action(resource_type, element[name_key], DESCRIBE))
        ]

    return filter_response


def authorized(handler: ApiHandler, authorizer: Authorizer) -> ApiHandler:
    """``handler`` with its ``authorization`` enforced by ``authorizer`` (unchanged when the
    authorizer is off or the declaration checks nothing)."""
    authorization = handler.authorization
    if not authorizer.enabled or authorization.checks_nothing:
        return handler
    serve = handler.handle

    async def handle(request: Message, context: RequestContext) -> Message | None:
        principal, host = context.principal, context.client_host

        def permits(action: Action) -> bool:
            return authorizer.permits(principal, host, action)

        denied = authorizer.first_denied(principal, host, authorization.request(request, context))
        if denied is not None:
            return handler.error_response(request, context, int(denied.denial_code))
        rule = next(
            (r for r in authorization.items if in_range(context.api_version, r.versions)), None
        )
        response: Message | None
        if rule is None or request.get(rule.request_key) is None:
            response = await serve(request, context)
        else:
            response = await _serve_items(handler, rule, authorizer, request, context)
        if response is not None and authorization.filter_response is not None:
            authorization.filter_response(request, response, context, permits)
        return response

    return replace(handler, handle=handle)


async def _serve_items(
    handler: ApiHandler,
    rule: Items,
    authorizer: Authorizer,
    request: Message,
    context: RequestContext,
) -> Message | None:
    """Serves the elements of ``rule``'s list the caller may act on, answers the others with
    their denial codes."""
    principal, host = context.principal, context.client_host
    allowed: list[Any] = []
    refused: dict[ErrorCode, list[Any]] = {}
    for item in request[rule.request_key]:
        denied = authorizer.first_denied(principal, host, rule.actions(item, request, context))
        if denied is None:
            allowed.append(item)
        else:
            refused.setdefault(denied.denial_code, []).append(item)
    if not refused:
        return await handler.handle(request, context)
    if rule.all_or_nothing and allowed:
        refused.setdefault(ErrorCode.OPERATION_NOT_ATTEMPTED, []).extend(allowed)
        allowed = []
    answers = [
        answer
        for code, items in refused.items()
        for answer in handler.error_response(
            {**request, rule.request_key: items}, context, int(code)
        )[rule.response_key]
    ]
    response: Message | None
    if allowed or (rule.serve_empty and not rule.all_or_nothing):
        response = await handler.handle({**request, rule.request_key: allowed}, context)
    else:
        response = handler.error_response(
            {**request, rule.request_key: []}, context, int(ErrorCode.NONE)
        )
    if response is not None:
        response[rule.response_key] = [*(response.get(rule.response_key) or ()), *answers]
    return response
