"""Structured log lines: fixed fields on every line, extras, one line per record, both formats."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from brook.logs import RepeatLimiter, configure_logging

LOGFMT_PREFIX = re.compile(
    r"^ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(?P<level>\w+) logger=(?P<logger>\S+) "
    r"service=storage-node node_id=7 msg="
)


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _configured(log_format: str, level: str = "INFO") -> io.StringIO:
    stream = io.StringIO()
    configure_logging(
        service="storage-node", node_id=7, level=level, log_format=log_format, stream=stream
    )
    return stream


@pytest.mark.usefixtures("restore_root_logger")
def test_text_lines_are_logfmt_with_fixed_fields_then_extras() -> None:
    stream = _configured("text")
    logging.getLogger("brook.test").info(
        "segment rolled", extra={"base_offset": 42, "path": "/data/a b", "ok": True}
    )
    line = stream.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    match = LOGFMT_PREFIX.match(line)
    assert match and match["level"] == "INFO" and match["logger"] == "brook.test"
    assert line.rstrip("\n").endswith(
        'msg="segment rolled" base_offset=42 path="/data/a b" ok=true'
    )


@pytest.mark.usefixtures("restore_root_logger")
def test_text_values_are_quoted_and_escaped_so_a_record_stays_on_one_line() -> None:
    stream = _configured("text")
    logging.getLogger("t").warning('say "hi"\nthen=leave', extra={"empty": "", "none": None})
    line = stream.getvalue()
    assert line.count("\n") == 1
    assert 'msg="say \\"hi\\"\\nthen=leave" empty="" none=null' in line


@pytest.mark.usefixtures("restore_root_logger")
def test_exceptions_are_kept_on_the_records_single_line() -> None:
    stream = _configured("text")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("t").exception("failed")
    line = stream.getvalue()
    assert line.count("\n") == 1
    assert 'exc="Traceback (most recent call last):\\n' in line
    assert "ValueError: boom" in line


@pytest.mark.usefixtures("restore_root_logger")
def test_json_lines_are_one_object_with_fixed_fields_and_extras() -> None:
    stream = _configured("json")
    try:
        raise RuntimeError("bad")
    except RuntimeError:
        logging.getLogger("brook.x").error("oops %s", "now", exc_info=True, extra={"n": 3})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert list(record)[:6] == ["ts", "level", "logger", "service", "node_id", "msg"]
    assert record["level"] == "ERROR"
    assert record["logger"] == "brook.x"
    assert record["service"] == "storage-node"
    assert record["node_id"] == 7
    assert record["msg"] == "oops now"
    assert record["n"] == 3
    assert "RuntimeError: bad" in record["exc"]


@pytest.mark.usefixtures("restore_root_logger")
def test_an_extra_named_like_a_fixed_field_does_not_hide_it() -> None:
    stream = _configured("json")
    logging.getLogger("t").info("peer joined", extra={"node_id": 3, "service": "x"})
    record = json.loads(stream.getvalue())
    assert record["node_id"] == 7
    assert record["service"] == "storage-node"
    assert record["extra.node_id"] == 3
    assert record["extra.service"] == "x"


@pytest.mark.usefixtures("restore_root_logger")
def test_records_below_the_configured_level_are_dropped() -> None:
    stream = _configured("text", level="WARNING")
    logging.getLogger("t").info("quiet")
    logging.getLogger("t").warning("loud")
    assert "quiet" not in stream.getvalue()
    assert "msg=loud" in stream.getvalue()


@pytest.mark.usefixtures("restore_root_logger")
def test_configuring_again_replaces_rather_than_duplicates_output() -> None:
    first = _configured("text")
    second = _configured("json")
    logging.getLogger("t").info("once")
    assert first.getvalue() == ""
    assert len(second.getvalue().splitlines()) == 1


def test_unknown_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        configure_logging(service="s", node_id=1, log_format="xml")
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        configure_logging(service="s", node_id=1, level="LOUD")


def test_a_repeating_failure_is_logged_once_per_interval_with_a_count_and_once_when_it_clears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    limiter = RepeatLimiter(logging.getLogger("repeats"), 60.0, clock_s=lambda: now[0])
    caplog.set_level(logging.INFO, logger="repeats")
    assert limiter.failed("p0", "fetch %s failed", "p0")
    for _ in range(50):  # one a second: none logged
        now[0] += 1.0
        assert not limiter.failed("p0", "fetch %s failed", "p0")
    assert limiter.failed("p1", "fetch %s failed", "p1")  # another key has its own interval
    assert limiter.failing() == 2 and limiter.is_failing("p0")
    assert limiter.count("p0") == 51 and limiter.count("p2") == 0
    now[0] += 10.0
    assert limiter.failed("p0", "fetch %s failed", "p0")
    limiter.cleared("p0", "fetch %s works", "p0")
    limiter.cleared("p2", "fetch %s works", "p2")  # never failed: no line
    limiter.forget("p1")
    assert limiter.failing() == 0
    assert [r.getMessage() for r in caplog.records] == [
        "fetch p0 failed",
        "fetch p1 failed",
        "fetch p0 failed (52 times in 60 s, 50 not logged)",
        "fetch p0 works (after 52 failures in 60.0 s)",
    ]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_record_logged_in_a_span_carries_its_trace_and_span_ids(
    restore_root_logger: None, log_format: str
) -> None:
    stream = _configured(log_format)
    tracer = TracerProvider().get_tracer(__name__)
    logger = logging.getLogger("brook.test")

    with tracer.start_as_current_span("request") as span:
        logger.info("inside")
    logger.info("outside")

    context = span.get_span_context()
    inside, outside = stream.getvalue().splitlines()
    trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    if log_format == "json":
        assert json.loads(inside)["trace_id"] == trace_id
        assert json.loads(inside)["span_id"] == span_id
        assert "trace_id" not in json.loads(outside)
    else:
        assert f"msg=inside trace_id={trace_id} span_id={span_id}" in inside
        assert "trace_id" not in outside
