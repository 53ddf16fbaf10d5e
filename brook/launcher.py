"""The local cluster launcher: every Brook service as a separate process on loopback.

``LocalCluster`` is what ``brook cluster up`` runs and what the test fixture builds on. It
plans a topology (process names, node ids, ports, directories), writes each process's
``server.properties``, starts the processes in dependency order (controllers, storage nodes,
group coordinators, gateways), waits for each to report gRPC health SERVING, and stops them
in the reverse order. Every wait is bounded, and a failed start stops whatever it started.

Layout of a cluster directory (``./.brook`` for ``brook cluster up``)::

    cluster.json                  the plan: topology, host, ports, node ids (kept across runs)
    controller-1/server.properties, server.log, server.pid, metadata/
    storage-node-1/...            data/   (log.dirs)
    group-coordinator-1/...       state/  (group.coordinator.state.dir)
    gateway-1/...
    tls/                          with ``--tls``: the cluster's CA, keystores and the
                                  operator's client.properties (brook.security.cluster_tls)

Well-known ports (``brook cluster up``; process N of a role, N from 1, plus ``--port-offset``):

    storage-node-N       GRPC 9100+N    METRICS 10100+N
    controller-N         GRPC 9200+N    METRICS 10200+N    RAFT 9300+N
    group-coordinator-N  GRPC 9400+N    METRICS 10400+N
    gateway-N            GRPC 9500+N    METRICS 10500+N    PLAINTEXT (Kafka) 9091+N, so
                         gateway-1 is on 9092
                         kafka.node.port.base 9600+100*(N-1): the Kafka port of storage
                         node (broker) n it presents is base + n, so gateway-1 shows
                         broker 1 at 9601; room for storage ids 1-99

Every process's METRICS port (Prometheus's /metrics, docs/metrics.md) is its GRPC port + 1000;
a cluster.json written before METRICS existed gets it that way when the cluster is reused.

Free ports (``port_offset=None``, the tests): every listener a free port, and each gateway a
block of free consecutive ports for its per-broker Kafka ports, one for every storage id the
cluster has and ``NODE_PORT_IDS_SPARE`` more for nodes a test adds later.

Node ids: storage nodes 1..N (the broker ids Kafka users see in replica lists), controllers
1001.., group coordinators 2001.., gateways 3001..; disjoint, so no two processes of a
cluster ever share an id.

Not thread-safe: drive one ``LocalCluster`` from one thread.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import enum
import fcntl
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self

from brook.client.admin import Admin, UserScramCredentialUpsertion
from brook.config import ENV_PREFIX, METRICS_LISTENER
from brook.health import HealthStatus, wait_until_serving
from brook.ports import allocate_free_port_block, allocate_free_ports, port_is_free
from brook.rpc.addresses import format_address
from brook.rpc.channels import ChannelSecurity, set_default_security
from brook.security.cluster_tls import (
    ADMIN_COMMON_NAME,
    KAFKA_ADMIN_MECHANISM,
    KAFKA_LISTENER_PROTOCOL,
    ClusterTls,
)

_log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_DIR = Path(".brook")
STARTUP_TIMEOUT_MS_DEFAULT = 30_000
# Services promise to exit within 5 s of SIGTERM; the launcher allows twice that before
# it escalates to SIGKILL, so a slow but orderly shutdown is not cut short.
STOP_TIMEOUT_MS_DEFAULT = 10_000
# brook cluster remove-node: draining the node's replicas, stopping and unregistering it.
REMOVE_NODE_TIMEOUT_MS_DEFAULT = 600_000
# After SIGKILL only the kernel is left to act; this bounds the wait for it.
KILL_WAIT_MS = 5_000
_STOP_POLL_INTERVAL_S = 0.02
LOG_TAIL_LINES_DEFAULT = 40
_LOG_TAIL_BYTES_MAX = 64 * 1024
LAYOUT_FILE = "cluster.json"
# The layout's list of the storage nodes remove_storage_node took out of the cluster.
_REMOVED = "removed"
# The layout's list of the processes add-node started, which the directory's running
# `brook cluster up` stops with its own.
_DETACHED = "detached"
# Held while the layout is rewritten; `brook cluster up` holds LAUNCHER_LOCK_FILE while it runs.
LAYOUT_LOCK_FILE = ".cluster.json.lock"
LAUNCHER_LOCK_FILE = ".launcher.lock"
# How long `brook cluster up` tries for the launcher lock (another command's probe of it).
LAUNCHER_LOCK_WAIT_S = 1.0
_LOCK_POLL_S = 0.02
_LAYOUT_FORMAT = 1
CONFIG_FILE = "server.properties"
_QUORUM_PASSWORD_BYTES = 24
LOG_FILE = "server.log"
PID_FILE = "server.pid"
# config_overrides key for settings of every process.
ALL_PROCESSES = "*"

GRPC = "GRPC"
RAFT = "RAFT"
PLAINTEXT = "PLAINTEXT"
METRICS = METRICS_LISTENER
# A process's METRICS port is its GRPC port + this (the well-known ports' convention).
METRICS_PORT_STEP = 1000


class Role(enum.StrEnum):
    """A kind of Brook process; the value is the prefix of its process names."""

    CONTROLLER = "controller"
    STORAGE_NODE = "storage-node"
    GROUP_COORDINATOR = "group-coordinator"
    GATEWAY = "gateway"

    @property
    def module(self) -> str:
        """The package run with ``python -m``."""
        return "brook_" + self.value.replace("-", "_")


# Each role needs the ones before it to be serving: everything follows the controllers'
# metadata, group coordinators keep offsets on storage nodes, gateways front them all.
START_ORDER: tuple[Role, ...] = (
    Role.CONTROLLER,
    Role.STORAGE_NODE,
    Role.GROUP_COORDINATOR,
    Role.GATEWAY,
)

LISTENERS: Mapping[Role, tuple[str, ...]] = {
    Role.CONTROLLER: (GRPC, RAFT, METRICS),
    Role.STORAGE_NODE: (GRPC, METRICS),
    Role.GROUP_COORDINATOR: (GRPC, METRICS),
    Role.GATEWAY: (GRPC, PLAINTEXT, METRICS),
}

# Port of process 1 of a role; process N listens on this + N - 1 (+ the port offset).
WELL_KNOWN_FIRST_PORT: Mapping[tuple[Role, str], int] = {
    (Role.STORAGE_NODE, GRPC): 9101,
    # 9201: where controller.quorum.bootstrap.servers points by default, so a service
    # started on its own with default settings finds the controllers of `brook cluster up`.
    (Role.CONTROLLER, GRPC): 9201,
    (Role.CONTROLLER, RAFT): 9301,
    (Role.GROUP_COORDINATOR, GRPC): 9401,
    (Role.GATEWAY, GRPC): 9501,
    # Kafka's own default port, what every Kafka client tries first.
    (Role.GATEWAY, PLAINTEXT): 9092,
    **{
        (role, METRICS): port + METRICS_PORT_STEP
        for role, port in (
            (Role.STORAGE_NODE, 9101),
            (Role.CONTROLLER, 9201),
            (Role.GROUP_COORDINATOR, 9401),
            (Role.GATEWAY, 9501),
        )
    },
}

# A gateway's kafka.node.port.base (``brook cluster up``): gateway-N's is this + STEP * (N-1);
# the step leaves room for every storage node id COUNT_LIMITS allows (1-99).
KAFKA_NODE_PORT_BASE_FIRST = 9600
KAFKA_NODE_PORT_BASE_STEP = 100
KAFKA_NODE_PORT_BASE = "kafka.node.port.base"
# Free-port plans: per-broker ports for storage ids beyond the topology's, for nodes added later.
NODE_PORT_IDS_SPARE = 4

FIRST_NODE_ID: Mapping[Role, int] = {
    Role.STORAGE_NODE: 1,
    Role.CONTROLLER: 1001,
    Role.GROUP_COORDINATOR: 2001,
    Role.GATEWAY: 3001,
}

# Within these counts no two well-known ports or node ids overlap (gateway-5's per-broker
# ports end at 10099, storage-node-1's METRICS port is 10101); a Raft quorum of more than 9
# voters only slows commits down.
COUNT_LIMITS: Mapping[Role, tuple[int, int]] = {
    Role.CONTROLLER: (1, 9),
    Role.STORAGE_NODE: (0, 99),
    Role.GROUP_COORDINATOR: (0, 99),
    Role.GATEWAY: (0, 5),
}

# Runs before the service's interpreter replaces it: asks the kernel to SIGTERM the service
# when the launcher dies, even by SIGKILL, which no atexit hook or finalizer survives.
_PARENT_DEATH_SHIM = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit("brook launcher exited before its child started")
os.execv(sys.executable, [sys.executable, "-m", *sys.argv[2:]])
"""


