"""The controller service: the Raft-replicated source of truth for cluster metadata.

For now it prepares its metadata directory and serves only health; its RAFT listener is
validated but not opened (no Raft engine yet), and ControllerService/AdminService RPCs are not
registered, so they answer UNIMPLEMENTED.
"""

from __future__ import annotations

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook_controller.config import CONFIG_DEF

__all__ = ["SPEC", "Controller"]


class Controller:
    def __init__(self, config: Config) -> None:
        self._config = config

    async def start(self, context: ServiceContext) -> None:
        await make_directories((self._config.get_string("metadata.log.dir"),))

    async def stop(self) -> None:
        """Holds nothing that needs releasing yet."""


SPEC = ServiceSpec(
    name="controller",
    config_def=CONFIG_DEF,
    health_names=("brook.v1.ControllerService", "brook.v1.AdminService"),
    create=Controller,
)
