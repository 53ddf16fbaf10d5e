"""brook.v1.ControllerService: the control plane the other processes of the cluster talk to.

Errors travel in the response body with Kafka's codes; NOT_CONTROLLER comes with a NodeHint
naming the leader. Whatever goes wrong inside, the RPC answers (UNKNOWN_SERVER_ERROR for a
defect, logged) rather than failing the stream or the process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Protocol, TypeVar

import grpc

from brook.errors import BrookError, ErrorCode
from brook.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from brook_controller.metadata_view import MetadataView
from brook_controller.quorum_controller import QuorumController

__all__ = ["ControllerServicer", "answer"]

# How long a WatchMetadata stream waits for a change before looking at whether the server is
# shutting down; also the longest a closed stream lingers.
WATCH_IDLE_WAIT_S: Final = 0.5

_log = logging.getLogger(__name__)


class _Response(Protocol):
    error_code: Any
    error_message: str


_Resp = TypeVar("_Resp", bound=_Response)


async def answer(
    controller: QuorumController,
    response: _Resp,
    operation: Callable[[], Awaitable[_Resp]],
    name: str,
    hint: Callable[[_Resp, common_pb2.NodeHint], None] | None = None,
) -> _Resp:
    """Runs ``operation``; a refusal becomes ``response`` with the error's code and message
    (and, for NOT_CONTROLLER, the leader's hint)."""
    try:
        return await operation()
    except BrookError as error:
        response.error_code = error.code
        response.error_message = error.message
        if error.code is ErrorCode.NOT_CONTROLLER and hint is not None:
            hint(response, controller.controller_hint())
        return response
    except Exception as error:
        _log.exception("%s failed", name)
        response.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
        response.error_message = f"internal error: {error!r}"
        return response


def _set_controller(response: Any, hint: common_pb2.NodeHint) -> None:
    response.controller.CopyFrom(hint)


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(
        self, controller: QuorumController, view: MetadataView, stop: asyncio.Event
    ) -> None:
        self._controller = controller
        self._view = view
        self._stop = stop

    async def RegisterBroker(
        self, request: controller_pb2.RegisterBrokerRequest, context: Any
    ) -> controller_pb2.RegisterBrokerResponse:
        return await answer(
            self._controller,
            controller_pb2.RegisterBrokerResponse(),
            lambda: self._controller.register_broker(request),
            "RegisterBroker",
            _set_controller,
        )

    async def BrokerHeartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, context: Any
    ) -> controller_pb2.BrokerHeartbeatResponse:
        response = await answer(
            self._controller,
            controller_pb2.BrokerHeartbeatResponse(),
            lambda: self._controller.broker_heartbeat(request),
            "BrokerHeartbeat",
            _set_controller,
        )
        response.controller_epoch = self._controller.epoch
        return response

    async def AlterPartition(
        self, request: controller_pb2.AlterPartitionRequest, context: Any
    ) -> controller_pb2.AlterPartitionResponse:
        return await answer(
            self._controller,
            controller_pb2.AlterPartitionResponse(),
            lambda: self._controller.alter_partition(request),
            "AlterPartition",
            _set_controller,
        )

    async def AllocateProducerIds(
        self, request: controller_pb2.AllocateProducerIdsRequest, context: Any
    ) -> controller_pb2.AllocateProducerIdsResponse:
        return await answer(
            self._controller,
            controller_pb2.AllocateProducerIdsResponse(),
            lambda: self._controller.allocate_producer_ids(request),
            "AllocateProducerIds",
            _set_controller,
        )

    async def DescribeQuorum(
        self, request: controller_pb2.DescribeQuorumRequest, context: Any
    ) -> controller_pb2.DescribeQuorumResponse:
        try:
            return await self._controller.describe_quorum()
        except Exception as error:
            _log.exception("DescribeQuorum failed")
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot describe the quorum: {error}")
            raise  # abort raises; this keeps type checkers aware

    async def WatchMetadata(
        self, request: controller_pb2.WatchMetadataRequest, context: Any
    ) -> AsyncIterator[controller_pb2.WatchMetadataResponse]:
        if request.after_offset < -1:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"after_offset must be -1 (a snapshot first) or an offset, got "
                f"{request.after_offset}",
            )
        async for response in self._view.watch(
            request.after_offset,
            lambda: self._controller.epoch,
            self._stop,
            WATCH_IDLE_WAIT_S,
        ):
            yield response
