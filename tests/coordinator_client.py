"""Raw-gRPC clients of the coordinators for integration tests, the way any client in any
language would speak to them: find the coordinator of a key through any running coordinator
(GroupCoordinatorService.FindCoordinator) and follow it when it moves.

``CoordinatorClient.call`` asks again (re-finding the coordinator) while the answer is one of
the client's transient errors; ``wait_for`` polls with a bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import pytest

from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.v1 import common_pb2, group_pb2, group_pb2_grpc

__all__ = ["CoordinatorClient", "grpc_endpoint", "wait_for"]

POLL_S = 0.1
RPC_TIMEOUT_S = 15.0
_R = TypeVar("_R")


def wait_for(condition: Callable[[], _R | None], what: str, timeout_s: float) -> _R:
    """``condition()``'s first result that is not None; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(POLL_S)


def grpc_endpoint(endpoints: object) -> str | None:
    """The GRPC listener's address among a Coordinator's or NodeHint's endpoints."""
    for endpoint in endpoints:  # type: ignore[attr-defined]
        assert isinstance(endpoint, common_pb2.Endpoint)
        if endpoint.listener == "GRPC":
            return f"{endpoint.host}:{endpoint.port}"
    return None


class CoordinatorClient:
    """The coordinator of ``key`` (FindCoordinator's ``key_type``); ``stub(address)`` is the
    service ``call`` speaks to (subclasses)."""

    def __init__(
        self,
        cluster: LocalCluster,
        key: str,
        key_type: group_pb2.CoordinatorType,
        transient: frozenset[ErrorCode],
        wait_timeout_s: float,
    ) -> None:
        self.cluster = cluster
        self.key = key
        self._key_type = key_type
        self._transient = transient
        self.wait_timeout_s = wait_timeout_s
        self._channels: dict[str, grpc.Channel] = {}

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.insecure_channel(address)
            self._channels[address] = channel
        return channel

    def groups_stub(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        return group_pb2_grpc.GroupCoordinatorServiceStub(self.channel(address))  # type: ignore[no-untyped-call]

    def stub(self, address: str) -> Any:
        return self.groups_stub(address)

    def find(self) -> tuple[int, str]:
        """(node id, address) of the key's coordinator, waiting until one is assigned."""

        def ask() -> tuple[int, str] | None:
            for name in self.cluster.names(Role.GROUP_COORDINATOR):
                if not self.cluster.is_running(name):
                    continue
                try:
                    answer = self.groups_stub(self.cluster.grpc_address(name)).FindCoordinator(
                        group_pb2.FindCoordinatorRequest(key_type=self._key_type, keys=[self.key]),
                        timeout=RPC_TIMEOUT_S,
                    )
                except grpc.RpcError:
                    continue
                found = answer.coordinators[0]
                if error_code(found.error_code) is not ErrorCode.NONE:
                    continue
                endpoint = grpc_endpoint(found.endpoints)
                if endpoint is not None:
                    return found.node_id, endpoint
            return None

        return wait_for(ask, f"a coordinator for {self.key}", self.wait_timeout_s)

    def call(self, method: str, request: object, what: str) -> object:
        """``method`` on the key's coordinator, re-finding it while the answer is transient."""

        def attempt() -> object | None:
            _, address = self.find()
            try:
                answer = getattr(self.stub(address), method)(request, timeout=RPC_TIMEOUT_S)
            except grpc.RpcError:
                return None
            if self._answer_error(answer) in self._transient:
                return None
            return answer

        return wait_for(attempt, what, self.wait_timeout_s)

    def _answer_error(self, answer: object) -> ErrorCode:
        if hasattr(answer, "error_code"):
            return error_code(answer.error_code)
        codes = {error_code(p.error_code) for p in getattr(answer, "partitions", [])}
        transient = codes & self._transient
        return next(iter(transient)) if transient else ErrorCode.NONE
