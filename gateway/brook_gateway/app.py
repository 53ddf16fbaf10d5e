"""The gateway service: speaks the Kafka binary protocol to Kafka clients, gRPC to Brook.

For now it serves only health on its GRPC listener. Its PLAINTEXT (Kafka protocol) listener is
validated but not opened: the protocol front end is not implemented yet, and an open port that
cannot answer would mislead clients. The gateway has no gRPC service of its own, so health
reports only the overall status "".
"""

from __future__ import annotations

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec
from brook_gateway.config import CONFIG_DEF

__all__ = ["SPEC", "Gateway"]


class Gateway:
    def __init__(self, config: Config) -> None:
        self._config = config

    async def start(self, context: ServiceContext) -> None:
        del context  # registers nothing yet: no servicers, no background tasks

    async def stop(self) -> None:
        """Holds nothing that needs releasing yet."""


SPEC = ServiceSpec(
    name="gateway",
    config_def=CONFIG_DEF,
    health_names=(),
    create=Gateway,
)
