"""Prometheus's scrape endpoint: `GET /metrics` over HTTP/1.x on a service's METRICS listener.

A small HTTP server on the service's event loop (observable-gauge callbacks then read service
state from the thread that owns it). It serves one request per connection and answers:

- 200 with the text exposition format (version 0.0.4) for GET or HEAD of /metrics (a query
  string is ignored);
- 404 for any other path, 405 for any other method, 400 for a request line it cannot parse,
  431 for a request head over `REQUEST_HEAD_BYTES_MAX`, nothing (the connection is closed) for a
  client that sends no complete head within `REQUEST_TIMEOUT_S`;
- and never fails the service: a scrape that raises is a 500 and a log line.

At most `CONNECTIONS_MAX` connections are served at once; more are closed at once. `stop`
closes the listening socket and every open connection, bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from brook.config import Listener

__all__ = ["CONNECTIONS_MAX", "REQUEST_HEAD_BYTES_MAX", "REQUEST_TIMEOUT_S", "MetricsEndpoint"]

METRICS_PATH: Final = "/metrics"
REQUEST_HEAD_BYTES_MAX: Final = 8192
REQUEST_TIMEOUT_S: Final = 10.0
CONNECTIONS_MAX: Final = 16

_logger = logging.getLogger(__name__)

_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


class MetricsEndpoint:
    """Serves `registry` at http://<listener>/metrics between `start` and `stop`."""

    def __init__(self, registry: CollectorRegistry, listener: Listener) -> None:
        self._registry = registry
        self._listener = listener
        self._server: asyncio.Server | None = None
        # The task serving each open connection, and its writer.
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> None:
        """Binds the listener; raises OSError if it cannot."""
        self._server = await asyncio.start_server(
            self._accept,
            self._listener.host,
            self._listener.port,
            limit=REQUEST_HEAD_BYTES_MAX,
        )

    async def stop(self, timeout_s: float) -> None:
        """Stops listening, aborts the connections being served and waits for their tasks to
        end, at most `timeout_s`. Aborting (not cancelling the tasks) makes a connection's
        pending read or write fail as a lost connection does, so its task ends normally and
        asyncio logs nothing."""
        if self._server is None:
            return
        self._server.close()
        for writer in self._connections.values():
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=timeout_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), timeout_s)
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= CONNECTIONS_MAX:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            await self._serve(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            del self._connections[task]
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
        except (asyncio.LimitOverrunError, ValueError):
            await _respond(writer, 431, b"request head too large\n")
            return
        status, body = self._answer(head)
        method = head.split(b" ", 1)[0]
        await _respond(writer, status, b"" if method == b"HEAD" else body, len(body))

    def _answer(self, head: bytes) -> tuple[int, bytes]:
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return 400, b"not an HTTP/1.x request line\n"
        method, target = parts[0], parts[1]
        if target.split(b"?", 1)[0] != METRICS_PATH.encode():
            return 404, b"not found: metrics are at /metrics\n"
        if method not in (b"GET", b"HEAD"):
            return 405, b"only GET and HEAD\n"
        try:
            return 200, generate_latest(self._registry)
        except Exception:
            _logger.exception("metrics scrape failed")
            return 500, b"scrape failed; see the service log\n"


async def _respond(
    writer: asyncio.StreamWriter, status: int, body: bytes, length: int | None = None
) -> None:
    content_type = CONTENT_TYPE_PLAIN_0_0_4 if status == 200 else "text/plain; charset=utf-8"
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
