"""The ``cluster_factory`` fixture: real Brook clusters for tests, always torn down.

Each cluster is a ``brook.launcher.LocalCluster`` on free 127.0.0.1 ports (or another host),
with its data in the test's tmp_path. Teardown stops every process (SIGTERM, then SIGKILL after
the stop timeout), checks that none is left alive, and removes the cluster's files when the
test passed; when it failed they are kept, their path is reported, and the tail of every
process's log is attached to the failure report.

    def test_something(cluster_factory: ClusterFactory) -> None:
        cluster = cluster_factory(storage_nodes=1)
        address = cluster.grpc_address("storage-node-1")
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from brook.launcher import DEFAULT_HOST, LocalCluster, ProcessSpec, Role, Topology
from brook.metadata.image import MetadataImage
from brook.ports import port_is_free
from brook.rpc.channels import sync_channel
from brook.v1 import controller_pb2, controller_pb2_grpc

# Generous: several engineers' test runs share two cores, and Python services take a
# while to import gRPC and protobuf when the machine is busy.
STARTUP_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 10_000
LOG_TAIL_LINES = 60
CONTROLLER_RPC_TIMEOUT_S = 5.0
COORDINATOR_BALANCE_TIMEOUT_S = 30.0
# __transaction_state partitions of a test cluster unless a test sets its own: the default 50
# (x3 replicas) would make every cluster's storage nodes host 150 more replicas, on 2 shared
# cores, for the few tests that use transactions.
TRANSACTION_STATE_PARTITIONS = 2
PORT_OFFSET_ATTEMPTS_MAX = 100

_FACTORY_KEY = pytest.StashKey["ClusterFactory"]()
_FAILED_KEY = pytest.StashKey[bool]()


def require_ipv6_loopback() -> None:
    """Fails the test, saying why, unless this machine can bind the IPv6 loopback (``::1``):
    the IPv6 tests are part of the suite (CI's machine has ``::1``), never skipped."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as error:
        pytest.fail(f"this test needs the IPv6 loopback (::1), which cannot be bound: {error}")


def free_port_offset(scratch_dir: Path) -> int:
    """A port offset under which every well-known port of the default topology (`brook
    cluster up`'s table, deploy/README.md) is free on 127.0.0.1, the gateway's per-broker
    Kafka ports included; ``scratch_dir`` holds the throwaway plan.

    Offsets below 10000 keep every port below the band free ports are drawn from (20000 up).
    Nothing reserves the ports: whoever uses the offset should bind them soon.
    """
    for _ in range(PORT_OFFSET_ATTEMPTS_MAX):
        offset = random.randrange(1_000, 10_000)
        plan = LocalCluster(scratch_dir, Topology(), port_offset=offset)
        ports = [port for spec in plan.processes.values() for port in spec.ports.values()]
        for name in plan.names(Role.GATEWAY):
            ports += plan.kafka_node_ports(name).values()
        if all(port_is_free(DEFAULT_HOST, port) for port in ports):
            return offset
    raise AssertionError(
        f"no port offset with every well-known port free in {PORT_OFFSET_ATTEMPTS_MAX} tries"
    )


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float, poll_s: float = 0.05
) -> float:
    """Seconds until ``condition()`` held; fails the test naming ``what`` after ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)
    return time.monotonic() - started


def metadata_image(cluster: LocalCluster) -> MetadataImage | None:
    """The metadata image of the first reachable controller's snapshot (None if none
    answers)."""
    request = controller_pb2.WatchMetadataRequest(node_id=-1, after_offset=-1)
    for address in cluster.controller_bootstrap_servers.split(","):
        with sync_channel(address) as channel:
            stub = controller_pb2_grpc.ControllerServiceStub(channel)  # type: ignore[no-untyped-call]
            stream = stub.WatchMetadata(request, timeout=CONTROLLER_RPC_TIMEOUT_S)
            try:
                first = next(stream)
            except grpc.RpcError:
                continue
            finally:
                stream.cancel()
            return MetadataImage.from_records(first.records, first.offset)
    return None


def coordinator_owners(cluster: LocalCluster) -> dict[int, int]:
    """__consumer_offsets partition -> the group coordinator the controllers assign it to, as
    the first reachable controller's metadata snapshot says ({} if none answers)."""
    image = metadata_image(cluster)
    if image is None:
        return {}
    return {index: c.coordinator_id for index, c in image.coordinators.items()}


