"""The client's metadata cache: which node leads each partition, and where the nodes are.

Any storage node answers GetMetadata (Kafka's bootstrap.servers model). The cache asks for the
topics its client uses, publishes each answer as an immutable ``ClusterView`` (read without a
lock from any thread) and refreshes it when a request fails in a way that suggests leadership
moved (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a node that does not answer), when
``metadata.max.age.ms`` has passed, and when a new topic is used. Refreshes are spaced by
``retry.backoff.ms`` and back off exponentially while they fail.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import grpc

from brook.client.runtime import Notifier, Wakeup
from brook.errors import ErrorCode, error_code
from brook.rpc.addresses import listener_address
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.rpc.channels import ChannelPool
from brook.rpc.errors import rpc_error
from brook.v1 import common_pb2, storage_pb2

__all__ = ["EMPTY_CLUSTER", "ClusterView", "Metadata", "PartitionInfo", "TopicInfo"]

_log = logging.getLogger(__name__)

# Topic errors that mean "no such topic" rather than "try again shortly".
_MISSING_TOPIC_CODES = frozenset(
    {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION}
)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader_id: int  # -1: no leader now
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]  # indexed by partition id
    # Partitions with a leader, for the sticky partitioner.
    available: tuple[int, ...]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One metadata answer. ``missing`` maps topics the cluster said do not exist to why,
    ``unauthorized`` those it refused to describe to this client (TOPIC_AUTHORIZATION_FAILED)
    to why."""

    brokers: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    topics: Mapping[str, TopicInfo] = field(default_factory=lambda: MappingProxyType({}))
    missing: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    unauthorized: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def leader(self, topic: str, partition: int) -> tuple[int, str] | None:
        """(node id, host:port) of the partition's leader, or None when not known."""
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        leader_id = info.partitions[partition].leader_id
        address = self.brokers.get(leader_id)
        if address is None:
            return None
        return leader_id, address

    def leader_epoch(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return -1
        return info.partitions[partition].leader_epoch


EMPTY_CLUSTER = ClusterView()


def _topic_info(topic: storage_pb2.TopicMetadata) -> TopicInfo | None:
    by_id = {p.partition: p for p in topic.partitions}
    # Kafka numbers a topic's partitions 0..n-1; an answer with gaps is not usable yet.
    if not by_id or sorted(by_id) != list(range(len(by_id))):
        return None
    partitions = tuple(
        PartitionInfo(p, by_id[p].leader_id, by_id[p].leader_epoch) for p in range(len(by_id))
    )
    available = tuple(p.partition for p in partitions if p.leader_id >= 0)
    return TopicInfo(topic.name, partitions, available)


def parse_metadata(
    response: storage_pb2.GetMetadataResponse, previous: ClusterView, asked: Iterable[str]
) -> tuple[ClusterView, list[str]]:
    """The view an answer describes, and the asked topics it left unresolved (to retry)."""
    brokers: dict[int, str] = {}
    for broker in response.brokers:
        if broker.role not in (
            common_pb2.NODE_ROLE_UNSPECIFIED,
            common_pb2.NODE_ROLE_STORAGE_NODE,
        ):
            continue
        address = listener_address(broker.endpoints)
        if address is not None:
            brokers[broker.node_id] = address
    topics: dict[str, TopicInfo] = {}
    missing: dict[str, str] = {}
    unauthorized: dict[str, str] = {}
    unresolved: list[str] = []
    for topic in response.topics:
        code = error_code(topic.error_code)
        if code in _MISSING_TOPIC_CODES:
            missing[topic.name] = topic.error_message or code.name
            continue
        if code is ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            unauthorized[topic.name] = topic.error_message or code.name
            continue
        info = _topic_info(topic) if code is ErrorCode.NONE else None
        if info is None:
            unresolved.append(topic.name)
            if topic.name in previous.topics:
                topics[topic.name] = previous.topics[topic.name]
        else:
            topics[topic.name] = info
    answered = {topic.name for topic in response.topics}
    for name in asked:
        if name not in answered:
            unresolved.append(name)
            if name in previous.topics:
                topics[name] = previous.topics[name]
    view = ClusterView(
        MappingProxyType(brokers),
        MappingProxyType(topics),
        MappingProxyType(missing),
        MappingProxyType(unauthorized),
    )
    return view, unresolved


class Metadata:
    """The cache of one client; ``run()`` is its refresh task on the client's loop."""

    def __init__(
        self,
        *,
        bootstrap_servers: tuple[str, ...],
        network: ChannelPool,
        notifier: Notifier,
        wakeup: Wakeup,
        backoff: RetryBackoff,
        request_timeout_ms: int,
        max_age_ms: int,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._network = network
        self._notifier = notifier
        self._wakeup = wakeup
        self._backoff = backoff
        self._request_timeout_s = request_timeout_ms / 1000
        self._max_age_s = max_age_ms / 1000
        self._lock = threading.Lock()
        self._topics: set[str] = set()
        self._update_requested = False
        self._cluster = EMPTY_CLUSTER
        self._last_refresh = float("-inf")
        self._last_error = ""
        self._listeners: list[Wakeup] = []

    def add_listener(self, wakeup: Wakeup) -> None:
        """Set ``wakeup`` after every refresh (the sender and fetcher wait for leaders)."""
        self._listeners.append(wakeup)

    @property
    def cluster(self) -> ClusterView:
        return self._cluster

    @property
    def refreshed_at(self) -> float:
        """When (time.monotonic) the cluster last answered a refresh."""
        return self._last_refresh

    @property
    def last_error(self) -> str:
        """Why the last refresh failed ("" after a successful one), for error messages."""
        return self._last_error

    def add_topics(self, topics: Iterable[str]) -> None:
        """Follow these topics too (thread-safe); fetches their metadata if any is new."""
        with self._lock:
            new = set(topics) - self._topics
            self._topics |= new
        if new:
            self.request_update()

    def set_topics(self, topics: Iterable[str]) -> None:
        """Follow exactly these topics (thread-safe)."""
        wanted = set(topics)
        with self._lock:
            new = wanted - self._topics
            self._topics = wanted
        if new:
            self.request_update()

    def request_update(self) -> None:
        """Ask for a refresh as soon as back-off allows (thread-safe, cheap to repeat)."""
        self._update_requested = True
        self._wakeup.set()

    async def run(self) -> None:
        # Consecutive refreshes that failed or left a wanted topic unresolved or missing:
        # they space the next attempts exponentially, up to retry.backoff.max.ms.
        failures = 0
        not_before = 0.0
        while True:
            now = time.monotonic()
            with self._lock:
                topics = sorted(self._topics)
            due = self._update_requested or now - self._last_refresh >= self._max_age_s
            timeout_s: float | None = None
            if topics and due:
                if now >= not_before:
                    self._update_requested = False
                    try:
                        complete = await self._refresh(topics)
                    except Exception:
                        _log.exception("metadata refresh failed unexpectedly")
                        complete = False
                    failures = 0 if complete else failures + 1
                    wait_s = backoff_s(self._backoff, failures) if failures else 0.0
                    not_before = time.monotonic() + max(wait_s, self._backoff.base_ms / 1000)
                    continue
                timeout_s = not_before - now
            elif topics:
                timeout_s = self._last_refresh + self._max_age_s - now
            await self._wakeup.wait(timeout_s)

    def _candidates(self) -> list[str]:
        known = list(self._cluster.brokers.values())
        random.shuffle(known)
        return known + [address for address in self._bootstrap if address not in known]

    async def _refresh(self, topics: list[str]) -> bool:
        """Ask the nodes in turn until one answers; True when every topic was resolved."""
        request = storage_pb2.GetMetadataRequest(topics=topics)
        errors: list[str] = []
        for address in self._candidates():
            try:
                response = await self._network.storage(address).GetMetadata(
                    request, timeout=self._request_timeout_s
                )
            except grpc.aio.AioRpcError as error:
                errors.append(f"{address}: {rpc_error(error)[1]}")
                continue
            view, unresolved = parse_metadata(response, self._cluster, topics)
            self._cluster = view
            self._last_refresh = time.monotonic()
            self._last_error = ""
            if unresolved:
                # Topics in transition (no leader yet, partitions being created): ask again.
                # Missing topics are asked again only while someone waits for them.
                self._update_requested = True
            for listener in self._listeners:
                listener.set()
            self._notifier.notify()
            return not unresolved and not any(topic in view.missing for topic in topics)
        self._last_error = "no storage node answered GetMetadata: " + "; ".join(errors)
        _log.debug("%s", self._last_error)
        self._update_requested = True
        self._notifier.notify()
        return False
