"""The life cycle of registered nodes: registration, leases, fencing and controlled shutdown
(Kafka's ClusterControlManager and BrokerHeartbeatManager).

A node registers with a random incarnation id and gets a broker epoch; it starts fenced. Its
heartbeats hold a lease of broker.session.timeout.ms; once a heartbeat shows it has applied
the metadata up to its own registration, it is unfenced. A node whose lease expires is fenced
and leaves every ISR and leadership, in one change with all others that expired with it. A
node that wants to shut down is marked so, loses its leaderships and ISR memberships, and is
told it may stop once it leads nothing.

Leases are the leader's own, in memory, not replicated: a new leader gives every node a fresh
lease, so a node is never fenced because a deposed leader stopped hearing from it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from brook.errors import BrookError, ErrorCode
from brook.v1 import common_pb2, controller_pb2, metadata_pb2
from brook_controller.changes import ChangeSet
from brook_controller.election import elect_offline_partitions, remove_node

__all__ = [
    "HeartbeatDecision",
    "LeaseTracker",
    "fence_expired",
    "heartbeat",
    "register_broker",
]

REGISTERABLE_ROLES: Final = frozenset(
    {
        common_pb2.NODE_ROLE_STORAGE_NODE,
        common_pb2.NODE_ROLE_GROUP_COORDINATOR,
        common_pb2.NODE_ROLE_GATEWAY,
    }
)
INCARNATION_ID_CHARS_MAX: Final = 64
RACK_CHARS_MAX: Final = 255
ENDPOINTS_MAX: Final = 16
_LISTENER_RE: Final = re.compile(r"^[A-Z][A-Z0-9_]*$")

UncleanPolicy = Callable[[str], bool]


class LeaseTracker:
    """When each node last renewed its lease, by the leader's monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._renewed: dict[int, float] = {}

    def renew(self, node_id: int) -> None:
        self._renewed[node_id] = self._clock()

    def reset(self, node_ids: Iterable[int]) -> None:
        """A fresh lease for every node: this controller has just become leader."""
        now = self._clock()
        self._renewed = dict.fromkeys(node_ids, now)

    def forget(self, node_id: int) -> None:
        self._renewed.pop(node_id, None)

    def is_alive(self, node_id: int, session_ms: int) -> bool:
        renewed = self._renewed.get(node_id)
        return renewed is not None and (self._clock() - renewed) * 1000 < session_ms

    def expired(self, node_ids: Iterable[int], session_ms: int) -> list[int]:
        return sorted(n for n in node_ids if not self.is_alive(n, session_ms))


def _registration_problem(request: controller_pb2.RegisterBrokerRequest) -> str | None:
    if request.node_id < 0:
        return f"node id {request.node_id} is negative"
    if request.role not in REGISTERABLE_ROLES:
        return "role must be storage node, group coordinator or gateway"
    if not request.incarnation_id or len(request.incarnation_id) > INCARNATION_ID_CHARS_MAX:
        return f"incarnation id must be 1 to {INCARNATION_ID_CHARS_MAX} characters"
    if len(request.rack) > RACK_CHARS_MAX:
        return f"rack must be at most {RACK_CHARS_MAX} characters"
    if not request.endpoints or len(request.endpoints) > ENDPOINTS_MAX:
        return f"a node registers 1 to {ENDPOINTS_MAX} endpoints"
    listeners = [endpoint.listener for endpoint in request.endpoints]
    if "GRPC" not in listeners:
        return "a node must register its GRPC endpoint"
    if len(set(listeners)) != len(listeners):
        return "an endpoint's listener name appears twice"
    for endpoint in request.endpoints:
        if not _LISTENER_RE.match(endpoint.listener):
            return f"listener name {endpoint.listener!r} is not upper-case letters, digits, _"
        if not endpoint.host or not 1 <= endpoint.port <= 65535:
            return f"endpoint {endpoint.listener} needs a host and a port in 1..65535"
    return None


