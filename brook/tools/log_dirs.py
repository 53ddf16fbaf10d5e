"""``brook log-dirs describe``: the partition logs of storage nodes, with the log cleaner's view,
in the spirit of Kafka's kafka-log-dirs.sh.

    brook log-dirs describe [--bootstrap-server HOST:PORT[,...]] [--topic T]... [--json]

Asks each named storage node, or when controllers are named every storage node they list
(``--bootstrap-server``: brook.tools.options), for DescribeLogDirs and prints one row per
partition log: the data directory, the size, and for a compacted log its clean and dirty bytes,
dirty ratio, first dirty offset, whether it is uncleanable (and why) and when it was last
cleaned. ``--json`` prints the same as one JSON document (kafka-log-dirs prints JSON). Naming
storage nodes rather than the controllers works on a node started with static.topics too. Exit
status: 0 on success, 1 when a node did not answer, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import TYPE_CHECKING, Any, Final

from brook.admin_cli import add_json_option, dash, print_json, print_table
from brook.tools.options import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    TIMEOUT_MS_DEFAULT,
    ToolError,
    UsageError,
    add_bootstrap_argument,
    checked_cluster_options,
    find_cluster,
)

if TYPE_CHECKING:
    from brook.v1 import storage_pb2

__all__ = ["COLUMNS", "add_log_dirs_command"]

# The columns of the table (one row per partition log).
COLUMNS: Final = (
    "NODE",
    "DIR",
    "PARTITION",
    "SIZE",
    "CLEAN",
    "DIRTY",
    "DIRTY-RATIO",
    "FIRST-DIRTY",
    "UNCLEANABLE",
    "LAST-CLEANED",
)


def add_log_dirs_command(subparsers: Any) -> None:
    log_dirs = subparsers.add_parser(
        "log-dirs", help="storage nodes' partition logs and their cleaned and dirty sizes"
    )
    actions = log_dirs.add_subparsers(dest="log_dirs_command", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe",
        help="every partition log of the nodes, by data directory",
        description="Every partition log of the named storage nodes, by data directory: its "
        "size and, for a compacted log, its clean and dirty bytes, dirty ratio, first dirty "
        "offset, whether it is uncleanable and when it was last cleaned.",
    )
    add_bootstrap_argument(describe)
    describe.add_argument(
        "--topic", action="append", default=[], help="only this topic's logs (repeatable)"
    )
    add_json_option(describe)
    describe.add_argument(
        "--timeout-ms",
        type=int,
        default=TIMEOUT_MS_DEFAULT,
        metavar="MS",
        help=f"how long to wait for each node ({TIMEOUT_MS_DEFAULT})",
    )
    describe.set_defaults(func=_describe)


def _describe(args: argparse.Namespace) -> int:
    import grpc

    from brook.rpc.channels import sync_channel
    from brook.v1 import storage_pb2, storage_pb2_grpc

    try:
        servers = checked_cluster_options(args)
    except UsageError as error:
        print(f"brook: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        cluster = find_cluster(servers, args.timeout_ms)
        addresses = cluster.storage_node_addresses(args.timeout_ms)
    except ToolError as error:
        print(f"Error: {error}", file=sys.stderr)
        return EXIT_FAILED
    topics = set(args.topic)
    nodes: list[tuple[str, storage_pb2.DescribeLogDirsResponse]] = []
    status = EXIT_OK
    for address in addresses:
        try:
            with sync_channel(address) as channel:
                stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
                answer = stub.DescribeLogDirs(
                    storage_pb2.DescribeLogDirsRequest(), timeout=args.timeout_ms / 1000
                )
        except grpc.RpcError as error:
            print(f"Error: {address}: {error.code().name}: {error.details()}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        nodes.append((address, answer))
    if args.json:
        print_json({"nodes": [_as_json(a, answer, topics) for a, answer in nodes]})
    else:
        print_table(
            COLUMNS,
            [
                _row(address, log_dir.path, partition)
                for address, answer in nodes
                for log_dir in answer.log_dirs
                for partition in log_dir.partitions
                if not topics or partition.topic in topics
            ],
        )
    return status


def _row(address: str, path: str, p: storage_pb2.LogDirPartition) -> list[object]:
    name = f"{p.topic}-{p.partition}"
    if not p.compacted:
        return [address, path, name, p.size_bytes, *(["-"] * 6)]
    return [
        address,
        path,
        name,
        p.size_bytes,
        p.clean_bytes,
        p.dirty_bytes,
        f"{p.dirty_ratio:.3f}",
        p.first_dirty_offset,
        f"yes: {p.uncleanable_reason}" if p.uncleanable else "no",
        dash(_time(p.last_cleaned_ms)),
    ]


def _time(ms: int) -> str | None:
    if ms < 0:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")


def _as_json(
    address: str, answer: storage_pb2.DescribeLogDirsResponse, topics: set[str]
) -> dict[str, Any]:
    return {
        "node": address,
        "logDirs": [
            {
                "logDir": log_dir.path,
                "partitions": [
                    {
                        "partition": f"{p.topic}-{p.partition}",
                        "size": p.size_bytes,
                        "logStartOffset": p.log_start_offset,
                        "logEndOffset": p.log_end_offset,
                        "compacted": p.compacted,
                        "cleanBytes": p.clean_bytes,
                        "dirtyBytes": p.dirty_bytes,
                        "dirtyRatio": p.dirty_ratio,
                        "firstDirtyOffset": p.first_dirty_offset,
                        "firstUncleanableOffset": p.first_uncleanable_offset,
                        "uncleanable": p.uncleanable,
                        "uncleanableReason": p.uncleanable_reason or None,
                        "lastCleanedMs": p.last_cleaned_ms if p.last_cleaned_ms >= 0 else None,
                    }
                    for p in log_dir.partitions
                    if not topics or p.topic in topics
                ],
            }
            for log_dir in answer.log_dirs
        ],
    }