class ClusterError(RuntimeError):
    """A cluster operation could not be carried out; the message says why."""


class ClusterLayoutError(ClusterError):
    """The cluster directory holds a different cluster, or the requested topology is invalid."""


class ClusterStartError(ClusterError):
    """A process did not become SERVING; the message ends with the tail of its log."""


class ClusterInterrupted(ClusterError):
    """Start-up was abandoned because the caller asked to stop."""


@dataclass(frozen=True)
class Topology:
    """How many processes of each role a cluster has."""

    controllers: int = 3
    storage_nodes: int = 3
    group_coordinators: int = 1
    gateways: int = 1

    def __post_init__(self) -> None:
        for role in START_ORDER:
            count = self.count(role)
            low, high = COUNT_LIMITS[role]
            if not low <= count <= high:
                raise ClusterLayoutError(
                    f"{role.value} count must be between {low} and {high}, got {count}"
                )

    def count(self, role: Role) -> int:
        return {
            Role.CONTROLLER: self.controllers,
            Role.STORAGE_NODE: self.storage_nodes,
            Role.GROUP_COORDINATOR: self.group_coordinators,
            Role.GATEWAY: self.gateways,
        }[role]

    def as_dict(self) -> dict[str, int]:
        return {role.value: self.count(role) for role in START_ORDER}


@dataclass(frozen=True)
class ProcessSpec:
    """Everything fixed about one process of a cluster: identity, ports, files."""

    name: str
    role: Role
    index: int
    node_id: int
    host: str
    ports: Mapping[str, int]
    directory: Path
    kafka_node_port_base: int = 0
    """A gateway's kafka.node.port.base (broker n's Kafka port is this + n); 0 otherwise."""

    @property
    def config_path(self) -> Path:
        return self.directory / CONFIG_FILE

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    @property
    def pid_path(self) -> Path:
        return self.directory / PID_FILE

    def address(self, listener: str = GRPC) -> str:
        """``host:port`` of one of this process's listeners."""
        try:
            port = self.ports[listener]
        except KeyError:
            raise ClusterError(f"{self.name} has no {listener} listener") from None
        return format_address(self.host, port)

    @property
    def grpc_address(self) -> str:
        return self.address(GRPC)

    def listeners_value(self) -> str:
        """The ``listeners`` setting: ``NAME://host:port,...``."""
        return ",".join(
            f"{name}://{format_address(self.host, port)}" for name, port in self.ports.items()
        )


@dataclass(frozen=True)
class ProcessExit:
    """How a process ended: its exit code (negative: killed by that signal)."""

    name: str
    pid: int
    exit_code: int
    # From the last signal the launcher sent it (or, if it died on its own, from its start).
    duration_ms: float
    # True when the process ignored SIGTERM for the whole stop timeout and got SIGKILL.
    killed_after_timeout: bool = False

    @property
    def clean(self) -> bool:
        return self.exit_code == 0 and not self.killed_after_timeout


@dataclass
class _Running:
    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    started_monotonic: float
    stop_signalled_monotonic: float | None = None
    killed_after_timeout: bool = False


def _process_name(role: Role, index: int) -> str:
    return f"{role.value}-{index}"


def _plan_ports(
    topology: Topology, host: str, port_offset: int | None
) -> dict[str, dict[str, int]]:
    slots = [
        (_process_name(role, index), role, listener, index)
        for role in START_ORDER
        for index in range(1, topology.count(role) + 1)
        for listener in LISTENERS[role]
    ]
    ports: dict[str, dict[str, int]] = {}
    if port_offset is None:
        free = iter(allocate_free_ports(len(slots), host))
        for name, _role, listener, _index in slots:
            ports.setdefault(name, {})[listener] = next(free)
        return ports
    for name, role, listener, index in slots:
        port = WELL_KNOWN_FIRST_PORT[(role, listener)] + index - 1 + port_offset
        if not 0 < port < 65536:
            raise ClusterLayoutError(
                f"port offset {port_offset} puts {name} {listener} on port {port}, outside 1-65535"
            )
        ports.setdefault(name, {})[listener] = port
    return ports


def _add_missing_metrics_port(ports: dict[str, int]) -> None:
    """A layout recorded before the METRICS listener existed: its port by the convention."""
    if METRICS not in ports and GRPC in ports:
        ports[METRICS] = ports[GRPC] + METRICS_PORT_STEP


def _plan_node_port_bases(
    topology: Topology, host: str, port_offset: int | None, taken: Iterable[int]
) -> dict[str, int]:
    """Every gateway's kafka.node.port.base: well-known (see the module docstring) or, with
    free ports, the start of a free block less the first storage id (ports in ``taken`` are
    already planned)."""
    bases = {}
    avoid = set(taken)
    storage_first = FIRST_NODE_ID[Role.STORAGE_NODE]
    ids_max = storage_first + topology.storage_nodes - 1 + NODE_PORT_IDS_SPARE
    for index in range(1, topology.gateways + 1):
        name = _process_name(Role.GATEWAY, index)
        if port_offset is None:
            count = ids_max - storage_first + 1
            start = allocate_free_port_block(count, host, avoid)
            avoid.update(range(start, start + count))
            bases[name] = start - storage_first
        else:
            base = KAFKA_NODE_PORT_BASE_FIRST + KAFKA_NODE_PORT_BASE_STEP * (index - 1)
            base += port_offset
            first, last = base + storage_first, base + COUNT_LIMITS[Role.STORAGE_NODE][1]
            if not (0 < first and last < 65536):
                raise ClusterLayoutError(
                    f"port offset {port_offset} puts {name}'s per-broker Kafka ports "
                    f"({first}-{last}) outside 1-65535"
                )
            bases[name] = base
    return bases


def _read_layout(path: Path) -> dict[str, Any]:
    try:
        layout = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ClusterLayoutError(f"cannot read cluster layout {path}: {error}") from None
    if not isinstance(layout, dict) or layout.get("format") != _LAYOUT_FORMAT:
        raise ClusterLayoutError(f"{path} is not a Brook cluster layout (format {_LAYOUT_FORMAT})")
    return layout


