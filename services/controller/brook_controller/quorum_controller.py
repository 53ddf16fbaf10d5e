"""The active controller's logic: how a request becomes a committed change, and the work the
leader does on its own (lease expiry, leader balance, the internal topics and the
coordinators).

Every change follows the same path (``write``): validate the request against the committed
view and decide the records, propose them as one command with preconditions on what was read,
and answer once the command is applied here. If another change committed in between and touched
the same objects, the command is refused by every replica alike and the decision is taken
again on the new state. A decision is only taken on a view known to be complete: once a no-op
of the leader's own term has committed (a *barrier*), every earlier entry is in the view. A
request that turns out to change nothing (a heartbeat that only renews a lease, a validation)
also waits for a barrier before it is answered, because without a commit nothing proves that
this controller still leads. Reads on the leader pass a barrier too, so they are
linearizable. A follower answers writes with NOT_CONTROLLER and a hint naming the leader.

Concurrent requests share barriers: one no-op is in flight at a time, and every request that
arrives meanwhile waits for the next one, which is still proposed after it arrived.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from opentelemetry.metrics import CallbackOptions, Observation

from brook.config import Config, Voter
from brook.errors import BrookError, ErrorCode
from brook.reserved import RESERVED_PRODUCER_ID_BASE
from brook.telemetry import meter
from brook.v1 import admin_pb2, common_pb2, controller_pb2, metadata_pb2
from brook_controller.brokers import (
    LeaseTracker,
    fence_expired,
    heartbeat,
    register_broker,
)
from brook_controller.changes import ChangeSet
from brook_controller.commands import Command, CommandKind, encode_command
from brook_controller.config import quorum_grpc_endpoints
from brook_controller.election import (
    imbalanced_partitions,
    preferred_election,
    with_changes,
)
from brook_controller.image import BROKER, TOPIC, ControllerImage
from brook_controller.metadata_view import MetadataView
from brook_controller.raft import NotLeaderError, RaftEngine
from brook_controller.reassignment import (
    complete_ready_reassignments,
    complete_reassignment,
    ready_reassignments,
)
from brook_controller.state_machine import ApplyStatus
from brook_controller.topics import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    InternalTopicSettings,
    TopicDefaults,
    create_topic,
)

__all__ = [
    "ControllerSettings",
    "QuorumController",
    "check_producer_id_block",
    "ensure_cluster_id",
    "new_cluster_id",
]

# A decision refused because the state moved under it is taken again this many times before
# the request fails; only a storm of changes to the same objects gets that far.
WRITE_ATTEMPTS_MAX: Final = 5
# Kafka's producer id block size.
PRODUCER_ID_BLOCK_SIZE: Final = 1000
MAINTENANCE_INTERVAL_S: Final = 0.5
LEASE_CHECK_INTERVAL_MS_MAX: Final = 250
ENGINE_CHECK_INTERVAL_S: Final = 0.5
UNCLEAN_LEADER_ELECTION: Final = "unclean.leader.election.enable"

_log = logging.getLogger(__name__)
_R = TypeVar("_R")


@dataclass(frozen=True)
class ControllerSettings:
    node_id: int
    session_timeout_ms: int
    commit_timeout_ms: int
    unclean_leader_election: bool
    auto_leader_rebalance: bool
    imbalance_check_interval_s: float
    imbalance_percentage: int
    topic_defaults: TopicDefaults
    auto_create_topics: bool
    offsets_topic: InternalTopicSettings
    transaction_state_topic: InternalTopicSettings
    grpc_endpoints: dict[int, Voter]

    @classmethod
    def from_config(cls, config: Config) -> ControllerSettings:
        return cls(
            node_id=config.get_int("node.id"),
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
            commit_timeout_ms=config.get_int("metadata.commit.timeout.ms"),
            unclean_leader_election=config.get_bool(UNCLEAN_LEADER_ELECTION),
            auto_leader_rebalance=config.get_bool("auto.leader.rebalance.enable"),
            imbalance_check_interval_s=float(
                config.get_int("leader.imbalance.check.interval.seconds")
            ),
            imbalance_percentage=config.get_int("leader.imbalance.per.broker.percentage"),
            topic_defaults=TopicDefaults(
                config.get_int("num.partitions"), config.get_int("default.replication.factor")
            ),
            auto_create_topics=config.get_bool("auto.create.topics.enable"),
            offsets_topic=InternalTopicSettings(
                OFFSETS_TOPIC,
                partitions=config.get_int("offsets.topic.num.partitions"),
                replication_factor=config.get_int("offsets.topic.replication.factor"),
                segment_bytes=config.get_int("offsets.topic.segment.bytes"),
            ),
            transaction_state_topic=InternalTopicSettings(
                TRANSACTION_STATE_TOPIC,
                partitions=config.get_int("transaction.state.log.num.partitions"),
                replication_factor=config.get_int("transaction.state.log.replication.factor"),
                segment_bytes=config.get_int("transaction.state.log.segment.bytes"),
                min_insync_replicas=config.get_int("transaction.state.log.min.isr"),
            ),
            grpc_endpoints=quorum_grpc_endpoints(config),
        )


def new_cluster_id() -> str:
    """Kafka's format: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def ensure_cluster_id(changes: ChangeSet) -> None:
    """Give the cluster its id, once. Decided on the image the write is attempted against: a
    write retried because another one committed meanwhile (RegisterBroker and the maintenance
    task both write the id at bootstrap) must not replace the id that write committed, which a
    node may already have stored as its cluster's."""
    if changes.image.cluster is None:
        changes.put_cluster(new_cluster_id())


