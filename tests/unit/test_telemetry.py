"""Telemetry providers: resource identity, exporters, sampling when off, flush on shutdown."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

from opentelemetry import trace

from brook.telemetry import Telemetry, TelemetrySettings

INSTALL_TIMEOUT_S = 60


def _settings(**changes: object) -> TelemetrySettings:
    values: dict[str, object] = {"service_name": "brook-storage-node", "instance_id": "7"}
    values.update(changes)
    return TelemetrySettings(**values)  # type: ignore[arg-type]


def test_resource_names_the_service_and_the_node_on_traces_and_metrics() -> None:
    stream = io.StringIO()
    telemetry = Telemetry.create(_settings(metrics_exporter="console", console_stream=stream))
    telemetry.meter_provider.get_meter("test").create_counter("requests").add(1)
    telemetry.shutdown(timeout_ms=2000)

    attributes = telemetry.tracer_provider.resource.attributes
    assert attributes["service.name"] == "brook-storage-node"
    assert attributes["service.instance.id"] == "7"
    metrics_resource = json.loads(stream.getvalue())["resource_metrics"][0]["resource"]
    assert metrics_resource["attributes"]["service.name"] == "brook-storage-node"
    assert metrics_resource["attributes"]["service.instance.id"] == "7"


def test_console_exporters_write_spans_and_metrics_when_shut_down() -> None:
    stream = io.StringIO()
    telemetry = Telemetry.create(
        _settings(traces_exporter="console", metrics_exporter="console", console_stream=stream)
    )
    with telemetry.tracer_provider.get_tracer("test").start_as_current_span("append") as span:
        assert span.is_recording()
    telemetry.meter_provider.get_meter("test").create_counter("bytes_in").add(100)

    telemetry.shutdown(timeout_ms=2000)

    output = stream.getvalue()
    assert '"name": "append"' in output
    assert '"name": "bytes_in"' in output
    assert "brook-storage-node" in output


def test_with_traces_off_spans_are_not_recorded_but_keep_the_callers_trace() -> None:
    telemetry = Telemetry.create(_settings())
    try:
        tracer = telemetry.tracer_provider.get_tracer("test")
        caller = trace.SpanContext(
            trace_id=0x1234, span_id=0x99, is_remote=True, trace_flags=trace.TraceFlags(1)
        )
        with tracer.start_as_current_span(
            "fetch", context=trace.set_span_in_context(trace.NonRecordingSpan(caller))
        ) as span:
            assert not span.is_recording()
            assert span.get_span_context().trace_id == 0x1234
    finally:
        telemetry.shutdown(timeout_ms=1000)


def test_install_sets_the_process_providers_once() -> None:
    # In a child process: installing changes process-wide state the test session shares.
    script = textwrap.dedent(
        """
        import io
        from brook.telemetry import Telemetry, TelemetrySettings, tracer
        early = tracer("early")  # taken before install, as module-level tracers are
        stream = io.StringIO()
        settings = TelemetrySettings("brook-gateway", "1", traces_exporter="console",
                                     console_stream=stream)
        telemetry = Telemetry.create(settings)
        telemetry.install()
        with early.start_as_current_span("after-install") as span:
            assert span.is_recording()
        try:
            Telemetry.create(settings).install()
        except RuntimeError as e:
            print("second install refused:", e)
        telemetry.shutdown(timeout_ms=1000)
        assert '"name": "after-install"' in stream.getvalue()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "second install refused: telemetry is already installed" in result.stdout


def test_shutdown_twice_is_harmless() -> None:
    telemetry = Telemetry.create(
        _settings(metrics_exporter="console", console_stream=io.StringIO())
    )
    telemetry.shutdown(timeout_ms=500)
    telemetry.shutdown(timeout_ms=500)