def _recorded_ports(layout: Mapping[str, Any], path: Path) -> dict[str, dict[str, int]]:
    try:
        return {
            name: {listener: int(port) for listener, port in entry["ports"].items()}
            for name, entry in layout["processes"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ClusterLayoutError(f"{path} has no valid port plan; remove it to re-plan") from None


def _recorded_node_port_bases(layout: Mapping[str, Any], path: Path) -> dict[str, int] | None:
    """Every gateway's recorded kafka.node.port.base; None for a layout written before there
    was one (its gateways get one planned now)."""
    try:
        entries = layout["processes"].items()
        if any(
            entry.get("role") == Role.GATEWAY.value and KAFKA_NODE_PORT_BASE not in entry
            for _, entry in entries
        ):
            return None
        return {
            name: int(entry[KAFKA_NODE_PORT_BASE])
            for name, entry in entries
            if KAFKA_NODE_PORT_BASE in entry
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ClusterLayoutError(f"{path} has no valid port plan; remove it to re-plan") from None


def _topology_text(counts: object) -> str:
    if not isinstance(counts, dict):
        return repr(counts)
    return " ".join(f"{role}={count}" for role, count in counts.items())


def _check_same_cluster(
    layout: Mapping[str, Any], path: Path, topology: Topology, host: str, port_offset: int | None
) -> None:
    """An existing directory's data only makes sense to the same processes at the same
    addresses: Raft voters and broker registrations are keyed by them."""
    recorded = (layout.get("topology"), layout.get("host"))
    if recorded != (topology.as_dict(), host):
        raise ClusterLayoutError(
            f"{path.parent} holds a cluster of {_topology_text(layout.get('topology'))} on "
            f"{layout.get('host')}, not {_topology_text(topology.as_dict())} on {host}; "
            "use another directory or remove this one"
        )
    if port_offset is not None and layout.get("port_offset") != port_offset:
        raise ClusterLayoutError(
            f"{path.parent} was created with port offset {layout.get('port_offset')}, "
            f"not {port_offset}; pass --port-offset {layout.get('port_offset')} or use "
            "another directory"
        )


_PROPERTY_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape_property(text: str, *, key: bool) -> str:
    """java.util.Properties escaping, so a value reads back exactly (paths may hold anything)."""
    escaped = "".join(_PROPERTY_ESCAPES.get(char, char) for char in text)
    if key:
        escaped = "".join("\\" + char if char in "=: #!" else char for char in escaped)
    elif escaped.startswith(" "):
        escaped = "\\" + escaped
    return escaped


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as log_file:
            size = log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, size - _LOG_TAIL_BYTES_MAX))
            text = log_file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "(no log file)"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive_with_config(pid: int, config_path: Path) -> bool:
    """Whether ``pid`` is a live process started with ``config_path`` (Linux /proc only)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return os.fsencode(str(config_path)) in cmdline.split(b"\0")


def _process_entry(spec: ProcessSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": spec.role.value, "node_id": spec.node_id, "ports": spec.ports}
    if spec.role is Role.GATEWAY:
        entry[KAFKA_NODE_PORT_BASE] = spec.kafka_node_port_base
    return entry


def _record_process(layout: dict[str, Any], spec: ProcessSpec, *, detached: bool) -> None:
    """A process added to a recorded cluster (its role's count grown to take it)."""
    layout.setdefault("processes", {})[spec.name] = _process_entry(spec)
    topology = layout.setdefault("topology", {})
    topology[spec.role.value] = max(int(topology.get(spec.role.value, 0)), spec.index)
    if detached:
        layout[_DETACHED] = sorted({*layout.get(_DETACHED, []), spec.name})


def _mark_removed(layout: dict[str, Any], name: str) -> None:
    layout.setdefault("processes", {}).pop(name, None)
    layout[_DETACHED] = [n for n in layout.get(_DETACHED, []) if n != name]
    layout[_REMOVED] = sorted({*layout.get(_REMOVED, []), name})


class LocalCluster:
    """A Brook cluster of local processes on one host.

    ``port_offset=None`` (the default, for tests) gives every listener a free port;
    an integer uses the well-known ports shifted by it (``brook cluster up`` uses 0). When
    ``base_dir`` already holds a cluster, its recorded plan is reused (same ports, same ids,
    so the same config files); a different topology or port offset is refused.

    ``config_overrides`` maps ``"*"`` (every process), a role value (``"storage-node"``) or a
    process name (``"storage-node-2"``) to extra settings; the most specific entry wins.
    Children do not inherit the launcher's ``BROOK_*`` environment variables (services read
    them as settings, over the config file); pass them in ``env`` to mean it.
    ``interrupted`` is polled during start-up waits; when it returns True, start-up is
    abandoned with ``ClusterInterrupted`` (after stopping what it started).
    ``spawn_prefix(spec)`` is put before each process's command line; the prefix must ``exec``
    the rest so the pid stays the process's (the fault tests start each process in a cgroup
    of its own this way, to cut its connections with firewall rules).
    """

    def __init__(
        self,
        base_dir: Path = DEFAULT_DIR,
        topology: Topology | None = None,
        *,
        host: str = DEFAULT_HOST,
        port_offset: int | None = None,
        config_overrides: Mapping[str, Mapping[str, str]] | None = None,
        log_format: str = "text",
        log_level: str = "INFO",
        startup_timeout_ms: int = STARTUP_TIMEOUT_MS_DEFAULT,
        stop_timeout_ms: int = STOP_TIMEOUT_MS_DEFAULT,
        env: Mapping[str, str] | None = None,
        interrupted: Callable[[], bool] | None = None,
        spawn_prefix: Callable[[ProcessSpec], Sequence[str]] | None = None,
        adopt_detached: bool = False,
        on_serving: Callable[[str], None] | None = None,
        tls: bool = False,
    ) -> None:
        """``on_serving``: told the name of each process as soon as it reports SERVING while
        starting (``brook cluster up`` prints a line for it). ``tls``: gRPC over mutual TLS
        between every process, with a CA and certificates made in ``<dir>/tls``
        (brook.security.cluster_tls); a directory once started with TLS keeps it."""
        if startup_timeout_ms <= 0 or stop_timeout_ms <= 0:
            raise ValueError("startup_timeout_ms and stop_timeout_ms must be > 0")
        self.base_dir = base_dir.resolve()
        self.topology = topology if topology is not None else Topology()
        self.host = host
        self.port_offset = port_offset
        self.startup_timeout_ms = startup_timeout_ms
        self.stop_timeout_ms = stop_timeout_ms
        self._log_format = log_format
        self._log_level = log_level
        self._overrides = {key: dict(value) for key, value in (config_overrides or {}).items()}
        self._env = dict(env or {})
        self._interrupted = interrupted or (lambda: False)
        self._spawn_prefix = spawn_prefix
        self._on_serving = on_serving or (lambda name: None)
        self._running: dict[str, _Running] = {}
        self._detached: set[str] = set()
        self._adopt_detached = adopt_detached
        self._exits: dict[str, ProcessExit] = {}
        self._atexit_registered = False

        layout_path = self.base_dir / LAYOUT_FILE
        # The controllers' Raft transport unpickles what it receives, so every cluster gets
        # its own secret, kept in the layout so that restarts reuse it.
        self._quorum_password = secrets.token_urlsafe(_QUORUM_PASSWORD_BYTES)
        # Storage nodes taken out of the cluster (remove_storage_node): never started again.
        self._removed: set[str] = set()
        if layout_path.exists():
            layout = _read_layout(layout_path)
            _check_same_cluster(layout, layout_path, self.topology, host, port_offset)
            self._removed = set(layout.get(_REMOVED, []))
            ports = _recorded_ports(layout, layout_path)
            bases = _recorded_node_port_bases(layout, layout_path)
            if isinstance(layout.get("quorum_password"), str) and layout["quorum_password"]:
                self._quorum_password = layout["quorum_password"]
            tls = tls or layout.get("tls") is True
        else:
            ports = _plan_ports(self.topology, host, port_offset)
            bases = None
        if bases is None:
            taken = (port for listeners in ports.values() for port in listeners.values())
            bases = _plan_node_port_bases(self.topology, host, port_offset, taken)
        self.tls = ClusterTls(self.base_dir, host) if tls else None
        self._client_security: ChannelSecurity | None = None
        self._specs: dict[str, ProcessSpec] = {}
        for role in START_ORDER:
            for index in range(1, self.topology.count(role) + 1):
                name = _process_name(role, index)
                if name in self._removed:
                    continue
                _add_missing_metrics_port(ports.get(name, {}))
                if set(ports.get(name, {})) != set(LISTENERS[role]):
                    raise ClusterLayoutError(f"{layout_path} has no valid ports for {name}")
                self._specs[name] = ProcessSpec(
                    name=name,
                    role=role,
                    index=index,
                    node_id=FIRST_NODE_ID[role] + index - 1,
                    host=host,
                    ports=ports[name],
                    directory=self.base_dir / name,
                    kafka_node_port_base=bases.get(name, 0) if role is Role.GATEWAY else 0,
                )
        known = {*self._specs, *(role.value for role in Role), ALL_PROCESSES}
        unknown = set(self._overrides) - known
        if unknown:
            raise ClusterLayoutError(
                f"config overrides for unknown roles or processes: {sorted(unknown)}"
            )

    # ----------------------------------------------------------------- the plan

    @property
    def processes(self) -> Mapping[str, ProcessSpec]:
        """Every planned process by name, in start order."""
        return dict(self._specs)

    def names(self, role: Role | None = None) -> list[str]:
        return [spec.name for spec in self._specs.values() if role is None or spec.role is role]

    def spec(self, name: str) -> ProcessSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise ClusterError(
                f"no process named {name!r} in this cluster; it has {', '.join(self._specs)}"
            ) from None

    def grpc_address(self, name: str) -> str:
        return self.spec(name).grpc_address

    def bootstrap_servers(self, role: Role = Role.CONTROLLER, listener: str = GRPC) -> str:
        """Comma list of one listener of every process of a role."""
        return ",".join(s.address(listener) for s in self._specs.values() if s.role is role)

    @property
    def controller_bootstrap_servers(self) -> str:
        """The value for ``controller.quorum.bootstrap.servers``."""
        return self.bootstrap_servers(Role.CONTROLLER, GRPC)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """Where Kafka clients connect: every gateway's PLAINTEXT listener."""
        return self.bootstrap_servers(Role.GATEWAY, PLAINTEXT)

    def config(self, name: str) -> dict[str, str]:
        """The settings written to a process's ``server.properties``."""
        spec = self.spec(name)
        settings = {
            "node.id": str(spec.node_id),
            "listeners": spec.listeners_value(),
            # Same as listeners: everything is on one host, so where a process binds is
            # where every other process and client reaches it.
            "advertised.listeners": spec.listeners_value(),
            "logging.format": self._log_format,
            "logging.level": self._log_level,
        }
        if spec.role is Role.CONTROLLER:
            settings["controller.quorum.voters"] = ",".join(
                f"{s.node_id}@{s.address(RAFT)}"
                for s in self._specs.values()
                if s.role is Role.CONTROLLER
            )
            settings["metadata.log.dir"] = str(spec.directory / "metadata")
            settings["controller.quorum.password"] = self._quorum_password
            settings["controller.quorum.grpc.endpoints"] = ",".join(
                f"{s.node_id}@{s.address(GRPC)}"
                for s in self._specs.values()
                if s.role is Role.CONTROLLER
            )
        else:
            settings["controller.quorum.bootstrap.servers"] = self.controller_bootstrap_servers
        if spec.role is Role.STORAGE_NODE:
            settings["log.dirs"] = str(spec.directory / "data")
        if spec.role is Role.GROUP_COORDINATOR:
            settings["group.coordinator.state.dir"] = str(spec.directory / "state")
        if spec.role is Role.GATEWAY:
            settings[KAFKA_NODE_PORT_BASE] = str(spec.kafka_node_port_base)
            if self.tls is not None:
                # The Kafka port serves SASL_SSL instead: TLS, and a SCRAM user to log in.
                for key in ("listeners", "advertised.listeners"):
                    settings[key] = settings[key].replace(
                        f"{PLAINTEXT}://", f"{KAFKA_LISTENER_PROTOCOL}://"
                    )
        if self.tls is not None:
            settings.update(self.tls.service_settings())
        settings.update(self._overrides.get(ALL_PROCESSES, {}))
        settings.update(self._overrides.get(spec.role.value, {}))
        settings.update(self._overrides.get(name, {}))
        return settings

    def describe(self) -> dict[str, Any]:
        """The plan and current state, as JSON-ready data."""
        return {
            "dir": str(self.base_dir),
            "host": self.host,
            "topology": self.topology.as_dict(),
            "port_offset": self.port_offset,
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers,
            "controller_bootstrap_servers": self.controller_bootstrap_servers,
            "processes": [self.describe_process(name) for name in self._specs],
        }

    def describe_process(self, name: str) -> dict[str, Any]:
        """One process of the plan and its pid (None when not running), as JSON-ready data."""
        spec = self.spec(name)
        return {
            "name": spec.name,
            "role": spec.role.value,
            "node_id": spec.node_id,
            "pid": self.pid(spec.name),
            "listeners": {listener: spec.address(listener) for listener in spec.ports},
            "kafka_node_ports": self.kafka_node_ports(spec.name),
            "config": str(spec.config_path),
            "log": str(spec.log_path),
        }

    # ----------------------------------------------------------------- state

    def pid(self, name: str) -> int | None:
        """The pid of a running (not yet reaped) process, else None."""
        self.spec(name)
        running = self._running.get(name)
        return running.popen.pid if running is not None else None

    def is_running(self, name: str) -> bool:
        self.spec(name)
        running = self._running.get(name)
        return running is not None and running.popen.poll() is None

    def last_exit(self, name: str) -> ProcessExit | None:
        self.spec(name)
        return self._exits.get(name)

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES_DEFAULT) -> str:
        return _tail(self.spec(name).log_path, lines)

    def reap_exited(self) -> list[ProcessExit]:
        """Collect processes that have exited on their own since the last look."""
        exits = []
        for name, running in list(self._running.items()):
            exit_code = running.popen.poll()
            if exit_code is not None:
                exits.append(self._record_exit(name, exit_code))
        return exits

    # ----------------------------------------------------------------- start

    def start(self, name: str | None = None) -> None:
        """Start the whole cluster (``name`` None) or one process, and wait until SERVING.

        The whole cluster starts role by role: all processes of a role are spawned together
        (controllers need each other for a quorum) and must all be SERVING before the next
        role starts. On any failure, everything this call started is stopped again.
        """
        if name is not None:
            self._start_processes([self.spec(name)])
            return
        already = [n for n in self._specs if n in self._running]
        if already:
            raise ClusterError(f"already running: {', '.join(already)}")
        # All at once up front: a port taken by something else (a Kafka broker on 9092, say)
        # fails here, not after every role before the gateway has started.
        self._refuse_ports_in_use(list(self._specs.values()))
        self.prepare()
        try:
            for role in START_ORDER:
                self._start_processes([s for s in self._specs.values() if s.role is role])
                if role is Role.CONTROLLER:
                    self._ensure_kafka_admin_user()
        except BaseException:
            self.stop()
            raise

    def restart(self, name: str) -> ProcessExit | None:
        """Stop one process if it is running (SIGTERM, bounded), then start it again."""
        previous = self.stop(name).get(name)
        self.start(name)
        return previous

    def _start_processes(self, specs: Sequence[ProcessSpec]) -> None:
        deadline = time.monotonic() + self.startup_timeout_ms / 1000
        started: list[str] = []
        try:
            for spec in specs:
                self._spawn(spec)
                started.append(spec.name)
            for spec in specs:
                self._wait_serving(spec, deadline)
                self._on_serving(spec.name)
        except BaseException:
            if started:
                self._terminate(started)
            raise

    def _spawn(self, spec: ProcessSpec) -> None:
        if spec.name in self._running:
            if self._running[spec.name].popen.poll() is None:
                raise ClusterError(f"{spec.name} is already running (pid {self.pid(spec.name)})")
            self.reap_exited()
        self._refuse_stale_process(spec)
        self._refuse_ports_in_use([spec])
        spec.directory.mkdir(parents=True, exist_ok=True)
        self._prepare_tls()
        self._write_config(spec)
        command = self._command(spec)
        if self._spawn_prefix is not None:
            command = [*self._spawn_prefix(spec), *command]
        # Services read BROOK_* variables as settings, over the config file; inheriting the
        # launcher's would let a stray variable in a developer's shell override what the
        # launcher planned (a node id, a listener). Only ``env`` passes them on purpose.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        env = {**inherited, **self._env, "PYTHONUNBUFFERED": "1"}
        with spec.log_path.open("ab") as log_file:
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
            log_file.write(
                f"==== {stamp} brook launcher: starting {spec.name}: "
                f"python -m {spec.role.module} --config {spec.config_path}\n".encode()
            )
            log_file.flush()
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=spec.directory,
                env=env,
                # Its own session: a Ctrl-C in the launcher's terminal reaches the launcher
                # only, which then stops the children in order instead of all at once.
                start_new_session=True,
            )
        self._running[spec.name] = _Running(spec, popen, time.monotonic())
        spec.pid_path.write_text(f"{popen.pid}\n")
        if not self._atexit_registered:
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True
        _log.info("started %s pid %d", spec.name, popen.pid)

    def _command(self, spec: ProcessSpec) -> list[str]:
        service = [spec.role.module, "--config", str(spec.config_path)]
        # The kernel ties the parent-death signal to the thread that forked: only the main
        # thread lives as long as the launcher, so from any other thread skip the shim. A
        # detached process (add_storage_node) outlives the launcher that started it.
        if (
            sys.platform == "linux"
            and threading.current_thread() is threading.main_thread()
            and spec.name not in self._detached
        ):
            return [sys.executable, "-S", "-c", _PARENT_DEATH_SHIM, str(os.getpid()), *service]
        return [sys.executable, "-m", *service]

    # ----------------------------------------------------------------- growing and shrinking

    @classmethod
    def from_layout(cls, base_dir: Path, **options: Any) -> LocalCluster:
        """The cluster recorded in ``base_dir`` (its topology, host and port offset)."""
        path = base_dir.resolve() / LAYOUT_FILE
        if not path.exists():
            raise ClusterLayoutError(f"{base_dir} holds no cluster (no {LAYOUT_FILE})")
        layout = _read_layout(path)
        try:
            counts = {Role(role): int(count) for role, count in layout["topology"].items()}
            topology = Topology(*(counts.get(role, 0) for role in START_ORDER))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ClusterLayoutError(f"{path} has no valid topology") from None
        host = layout.get("host")
        return cls(
            base_dir,
            topology,
            host=host if isinstance(host, str) else DEFAULT_HOST,
            port_offset=layout.get("port_offset"),
            **options,
        )

    def add_storage_node(self, *, detached: bool = False) -> ProcessSpec:
        """Plans one more storage node (the next free index and node id, chosen under the
        layout's lock, so two concurrent calls never pick the same), records it in the layout,
        starts it and waits until it is SERVING. ``detached``: it outlives this launcher (the
        directory's running ``brook cluster up`` stops it with its own processes). If it does
        not come up, it is stopped and recorded as removed: its index is never used again."""
        role = Role.STORAGE_NODE
        # Random free ports when the plan has no well-known ones: a clash with the ports
        # already planned is as unlikely as between any two of a test cluster's processes.
        free = (
            allocate_free_ports(len(LISTENERS[role]), self.host)
            if self.port_offset is None
            else None
        )
        reserved: list[ProcessSpec] = []

        def reserve(layout: dict[str, Any]) -> None:
            used = [
                int(name.rsplit("-", 1)[1])
                for name in [*layout.get("processes", {}), *layout.get(_REMOVED, [])]
                if name.rsplit("-", 1)[0] == role.value
            ]
            recorded = int(layout.get("topology", {}).get(role.value, 0))
            spec = self._storage_spec(max([recorded, *used]) + 1, free)
            _record_process(layout, spec, detached=detached)
            reserved.append(spec)

        self._update_layout(reserve)
        spec = reserved[0]
        previous = self.topology
        self.topology = replace(previous, storage_nodes=max(previous.storage_nodes, spec.index))
        self._specs[spec.name] = spec
        if detached:
            self._detached.add(spec.name)
        try:
            self._start_processes([spec])
        except BaseException:
            self.topology = previous
            del self._specs[spec.name]
            self._detached.discard(spec.name)
            self._removed.add(spec.name)
            self._update_layout(lambda layout: _mark_removed(layout, spec.name))
            raise
        if detached:
            # Not this launcher's to stop (at exit or otherwise): the directory's is.
            del self._running[spec.name]
        return spec

    def _storage_spec(self, index: int, free_ports: Sequence[int] | None) -> ProcessSpec:
        role = Role.STORAGE_NODE
        name = _process_name(role, index)
        if free_ports is not None:
            ports = dict(zip(LISTENERS[role], free_ports, strict=True))
        else:
            assert self.port_offset is not None
            ports = {
                listener: WELL_KNOWN_FIRST_PORT[(role, listener)] + index - 1 + self.port_offset
                for listener in LISTENERS[role]
                if (role, listener) in WELL_KNOWN_FIRST_PORT
            }
            _add_missing_metrics_port(ports)
            outside = {listener: p for listener, p in ports.items() if not 0 < p < 65536}
            if outside:
                raise ClusterLayoutError(f"{name} would listen outside 1-65535: {outside}")
        return ProcessSpec(
            name=name,
            role=role,
            index=index,
            node_id=FIRST_NODE_ID[role] + index - 1,
            host=self.host,
            ports=ports,
            directory=self.base_dir / name,
        )

    def remove_storage_node(self, name: str) -> None:
        """Takes a stopped storage node out of the plan for good: ``brook cluster up`` of
        this directory never starts it again (its data directory is left as it is)."""
        spec = self.spec(name)
        if spec.role is not Role.STORAGE_NODE:
            raise ClusterError(f"{name} is not a storage node")
        if self.is_running(name) or self._other_launchers_pid(spec) is not None:
            raise ClusterError(f"{name} is running; stop it first")
        self._removed.add(name)
        del self._specs[name]
        self._update_layout(lambda layout: _mark_removed(layout, name))

    def stop_process(self, name: str) -> None:
        """Stops one process whether this launcher or another one started it (its pid
        file): SIGTERM, then SIGKILL after the stop timeout."""
        spec = self.spec(name)
        if name in self._running:
            self._terminate([name])
            return
        self._terminate_others([spec])

    def _other_launchers_pid(self, spec: ProcessSpec) -> int | None:
        """The pid of ``spec``'s process when another launcher started it and it runs."""
        if spec.name in self._running:
            return None
        try:
            pid = int(spec.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive_with_config(pid, spec.config_path) else None

    def _detached_by_others(self, role: Role) -> list[ProcessSpec]:
        """The running processes of ``role`` that ``brook cluster add-node`` started for this
        directory (recorded as detached in its layout, as it is now): the directory's
        ``brook cluster up`` stops them with its own (``adopt_detached``)."""
        path = self.base_dir / LAYOUT_FILE
        if not path.exists():
            return []
        try:
            recorded = LocalCluster.from_layout(self.base_dir)
            detached = set(_read_layout(path).get(_DETACHED, []))
        except ClusterLayoutError:
            return []
        return [
            spec
            for name, spec in recorded._specs.items()
            if name in detached
            and spec.role is role
            and self._other_launchers_pid(spec) is not None
        ]

    def _terminate_others(self, specs: Sequence[ProcessSpec]) -> None:
        """SIGTERM, then SIGKILL after the stop timeout, to processes another launcher started
        (by the pid files of ``specs``)."""
        running = [(spec, pid) for spec in specs if (pid := self._other_launchers_pid(spec))]
        for _, pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_ms / 1000
        kill_deadline = deadline + KILL_WAIT_MS / 1000
        killed = False
        while running:
            running = [(s, pid) for s, pid in running if _pid_alive_with_config(pid, s.config_path)]
            now = time.monotonic()
            if running and now >= deadline and not killed:
                killed = True
                for _, pid in running:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
            if running and now >= kill_deadline:
                for spec, pid in running:
                    _log.error("%s (pid %d) survived SIGKILL", spec.name, pid)
                return
            if running:
                time.sleep(_STOP_POLL_INTERVAL_S)

    def _update_layout(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Read-modify-write of the directory's layout under its lock file, so that
        ``brook cluster up``, ``add-node`` and ``remove-node`` never lose each other's
        changes; the new file replaces the old one whole."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        path = self.base_dir / LAYOUT_FILE
        with (self.base_dir / LAYOUT_LOCK_FILE).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            layout = _read_layout(path) if path.exists() else {}
            change(layout)
            with tempfile.NamedTemporaryFile(
                "w", dir=self.base_dir, prefix=f".{LAYOUT_FILE}.", delete=False
            ) as temporary:
                try:
                    temporary.write(json.dumps(layout, indent=2) + "\n")
                    temporary.flush()
                    os.fsync(temporary.fileno())
                except BaseException:
                    os.unlink(temporary.name)
                    raise
            os.replace(temporary.name, path)

    def kafka_node_ports(self, name: str) -> dict[int, int]:
        """storage node id -> the Kafka port gateway ``name`` listens on for it when it
        presents it (kafka.node.port.base + id, as configured, overrides included); {} when
        per-broker ports are off."""
        base = int(self.config(name).get(KAFKA_NODE_PORT_BASE, "0"))
        if base <= 0:
            return {}
        storage_ids = [s.node_id for s in self._specs.values() if s.role is Role.STORAGE_NODE]
        return {node_id: base + node_id for node_id in storage_ids}

    def _refuse_ports_in_use(self, specs: Sequence[ProcessSpec]) -> None:
        listeners = [
            (spec, listener, port) for spec in specs for listener, port in spec.ports.items()
        ]
        # A gateway only tries its per-broker ports once it presents the node, and logs a
        # port it cannot bind; checked here so that a clash is seen before anything starts.
        listeners += [
            (spec, f"broker {node_id}", port)
            for spec in specs
            if spec.role is Role.GATEWAY
            for node_id, port in self.kafka_node_ports(spec.name).items()
        ]
        taken = [
            f"{spec.name} {listener} {format_address(spec.host, port)}"
            for spec, listener, port in listeners
            if not port_is_free(spec.host, port)
        ]
        if taken:
            raise ClusterStartError(
                f"ports in use: {', '.join(taken)} (another cluster, or a Kafka broker on "
                "9092? brook cluster up --port-offset N moves every port by N)"
            )

    def _refuse_stale_process(self, spec: ProcessSpec) -> None:
        """A launcher that was SIGKILLed leaves its pid files; a process still running from
        it would hold the ports and the data directory."""
        try:
            pid = int(spec.pid_path.read_text().strip())
        except (OSError, ValueError):
            return
        if _pid_alive_with_config(pid, spec.config_path):
            raise ClusterError(
                f"{spec.name} is still running as pid {pid} from an earlier launch; "
                f"stop it (kill {pid}) before starting this cluster"
            )

    def _write_config(self, spec: ProcessSpec) -> None:
        lines = [
            f"# {spec.name}: written by the brook launcher on every start; "
            "change settings through the launcher's config overrides.",
        ]
        lines += [
            f"{_escape_property(key, key=True)}={_escape_property(value, key=False)}"
            for key, value in self.config(spec.name).items()
        ]
        spec.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def prepare(self) -> None:
        """Write the cluster layout and every process's config file; start nothing.
        ``start()`` does this itself; on its own it shows what would run, and where."""
        self._write_layout()
        self._prepare_tls()
        for spec in self._specs.values():
            spec.directory.mkdir(parents=True, exist_ok=True)
            self._write_config(spec)

    def _prepare_tls(self) -> None:
        """With TLS: the CA, keystores and client properties exist, and the launcher's own
        health checks use the operator's certificate."""
        if self.tls is None or self._client_security is not None:
            return
        self.tls.ensure(
            self.bootstrap_servers(Role.STORAGE_NODE),
            self.kafka_bootstrap_servers if self.topology.gateways else "",
        )
        self._client_security = self.tls.admin_security()

    def _ensure_kafka_admin_user(self) -> None:
        """With TLS: the SCRAM user ``admin`` that kafka-client.properties logs in as exists
        with that file's password (set again on every start: the file is the truth)."""
        if self.tls is None:
            return
        upsertion = UserScramCredentialUpsertion(
            ADMIN_COMMON_NAME, self.tls.kafka_admin_password(), KAFKA_ADMIN_MECHANISM
        )
        with Admin(self.controller_bootstrap_servers, security=self.client_security()) as admin:
            errors = admin.alter_user_scram_credentials([upsertion])
        if errors.get(ADMIN_COMMON_NAME) is not None:
            raise ClusterError(
                f"cannot create the Kafka user {ADMIN_COMMON_NAME}: {errors[ADMIN_COMMON_NAME]}"
            )

    def client_security(self) -> ChannelSecurity | None:
        """How the operator's tools reach this cluster: its admin certificate with TLS, None
        (the process's default, plaintext) without."""
        self._prepare_tls()
        return self._client_security

    def _write_layout(self) -> None:
        """Records this plan. Processes another launcher recorded meanwhile (a node added
        while this one started) stay, and so does the larger storage count they need."""

        def write(layout: dict[str, Any]) -> None:
            recorded = layout.get("topology")
            storage = self.topology.storage_nodes
            if isinstance(recorded, dict):
                storage = max(storage, int(recorded.get(Role.STORAGE_NODE.value, 0)))
            layout.update(
                {
                    "format": _LAYOUT_FORMAT,
                    "host": self.host,
                    "topology": replace(self.topology, storage_nodes=storage).as_dict(),
                    "port_offset": self.port_offset,
                    "quorum_password": self._quorum_password,
                    "tls": self.tls is not None,
                }
            )
            removed = set(layout.get(_REMOVED, [])) | self._removed
            layout[_REMOVED] = sorted(removed)
            layout.setdefault(_DETACHED, [])
            processes = layout.setdefault("processes", {})
            for spec in list(self._specs.values()):
                if spec.name in removed:
                    # Removed by another command after this plan was read: it stays removed,
                    # and this launcher does not start it.
                    del self._specs[spec.name]
                    self._removed.add(spec.name)
                    continue
                processes[spec.name] = _process_entry(spec)

        self._update_layout(write)

    def _wait_serving(self, spec: ProcessSpec, deadline: float) -> None:
        running = self._running[spec.name]

        def abort_reason() -> str | None:
            exit_code = running.popen.poll()
            if exit_code is not None:
                return f"exited with code {exit_code}"
            if self._interrupted():
                return "interrupted"
            return None

        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        result = wait_until_serving(
            spec.grpc_address,
            timeout_ms=remaining_ms,
            abort_reason=abort_reason,
            security=self._client_security,
        )
        if result.status is HealthStatus.SERVING:
            return
        if result.detail == "interrupted":
            raise ClusterInterrupted(f"start-up interrupted while waiting for {spec.name}")
        if running.popen.poll() is not None:
            problem = f"{spec.name} {result.detail} during start-up"
        else:
            problem = (
                f"{spec.name} was not SERVING at {spec.grpc_address} within "
                f"{self.startup_timeout_ms} ms (last health check: {result.describe()})"
            )
        raise ClusterStartError(
            f"{problem}\n--- last lines of {spec.log_path} ---\n{self.log_tail(spec.name)}"
        )

    # ----------------------------------------------------------------- signals, stop

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a running process (its whole process group); does not wait."""
        running = self._running.get(self.spec(name).name)
        if running is None or running.popen.poll() is not None:
            raise ClusterError(f"{name} is not running")
        running.stop_signalled_monotonic = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.popen.pid, sig)

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to every running process at once. Only system calls, so a signal
        handler may call it while the launcher is in the middle of something else."""
        for running in list(self._running.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.popen.pid, sig)

    def wait(self, name: str, timeout_ms: int) -> ProcessExit:
        """Wait at most ``timeout_ms`` for a process to exit and collect how it ended."""
        running = self._running.get(self.spec(name).name)
        if running is None:
            previous = self._exits.get(name)
            if previous is None:
                raise ClusterError(f"{name} was never started")
            return previous
        try:
            exit_code = running.popen.wait(timeout=timeout_ms / 1000)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{name} did not exit within {timeout_ms} ms") from None
        return self._record_exit(name, exit_code)

    def stop(self, name: str | None = None) -> dict[str, ProcessExit]:
        """Stop the whole cluster (``name`` None) or one process: SIGTERM, wait up to the
        stop timeout, SIGKILL what is left. Roles stop in reverse start order, so nothing
        loses the processes it depends on while shutting down. Returns how each process
        stopped by this call ended (processes that had already exited are reaped too)."""
        if name is not None:
            self.spec(name)
            return self._terminate([name]) if name in self._running else {}
        exits: dict[str, ProcessExit] = {}
        for exited in self.reap_exited():
            exits[exited.name] = exited
        for role in reversed(START_ORDER):
            names = [n for n, r in self._running.items() if r.spec.role is role]
            exits.update(self._terminate(names))
            if self._adopt_detached:
                self._terminate_others(self._detached_by_others(role))
        if self._atexit_registered:
            atexit.unregister(self._stop_at_exit)
            self._atexit_registered = False
        return exits

    def _terminate(self, names: Sequence[str]) -> dict[str, ProcessExit]:
        targets = [self._running[n] for n in names if n in self._running]
        for running in targets:
            running.stop_signalled_monotonic = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.popen.pid, signal.SIGTERM)
        # Polled together rather than waited on one by one, so each process's exit time (and
        # so its shutdown duration) is its own, not that of the slowest before it.
        exits: dict[str, ProcessExit] = {}
        pending = list(targets)
        deadline = time.monotonic() + self.stop_timeout_ms / 1000
        kill_deadline = deadline + KILL_WAIT_MS / 1000
        while pending:
            for running in list(pending):
                exit_code = running.popen.poll()
                if exit_code is not None:
                    pending.remove(running)
                    exits[running.spec.name] = self._record_exit(running.spec.name, exit_code)
            now = time.monotonic()
            if pending and now >= deadline and not any(r.killed_after_timeout for r in pending):
                for running in pending:
                    _log.warning(
                        "%s ignored SIGTERM for %d ms; killing it",
                        running.spec.name,
                        self.stop_timeout_ms,
                    )
                    running.killed_after_timeout = True
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(running.popen.pid, signal.SIGKILL)
            if pending and now >= kill_deadline:
                # Left in _running so a later stop() tries again; nothing else can be done.
                for running in pending:
                    _log.error("%s (pid %d) survived SIGKILL", running.spec.name, running.popen.pid)
                break
            if pending:
                time.sleep(_STOP_POLL_INTERVAL_S)
        return exits

    def _record_exit(self, name: str, exit_code: int) -> ProcessExit:
        running = self._running.pop(name)
        since = running.stop_signalled_monotonic or running.started_monotonic
        exited = ProcessExit(
            name=name,
            pid=running.popen.pid,
            exit_code=exit_code,
            duration_ms=(time.monotonic() - since) * 1000,
            killed_after_timeout=running.killed_after_timeout,
        )
        self._exits[name] = exited
        with contextlib.suppress(FileNotFoundError):
            running.spec.pid_path.unlink()
        _log.info("%s (pid %d) exited with code %d", name, exited.pid, exit_code)
        return exited

    def _stop_at_exit(self) -> None:
        if self._running:
            _log.warning("stopping %d cluster processes left running at exit", len(self._running))
            self.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------- brook cluster up


@dataclass
class _StopRequests:
    """Set from signal handlers, so only plain attribute writes (no locks)."""

    count: int = 0


def add_cluster_command(subparsers: Any) -> None:
    """Register ``brook cluster up`` on an argparse subparsers object."""
    cluster = subparsers.add_parser("cluster", help="run a local Brook cluster")
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    up = actions.add_parser(
        "up",
        help="start a whole local cluster in the foreground; Ctrl-C stops it",
        description="Start controllers, storage nodes, group coordinators and gateways as "
        "local processes, print a line for each as it reports SERVING (its node id, pid "
        "and addresses), and run until SIGINT or SIGTERM. Data "
        "and logs stay in --dir across runs. Well-known ports (process N of a role, plus "
        "--port-offset): storage node GRPC 9100+N, controller GRPC 9200+N and RAFT 9300+N, "
        "group coordinator GRPC 9400+N, gateway GRPC 9500+N and Kafka 9091+N (9092 first), "
        "and a Kafka port per storage node (broker) n it presents, 9600+100*(N-1)+n.",
    )
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="data and logs (./.brook)")
    # Counts left out: the directory's recorded ones (nodes added or removed since included),
    # else Topology's defaults.
    up.add_argument("--controllers", type=int, metavar="N", help="controller count (3)")
    up.add_argument("--storage-nodes", type=int, metavar="N", help="storage node count (3)")
    up.add_argument("--coordinators", type=int, metavar="N", help="group coordinator count (1)")
    up.add_argument("--gateways", type=int, metavar="N", help="gateway count (1)")
    up.add_argument(
        "--port-offset", type=int, metavar="N", default=0, help="added to every port (0)"
    )
    up.add_argument(
        "--startup-timeout-ms",
        type=int,
        metavar="MS",
        default=STARTUP_TIMEOUT_MS_DEFAULT * 2,
        help="bound on each role's start-up (60000)",
    )
    up.add_argument(
        "--stop-timeout-ms",
        type=int,
        metavar="MS",
        default=STOP_TIMEOUT_MS_DEFAULT,
        help="how long a process may take to exit after SIGTERM before SIGKILL (10000)",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="[TARGET:]KEY=VALUE",
        help="a setting for every process, or only for TARGET, a role (storage-node) or a "
        "process (storage-node-2); repeatable",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="gRPC over mutual TLS between every process: a local CA and certificates in "
        "DIR/tls, and DIR/tls/client.properties for brook COMMAND --command-config (a "
        "directory once started with --tls keeps it)",
    )
    up.add_argument(
        "--json",
        action="store_true",
        help="print JSON lines instead of text: a serving event per process as it becomes "
        "healthy, then up, exited, stopped",
    )
    up.set_defaults(func=run_cluster_command)

    add = actions.add_parser(
        "add-node",
        help="start one more storage node in a local cluster's directory",
        description="Plan storage-node-N+1 in --dir's cluster, start it and wait until it "
        "is SERVING. It joins the running cluster at once (new topics may use it; move "
        "existing partitions onto it with brook reassign); the directory's brook cluster up "
        "stops it with the others, and starts it on every later run.",
    )
    add.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the cluster (./.brook)")
    add.set_defaults(func=_add_node_command)
    remove = actions.add_parser(
        "remove-node",
        help="drain, stop and unregister a storage node of a local cluster",
        description="Move every replica off storage node --node (brook reassign "
        "--decommission), wait until it holds none, stop it, unregister it from the "
        "controllers and take it out of --dir's plan for good (its data directory stays).",
    )
    remove.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the cluster (./.brook)")
    remove.add_argument("--node", type=int, required=True, metavar="ID", help="its node id")
    remove.add_argument(
        "--throttle", type=int, metavar="BYTES_PER_S", help="bound the copies' replication rate"
    )
    remove.add_argument(
        "--timeout-ms",
        type=int,
        metavar="MS",
        default=REMOVE_NODE_TIMEOUT_MS_DEFAULT,
        help=f"bound on the whole removal ({REMOVE_NODE_TIMEOUT_MS_DEFAULT})",
    )
    remove.set_defaults(func=_remove_node_command)


