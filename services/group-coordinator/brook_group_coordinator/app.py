"""The group coordinator service: consumer groups and committed offsets.

For now it prepares its state directory and serves only health; GroupCoordinatorService RPCs
are not registered yet, so they answer UNIMPLEMENTED.
"""

from __future__ import annotations

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook_group_coordinator.config import CONFIG_DEF

__all__ = ["SPEC", "GroupCoordinator"]


class GroupCoordinator:
    def __init__(self, config: Config) -> None:
        self._config = config

    async def start(self, context: ServiceContext) -> None:
        await make_directories((self._config.get_string("group.coordinator.state.dir"),))

    async def stop(self) -> None:
        """Holds nothing that needs releasing yet."""


SPEC = ServiceSpec(
    name="group-coordinator",
    config_def=CONFIG_DEF,
    health_names=("brook.v1.GroupCoordinatorService",),
    create=GroupCoordinator,
)
