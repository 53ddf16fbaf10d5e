"""The runtime every Brook service runs in: configuration, logging, telemetry, the gRPC server,
health, signals and structured shutdown.

A service is a small object (the `Service` protocol) described by a `ServiceSpec`. The runtime:

1. loads and validates the configuration; any problem exits with status 2 and one line on stderr,
   before anything is bound or started;
2. sets up logging and telemetry;
3. creates the grpc.aio server with the configured limits (and a span and latency per call of
   the services in `spec.traced_services`, brook/rpc/server_telemetry.py), registers
   grpc.health.v1.Health (every name NOT_SERVING) and server reflection
   (`_reflection_names`) and binds the GRPC listener (TLS when it is mapped to SSL, and the
   process's channels TLS when security.inter.broker.protocol is SSL:
   brook/security/grpc_tls.py; bad TLS files exit with status 2 like bad settings), then
   serves /metrics on the METRICS listener if there is one (brook/metrics_endpoint.py) and
   starts measuring the event loop's idle share (brook/loop_idle.py); a bind failure exits
   with status 1;
4. awaits `service.start(context)`: the service registers its servicers on `context.server` and
   starts its background tasks through `context.tasks`;
5. starts the server and reports SERVING for "" and every name in `spec.health_names`;
6. on SIGTERM/SIGINT (or a background task failing) shuts down within `shutdown.timeout.ms`:
   health NOT_SERVING at once, no new RPCs, in-flight RPCs get the grace period, then
   `service.stop()`, then every owned task is cancelled and awaited, then /metrics stops, then
   telemetry is flushed.
   A second signal exits immediately.

Exit status: 0 after a clean shutdown, 1 if start-up, a background task or the shutdown failed,
2 for invalid configuration, 128+signal number when a second signal forces the exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.metrics import CallbackOptions, Observation
from prometheus_client import CollectorRegistry

from brook.config import METRICS_LISTENER, Config, ConfigDef, ConfigError, Listener, load_config
from brook.logs import configure_logging
from brook.loop_idle import LoopIdleMonitor
from brook.metrics_endpoint import MetricsEndpoint
from brook.rpc.channels import default_security, set_default_security
from brook.rpc.server_telemetry import ServerTelemetryInterceptor
from brook.security.authorizer import Authorizer
from brook.security.grpc_authorization import AuthorizationInterceptor
from brook.security.grpc_identity import GrpcIdentity
from brook.security.grpc_tls import GrpcSecurity
from brook.security.tls import TlsError
from brook.telemetry import Telemetry, TelemetrySettings, meter

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "Health",
    "Service",
    "ServiceContext",
    "ServiceSpec",
    "TaskOwner",
    "add_service_arguments",
    "make_directories",
    "run_service",
    "serve",
    "service_main",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_CONFIG: Final = 2

GRPC_LISTENER: Final = "GRPC"
# However short shutdown.timeout.ms is, cancelled tasks and stop() get this long to unwind.
UNWIND_MIN_S: Final = 0.1
# The share of shutdown.timeout.ms kept back from in-flight RPCs for stop, tasks and telemetry.
CLEANUP_RESERVE_MAX_S: Final = 1.0

_logger = logging.getLogger(__name__)


class Service(Protocol):
    """What a Brook service implements. The runtime calls `start` once, then `stop` once.

    `start` registers servicers on `context.server` (before the server starts, as grpc requires)
    and starts background work with `context.tasks.spawn`; it may take as long as start-up
    takes (recovery, loading state): the service is reported SERVING only after it returns.
    `stop` releases what the service holds. It is called after the gRPC server has stopped, even
    if `start` failed or was cancelled part-way, so it must cope with a partial start. The
    runtime cancels and awaits the tasks in `context.tasks` itself, after `stop` returns.
    """

    async def start(self, context: ServiceContext) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class ServiceSpec:
    """Everything the runtime needs to know about one kind of service."""

    name: str
    """Short name: storage-node, controller, group-coordinator, gateway."""
    config_def: ConfigDef
    health_names: tuple[str, ...]
    """Fully qualified names of the gRPC services the service registers, e.g.
    brook.v1.StorageService: reported in health besides "" and listed by server reflection."""
    create: Callable[[Config], Service]
    traced_services: tuple[str, ...] = ()
    """The gRPC services the runtime gives a server span and a latency record per call
    (brook.rpc.server_telemetry); a service that instruments its calls itself leaves its names
    out."""

    @property
    def prog(self) -> str:
        """The console script and the telemetry service.name: brook-<name>."""
        return f"brook-{self.name}"


class TaskOwner:
    """Owns a service's background tasks: every task spawned here is cancelled and awaited at
    shutdown. A task that fails (raises anything but CancelledError) is logged and makes the
    process shut down with status 1, because a service silently missing a loop is worse than a
    restart."""

    def __init__(self, on_failure: Callable[[BaseException], None]) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_failure = on_failure
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        if self._closed:
            coro.close()
            raise RuntimeError(f"cannot start task {name}: the service is shutting down")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            _logger.error("background task failed", exc_info=error, extra={"task": task.get_name()})
            if not self._closed:
                self._on_failure(error)

    async def close(self, timeout_s: float) -> bool:
        """Cancels every task and waits up to `timeout_s` for all to finish. Returns False (and
        logs their names) if some did not finish in time."""
        self._closed = True
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            _logger.error(
                "background tasks did not finish after cancellation",
                extra={"tasks": ",".join(sorted(t.get_name() for t in pending))},
            )
            return False
        return True


_SERVING: Final = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING: Final = health_pb2.HealthCheckResponse.NOT_SERVING


class Health:
    """The process's grpc.health.v1.Health state: "" (overall) and the service's own names."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = ("", *names)
        self.servicer = grpc_health.aio.HealthServicer()
        self._shutting_down = False

    async def set_serving(self, name: str, serving: bool) -> None:
        """Reports `name` SERVING or NOT_SERVING; ignored once shutdown has started."""
        if name not in self.names:
            raise ValueError(f"{name!r} is not a health name of this service ({self.names})")
        await self.servicer.set(name, _SERVING if serving else _NOT_SERVING)

    async def set_all(self, serving: bool) -> None:
        for name in self.names:
            await self.set_serving(name, serving)

    async def enter_shutdown(self) -> None:
        """NOT_SERVING for every name, permanently."""
        self._shutting_down = True
        await self.servicer.enter_graceful_shutdown()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down