@contextlib.contextmanager
def _launcher_lock(directory: Path, wait_s: float = 0.0) -> Iterator[bool]:
    """Holds the directory's launcher lock while a ``brook cluster up`` runs it; yields False
    (holding nothing) when another process still holds it after ``wait_s`` (the probe of
    ``_launcher_running`` holds it for a moment)."""
    directory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    with (directory / LAUNCHER_LOCK_FILE).open("a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(_LOCK_POLL_S)
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _launcher_running(directory: Path) -> bool:
    """Whether a ``brook cluster up`` runs ``directory`` now (it holds the launcher lock)."""
    if not (directory / LAYOUT_FILE).exists():
        return False
    with _launcher_lock(directory) as free:
        return not free


def _add_node_command(args: argparse.Namespace) -> int:
    """``brook cluster add-node``: 0 once the node is SERVING, 1 on failure, 2 bad usage."""
    if not _launcher_running(args.dir):
        print(
            f"brook cluster add-node: no brook cluster up runs {args.dir}; start the cluster "
            "first (the node is stopped with it)",
            file=sys.stderr,
        )
        return 1
    try:
        cluster = LocalCluster.from_layout(args.dir)
        spec = cluster.add_storage_node(detached=True)
    except ClusterLayoutError as error:
        print(f"brook cluster add-node: {error}", file=sys.stderr)
        return 2
    except ClusterError as error:
        print(f"brook cluster add-node: {error}", file=sys.stderr)
        return 1
    print(f"  serving  {_process_line(cluster, spec.name)}", flush=True)
    return 0


def _remove_node_command(args: argparse.Namespace) -> int:
    """``brook cluster remove-node``: 0 once the node is gone, 1 on failure, 2 bad usage."""
    if not _launcher_running(args.dir):
        print(
            f"brook cluster remove-node: no brook cluster up runs {args.dir}; its replicas "
            "can only move while the cluster runs",
            file=sys.stderr,
        )
        return 1
    from brook.client.errors import BrookClientError
    from brook.tools.options import UsageError
    from brook.tools.reassign import decommission

    try:
        cluster = LocalCluster.from_layout(args.dir)
        name = next(
            (
                s.name
                for s in cluster.processes.values()
                if s.role is Role.STORAGE_NODE and s.node_id == args.node
            ),
            None,
        )
        if name is None:
            raise ClusterLayoutError(f"{args.dir} has no storage node with node id {args.node}")
    except ClusterLayoutError as error:
        print(f"brook cluster remove-node: {error}", file=sys.stderr)
        return 2
    security = cluster.client_security()
    if security is not None:
        set_default_security(security)
    try:
        decommission(
            cluster.controller_bootstrap_servers,
            args.node,
            stop=lambda: cluster.stop_process(name),
            throttle=args.throttle,
            timeout_ms=args.timeout_ms,
        )
        cluster.remove_storage_node(name)
    except (BrookClientError, ClusterError, UsageError) as error:
        print(
            f"brook cluster remove-node: {error} (running it again picks up where this stopped)",
            file=sys.stderr,
        )
        return 1
    print(f"Removed {name} (node {args.node}); its data stays in {args.dir / name}.")
    return 0


def parse_cluster_overrides(overrides: Sequence[str]) -> dict[str, dict[str, str]]:
    """``[TARGET:]KEY=VALUE`` flags to ``config_overrides``; ValueError names a bad flag."""
    parsed: dict[str, dict[str, str]] = {}
    for override in overrides:
        setting, sep, value = override.partition("=")
        target, colon, key = setting.rpartition(":")
        key = key.strip()
        if not sep or not key or (colon and not target):
            raise ValueError(f"--override {override!r} is not of the form [TARGET:]KEY=VALUE")
        parsed.setdefault(target or ALL_PROCESSES, {})[key] = value
    return parsed


def _print_json(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _process_line(cluster: LocalCluster, name: str) -> str:
    """A process's name, node id, pid and addresses on one line."""
    spec = cluster.spec(name)
    listeners = "  ".join(f"{listener} {spec.address(listener)}" for listener in spec.ports)
    node_ports = sorted(cluster.kafka_node_ports(spec.name).items())
    if node_ports:
        listeners += "  brokers " + ",".join(f"{n}:{port}" for n, port in node_ports)
    pid = str(cluster.pid(spec.name))
    return f"{spec.name:<22} node {spec.node_id:<5} pid {pid:<8} {listeners}"


def _print_serving(cluster_ref: list[LocalCluster], name: str, *, as_json: bool) -> None:
    """A line for a process that just reported SERVING while the cluster starts."""
    cluster = cluster_ref[0]
    if as_json:
        _print_json("serving", **cluster.describe_process(name))
    else:
        print(f"  serving  {_process_line(cluster, name)}", flush=True)


def _print_up(cluster: LocalCluster) -> None:
    print(f"Brook local cluster is up; data and logs under {cluster.base_dir}")
    for name in cluster.processes:
        print(f"  {_process_line(cluster, name)}")
    if cluster.topology.gateways:
        first = cluster.processes["gateway-1"].address(PLAINTEXT)
        print(f"Kafka clients:  bootstrap.servers={cluster.kafka_bootstrap_servers}")
        if cluster.tls is None:
            print(f"  try:  kcat -b {first} -L")
        else:
            properties = cluster.tls.kafka_client_properties
            print(f"  SASL_SSL (SCRAM-SHA-512 user admin); clients use {properties}")
            print(f"  try:  kcat -F {properties} -L")
    controllers = cluster.controller_bootstrap_servers
    print(f"gRPC clients:   controller.quorum.bootstrap.servers={controllers}")
    if cluster.tls is not None:
        properties = cluster.tls.client_properties
        print(f"  gRPC is mutual TLS; tools and clients use {properties}")
        print(f"  try:  brook topics list --command-config {properties}")
    print("Press Ctrl-C to stop.", flush=True)


@contextlib.contextmanager
def _stop_signals(cluster_ref: list[LocalCluster], requests: _StopRequests) -> Iterator[None]:
    def handle(signum: int, _frame: FrameType | None) -> None:
        requests.count += 1
        # A second signal means "now": skip the orderly shutdown already under way.
        if requests.count > 1 and cluster_ref:
            cluster_ref[0].kill_all(signal.SIGKILL)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _topology_of(args: argparse.Namespace) -> Topology:
    """The counts given, the others from the directory's layout (if it has one), else the
    defaults: so a directory grown by add-node comes back whole without repeating counts."""
    recorded = Topology()
    path = args.dir.resolve() / LAYOUT_FILE
    if path.exists():
        with contextlib.suppress(ClusterLayoutError):
            recorded = LocalCluster.from_layout(args.dir).topology
    given = (args.controllers, args.storage_nodes, args.coordinators, args.gateways)
    counts = [
        recorded.count(role) if count is None else count
        for role, count in zip(START_ORDER, given, strict=True)
    ]
    return Topology(*counts)


def run_cluster_command(args: argparse.Namespace) -> int:
    """``brook cluster up``: 0 after a clean stop, 1 on failure, 2 on bad arguments."""
    requests = _StopRequests()
    cluster_ref: list[LocalCluster] = []
    with _stop_signals(cluster_ref, requests):
        try:
            cluster = LocalCluster(
                args.dir,
                _topology_of(args),
                port_offset=args.port_offset,
                config_overrides=parse_cluster_overrides(args.override),
                startup_timeout_ms=args.startup_timeout_ms,
                stop_timeout_ms=args.stop_timeout_ms,
                interrupted=lambda: requests.count > 0,
                on_serving=lambda name: _print_serving(cluster_ref, name, as_json=args.json),
                adopt_detached=True,
                tls=args.tls,
            )
        except (ClusterLayoutError, ValueError) as error:
            print(f"brook cluster up: {error}", file=sys.stderr)
            return 2
        cluster_ref.append(cluster)
        with _launcher_lock(args.dir, wait_s=LAUNCHER_LOCK_WAIT_S) as held:
            if not held:
                print(
                    f"brook cluster up: another brook cluster up runs {args.dir} already",
                    file=sys.stderr,
                )
                return 1
            return _run_until_signalled(cluster, requests, as_json=args.json)


def _run_until_signalled(cluster: LocalCluster, requests: _StopRequests, *, as_json: bool) -> int:
    failed = False
    # Processes that died while the cluster was up were reported then; the exit status
    # judges only how the shutdown went.
    died: set[str] = set()
    try:
        if not as_json:
            print(f"Starting Brook local cluster in {cluster.base_dir} ...", flush=True)
        cluster.start()
        if as_json:
            _print_json("up", **cluster.describe())
        else:
            _print_up(cluster)
        while True:
            time.sleep(0.2)
            # Checked before reaping: processes a second signal killed are part of the stop.
            if requests.count:
                break
            for exited in cluster.reap_exited():
                died.add(exited.name)
                log_path = cluster.spec(exited.name).log_path
                if as_json:
                    _print_json("exited", name=exited.name, exit_code=exited.exit_code)
                print(
                    f"brook cluster up: {exited.name} (pid {exited.pid}) exited with code "
                    f"{exited.exit_code}; see {log_path}",
                    file=sys.stderr,
                    flush=True,
                )
    except ClusterInterrupted:
        pass
    except ClusterError as error:
        print(f"brook cluster up: {error}", file=sys.stderr, flush=True)
        failed = True
    finally:
        if not as_json:
            print("Stopping (press Ctrl-C again to kill at once) ...", flush=True)
        cluster.stop()
    # last_exit rather than stop()'s answer: a failed start-up has already stopped
    # what it started by the time it reaches here.
    exits = {
        name: last
        for name in cluster.names()
        if name not in died and (last := cluster.last_exit(name)) is not None
    }
    unclean = {name: exited for name, exited in exits.items() if not exited.clean}
    if as_json:
        _print_json(
            "stopped",
            exit_codes={name: exited.exit_code for name, exited in exits.items()},
            unclean=sorted(unclean),
        )
    elif unclean:
        for name, exited in unclean.items():
            how = "was killed after the stop timeout" if exited.killed_after_timeout else "exited"
            print(f"  {name} {how} with code {exited.exit_code}; see {cluster.spec(name).log_path}")
    else:
        print(f"Stopped: {len(exits)} processes exited cleanly.", flush=True)
    return 1 if failed or unclean else 0
