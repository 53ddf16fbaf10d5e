"""The admin client: topics, configs, client quotas (brook.client.quotas), the cluster and leader
elections through the controllers; consumer groups, their offsets and lag through the group
coordinators and storage nodes.

    from brook.client.admin import Admin, NewTopic

    with Admin("127.0.0.1:9201") as admin:
        errors = admin.create_topics([NewTopic("events", num_partitions=6, replication_factor=3)])
        if errors["events"] is not None:
            raise errors["events"]
        print(admin.describe_topics(["events"])["events"].partitions)

``bootstrap_servers`` are controllers' GRPC addresses (any one reachable is enough). With
``bootstrap_role="storage_node"`` they are storage nodes' instead (the producer's and
consumer's bootstrap servers, what a Spark job is given): topics, coordinators and partition
leaders are then found through a storage node's GetMetadata, so consumer groups, offsets,
transactions and topic descriptions work, and an operation only the controllers answer raises
ConfigError. Requests go
to the active controller (``brook.rpc.quorum``): the client finds it with DescribeQuorum and
follows it when it changes. Operations on several resources return, per resource, None or the
``ApiError`` the controller answered with (Kafka's error codes), because one bad topic does not
fail the others; operations that read raise instead. Every call is bounded by
``default_api_timeout_ms`` (``ClientTimeoutError``), each RPC by ``request_timeout_ms``.

Consumer-group operations (Kafka's AdminClient meanings) go to the group's coordinator: the
client learns the registered coordinators from the controllers (DescribeCluster), asks any of
them FindCoordinator, and finds it again after ``retry_backoff_ms`` while the answer is
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS. Listing asks every
coordinator and merges. Log end offsets come from ListOffsets at each partition's leader.

    with Admin("127.0.0.1:9201") as admin:
        for tp, lag in admin.describe_consumer_group_lag("billing").items():
            print(tp.topic, tp.partition, lag.committed_offset, lag.log_end_offset, lag.lag)
        admin.reset_consumer_group_offsets("billing", ["events"], to="earliest")

ACLs (Kafka's AclBinding / AclBindingFilter, brook.security.acl) through the controllers:

    from brook.security.acl import AclBinding, AclBindingFilter, Operation, PatternType, ...

    with Admin("127.0.0.1:9201") as admin:
        admin.create_acls([AclBinding(ResourceType.TOPIC, "orders-", PatternType.PREFIXED,
                                      "User:alice", "*", Operation.WRITE, Permission.ALLOW)])
        print(admin.describe_acls(AclBindingFilter(principal="User:alice")))

Users' SCRAM credentials (Kafka's AlterUserScramCredentials / DescribeUserScramCredentials):
``alter_user_scram_credentials`` salts and hashes each password here (the password never
leaves the client) and sends the SaltedPassword; ``describe_user_scram_credentials`` tells the
mechanisms and iteration counts, never more.

    with Admin("127.0.0.1:9201") as admin:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("alice", password)])
        print(admin.describe_user_scram_credentials(["alice"])["alice"])

Transactions (Kafka's Admin meanings): ``list_transactions`` asks every coordinator,
``describe_transactions`` each id's coordinator (FindCoordinator with key type TRANSACTION),
``describe_producers`` and ``abort_transaction`` (an ABORT marker, for a hanging transaction)
each partition's leader.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import grpc

from brook.client.errors import ApiError, ClientClosedError, ClientTimeoutError, api_error
from brook.client.group.protocol import CONSUMER_PROTOCOL_TYPE, decode_assignment
from brook.client.quotas import ClientQuotaEntity, ClientQuotaFilterComponent
from brook.client.requests import list_offsets_request
from brook.client.types import PreparedTransaction, TopicPartition
from brook.closing import Closing
from brook.config import ConfigError, parse_host_port
from brook.errors import ErrorCode, error_code
from brook.reserved import OFFSETS_TOPIC
from brook.rpc.addresses import format_address, listener_address
from brook.rpc.backoff import RetryBackoff
from brook.rpc.channels import ChannelPoolClosedError, ChannelSecurity, SyncChannelPool
from brook.rpc.coordinators import (
    COORDINATOR_ERRORS,
    Coordinator,
    CoordinatorNotFoundError,
    CoordinatorRefusedError,
    find_coordinator_sync,
    hinted_coordinator,
)
from brook.rpc.quorum import (
    UNREACHABLE_STATUSES,
    ControllerCallFailedError,
    ControllerQuorum,
    ControllerUnavailableError,
    attempts_within,
    call_active_controller_sync,
)
from brook.security import scram
from brook.security.acl import AclBinding, AclBindingFilter
from brook.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    group_pb2,
    group_pb2_grpc,
    metadata_pb2,
    storage_pb2,
    storage_pb2_grpc,
    transaction_pb2,
    transaction_pb2_grpc,
)

__all__ = [
    "DELETE_TO_HIGH_WATERMARK",
    "Admin",
    "AlterConfigOp",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupState",
    "MemberDescription",
    "NewTopic",
    "NodeDescription",
    "OffsetAndMetadata",
    "PartitionDescription",
    "PartitionLag",
    "PartitionReassignment",
    "ProducerState",
    "ScramCredentialInfo",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
    "TransactionState",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "check_topic_names",
]

DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9201"
REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000
DEFAULT_API_TIMEOUT_MS_DEFAULT: Final = 60_000
RETRY_BACKOFF_MS_DEFAULT: Final = 100
# delete_records' offset meaning "every record below the high watermark", as Kafka's.
DELETE_TO_HIGH_WATERMARK: Final = -1

_T = TypeVar("_T")
# The transaction timeout a fencing InitProducerId registers (Kafka's default
# transaction.timeout.ms): the fenced id starts no transaction of its own.
_FENCE_TRANSACTION_TIMEOUT_MS: Final = 60_000


class ConfigResourceType(enum.IntEnum):
    TOPIC = metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC
    BROKER = metadata_pb2.CONFIG_RESOURCE_TYPE_BROKER


@dataclass(frozen=True)
class ConfigResource:
    """A topic by name, or a node by id as a string ("" for every node's default)."""

    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def node(cls, node_id: int | None = None) -> ConfigResource:
        return cls(ConfigResourceType.BROKER, "" if node_id is None else str(node_id))


class AlterConfigOp(enum.Enum):
    SET = admin_pb2.ALTER_CONFIG_OP_SET
    DELETE = admin_pb2.ALTER_CONFIG_OP_DELETE
    APPEND = admin_pb2.ALTER_CONFIG_OP_APPEND
    SUBTRACT = admin_pb2.ALTER_CONFIG_OP_SUBTRACT


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 means the cluster default; ``replica_assignment`` (partition ->
    node ids, the preferred leader first) places the replicas explicitly instead."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True)
class PartitionReassignment:
    """A partition being moved (Kafka's PartitionReassignment): every replica it has now,
    the target's new ones and the old ones leaving once the target is in sync."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True)
class NodeDescription:
    node_id: int
    role: str
    endpoints: dict[str, str]
    rack: str
    fenced: bool
    in_controlled_shutdown: bool
    broker_epoch: int


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int | None
    controller_epoch: int
    nodes: tuple[NodeDescription, ...]
    controllers: tuple[NodeDescription, ...]
    metadata_offset: int


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    type: str
    synonyms: tuple[tuple[str, str | None, str], ...] = ()
    documentation: str = ""


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """A user's credential for one mechanism (SCRAM-SHA-256 or SCRAM-SHA-512), added or
    replaced; made from ``password`` with a fresh random salt."""

    user: str
    password: str = field(repr=False)
    mechanism: str = "SCRAM-SHA-512"
    iterations: int = scram.ITERATIONS_DEFAULT


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    """A user's credential for one mechanism, removed."""

    user: str
    mechanism: str = "SCRAM-SHA-512"


@dataclass(frozen=True)
class ScramCredentialInfo:
    """What is told of a stored credential: its mechanism and iteration count."""

    mechanism: str
    iterations: int


def _scram_mechanism(name: str) -> scram.ScramMechanism:
    mechanism = scram.MECHANISMS.get(name)
    if mechanism is None:
        raise ValueError(f"{name!r} is not a SCRAM mechanism ({', '.join(scram.MECHANISMS)})")
    return mechanism


def _upsertion(upsertion: UserScramCredentialUpsertion) -> admin_pb2.ScramCredentialUpsertion:
    mechanism = _scram_mechanism(upsertion.mechanism)
    if not upsertion.password:
        raise ValueError(f"{upsertion.user!r}: the password must not be empty")
    salt = scram.new_salt()
    return admin_pb2.ScramCredentialUpsertion(
        name=upsertion.user,
        mechanism=mechanism.code,  # type: ignore[arg-type]
        iterations=upsertion.iterations,
        salt=salt,
        salted_password=scram.salted_password(
            mechanism, upsertion.password, salt, upsertion.iterations
        ),
    )


class ConsumerGroupState(enum.StrEnum):
    """A classic group's state, by Kafka's names."""

    UNKNOWN = "Unknown"
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_GROUP_STATES: Final[Mapping[int, ConsumerGroupState]] = {
    group_pb2.GROUP_STATE_EMPTY: ConsumerGroupState.EMPTY,
    group_pb2.GROUP_STATE_PREPARING_REBALANCE: ConsumerGroupState.PREPARING_REBALANCE,
    group_pb2.GROUP_STATE_COMPLETING_REBALANCE: ConsumerGroupState.COMPLETING_REBALANCE,
    group_pb2.GROUP_STATE_STABLE: ConsumerGroupState.STABLE,
    group_pb2.GROUP_STATE_DEAD: ConsumerGroupState.DEAD,
}


@dataclass(frozen=True)
class ConsumerGroupListing:
    group_id: str
    state: ConsumerGroupState
    protocol_type: str


@dataclass(frozen=True)
class MemberDescription:
    """A member of a group. ``assignment`` is decoded from Kafka's ConsumerProtocolAssignment
    for consumer groups; it is empty for other protocol types (their bytes are opaque)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A group as its coordinator sees it; a group that does not exist is described as Dead
    with no members, as Kafka does."""

    group_id: str
    state: ConsumerGroupState
    protocol_type: str
    # The assignor the members agreed on ("range", "roundrobin", ...).
    protocol_name: str
    coordinator: int
    members: tuple[MemberDescription, ...]


class TransactionState(enum.StrEnum):
    """A transaction's state at its coordinator, by Kafka's names."""

    UNKNOWN = "Unknown"
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_TRANSACTION_STATES: Final[Mapping[int, TransactionState]] = {
    transaction_pb2.TRANSACTION_STATE_EMPTY: TransactionState.EMPTY,
    transaction_pb2.TRANSACTION_STATE_ONGOING: TransactionState.ONGOING,
    transaction_pb2.TRANSACTION_STATE_PREPARE_COMMIT: TransactionState.PREPARE_COMMIT,
    transaction_pb2.TRANSACTION_STATE_PREPARE_ABORT: TransactionState.PREPARE_ABORT,
    transaction_pb2.TRANSACTION_STATE_COMPLETE_COMMIT: TransactionState.COMPLETE_COMMIT,
    transaction_pb2.TRANSACTION_STATE_COMPLETE_ABORT: TransactionState.COMPLETE_ABORT,
    transaction_pb2.TRANSACTION_STATE_DEAD: TransactionState.DEAD,
    transaction_pb2.TRANSACTION_STATE_PREPARE_EPOCH_FENCE: TransactionState.PREPARE_EPOCH_FENCE,
}


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id as listed by its coordinator (node ``coordinator``)."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: TransactionState


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id as its coordinator (node ``coordinator``) sees it; the start time
    (ms since the epoch) is None when no transaction is open."""

    transactional_id: str
    coordinator: int
    state: TransactionState
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: tuple[TopicPartition, ...]
    groups: tuple[str, ...]


@dataclass(frozen=True)
class ProducerState:
    """A producer a partition's leader knows (Kafka's DescribeProducers): the coordinator
    epoch of its last marker and the first offset of its open transaction, None when there
    is none."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset: the next offset the group will consume."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True)
