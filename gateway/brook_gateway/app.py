"""The gateway service: speaks the Kafka binary protocol to Kafka clients, gRPC to Brook.

It serves health on its GRPC listener and the Kafka protocol on each of its Kafka listeners
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL: TLS with the ssl.* files, re-read when they change;
SASL against the SCRAM credentials of its metadata), and, with kafka.node.port.base set, on a
port of its own for each storage node it presents as a broker, per Kafka listener
(brook_gateway.node_listeners), which it registers as its ``<listener>_NODES`` endpoints
(the listener's advertised host, port its base) so that every gateway shows those addresses.
The gateway joins the cluster as a GATEWAY (brook.membership: registration, heartbeats, the
WatchMetadata stream that feeds the metadata cache) and reports SERVING only once it has, like
every other Brook process: a gateway that is not yet a broker in its own metadata would hand
clients an empty cluster. The Kafka listener opens at once (clients that connect early see no
brokers yet and retry); a gateway that cannot join within
initial.broker.registration.timeout.ms fails its start-up. ApiVersions advertises
exactly the APIs with a handler. The gateway has no gRPC service of its own, so health
reports only the overall status "".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from brook.config import Config, Listener
from brook.membership import ClusterMembership, MembershipError
from brook.security.authorizer import Authorizer
from brook.security.quota_engine import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_SECONDS
from brook.security.tls import ReloadingServerContext, TlsFiles, security_protocol, uses_tls
from brook.server import ServiceContext, ServiceSpec
from brook.v1 import common_pb2
from brook_gateway.acl_apis import acl_handlers
from brook_gateway.admin_apis import admin_handlers
from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import Dispatcher
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage, node_port_ceiling, nodes_listener
from brook_gateway.config import (
    CONFIG_DEF,
    KAFKA_NODE_PORT_BASE,
    KAFKA_NODE_PORT_STRIDE,
    SASL_ENABLED_MECHANISMS,
    kafka_listeners,
)
from brook_gateway.coordinator_routing import Routers
from brook_gateway.data_apis import data_handlers
from brook_gateway.group_apis import group_handlers
from brook_gateway.node_listeners import NodeListeners
from brook_gateway.quota_apis import quota_handlers
from brook_gateway.quotas import ClientQuotas
from brook_gateway.sasl import CredentialLookup, sasl_handlers
from brook_gateway.scram_apis import scram_handlers
from brook_gateway.server import KafkaListener, KafkaServer, ServerLimits
from brook_gateway.txn_apis import txn_handlers
from brook_gateway.upstream import Upstreams

__all__ = ["SPEC", "Gateway", "kafka_dispatcher", "kafka_server"]

_log = logging.getLogger(__name__)


def _no_credentials(name: str, mechanism: int) -> None:
    del name, mechanism


def kafka_dispatcher(backend: Backend | None, authorizer: Authorizer | None) -> Dispatcher:
    """ApiVersions and the SASL APIs, plus every API that reaches Brook when a ``backend`` is
    given, each authorized by ``authorizer`` (None: no authorization)."""
    dispatcher = Dispatcher(authorizer)
    dispatcher.register(api_versions_handler(dispatcher))
    for handler in sasl_handlers():
        dispatcher.register(handler)
    if backend is not None:
        routers = Routers.of(backend)
        handlers = (
            *data_handlers(backend),
            *admin_handlers(backend),
            *acl_handlers(backend),
            *group_handlers(backend, routers),
            *txn_handlers(backend, routers),
            *scram_handlers(backend),
            *quota_handlers(backend),
        )
        for handler in handlers:
            dispatcher.register(handler)
    return dispatcher


def kafka_server(
    config: Config, backend: Backend | None = None, authorizer: Authorizer | None = None
) -> KafkaServer:
    """The Kafka-protocol server the configuration describes, serving ``kafka_dispatcher``'s
    APIs. The ``backend``'s metadata holds the SCRAM credentials its SASL listeners check and
    the client quotas it enforces (without a backend nobody can authenticate, and no quota
    applies). Raises TlsError when a TLS listener's files are missing or invalid."""
    dispatcher = kafka_dispatcher(backend, authorizer)
    credentials: CredentialLookup = (
        backend.image.scram_credential if backend is not None else _no_credentials
    )
    limits = ServerLimits(
        request_bytes_max=config.get_int("socket.request.max.bytes"),
        connections_max=config.get_int("max.connections"),
        in_flight_per_connection_max=config.get_int("max.in.flight.requests.per.connection"),
        idle_timeout_ms=config.get_int("connections.max.idle.ms"),
        request_timeout_ms=config.get_int("request.timeout.ms"),
    )
    quotas = None
    if backend is not None:
        image = backend.image
        quotas = ClientQuotas(
            lambda: image.image.client_quotas,
            config.get_int(QUOTA_WINDOW_NUM),
            config.get_int(QUOTA_WINDOW_SIZE_SECONDS),
        )
    return KafkaServer(
        dispatcher, limits, _kafka_listeners(config), credentials=credentials, quotas=quotas
    )


def _kafka_listeners(config: Config) -> list[KafkaListener]:
    """The Kafka listeners, each with its TLS context and SASL mechanisms. SSL listeners ask
    for client certificates as ssl.client.auth says; SASL_SSL listeners authenticate by SASL
    and ask for none, as Kafka does since KIP-684 (one context per kind, shared by every
    listener of that kind: they serve the same files)."""
    contexts: dict[str, ReloadingServerContext] = {}
    listeners = []
    for listener in kafka_listeners(config):
        protocol = security_protocol(config, listener.name)
        context = None
        if uses_tls(protocol):
            context = contexts.get(protocol)
            if context is None:
                files = TlsFiles.from_config(config)
                if protocol == "SASL_SSL":
                    files = dataclasses.replace(files, client_auth="none")
                context = contexts[protocol] = ReloadingServerContext(files)
        mechanisms = (
            config.get_list(SASL_ENABLED_MECHANISMS) if protocol.startswith("SASL_") else ()
        )
        listeners.append(
            KafkaListener(listener.name, listener.host, listener.port, context, mechanisms)
        )
    return listeners


