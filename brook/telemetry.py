"""OpenTelemetry set-up: one TracerProvider and one MeterProvider per process.

Both carry a Resource naming the process (service.name = brook-<service>, service.instance.id =
its node.id). Exporters are off by default; `console` writes to stdout (stderr is the log), and
`otlp` sends to a collector over gRPC when the optional `brook[otlp]` extra is installed (config
validation rejects `otlp` without it, before anything starts). Independently, `prometheus=True`
(a METRICS listener is configured) adds a pull reader whose registry `prometheus_registry` the
runtime serves at /metrics (brook/metrics_endpoint.py; names in docs/metrics.md).

With the traces exporter off the sampler is ALWAYS_OFF: spans cost next to nothing and are not
recorded, yet trace context still propagates, so a traced caller's trace id passes through.

Instrument code through `tracer(__name__)` / `meter(__name__)`; they may be called at import time,
before `Telemetry.install()` — the OpenTelemetry API hands out proxies that follow the providers
installed later.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final, TextIO

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler
from prometheus_client import CollectorRegistry, ProcessCollector

__all__ = ["Telemetry", "TelemetrySettings", "meter", "records_root_spans", "tracer"]

# Bounds on what telemetry may hold or wait for: it must never grow memory or stall shutdown.
SPAN_QUEUE_MAX: Final = 2048
SPAN_EXPORT_BATCH_MAX: Final = 512
SPAN_EXPORT_DELAY_MS: Final = 5000
EXPORT_TIMEOUT_MS: Final = 10000


@dataclass(frozen=True)
class TelemetrySettings:
    service_name: str
    """Resource service.name, e.g. brook-storage-node."""
    instance_id: str
    """Resource service.instance.id: the node id."""
    traces_exporter: str = "none"
    metrics_exporter: str = "none"
    otlp_endpoint: str = "http://127.0.0.1:4317"
    metrics_export_interval_ms: int = 60000
    console_stream: TextIO | None = None
    """Where console exporters write; None means stdout."""
    prometheus: bool = False
    """Whether metrics are also kept for Prometheus to scrape (`Telemetry.prometheus_registry`)."""


class Telemetry:
    """The providers of one process: `create`, then `install` once, `shutdown` on exit."""

    _installed_lock: Final = threading.Lock()
    _installed: Telemetry | None = None

    def __init__(
        self,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        prometheus_registry: CollectorRegistry | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.prometheus_registry = prometheus_registry
        """What /metrics serves: the meter provider's metrics and the process's (CPU, memory,
        open files); None unless settings.prometheus. A registry of its own, not
        prometheus_client's global one, so two providers in one process never collide."""
        self._shut_down = False

    @classmethod
    def create(cls, settings: TelemetrySettings) -> Telemetry:
        resource = Resource.create(
            {SERVICE_NAME: settings.service_name, SERVICE_INSTANCE_ID: settings.instance_id}
        )
        span_exporter = _span_exporter(settings)
        sampler: Sampler = ALWAYS_OFF if span_exporter is None else ParentBased(ALWAYS_ON)
        # shutdown_on_exit=False: the runtime flushes with a deadline; an atexit flush without
        # one could hang the exit on an unreachable collector.
        tracer_provider = TracerProvider(sampler=sampler, resource=resource, shutdown_on_exit=False)
        if span_exporter is not None:
            tracer_provider.add_span_processor(
                BatchSpanProcessor(
                    span_exporter,
                    max_queue_size=SPAN_QUEUE_MAX,
                    schedule_delay_millis=SPAN_EXPORT_DELAY_MS,
                    max_export_batch_size=SPAN_EXPORT_BATCH_MAX,
                    export_timeout_millis=EXPORT_TIMEOUT_MS,
                )
            )
        readers: list[MetricReader] = []
        metric_exporter = _metric_exporter(settings)
        if metric_exporter is not None:
            readers.append(
                PeriodicExportingMetricReader(
                    metric_exporter,
                    export_interval_millis=settings.metrics_export_interval_ms,
                    export_timeout_millis=EXPORT_TIMEOUT_MS,
                )
            )
        registry: CollectorRegistry | None = None
        if settings.prometheus:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            # Scope labels (the Python module of each instrument) would only add noise to every
            # series; target_info carries service.name and service.instance.id.
            readers.append(PrometheusMetricReader(scope_info_enabled=False, registry=registry))
        meter_provider = MeterProvider(
            metric_readers=readers, resource=resource, shutdown_on_exit=False
        )
        return cls(tracer_provider, meter_provider, registry)

    def install(self) -> None:
        """Makes these the process-wide providers. A process installs telemetry once."""
        with Telemetry._installed_lock:
            if Telemetry._installed is not None:
                raise RuntimeError("telemetry is already installed in this process")
            trace.set_tracer_provider(self.tracer_provider)
            metrics.set_meter_provider(self.meter_provider)
            Telemetry._installed = self

    def shutdown(self, timeout_ms: int) -> None:
        """Flushes what is buffered (bounded by `timeout_ms`) and stops the exporters."""
        if self._shut_down:
            return
        self._shut_down = True
        self.tracer_provider.force_flush(timeout_millis=timeout_ms)
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown(timeout_millis=timeout_ms)


def _console_options(settings: TelemetrySettings) -> dict[str, Any]:
    return {} if settings.console_stream is None else {"out": settings.console_stream}


def _otlp_options(settings: TelemetrySettings) -> dict[str, Any]:
    return {
        "endpoint": settings.otlp_endpoint,
        "insecure": settings.otlp_endpoint.startswith("http://"),
        "timeout": EXPORT_TIMEOUT_MS / 1000,
    }


def _span_exporter(settings: TelemetrySettings) -> SpanExporter | None:
    match settings.traces_exporter:
        case "none":
            return None
        case "console":
            return ConsoleSpanExporter(**_console_options(settings))
        case "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter(**_otlp_options(settings))
    raise ValueError(f"unknown traces exporter {settings.traces_exporter!r}")


def _metric_exporter(settings: TelemetrySettings) -> MetricExporter | None:
    match settings.metrics_exporter:
        case "none":
            return None
        case "console":
            return ConsoleMetricExporter(**_console_options(settings))
        case "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

            return OTLPMetricExporter(**_otlp_options(settings))
    raise ValueError(f"unknown metrics exporter {settings.metrics_exporter!r}")


def tracer(name: str) -> trace.Tracer:
    """The tracer for instrumentation scope `name` (use the module's __name__)."""
    return trace.get_tracer(name)


def records_root_spans(provider: trace.TracerProvider | None = None) -> bool:
    """Whether a span started with no parent would be recorded by `provider` (default: the
    process's). False before install and when the traces exporter is off (sampler ALWAYS_OFF).

    Requests that arrive without trace context (the Kafka protocol has none) may skip their
    span altogether when this is False: a span that is not recorded still costs ~10 us to make
    (ids, sampler, context switch), which shows on a hot path of small requests. A cheap test
    per request, so that a provider installed later is followed."""
    if provider is None:
        provider = trace.get_tracer_provider()
    sampler = getattr(provider, "sampler", None)
    return sampler is not None and sampler is not ALWAYS_OFF


def meter(name: str) -> metrics.Meter:
    """The meter for instrumentation scope `name` (use the module's __name__)."""
    return metrics.get_meter(name)
