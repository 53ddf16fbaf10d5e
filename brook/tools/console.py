"""``brook console-producer`` and ``brook console-consumer``: records from stdin, records to
stdout, in the formats of Kafka's kafka-console-producer and kafka-console-consumer.

Console producer line format (``--property``): with ``parse.headers=true`` a line starts with
``k1:v1,k2:v2`` and ``headers.delimiter``; with ``parse.key=true`` the key comes next, up to the
first ``key.separator``; the rest is the value. Bytes are sent as they are read (no decoding),
so any binary-safe line works.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import BinaryIO

from brook.client import (
    ConfigError,
    Consumer,
    ConsumerRecord,
    Producer,
    RecordFuture,
    TimestampType,
    TopicPartition,
)
from brook.client.errors import BrookClientError
from brook.tools.options import (
    EXIT_FAILED,
    EXIT_OK,
    TIMEOUT_MS_DEFAULT,
    LineFormat,
    PrintFormat,
    ToolError,
    UsageError,
    client_settings,
    parse_key_values,
    report_error,
    topic_partition_count,
)

__all__ = [
    "LineError",
    "format_record",
    "parse_line",
    "run_console_consumer",
    "run_console_producer",
]

Header = tuple[str, bytes | None]
# How long one poll (or wait for input) lasts at most, so that a stop signal or --timeout-ms
# is noticed promptly.
_POLL_SLICE_S = 0.2
_READ_BYTES = 64 * 1024
# A line is one record: anything longer than the largest request could never be sent.
_LINE_BYTES_MAX = 64 * 1024 * 1024
# How long closing waits for records still in flight before it fails them.
_CLOSE_TIMEOUT_S = 30.0
_TIMESTAMP_NAMES = {
    TimestampType.CREATE_TIME: b"CreateTime",
    TimestampType.LOG_APPEND_TIME: b"LogAppendTime",
}


class LineError(ValueError):
    """A line that does not match the configured format."""


def _nullable(data: bytes, fmt: LineFormat) -> bytes | None:
    return None if fmt.null_marker is not None and data == fmt.null_marker else data


def _parse_headers(text: bytes, fmt: LineFormat, line_number: int) -> list[Header]:
    headers: list[Header] = []
    if not text:
        return headers
    for item in text.split(fmt.headers_separator):
        name, sep, value = item.partition(fmt.headers_key_separator)
        if not sep:
            raise LineError(
                f"line {line_number}: header {item!r} has no headers.key.separator "
                f"{fmt.headers_key_separator!r}"
            )
        try:
            header_name = name.decode("utf-8")
        except UnicodeDecodeError:
            raise LineError(f"line {line_number}: header name {name!r} is not UTF-8") from None
        if fmt.null_marker is not None and header_name == fmt.null_marker.decode("utf-8"):
            raise LineError(f"line {line_number}: a header name cannot be null")
        headers.append((header_name, _nullable(value, fmt)))
    return headers


def parse_line(
    line: bytes, fmt: LineFormat, line_number: int
) -> tuple[bytes | None, bytes | None, list[Header]]:
    """``(key, value, headers)`` of one input line (without its line ending)."""
    headers: list[Header] = []
    rest = line
    if fmt.parse_headers:
        head, sep, tail = rest.partition(fmt.headers_delimiter)
        if sep:
            headers = _parse_headers(head, fmt, line_number)
            rest = tail
        elif not fmt.ignore_error:
            raise LineError(
                f"line {line_number}: no headers.delimiter {fmt.headers_delimiter!r} in {line!r}"
            )
    key: bytes | None = None
    if fmt.parse_key:
        head, sep, tail = rest.partition(fmt.key_separator)
        if sep:
            key = _nullable(head, fmt)
            rest = tail
        elif not fmt.ignore_error:
            raise LineError(
                f"line {line_number}: no key.separator {fmt.key_separator!r} in {line!r} "
                "(set --property ignore.error=true to send such lines without a key)"
            )
    return key, _nullable(rest, fmt), headers


def _lines(stream: BinaryIO, stopping: threading.Event) -> Iterator[bytes]:
    """The lines of ``stream`` (line endings removed) until it ends or ``stopping`` is set.

    Reads the descriptor directly with a bounded wait, so that a stop signal ends an
    interactive session at once instead of after the next line is typed.
    """
    fd = stream.fileno()
    pending = bytearray()
    while not stopping.is_set():
        ready, _, _ = select.select([fd], [], [], _POLL_SLICE_S)
        if not ready:
            continue
        chunk = os.read(fd, _READ_BYTES)
        if not chunk:
            break
        pending += chunk
        start = 0
        while (newline := pending.find(b"\n", start)) >= 0:
            end = newline - 1 if newline > start and pending[newline - 1] == 0x0D else newline
            yield bytes(pending[start:end])
            start = newline + 1
        del pending[:start]
        if len(pending) > _LINE_BYTES_MAX:
            raise LineError(f"a line longer than {_LINE_BYTES_MAX} bytes")
    if pending and not stopping.is_set():
        yield bytes(pending[:-1] if pending.endswith(b"\r") else pending)


class _Outcomes:
    """Counts acknowledgements and failures; callbacks run on the producer's I/O thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failed = 0
        self.first_error: BaseException | None = None

    def record(self, future: RecordFuture) -> None:
        error = future.exception(0)
        if error is None:
            return
        with self._lock:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error
                sys.stderr.write(
                    f"brook console-producer: error: a record for {future.topic} failed: {error}\n"
                )
                sys.stderr.flush()


