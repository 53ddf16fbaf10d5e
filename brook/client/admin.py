"""The admin client: topics, configs, the cluster and leader elections, through the controllers.

    from brook.client.admin import Admin, NewTopic

    with Admin("127.0.0.1:9201") as admin:
        errors = admin.create_topics([NewTopic("events", num_partitions=6, replication_factor=3)])
        if errors["events"] is not None:
            raise errors["events"]
        print(admin.describe_topics(["events"])["events"].partitions)

``bootstrap_servers`` are controllers' GRPC addresses (any one reachable is enough). Requests go
to the active controller: the client finds it with DescribeQuorum and follows it when it
changes. Operations on several resources return, per resource, None or the ``ApiError`` the
controller answered with (Kafka's error codes), because one bad topic does not fail the others;
operations that read raise instead. Every call is bounded by ``default_api_timeout_ms``
(``ClientTimeoutError``), each RPC by ``request_timeout_ms``.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import grpc

from brook.client.errors import ApiError, ClientClosedError, ClientTimeoutError, api_error
from brook.client.types import TopicPartition
from brook.config import ConfigError, parse_host_port
from brook.errors import ErrorCode, error_code
from brook.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    metadata_pb2,
    storage_pb2,
)

__all__ = [
    "Admin",
    "AlterConfigOp",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "NewTopic",
    "NodeDescription",
    "PartitionDescription",
    "TopicDescription",
]

DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9201"
REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000
DEFAULT_API_TIMEOUT_MS_DEFAULT: Final = 60_000
RETRY_BACKOFF_MS_DEFAULT: Final = 100
_CHANNEL_OPTIONS: Final[list[tuple[str, Any]]] = [
    # A restarted controller should be reachable again at once, not after gRPC's backoff.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
# What makes the client look for the active controller and try again. After
# REQUEST_TIMED_OUT the change may have committed, so a retried creation can answer
# TOPIC_ALREADY_EXISTS, as with Kafka's admin client.
_RETRY_CODES: Final = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})
_UNREACHABLE: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)

_T = TypeVar("_T")


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


def _source_name(source: int) -> str:
    return admin_pb2.ConfigSource.Name(source).removeprefix("CONFIG_SOURCE_")


def _resource(resource: ConfigResource) -> admin_pb2.ConfigResource:
    return admin_pb2.ConfigResource(type=int(resource.type), name=resource.name)  # type: ignore[arg-type]


def _error(code: int, message: str) -> ApiError | None:
    return None if code == ErrorCode.NONE else api_error(error_code(code), message)


def _describe_node(node: admin_pb2.NodeDescription) -> NodeDescription:
    return NodeDescription(
        node_id=node.node_id,
        role=common_pb2.NodeRole.Name(node.role).removeprefix("NODE_ROLE_").lower(),
        endpoints={e.listener: f"{e.host}:{e.port}" for e in node.endpoints},
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


class Admin:
    """A synchronous admin client; not thread-safe (use one per thread)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = DEFAULT_BOOTSTRAP_SERVERS,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
    ) -> None:
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
        if not entries:
            problems.append("bootstrap_servers must name at least one controller")
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
        self._channels: dict[str, grpc.Channel] = {}
        self._leader_address: str | None = None
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        self._closed = True
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _channel(self, address: str) -> grpc.Channel:
        if self._closed:
            raise ClientClosedError("the admin client is closed")
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
            self._channels[address] = channel
        return channel

    def _find_leader(self, deadline: float) -> str | None:
        """Asks the controllers (the last known leader first) who leads; its GRPC address."""
        for address in dict.fromkeys([*filter(None, [self._leader_address]), *self._bootstrap]):
            channel = self._channel(address)
            stub = controller_pb2_grpc.ControllerServiceStub(channel)  # type: ignore[no-untyped-call]
            try:
                quorum = stub.DescribeQuorum(
                    controller_pb2.DescribeQuorumRequest(), timeout=self._rpc_timeout(deadline)
                )
            except grpc.RpcError:
                continue
            for voter in quorum.voters:
                if voter.node_id == quorum.leader_id:
                    for endpoint in voter.endpoints:
                        if endpoint.listener == "GRPC":
                            return f"{endpoint.host}:{endpoint.port}"
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
        deadline = time.monotonic() + (timeout_ms or self._api_timeout_ms) / 1000
        last_problem = "no controller answered"
        while True:
            address = self._leader_address or self._find_leader(deadline)
            if address is not None:
                channel = self._channel(address)
                stub = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
                try:
                    response = rpc(stub, self._rpc_timeout(deadline))
                except grpc.RpcError as error:
                    if error.code() not in _UNREACHABLE:
                        raise api_error(
                            ErrorCode.UNKNOWN_SERVER_ERROR, str(error.details())
                        ) from None
                    last_problem = f"{address}: {error.code().name}"
                    self._leader_address = None
                else:
                    codes = {error_code(code) for code in retry_codes(response)}
                    if not codes & _RETRY_CODES:
                        self._leader_address = address
                        return response
                    last_problem = f"{address}: {', '.join(sorted(c.name for c in codes))}"
                    self._leader_address = None
            if time.monotonic() + self._backoff_s >= deadline:
                raise ClientTimeoutError(
                    f"no answer from the active controller within the time allowed ({last_problem})"
                )
            time.sleep(self._backoff_s)

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
        self, names: Sequence[str] | None = None, *, include_internal: bool = False
    ) -> dict[str, TopicDescription]:
        """The named topics (all when None); raises ApiError if one does not exist."""
        request = admin_pb2.DescribeTopicsRequest(
            names=list(names or []), include_internal=include_internal
        )
        response = self._call(
            lambda stub, t: stub.DescribeTopics(request, timeout=t),
            lambda r: [t.error_code for t in r.topics],
        )
        described = {}
        for topic in response.topics:
            error = _error(topic.error_code, topic.error_message)
            if error is not None:
                raise error
            described[topic.name] = _describe_topic(topic)
        return described

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

    # ------------------------------------------------------------------ cluster

    def describe_cluster(self) -> ClusterDescription:
        response = self._call(
            lambda stub, t: stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=t),
            lambda r: [],
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
        return {
            TopicPartition(r.topic, r.partition): _error(r.error_code, r.error_message)
            for r in response.results
        }