@dataclass(frozen=True)
class ServiceContext:
    """What the runtime hands a service in `start`."""

    config: Config
    server: Any
    """The grpc.aio.Server: register servicers on it in `start`."""
    tasks: TaskOwner
    health: Health
    shutdown_requested: asyncio.Event
    """Set the moment shutdown begins; long-lived streams should end when it is set, so the
    grace period is not spent waiting for them."""
    grpc_listener: Listener
    """The GRPC listener the server is bound to."""
    identity: GrpcIdentity
    """Who each gRPC call is (brook.security.grpc_identity), over the SCRAM credentials of the
    image the authorizer follows: the one the authorization interceptor asks when the
    authorizer is on, and the one a service asks when it needs a caller's principal itself
    whether or not it is (the storage nodes' client quotas)."""
    authorizer: Authorizer = field(default_factory=lambda: Authorizer(enabled=False))
    """The process's authorizer (authorizer.class.name): the gRPC interceptor asks it about
    every call; the service keeps it on the metadata it follows (``MetadataCache.feed``) and
    asks it about whatever else it serves (the gateway's Kafka APIs)."""


async def make_directories(paths: Iterable[str]) -> None:
    """Creates a service's data directories if missing (off the event loop), so a bad path
    fails start-up rather than the first write."""

    def make() -> None:
        for path in paths:
            Path(path).mkdir(parents=True, exist_ok=True)

    await asyncio.to_thread(make)


def _grpc_server(
    config: Config,
    traced_services: tuple[str, ...],
    authorizer: Authorizer,
    identity: GrpcIdentity,
) -> Any:
    request_bytes_max = config.get_int("socket.request.max.bytes")
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if traced_services:
        interceptors.append(ServerTelemetryInterceptor(traced_services))
    if authorizer.enabled:
        interceptors.append(AuthorizationInterceptor(authorizer, identity.principal_of))
    return grpc.aio.server(
        interceptors=interceptors,
        options=(
            # grpc enables SO_REUSEPORT by default, which lets a second process bind a port
            # that is in use and silently split its traffic; a busy port must be an error.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", request_bytes_max),
            ("grpc.max_send_message_length", request_bytes_max),
        ),
        maximum_concurrent_rpcs=config.get_int("queued.max.requests"),
    )


def _reflection_names(spec: ServiceSpec) -> tuple[str, ...]:
    """Every gRPC service a process of `spec` serves, as server reflection lists them: the
    service's own (`spec.health_names`), grpc.health.v1.Health and the reflection service.
    Reflection describes them from the default protobuf descriptor pool, which holds every
    brook.v1 service whose _pb2 module the service imported to register it."""
    health_name: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    return (*spec.health_names, health_name, reflection.SERVICE_NAME)


