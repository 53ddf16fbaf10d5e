"""``brook producer-perf-test`` and ``brook consumer-perf-test``, and the measuring functions
they run (``producer_perf``, ``consumer_perf``), which bench/bench_sdk.py calls too.

The producer test follows kafka-producer-perf-test: one payload of random upper-case letters,
sent keyless as fast as ``--throughput`` allows; records/s and MB/s (2^20 bytes of values) from
the first send to the last acknowledgement; latency from ``send()`` to the acknowledgement.
Kafka times every record; here a callback per record would cost about as much as the send
itself (about a microsecond of Python, on the producer's own I/O thread) and so distort what
it measures, so every ``sample_every``-th record is timed and the window counts are scaled
from those samples. A batch completes as a whole, so any failure lands on its sampled records
too (every batch of at least ``sample_every`` records holds one).

The consumer test follows kafka-consumer-perf-test: ``messages`` records from the beginning of
every partition of the topic, MB counting key and value bytes.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import operator
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from brook.client import (
    ConfigError,
    Consumer,
    Producer,
    RecordFuture,
    TopicPartition,
)
from brook.client.errors import BrookClientError
from brook.tools.options import (
    EXIT_FAILED,
    EXIT_OK,
    TIMEOUT_MS_DEFAULT,
    ToolError,
    UsageError,
    client_settings,
    parse_key_values,
    report_error,
    topic_partition_count,
)

__all__ = [
    "MB",
    "ConsumerPerfResult",
    "LatencySummary",
    "ProducerPerfResult",
    "consumer_perf",
    "make_payload",
    "producer_perf",
    "run_consumer_perf_command",
    "run_producer_perf_command",
    "sample_every_default",
    "summarize_latencies",
]

MB: Final = 1024 * 1024
# Below this many records every one is timed; above it every SAMPLE_EVERY_LARGE-th.
TIME_EVERY_RECORD_MAX: Final = 10_000
SAMPLE_EVERY_LARGE: Final = 16
# Durations in the JSON to the microsecond: a short run's rate must be recomputable from
# records / elapsed_s (to 4 decimals a 35 ms run read 0.14 % off its printed rate).
ELAPSED_DECIMALS: Final = 6
# A throttled sender sleeps only when at least this far ahead of schedule: shorter sleeps
# cost more in wake-up latency than they smooth.
_THROTTLE_SLEEP_MIN_S: Final = 0.001
# How long one consumer poll waits at most, so the idle timeout is noticed promptly.
_POLL_SLICE_S: Final = 0.5
_key_of = operator.attrgetter("key")
_value_of = operator.attrgetter("value")


def sample_every_default(num_records: int) -> int:
    return 1 if num_records <= TIME_EVERY_RECORD_MAX else SAMPLE_EVERY_LARGE


def make_payload(record_size: int) -> bytes:
    """Random upper-case ASCII letters, as kafka-producer-perf-test sends."""
    return bytes(65 + byte % 26 for byte in os.urandom(record_size))


@dataclass(frozen=True)
class LatencySummary:
    samples: int
    avg_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p99_9_ms: float
    max_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "samples": self.samples,
            "avg": round(self.avg_ms, 3),
            "p50": round(self.p50_ms, 3),
            "p95": round(self.p95_ms, 3),
            "p99": round(self.p99_ms, 3),
            "p99_9": round(self.p99_9_ms, 3),
            "max": round(self.max_ms, 3),
        }


def summarize_latencies(latencies_ms: Sequence[float]) -> LatencySummary:
    """Average, nearest-rank percentiles and maximum; all zero when there is no sample."""
    if not latencies_ms:
        return LatencySummary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    ordered = sorted(latencies_ms)
    count = len(ordered)

    def percentile(fraction: float) -> float:
        return ordered[min(count - 1, int(fraction * count))]

    return LatencySummary(
        count,
        sum(ordered) / count,
        percentile(0.5),
        percentile(0.95),
        percentile(0.99),
        percentile(0.999),
        ordered[-1],
    )


@dataclass(frozen=True)
class ProducerPerfResult:
    records: int
    record_size: int
    elapsed_s: float
    failed_estimate: int
    first_error: str | None
    latency: LatencySummary
    sample_every: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * self.record_size / MB

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "record_size": self.record_size,
            "elapsed_s": round(self.elapsed_s, ELAPSED_DECIMALS),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 2),
            "latency_ms": self.latency.as_dict(),
            "latency_sample_every": self.sample_every,
            "failed": self.failed_estimate,
            "first_error": self.first_error,
        }

    def summary_line(self) -> str:
        lat = self.latency
        return (
            f"{self.records} records sent, {self.records_per_s:.1f} records/sec "
            f"({self.mb_per_s:.2f} MB/sec), {lat.avg_ms:.2f} ms avg latency, "
            f"{lat.max_ms:.2f} ms max latency, {lat.p50_ms:.2f} ms 50th, {lat.p95_ms:.2f} ms "
            f"95th, {lat.p99_ms:.2f} ms 99th, {lat.p99_9_ms:.2f} ms 99.9th."
        )


class _ProduceStats:
    """Sampled acknowledgements; its callbacks all run on the producer's one I/O thread."""

    def __init__(
        self,
        sample_every: int,
        record_size: int,
        reporting_interval_s: float,
        report: Callable[[str], None] | None,
    ) -> None:
        self.sample_every = sample_every
        self.record_size = record_size
        self.latencies_ms: list[float] = []
        self.failed_samples = 0
        self.first_error: str | None = None
        self._interval_s = reporting_interval_s
        self._report = report
        self._window_start = time.perf_counter()
        self._window_latencies_ms: list[float] = []

    def completed(self, sent_s: float, future: RecordFuture) -> None:
        now = time.perf_counter()
        error = future.exception(0)
        if error is not None:
            self.failed_samples += 1
            if self.first_error is None:
                self.first_error = f"{type(error).__name__}: {error}"
            return
        latency_ms = (now - sent_s) * 1000
        self.latencies_ms.append(latency_ms)
        self._window_latencies_ms.append(latency_ms)
        if self._report is not None and now - self._window_start >= self._interval_s:
            self._print_window(now)

    def _print_window(self, now: float) -> None:
        assert self._report is not None
        window = self._window_latencies_ms
        elapsed_s = now - self._window_start
        records = len(window) * self.sample_every
        rate = records / elapsed_s
        self._report(
            f"{records} records sent, {rate:.1f} records/sec "
            f"({rate * self.record_size / MB:.2f} MB/sec), "
            f"{sum(window) / len(window):.1f} ms avg latency, {max(window):.1f} ms max latency."
        )
        self._window_start = now
        self._window_latencies_ms = []