def run_console_producer(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    command = "console-producer"
    try:
        fmt = LineFormat.from_properties(args.property)
        settings = client_settings(
            args.bootstrap_server,
            parse_key_values(args.producer_property, "--producer-property"),
            TIMEOUT_MS_DEFAULT,
        )
        producer = Producer(settings)
    except (UsageError, ConfigError) as error:
        return report_error(command, UsageError(str(error)))
    except ToolError as error:
        return report_error(command, error)
    outcomes = _Outcomes()
    status = EXIT_OK
    sent = 0
    try:
        with _stop_on_signals() as stopping:
            lines = _lines(stdin or sys.stdin.buffer, stopping)
            try:
                for line_number, line in enumerate(lines, 1):
                    key, value, headers = parse_line(line, fmt, line_number)
                    future = producer.send(args.topic, value, key=key, headers=headers or None)
                    future.add_done_callback(outcomes.record)
                    sent += 1
            except (LineError, BrookClientError, TypeError, ValueError) as error:
                status = report_error(command, ToolError(str(error)))
    finally:
        try:
            producer.close(_CLOSE_TIMEOUT_S)
        except BrookClientError as error:
            status = report_error(command, ToolError(str(error)))
    if outcomes.failed:
        sys.stderr.write(f"{outcomes.failed} of {sent} record(s) failed\n")
        return EXIT_FAILED
    return status


def format_record(record: ConsumerRecord, fmt: PrintFormat) -> bytes:
    """One record as kafka-console-consumer's default formatter prints it (line included)."""
    fields: list[bytes] = []
    if fmt.print_timestamp:
        name = _TIMESTAMP_NAMES.get(record.timestamp_type, b"CreateTime")
        fields.append(b"%s:%d" % (name, record.timestamp))
    if fmt.print_partition:
        fields.append(b"Partition:%d" % record.partition)
    if fmt.print_offset:
        fields.append(b"Offset:%d" % record.offset)
    if fmt.print_headers:
        if record.headers:
            fields.append(
                fmt.headers_separator.join(
                    name.encode("utf-8")
                    + fmt.headers_key_separator
                    + (fmt.null_literal if value is None else value)
                    for name, value in record.headers
                )
            )
        else:
            fields.append(b"NO_HEADERS")
    if fmt.print_key:
        fields.append(fmt.null_literal if record.key is None else record.key)
    if fmt.print_value:
        fields.append(fmt.null_literal if record.value is None else record.value)
    return fmt.key_separator.join(fields) + fmt.line_separator


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM while the block runs (main thread only)."""
    stopping = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return

    def handle(_signum: int, _frame: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_positions(
    consumer: Consumer, partitions: list[TopicPartition], args: argparse.Namespace
) -> None:
    if args.from_beginning:
        consumer.seek_to_beginning(partitions)
        return
    offset = args.offset
    if offset is None or offset == "latest":
        consumer.seek_to_end(partitions)
    elif offset == "earliest":
        consumer.seek_to_beginning(partitions)
    else:
        # Checked by the caller: a number, and --partition given.
        for tp in partitions:
            consumer.seek(tp, int(offset))


def _check_offset_option(args: argparse.Namespace) -> None:
    offset = args.offset
    if offset is None or offset in ("earliest", "latest"):
        return
    try:
        value = int(offset)
    except ValueError:
        raise UsageError(f"--offset must be a number, earliest or latest, got {offset!r}") from None
    if value < 0:
        raise UsageError(f"--offset must be >= 0, got {value}")
    if args.partition is None:
        raise UsageError("--offset N needs --partition: offsets are per partition")


def run_console_consumer(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    command = "console-consumer"
    out = stdout or sys.stdout.buffer
    try:
        fmt = PrintFormat.from_properties(args.property)
        _check_offset_option(args)
        properties = parse_key_values(args.consumer_property, "--consumer-property")
        group = _group_option(args, properties)
        settings = client_settings(
            args.bootstrap_server,
            properties,
            args.metadata_timeout_ms,
            # As a group member: the printed records' offsets are committed (below), and a
            # group without committed offsets starts where --from-beginning says.
            **(
                {}
                if group is None
                else {
                    "group.id": group,
                    "enable.auto.commit": "false",
                    "auto.offset.reset": "earliest" if args.from_beginning else "latest",
                }
            ),
        )
        # Validates every setting before the topic look-up talks to the cluster.
        consumer = Consumer(settings)
    except (UsageError, ConfigError) as error:
        return report_error(command, UsageError(str(error)))
    except ToolError as error:
        return report_error(command, error)
    consumed = 0
    status = EXIT_OK
    try:
        partitions = _assigned(args, consumer)
        if group is None:
            consumer.assign(partitions)
            _start_positions(consumer, partitions, args)
        else:
            consumer.subscribe([args.topic])
        idle_limit_s = None if args.timeout_ms is None else args.timeout_ms / 1000
        last_record = time.monotonic()
        with _stop_on_signals() as stopping:
            while not stopping.is_set():
                if args.max_messages is not None and consumed >= args.max_messages:
                    break
                slice_s = _POLL_SLICE_S
                if idle_limit_s is not None:
                    idle_left_s = idle_limit_s - (time.monotonic() - last_record)
                    if idle_left_s <= 0:
                        break
                    slice_s = min(slice_s, idle_left_s)
                records = consumer.poll(slice_s)
                if not records:
                    continue
                last_record = time.monotonic()
                if args.max_messages is not None:
                    records = records[: args.max_messages - consumed]
                out.write(b"".join(format_record(record, fmt) for record in records))
                out.flush()
                consumed += len(records)
                if group is not None:
                    _commit_printed(consumer, records)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as a Unix filter does.
        pass
    except ToolError as error:
        status = report_error(command, error)
    except BrookClientError as error:
        status = report_error(command, ToolError(str(error)))
    finally:
        consumer.close()
    sys.stderr.write(f"Processed a total of {consumed} messages\n")
    return status


def _group_option(args: argparse.Namespace, properties: Mapping[str, str]) -> str | None:
    """The group to consume as a member of: --group, else a group.id consumer property; None
    to read the partitions directly. UsageError for a combination Kafka's tool refuses."""
    given = properties.get("group.id")
    if args.group is not None and given is not None and given != args.group:
        raise UsageError(f"--group {args.group!r} and group.id={given!r} name different groups")
    group: str | None = args.group if args.group is not None else given
    if group is not None and (args.partition is not None or args.offset is not None):
        raise UsageError(
            "--group consumes as a member of the group, which assigns the partitions and "
            "keeps the offsets: not with --partition or --offset"
        )
    return group


def _commit_printed(consumer: Consumer, records: Sequence[ConsumerRecord]) -> None:
    """Commits, for each partition, the offset after the last record printed, so that the
    next run of the group starts there (Kafka's console consumer commits what it consumed)."""
    after = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}
    consumer.commit(after)


def _assigned(args: argparse.Namespace, consumer: Consumer) -> list[TopicPartition]:
    count = topic_partition_count(
        consumer.config.bootstrap_servers, args.topic, args.metadata_timeout_ms
    )
    if args.partition is None:
        return [TopicPartition(args.topic, p) for p in range(count)]
    if args.partition >= count:
        raise ToolError(
            f"partition {args.partition} does not exist: topic {args.topic!r} has {count} "
            f"partition(s)"
        )
    return [TopicPartition(args.topic, args.partition)]
