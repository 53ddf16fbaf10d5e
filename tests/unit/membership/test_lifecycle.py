"""A node's life in the cluster against scripted controllers: registration, heartbeats, the
lease and its loss, re-registration, controlled shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from membership_support import (
    CLUSTER_ID,
    HEARTBEAT_INTERVAL_MS,
    NODE_ID,
    SESSION_TIMEOUT_MS,
    FakeQuorum,
    Member,
    client_for,
    eventually,
    lifecycle_settings,
    make_member,
    member_of,
    partition_record,
    run,
    running_quorum,
    topic_record,
)

from brook.errors import ErrorCode
from brook.membership import (
    AppliedMetadataOffset,
    BrokerLease,
    BrokerLifecycleManager,
    LifecycleState,
    MembershipError,
    MetaProperties,
    MetaPropertiesStore,
    RegistrationTimeoutError,
)
from brook.membership.meta_properties import read_meta_properties, write_meta_properties
from brook.v1 import common_pb2

SESSION_S = SESSION_TIMEOUT_MS / 1000
# A loaded machine may run a timer this late.
SLACK_S = 0.5


async def _active(member: Member) -> None:
    """Registered, heartbeating and leading."""
    await member.lifecycle.register(5.0)
    member.start_heartbeats()
    await member.lifecycle.wait_until_active(5.0)


@asynccontextmanager
async def _active_member() -> AsyncIterator[tuple[FakeQuorum, Member]]:
    """A quorum and a member following its log, registered and leading."""
    async with running_quorum() as quorum, member_of(quorum) as member:
        member.follow(quorum)
        await _active(member)
        yield quorum, member


def test_registration_carries_a_fresh_incarnation_the_role_endpoints_and_rack() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as first:
            second = make_member(quorum, node_id=2)
            try:
                await first.lifecycle.register(5.0)
                await second.lifecycle.register(5.0)
            finally:
                await second.client.close()

            requests = quorum.calls_of("RegisterBroker")
            assert [r.node_id for r in requests] == [NODE_ID, 2]
            incarnations = {r.incarnation_id for r in requests}
            assert len(incarnations) == 2
            assert all(uuid.UUID(i).version == 4 for i in incarnations)
            request = requests[0]
            assert request.role == common_pb2.NODE_ROLE_STORAGE_NODE
            assert [(e.listener, e.host, e.port) for e in request.endpoints] == [
                ("GRPC", "127.0.0.1", 9101)
            ]
            assert request.rack == "rack-a"
            assert request.cluster_id == ""
            assert first.lifecycle.state is LifecycleState.FENCED
            assert first.lifecycle.broker_epoch == quorum.brokers[NODE_ID].broker_epoch
            assert not first.lease.active

    run(scenario)


def test_first_registration_stores_the_cluster_id_and_later_ones_send_it(tmp_path: Path) -> None:
    directories = [tmp_path / "a", tmp_path / "b"]

    async def register_once() -> str:
        async with running_quorum(controllers=1) as quorum:
            client = client_for(quorum)
            lifecycle = BrokerLifecycleManager(
                client,
                lifecycle_settings(),
                applied=AppliedMetadataOffset(),
                lease=BrokerLease(),
                meta=MetaPropertiesStore(directories, NODE_ID),
            )
            try:
                await lifecycle.load_cluster_id()
                await lifecycle.register(5.0)
            finally:
                await client.close()
            request = quorum.calls_of("RegisterBroker")[0]
            return str(request.cluster_id)

    assert run(register_once) == ""
    assert [read_meta_properties(d) for d in directories] == [
        MetaProperties(NODE_ID, CLUSTER_ID)
    ] * 2
    assert run(register_once) == CLUSTER_ID


def test_inconsistent_cluster_id_refuses_to_register_with_a_clear_message(tmp_path: Path) -> None:
    other_cluster = "SomeOtherCluster000000"
    write_meta_properties(tmp_path, MetaProperties(NODE_ID, other_cluster))
    before = sorted(p.name for p in tmp_path.iterdir())

    async def scenario() -> None:
        async with running_quorum(controllers=1) as quorum:
            client = client_for(quorum)
            lifecycle = BrokerLifecycleManager(
                client,
                lifecycle_settings(),
                applied=AppliedMetadataOffset(),
                lease=BrokerLease(),
                meta=MetaPropertiesStore([tmp_path], NODE_ID),
            )
            try:
                await lifecycle.load_cluster_id()
                with pytest.raises(MembershipError) as raised:
                    await lifecycle.register(5.0)
            finally:
                await client.close()

            message = str(raised.value)
            assert "INCONSISTENT_CLUSTER_ID" in message
            assert other_cluster in message
            assert "controller.quorum.bootstrap.servers" in message
            assert len(quorum.calls_of("RegisterBroker")) == 1

    run(scenario)

    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert read_meta_properties(tmp_path) == MetaProperties(NODE_ID, other_cluster)


def test_duplicate_registration_is_retried_until_the_previous_lease_has_expired() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            quorum.register_errors = [ErrorCode.DUPLICATE_BROKER_REGISTRATION] * 3

            await member.lifecycle.register(5.0)

            assert len(quorum.calls_of("RegisterBroker")) == 4
            assert member.lifecycle.state is LifecycleState.FENCED

    run(scenario)


def test_a_registration_the_controllers_refuse_fails_at_once() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            quorum.register_errors = [ErrorCode.INVALID_REGISTRATION]
            started = time.monotonic()

            with pytest.raises(MembershipError, match="INVALID_REGISTRATION"):
                await member.lifecycle.register(5.0)

            assert time.monotonic() - started < 1.0
            assert len(quorum.calls_of("RegisterBroker")) == 1

    run(scenario)


def test_registration_gives_up_after_its_timeout_when_no_controller_leads() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            quorum.leader_id = -1
            quorum.hints = False
            started = time.monotonic()

            with pytest.raises(RegistrationTimeoutError, match="could not register"):
                await member.lifecycle.register(0.5)

            assert time.monotonic() - started < 0.5 + SLACK_S

    run(scenario)


def test_a_node_is_unfenced_once_caught_up_and_only_then_holds_its_lease() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            await member.lifecycle.register(5.0)
            member.start_heartbeats()
            await eventually(lambda: len(quorum.calls_of("BrokerHeartbeat")) >= 3, "heartbeats")

            # Nothing applied yet: below its registration, so it stays fenced and leads nothing.
            assert quorum.brokers[NODE_ID].fenced
            assert not member.lease.active
            assert member.listener.events == []
            assert {h.current_metadata_offset for h in quorum.calls_of("BrokerHeartbeat")} == {-1}

            member.follow(quorum)
            await member.lifecycle.wait_until_active(5.0)

            assert not quorum.brokers[NODE_ID].fenced
            assert member.lease.active
            assert member.listener.events == ["acquired"]
            assert member.lifecycle.state is LifecycleState.ACTIVE
            last = quorum.calls_of("BrokerHeartbeat")[-1]
            assert last.broker_epoch == member.lifecycle.broker_epoch
            assert last.current_metadata_offset >= quorum.registration_offsets[NODE_ID]

    run(scenario)


def test_a_fenced_node_heartbeats_as_soon_as_it_has_applied_more_metadata() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            # An interval far longer than the test: only the urgent heartbeats can unfence.
            member.lifecycle.settings = dataclasses.replace(
                member.lifecycle.settings, heartbeat_interval_ms=60_000
            )
            await member.lifecycle.register(5.0)
            member.start_heartbeats()
            await eventually(lambda: len(quorum.calls_of("BrokerHeartbeat")) == 1, "the first")

            member.follow(quorum)
            await member.lifecycle.wait_until_active(2.0)

            reported = [h.current_metadata_offset for h in quorum.calls_of("BrokerHeartbeat")]
            assert reported[0] == -1
            assert reported[-1] >= quorum.registration_offsets[NODE_ID]

    run(scenario)


def test_without_a_successful_heartbeat_within_the_session_timeout_the_lease_is_lost() -> None:
    async def scenario() -> None:
        async with _active_member() as (quorum, member):
            quorum.unreachable.update(quorum.controllers)
            cut_at = time.monotonic()
            await eventually(lambda: not member.lease.active, "the lease to lapse", SESSION_S * 3)
            lost_after_s = time.monotonic() - cut_at

            assert lost_after_s < SESSION_S + SLACK_S
            await eventually(lambda: len(member.listener.events) == 2, "the listener told")
            assert member.listener.events[1].startswith("lost: no successful heartbeat within")
            assert "broker.session.timeout.ms" in member.lease.inactive_reason

            quorum.unreachable.clear()
            await eventually(lambda: member.lease.active, "the lease back")
            assert member.listener.events[-1] == "acquired"

    run(scenario)


def test_a_leader_that_stops_answering_does_not_cost_the_lease_when_another_takes_over() -> None:
    async def scenario() -> None:
        async with _active_member() as (quorum, member):
            assert member.client.leader_address == quorum.controllers[1001].address

            # The leader is stopped (it accepts connections, answers nothing); 1002 leads.
            quorum.hanging.add(1001)
            quorum.leader_id = 1002
            watched_until = time.monotonic() + SESSION_S * 3
            while time.monotonic() < watched_until:
                assert member.lease.active, member.lifecycle.last_problem
                await asyncio.sleep(0.01)

            assert member.listener.events == ["acquired"]
            assert member.client.leader_address == quorum.controllers[1002].address

    run(scenario)


def test_a_fenced_node_leads_again_only_after_applying_what_the_unfencing_controller_had() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            quorum.append(topic_record("t"), partition_record("t", 0, NODE_ID, replicas=(1, 2)))
            following = member.follow(quorum)
            await _active(member)

            # The controllers fence the node (its lease lapsed on their side) and move its
            # leadership; the node's metadata stream stops short of those records.
            following.cancel()
            applied_before = member.applied.offset
            quorum.keep_fenced.add(NODE_ID)
            quorum.set_fenced(NODE_ID, True)
            quorum.move_leaderships_away(NODE_ID)
            await eventually(lambda: not member.lease.active, "told fenced")
            assert member.listener.events[-1].startswith("lost: the controllers have fenced")

            # Unfenced again, but the node has not applied the fencing records: no lease.
            quorum.keep_fenced.clear()
            await eventually(lambda: not quorum.brokers[NODE_ID].fenced, "unfenced by the quorum")
            await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000 * 4)
            assert not member.lease.active
            assert member.applied.offset == applied_before

            member.follow(quorum)
            await eventually(lambda: member.lease.active, "the lease back once caught up")
            assert member.listener.events[-1] == "acquired"

    run(scenario)


def test_an_unknown_broker_epoch_makes_the_node_register_again_as_the_same_incarnation() -> None:
    async def scenario() -> None:
        async with _active_member() as (quorum, member):
            first_epoch = member.lifecycle.broker_epoch

            del quorum.brokers[NODE_ID]  # the controllers no longer know it
            await eventually(
                lambda: len(quorum.calls_of("RegisterBroker")) == 2, "a second registration"
            )
            await eventually(lambda: member.lease.active, "the lease back")

            first, second = quorum.calls_of("RegisterBroker")
            assert second.incarnation_id == first.incarnation_id
            assert member.lifecycle.broker_epoch > first_epoch
            assert quorum.calls_of("BrokerHeartbeat")[-1].broker_epoch == (
                member.lifecycle.broker_epoch
            )
            assert any(
                e.startswith("lost: the controllers answered BROKER_ID_NOT_REGISTERED")
                for e in member.listener.events
            )

    run(scenario)


def test_a_stale_broker_epoch_ends_the_lease_until_registered_again() -> None:
    async def scenario() -> None:
        async with _active_member() as (quorum, member):
            quorum.heartbeat_errors = [ErrorCode.STALE_BROKER_EPOCH]
            await eventually(
                lambda: len(quorum.calls_of("RegisterBroker")) == 2, "a second registration"
            )
            await eventually(lambda: member.lease.active, "the lease back")

            assert member.listener.events[:3] == [
                "acquired",
                "lost: the controllers answered STALE_BROKER_EPOCH: ",
                "acquired",
            ]

    run(scenario)


def test_heartbeat_answers_of_a_deposed_controller_are_ignored() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            quorum.epoch = 5
            member.follow(quorum)
            await _active(member)

            # A controller of an older term says the node is fenced: not to be believed.
            quorum.epoch = 4
            quorum.keep_fenced.add(NODE_ID)
            quorum.set_fenced(NODE_ID, True)
            stale_from = len(quorum.calls_of("BrokerHeartbeat"))
            await eventually(
                lambda: len(quorum.calls_of("BrokerHeartbeat")) >= stale_from + 3, "heartbeats"
            )

            assert member.listener.events == ["acquired"]
            assert member.lifecycle.state is LifecycleState.ACTIVE
            # Nor do they renew anything: the lease lapses on its own clock. (`active` reads the
            # clock; the listener hears of it from a timer an instant later: wait for both.)
            await eventually(lambda: not member.lease.active, "the lease to lapse", SESSION_S * 3)
            await eventually(
                lambda: member.listener.events[-1] != "acquired", "the listener to hear", SESSION_S
            )
            assert "no successful heartbeat" in member.listener.events[-1]

    run(scenario)


def test_controlled_shutdown_moves_leadership_away_before_the_node_may_stop() -> None:
    async def scenario() -> None:
        async with _active_member() as (quorum, member):
            quorum.append(topic_record("t"), partition_record("t", 0, NODE_ID, replicas=(1, 2)))

            done = await member.lifecycle.controlled_shutdown(2.0)

            assert done
            assert quorum.partitions()[("t", 0)].leader == 2
            assert quorum.calls_of("BrokerHeartbeat")[-1].want_shut_down
            assert not member.lease.active
            assert member.listener.events[-1].startswith("lost: this node is shutting down")
            assert member.lifecycle.state is LifecycleState.SHUT_DOWN
            await asyncio.wait_for(member.tasks[-1], 1.0)

    run(scenario)


def test_controlled_shutdown_is_bounded_when_the_controllers_never_agree() -> None:
    async def scenario() -> None:
        async with _active_member() as (quorum, member):
            quorum.append(topic_record("t"), partition_record("t", 0, NODE_ID))
            quorum.grant_shutdown = False
            started = time.monotonic()

            done = await member.lifecycle.controlled_shutdown(0.3)

            assert not done
            assert time.monotonic() - started < 0.3 + SLACK_S
            assert quorum.partitions()[("t", 0)].leader == NODE_ID

    run(scenario)


def test_a_node_that_never_registered_skips_controlled_shutdown() -> None:
    async def scenario() -> None:
        async with running_quorum() as quorum, member_of(quorum) as member:
            assert not await member.lifecycle.controlled_shutdown(5.0)
            assert quorum.calls == []

    run(scenario)