def check_producer_id_block(first: int) -> None:
    """Refuses a block that would reach the producer ids reserved for the coordinators
    (brook.reserved): a client given one could pass for a coordinator."""
    if first + PRODUCER_ID_BLOCK_SIZE > RESERVED_PRODUCER_ID_BASE:
        # Kafka's answer to exhausted producer ids is an unknown server error too.
        raise BrookError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"producer ids exhausted: the next block [{first}, "
            f"{first + PRODUCER_ID_BLOCK_SIZE}) would reach the ids reserved for the "
            f"group coordinators (from {RESERVED_PRODUCER_ID_BASE})",
        )


class QuorumController:
    def __init__(
        self,
        settings: ControllerSettings,
        engine: RaftEngine,
        view: MetadataView,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.view = view
        self.leases = LeaseTracker(clock)
        self._barrier_waiters: list[asyncio.Future[None]] = []
        self._barrier_wanted = asyncio.Event()
        # The term in which this controller last committed a barrier: from then on its view
        # is complete and it may act on its own (fence expired leases, rebalance).
        self._established_term = -1
        instruments = meter(__name__)
        instruments.create_observable_gauge(
            "brook.controller.active",
            callbacks=[self._observe_active],
            description="1 on the active controller, 0 on the others",
        )
        instruments.create_observable_gauge(
            "brook.controller.offline_partitions",
            callbacks=[self._observe_offline],
            unit="{partition}",
            description="Partitions without a leader (reported by the active controller only)",
        )

    def _observe_active(self, options: CallbackOptions) -> list[Observation]:
        return [Observation(int(self.is_active()))]

    def _observe_offline(self, options: CallbackOptions) -> list[Observation]:
        # Kafka's convention: only the active controller's view counts, so the sum over the
        # quorum is the cluster's figure.
        return [Observation(self.view.image.offline_partitions if self.is_active() else 0)]

    # ------------------------------------------------------------------ leadership

    @property
    def epoch(self) -> int:
        """The controller epoch stamped on answers: the Raft term."""
        return self.engine.term

    def is_active(self) -> bool:
        """Leader, with a barrier committed in the current term."""
        return self.engine.is_leader() and self._established_term == self.engine.term

    def controller_hint(self) -> common_pb2.NodeHint:
        leader = self.engine.leader_id()
        if leader is None:
            return common_pb2.NodeHint(node_id=-1)
        return common_pb2.NodeHint(node_id=leader, endpoints=self.grpc_endpoints(leader))

    def grpc_endpoints(self, node_id: int) -> list[common_pb2.Endpoint]:
        voter = self.settings.grpc_endpoints.get(node_id)
        if voter is None:
            return []
        return [common_pb2.Endpoint(listener="GRPC", host=voter.host, port=voter.port)]

    def deadline(self, timeout_ms: int = 0) -> float:
        """The loop time by which a request must be answered: its own timeout if it has one,
        else metadata.commit.timeout.ms."""
        chosen = timeout_ms if timeout_ms > 0 else self.settings.commit_timeout_ms
        return asyncio.get_running_loop().time() + chosen / 1000

    @staticmethod
    def _remaining_s(deadline: float) -> float:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise BrookError(ErrorCode.REQUEST_TIMED_OUT, "the request's time ran out")
        return remaining

    async def barrier(self, deadline: float) -> None:
        """Returns once a no-op proposed after this call has committed here; raises
        NotLeaderError on a follower or a leader that lost its leadership, BrookError
        REQUEST_TIMED_OUT if it does not commit by ``deadline``."""
        if not self.engine.is_leader():
            raise NotLeaderError()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._barrier_waiters.append(waiter)
        self._barrier_wanted.set()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self._remaining_s(deadline))
        except TimeoutError:
            raise BrookError(
                ErrorCode.REQUEST_TIMED_OUT, "the quorum did not commit within the request's time"
            ) from None

    async def run_barriers(self) -> None:
        """Background task: proposes the no-ops that barriers wait for, one at a time."""
        while True:
            await self._barrier_wanted.wait()
            self._barrier_wanted.clear()
            waiters, self._barrier_waiters = self._barrier_waiters, []
            error: BaseException | None = None
            term = self.engine.term
            try:
                outcome = await self.engine.propose(
                    encode_command(Command(CommandKind.NO_OP, term)),
                    self.settings.commit_timeout_ms / 1000,
                )
                if outcome.status is ApplyStatus.STALE_TERM:
                    error = NotLeaderError("a newer controller has taken over")
                else:
                    self._on_established(term)
            except TimeoutError:
                error = BrookError(ErrorCode.REQUEST_TIMED_OUT, "the no-op write did not commit")
            except BrookError as failure:
                error = failure
            except asyncio.CancelledError:
                for waiter in waiters:
                    waiter.cancel()
                raise
            for waiter in waiters:
                if waiter.done():
                    continue
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    def _on_established(self, term: int) -> None:
        if self._established_term == term:
            return
        self._established_term = term
        # A new leader's clock starts every lease afresh: it cannot know how long ago the
        # previous leader last heard from each node.
        self.leases.reset(self.view.image.brokers)
        _log.info("active controller", extra={"term": term, "offset": self.view.offset})

    def request_barrier(self) -> None:
        """Called when this controller may have become leader: its first no-op commits the
        end of the previous term and marks the new one in the state machine."""
        if self.engine.is_leader():
            self._barrier_wanted.set()

    # ------------------------------------------------------------------ writes

    async def write(
        self,
        decide: Callable[[ChangeSet], _R],
        deadline: float,
        *,
        validate_only: bool = False,
    ) -> _R:
        """Decides on the current committed state and commits the decision (see the module
        doc). ``decide`` raises BrookError to refuse; it may run more than once."""
        if not self.is_active():
            # Until a no-op of this term has committed, the view may lack entries of the
            # previous term: decide nothing on it.
            await self.barrier(deadline)
        for _ in range(WRITE_ATTEMPTS_MAX):
            changes = ChangeSet(self.view.image)
            result = decide(changes)
            if not changes or validate_only:
                # Nothing to commit proves this controller still leads: a barrier does.
                await self.barrier(deadline)
                return result
            command = Command(
                CommandKind.RECORDS,
                self.engine.term,
                preconditions=changes.preconditions,
                records=changes.records,
            )
            try:
                outcome = await self.engine.propose(
                    encode_command(command), self._remaining_s(deadline)
                )
            except TimeoutError as error:
                raise BrookError(ErrorCode.REQUEST_TIMED_OUT, str(error)) from None
            if outcome.status in (ApplyStatus.APPLIED, ApplyStatus.DUPLICATE):
                return result
            if outcome.status is ApplyStatus.STALE_TERM:
                raise NotLeaderError("a newer controller has taken over")
            if outcome.status is ApplyStatus.MALFORMED:
                raise BrookError(ErrorCode.UNKNOWN_SERVER_ERROR, outcome.detail)
            _log.debug("decision conflicted; deciding again", extra={"detail": outcome.detail})
        raise BrookError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"the state kept changing under the request ({WRITE_ATTEMPTS_MAX} attempts)",
        )

    async def read_point(self, deadline: float) -> None:
        """Makes a read linearizable on the leader; a follower reads its committed state."""
        if self.engine.is_leader():
            try:
                await self.barrier(deadline)
            except NotLeaderError:
                pass

    def unclean_enabled(self, topic: str) -> bool:
        image = self.view.image
        for resource in ((TOPIC, topic), (BROKER, "")):
            value = image.configs.get(resource, {}).get(UNCLEAN_LEADER_ELECTION)
            if value is not None:
                return value == "true"
        return self.settings.unclean_leader_election

    # ------------------------------------------------------------------ nodes

    async def register_broker(
        self, request: controller_pb2.RegisterBrokerRequest
    ) -> controller_pb2.RegisterBrokerResponse:
        def decide(changes: ChangeSet) -> metadata_pb2.BrokerRecord:
            ensure_cluster_id(changes)
            return register_broker(
                changes,
                request,
                self.leases,
                self.settings.session_timeout_ms,
                self.unclean_enabled,
            )

        record = await self.write(decide, self.deadline())
        _log.info(
            "node registered",
            extra={"node": record.node_id, "broker_epoch": record.broker_epoch},
        )
        return controller_pb2.RegisterBrokerResponse(
            broker_epoch=record.broker_epoch, cluster_id=self.view.image.cluster_id
        )

    async def broker_heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest
    ) -> controller_pb2.BrokerHeartbeatResponse:
        registration = self.view.registration_offset(request.node_id)

        def decide(changes: ChangeSet) -> bool:
            decision = heartbeat(changes, request, registration, self.unclean_enabled)
            self.leases.renew(request.node_id)
            return decision.caught_up

        caught_up = await self.write(decide, self.deadline())
        image = self.view.image
        broker = image.brokers[request.node_id]
        should_shut_down = broker.in_controlled_shutdown and all(
            p.leader != request.node_id for p in image.all_partitions()
        )
        if should_shut_down:
            # The node stops once told: its lease is released now, so its next incarnation
            # registers at once instead of waiting out broker.session.timeout.ms for
            # DUPLICATE_BROKER_REGISTRATION. (The lease check then fences it; it leads
            # nothing and is in no ISR by now.)
            self.leases.forget(request.node_id)
        return controller_pb2.BrokerHeartbeatResponse(
            is_caught_up=caught_up,
            is_fenced=broker.fenced,
            should_shut_down=should_shut_down,
            lease_ms=self.settings.session_timeout_ms,
            controller_epoch=self.epoch,
        )

    def _check_broker_epoch(self, image: ControllerImage, node_id: int, broker_epoch: int) -> None:
        broker = image.brokers.get(node_id)
        if broker is None:
            raise BrookError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, f"node {node_id} is not registered"
            )
        if broker.broker_epoch != broker_epoch:
            raise BrookError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker epoch {broker_epoch} is not the current one ({broker.broker_epoch})",
            )

    async def alter_partition(
        self, request: controller_pb2.AlterPartitionRequest
    ) -> controller_pb2.AlterPartitionResponse:
        def decide(changes: ChangeSet) -> list[controller_pb2.AlterPartitionResult]:
            self._check_broker_epoch(changes.image, request.node_id, request.broker_epoch)
            return [self._alter_one(changes, request.node_id, item) for item in request.partitions]

        results = await self.write(decide, self.deadline())
        image = self.view.image
        for result, item in zip(results, request.partitions, strict=True):
            topic = (
                image.topics.get(item.topic_id)
                if item.topic_id
                else image.topic_by_name(item.topic)
            )
            state = image.partition(topic.topic_id, item.partition) if topic is not None else None
            if state is not None:
                result.state.CopyFrom(state)
        return controller_pb2.AlterPartitionResponse(partitions=results)

    def _alter_one(
        self, changes: ChangeSet, node_id: int, item: controller_pb2.AlterPartitionItem
    ) -> controller_pb2.AlterPartitionResult:
        result = controller_pb2.AlterPartitionResult(topic=item.topic, partition=item.partition)
        image = changes.image
        topic = (
            image.topics.get(item.topic_id) if item.topic_id else image.topic_by_name(item.topic)
        )
        partition = changes.partition(topic.topic_id, item.partition) if topic is not None else None
        if topic is None or partition is None:
            code = (
                ErrorCode.UNKNOWN_TOPIC_ID
                if item.topic_id
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return _failed(result, code, "no such partition")
        result.topic = topic.name
        new_isr = list(item.new_isr)
        if partition.leader != node_id:
            return _failed(
                result, ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {partition.leader} leads it"
            )
        if item.leader_epoch < partition.leader_epoch:
            return _failed(result, ErrorCode.FENCED_LEADER_EPOCH, "stale leader epoch")
        if item.leader_epoch > partition.leader_epoch:
            return _failed(result, ErrorCode.UNKNOWN_LEADER_EPOCH, "leader epoch from the future")
        if item.partition_epoch != partition.partition_epoch:
            return _failed(
                result,
                ErrorCode.INVALID_UPDATE_VERSION,
                f"partition epoch {item.partition_epoch} is not {partition.partition_epoch}",
            )
        if len(set(new_isr)) != len(new_isr) or node_id not in new_isr:
            return _failed(
                result, ErrorCode.INVALID_REQUEST, "the ISR must hold the leader, each node once"
            )
        for replica in new_isr:
            if replica not in partition.replicas:
                return _failed(result, ErrorCode.INELIGIBLE_REPLICA, f"{replica} is not a replica")
            if replica not in partition.isr and not changes.is_live(replica):
                return _failed(
                    result, ErrorCode.INELIGIBLE_REPLICA, f"node {replica} is fenced or stopping"
                )
        updated = with_changes(partition, isr=new_isr)
        if updated is not partition:
            changes.put_partition(updated)
            # A moving partition whose target has just become all in sync completes now.
            complete_reassignment(changes, partition.topic_id, partition.partition)
        return result

    async def allocate_producer_ids(
        self, request: controller_pb2.AllocateProducerIdsRequest
    ) -> controller_pb2.AllocateProducerIdsResponse:
        def decide(changes: ChangeSet) -> metadata_pb2.ProducerIdsRecord:
            self._check_broker_epoch(changes.image, request.node_id, request.broker_epoch)
            last = changes.image.producer_ids
            first = last.first_producer_id + last.size if last is not None else 0
            check_producer_id_block(first)
            block = metadata_pb2.ProducerIdsRecord(
                node_id=request.node_id,
                broker_epoch=request.broker_epoch,
                first_producer_id=first,
                size=PRODUCER_ID_BLOCK_SIZE,
            )
            changes.put_producer_ids(block)
            return block

        block = await self.write(decide, self.deadline())
        return controller_pb2.AllocateProducerIdsResponse(
            first_producer_id=block.first_producer_id, size=block.size
        )

    async def describe_quorum(self) -> controller_pb2.DescribeQuorumResponse:
        status = await self.engine.describe()
        return controller_pb2.DescribeQuorumResponse(
            leader_id=status.leader_id if status.leader_id is not None else -1,
            leader_epoch=status.term,
            high_watermark=status.committed_offset,
            voters=[
                controller_pb2.QuorumVoter(
                    node_id=voter.node_id,
                    log_end_offset=voter.log_end_offset,
                    last_contact_ms=voter.last_contact_ms,
                    endpoints=self.grpc_endpoints(voter.node_id),
                )
                for voter in status.voters
            ],
        )

    def describe_cluster(self) -> admin_pb2.DescribeClusterResponse:
        image = self.view.image
        leader = self.engine.leader_id()
        return admin_pb2.DescribeClusterResponse(
            cluster_id=image.cluster_id,
            controller_id=leader if leader is not None else -1,
            controller_epoch=self.epoch,
            nodes=[
                admin_pb2.NodeDescription(
                    node_id=broker.node_id,
                    role=broker.role,
                    endpoints=broker.endpoints,
                    rack=broker.rack,
                    fenced=broker.fenced,
                    in_controlled_shutdown=broker.in_controlled_shutdown,
                    broker_epoch=broker.broker_epoch,
                )
                for _, broker in sorted(image.brokers.items())
            ],
            controllers=[
                admin_pb2.NodeDescription(
                    node_id=node_id,
                    role=common_pb2.NODE_ROLE_CONTROLLER,
                    endpoints=self.grpc_endpoints(node_id),
                )
                for node_id in sorted(self.settings.grpc_endpoints)
            ],
            metadata_offset=image.offset,
        )

    # ------------------------------------------------------------------ the leader's own work

    async def run_lease_checks(self) -> None:
        """Background task: fences nodes whose lease expired, all of them in one change."""
        interval_s = min(LEASE_CHECK_INTERVAL_MS_MAX, self.settings.session_timeout_ms / 4) / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not self.is_active():
                continue
            candidates = [n for n, b in self.view.image.brokers.items() if not b.fenced]
            expired = self.leases.expired(candidates, self.settings.session_timeout_ms)
            if not expired:
                continue
            await self._background_write(
                "fence nodes whose lease expired",
                functools.partial(fence_expired, node_ids=expired, unclean=self.unclean_enabled),
            )

    async def run_maintenance(self) -> None:
        """Background task: the cluster id, the internal topics (__consumer_offsets,
        __transaction_state), reassignments ready to complete (one whose last ISR change
        committed just before a failover) and the offsets partitions' coordinators."""
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            if not self.is_active():
                continue
            image = self.view.image
            if image.cluster is None:
                await self._background_write("write the cluster id", ensure_cluster_id)
            storage_nodes = len(image.live_brokers(common_pb2.NODE_ROLE_STORAGE_NODE))
            for topic in (self.settings.offsets_topic, self.settings.transaction_state_topic):
                if (
                    image.topic_by_name(topic.name) is None
                    and storage_nodes >= topic.replication_factor
                ):
                    await self._background_write(
                        f"create {topic.name}",
                        functools.partial(self._create_internal_topic, topic=topic),
                    )
            ready = ready_reassignments(image)
            if ready:
                await self._background_write(
                    "complete reassignments",
                    functools.partial(complete_ready_reassignments, partitions=ready),
                )
            if self._coordinators_unbalanced(self.view.image):
                await self._background_write(
                    "assign offsets partitions to coordinators", self._assign_coordinators
                )

    def _create_internal_topic(self, changes: ChangeSet, topic: InternalTopicSettings) -> None:
        if changes.image.topic_by_name(topic.name) is not None:
            return
        create_topic(changes, topic.creatable(), self.settings.topic_defaults, [], internal=True)

    def _offsets_partition_count(self, image: ControllerImage) -> int:
        topic = image.topic_by_name(OFFSETS_TOPIC)
        if topic is not None:
            return len(image.topic_partitions(topic.topic_id))
        return self.settings.offsets_topic.partitions

    def _coordinator_targets(self, image: ControllerImage) -> dict[int, int]:
        """offsets partition -> the coordinator that should own it: current owners keep their
        partitions while balanced, orphans go to the least loaded, and the most loaded give
        partitions away until no two coordinators differ by more than one."""
        live = [
            n
            for n in image.live_brokers(common_pb2.NODE_ROLE_GROUP_COORDINATOR)
            if not image.brokers[n].in_controlled_shutdown
        ]
        if not live:
            return {}
        owned: dict[int, list[int]] = {n: [] for n in live}
        orphans = []
        for index in range(self._offsets_partition_count(image)):
            record = image.coordinators.get(index)
            if record is not None and record.coordinator_id in owned:
                owned[record.coordinator_id].append(index)
            else:
                orphans.append(index)
        for index in orphans:
            owned[min(owned, key=lambda n: (len(owned[n]), n))].append(index)
        while True:
            most = max(owned, key=lambda n: (len(owned[n]), -n))
            least = min(owned, key=lambda n: (len(owned[n]), n))
            if len(owned[most]) - len(owned[least]) <= 1:
                break
            owned[least].append(owned[most].pop())
        return {index: node for node, indexes in owned.items() for index in indexes}

    def _coordinators_unbalanced(self, image: ControllerImage) -> bool:
        targets = self._coordinator_targets(image)
        return any(
            image.coordinators.get(index) is None
            or image.coordinators[index].coordinator_id != node
            for index, node in targets.items()
        )

    def _assign_coordinators(self, changes: ChangeSet) -> None:
        image = changes.image
        for index, node in sorted(self._coordinator_targets(image).items()):
            current = image.coordinators.get(index)
            if current is not None and current.coordinator_id == node:
                continue
            changes.put_coordinator(
                metadata_pb2.CoordinatorRecord(
                    offsets_partition=index,
                    coordinator_id=node,
                    coordinator_epoch=current.coordinator_epoch + 1 if current is not None else 0,
                )
            )

    async def run_leader_rebalance(self) -> None:
        """Background task: preferred-leader elections when leadership is imbalanced."""
        if not self.settings.auto_leader_rebalance:
            return
        while True:
            await asyncio.sleep(self.settings.imbalance_check_interval_s)
            if not self.is_active():
                continue
            imbalanced = imbalanced_partitions(
                self.view.image.all_partitions(), self.settings.imbalance_percentage
            )
            if imbalanced:
                await self._background_write(
                    "rebalance leadership", functools.partial(_elect_preferred, imbalanced)
                )

    async def _background_write(self, what: str, decide: Callable[[ChangeSet], object]) -> None:
        try:
            await self.write(decide, self.deadline())
        except BrookError as error:
            # Tried again on the next round; losing leadership meanwhile is ordinary.
            _log.info(
                "could not %s", what, extra={"error": error.code.name, "reason": error.message}
            )

    async def watch_engine(self) -> None:
        """Background task: stops the process (by failing) if the engine cannot go on."""
        while True:
            await asyncio.sleep(ENGINE_CHECK_INTERVAL_S)
            problem = self.engine.failure()
            if problem is not None:
                raise RuntimeError(f"the metadata state is incomplete: {problem}")


def _elect_preferred(partitions: list[metadata_pb2.PartitionRecord], changes: ChangeSet) -> None:
    for partition in partitions:
        preferred_election(changes, partition)


def _failed(
    result: controller_pb2.AlterPartitionResult, code: ErrorCode, message: str
) -> controller_pb2.AlterPartitionResult:
    result.error_code = code  # type: ignore[assignment]
    result.error_message = message
    return result
