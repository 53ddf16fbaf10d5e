"""Which Kafka APIs the gateway answers, at which versions, and by which handler.

`RECOMMENDED_VERSIONS` is the one place the advertised ranges are defined: each API up to
the highest version the gateway serves correctly among those current clients send (issue #14;
../shared/kafka-protocol/CLIENTS.md lists what each client sends), with minimums low enough
for older librdkafka's feature detection (CLIENTS.md section 5). docs/compatibility.md lists
every API, what each client in CI picks, and what is not served and why. Only APIs
with a registered handler are advertised, so the gateway can never announce an API it cannot
answer. A handler may serve fewer versions than are advertised; requests for the rest are
answered with UNSUPPORTED_VERSION, as Kafka 4.0 does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from brook.security.authorizer import Authorizer
from brook.security.principal import ANONYMOUS, Principal
from brook_gateway.authorization import Authorization, authorized
from brook_gateway.cluster_view import KAFKA_LISTENER
from brook_gateway.protocol.codec import Message, codec_for
from brook_gateway.protocol.frames import RequestHeader
from brook_gateway.protocol.kafka_messages import RESPONSES, ApiKey
from brook_gateway.protocol.schema import VersionRange, in_range

__all__ = [
    "RECOMMENDED_VERSIONS",
    "ApiHandler",
    "Dispatcher",
    "ErrorResponse",
    "Handle",
    "RequestContext",
    "top_level_error_response",
]

RECOMMENDED_VERSIONS: Final[Mapping[ApiKey, VersionRange]] = MappingProxyType(
    {
        ApiKey.PRODUCE: (0, 10),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7),
        ApiKey.METADATA: (0, 12),
        ApiKey.OFFSET_COMMIT: (2, 9),
        ApiKey.OFFSET_FETCH: (1, 9),
        ApiKey.FIND_COORDINATOR: (0, 4),
        ApiKey.JOIN_GROUP: (0, 7),
        ApiKey.HEARTBEAT: (0, 4),
        ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.DESCRIBE_GROUPS: (0, 5),
        ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.API_VERSIONS: (0, 3),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (0, 6),
        ApiKey.DELETE_RECORDS: (0, 2),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
        ApiKey.END_TXN: (0, 4),
        ApiKey.WRITE_TXN_MARKERS: (0, 1),
        ApiKey.TXN_OFFSET_COMMIT: (0, 4),
        ApiKey.DESCRIBE_ACLS: (0, 3),
        ApiKey.CREATE_ACLS: (0, 3),
        ApiKey.DELETE_ACLS: (0, 3),
        ApiKey.DESCRIBE_CONFIGS: (0, 4),
        ApiKey.ALTER_CONFIGS: (0, 2),
        ApiKey.SASL_AUTHENTICATE: (0, 1),
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.DELETE_GROUPS: (0, 2),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.DESCRIBE_PRODUCERS: (0, 0),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 1),
    }
)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: RequestHeader
    peer: str
    """host:port of the client."""
    broker_id: int | None = None
    """The broker the connection was made to: the storage node id whose own port
    (kafka.node.port.base + id) accepted it; None on the gateway's PLAINTEXT (bootstrap)
    listener, which stands for every broker the gateway presents."""
    principal: Principal = ANONYMOUS
    """Who sent the request: the connection's authenticated principal (SASL user or TLS
    client certificate), ``User:ANONYMOUS`` on a connection that did not authenticate."""
    listener: str = KAFKA_LISTENER
    """The name of the Kafka listener the connection was made to (PLAINTEXT, SSL,
    SASL_PLAINTEXT, SASL_SSL): Metadata and FindCoordinator show brokers at that listener's
    addresses, so a client stays on the security protocol it chose."""

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_host(self) -> str:
        """The client's IP address (ACLs name hosts by it)."""
        return self.peer.rpartition(":")[0] or self.peer


Handle = Callable[[Message, RequestContext], Awaitable[Message | None]]
"""`async def handle(request, context) -> response`; None sends no response (Produce with
acks=0)."""
ErrorResponse = Callable[[Message, RequestContext, int], Message]
"""Builds the response that reports `error_code` for every part of `request`."""


def top_level_error_response(request: Message, context: RequestContext, error_code: int) -> Message:
    """The response of APIs whose body has a top-level error_code: every other field at its
    default. Raises LookupError for an API without one (its handler must say how to fail)."""
    del request
    spec = RESPONSES[context.header.api_key]
    codec = codec_for(spec, context.api_version)
    response = codec.default()
    if "error_code" not in response or not any(
        f.name == "error_code" and in_range(context.api_version, f.versions) for f in spec.fields
    ):
        raise LookupError(f"{spec.name} v{context.api_version} has no top-level error code")
    response["error_code"] = error_code
    return response


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: ApiKey
    handle: Handle
    versions: VersionRange
    """The versions `handle` serves; the rest of the advertised range gets
    UNSUPPORTED_VERSION."""
    authorization: Authorization
    """What a request needs from its principal (brook_gateway.authorization); mandatory,
    ``NO_AUTHORIZATION`` for an API anyone may call."""
    error_response: ErrorResponse = top_level_error_response
    wait_ms: Callable[[Message], int] | None = None
    """How long this request may legitimately wait beyond request.timeout.ms (JoinGroup waits
    for the whole group to rejoin); None: no longer than request.timeout.ms."""
    close: Callable[[], Awaitable[None]] | None = None
    """Stops what the handler runs besides its requests (Produce's merged calls), once the
    server has stopped taking requests."""


class Dispatcher:
    """The registry of handlers, one per API key, each enforcing its authorization declaration
    with ``authorizer`` (None: no authorization, as with the authorizer off)."""

    def __init__(self, authorizer: Authorizer | None = None) -> None:
        self._handlers: dict[int, ApiHandler] = {}
        self._authorizer = authorizer

    def register(self, handler: ApiHandler) -> None:
        if not isinstance(getattr(handler, "authorization", None), Authorization):
            raise ValueError(
                f"{handler.api_key.name} has no authorization declaration "
                "(brook_gateway.authorization)"
            )
        advertised = RECOMMENDED_VERSIONS.get(handler.api_key)
        if advertised is None:
            raise ValueError(f"{handler.api_key.name} has no advertised range")
        low, high = handler.versions
        if not (advertised[0] <= low <= high <= advertised[1]):
            raise ValueError(
                f"{handler.api_key.name}: served versions {handler.versions} are not within "
                f"the advertised {advertised}"
            )
        if handler.api_key in self._handlers:
            raise ValueError(f"{handler.api_key.name} already has a handler")
        if self._authorizer is not None:
            handler = authorized(handler, self._authorizer)
        self._handlers[handler.api_key] = handler

    def handler(self, api_key: int) -> ApiHandler | None:
        return self._handlers.get(api_key)

    def advertised_range(self, api_key: int) -> VersionRange | None:
        if api_key not in self._handlers:
            return None
        return RECOMMENDED_VERSIONS[ApiKey(api_key)]

    async def close(self) -> None:
        """Closes every handler that has something to close."""
        for handler in self._handlers.values():
            if handler.close is not None:
                await handler.close()

    def advertised(self) -> list[tuple[int, int, int]]:
        """(api_key, min_version, max_version) of every API answered, by key."""
        return [(key, *RECOMMENDED_VERSIONS[ApiKey(key)]) for key in sorted(self._handlers)]
