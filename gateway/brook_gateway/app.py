"""The gateway service: speaks the Kafka binary protocol to Kafka clients, gRPC to Brook.

It serves health on its GRPC listener and the Kafka protocol on its PLAINTEXT listener. So far
the Kafka front end answers ApiVersions only (the APIs that reach the rest of Brook come next);
ApiVersions advertises exactly the APIs with a handler, so clients see a small but truthful
broker. The gateway has no gRPC service of its own, so health reports only the overall
status "".
"""

from __future__ import annotations

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec
from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import Dispatcher
from brook_gateway.config import CONFIG_DEF
from brook_gateway.server import KafkaServer, ServerLimits

__all__ = ["SPEC", "Gateway", "kafka_server"]

KAFKA_LISTENER = "PLAINTEXT"


def kafka_server(config: Config) -> KafkaServer:
    """The Kafka-protocol server the configuration describes, with every handler registered."""
    dispatcher = Dispatcher()
    dispatcher.register(api_versions_handler(dispatcher))
    listener = config.listener(KAFKA_LISTENER)
    limits = ServerLimits(
        request_bytes_max=config.get_int("socket.request.max.bytes"),
        connections_max=config.get_int("max.connections"),
        in_flight_per_connection_max=config.get_int("max.in.flight.requests.per.connection"),
        idle_timeout_ms=config.get_int("connections.max.idle.ms"),
        request_timeout_ms=config.get_int("request.timeout.ms"),
    )
    return KafkaServer(dispatcher, limits, listener.host, listener.port)


class Gateway:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._kafka: KafkaServer | None = None

    async def start(self, context: ServiceContext) -> None:
        del context  # no servicers; the Kafka server owns its connection tasks
        self._kafka = kafka_server(self._config)
        await self._kafka.start()

    async def stop(self) -> None:
        if self._kafka is not None:
            await self._kafka.stop()


SPEC = ServiceSpec(
    name="gateway",
    config_def=CONFIG_DEF,
    health_names=(),
    create=Gateway,
)