def _bind_failure_reason(listener: Listener) -> str:
    """grpc only says that binding failed; a plain socket says why."""
    try:
        infos = socket.getaddrinfo(listener.host, listener.port, type=socket.SOCK_STREAM)
    except OSError as e:
        return f"cannot resolve {listener.host}: {e.strerror or e}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            return str(e.strerror or e).lower()
    return "grpc could not bind it"


def _remaining_s(loop: asyncio.AbstractEventLoop, deadline: float) -> float:
    return max(UNWIND_MIN_S, deadline - loop.time())


class _LoopIdleInstruments:
    """The event loop's idle gauges, made once per process: they report the loop `serve` runs
    (nothing while none runs). Kafka's RequestHandlerAvgIdlePercent, for a process whose
    requests all run on one loop."""

    def __init__(self) -> None:
        self.monitor: LoopIdleMonitor | None = None
        instruments = meter(__name__)
        instruments.create_observable_gauge(
            "brook.event_loop.idle_ratio",
            callbacks=[self._observe_ratio],
            unit="1",
            description="Share of recent wall time the event loop waited for work (0..1)",
        )
        instruments.create_observable_counter(
            "brook.event_loop.idle",
            callbacks=[self._observe_seconds],
            unit="s",
            description="Time the event loop waited for work",
        )

    def _observe_ratio(self, options: CallbackOptions) -> list[Observation]:
        monitor = self.monitor
        return [] if monitor is None else [Observation(monitor.idle_ratio())]

    def _observe_seconds(self, options: CallbackOptions) -> list[Observation]:
        monitor = self.monitor
        return [] if monitor is None else [Observation(monitor.idle_seconds())]


_loop_idle = _LoopIdleInstruments()


async def _start_metrics_endpoint(
    config: Config, registry: CollectorRegistry | None
) -> MetricsEndpoint | None:
    """Serves /metrics on the METRICS listener (None if there is none); raises OSError if the
    port cannot be bound."""
    listener = config.optional_listener(METRICS_LISTENER)
    if listener is None:
        return None
    if registry is None:
        raise ValueError("a METRICS listener needs the telemetry's Prometheus registry")
    endpoint = MetricsEndpoint(registry, listener)
    await endpoint.start()
    _logger.info("serving metrics", extra={"listener": str(listener), "path": "/metrics"})
    return endpoint


async def serve(
    spec: ServiceSpec,
    config: Config,
    *,
    stop: asyncio.Event,
    metrics_registry: CollectorRegistry | None = None,
    grpc_security: GrpcSecurity | None = None,
) -> int:
    """Runs one service until `stop` is set (or a background task fails); returns the exit
    status. Signal handling is the caller's job (see `run_service`), so tests can drive this
    in-process. `metrics_registry` is what the METRICS listener serves (required with one).
    `grpc_security`: the TLS `run_service` already read (None: read it from `config`); its
    channel security is the process's default while the service runs."""
    if grpc_security is None:
        try:
            grpc_security = GrpcSecurity.from_config(config)
        except TlsError as e:
            _logger.error("invalid TLS configuration", extra={"reason": str(e)})
            return EXIT_CONFIG
    previous_security = default_security()
    set_default_security(grpc_security.channels)
    try:
        return await _serve(spec, config, stop, metrics_registry, grpc_security)
    finally:
        set_default_security(previous_security)


async def _serve(
    spec: ServiceSpec,
    config: Config,
    stop: asyncio.Event,
    metrics_registry: CollectorRegistry | None,
    grpc_security: GrpcSecurity,
) -> int:
    loop = asyncio.get_running_loop()
    failed = False

    def on_task_failure(_: BaseException) -> None:
        nonlocal failed
        failed = True
        stop.set()

    listener = config.listener(GRPC_LISTENER)
    health = Health(spec.health_names)
    await health.set_all(False)
    authorizer = Authorizer.from_config(config)
    # The one place a gRPC call's identity comes from: its client certificate, or credentials
    # checked against the SCRAM credentials of the image the authorizer follows.
    identity = GrpcIdentity(lambda: authorizer.image)
    server = _grpc_server(config, spec.traced_services, authorizer, identity)
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
    reflection.enable_server_reflection(_reflection_names(spec), server)
    try:
        if grpc_security.server is None:
            server.add_insecure_port(listener.address)
        else:
            server.add_secure_port(listener.address, grpc_security.server.credentials())
    except RuntimeError:
        _logger.error(
            "cannot listen",
            extra={"listener": str(listener), "reason": _bind_failure_reason(listener)},
        )
        await server.stop(None)
        return EXIT_FAILURE
    try:
        metrics_endpoint = await _start_metrics_endpoint(config, metrics_registry)
    except OSError as e:
        _logger.error(
            "cannot listen",
            extra={
                "listener": str(config.optional_listener(METRICS_LISTENER)),
                "reason": str(e.strerror or e).lower(),
            },
        )
        await server.stop(None)
        return EXIT_FAILURE
    monitor = LoopIdleMonitor()
    if monitor.install(loop):
        _loop_idle.monitor = monitor
    try:
        clean = await _serve_started(
            spec, config, stop, server, health, listener, authorizer, identity, on_task_failure
        )
    finally:
        if _loop_idle.monitor is monitor:
            _loop_idle.monitor = None
        monitor.uninstall()
        if metrics_endpoint is not None:
            await metrics_endpoint.stop(UNWIND_MIN_S)
    return EXIT_FAILURE if failed or not clean else EXIT_OK