class PartitionLag:
    """How far a group is behind on one partition: ``lag = log_end_offset - committed_offset``
    (None where either is unknown: no commit yet, or the topic is gone)."""

    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None


def _unreachable(error: grpc.RpcError, address: str) -> str:
    """What to report when ``address`` could not be reached (the caller tries again or
    elsewhere); any other failure of the call is the server's error and is raised."""
    assert isinstance(error, grpc.Call)
    if error.code() not in UNREACHABLE_STATUSES:
        raise api_error(ErrorCode.UNKNOWN_SERVER_ERROR, str(error.details())) from None
    return f"{address}: {error.code().name}"


def _member_assignment(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    # Only consumer groups put ConsumerProtocolAssignment bytes there (Kafka's AdminClient
    # decodes them under the same condition); an undecodable one says nothing about partitions.
    if protocol_type not in (CONSUMER_PROTOCOL_TYPE, ""):
        return ()
    try:
        return tuple(decode_assignment(data).partitions)
    except ValueError:
        return ()


def _source_name(source: int) -> str:
    return admin_pb2.ConfigSource.Name(source).removeprefix("CONFIG_SOURCE_")


def _resource(resource: ConfigResource) -> admin_pb2.ConfigResource:
    return admin_pb2.ConfigResource(type=int(resource.type), name=resource.name)  # type: ignore[arg-type]


def _error(code: int, message: str) -> ApiError | None:
    return None if code == ErrorCode.NONE else api_error(error_code(code), message)


def _partition_errors(results: Iterable[Any]) -> dict[TopicPartition, ApiError | None]:
    """Per-partition results (topic, partition, error_code, error_message) as errors."""
    return {
        TopicPartition(r.topic, r.partition): _error(r.error_code, r.error_message) for r in results
    }


def _describe_node(node: admin_pb2.NodeDescription) -> NodeDescription:
    return NodeDescription(
        node_id=node.node_id,
        role=common_pb2.NodeRole.Name(node.role).removeprefix("NODE_ROLE_").lower(),
        endpoints={e.listener: format_address(e.host, e.port) for e in node.endpoints},
        rack=node.rack,
        fenced=node.fenced,
        in_controlled_shutdown=node.in_controlled_shutdown,
        broker_epoch=node.broker_epoch,
    )


def _describe_topic(topic: storage_pb2.TopicMetadata) -> TopicDescription:
    return TopicDescription(
        name=topic.name,
        topic_id=uuid.UUID(bytes=topic.topic_id),
        internal=topic.internal,
        partitions=tuple(
            PartitionDescription(
                partition=p.partition,
                leader=p.leader_id if p.leader_id >= 0 else None,
                leader_epoch=p.leader_epoch,
                replicas=tuple(p.replicas),
                isr=tuple(p.isr),
                offline_replicas=tuple(p.offline_replicas),
            )
            for p in topic.partitions
        ),
    )


class Admin(Closing):
    """A synchronous admin client; not thread-safe (use one per thread)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = DEFAULT_BOOTSTRAP_SERVERS,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        bootstrap_role: Literal["controller", "storage_node"] = "controller",
        security: ChannelSecurity | None = None,
    ) -> None:
        """``security``: how to reach the cluster (TLS, a client certificate, credentials;
        ``brook.client.channel_security`` makes one from confluent-kafka's settings); None:
        the process's default (plaintext unless set)."""
        entries = (
            [e.strip() for e in bootstrap_servers.split(",")]
            if isinstance(bootstrap_servers, str)
            else list(bootstrap_servers)
        )
        problems = []
        for entry in entries:
            try:
                parse_host_port(entry)
            except ValueError as e:
                problems.append(f"bootstrap_servers: {e}")
        if bootstrap_role not in ("controller", "storage_node"):
            problems.append(
                f"bootstrap_role={bootstrap_role!r} must be 'controller' or 'storage_node'"
            )
        if not entries:
            problems.append(f"bootstrap_servers must name at least one {bootstrap_role}")
        for name, value in (
            ("request_timeout_ms", request_timeout_ms),
            ("default_api_timeout_ms", default_api_timeout_ms),
        ):
            if value <= 0:
                problems.append(f"{name}={value} must be positive")
        if retry_backoff_ms < 0:
            problems.append(f"retry_backoff_ms={retry_backoff_ms} must not be negative")
        if problems:
            raise ConfigError(problems)
        self._bootstrap = entries
        self._request_timeout_s = request_timeout_ms / 1000
        self._api_timeout_ms = default_api_timeout_ms
        self._backoff_s = retry_backoff_ms / 1000
        self._retry_backoff = RetryBackoff(retry_backoff_ms, retry_backoff_ms)
        self._channels = SyncChannelPool(security=security)
        self._from_storage_nodes = bootstrap_role == "storage_node"
        self._quorum = None if self._from_storage_nodes else ControllerQuorum(entries)
        # (key type, group or transactional id) -> its coordinator, as last found.
        self._coordinators: dict[tuple[int, str], Coordinator] = {}
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        self._closed = True
        self._channels.close()

    def _channel(self, address: str) -> grpc.Channel:
        try:
            return self._channels.channel(address)
        except ChannelPoolClosedError:
            raise ClientClosedError("the admin client is closed") from None

    def _controllers(self) -> ControllerQuorum:
        """The controllers; ConfigError when bootstrapped from storage nodes, which do not
        say where the controllers are."""
        if self._quorum is None:
            raise ConfigError(
                [
                    "this admin client was bootstrapped from storage nodes "
                    f"({','.join(self._bootstrap)}); the operation is the controllers': "
                    "give their addresses instead"
                ]
            )
        return self._quorum

    def _find_leader(self, remaining_s: float) -> str | None:
        """Asks the controllers who leads; its GRPC address, None if none could say."""
        deadline = time.monotonic() + remaining_s
        for address in self._controllers().addresses:
            stub = controller_pb2_grpc.ControllerServiceStub(self._channel(address))  # type: ignore[no-untyped-call]
            try:
                quorum = stub.DescribeQuorum(
                    controller_pb2.DescribeQuorumRequest(), timeout=self._rpc_timeout(deadline)
                )
            except grpc.RpcError:
                continue
            for voter in quorum.voters:
                leader = (
                    listener_address(voter.endpoints) if voter.node_id == quorum.leader_id else None
                )
                if leader is not None:
                    return leader
        return None

    def _rpc_timeout(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ClientTimeoutError(f"no answer within {self._api_timeout_ms} ms")
        return min(self._request_timeout_s, remaining)

    def _call(
        self,
        rpc: Callable[[admin_pb2_grpc.AdminServiceStub, float], _T],
        retry_codes: Callable[[_T], Iterable[int]],
        timeout_ms: int | None = None,
    ) -> _T:
        """Sends to the active controller, following it across leader changes, until the
        answer holds no error that a retry elsewhere would fix, or the time runs out."""
        quorum = self._controllers()
        timeout_s = (timeout_ms or self._api_timeout_ms) / 1000
        try:
            response, _ = call_active_controller_sync(
                quorum,
                "the admin request",
                lambda address, t: rpc(
                    admin_pb2_grpc.AdminServiceStub(self._channel(address)),  # type: ignore[no-untyped-call]
                    t,
                ),
                retry_codes,
                timeout_s=timeout_s,
                attempt_timeout_s=self._request_timeout_s,
                backoff=self._retry_backoff,
                locate=self._find_leader,
                attempts_max=attempts_within(timeout_s, self._retry_backoff),
            )
        except ControllerCallFailedError as error:
            raise api_error(ErrorCode.UNKNOWN_SERVER_ERROR, str(error)) from None
        except ControllerUnavailableError as error:
            raise ClientTimeoutError(
                f"no answer from the active controller within the time allowed ({error.problem})"
            ) from None
        return response

    def _topic_results(
        self, method: str, request: Any, timeout_ms: int | None
    ) -> dict[str, ApiError | None]:
        response = self._call(
            lambda stub, t: getattr(stub, method)(request, timeout=t),
            lambda r: [t.error_code for t in r.topics],
            timeout_ms,
        )
        return {t.name: _error(t.error_code, t.error_message) for t in response.topics}

    # ------------------------------------------------------------------ topics

    def create_topics(
        self,
        new_topics: Sequence[NewTopic],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, ApiError | None]:
        request = admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreatableTopic(
                    name=topic.name,
                    num_partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    assignments=[
                        admin_pb2.ReplicaAssignment(partition=p, broker_ids=list(nodes))
                        for p, nodes in sorted((topic.replica_assignment or {}).items())
                    ],
                    configs=dict(topic.configs),
                )
                for topic in new_topics
            ],
            timeout_ms=timeout_ms or self._api_timeout_ms,
            validate_only=validate_only,
        )
        return self._topic_results("CreateTopics", request, timeout_ms)

    def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> dict[str, ApiError | None]:
        request = admin_pb2.DeleteTopicsRequest(
            names=list(names), timeout_ms=timeout_ms or self._api_timeout_ms
        )
        return self._topic_results("DeleteTopics", request, timeout_ms)

    def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, ApiError | None]:
        """Raises each named topic's partition count to the given total."""
        request = admin_pb2.CreatePartitionsRequest(
            topics=[
                admin_pb2.CreatePartitionsTopic(name=name, count=count)
                for name, count in new_counts.items()
            ],
            timeout_ms=timeout_ms or self._api_timeout_ms,
            validate_only=validate_only,
        )
        return self._topic_results("CreatePartitions", request, timeout_ms)

    def describe_topics(
        self,
        names: Sequence[str] | None = None,
        *,
        include_internal: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, TopicDescription]:
        """The named topics (all when None); raises ApiError if one does not exist."""
        described = {}
        for name, topic in self._topics(names, include_internal, timeout_ms).items():
            if isinstance(topic, ApiError):
                raise topic
            described[name] = topic
        return described

    def _topics(
        self, names: Sequence[str] | None, include_internal: bool, timeout_ms: int | None
    ) -> dict[str, TopicDescription | ApiError]:
        response: admin_pb2.DescribeTopicsResponse | storage_pb2.GetMetadataResponse
        if self._from_storage_nodes:
            response = self._storage_metadata(
                storage_pb2.GetMetadataRequest(
                    topics=list(names or []), include_internal=include_internal
                ),
                self._deadline(timeout_ms),
            )
        else:
            request = admin_pb2.DescribeTopicsRequest(
                names=list(names or []), include_internal=include_internal
            )
            response = self._call(
                lambda stub, t: stub.DescribeTopics(request, timeout=t),
                lambda r: [t.error_code for t in r.topics],
                timeout_ms,
            )
        return {
            topic.name: _error(topic.error_code, topic.error_message) or _describe_topic(topic)
            for topic in response.topics
        }

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return sorted(self.describe_topics(include_internal=include_internal))

    # ------------------------------------------------------------------ configs

    def describe_configs(
        self,
        resources: Sequence[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        request = admin_pb2.DescribeConfigsRequest(
            resources=[admin_pb2.DescribeConfigsResource(resource=_resource(r)) for r in resources],
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )
        response = self._call(
            lambda stub, t: stub.DescribeConfigs(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
        )
        described = {}
        for resource, result in zip(resources, response.results, strict=True):
            error = _error(result.error_code, result.error_message)
            if error is not None:
                raise error
            described[resource] = {
                entry.name: ConfigEntry(
                    name=entry.name,
                    value=entry.value if entry.HasField("value") else None,
                    source=_source_name(entry.source),
                    type=entry.type,
                    synonyms=tuple(
                        (s.name, s.value if s.HasField("value") else None, _source_name(s.source))
                        for s in entry.synonyms
                    ),
                    documentation=entry.documentation,
                )
                for entry in result.configs
            }
        return described

    def alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[tuple[str, AlterConfigOp, str | None]]],
        *,
        validate_only: bool = False,
    ) -> dict[ConfigResource, ApiError | None]:
        """Incremental changes: per resource, (name, operation, value) triples; all of one
        resource's changes apply or none."""
        resources = list(changes)
        request = admin_pb2.AlterConfigsRequest(
            resources=[
                admin_pb2.AlterConfigsResource(
                    resource=_resource(r),
                    configs=[
                        admin_pb2.AlterableConfig(name=name, op=op.value, value=value)
                        for name, op, value in changes[r]
                    ],
                )
                for r in resources
            ],
            validate_only=validate_only,
        )
        response = self._call(
            lambda stub, t: stub.AlterConfigs(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
        )
        return {
            resource: _error(result.error_code, result.error_message)
            for resource, result in zip(resources, response.results, strict=True)
        }

    def alter_client_quotas(
        self,
        alterations: Mapping[ClientQuotaEntity, Mapping[str, float | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ClientQuotaEntity, ApiError | None]:
        """Sets quotas (key -> value) and removes them (key -> None), per entity; all of one
        entity's changes apply or none (INVALID_REQUEST names the problem)."""
        entities = list(alterations)
        request = admin_pb2.AlterClientQuotasRequest(
            entries=[
                admin_pb2.ClientQuotaAlteration(
                    entity=entity.to_proto(),
                    ops=[
                        admin_pb2.ClientQuotaOp(key=key, value=value or 0.0, remove=value is None)
                        for key, value in alterations[entity].items()
                    ],
                )
                for entity in entities
            ],
            validate_only=validate_only,
            timeout_ms=timeout_ms or self._api_timeout_ms,
        )
        response = self._call(
            lambda stub, t: stub.AlterClientQuotas(request, timeout=t),
            lambda r: [result.error_code for result in r.entries],
            timeout_ms,
        )
        return {
            entity: _error(result.error_code, result.error_message)
            for entity, result in zip(entities, response.entries, strict=True)
        }

    def describe_client_quotas(
        self,
        components: Sequence[ClientQuotaFilterComponent] = (),
        *,
        strict: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of every entity the filter matches (Kafka's ClientQuotaFilter: with
        ``strict``, only entities with no part besides the components'); raises ApiError for a
        malformed filter."""
        request = admin_pb2.DescribeClientQuotasRequest(
            components=[component.to_proto() for component in components], strict=strict
        )
        response = self._call(
            lambda stub, t: stub.DescribeClientQuotas(request, timeout=t),
            lambda r: [r.error_code],
            timeout_ms,
        )
        error = _error(response.error_code, response.error_message)
        if error is not None:
            raise error
        return {
            ClientQuotaEntity.from_proto(entry.entity): dict(entry.values)
            for entry in response.entries
        }

    # ------------------------------------------------------------------ cluster

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        response = self._call(
            lambda stub, t: stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=t),
            lambda r: [],
            timeout_ms,
        )
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id if response.controller_id >= 0 else None,
            controller_epoch=response.controller_epoch,
            nodes=tuple(_describe_node(n) for n in response.nodes),
            controllers=tuple(_describe_node(n) for n in response.controllers),
            metadata_offset=response.metadata_offset,
        )

    def elect_leaders(
        self,
        partitions: Sequence[TopicPartition] | None = None,
        *,
        unclean: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ApiError | None]:
        """Preferred-leader election (or, with ``unclean``, a leader for offline partitions
        from outside the ISR) for the given partitions, or all. ELECTION_NOT_NEEDED is
        reported as an error, as Kafka does."""
        request = admin_pb2.ElectLeadersRequest(
            election_type=(
                admin_pb2.ELECTION_TYPE_UNCLEAN if unclean else admin_pb2.ELECTION_TYPE_PREFERRED
            ),
            partitions=[
                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in partitions or []
            ],
            timeout_ms=timeout_ms or self._api_timeout_ms,
        )
        response = self._call(
            lambda stub, t: stub.ElectLeaders(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
            timeout_ms,
        )
        return _partition_errors(response.results)

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ApiError | None]:
        """Moves each partition to its target replicas (the first the preferred leader), or
        cancels its move (None). Answered once each move has started: the data moves after,
        and ``list_partition_reassignments`` shows what is still moving."""
        partitions = list(reassignments)
        for tp in partitions:
            target = reassignments[tp]
            if target is not None and not target:
                raise ValueError(f"{tp}: a target needs a replica (None cancels a move)")
        request = admin_pb2.AlterPartitionReassignmentsRequest(
            reassignments=[
                admin_pb2.PartitionReassignment(
                    topic=tp.topic, partition=tp.partition, replicas=reassignments[tp] or ()
                )
                for tp in partitions
            ],
            timeout_ms=timeout_ms or self._api_timeout_ms,
        )
        response = self._call(
            lambda stub, t: stub.AlterPartitionReassignments(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
            timeout_ms,
        )
        return _partition_errors(response.results)

    def unregister_broker(self, node_id: int, *, timeout_ms: int | None = None) -> None:
        """Removes a stopped storage node that holds no replica from the cluster (Kafka's
        UnregisterBroker); ApiError otherwise, and nothing changes."""
        request = admin_pb2.UnregisterBrokerRequest(
            node_id=node_id, timeout_ms=timeout_ms or self._api_timeout_ms
        )
        response = self._call(
            lambda stub, t: stub.UnregisterBroker(request, timeout=t),
            lambda r: [r.error_code],
            timeout_ms,
        )
        error = _error(response.error_code, response.error_message)
        if error is not None:
            raise error

    def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None = None, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The partitions being moved (of ``partitions``, or all when None)."""
        if partitions is not None and not partitions:
            return {}
        request = admin_pb2.ListPartitionReassignmentsRequest(
            partitions=[
                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in partitions or []
            ]
        )
        response = self._call(
            lambda stub, t: stub.ListPartitionReassignments(request, timeout=t),
            lambda r: [],
            timeout_ms,
        )
        return {
            TopicPartition(r.topic, r.partition): PartitionReassignment(
                tuple(r.replicas), tuple(r.adding_replicas), tuple(r.removing_replicas)
            )
            for r in response.reassignments
        }

    # ------------------------------------------------------------------ ACLs

    def create_acls(
        self, bindings: Sequence[AclBinding], *, timeout_ms: int | None = None
    ) -> dict[AclBinding, ApiError | None]:
        """Creates the ACLs; per binding None or its error (INVALID_REQUEST naming what is
        wrong with it). An ACL that exists already is not stored twice."""
        request = admin_pb2.CreateAclsRequest(
            creations=[binding.to_proto() for binding in bindings],
            timeout_ms=timeout_ms or self._api_timeout_ms,
        )
        response = self._call(
            lambda stub, t: stub.CreateAcls(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
            timeout_ms,
        )
        return {
            binding: _error(result.error_code, result.error_message)
            for binding, result in zip(bindings, response.results, strict=True)
        }

    def describe_acls(
        self, acl_filter: AclBindingFilter, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """The ACLs the filter matches; ApiError for an invalid filter."""
        request = admin_pb2.DescribeAclsRequest(filter=acl_filter.to_proto())
        response = self._call(
            lambda stub, t: stub.DescribeAcls(request, timeout=t),
            lambda r: [r.error_code],
            timeout_ms,
        )
        error = _error(response.error_code, response.error_message)
        if error is not None:
            raise error
        return [AclBinding.from_proto(binding) for binding in response.acls]

    def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, list[AclBinding] | ApiError]:
        """Deletes every ACL each filter matches; per filter the ACLs deleted, or its error
        (then nothing was deleted for it)."""
        request = admin_pb2.DeleteAclsRequest(
            filters=[f.to_proto() for f in filters],
            timeout_ms=timeout_ms or self._api_timeout_ms,
        )
        response = self._call(
            lambda stub, t: stub.DeleteAcls(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
            timeout_ms,
        )
        return {
            acl_filter: _error(result.error_code, result.error_message)
            or [AclBinding.from_proto(binding) for binding in result.matching_acls]
            for acl_filter, result in zip(filters, response.results, strict=True)
        }

    # ------------------------------------------------------------------ SCRAM credentials

    def alter_user_scram_credentials(
        self,
        alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> dict[str, ApiError | None]:
        """Adds, replaces or removes credentials; per user, None or the error that left all
        of that user's alterations undone (UNACCEPTABLE_CREDENTIAL, DUPLICATE_RESOURCE,
        RESOURCE_NOT_FOUND for a credential that does not exist, ...). ValueError before
        anything is sent for an unknown mechanism or an empty password."""
        request = admin_pb2.AlterUserScramCredentialsRequest(
            upsertions=[
                _upsertion(a) for a in alterations if isinstance(a, UserScramCredentialUpsertion)
            ],
            deletions=[
                admin_pb2.ScramCredentialDeletion(
                    name=a.user,
                    mechanism=_scram_mechanism(a.mechanism).code,  # type: ignore[arg-type]
                )
                for a in alterations
                if isinstance(a, UserScramCredentialDeletion)
            ],
            timeout_ms=timeout_ms or self._api_timeout_ms,
        )
        response = self._call(
            lambda stub, t: stub.AlterUserScramCredentials(request, timeout=t),
            lambda r: [result.error_code for result in r.results],
            timeout_ms,
        )
        return {r.user: _error(r.error_code, r.error_message) for r in response.results}

    def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, tuple[ScramCredentialInfo, ...]]:
        """The mechanisms and iteration counts of the named users' credentials (of every user
        that has one when None); raises ApiError (RESOURCE_NOT_FOUND) if a user has none."""
        if users is not None and not users:
            return {}
        request = admin_pb2.DescribeUserScramCredentialsRequest(users=list(users or []))
        response = self._call(
            lambda stub, t: stub.DescribeUserScramCredentials(request, timeout=t),
            lambda r: [r.error_code],
            timeout_ms,
        )
        error = _error(response.error_code, response.error_message)
        if error is not None:
            raise error
        described = {}
        for result in response.results:
            error = _error(result.error_code, result.error_message)
            if error is not None:
                raise error
            described[result.user] = tuple(
                ScramCredentialInfo(scram.mechanism_by_code(i.mechanism).name, i.iterations)
                for i in result.credential_infos
            )
        return described

    # ------------------------------------------------------------------ consumer groups

    def _deadline(self, timeout_ms: int | None) -> float:
        return time.monotonic() + (timeout_ms or self._api_timeout_ms) / 1000

    def _remaining_ms(self, deadline: float) -> int:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            raise ClientTimeoutError(f"no answer within {self._api_timeout_ms} ms")
        return remaining_ms

    def _backoff(self, deadline: float, what: str, problem: str) -> None:
        if time.monotonic() + self._backoff_s >= deadline:
            raise ClientTimeoutError(f"{what} did not succeed in the time allowed ({problem})")
        time.sleep(self._backoff_s)

    def _node_addresses(self, role: str, deadline: float) -> dict[int, str]:
        """node id -> GRPC address of the unfenced nodes of ``role``, as the controllers know
        them (the admin client's view of what GetMetadata tells other clients), or as a
        storage node's GetMetadata lists them when bootstrapped from storage nodes."""
        if self._from_storage_nodes:
            metadata = self._storage_metadata(
                # Naming one small topic keeps the answer small (no topics means all of them).
                storage_pb2.GetMetadataRequest(topics=[OFFSETS_TOPIC]),
                deadline,
            )
            wanted = common_pb2.NodeRole.Value(f"NODE_ROLE_{role.upper()}")
            found = {
                broker.node_id: listener_address(broker.endpoints)
                for broker in metadata.brokers
                if broker.role == wanted and not broker.fenced
            }
            return {node_id: address for node_id, address in found.items() if address}
        cluster = self.describe_cluster(timeout_ms=self._remaining_ms(deadline))
        return {
            node.node_id: node.endpoints["GRPC"]
            for node in cluster.nodes
            if node.role == role and not node.fenced and "GRPC" in node.endpoints
        }

    def _storage_metadata(
        self, request: storage_pb2.GetMetadataRequest, deadline: float
    ) -> storage_pb2.GetMetadataResponse:
        """GetMetadata from the first bootstrap storage node that answers, trying them again
        (after back-off) until ``deadline``."""
        while True:
            problems = []
            for address in self._bootstrap:
                stub = storage_pb2_grpc.StorageServiceStub(self._channel(address))  # type: ignore[no-untyped-call]
                try:
                    answer: storage_pb2.GetMetadataResponse = stub.GetMetadata(
                        request, timeout=self._rpc_timeout(deadline)
                    )
                except grpc.RpcError as error:
                    problems.append(_unreachable(error, address))
                    continue
                return answer
            self._backoff(deadline, "GetMetadata", "; ".join(problems))

    def _coordinator_stub(self, address: str) -> group_pb2_grpc.GroupCoordinatorServiceStub:
        return group_pb2_grpc.GroupCoordinatorServiceStub(self._channel(address))  # type: ignore[no-untyped-call]

    def _group_call(
        self,
        group_id: str,
        rpc: Callable[[group_pb2_grpc.GroupCoordinatorServiceStub, float], _T],
        codes_of: Callable[[_T], Iterable[int]],
        deadline: float,
    ) -> tuple[int, _T]:
        """(coordinator node id, answer) of ``rpc`` sent to the group's coordinator (see
        ``_coordinator_call``)."""
        return self._coordinator_call(
            (group_pb2.COORDINATOR_TYPE_GROUP, group_id),
            lambda address, t: rpc(self._coordinator_stub(address), t),
            codes_of,
            deadline,
        )

    def _coordinator_call(
        self,
        key: tuple[int, str],
        rpc: Callable[[str, float], _T],
        codes_of: Callable[[_T], Iterable[int]],
        deadline: float,
    ) -> tuple[int, _T]:
        """(coordinator node id, answer) of ``rpc(address, timeout_s)`` sent to the coordinator
        of ``key`` ((key type, group or transactional id); ``brook.rpc.coordinators``), finding
        it again while the answer says it moved, is loading or is not there yet. A
        NOT_COORDINATOR hint is followed at once, but not twice in a row (the ownership is
        moving: waiting is better than ping-pong)."""
        key_type, name = key
        kind = "group" if key_type == group_pb2.COORDINATOR_TYPE_GROUP else "transactional id"
        redirected = False
        while True:
            found = self._coordinators.get(key)
            if found is None:
                try:
                    found = find_coordinator_sync(
                        name,
                        self._node_addresses("group_coordinator", deadline).values(),
                        lambda address, request, timeout_s: self._coordinator_stub(
                            address
                        ).FindCoordinator(request, timeout=min(timeout_s, self._request_timeout_s)),
                        deadline,
                        key_type,
                    )
                except CoordinatorNotFoundError as error:
                    self._backoff(deadline, f"finding the coordinator of {name!r}", str(error))
                    continue
                except CoordinatorRefusedError as error:
                    raise api_error(error.code, str(error)) from None
            try:
                answer = rpc(found.address, self._rpc_timeout(deadline))
            except grpc.RpcError as error:
                problem = _unreachable(error, found.address)
                self._coordinators.pop(key, None)
            else:
                codes = {error_code(c) for c in codes_of(answer)}
                retry = codes & COORDINATOR_ERRORS
                if not retry:
                    self._coordinators[key] = found
                    return found.node_id, answer
                problem = f"{found.address}: {', '.join(sorted(c.name for c in retry))}"
                hinted = hinted_coordinator(codes, getattr(answer, "coordinator", None))
                if hinted is not None and hinted != found and not redirected:
                    self._coordinators[key] = hinted
                    redirected = True
                    continue
                self._coordinators.pop(key, None)
            redirected = False
            self._backoff(deadline, f"a request to the coordinator of {kind} {name!r}", problem)

    def list_consumer_groups(
        self,
        *,
        states: Iterable[ConsumerGroupState] | None = None,
        timeout_ms: int | None = None,
    ) -> list[ConsumerGroupListing]:
        """Every group of every coordinator (in the given states), by group id. Raises when a
        registered coordinator does not answer in time: a partial list would look complete."""
        wanted = {state for state in states or ()}
        deadline = self._deadline(timeout_ms)
        listed: dict[str, ConsumerGroupListing] = {}
        answered: set[int] = set()
        problem = ""
        while True:
            coordinators = self._node_addresses("group_coordinator", deadline)
            for node_id, address in coordinators.items():
                if node_id in answered:
                    continue
                try:
                    answer = self._coordinator_stub(address).ListGroups(
                        group_pb2.ListGroupsRequest(), timeout=self._rpc_timeout(deadline)
                    )
                except grpc.RpcError as error:
                    problem = _unreachable(error, address)
                    continue
                code = error_code(answer.error_code)
                if code is not ErrorCode.NONE:
                    if not code.retriable:
                        raise api_error(code, answer.error_message)
                    problem = f"{address}: {code.name}"
                    continue
                answered.add(node_id)
                for group in answer.groups:
                    state = _GROUP_STATES.get(group.state, ConsumerGroupState.UNKNOWN)
                    if not wanted or state in wanted:
                        listed[group.group_id] = ConsumerGroupListing(
                            group.group_id, state, group.protocol_type
                        )
            if answered.issuperset(coordinators):
                return [listed[group_id] for group_id in sorted(listed)]
            self._backoff(deadline, "listing the groups of every coordinator", problem)

    def describe_consumer_groups(
        self, group_ids: Sequence[str], *, timeout_ms: int | None = None
    ) -> dict[str, ConsumerGroupDescription]:
        deadline = self._deadline(timeout_ms)
        described = {}
        for group_id in group_ids:
            node_id, answer = self._group_call(
                group_id,
                lambda stub, t, g=group_id: stub.DescribeGroups(  # type: ignore[misc]
                    group_pb2.DescribeGroupsRequest(group_ids=[g]), timeout=t
                ),
                lambda r: [g.error_code for g in r.groups],
                deadline,
            )
            group = answer.groups[0]
            error = _error(group.error_code, group.error_message)
            if error is not None:
                raise error
            described[group_id] = ConsumerGroupDescription(
                group_id=group_id,
                state=_GROUP_STATES.get(group.state, ConsumerGroupState.UNKNOWN),
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                coordinator=node_id,
                members=tuple(
                    MemberDescription(
                        member_id=m.member_id,
                        group_instance_id=(
                            m.group_instance_id if m.HasField("group_instance_id") else None
                        ),
                        client_id=m.client_id,
                        host=m.client_host,
                        assignment=_member_assignment(group.protocol_type, m.assignment),
                    )
                    for m in group.members
                ),
            )
        return described

    def delete_consumer_groups(
        self, group_ids: Sequence[str], *, timeout_ms: int | None = None
    ) -> dict[str, ApiError | None]:
        """Deletes each group with its committed offsets; a group that still has members
        gets NON_EMPTY_GROUP, one that does not exist GROUP_ID_NOT_FOUND."""
        deadline = self._deadline(timeout_ms)
        results: dict[str, ApiError | None] = {}
        for group_id in group_ids:
            try:
                _, answer = self._group_call(
                    group_id,
                    lambda stub, t, g=group_id: stub.DeleteGroups(  # type: ignore[misc]
                        group_pb2.DeleteGroupsRequest(group_ids=[g]), timeout=t
                    ),
                    lambda r: [result.error_code for result in r.results],
                    deadline,
                )
            except ApiError as error:
                results[group_id] = error
                continue
            result = answer.results[0]
            results[group_id] = _error(result.error_code, result.error_message)
        return results

    def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ApiError | None]:
        """Deletes the group's committed offsets of ``partitions`` (Kafka's
        Admin.deleteConsumerGroupOffsets): per partition None, or GROUP_SUBSCRIBED_TO_TOPIC
        when a member of the group subscribes to its topic (that offset stays). Raises
        ApiError GROUP_ID_NOT_FOUND for a group that does not exist."""
        request = group_pb2.DeleteOffsetsRequest(
            group_id=group_id,
            partitions=[
                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in partitions
            ],
        )
        _, answer = self._group_call(
            group_id,
            lambda stub, t: stub.DeleteOffsets(request, timeout=t),
            lambda r: [r.error_code],
            self._deadline(timeout_ms),
        )
        group_error = _error(answer.error_code, answer.error_message)
        if group_error is not None:
            raise group_error
        return {
            TopicPartition(p.topic, p.partition): _error(p.error_code, p.error_message)
            for p in answer.partitions
        }

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (of the given partitions, or all); a partition with
        no committed offset is left out."""
        request = group_pb2.FetchOffsetsRequest(
            group_id=group_id,
            partitions=[
                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in partitions or []
            ],
        )
        _, answer = self._group_call(
            group_id,
            lambda stub, t: stub.FetchOffsets(request, timeout=t),
            lambda r: [r.error_code, *(p.error_code for p in r.partitions)],
            self._deadline(timeout_ms),
        )
        error = _error(answer.error_code, answer.error_message)
        if error is not None:
            raise error
        offsets = {}
        for p in answer.partitions:
            error = _error(p.error_code, p.error_message)
            if error is not None:
                raise error
            if p.committed_offset >= 0:
                offsets[TopicPartition(p.topic, p.partition)] = OffsetAndMetadata(
                    p.committed_offset,
                    p.metadata,
                    p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None,
                )
        return offsets

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ApiError | None]:
        """Commits ``offsets`` for the group from outside it. As in Kafka, only a group with
        no members accepts this (an active one answers UNKNOWN_MEMBER_ID, or
        REBALANCE_IN_PROGRESS): its members own their offsets."""
        commits = {
            tp: value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            for tp, value in offsets.items()
        }
        negative = sorted(f"{tp.topic}-{tp.partition}" for tp, v in commits.items() if v.offset < 0)
        if negative:
            raise ValueError(f"offsets must not be negative: {', '.join(negative)}")
        request = group_pb2.CommitOffsetsRequest(
            group_id=group_id,
            # Kafka's marks of a commit from outside group management.
            generation_id=-1,
            member_id="",
            partitions=[
                group_pb2.OffsetCommitPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    committed_offset=value.offset,
                    committed_leader_epoch=(
                        -1 if value.leader_epoch is None else value.leader_epoch
                    ),
                    metadata=value.metadata,
                )
                for tp, value in commits.items()
            ],
        )
        _, answer = self._group_call(
            group_id,
            lambda stub, t: stub.CommitOffsets(request, timeout=t),
            lambda r: [p.error_code for p in r.partitions],
            self._deadline(timeout_ms),
        )
        return {
            TopicPartition(p.topic, p.partition): _error(p.error_code, p.error_message)
            for p in answer.partitions
        }

    def _list_offsets(
        self, specs: Mapping[TopicPartition, tuple[int, int]], deadline: float
    ) -> dict[TopicPartition, int | None]:
        """ListOffsets ((spec, timestamp_ms) per partition) answered by each partition's
        leader; None for a partition of a topic that does not exist (see ``_at_leaders``)."""

        def ask(
            stub: storage_pb2_grpc.StorageServiceStub, tps: list[TopicPartition], timeout_s: float
        ) -> list[tuple[TopicPartition, int, str, int]]:
            request = list_offsets_request(common_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED, tps, specs)
            answer = stub.ListOffsets(request, timeout=timeout_s)
            return [
                (TopicPartition(p.topic, p.partition), p.error_code, p.error_message, p.offset)
                for p in answer.partitions
            ]

        return self._at_leaders(specs, ask, "looking up offsets", deadline)

    def _at_leaders(
        self,
        partitions: Iterable[TopicPartition],
        ask: Callable[
            [storage_pb2_grpc.StorageServiceStub, list[TopicPartition], float],
            list[tuple[TopicPartition, int, str, _T]],
        ],
        what: str,
        deadline: float,
    ) -> dict[TopicPartition, _T | None]:
        """Each partition's result from its leader: ``ask(stub, partitions, timeout_s)``
        answers (partition, error code, message, result) for those of one leader. None for a
        partition that does not exist; partitions whose leader moved, is not known yet or
        answered a retriable code are asked again after a backoff, until ``deadline``; any
        other code raises."""
        found: dict[TopicPartition, _T | None] = {}
        wanted = list(dict.fromkeys(partitions))
        problem = ""
        while True:
            pending = [tp for tp in wanted if tp not in found]
            if not pending:
                return found
            by_leader, missing, leaderless = self._partition_leaders(pending, deadline)
            found.update(dict.fromkeys(missing))
            problem = leaderless or problem
            for address, tps in by_leader.items():
                stub = storage_pb2_grpc.StorageServiceStub(self._channel(address))  # type: ignore[no-untyped-call]
                try:
                    answers = ask(stub, tps, self._rpc_timeout(deadline))
                except grpc.RpcError as error:
                    problem = _unreachable(error, address)
                    continue
                for tp, raw_code, message, result in answers:
                    code = error_code(raw_code)
                    if code is ErrorCode.NONE:
                        found[tp] = result
                    elif code.retriable:
                        problem = f"{tp.topic}-{tp.partition} on {address}: {code.name}"
                    else:
                        raise api_error(code, f"{tp.topic}-{tp.partition}: {message or code.name}")
            if len(found) < len(wanted):
                self._backoff(deadline, f"{what} at the partition leaders", problem)

    def _partition_leaders(
        self, partitions: Iterable[TopicPartition], deadline: float
    ) -> tuple[dict[str, list[TopicPartition]], list[TopicPartition], str]:
        """``partitions`` by the GRPC address of their leader, those that do not exist (their
        topic or partition), and a problem naming one without a live leader ("" if none)."""
        wanted = list(partitions)
        topics = self._topics(
            sorted({tp.topic for tp in wanted}), True, self._remaining_ms(deadline)
        )
        nodes = self._node_addresses("storage_node", deadline)
        by_leader: dict[str, list[TopicPartition]] = {}
        missing: list[TopicPartition] = []
        problem = ""
        for tp in wanted:
            topic = topics.get(tp.topic)
            if topic is None or isinstance(topic, ApiError):
                missing.append(tp)
                continue
            leader = next((p.leader for p in topic.partitions if p.partition == tp.partition), -1)
            if leader == -1:
                missing.append(tp)
            elif leader is None or leader not in nodes:
                problem = f"{tp.topic}-{tp.partition} has no live leader"
            else:
                by_leader.setdefault(nodes[leader], []).append(tp)
        return by_leader, missing, problem

    def delete_records(
        self,
        before: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int | ApiError]:
        """Deletes every record of each partition below its offset (DELETE_TO_HIGH_WATERMARK:
        its high watermark),
        at the partition's leader, as Kafka's Admin.deleteRecords (kafka-delete-records.sh).
        Returns per partition its new log start offset (the low watermark), or the ApiError
        the leader answered: OFFSET_OUT_OF_RANGE for an offset above the high watermark,
        UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist. Leader moves and
        retriable errors are retried until ``timeout_ms`` (ClientTimeoutError)."""
        for tp, offset in before.items():
            if offset < DELETE_TO_HIGH_WATERMARK:
                raise ValueError(f"{tp.topic}-{tp.partition}: offset {offset} is below -1")
        deadline = self._deadline(timeout_ms)

        def ask(
            stub: storage_pb2_grpc.StorageServiceStub, tps: list[TopicPartition], timeout_s: float
        ) -> list[tuple[TopicPartition, int, str, int | ApiError]]:
            request = storage_pb2.DeleteRecordsRequest(
                partitions=[
                    storage_pb2.DeleteRecordsPartition(
                        topic=tp.topic, partition=tp.partition, offset=before[tp]
                    )
                    for tp in tps
                ],
                timeout_ms=int(timeout_s * 1000),
            )
            answer = stub.DeleteRecords(request, timeout=timeout_s)
            results: list[tuple[TopicPartition, int, str, int | ApiError]] = []
            for p in answer.partitions:
                tp = TopicPartition(p.topic, p.partition)
                code = error_code(p.error_code)
                if code is ErrorCode.NONE or code.retriable:
                    results.append((tp, p.error_code, p.error_message, p.low_watermark))
                else:
                    # This partition's answer, not a reason to fail the others.
                    error = api_error(code, f"{tp.topic}-{tp.partition}: {p.error_message}")
                    results.append((tp, ErrorCode.NONE, "", error))
            return results

        found = self._at_leaders(before, ask, "deleting records", deadline)
        return {
            tp: api_error(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} does not exist"
            )
            if result is None
            else result
            for tp, result in found.items()
        }

    def describe_consumer_group_lag(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, PartitionLag]:
        """Per partition the group has committed to or its members are assigned: the
        committed offset, the log end offset (the high watermark, what a consumer can read)
        and the difference, by partition."""
        deadline = self._deadline(timeout_ms)
        committed = self.list_consumer_group_offsets(
            group_id, timeout_ms=self._remaining_ms(deadline)
        )
        group = self.describe_consumer_groups([group_id], timeout_ms=self._remaining_ms(deadline))
        assigned = {tp for member in group[group_id].members for tp in member.assignment}
        partitions = sorted(set(committed) | assigned)
        ends = self._list_offsets(
            {tp: (storage_pb2.OFFSET_SPEC_LATEST, -1) for tp in partitions}, deadline
        )
        lags = {}
        for tp in partitions:
            offset = committed[tp].offset if tp in committed else None
            end = ends[tp]
            lag = None if offset is None or end is None else end - offset
            lags[tp] = PartitionLag(offset, end, lag)
        return lags

    def reset_consumer_group_offsets(
        self,
        group_id: str,
        topics: Sequence[str | TopicPartition] | None = None,
        *,
        to: Literal["earliest", "latest"] | None = None,
        timestamp_ms: int | None = None,
        offset: int | None = None,
        shift_by: int | None = None,
        dry_run: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Moves the group's committed offsets, as kafka-consumer-groups.sh --reset-offsets
        does, on every partition of each topic named in ``topics`` or on each partition named
        (None: the partitions it has committed offsets on, as Kafka's --all-topics; not the
        other partitions of their topics), to exactly one of: the log start
        (``to="earliest"``), the log end (``to="latest"``), the first record at or after
        ``timestamp_ms`` (the log end when there is none), ``offset``, or the committed offset
        moved by ``shift_by`` (ValueError naming the partitions without one). As in Kafka, a
        target outside [log start, log end] is clamped into it. Returns the new offsets;
        ``dry_run`` only computes them.

        Refused (ApiError NON_EMPTY_GROUP) unless the group has no members, dry run or not,
        as Kafka's tool refuses; the coordinator also rejects the commit itself if a member
        joins in between."""
        targets_given = [to, timestamp_ms, offset, shift_by]
        if sum(target is not None for target in targets_given) != 1:
            raise ValueError(
                'give exactly one of to="earliest"|"latest", timestamp_ms=, offset= and shift_by='
            )
        if to is not None and to not in ("earliest", "latest"):
            raise ValueError(f'to must be "earliest" or "latest", not {to!r}')
        for name, value in (("timestamp_ms", timestamp_ms), ("offset", offset)):
            if value is not None and value < 0:
                raise ValueError(f"{name}={value} must not be negative")
        if topics is not None:
            check_topic_names([t if isinstance(t, str) else t.topic for t in topics])
        deadline = self._deadline(timeout_ms)
        group = self.describe_consumer_groups([group_id], timeout_ms=self._remaining_ms(deadline))
        state = group[group_id].state
        if state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
            raise api_error(
                ErrorCode.NON_EMPTY_GROUP,
                f"offsets of group {group_id!r} can only be reset while it has no members; "
                f"it is {state}",
            )
        committed = self.list_consumer_group_offsets(
            group_id, timeout_ms=self._remaining_ms(deadline)
        )
        partitions = (
            sorted(committed) if topics is None else self._reset_partitions(topics, deadline)
        )
        if shift_by is not None:
            uncommitted = [f"{tp.topic}-{tp.partition}" for tp in partitions if tp not in committed]
            if uncommitted:
                raise ValueError(
                    f"--shift-by moves committed offsets; group {group_id!r} has none on "
                    + ", ".join(uncommitted)
                )
        starts = self._existing_offsets(partitions, storage_pb2.OFFSET_SPEC_EARLIEST, deadline)
        ends = self._existing_offsets(partitions, storage_pb2.OFFSET_SPEC_LATEST, deadline)
        if to is not None:
            wanted = starts if to == "earliest" else ends
        elif timestamp_ms is not None:
            found = self._list_offsets(
                {tp: (storage_pb2.OFFSET_SPEC_TIMESTAMP, timestamp_ms) for tp in partitions},
                deadline,
            )
            wanted = {}
            for tp in partitions:
                at = found[tp]
                # A timestamp after every record: Kafka's tool moves to the end.
                wanted[tp] = ends[tp] if at is None or at < 0 else at
        elif offset is not None:
            wanted = dict.fromkeys(partitions, offset)
        else:
            assert shift_by is not None
            wanted = {tp: committed[tp].offset + shift_by for tp in partitions}
        targets = {tp: min(max(wanted[tp], starts[tp]), ends[tp]) for tp in sorted(partitions)}
        if not dry_run:
            errors = self.alter_consumer_group_offsets(
                group_id, targets, timeout_ms=self._remaining_ms(deadline)
            )
            for error in errors.values():
                if error is not None:
                    raise error
        return targets

    def _reset_partitions(
        self, topics: Sequence[str | TopicPartition], deadline: float
    ) -> list[TopicPartition]:
        """Every partition of each topic named, and each partition named; ApiError
        UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist."""
        names = sorted({t if isinstance(t, str) else t.topic for t in topics})
        described = self.describe_topics(
            names, include_internal=True, timeout_ms=self._remaining_ms(deadline)
        )
        partitions: list[TopicPartition] = []
        for entry in topics:
            name = entry if isinstance(entry, str) else entry.topic
            existing = [TopicPartition(name, p.partition) for p in described[name].partitions]
            if isinstance(entry, str):
                partitions += existing
            elif entry in existing:
                partitions.append(entry)
            else:
                raise api_error(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{entry.topic}-{entry.partition} does not exist",
                )
        return list(dict.fromkeys(partitions))

    def _existing_offsets(
        self, partitions: Sequence[TopicPartition], spec: int, deadline: float
    ) -> dict[TopicPartition, int]:
        """ListOffsets ``spec`` of each partition; ApiError UNKNOWN_TOPIC_OR_PARTITION when one
        is gone."""
        found = self._list_offsets({tp: (spec, -1) for tp in partitions}, deadline)
        offsets = {}
        for tp, result in found.items():
            if result is None:
                raise api_error(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} is gone"
                )
            offsets[tp] = result
        return offsets

    # ------------------------------------------------------------------ transactions

    def _transactions_stub(
        self, address: str
    ) -> transaction_pb2_grpc.TransactionCoordinatorServiceStub:
        return transaction_pb2_grpc.TransactionCoordinatorServiceStub(self._channel(address))  # type: ignore[no-untyped-call]

    def list_transactions(
        self,
        *,
        states: Iterable[TransactionState] | None = None,
        producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> list[TransactionListing]:
        """The transactional ids every coordinator knows, by id (only those in ``states``, of
        ``producer_ids``, or with a transaction open longer than ``duration_ms``, when given).
        Raises when a registered coordinator does not answer in time: a partial list would
        look complete."""
        by_name = {state: code for code, state in _TRANSACTION_STATES.items()}
        request = transaction_pb2.ListTransactionsRequest(
            state_filters=[by_name[state] for state in states or ()],  # type: ignore[misc]
            producer_id_filters=list(producer_ids or ()),
            duration_filter_ms=-1 if duration_ms is None else duration_ms,
        )
        deadline = self._deadline(timeout_ms)
        listed: dict[str, TransactionListing] = {}
        answered: set[int] = set()
        problem = ""
        while True:
            coordinators = self._node_addresses("group_coordinator", deadline)
            for node_id, address in coordinators.items():
                if node_id in answered:
                    continue
                try:
                    answer = self._transactions_stub(address).ListTransactions(
                        request, timeout=self._rpc_timeout(deadline)
                    )
                except grpc.RpcError as error:
                    problem = _unreachable(error, address)
                    continue
                code = error_code(answer.error_code)
                if code is not ErrorCode.NONE:
                    if not code.retriable:
                        raise api_error(code, answer.error_message or code.name)
                    problem = f"{address}: {code.name}"
                    continue
                answered.add(node_id)
                for listed_txn in answer.transactions:
                    listed[listed_txn.transactional_id] = TransactionListing(
                        listed_txn.transactional_id,
                        node_id,
                        listed_txn.producer_id,
                        _TRANSACTION_STATES.get(listed_txn.state, TransactionState.UNKNOWN),
                    )
            if answered.issuperset(coordinators):
                return [listed[name] for name in sorted(listed)]
            self._backoff(deadline, "listing the transactions of every coordinator", problem)

    def describe_transactions(
        self, transactional_ids: Sequence[str], *, timeout_ms: int | None = None
    ) -> dict[str, TransactionDescription]:
        """Each transactional id as its coordinator describes it; raises ApiError
        TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows."""
        deadline = self._deadline(timeout_ms)
        described = {}
        for transactional_id in transactional_ids:
            request = transaction_pb2.DescribeTransactionsRequest(
                transactional_ids=[transactional_id]
            )
            node_id, answer = self._coordinator_call(
                (group_pb2.COORDINATOR_TYPE_TRANSACTION, transactional_id),
                lambda address, t, r=request: self._transactions_stub(  # type: ignore[misc]
                    address
                ).DescribeTransactions(r, timeout=t),
                lambda r: [d.error_code for d in r.transactions],
                deadline,
            )
            found = next(
                (d for d in answer.transactions if d.transactional_id == transactional_id), None
            )
            if found is None:
                raise api_error(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"the coordinator answered without transactional id {transactional_id!r}",
                )
            error = _error(found.error_code, found.error_message)
            if error is not None:
                raise error
            described[transactional_id] = TransactionDescription(
                transactional_id=transactional_id,
                coordinator=node_id,
                state=_TRANSACTION_STATES.get(found.state, TransactionState.UNKNOWN),
                producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
                transaction_timeout_ms=found.transaction_timeout_ms,
                transaction_start_time_ms=(
                    found.transaction_start_time_ms
                    if found.transaction_start_time_ms >= 0
                    else None
                ),
                topic_partitions=tuple(
                    TopicPartition(p.topic, p.partition) for p in found.partitions
                ),
                groups=tuple(found.groups),
            )
        return described

    def complete_transaction(
        self,
        prepared: PreparedTransaction,
        *,
        commit: bool,
        timeout_ms: int | None = None,
    ) -> None:
        """Ends a prepared two-phase transaction (KIP-939: ``Producer.prepare_transaction``)
        with EndTxn under its producer id and epoch, from any process: commits it
        (``commit``) or aborts it. Idempotent: a repeat after the outcome was written
        succeeds (while its markers are being written the coordinator says
        CONCURRENT_TRANSACTIONS, asked again until done). Raises ApiError PRODUCER_FENCED
        or INVALID_PRODUCER_ID_MAPPING when the transaction is no longer that producer's
        (fenced: it was aborted), INVALID_TXN_STATE for the opposite outcome."""
        request = transaction_pb2.EndTxnRequest(
            transactional_id=prepared.transactional_id,
            producer_id=prepared.producer_id,
            producer_epoch=prepared.producer_epoch,
            committed=commit,
        )
        answer = self._settled_transaction_call(
            prepared.transactional_id,
            lambda address, t: self._transactions_stub(address).EndTxn(request, timeout=t),
            "EndTxn",
            self._deadline(timeout_ms),
        )
        error = _error(answer.error_code, answer.error_message)
        if error is not None:
            raise error

    def fence_transactional_id(
        self, transactional_id: str, *, timeout_ms: int | None = None
    ) -> None:
        """Fences whoever holds ``transactional_id`` (InitProducerId, as a new producer
        instance would): its open transaction, prepared or not, is aborted, and its producer
        epoch is bumped so that the old holder can neither write nor end a transaction
        again. Returns once the abort is complete."""
        request = transaction_pb2.TransactionCoordinatorServiceInitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=_FENCE_TRANSACTION_TIMEOUT_MS,
            producer_id=-1,
            producer_epoch=-1,
        )
        answer = self._settled_transaction_call(
            transactional_id,
            lambda address, t: self._transactions_stub(address).InitProducerId(request, timeout=t),
            "InitProducerId",
            self._deadline(timeout_ms),
        )
        error = _error(answer.error_code, answer.error_message)
        if error is not None:
            raise error

    def _settled_transaction_call(
        self,
        transactional_id: str,
        rpc: Callable[[str, float], Any],
        what: str,
        deadline: float,
    ) -> Any:
        """The answer of ``rpc`` at the coordinator of ``transactional_id`` (see
        ``_coordinator_call``), asked again while it is CONCURRENT_TRANSACTIONS (a state
        change of the id, such as its markers, is in progress)."""
        while True:
            _, answer = self._coordinator_call(
                (group_pb2.COORDINATOR_TYPE_TRANSACTION, transactional_id),
                rpc,
                lambda r: [r.error_code],
                deadline,
            )
            if error_code(answer.error_code) is not ErrorCode.CONCURRENT_TRANSACTIONS:
                return answer
            self._backoff(
                deadline, f"{what} for transactional id {transactional_id!r}", "in progress"
            )

    def describe_producers(
        self, partitions: Sequence[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader knows, with their open transactions;
        raises UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist."""

        def ask(
            stub: storage_pb2_grpc.StorageServiceStub, tps: list[TopicPartition], timeout_s: float
        ) -> list[tuple[TopicPartition, int, str, list[ProducerState]]]:
            answer = stub.DescribeProducers(
                storage_pb2.DescribeProducersRequest(
                    partitions=[
                        common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                        for tp in tps
                    ]
                ),
                timeout=timeout_s,
            )
            return [
                (
                    TopicPartition(p.topic, p.partition),
                    p.error_code,
                    p.error_message,
                    [
                        ProducerState(
                            producer_id=producer.producer_id,
                            producer_epoch=producer.producer_epoch,
                            last_sequence=producer.last_sequence,
                            last_timestamp_ms=producer.last_timestamp,
                            coordinator_epoch=(
                                producer.coordinator_epoch
                                if producer.coordinator_epoch >= 0
                                else None
                            ),
                            current_transaction_start_offset=(
                                producer.current_txn_start_offset
                                if producer.current_txn_start_offset >= 0
                                else None
                            ),
                        )
                        for producer in p.producers
                    ],
                )
                for p in answer.partitions
            ]

        found = self._at_leaders(
            partitions, ask, "describing producers", self._deadline(timeout_ms)
        )
        return {tp: _existing(tp, producers) for tp, producers in found.items()}

    def abort_transaction(
        self,
        partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Write an ABORT marker for the producer's open transaction on ``partition`` (Kafka's
        Admin.abortTransaction, for a hanging transaction its coordinator lost track of). The
        leader refuses it (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) when
        ``producer_epoch`` or ``coordinator_epoch`` is older than the producer's; -1 cannot
        be fenced by a coordinator epoch."""

        def ask(
            stub: storage_pb2_grpc.StorageServiceStub, tps: list[TopicPartition], timeout_s: float
        ) -> list[tuple[TopicPartition, int, str, bool]]:
            answer = stub.WriteTxnMarkers(
                storage_pb2.WriteTxnMarkersRequest(
                    markers=[
                        storage_pb2.TxnMarker(
                            producer_id=producer_id,
                            producer_epoch=producer_epoch,
                            committed=False,
                            coordinator_epoch=coordinator_epoch,
                            partitions=[
                                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                                for tp in tps
                            ],
                        )
                    ],
                    timeout_ms=int(timeout_s * 1000),
                ),
                timeout=timeout_s,
            )
            return [
                (TopicPartition(p.topic, p.partition), p.error_code, p.error_message, True)
                for marker in answer.markers
                for p in marker.partitions
            ]

        found = self._at_leaders(
            [partition], ask, "writing the abort marker", self._deadline(timeout_ms)
        )
        _existing(partition, found[partition])


def check_topic_names(topics: Sequence[str]) -> None:
    """ValueError unless ``topics`` names at least one topic, with no empty name."""
    if not topics or not all(topics):
        raise ValueError("topics must name at least one topic, with no empty name")


def _existing(tp: TopicPartition, result: _T | None) -> _T:
    """``result`` of a partition asked at its leader, ApiError where it does not exist."""
    if result is None:
        raise api_error(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} does not exist"
        )
    return result
