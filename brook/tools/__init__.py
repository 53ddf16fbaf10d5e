"""Command-line tools on top of the SDK, in the spirit of Kafka's bin/ scripts.

    brook console-producer [--bootstrap-server HOST:PORT] --topic T [--property K=V]...
    brook console-consumer [--bootstrap-server HOST:PORT] --topic T [--group G | --partition N]
                           [--from-beginning | --offset N] [--max-messages N] [--timeout-ms N]
    brook producer-perf-test --topic T --num-records N --record-size B --throughput R [--json]
    brook consumer-perf-test [--bootstrap-server HOST:PORT] --topic T --messages N [--json]

``--bootstrap-server`` names controllers or storage nodes (brook.tools.options); the records
go to and come from the storage nodes.

``add_tool_commands`` registers them with the ``brook`` command (brook.cli). Exit status: 0 on
success, 1 when the cluster refused or did not answer in time (or a record failed), 2 for bad
usage (arguments, properties, client settings), as argparse does.

The implementations (``console``, ``perf``) are imported when a command runs, not when
``brook`` starts: they pull in gRPC through the SDK.
"""

from __future__ import annotations

import argparse
from typing import Any

from brook.tools.options import (
    CONSUMER_PRINT_PROPERTIES,
    LINE_READER_PROPERTIES,
    TIMEOUT_MS_DEFAULT,
    add_bootstrap_argument,
    non_negative_int,
    positive_int,
)

__all__ = ["add_tool_commands"]

# Kafka's kafka-producer-perf-test prints a window every 5 s.
REPORTING_INTERVAL_MS_DEFAULT = 5000
# kafka-consumer-perf-test gives up after 10 s without a record.
CONSUMER_PERF_TIMEOUT_MS_DEFAULT = 10_000


def add_tool_commands(subparsers: Any) -> None:
    _add_console_producer(subparsers)
    _add_console_consumer(subparsers)
    _add_producer_perf_test(subparsers)
    _add_consumer_perf_test(subparsers)


def _tool_parser(
    subparsers: Any, name: str, summary: str, description: str
) -> argparse.ArgumentParser:
    """The parser of one tool, with the options every tool has."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=description
    )
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True)
    return parser


def _key_values(parser: argparse.ArgumentParser, option: str, help_text: str) -> None:
    parser.add_argument(option, action="append", default=[], metavar="KEY=VALUE", help=help_text)


def _metadata_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metadata-timeout-ms",
        type=positive_int,
        default=TIMEOUT_MS_DEFAULT,
        metavar="MS",
        help=f"how long to wait for the topic's partitions ({TIMEOUT_MS_DEFAULT})",
    )


def _add_console_producer(subparsers: Any) -> None:
    parser = _tool_parser(
        subparsers,
        "console-producer",
        "produce the lines of stdin as records",
        "Read lines from stdin and produce each as one record (the value, or "
        "key and value with parse.key=true). Exits when stdin ends, after every record was "
        "acknowledged; exit status 1 if any record failed.",
    )
    _key_values(
        parser, "--property", "line reader setting: " + ", ".join(sorted(LINE_READER_PROPERTIES))
    )
    _key_values(
        parser,
        "--producer-property",
        "a producer setting (Kafka's names: acks, linger.ms, compression.type, ...)",
    )
    parser.set_defaults(func=_console_producer)


def _add_console_consumer(subparsers: Any) -> None:
    parser = _tool_parser(
        subparsers,
        "console-consumer",
        "print the records of a topic",
        "Print the records of every partition of a topic (or of one) to stdout, "
        "one per line, from the end unless --from-beginning or --offset says otherwise. Runs "
        "until --max-messages records were printed, --timeout-ms passed without a record, or "
        "SIGINT/SIGTERM.",
    )
    parser.add_argument(
        "--group",
        metavar="GROUP",
        help="consume as a member of this consumer group, committing the offsets of the "
        "records printed: the next run of the group continues after them",
    )
    parser.add_argument("--partition", type=non_negative_int, metavar="N")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument(
        "--offset",
        metavar="N|earliest|latest",
        help="where to start in --partition (needs --partition when a number)",
    )
    parser.add_argument("--max-messages", type=positive_int, metavar="N")
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        metavar="MS",
        help="exit when no record arrived for this long (default: wait forever)",
    )
    _key_values(
        parser, "--property", "formatter setting: " + ", ".join(sorted(CONSUMER_PRINT_PROPERTIES))
    )
    _key_values(
        parser,
        "--consumer-property",
        "a consumer setting (fetch.max.wait.ms, max.poll.records, ...)",
    )
    _metadata_timeout(parser)
    parser.set_defaults(func=_console_consumer)


def _add_producer_perf_test(subparsers: Any) -> None:
    parser = _tool_parser(
        subparsers,
        "producer-perf-test",
        "measure produce throughput and latency",
        "Send --num-records records of --record-size random bytes as fast as "
        "--throughput allows, printing a line per reporting interval and a summary: "
        "records/s, MB/s (2^20 bytes, as Kafka's tool), latency avg/p50/p95/p99/p99.9/max "
        "in ms. Latency is measured from send() to acknowledgement on a sample of the "
        "records (every --latency-sample-every-th).",
    )
    parser.add_argument("--num-records", type=positive_int, required=True, metavar="N")
    parser.add_argument("--record-size", type=positive_int, required=True, metavar="BYTES")
    parser.add_argument(
        "--throughput",
        type=float,
        required=True,
        metavar="RECORDS_PER_S",
        help="cap on records/s; -1 for no cap",
    )
    parser.add_argument(
        "--producer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="producer settings (a bootstrap.servers among them is used when --bootstrap-server "
        "is not given)",
    )
    parser.add_argument(
        "--reporting-interval-ms",
        type=positive_int,
        default=REPORTING_INTERVAL_MS_DEFAULT,
        metavar="MS",
    )
    parser.add_argument(
        "--latency-sample-every",
        type=positive_int,
        default=None,
        metavar="N",
        help="time every N-th record (default: 1 up to 10,000 records, then 16: timing a "
        "record costs about as much as sending it)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=_producer_perf_test)


def _add_consumer_perf_test(subparsers: Any) -> None:
    parser = _tool_parser(
        subparsers,
        "consumer-perf-test",
        "measure consume throughput",
        "Consume --messages records from the beginning of every partition of a "
        "topic and print records/s and MB/s (key and value bytes, 2^20 per MB, as Kafka's "
        "tool).",
    )
    parser.add_argument("--messages", type=positive_int, required=True, metavar="N")
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=CONSUMER_PERF_TIMEOUT_MS_DEFAULT,
        metavar="MS",
        help=f"give up when no record arrived for this long ({CONSUMER_PERF_TIMEOUT_MS_DEFAULT})",
    )
    _key_values(
        parser, "--consumer-property", "a consumer setting (max.poll.records, fetch.max.bytes, ...)"
    )
    _metadata_timeout(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_consumer_perf_test)


def _console_producer(args: argparse.Namespace) -> int:
    from brook.tools.console import run_console_producer

    return run_console_producer(args)


def _console_consumer(args: argparse.Namespace) -> int:
    from brook.tools.console import run_console_consumer

    return run_console_consumer(args)


def _producer_perf_test(args: argparse.Namespace) -> int:
    from brook.tools.perf import run_producer_perf_command

    return run_producer_perf_command(args)


def _consumer_perf_test(args: argparse.Namespace) -> int:
    from brook.tools.perf import run_consumer_perf_command

    return run_consumer_perf_command(args)
