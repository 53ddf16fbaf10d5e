"""The storage node service: partition replicas on local disk, produce, fetch and replication.

For now it prepares its log directories and serves only health; StorageService and
ReplicaService RPCs are not registered yet, so they answer UNIMPLEMENTED.
"""

from __future__ import annotations

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook_storage_node.config import CONFIG_DEF

__all__ = ["SPEC", "StorageNode"]


class StorageNode:
    def __init__(self, config: Config) -> None:
        self._config = config

    async def start(self, context: ServiceContext) -> None:
        await make_directories(self._config.get_list("log.dirs"))

    async def stop(self) -> None:
        """Holds nothing that needs releasing yet."""


SPEC = ServiceSpec(
    name="storage-node",
    config_def=CONFIG_DEF,
    health_names=("brook.v1.StorageService", "brook.v1.ReplicaService"),
    create=StorageNode,
)
