"""Consumer lag for the groups this coordinator serves: the `brook.group.committed_offset` and
`brook.group.lag` gauges (attributes group, topic, partition).

Lag is the partition's log end (its high watermark: what a READ_UNCOMMITTED consumer can reach,
as `kafka-consumer-groups --describe` computes LAG) minus the group's committed offset. The
coordinator does not follow user topics, so `refresh` asks each partition leader for the log
ends it needs: one ListOffsets per storage node per refresh (`run` refreshes every
`REFRESH_INTERVAL_S`), naming at most `PARTITIONS_PER_NODE_MAX` partitions. The gauges report
the last refresh, so a scrape never waits on the network; a node that did not answer leaves its
partitions without a lag until the next refresh (the committed offset is still reported).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Final

import grpc
from opentelemetry.metrics import CallbackOptions, Observation

from brook.errors import ErrorCode, error_code
from brook.rpc.channels import ChannelPool, channel_options
from brook.telemetry import meter
from brook.v1 import storage_pb2
from brook_group_coordinator.cluster_metadata import ClusterMetadata

__all__ = ["PARTITIONS_PER_NODE_MAX", "REFRESH_INTERVAL_S", "GroupLag"]

REFRESH_INTERVAL_S: Final = 5.0
PARTITIONS_PER_NODE_MAX: Final = 10000
CLIENT_ID: Final = "group-coordinator-lag"

_log = logging.getLogger(__name__)

# (group, topic, partition, committed offset)
Committed = tuple[str, str, int, int]


class GroupLag:
    """Refreshes and reports the lag of `committed()`'s offsets (read on the event loop)."""

    def __init__(
        self,
        committed: Callable[[], Iterable[Committed]],
        metadata: ClusterMetadata,
        request_timeout_s: float,
    ) -> None:
        self._committed = committed
        self._metadata = metadata
        self._request_timeout_s = request_timeout_s
        self._network = ChannelPool(channel_options(client_id=CLIENT_ID))
        self._offsets: tuple[Observation, ...] = ()
        self._lags: tuple[Observation, ...] = ()
        instruments = meter(__name__)
        instruments.create_observable_gauge(
            "brook.group.committed_offset",
            callbacks=[self._observe_offsets],
            unit="{offset}",
            description="The offset a consumer group committed for a partition",
        )
        instruments.create_observable_gauge(
            "brook.group.lag",
            callbacks=[self._observe_lags],
            unit="{record}",
            description="The partition's high watermark minus the group's committed offset",
        )

    async def close(self) -> None:
        await self._network.close()

    async def run(self, interval_s: float = REFRESH_INTERVAL_S) -> None:
        """Refreshes every `interval_s`, until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(interval_s)

    async def refresh(self) -> None:
        """Reads the committed offsets and the log ends of their partitions now."""
        committed = list(self._committed())
        by_address: dict[str, set[tuple[str, int]]] = {}
        for _, topic, partition, _ in committed:
            route = self._metadata.leader(partition, topic)
            if route is not None:
                wanted = by_address.setdefault(route[1], set())
                if len(wanted) < PARTITIONS_PER_NODE_MAX:
                    wanted.add((topic, partition))
        ends: dict[tuple[str, int], int] = {}
        for answer in await asyncio.gather(
            *(self._log_ends(address, wanted) for address, wanted in by_address.items())
        ):
            ends.update(answer)
        self._offsets = tuple(
            Observation(offset, {"group": group, "topic": topic, "partition": partition})
            for group, topic, partition, offset in committed
        )
        self._lags = tuple(
            Observation(
                max(0, ends[(topic, partition)] - offset),
                {"group": group, "topic": topic, "partition": partition},
            )
            for group, topic, partition, offset in committed
            if (topic, partition) in ends and offset >= 0
        )

    async def _log_ends(
        self, address: str, partitions: set[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        request = storage_pb2.ListOffsetsRequest(
            partitions=[
                storage_pb2.ListOffsetsPartition(
                    topic=topic, partition=partition, spec=storage_pb2.OFFSET_SPEC_LATEST
                )
                for topic, partition in sorted(partitions)
            ]
        )
        try:
            response = await self._network.storage(address).ListOffsets(
                request, timeout=self._request_timeout_s
            )
        except grpc.aio.AioRpcError as error:
            _log.debug(
                "no log end offsets for the lag",
                extra={"address": address, "code": error.code().name},
            )
            return {}
        return {
            (answer.topic, answer.partition): int(answer.offset)
            for answer in response.partitions
            if error_code(answer.error_code) is ErrorCode.NONE
        }

    def _observe_offsets(self, options: CallbackOptions) -> tuple[Observation, ...]:
        return self._offsets

    def _observe_lags(self, options: CallbackOptions) -> tuple[Observation, ...]:
        return self._lags