def node_port_bases(config: Config) -> dict[str, int]:
    """Kafka listener name -> the base of its per-broker ports (kafka.node.port.base, then
    kafka.node.port.stride apart in listeners order); {} when they are off."""
    base = config.get_int(KAFKA_NODE_PORT_BASE)
    if base <= 0:
        return {}
    stride = config.get_int(KAFKA_NODE_PORT_STRIDE)
    return {listener.name: base + i * stride for i, listener in enumerate(kafka_listeners(config))}


class Gateway:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._kafka: KafkaServer | None = None
        self._node_listeners: list[NodeListeners] = []
        self._node_port_bases = node_port_bases(config)
        extra_endpoints = [
            Listener(nodes_listener(name), config.listener(name, advertised=True).host, base)
            for name, base in self._node_port_bases.items()
        ]
        self._membership = ClusterMembership(
            config, common_pb2.NODE_ROLE_GATEWAY, extra_endpoints=extra_endpoints
        )
        self.image = ClusterImage()
        self._upstreams = Upstreams(
            message_bytes_max=config.get_int("socket.request.max.bytes"),
            request_timeout_ms=config.get_int("request.timeout.ms"),
        )
        self._follower: asyncio.Task[None] | None = None
        self._bind_retries: asyncio.Task[None] | None = None
        self._first_snapshot = asyncio.Event()
        self._node_listeners_sync = asyncio.Lock()

    async def start(self, context: ServiceContext) -> None:
        config = self._config
        backend = Backend(
            node_id=config.get_int("node.id"),
            image=self.image,
            upstreams=self._upstreams,
            controllers=tuple(config.get_list("controller.quorum.bootstrap.servers")),
        )
        # Served at once: the gateway stores nothing, and until the first snapshot arrives
        # clients see a cluster without brokers or topics and retry, as with a starting Kafka.
        # With authorization on, not before the first snapshot: until then the ACLs are not
        # known and every request would be refused for good (Kafka too opens its listeners
        # once its authorizer is ready); a client meanwhile finds the port closed and retries.
        self.image.feed(context.authorizer)
        self._kafka = kafka_server(config, backend, context.authorizer)
        if context.authorizer.enabled:
            self._follower = context.tasks.spawn(self._follow(), name="metadata-follower")
            await self._first_metadata()
        await self._kafka.start()
        bases = self._node_port_bases
        self._node_listeners = [
            NodeListeners(
                self._kafka,
                self.image,
                backend.node_id,
                base,
                name,
                node_port_ceiling(bases.values(), base),
            )
            for name, base in bases.items()
        ]
        if self._node_listeners:
            self._bind_retries = context.tasks.spawn(
                self._retry_failed_binds(), name="node-listener-binds"
            )
        # After the server started: the follower opens the per-broker listeners on it.
        if self._follower is None:
            self._follower = context.tasks.spawn(self._follow(), name="metadata-follower")
        else:
            await self._sync_node_listeners()
        await self._join(context)

    async def _first_metadata(self) -> None:
        try:
            await asyncio.wait_for(self._first_snapshot.wait(), self._membership.join_timeout_s)
        except TimeoutError:
            raise RuntimeError(
                "the gateway could not join the cluster: no metadata in time"
            ) from None

    async def _sync_node_listeners(self) -> None:
        """Opens and closes the per-broker listeners the metadata calls for (one sync at a
        time: the follower and the start-up may both ask)."""
        async with self._node_listeners_sync:
            for node_listeners in self._node_listeners:
                await node_listeners.sync()

    async def _join(self, context: ServiceContext) -> None:
        membership = self._membership
        node_id = self._config.get_int("node.id")
        try:
            await asyncio.wait_for(self._first_snapshot.wait(), membership.join_timeout_s)
            await membership.join(context.tasks, membership.join_timeout_s)
            # Unfenced is known from the heartbeat a moment before the metadata says so.
            if not await self.image.wait_until(
                lambda: any(
                    n.node_id == node_id
                    for n in self.image.live_nodes(common_pb2.NODE_ROLE_GATEWAY)
                ),
                membership.join_timeout_s,
            ):
                raise RuntimeError("this gateway never appeared unfenced in the metadata")
        except (TimeoutError, RuntimeError, MembershipError) as e:
            raise RuntimeError(
                f"the gateway could not join the cluster: {e or 'no metadata in time'}"
            ) from e
        _log.info("gateway joined the cluster", extra={"metadata_offset": self.image.offset})

    async def _follow(self) -> None:
        async for message in self._membership.watcher.updates():
            self.image.apply(message.snapshot, message.offset, message.records)
            self._membership.applied.advance(message.offset)
            await self._sync_node_listeners()
            self._first_snapshot.set()

    async def _retry_failed_binds(self) -> None:
        await asyncio.gather(*(n.retry_failed_binds() for n in self._node_listeners))

    async def stop(self) -> None:
        # The follower and the bind retries first, so that no listener opens on a server that
        # has stopped.
        for task in (self._follower, self._bind_retries):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._kafka is not None:
            await self._kafka.stop()
        await self._upstreams.close()
        await self._membership.close()


SPEC = ServiceSpec(
    name="gateway",
    config_def=CONFIG_DEF,
    health_names=(),
    create=Gateway,
)
