"""The gateway service: speaks the Kafka binary protocol to Kafka clients, gRPC to Brook.

It serves health on its GRPC listener and the Kafka protocol on its PLAINTEXT listener, and,
with kafka.node.port.base set, on a port of its own for each storage node it presents as a
broker (brook_gateway.node_listeners), which it registers as its PLAINTEXT_NODES endpoint
(advertised PLAINTEXT host, port the base) so that every gateway shows those addresses.
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
import logging

from brook.config import Config, Listener
from brook.membership import ClusterMembership, MembershipError
from brook.server import ServiceContext, ServiceSpec
from brook.v1 import common_pb2
from brook_gateway.admin_apis import admin_handlers
from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import Dispatcher
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import KAFKA_LISTENER, KAFKA_NODES_LISTENER, ClusterImage
from brook_gateway.config import CONFIG_DEF, KAFKA_NODE_PORT_BASE
from brook_gateway.coordinator_routing import Routers
from brook_gateway.data_apis import data_handlers
from brook_gateway.group_apis import group_handlers
from brook_gateway.node_listeners import NodeListeners
from brook_gateway.quota_apis import quota_handlers
from brook_gateway.quotas import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_SECONDS, ClientQuotas
from brook_gateway.server import KafkaServer, ServerLimits
from brook_gateway.txn_apis import txn_handlers
from brook_gateway.upstream import Upstreams

__all__ = ["SPEC", "Gateway", "kafka_server"]

_log = logging.getLogger(__name__)


def kafka_server(config: Config, backend: Backend | None = None) -> KafkaServer:
    """The Kafka-protocol server the configuration describes: ApiVersions, plus every API
    that reaches Brook and the client quotas of its metadata when a ``backend`` is given."""
    dispatcher = Dispatcher()
    dispatcher.register(api_versions_handler(dispatcher))
    if backend is not None:
        routers = Routers.of(backend)
        handlers = (
            *data_handlers(backend),
            *admin_handlers(backend),
            *group_handlers(backend, routers),
            *txn_handlers(backend, routers),
            *quota_handlers(backend),
        )
        for handler in handlers:
            dispatcher.register(handler)
    listener = config.listener(KAFKA_LISTENER)
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
    return KafkaServer(dispatcher, limits, listener.host, listener.port, quotas=quotas)


class Gateway:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._kafka: KafkaServer | None = None
        self._node_listeners: NodeListeners | None = None
        self._node_port_base = config.get_int(KAFKA_NODE_PORT_BASE)
        extra_endpoints = []
        if self._node_port_base > 0:
            advertised = config.listener(KAFKA_LISTENER, advertised=True)
            extra_endpoints.append(
                Listener(KAFKA_NODES_LISTENER, advertised.host, self._node_port_base)
            )
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
        self._kafka = kafka_server(config, backend)
        await self._kafka.start()
        if self._node_port_base > 0:
            self._node_listeners = NodeListeners(
                self._kafka, self.image, backend.node_id, self._node_port_base
            )
            self._bind_retries = context.tasks.spawn(
                self._node_listeners.retry_failed_binds(), name="node-listener-binds"
            )
        # After the server started: the follower opens the per-broker listeners on it.
        self._follower = context.tasks.spawn(self._follow(), name="metadata-follower")
        await self._join(context)

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
            if self._node_listeners is not None:
                await self._node_listeners.sync()
            self._first_snapshot.set()

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