def wait_for_coordinator_balance(
    cluster: LocalCluster, timeout_s: float = COORDINATOR_BALANCE_TIMEOUT_S
) -> None:
    """Until the controllers have spread the offsets partitions evenly over every group
    coordinator of ``cluster``. They reassign partitions a moment after a coordinator
    registers; a test that looks up a group's coordinator before that can see it move."""
    coordinators = {cluster.spec(n).node_id for n in cluster.names(Role.GROUP_COORDINATOR)}

    def balanced() -> bool:
        owners = coordinator_owners(cluster)
        counts = [list(owners.values()).count(node) for node in coordinators]
        return (
            bool(owners) and set(owners.values()) <= coordinators and max(counts) - min(counts) <= 1
        )

    wait_until(balanced, "the offsets partitions to spread over the group coordinators", timeout_s)


def replication_cluster(
    factory: ClusterFactory,
    *,
    controllers: int,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    lag_time_max_ms: int,
    storage_node_config: Mapping[str, str] | None = None,
    storage_nodes: int = 3,
    controller_config: Mapping[str, str] | None = None,
) -> LocalCluster:
    """Storage nodes (three unless told) that replicate through ``controllers`` controllers,
    with the short leases and lag bounds fault tests need (and no leader rebalancing behind
    their back); ``storage_node_config`` / ``controller_config``: more settings of the storage
    nodes / controllers."""
    return factory(
        controllers=controllers,
        storage_nodes=storage_nodes,
        group_coordinators=0,
        gateways=0,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": str(session_timeout_ms),
                "auto.leader.rebalance.enable": "false",
                "offsets.topic.num.partitions": "1",
                "transaction.state.log.num.partitions": "1",
                **(controller_config or {}),
            },
            "storage-node": {
                "broker.session.timeout.ms": str(session_timeout_ms),
                "broker.heartbeat.interval.ms": str(heartbeat_interval_ms),
                "replica.lag.time.max.ms": str(lag_time_max_ms),
                "replica.fetch.wait.max.ms": "200",
                "replica.fetch.backoff.ms": "100",
                **(storage_node_config or {}),
            },
        },
    )


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def shared_cluster(
    tmp_path_factory: pytest.TempPathFactory, name: str, **cluster: Any
) -> Iterator[LocalCluster]:
    """A started cluster for a module's or a session's tests (``ClusterFactory``'s arguments in
    ``cluster``), under a temporary directory named after ``name``: stopped on the way out, its
    files kept only when leaving with an error (a start that failed), for diagnosis."""
    factory = ClusterFactory(Path(tmp_path_factory.mktemp(name)) / "clusters")
    failed = True
    try:
        yield factory(**cluster)
        failed = False
    finally:
        factory.close(keep_files=failed)


@contextmanager
def one_node_transactions_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    *,
    controller: Mapping[str, str] | None = None,
    storage_node: Mapping[str, str] | None = None,
    group_coordinator: Mapping[str, str] | None = None,
    gateways: int = 0,
) -> Iterator[LocalCluster]:
    """A ``shared_cluster`` of one controller, one storage node, two coordinators and
    ``gateways`` gateways, whose internal topics (offsets, transaction state) have one
    replica, on the one storage node; ``controller``, ``storage_node`` and
    ``group_coordinator``: more config of that role."""
    with shared_cluster(
        tmp_path_factory,
        name,
        controllers=1,
        storage_nodes=1,
        group_coordinators=2,
        gateways=gateways,
        config_overrides={
            "controller": {
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                **(controller or {}),
            },
            "storage-node": dict(storage_node or {}),
            "group-coordinator": dict(group_coordinator or {}),
        },
    ) as started:
        yield started


