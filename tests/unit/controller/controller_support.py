"""A real controller (one voter) in this process, for tests of the controller's behaviour.

The service runs exactly as in production (brook.server.serve: gRPC server, Raft engine,
background tasks) on free loopback ports, in a thread with its own event loop, so the tests
talk to it with the ordinary synchronous clients. Leaving the ``with`` block stops it and
waits for its thread; the data directory is the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc
from brook_controller.app import SPEC
from brook_controller.image import ControllerImage

from brook.config import RawSetting
from brook.health import HealthStatus, wait_until_serving
from brook.ports import allocate_free_ports
from brook.server import serve
from brook.v1 import common_pb2, controller_pb2, controller_pb2_grpc

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10
LEADER_TIMEOUT_S = 10
RPC_TIMEOUT_S = 10
NODE_ENDPOINT_PORT = 19092


class InProcessController:
    def __init__(self, directory: Path, settings: Mapping[str, str] | None = None) -> None:
        grpc_port, raft_port = allocate_free_ports(2)
        self.address = f"127.0.0.1:{grpc_port}"
        raw = {
            # A single voter still waits one election timeout before it leads: keep it short.
            "controller.quorum.election.timeout.ms": "100",
            "controller.quorum.heartbeat.interval.ms": "20",
            "node.id": "1",
            "listeners": f"GRPC://127.0.0.1:{grpc_port},RAFT://127.0.0.1:{raft_port}",
            "controller.quorum.voters": f"1@127.0.0.1:{raft_port}",
            "metadata.log.dir": str(directory / "metadata"),
            **(settings or {}),
        }
        self.config = SPEC.config_def.parse({k: RawSetting(v, "test") for k, v in raw.items()})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.exit_status: int | None = None
        self._channel: grpc.Channel | None = None

    def __enter__(self) -> Self:
        started = threading.Event()

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                started.set()
                self.exit_status = await serve(SPEC, self.config, stop=self._stop)

            asyncio.run(main())

        self._thread = threading.Thread(target=run, name="in-process-controller")
        self._thread.start()
        started.wait(START_TIMEOUT_S)
        try:
            result = wait_until_serving(self.address, timeout_ms=START_TIMEOUT_S * 1000)
            assert result.status is HealthStatus.SERVING, result.describe()
            self._channel = grpc.insecure_channel(self.address)
            self.wait_until_leader()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
            assert not self._thread.is_alive(), "the controller did not stop"

    @property
    def controller(self) -> Any:
        assert self._channel is not None
        return controller_pb2_grpc.ControllerServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def wait_until_leader(self) -> None:
        """Until its own no-op has committed: its answers are then those of the leader."""
        import time

        deadline = time.monotonic() + LEADER_TIMEOUT_S
        while True:
            quorum = self.controller.DescribeQuorum(
                controller_pb2.DescribeQuorumRequest(), timeout=RPC_TIMEOUT_S
            )
            if quorum.leader_id == 1:
                return
            assert time.monotonic() < deadline, "the single voter never became leader"
            time.sleep(0.02)

    def snapshot(self) -> controller_pb2.WatchMetadataResponse:
        stream = self.controller.WatchMetadata(
            controller_pb2.WatchMetadataRequest(node_id=-1, after_offset=-1), timeout=RPC_TIMEOUT_S
        )
        try:
            first: controller_pb2.WatchMetadataResponse = next(iter(stream))
        finally:
            stream.cancel()
        return first

    def image(self) -> ControllerImage:
        snapshot = self.snapshot()
        return ControllerImage.from_records(snapshot.records, snapshot.offset)

    # ------------------------------------------------------------------ fake nodes

    def register(
        self,
        node_id: int,
        *,
        rack: str = "",
        role: int = common_pb2.NODE_ROLE_STORAGE_NODE,
        incarnation_id: str | None = None,
    ) -> controller_pb2.RegisterBrokerResponse:
        response: controller_pb2.RegisterBrokerResponse = self.controller.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                node_id=node_id,
                incarnation_id=incarnation_id or str(uuid.uuid4()),
                role=role,
                endpoints=[
                    common_pb2.Endpoint(
                        listener="GRPC", host="127.0.0.1", port=NODE_ENDPOINT_PORT + node_id
                    )
                ],
                rack=rack,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        return response

    def heartbeat(
        self, node_id: int, broker_epoch: int, *, offset: int | None = None, shut_down: bool = False
    ) -> controller_pb2.BrokerHeartbeatResponse:
        """``offset`` defaults to the controller's own: a node that has caught up."""
        current = self.snapshot().offset if offset is None else offset
        response: controller_pb2.BrokerHeartbeatResponse = self.controller.BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(
                node_id=node_id,
                broker_epoch=broker_epoch,
                current_metadata_offset=current,
                want_shut_down=shut_down,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        return response

    def live_node(self, node_id: int, *, rack: str = "") -> int:
        """Registers a storage node and heartbeats until it is unfenced; its broker epoch."""
        registration = self.register(node_id, rack=rack)
        assert registration.error_code == 0, registration
        response = self.heartbeat(node_id, registration.broker_epoch)
        assert response.error_code == 0 and not response.is_fenced, response
        return registration.broker_epoch


def watch(controller: InProcessController, after_offset: int) -> Iterator[Any]:
    """WatchMetadata from ``after_offset``; the caller cancels the returned stream."""
    stream: Iterator[Any] = controller.controller.WatchMetadata(
        controller_pb2.WatchMetadataRequest(node_id=-1, after_offset=after_offset),
        timeout=RPC_TIMEOUT_S,
    )
    return stream