async def _serve_started(
    spec: ServiceSpec,
    config: Config,
    stop: asyncio.Event,
    server: Any,
    health: Health,
    listener: Listener,
    authorizer: Authorizer,
    identity: GrpcIdentity,
    on_task_failure: Callable[[BaseException], None],
) -> bool:
    """Starts the service on the bound server, waits for `stop`, shuts down; False if the
    start-up or the shutdown failed."""
    loop = asyncio.get_running_loop()
    failed = False

    tasks = TaskOwner(on_task_failure)
    context = ServiceContext(
        config, server, tasks, health, stop, listener, identity=identity, authorizer=authorizer
    )
    service: Service | None = None
    try:
        service = spec.create(config)
        start = loop.create_task(service.start(context), name=f"{spec.name}.start")
        stop_wait = loop.create_task(stop.wait(), name=f"{spec.name}.stop-wait")
        await asyncio.wait((start, stop_wait), return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop_wait
        if not start.done():
            _logger.info("shutdown requested during start-up")
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await start
        else:
            start.result()
            await server.start()
            await health.set_all(True)
            _logger.info(
                "service ready",
                extra={"listener": str(listener), "grpc_services": ",".join(spec.health_names)},
            )
    except Exception:
        _logger.exception("service failed to start")
        failed = True
        stop.set()

    await stop.wait()
    clean = await _shut_down(loop, config, server, health, service, tasks)
    return clean and not failed


async def _shut_down(
    loop: asyncio.AbstractEventLoop,
    config: Config,
    server: Any,
    health: Health,
    service: Service | None,
    tasks: TaskOwner,
) -> bool:
    """The shutdown sequence under one deadline; returns False if any step failed or overran."""
    budget_s = config.get_int("shutdown.timeout.ms") / 1000
    deadline = loop.time() + budget_s
    reserve_s = min(CLEANUP_RESERVE_MAX_S, budget_s / 3)
    _logger.info("shutting down", extra={"timeout_ms": config.get_int("shutdown.timeout.ms")})
    clean = True
    await health.enter_shutdown()
    # Refuses new RPCs at once; in-flight ones finish or are cancelled when the grace ends.
    await server.stop(max(0.0, deadline - reserve_s - loop.time()))
    if service is not None:
        try:
            await asyncio.wait_for(service.stop(), _remaining_s(loop, deadline))
        except TimeoutError:
            _logger.error("service stop did not finish in time")
            clean = False
        except Exception:
            _logger.exception("service stop failed")
            clean = False
    if not await tasks.close(_remaining_s(loop, deadline)):
        clean = False
    return clean


def _warn_unknown_keys(config: Config) -> None:
    known = [key.name for key in config.definition.keys]
    for name in config.unknown_keys:
        suggestion = difflib.get_close_matches(name, known, n=1)
        _logger.warning(
            "ignoring unknown configuration key",
            extra={
                "key": name,
                "source": config.unknown_key_source(name),
                "did_you_mean": suggestion[0] if suggestion else None,
            },
        )


def _telemetry_settings(spec: ServiceSpec, config: Config) -> TelemetrySettings:
    return TelemetrySettings(
        service_name=spec.prog,
        instance_id=str(config.get_int("node.id")),
        traces_exporter=config.get_string("telemetry.traces.exporter"),
        metrics_exporter=config.get_string("telemetry.metrics.exporter"),
        otlp_endpoint=config.get_string("telemetry.otlp.endpoint"),
        metrics_export_interval_ms=config.get_int("telemetry.metrics.export.interval.ms"),
        prometheus=config.optional_listener(METRICS_LISTENER) is not None,
    )


async def _serve_until_signalled(
    spec: ServiceSpec,
    config: Config,
    metrics_registry: CollectorRegistry | None,
    grpc_security: GrpcSecurity,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        name = signal.Signals(signum).name
        if signals_seen == 1:
            _logger.info("shutdown requested", extra={"signal": name})
            stop.set()
            return
        # A second signal means the operator will not wait: no flushing, no cleanup.
        os.write(2, f"{spec.prog}: second {name}, exiting immediately\n".encode())
        os._exit(128 + signum)

    handled = (signal.SIGTERM, signal.SIGINT)
    for signum in handled:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await serve(
            spec, config, stop=stop, metrics_registry=metrics_registry, grpc_security=grpc_security
        )
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


def run_service(
    spec: ServiceSpec,
    *,
    config_path: Path | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    prog: str | None = None,
) -> int:
    """Loads the configuration and runs the service until a signal; returns the exit status."""
    shown_prog = prog or spec.prog
    try:
        config = load_config(
            spec.config_def, config_path=config_path, overrides=overrides, environ=environ
        )
    except ConfigError as e:
        print(f"{shown_prog}: invalid configuration: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    node_id = config.get_int("node.id")
    configure_logging(
        service=spec.name,
        node_id=node_id,
        level=config.get_string("logging.level"),
        log_format=config.get_string("logging.format"),
    )
    _warn_unknown_keys(config)
    try:
        grpc_security = GrpcSecurity.from_config(config)
    except TlsError as e:
        print(f"{shown_prog}: invalid TLS configuration: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    for name, value, source in config.non_default_items():
        _logger.info("configured", extra={"key": name, "value": value, "source": source})
    telemetry = Telemetry.create(_telemetry_settings(spec, config))
    telemetry.install()
    try:
        exit_status, stuck = _run_event_loop(
            _serve_until_signalled(spec, config, telemetry.prometheus_registry, grpc_security)
        )
    finally:
        budget_ms = config.get_int("shutdown.timeout.ms")
        telemetry.shutdown(
            timeout_ms=max(100, int(min(CLEANUP_RESERVE_MAX_S * 1000, budget_ms / 3)))
        )
    _logger.info("stopped", extra={"exit_status": exit_status})
    if stuck:
        # Something ignored cancellation or a worker thread is blocked: a normal interpreter
        # exit would wait for it forever, and the process must exit.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_status)
    return exit_status


def _run_event_loop(main: Coroutine[Any, Any, int]) -> tuple[int, bool]:
    """Runs `main` like asyncio.run, but bounds the clean-up that asyncio.run leaves unbounded
    (awaiting leftover tasks, joining executor threads). Returns (exit status, stuck)."""
    loop = asyncio.new_event_loop()
    stuck = False
    try:
        exit_status = loop.run_until_complete(main)
        leftover = asyncio.all_tasks(loop)
        for task in leftover:
            task.cancel()
        if leftover:
            _, pending = loop.run_until_complete(asyncio.wait(leftover, timeout=UNWIND_MIN_S))
            if pending:
                _logger.error(
                    "tasks ignored cancellation at exit",
                    extra={"tasks": ",".join(sorted(t.get_name() for t in pending))},
                )
                stuck = True
                exit_status = EXIT_FAILURE
        loop.run_until_complete(loop.shutdown_asyncgens())
        with contextlib.suppress(TimeoutError):
            loop.run_until_complete(
                asyncio.wait_for(loop.shutdown_default_executor(), UNWIND_MIN_S)
            )
    finally:
        loop.close()
    blocked = [
        t.name
        for t in threading.enumerate()
        if t is not threading.main_thread() and t.is_alive() and not t.daemon
    ]
    if blocked:
        _logger.error("threads still running at exit", extra={"threads": ",".join(blocked)})
        stuck = True
        exit_status = EXIT_FAILURE
    return exit_status, stuck


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line every service takes (also used by `brook <service>`)."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="a properties file (key=value lines, # or ! comments), as Kafka's server.properties",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one configuration key; wins over the file and the environment (repeatable)",
    )


def service_main(spec: ServiceSpec, argv: Sequence[str] | None = None) -> int:
    """The `main()` of a service's __main__ module and console script."""
    parser = argparse.ArgumentParser(
        prog=spec.prog,
        description=f"Run a Brook {spec.name}. Configuration, lowest to highest precedence: "
        "defaults < --config file < BROOK_* environment variables < --override.",
    )
    add_service_arguments(parser)
    args = parser.parse_args(argv)
    return run_service(spec, config_path=args.config, overrides=args.override)