class ClusterFactory:
    """Makes clusters under ``root`` and owns their teardown."""

    def __init__(
        self,
        root: Path,
        *,
        startup_timeout_ms: int = STARTUP_TIMEOUT_MS,
        stop_timeout_ms: int = STOP_TIMEOUT_MS,
    ) -> None:
        self.root = root
        self.startup_timeout_ms = startup_timeout_ms
        self.stop_timeout_ms = stop_timeout_ms
        self.clusters: list[LocalCluster] = []
        # Every pid ever started, so teardown can prove that none outlives the test.
        self._pids: set[int] = set()

    def __call__(
        self,
        *,
        controllers: int = 3,
        storage_nodes: int = 3,
        group_coordinators: int = 1,
        gateways: int = 1,
        config_overrides: Mapping[str, Mapping[str, str]] | None = None,
        start: bool = True,
        spawn_prefix: Callable[[ProcessSpec], Sequence[str]] | None = None,
        host: str = DEFAULT_HOST,
        tls: bool = False,
    ) -> LocalCluster:
        """A new cluster in its own directory, every process bound to and advertising
        ``host``; started (all SERVING) unless ``start=False``. ``tls``: gRPC over mutual TLS
        (``brook cluster up --tls``'s certificates, in the cluster's ``tls/``)."""
        overrides = {role: dict(values) for role, values in (config_overrides or {}).items()}
        overrides.setdefault("controller", {}).setdefault(
            "transaction.state.log.num.partitions", str(TRANSACTION_STATE_PARTITIONS)
        )
        cluster = LocalCluster(
            self.root / f"cluster-{len(self.clusters) + 1}",
            Topology(controllers, storage_nodes, group_coordinators, gateways),
            host=host,
            config_overrides=overrides,
            startup_timeout_ms=self.startup_timeout_ms,
            stop_timeout_ms=self.stop_timeout_ms,
            spawn_prefix=spawn_prefix,
            tls=tls,
        )
        self.clusters.append(cluster)
        if start:
            self.start(cluster)
            if group_coordinators > 1:
                wait_for_coordinator_balance(cluster)
        return cluster

    def start(self, cluster: LocalCluster, name: str | None = None) -> None:
        """``cluster.start(name)``, remembering the pids for the teardown check."""
        try:
            cluster.start(name)
        finally:
            self.track(cluster)

    def track(self, cluster: LocalCluster) -> None:
        """Remember the pids of whatever ``cluster`` runs now (call after starting a process
        directly through the cluster)."""
        for name in cluster.names():
            pid = cluster.pid(name)
            if pid is not None:
                self._pids.add(pid)
            last = cluster.last_exit(name)
            if last is not None:
                self._pids.add(last.pid)

    def log_sections(self) -> list[tuple[str, str]]:
        """(title, last lines of its log) for every process of every cluster."""
        return [
            (f"{name} log ({cluster.spec(name).log_path})", cluster.log_tail(name, LOG_TAIL_LINES))
            for cluster in self.clusters
            for name in cluster.names()
            if cluster.spec(name).log_path.exists()
        ]

    def close(self, *, keep_files: bool) -> None:
        """Stop everything; fail if any process survived; remove files unless ``keep_files``."""
        errors = []
        for cluster in self.clusters:
            self.track(cluster)
            try:
                cluster.stop()
            except Exception as error:  # keep stopping the other clusters
                errors.append(f"stopping {cluster.base_dir}: {error!r}")
        survivors = sorted(pid for pid in self._pids if pid_alive(pid))
        if survivors:
            errors.append(f"processes still alive after teardown: {survivors}")
        if not keep_files and not survivors:
            shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise RuntimeError("; ".join(errors))


STANDALONE_STORAGE_NODE = "storage-node-1"


def start_standalone_storage_node(
    cluster_factory: ClusterFactory, static_topics: str, **settings: str
) -> LocalCluster:
    """One storage node (``STANDALONE_STORAGE_NODE``) serving ``static_topics`` with
    ``settings``; the planned controller is never started."""
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=0,
        config_overrides={STANDALONE_STORAGE_NODE: {"static.topics": static_topics, **settings}},
        start=False,
    )
    cluster_factory.start(cluster, STANDALONE_STORAGE_NODE)
    return cluster


@pytest.fixture
def cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Generator[ClusterFactory, None, None]:
    factory = ClusterFactory(tmp_path / "clusters")
    request.node.stash[_FACTORY_KEY] = factory
    try:
        yield factory
    finally:
        failed = request.node.stash.get(_FAILED_KEY, False)
        if failed:
            print(f"\ncluster files kept for diagnosis under {factory.root}")
        factory.close(keep_files=failed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach the tail of every cluster process's log to the report."""
    report = yield
    if report.failed:
        item.stash[_FAILED_KEY] = True
        factory = item.stash.get(_FACTORY_KEY, None)
        if factory is not None:
            for title, text in factory.log_sections():
                report.sections.append((title, text))
    return report