def producer_perf(
    producer: Producer,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    *,
    sample_every: int | None = None,
    reporting_interval_s: float = 5.0,
    report: Callable[[str], None] | None = None,
    payload: bytes | None = None,
) -> ProducerPerfResult:
    """Send ``num_records`` records of ``record_size`` bytes to ``topic`` (at most
    ``throughput`` records/s; <= 0 for no cap), flush, and measure."""
    if num_records < 1 or record_size < 1:
        raise ValueError("num_records and record_size must be >= 1")
    every = sample_every or sample_every_default(num_records)
    value = payload if payload is not None else make_payload(record_size)
    stats = _ProduceStats(every, len(value), reporting_interval_s, report)
    completed = stats.completed
    send = producer.send
    clock = time.perf_counter
    throttled = throughput > 0
    start = clock()
    for index in range(num_records):
        if throttled:
            ahead_s = index / throughput - (clock() - start)
            if ahead_s >= _THROTTLE_SLEEP_MIN_S:
                time.sleep(ahead_s)
        if index % every:
            send(topic, value)
        else:
            send(topic, value).add_done_callback(functools.partial(completed, clock()))
    producer.flush()
    elapsed_s = clock() - start
    return ProducerPerfResult(
        records=num_records,
        record_size=len(value),
        elapsed_s=elapsed_s,
        failed_estimate=stats.failed_samples * every,
        first_error=stats.first_error,
        latency=summarize_latencies(stats.latencies_ms),
        sample_every=every,
    )


@dataclass(frozen=True)
class ConsumerPerfResult:
    records: int
    bytes: int
    start_time: float  # epoch seconds, when the partitions were assigned
    end_time: float
    elapsed_s: float  # from assignment to the last record
    fetch_elapsed_s: float  # from the first record to the last
    timed_out: bool

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def fetch_records_per_s(self) -> float:
        return self.records / self.fetch_elapsed_s if self.fetch_elapsed_s > 0 else 0.0

    @property
    def fetch_mb_per_s(self) -> float:
        return self.bytes / MB / self.fetch_elapsed_s if self.fetch_elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "elapsed_s": round(self.elapsed_s, ELAPSED_DECIMALS),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 2),
            "fetch_elapsed_s": round(self.fetch_elapsed_s, ELAPSED_DECIMALS),
            "fetch_records_per_s": round(self.fetch_records_per_s, 1),
            "fetch_mb_per_s": round(self.fetch_mb_per_s, 2),
            "timed_out": self.timed_out,
        }

    def csv_lines(self) -> list[str]:
        def stamp(epoch_s: float) -> str:
            moment = datetime.datetime.fromtimestamp(epoch_s)
            return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"

        return [
            "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
            "nMsg.sec, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec",
            f"{stamp(self.start_time)}, {stamp(self.end_time)}, {self.bytes / MB:.4f}, "
            f"{self.mb_per_s:.4f}, {self.records}, {self.records_per_s:.4f}, "
            f"{round(self.fetch_elapsed_s * 1000)}, {self.fetch_mb_per_s:.4f}, "
            f"{self.fetch_records_per_s:.4f}",
        ]


