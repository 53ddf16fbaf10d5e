"""Structured logging on stderr for every Brook process, through the standard logging module.

Every line is one record and carries ts, level, logger, service, node_id and msg, then the fields
passed with `extra=` and, if any, the exception (`exc`). Two formats:

- text: logfmt, `ts=2024-10-25T03:33:01.123Z level=INFO logger=brook.server service=storage-node
  node_id=1 msg="service ready" port=9101`. Values with spaces, quotes, `=` or control characters
  are double-quoted with escapes, so a record is always exactly one line.
- json: one JSON object per line with the same keys.

A record logged while a valid OpenTelemetry span is current (a traced request being handled)
also carries `trace_id` and `span_id` (lower-case hex, as trace back-ends show them), right after
msg, so a log line can be found from a trace and the other way round.

Code logs the usual way: `logging.getLogger(__name__).info("segment rolled", extra={"base_offset":
42})`. An extra field named like a fixed field (say `node_id` for a peer) is written as
`extra.node_id` so it never hides the fixed one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Final, TextIO

from opentelemetry import trace

__all__ = ["JsonFormatter", "LogfmtFormatter", "RepeatLimiter", "configure_logging"]

FIXED_FIELDS: Final = ("ts", "level", "logger", "service", "node_id", "msg")

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES: Final = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}


def _timestamp(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created * 1000) % 1000:03d}Z"


class _StructuredFormatter(logging.Formatter):
    def __init__(self, service: str, node_id: int | str) -> None:
        super().__init__()
        self._service = service
        self._node_id = node_id

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        fields: dict[str, object] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "service": self._service,
            "node_id": self._node_id,
            "msg": record.getMessage(),
        }
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            fields["trace_id"] = trace.format_trace_id(span_context.trace_id)
            fields["span_id"] = trace.format_span_id(span_context.span_id)
        for name, value in record.__dict__.items():
            if name in _RECORD_ATTRIBUTES or name.startswith("_"):
                continue
            fields[f"extra.{name}" if name in fields else name] = value
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            fields["stack"] = self.formatStack(record.stack_info)
        return fields


class LogfmtFormatter(_StructuredFormatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(
            f"{key}={_logfmt_value(value)}" for key, value in self.fields(record).items()
        )


class JsonFormatter(_StructuredFormatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(self.fields(record), default=str, separators=(",", ":"))


_LOGFMT_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _logfmt_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else str(value)
    if text and not any(c in text for c in ' ="\\') and text.isprintable():
        return text
    escaped = "".join(
        _LOGFMT_ESCAPES.get(c, c if c.isprintable() else f"\\u{ord(c):04x}") for c in text
    )
    return f'"{escaped}"'


_FORMATTERS: Final[Mapping[str, type[_StructuredFormatter]]] = {
    "text": LogfmtFormatter,
    "json": JsonFormatter,
}


def configure_logging(
    *,
    service: str,
    node_id: int | str,
    level: str = "INFO",
    log_format: str = "text",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Makes the root logger write structured lines to `stream` (stderr by default).

    Replaces any handlers already on the root logger, so calling it again reconfigures rather
    than duplicating output. Returns the installed handler.
    """
    formatter_type = _FORMATTERS.get(log_format)
    if formatter_type is None:
        raise ValueError(
            f"unknown log format {log_format!r}; expected one of {sorted(_FORMATTERS)}"
        )
    numeric_level = logging.getLevelName(level)
    if not isinstance(numeric_level, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter_type(service, node_id))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric_level)
    return handler


@dataclass(slots=True)
class _Repeats:
    first_s: float
    logged_s: float
    count: int = 1
    suppressed: int = 0


class RepeatLimiter:
    """Logs a condition that repeats (a replica fetch that keeps failing, a peer that stays
    unreachable) at most once per ``interval_s`` per key, saying how often it happened in
    between, and once more when it clears. Without it a retry loop writes a line per back-off
    (issue #13 saw 35,000 lines in 20 minutes) and the one line that matters drowns.

    ``failing()`` counts the keys whose condition holds now, for a gauge. Not thread-safe: use
    it from one thread (the event loop)."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float,
        *,
        level: int = logging.WARNING,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        assert interval_s > 0, interval_s
        self._logger = logger
        self._interval_s = interval_s
        self._level = level
        self._clock_s = clock_s
        self._repeats: dict[Hashable, _Repeats] = {}

    def failed(self, key: Hashable, message: str, *args: object) -> bool:
        """The condition for ``key`` happened (again); True if this call logged it."""
        now_s = self._clock_s()
        repeats = self._repeats.get(key)
        if repeats is None:
            self._repeats[key] = _Repeats(now_s, now_s)
            self._logger.log(self._level, message, *args)
            return True
        repeats.count += 1
        if now_s - repeats.logged_s < self._interval_s:
            repeats.suppressed += 1
            return False
        self._logger.log(
            self._level,
            message + " (%d times in %.0f s, %d not logged)",
            *args,
            repeats.count,
            now_s - repeats.first_s,
            repeats.suppressed,
        )
        repeats.logged_s = now_s
        repeats.suppressed = 0
        return True

    def cleared(self, key: Hashable, message: str, *args: object) -> None:
        """The condition for ``key`` ended; logs (at INFO) only if it had been reported."""
        repeats = self._repeats.pop(key, None)
        if repeats is not None:
            self._logger.info(
                message + " (after %d failures in %.1f s)",
                *args,
                repeats.count,
                self._clock_s() - repeats.first_s,
            )

    def forget(self, key: Hashable) -> None:
        """Stop tracking ``key`` without a line (it went away: unfollowed, closed)."""
        self._repeats.pop(key, None)

    def failing(self) -> int:
        return len(self._repeats)

    def is_failing(self, key: Hashable) -> bool:
        return key in self._repeats

    def count(self, key: Hashable) -> int:
        """How often ``key``'s current condition has happened (0: it does not hold)."""
        repeats = self._repeats.get(key)
        return 0 if repeats is None else repeats.count
