"""A data request's partitions routed to their leader storage nodes: one gRPC call per node,
sent concurrently; a node that does not answer gives its partitions the retriable error
standing for the failure, so the client refreshes its metadata and retries. Used by every
data API of the gateway (data_apis.py, produce.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from brook.errors import ErrorCode
from brook.v1 import storage_pb2
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.protocol.codec import Message
from brook_gateway.upstream import UpstreamError

if TYPE_CHECKING:
    # Only the type: ProduceAffinity's module routes its calls through this one.
    from brook_gateway.produce import ProduceAffinity

__all__ = ["Part", "current_leader", "fan_out", "leader_endpoints", "unreachable_as_not_leader"]

Part = tuple[str, int, Any]


async def fan_out(
    backend: Backend,
    parts: list[Part],
    call: Callable[[str, list[Part]], Awaitable[None]],
    fail: Callable[[Part, ErrorCode, str], None],
    affinity: tuple[ProduceAffinity, str] | None = None,
    planned: Callable[[Mapping[str, list[Part]]], None] | None = None,
) -> None:
    """``affinity``: (the table, the connection) whose pins override the metadata's leaders;
    the calls are entered in it before the first await, so a request that arrives next sees
    them. ``planned``: told the partitions of each call before any is made, synchronously
    (the Produce handler joins its lanes there, in the connection's arrival order)."""
    routed = backend.route((t, p, (t, p, item)) for t, p, item in parts)
    if affinity is not None:
        table, peer = affinity
        moved: list[tuple[str, Part]] = []
        for address, items in routed.by_address.items():
            kept = []
            for part in items:
                pin = table.pinned(peer, part[0], part[1], address)
                if pin is None:
                    kept.append(part)
                else:
                    moved.append((pin, part))
            items[:] = kept
        unrouted = []
        for part, code in routed.errors:
            pin = table.pinned(peer, part[0], part[1], None)
            if pin is None:
                unrouted.append((part, code))
            else:
                moved.append((pin, part))
        routed.errors = unrouted
        for address, part in moved:
            routed.by_address.setdefault(address, []).append(part)
        routed.by_address = {a: items for a, items in routed.by_address.items() if items}
        for address, items in routed.by_address.items():
            table.enter(peer, address, items)

    async def one(address: str, items: list[Part]) -> None:
        try:
            await call(address, items)
        except UpstreamError as e:
            code = unreachable_as_not_leader(e.code)
            for part in items:
                fail(part, code, str(e))

    try:
        for part, code in routed.errors:
            fail(part, code, "")
        if planned is not None:
            planned(routed.by_address)
        if len(routed.by_address) == 1:
            # The common case, one leader node: no task to make for a gather of one.
            [(address, items)] = routed.by_address.items()
            await one(address, items)
            return
        await asyncio.gather(*(one(a, items) for a, items in routed.by_address.items()))
    finally:
        # Here, not in `one`: a call cancelled before its task's first step leaves too.
        if affinity is not None:
            for items in routed.by_address.values():
                affinity[0].leave(affinity[1], items)


def unreachable_as_not_leader(code: ErrorCode) -> ErrorCode:
    """The leader storage node is unreachable: most likely dead, with leadership about to
    move. Kafka clients know NETWORK_EXCEPTION only as their own transport error, and
    librdkafka fails a record for good when a broker answers with it; NOT_LEADER_OR_FOLLOWER
    makes every client refresh its metadata and retry, by which time the gateway routes to the
    new leader."""
    return ErrorCode.NOT_LEADER_OR_FOLLOWER if code == ErrorCode.NETWORK_EXCEPTION else code


# The errors whose answers carry the partition's current leader (KIP-951).
_NEW_LEADER_ERRORS: Final = frozenset(
    {int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH)}
)


def current_leader(
    image: ClusterImage,
    answer: storage_pb2.PartitionProduceResponse | storage_pb2.FetchPartitionResponse,
) -> Message | None:
    """Kafka's CurrentLeader (Produce v10, Fetch v12; KIP-951) for a partition a storage node
    refused as not led there: the storage node it names (a listed broker) at the partition's
    leader epoch. None for other errors, or when that node is not listed."""
    if int(answer.error_code) not in _NEW_LEADER_ERRORS or not answer.HasField("current_leader"):
        return None
    hint = answer.current_leader
    if hint.leader_id < 0 or all(b.node_id != hint.leader_id for b in image.kafka_brokers()):
        return None
    return {"leader_id": hint.leader_id, "leader_epoch": hint.leader_epoch}


def leader_endpoints(image: ClusterImage, leaders: set[int], listener: str) -> list[Message]:
    """Kafka's NodeEndpoints of the brokers named in current_leader fields, at the addresses
    of Kafka listener ``listener``."""
    if not leaders:
        return []
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in image.kafka_brokers(listener)
        if b.node_id in leaders
    ]