def consumer_perf(
    consumer: Consumer,
    partitions: Sequence[TopicPartition],
    messages: int,
    idle_timeout_s: float,
) -> ConsumerPerfResult:
    """Consume ``messages`` records from the beginning of ``partitions``; stops early (with
    ``timed_out``) when no record arrives for ``idle_timeout_s``."""
    if messages < 1 or idle_timeout_s <= 0:
        raise ValueError("messages must be >= 1 and idle_timeout_s > 0")
    start_time = time.time()
    clock = time.perf_counter
    start = clock()
    consumer.assign(partitions)
    consumer.seek_to_beginning(partitions)
    records = 0
    total_bytes = 0
    first = last = start
    timed_out = False
    poll = consumer.poll
    while records < messages:
        batch = poll(_POLL_SLICE_S)
        now = clock()
        if not batch:
            if now - last >= idle_timeout_s:
                timed_out = True
                break
            continue
        if records == 0:
            first = now
        last = now
        if len(batch) > messages - records:
            batch = batch[: messages - records]
        records += len(batch)
        # Key and value bytes, counted in C (map/filter): a Python loop here would be a tenth
        # of the consumer's own per-record cost. filter(None) drops nulls (and empty values).
        total_bytes += sum(map(len, filter(None, map(_key_of, batch))))
        total_bytes += sum(map(len, filter(None, map(_value_of, batch))))
    elapsed_s = last - start
    return ConsumerPerfResult(
        records=records,
        bytes=total_bytes,
        start_time=start_time,
        end_time=start_time + elapsed_s,
        elapsed_s=elapsed_s,
        fetch_elapsed_s=last - first,
        timed_out=timed_out,
    )


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _stdout_line(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_producer_perf_command(args: argparse.Namespace) -> int:
    command = "producer-perf-test"
    try:
        if args.throughput == 0:
            raise UsageError("--throughput must be > 0 records/s, or -1 for no cap")
        settings = client_settings(
            args.bootstrap_server,
            parse_key_values(args.producer_props, "--producer-props"),
            TIMEOUT_MS_DEFAULT,
        )
        producer = Producer(settings)
    except (UsageError, ConfigError) as error:
        return report_error(command, UsageError(str(error)))
    except ToolError as error:
        return report_error(command, error)
    try:
        result = producer_perf(
            producer,
            args.topic,
            args.num_records,
            args.record_size,
            args.throughput,
            sample_every=args.latency_sample_every,
            reporting_interval_s=args.reporting_interval_ms / 1000,
            report=_stderr_line if args.json else _stdout_line,
        )
    except BrookClientError as error:
        return report_error(command, ToolError(str(error)))
    finally:
        producer.close()
    if args.json:
        _stdout_line(json.dumps(result.as_dict()))
    else:
        _stdout_line(result.summary_line())
    if result.first_error is not None:
        return report_error(
            command,
            ToolError(f"about {result.failed_estimate} record(s) failed: {result.first_error}"),
        )
    return EXIT_OK


def run_consumer_perf_command(args: argparse.Namespace) -> int:
    command = "consumer-perf-test"
    try:
        settings = client_settings(
            args.bootstrap_server,
            parse_key_values(args.consumer_property, "--consumer-property"),
            args.metadata_timeout_ms,
        )
        consumer = Consumer(settings)
    except (UsageError, ConfigError) as error:
        return report_error(command, UsageError(str(error)))
    except ToolError as error:
        return report_error(command, error)
    try:
        count = topic_partition_count(
            consumer.config.bootstrap_servers, args.topic, args.metadata_timeout_ms
        )
        partitions = [TopicPartition(args.topic, p) for p in range(count)]
        result = consumer_perf(consumer, partitions, args.messages, args.timeout_ms / 1000)
    except ToolError as error:
        return report_error(command, error)
    except BrookClientError as error:
        return report_error(command, ToolError(str(error)))
    finally:
        consumer.close()
    if args.json:
        _stdout_line(json.dumps(result.as_dict()))
    else:
        for line in result.csv_lines():
            _stdout_line(line)
    if result.timed_out:
        return report_error(
            command,
            ToolError(
                f"consumed {result.records} of {args.messages} records: none arrived for "
                f"{args.timeout_ms} ms"
            ),
        )
    return EXIT_FAILED if result.records < args.messages else EXIT_OK
