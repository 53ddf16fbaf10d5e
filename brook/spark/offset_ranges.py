"""Offset ranges of topic partitions: planned on the driver (which partitions, where each
range starts and ends, split for ``minPartitions``, bounded by ``maxOffsetsPerTrigger``) and
read by tasks as Arrow record batches.

Planning asks the cluster (``LogClient``), so it is where the mistakes that need the cluster
fail the query before any task runs (``OptionError``): a subscribed or assigned topic or
partition that does not exist, offsets JSON that does not name exactly the subscribed
partitions, a start after the end, a starting timestamp no record reaches (strategy
``error``). Data loss (a range starting below the partition's log start offset, its records
deleted by retention or DeleteRecords) fails with ``DataLossError`` when ``failOnDataLoss`` is
true, on the driver when it is already visible there, else in the task; when false the read
moves on to the log start offset.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from brook.client.fetcher import AbortedTransactions
from brook.client.types import TopicPartition
from brook.errors import ErrorCode, error_code
from brook.spark.arrow_decode import decode_fetch
from brook.spark.log_client import EARLIEST, LATEST, LogClient
from brook.spark.options import OptionError
from brook.spark.read_options import Boundary, ReadOptions, Subscription
from brook.v1 import common_pb2

__all__ = [
    "DataLossError",
    "OffsetRange",
    "check_data_loss",
    "offsets_went_back",
    "rate_limit",
    "read_range",
    "resolve",
    "split",
    "subscribed_partitions",
]

_DATA_LOSS_HINT = (
    "Some data may have been lost because it is not available in Brook any more: it was aged "
    "out by retention or deleted (DeleteRecords), or its topic or partition was deleted, "
    "before it was read. If you want your query to go on in such cases, set the source option "
    "'failOnDataLoss' to 'false'."
)


class DataLossError(RuntimeError):
    """Records a read needs are gone from Brook and ``failOnDataLoss`` is true."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def subscribed_partitions(
    subscription: Subscription, client: LogClient, *, strict: bool
) -> list[TopicPartition]:
    """The partitions the subscription names now, in order. ``strict``: OptionError when a
    ``subscribe``d or ``assign``ed topic or an assigned partition does not exist (otherwise
    they are left out); ``subscribePattern`` matches whole names of non-internal topics."""
    if subscription.pattern is not None:
        pattern = re.compile(subscription.pattern)
        counts = {t: n for t, n in client.all_topics().items() if pattern.fullmatch(t)}
        return [TopicPartition(t, p) for t in sorted(counts) for p in range(counts[t])]
    topics = subscription.topics or tuple(dict.fromkeys(tp.topic for tp in subscription.assigned))
    counts = client.partitions(topics)
    missing = [t for t in topics if t not in counts]
    if missing and strict:
        raise OptionError(f"Topic(s) {', '.join(missing)} do not exist in the Brook cluster")
    if subscription.topics:
        return [TopicPartition(t, p) for t in topics if t in counts for p in range(counts[t])]
    absent = [tp for tp in subscription.assigned if tp.partition >= counts.get(tp.topic, 0)]
    if absent and strict:
        named = ", ".join(f"{tp.topic}-{tp.partition}" for tp in absent)
        raise OptionError(f"Option 'assign' names partitions that do not exist: {named}")
    return [tp for tp in subscription.assigned if tp not in absent]


def resolve(
    boundary: Boundary,
    partitions: Iterable[TopicPartition],
    client: LogClient,
    *,
    fallback_latest: bool = False,
) -> dict[TopicPartition, int]:
    """The offset of every partition where ``boundary`` says. A timestamp no record reaches
    means the latest offset for an ending boundary and for ``fallback_latest``, an
    OptionError otherwise (Spark's ``startingOffsetsByTimestampStrategy=error``)."""
    wanted = list(partitions)
    if boundary.edge is not None:
        return client.edge_offsets(wanted, boundary.edge)
    given = boundary.offsets if boundary.offsets is not None else boundary.timestamps
    if given is not None:
        _names_exactly(boundary.option, given, wanted)
    if boundary.offsets is not None:
        offsets = dict(boundary.offsets)
        for edge in (EARLIEST, LATEST):
            at_edge = [tp for tp in wanted if offsets[tp] == edge]
            if at_edge:
                offsets.update(client.edge_offsets(at_edge, edge))
        return {tp: offsets[tp] for tp in wanted}
    if boundary.timestamps is not None:
        timestamps = {tp: boundary.timestamps[tp] for tp in wanted}
    else:
        assert boundary.timestamp is not None
        timestamps = dict.fromkeys(wanted, boundary.timestamp)
    found = client.offsets_for_times(timestamps)
    unmatched = [tp for tp in wanted if found[tp] is None]
    ending = boundary.option.startswith("ending")
    if unmatched and not (ending or fallback_latest):
        named = ", ".join(f"{tp.topic}-{tp.partition} ({timestamps[tp]})" for tp in unmatched)
        raise OptionError(
            f"No offset matched the timestamp of option '{boundary.option}' for {named}: every "
            "record is older. Set 'startingOffsetsByTimestampStrategy' to 'latest' to start "
            "such partitions at their latest offset."
        )
    latest = client.edge_offsets(unmatched, LATEST) if unmatched else {}
    return {tp: latest[tp] if found[tp] is None else found[tp] for tp in wanted}  # type: ignore[misc]


