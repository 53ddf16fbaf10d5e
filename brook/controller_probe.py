"""Looking at each controller from outside: who it thinks leads, in which term, and a digest of
its committed metadata. For operators (``brook cluster describe --digests``), the fault tests
and the benchmark.

The digest is computed from the snapshot a controller streams first on WatchMetadata, so it
needs no RPC of its own: controllers whose images are equal give equal digests (see
``brook.metadata.digest``). Compare digests only at equal offsets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from brook.metadata.digest import metadata_digest
from brook.rpc.channels import METADATA_RECEIVE_BYTES_MAX, channel_options, sync_channel
from brook.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["ControllerState", "describe_controller", "wait_for_convergence", "wait_for_leader"]


@dataclass(frozen=True)
class ControllerState:
    address: str
    leader_id: int | None
    term: int
    offset: int
    digest: str


def _stub(channel: grpc.Channel) -> controller_pb2_grpc.ControllerServiceStub:
    # The generated stub class is untyped.
    return controller_pb2_grpc.ControllerServiceStub(channel)  # type: ignore[no-untyped-call]


def describe_controller(address: str, timeout_s: float) -> ControllerState:
    """One controller's view. Raises grpc.RpcError if it does not answer in time."""
    with sync_channel(
        address, channel_options(receive_bytes_max=METADATA_RECEIVE_BYTES_MAX)
    ) as channel:
        stub = _stub(channel)
        quorum = stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(), timeout=timeout_s)
        stream = stub.WatchMetadata(
            controller_pb2.WatchMetadataRequest(node_id=-1, after_offset=-1), timeout=timeout_s
        )
        try:
            snapshot = next(iter(stream))
        finally:
            stream.cancel()
    return ControllerState(
        address=address,
        leader_id=quorum.leader_id if quorum.leader_id >= 0 else None,
        term=quorum.leader_epoch,
        offset=snapshot.offset,
        digest=metadata_digest(snapshot.records, snapshot.offset),
    )


def wait_for_leader(
    addresses: Sequence[str], timeout_s: float, *, newer_than_term: int = -1
) -> ControllerState:
    """Polls until a majority of ``addresses`` agree on a leader in a term above
    ``newer_than_term``; returns the state of one that does. Raises TimeoutError."""
    deadline = time.monotonic() + timeout_s
    last: list[str] = []
    while True:
        states = []
        last = []
        for address in addresses:
            try:
                states.append(describe_controller(address, min(2.0, timeout_s)))
            except grpc.RpcError as error:
                last.append(f"{address}: {error.code().name}")
        for state in states:
            agreeing = [
                s for s in states if s.leader_id == state.leader_id and s.term == state.term
            ]
            if (
                state.leader_id is not None
                and state.term > newer_than_term
                and len(agreeing) * 2 > len(addresses)
            ):
                return state
        if time.monotonic() >= deadline:
            seen = [f"{s.address}: leader {s.leader_id} term {s.term}" for s in states]
            raise TimeoutError(f"no leader agreed on within {timeout_s} s: {seen + last}")
        time.sleep(0.05)


def wait_for_convergence(addresses: Sequence[str], timeout_s: float) -> list[ControllerState]:
    """Polls until every controller answers with the same offset; returns their states (the
    caller compares the digests: equal offsets with different digests is divergence)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            states = [describe_controller(address, min(2.0, timeout_s)) for address in addresses]
        except grpc.RpcError:
            states = []
        if states and len({s.offset for s in states}) == 1:
            return states
        if time.monotonic() >= deadline:
            offsets = {s.address: s.offset for s in states}
            raise TimeoutError(f"controllers did not converge within {timeout_s} s: {offsets}")
        time.sleep(0.05)
