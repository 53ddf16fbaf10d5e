"""The controller service: the Raft-replicated source of truth for cluster metadata.

Start-up: the metadata directory, the Raft engine (it binds the RAFT listener, loads the last
snapshot and replays its journal), then ControllerService and AdminService on the GRPC
listener and the leader's background work. The controller reports SERVING as soon as its
engine runs, before a leader is elected: followers serve WatchMetadata and DescribeQuorum, and
answer writes with NOT_CONTROLLER. See docs/controller.md.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

from brook.config import Config
from brook.server import ServiceContext, ServiceSpec, make_directories
from brook.v1 import admin_pb2_grpc, controller_pb2_grpc
from brook_controller.admin_service import AdminServicer
from brook_controller.config import CONFIG_DEF
from brook_controller.controller_service import ControllerServicer
from brook_controller.metadata_view import MetadataView
from brook_controller.quorum_controller import ControllerSettings, QuorumController
from brook_controller.raft import (
    BIND_ATTEMPTS_MAX,
    BIND_RETRY_S,
    EngineSettings,
    PySyncObjEngine,
)
from brook_controller.state_machine import MetadataStateMachine

__all__ = ["SPEC", "Controller", "engine_settings"]

# Start-up waits for the RAFT port (retried while a previous process releases it), the
# snapshot load and the journal replay.
ENGINE_START_TIMEOUT_S: Final = BIND_ATTEMPTS_MAX * BIND_RETRY_S + 30
ENGINE_STOP_TIMEOUT_S: Final = 1.0


def engine_settings(config: Config) -> EngineSettings:
    password = config.get("controller.quorum.password")
    return EngineSettings(
        node_id=config.get_int("node.id"),
        voters={voter.node_id: voter.address for voter in config.get_voters()},
        bind_address=config.listener("RAFT").address,
        directory=Path(config.get_string("metadata.log.dir")),
        password=config.get_password("controller.quorum.password").value() if password else None,
        heartbeat_interval_ms=config.get_int("controller.quorum.heartbeat.interval.ms"),
        election_timeout_ms=config.get_int("controller.quorum.election.timeout.ms"),
        connection_timeout_ms=config.get_int("controller.quorum.request.timeout.ms"),
        reconnect_backoff_ms=config.get_int("controller.quorum.reconnect.backoff.ms"),
        leader_fallback_timeout_ms=config.get_int("controller.quorum.leader.fallback.timeout.ms"),
        snapshot_min_entries=config.get_int("metadata.log.max.entries.between.snapshots"),
        snapshot_interval_ms=config.get_int("metadata.log.max.snapshot.interval.ms"),
    )


class Controller:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._engine: PySyncObjEngine | None = None

    async def start(self, context: ServiceContext) -> None:
        config = self._config
        await make_directories((config.get_string("metadata.log.dir"),))
        view = MetadataView(config.get_int("metadata.watch.retained.records"))
        view.feed(context.authorizer)
        machine = MetadataStateMachine(view.loop_listener(asyncio.get_running_loop()))
        self._engine = await PySyncObjEngine.start(
            engine_settings(config), machine, ready_timeout_s=ENGINE_START_TIMEOUT_S
        )
        controller = QuorumController(ControllerSettings.from_config(config), self._engine, view)
        self._engine.on_state_change(controller.request_barrier)
        # The generated registration functions are untyped.
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(  # type: ignore[no-untyped-call]
            ControllerServicer(controller, view, context.shutdown_requested), context.server
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(  # type: ignore[no-untyped-call]
            AdminServicer(controller), context.server
        )
        tasks = context.tasks
        tasks.spawn(controller.run_barriers(), name="controller.barriers")
        tasks.spawn(controller.run_lease_checks(), name="controller.leases")
        tasks.spawn(controller.run_maintenance(), name="controller.maintenance")
        tasks.spawn(controller.run_leader_rebalance(), name="controller.leader-rebalance")
        tasks.spawn(controller.watch_engine(), name="controller.engine-watch")
        controller.request_barrier()

    async def stop(self) -> None:
        if self._engine is not None:
            await self._engine.close(ENGINE_STOP_TIMEOUT_S)


GRPC_SERVICES: Final = ("brook.v1.ControllerService", "brook.v1.AdminService")

SPEC = ServiceSpec(
    name="controller",
    config_def=CONFIG_DEF,
    health_names=GRPC_SERVICES,
    traced_services=GRPC_SERVICES,
    create=Controller,
)