def _names_exactly(
    name: str, given: Mapping[TopicPartition, int], partitions: list[TopicPartition]
) -> None:
    missing = [tp for tp in partitions if tp not in given]
    extra = sorted(set(given) - set(partitions))
    if missing or extra:
        problems = []
        if missing:
            problems.append("it leaves out " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            problems.append(
                "it names " + ", ".join(f"{t}-{p}" for t, p in extra) + " not subscribed"
            )
        raise OptionError(
            f"Option '{name}' must name every subscribed partition ({'; '.join(problems)}); "
            "use -2 for earliest and -1 for latest if you don't care"
        )


def offsets_went_back(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> str:
    """What to say of partitions whose ``latest`` offset is below the ``start`` a query had
    reached (the partition was recreated or its log truncated): Spark's Kafka source's
    message, with the way out."""
    changed = "; ".join(
        f"{tp.topic}-{tp.partition}'s offset was changed from {start[tp]} to {offset}"
        for tp, offset in sorted(latest.items())
    )
    return f"{changed}. {_DATA_LOSS_HINT}"


def check_data_loss(tp: TopicPartition, position: int, log_start: int, *, fail: bool) -> int:
    """Where reading ``tp`` from ``position`` can go on given its log start offset: the
    position itself, or the log start when records below it are gone and ``fail`` is false
    (DataLossError when true)."""
    if position >= log_start:
        return position
    if fail:
        raise DataLossError(
            f"{tp.topic}-{tp.partition}: offsets {position} to {log_start - 1} are no longer "
            f"in Brook (its log starts at {log_start}). {_DATA_LOSS_HINT}"
        )
    return log_start


def split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """``ranges`` split into at least about ``min_partitions`` ranges, each split in
    proportion to its share of all offsets (Spark's KafkaOffsetRangeCalculator: a range gets
    ``max(1, round(size / total * minPartitions))`` parts of near-equal size); empty ranges
    dropped."""
    ranges = [r for r in ranges if r.end > r.start]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    result: list[OffsetRange] = []
    for r in ranges:
        size = r.end - r.start
        parts = max(math.floor(size / total * min_partitions + 0.5), 1)
        remaining = size
        start = r.start
        for part in range(parts):
            this = remaining // (parts - part)
            remaining -= this
            end = min(start + this, r.end)
            if end > start:
                result.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return result


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> dict[TopicPartition, int]:
    """End offsets reading at most about ``max_rows`` offsets past ``start``, split across
    partitions in proportion to their lag as Spark's Kafka source does (a partition's share
    rounded down, but up when below one, so that no partition starves)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end > start[tp]}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    limited = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            limited[tp] = end
            continue
        share = max_rows * (size / total)
        rows = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(end, start[tp] + rows)
    return limited


def read_range(options: ReadOptions, offsets: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``offsets`` as record batches of the source's Arrow schema, one per
    fetch (a task's whole work). Records below the log start are data loss (see the module
    docstring); a range whose records do not all arrive within ``default.api.timeout.ms``
    fails with TimeoutError."""
    config = options.consumer_config()
    committed = config.isolation_level == common_pb2.ISOLATION_LEVEL_READ_COMMITTED
    tp = offsets.tp
    with LogClient(config) as client:
        position = offsets.start
        stalled_since: float | None = None
        while position < offsets.end:
            answer = client.fetch(tp, position)
            if error_code(answer.error_code) is ErrorCode.OFFSET_OUT_OF_RANGE:
                log_start = client.edge_offsets([tp], EARLIEST)[tp]
                if position >= log_start:
                    raise DataLossError(
                        f"{tp.topic}-{tp.partition}: offset {position} is past the end of the "
                        f"log, though the range to read ends at {offsets.end}. {_DATA_LOSS_HINT}"
                    )
            else:
                log_start = answer.log_start_offset
            moved = check_data_loss(tp, position, log_start, fail=options.fail_on_data_loss)
            if moved != position:
                position = moved
                continue
            decoded = decode_fetch(
                answer.records,
                tp.topic,
                tp.partition,
                position,
                offsets.end,
                aborted=AbortedTransactions(
                    (aborted.producer_id, aborted.first_offset)
                    for aborted in answer.aborted_transactions
                )
                if committed
                else None,
                include_headers=options.include_headers,
                check_crc=config.check_crcs,
            )
            if decoded.batch.num_rows:
                yield decoded.batch
            if decoded.next_offset > position:
                position = decoded.next_offset
                stalled_since = None
                continue
            now = time.monotonic()
            stalled_since = now if stalled_since is None else stalled_since
            if now - stalled_since > config.default_api_timeout_ms / 1000:
                raise TimeoutError(
                    f"{tp.topic}-{tp.partition}: offsets {position} to {offsets.end - 1} did "
                    f"not arrive within default.api.timeout.ms ({config.default_api_timeout_ms} "
                    f"ms); the partition's high watermark is {answer.high_watermark}"
                )
