"""The options of a Brook read, batch or streaming, parsed and checked as Spark's Kafka source
checks them, and Spark's JSON forms of offsets.

``parse_read_options`` raises ``OptionError`` (Spark's wording where Spark has one) for every
mistake it can see without the cluster: not exactly one of ``subscribe`` / ``subscribePattern``
/ ``assign``, malformed JSON, ``endingOffsets=earliest``, a starting ``latest`` in a batch
read, ending options in a streaming read, a ``minPartitions`` or ``maxOffsetsPerTrigger`` that
is not a positive integer, client settings (``kafka.*``) the consumer rejects. Mistakes that
need the cluster (unknown topics and partitions, offsets JSON not naming every partition) are
``brook.spark.offset_ranges``'s.

Offsets travel as Spark's Kafka JSON: ``{"topic": {"0": 23, "1": -2}}`` where -2 is the
earliest offset and -1 the latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from brook.client.config import ConsumerConfig, consumer_config
from brook.client.types import TopicPartition
from brook.config import ConfigError
from brook.spark.log_client import EARLIEST, LATEST
from brook.spark.options import OptionError, client_config, flag, option

__all__ = [
    "Boundary",
    "ReadOptions",
    "Subscription",
    "offsets_json",
    "parse_offsets_json",
    "parse_read_options",
]

_OFFSETS_EXAMPLE: Final = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_ASSIGN_EXAMPLE: Final = '{"topicA":[0,1],"topicB":[2,4]}'
_TIMESTAMPS_EXAMPLE: Final = '{"topicA":{"0":1000,"1":1000},"topicB":{"0":2000}}'
# Consumer settings Spark's Kafka source manages itself and refuses as kafka.* options.
_UNSUPPORTED_CLIENT_OPTIONS: Final = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "Spark's checkpoint owns the offsets",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
}
_TIMESTAMP_STRATEGIES: Final = ("error", "latest")


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: the ``subscribe`` topics, the ``subscribePattern`` regex (matched
    against whole topic names) or the ``assign`` partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()


READ_CLIENT_DEFAULTS: Final = {"max.partition.fetch.bytes": str(8 * 1024 * 1024)}
"""Where a read's client settings differ from the SDK consumer's: a task reads one partition
range from start to end, so bigger fetches (8 MiB, not the consumer's 1 MiB) only mean fewer
round trips — measured in one process on 500,000 100-byte records, about 1.4x the records/s
of 1 MiB fetches (bench/bench_spark.py measures the whole path). ``kafka.max.partition.fetch.bytes``
overrides it."""


@dataclass(frozen=True)
class Boundary:
    """Where a read starts or ends, before it is resolved against the cluster: one of an edge
    (``EARLIEST``/``LATEST``) for every partition, Spark JSON offsets per partition (-2/-1
    allowed), one timestamp (ms) for every partition, or timestamps per partition. ``option``
    is the option it came from, for messages."""

    option: str
    edge: int | None = None
    offsets: Mapping[TopicPartition, int] | None = None
    timestamp: int | None = None
    timestamps: Mapping[TopicPartition, int] | None = None


@dataclass(frozen=True)
class ReadOptions:
    """Every option of a read. ``client``: the SDK consumer settings (``kafka.*``, prefix
    removed); ``ending`` is None for streaming reads; ``timestamp_fallback_latest``:
    ``startingOffsetsByTimestampStrategy=latest`` (a partition with no record at or after the
    starting timestamp starts at its latest offset instead of failing the query)."""

    client: Mapping[str, str]
    subscription: Subscription
    starting: Boundary
    ending: Boundary | None
    include_headers: bool
    min_partitions: int | None
    fail_on_data_loss: bool
    timestamp_fallback_latest: bool
    max_offsets_per_trigger: int | None

    def consumer_config(self) -> ConsumerConfig:
        """The SDK consumer settings of a read: ``READ_CLIENT_DEFAULTS`` under the job's own
        ``kafka.*`` options."""
        return consumer_config({**READ_CLIENT_DEFAULTS, **self.client})


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """The read ``options`` checked (see the module docstring); OptionError otherwise."""
    client = client_config(options)
    for name, why in _UNSUPPORTED_CLIENT_OPTIONS.items():
        if any(key.lower() == name for key in client):
            raise OptionError(f"Kafka option 'kafka.{name}' is not supported: {why}")
    try:
        consumer_config(client)
    except ConfigError as error:
        raise OptionError(
            "Invalid Kafka consumer options (kafka.*): " + "; ".join(error.problems)
        ) from error
    starting_default = LATEST if streaming else EARLIEST
    starting = _boundary(options, "starting", starting_default)
    if not streaming and starting.edge == LATEST:
        raise OptionError("starting offset can't be latest for batch queries on Brook")
    if not streaming and starting.offsets is not None:
        for tp, offset in starting.offsets.items():
            if offset == LATEST:
                raise OptionError(
                    f"startingOffsets for {tp.topic}-{tp.partition} can't be latest for batch "
                    "queries on Brook"
                )
    ending: Boundary | None = None
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if option(options, name) is not None:
                raise OptionError(f"{name} is not valid in streaming queries")
    else:
        ending = _boundary(options, "ending", LATEST)
        if ending.edge == EARLIEST:
            raise OptionError("ending offset can't be earliest for batch queries on Brook")
        for tp, offset in (ending.offsets or {}).items():
            if offset == EARLIEST:
                raise OptionError(
                    f"endingOffsets for {tp.topic}-{tp.partition} can't be earliest for batch "
                    "queries on Brook"
                )
    strategy = (option(options, "startingOffsetsByTimestampStrategy") or "error").strip()
    if strategy.lower() not in _TIMESTAMP_STRATEGIES:
        raise OptionError(
            "Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', not "
            f"{strategy!r}"
        )
    return ReadOptions(
        client=client,
        subscription=_subscription(options),
        starting=starting,
        ending=ending,
        include_headers=flag(options, "includeHeaders"),
        min_partitions=_positive(options, "minPartitions"),
        fail_on_data_loss=flag(options, "failOnDataLoss", default=True),
        timestamp_fallback_latest=strategy.lower() == "latest",
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
    )


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {
        name: value
        for name in ("assign", "subscribe", "subscribePattern")
        if (value := option(options, name)) is not None
    }
    if len(given) != 1:
        if not given:
            raise OptionError(
                "One of the following options must be specified for Brook source: subscribe, "
                "subscribePattern, assign. See docs/spark.md for more details."
            )
        raise OptionError(
            'Only one of "assign", "subscribe" or "subscribePattern" options can be specified '
            f"for Brook source (given: {', '.join(sorted(given))})"
        )
    name, value = next(iter(given.items()))
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise OptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
        return Subscription(topics=topics)
    if name == "subscribePattern":
        if not value.strip():
            raise OptionError(
                "Pattern to subscribe is empty as specified value for option "
                f"'subscribePattern' is '{value}'"
            )
        try:
            re.compile(value)
        except re.error as error:
            raise OptionError(f"Option 'subscribePattern' is not a valid regex: {error}") from error
        return Subscription(pattern=value)
    parsed = _json(value, "assign", _ASSIGN_EXAMPLE)
    assigned: list[TopicPartition] = []
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"Expected e.g. {_ASSIGN_EXAMPLE} for option 'assign', got {value}")
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            type(p) is int and p >= 0 for p in partitions
        ):
            raise OptionError(f"Expected e.g. {_ASSIGN_EXAMPLE} for option 'assign', got {value}")
        assigned.extend(TopicPartition(topic, p) for p in partitions)
    if not assigned:
        raise OptionError(
            f"No topicpartitions to assign as specified value for option 'assign' is '{value}'"
        )
    return Subscription(assigned=tuple(dict.fromkeys(assigned)))


def _boundary(options: Mapping[str, str], side: str, default: int) -> Boundary:
    """The ``starting``/``ending`` boundary, with Spark's precedence: ``...Timestamp`` over
    ``...OffsetsByTimestamp`` over ``...Offsets``."""
    name = f"{side}Timestamp"
    value = option(options, name)
    if value is not None:
        return Boundary(name, timestamp=_timestamp(value, name))
    name = f"{side}OffsetsByTimestamp"
    value = option(options, name)
    if value is not None:
        by_partition = _partition_numbers(value, name, _TIMESTAMPS_EXAMPLE)
        for tp, timestamp in by_partition.items():
            if timestamp < 0:
                raise OptionError(
                    f"Option '{name}' has a negative timestamp {timestamp} for "
                    f"{tp.topic}-{tp.partition}"
                )
        return Boundary(name, timestamps=by_partition)
    name = f"{side}Offsets"
    value = option(options, name)
    if value is None or value.strip().lower() == ("earliest" if default == EARLIEST else "latest"):
        return Boundary(name, edge=default)
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        return Boundary(name, edge=EARLIEST if lowered == "earliest" else LATEST)
    offsets = parse_offsets_json(value, name)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f"Option '{name}' has an invalid offset {offset} for {tp.topic}-{tp.partition} "
                "(an offset >= 0, -2 for earliest or -1 for latest)"
            )
    return Boundary(name, offsets=offsets)


def _timestamp(value: str, name: str) -> int:
    try:
        timestamp = int(value.strip())
    except ValueError:
        timestamp = -1
    if timestamp < 0:
        raise OptionError(
            f"Option '{name}' must be a timestamp in milliseconds since the epoch, not {value!r}"
        )
    return timestamp


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = option(options, name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(
            f"Invalid value '{value}' for option '{name}', must be a positive integer"
        )
    return number


def _json(value: str, name: str, example: str) -> object:
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise OptionError(
            f"Expected e.g. {example} for option '{name}', got {value} ({error})"
        ) from error


def _partition_numbers(value: str, name: str, example: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": number}}`` as a dict; OptionError naming ``name`` when malformed."""
    parsed = _json(value, name, example)
    result: dict[TopicPartition, int] = {}
    malformed = OptionError(f"Expected e.g. {example} for option '{name}', got {value}")
    if not isinstance(parsed, dict):
        raise malformed
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise malformed
        for partition, number in partitions.items():
            if not partition.isdigit() or type(number) is not int:
                raise malformed
            result[TopicPartition(topic, int(partition))] = number
    return result


def parse_offsets_json(value: str, name: str) -> dict[TopicPartition, int]:
    """Spark's Kafka offsets JSON (``{"topic": {"0": 23}}``) as a dict; OptionError naming the
    option ``name`` when it is malformed."""
    return _partition_numbers(value, name, _OFFSETS_EXAMPLE)


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``offsets`` in Spark's Kafka JSON form (topics, then partitions, in order)."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result
