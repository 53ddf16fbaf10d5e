"""The controller client: writes reach the active controller, every call is bounded."""

from __future__ import annotations

import asyncio
import time

import pytest
from membership_support import (
    NODE_ID,
    client_for,
    free_port,
    run,
    running_quorum,
)

from brook.errors import ErrorCode
from brook.membership import ControllerUnavailableError
from brook.membership.controller_client import ATTEMPTS_MAX
from brook.v1 import common_pb2, controller_pb2, metadata_pb2

# Generous for a 6 MiB message on a loaded machine; a refused message fails at once.
STREAM_READ_TIMEOUT_S = 30.0


def _registration(node_id: int = NODE_ID) -> controller_pb2.RegisterBrokerRequest:
    return controller_pb2.RegisterBrokerRequest(
        node_id=node_id,
        incarnation_id=f"incarnation-{node_id}",
        role=common_pb2.NODE_ROLE_STORAGE_NODE,
        endpoints=[common_pb2.Endpoint(listener="GRPC", host="127.0.0.1", port=9101)],
    )


def test_a_write_sent_to_a_follower_follows_the_not_controller_hint_to_the_leader() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum:
            quorum.leader_id = 1002
            follower, leader = quorum.controllers[1001], quorum.controllers[1002]
            client = client_for(quorum, follower.address)
            try:
                answer = await client.register_broker(_registration())
                second = await client.register_broker(_registration(2))
            finally:
                await client.close()

            assert answer.error_code is ErrorCode.NONE
            assert answer.address == leader.address
            # The follower once, then only the leader it named, learnt for later calls.
            assert [c.controller_id for c in quorum.calls] == [1001, 1002, 1002]
            assert second.address == leader.address
            assert client.leader_address == leader.address

    run(scenario)


def test_without_a_hint_the_client_tries_the_other_controllers_in_turn() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum:
            quorum.leader_id = 1003
            quorum.hints = False
            client = client_for(quorum)
            try:
                answer = await client.register_broker(_registration())
            finally:
                await client.close()

            assert answer.error_code is ErrorCode.NONE
            assert answer.address == quorum.controllers[1003].address
            assert [c.controller_id for c in quorum.calls] == [1001, 1002, 1003]

    run(scenario)


def test_a_controller_that_does_not_answer_is_passed_over() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=1) as quorum:
            leader = quorum.controllers[1001]
            client = client_for(quorum, f"127.0.0.1:{free_port()}", leader.address)
            try:
                answer = await client.register_broker(_registration())
            finally:
                await client.close()

            assert answer.error_code is ErrorCode.NONE
            assert answer.address == leader.address

    run(scenario)


def test_a_write_no_controller_accepts_fails_within_its_deadline_and_attempt_bound() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum:
            quorum.leader_id = -1  # an election that never ends
            quorum.hints = False
            client = client_for(quorum)
            started = time.monotonic()
            try:
                with pytest.raises(ControllerUnavailableError, match="NOT_CONTROLLER"):
                    await client.register_broker(_registration(), timeout_s=0.5)
            finally:
                await client.close()
            elapsed_s = time.monotonic() - started

            assert elapsed_s < 1.5
            assert 3 <= len(quorum.calls) <= ATTEMPTS_MAX

    run(scenario)


def test_following_hints_to_a_leader_that_does_not_answer_ends_within_the_attempt_bound() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=2) as quorum:
            # The follower keeps naming a leader that has gone: a stale hint.
            quorum.leader_id = 1002
            quorum.unreachable.add(1002)
            client = client_for(quorum, quorum.controllers[1001].address)
            try:
                with pytest.raises(ControllerUnavailableError):
                    await client.register_broker(_registration(), timeout_s=5.0)
            finally:
                await client.close()

            assert len(quorum.calls) <= ATTEMPTS_MAX

    run(scenario)


def test_an_answer_with_an_older_controller_epoch_than_seen_is_refused() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=1) as quorum:
            client = client_for(quorum)
            try:
                assert client.observe_epoch(5)
                assert client.observe_epoch(5)
                assert not client.observe_epoch(4)
                assert client.observe_epoch(6)
                assert client.controller_epoch == 6
            finally:
                await client.close()

    run(scenario)


def test_a_metadata_snapshot_larger_than_grpcs_default_receive_limit_arrives_whole() -> None:
    """A snapshot is one WatchMetadata message; gRPC's default 4 MiB receive limit would cut a
    cluster of some 60,000 partitions off its metadata."""
    big_value = "v" * (6 * 1024 * 1024)

    async def scenario() -> None:
        async with running_quorum() as quorum:
            quorum.append(
                metadata_pb2.MetadataRecord(
                    config=metadata_pb2.ConfigRecord(
                        resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC,
                        resource_name="wide",
                        name="description",
                        value=big_value,
                    )
                )
            )
            client = client_for(quorum)
            try:
                leader = quorum.controllers[quorum.leader_id]
                stream = client.watch_metadata(
                    leader.address,
                    controller_pb2.WatchMetadataRequest(node_id=NODE_ID, after_offset=-1),
                )
                try:
                    snapshot = await asyncio.wait_for(stream.read(), STREAM_READ_TIMEOUT_S)
                finally:
                    stream.cancel()
            finally:
                await client.close()

        assert snapshot.snapshot
        assert snapshot.offset == quorum.offset
        assert snapshot.ByteSize() > 4 * 1024 * 1024
        assert snapshot.records[-1].config.value == big_value

    run(scenario)