def register_broker(
    changes: ChangeSet,
    request: controller_pb2.RegisterBrokerRequest,
    leases: LeaseTracker,
    session_ms: int,
    unclean: UncleanPolicy,
) -> metadata_pb2.BrokerRecord:
    """The node's registration, new or (same incarnation, same details) the existing one.
    Raises BrookError for a request that must be refused."""
    cluster_id = changes.image.cluster_id
    if request.cluster_id and cluster_id and request.cluster_id != cluster_id:
        raise BrookError(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"the node belongs to cluster {request.cluster_id}, this is cluster {cluster_id}",
        )
    problem = _registration_problem(request)
    if problem is not None:
        raise BrookError(ErrorCode.INVALID_REGISTRATION, problem)
    existing = changes.broker(request.node_id)
    wanted = metadata_pb2.BrokerRecord(
        node_id=request.node_id,
        incarnation_id=request.incarnation_id,
        role=request.role,
        endpoints=request.endpoints,
        rack=request.rack,
        fenced=True,
    )
    if existing is not None:
        if existing.incarnation_id == request.incarnation_id and _same_details(existing, wanted):
            return existing
        if existing.incarnation_id != request.incarnation_id and leases.is_alive(
            request.node_id, session_ms
        ):
            raise BrookError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"node {request.node_id} is registered by another process whose lease has not "
                "expired",
            )
    # Kafka's broker epoch is the offset of the registration record. Here it is the offset the
    # record would have if nothing else committed first: never more than the real one, and so
    # strictly above every earlier epoch of the node, whose records are all behind the image.
    wanted.broker_epoch = changes.image.offset + 1 + len(changes)
    if existing is not None:
        wanted.broker_epoch = max(wanted.broker_epoch, existing.broker_epoch + 1)
    changes.put_broker(wanted)
    if existing is not None and existing.role == common_pb2.NODE_ROLE_STORAGE_NODE:
        # The previous incarnation is gone: it leads nothing and is in no ISR any more.
        remove_node(changes, request.node_id, unclean)
    leases.renew(request.node_id)
    return wanted


def _same_details(a: metadata_pb2.BrokerRecord, b: metadata_pb2.BrokerRecord) -> bool:
    return a.role == b.role and list(a.endpoints) == list(b.endpoints) and a.rack == b.rack


@dataclass(frozen=True)
class HeartbeatDecision:
    caught_up: bool


def heartbeat(
    changes: ChangeSet,
    request: controller_pb2.BrokerHeartbeatRequest,
    registration_offset: int,
    unclean: UncleanPolicy,
) -> HeartbeatDecision:
    """Decides what a heartbeat changes (unfencing, entering controlled shutdown). The caller
    renews the lease and answers from the state after the changes commit."""
    broker = changes.broker(request.node_id)
    if broker is None:
        raise BrookError(
            ErrorCode.BROKER_ID_NOT_REGISTERED, f"node {request.node_id} is not registered"
        )
    if broker.broker_epoch != request.broker_epoch:
        raise BrookError(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker epoch {request.broker_epoch} is not the current one ({broker.broker_epoch})",
        )
    caught_up = request.current_metadata_offset >= registration_offset
    if request.want_shut_down and not broker.in_controlled_shutdown:
        shutting_down = metadata_pb2.BrokerRecord()
        shutting_down.CopyFrom(broker)
        shutting_down.in_controlled_shutdown = True
        changes.put_broker(shutting_down)
        if broker.role == common_pb2.NODE_ROLE_STORAGE_NODE:
            remove_node(changes, broker.node_id, unclean)
    elif broker.fenced and caught_up and not broker.in_controlled_shutdown:
        unfenced = metadata_pb2.BrokerRecord()
        unfenced.CopyFrom(broker)
        unfenced.fenced = False
        changes.put_broker(unfenced)
        if broker.role == common_pb2.NODE_ROLE_STORAGE_NODE:
            elect_offline_partitions(changes, unclean, node_id=broker.node_id)
    return HeartbeatDecision(caught_up)


def fence_expired(changes: ChangeSet, node_ids: Iterable[int], unclean: UncleanPolicy) -> list[int]:
    """Fences every node in ``node_ids`` that is still unfenced, and moves their leaderships;
    returns the nodes fenced."""
    fenced = []
    for node_id in sorted(node_ids):
        broker = changes.broker(node_id)
        if broker is None or broker.fenced:
            continue
        updated = metadata_pb2.BrokerRecord()
        updated.CopyFrom(broker)
        updated.fenced = True
        changes.put_broker(updated)
        fenced.append(node_id)
    for node_id in fenced:
        if changes.image.brokers[node_id].role == common_pb2.NODE_ROLE_STORAGE_NODE:
            remove_node(changes, node_id, unclean)
    return fenced
