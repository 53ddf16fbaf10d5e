"""``brook log-dirs describe``: the partition logs of storage nodes, with the log cleaner's view,
in the spirit of Kafka's kafka-log-dirs.sh.

    brook log-dirs describe [--bootstrap-server HOST:PORT[,...]] [--topic T]... [--json]

Asks each named storage node (its GRPC address; default 127.0.0.1:9101, the first storage node
of ``brook cluster up``) for DescribeLogDirs and prints one row per partition log: the data
directory, the size, and for a compacted log its clean and dirty bytes, dirty ratio, first
dirty offset, whether it is uncleanable (and why) and when it was last cleaned. ``--json``
prints the same as one JSON document (kafka-log-dirs prints JSON). Unlike Kafka's tool it names
storage nodes rather than asking the controllers for them, so it works on a node started with
static.topics too. Exit status: 0 on success, 1 when a node did not answer, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import TYPE_CHECKING, Any, Final

from brook.admin_cli import EXIT_OK, dash, print_table

if TYPE_CHECKING:
    from brook.v1 import storage_pb2

__all__ = ["COLUMNS", "add_log_dirs_command"]

DEFAULT_STORAGE_NODE: Final = "127.0.0.1:9101"
TIMEOUT_MS_DEFAULT: Final = 30_000
EXIT_FAILED: Final = 1
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
    describe.add_argument(
        "--bootstrap-server",
        default=DEFAULT_STORAGE_NODE,
        metavar="HOST:PORT[,...]",
        help=f"storage nodes' GRPC addresses, each one asked ({DEFAULT_STORAGE_NODE})",
    )
    describe.add_argument(
        "--topic", action="append", default=[], help="only this topic's logs (repeatable)"
    )
    describe.add_argument("--json", action="store_true", help="print one JSON document")
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

    addresses = [a.strip() for a in args.bootstrap_server.split(",") if a.strip()]
    if not addresses or args.timeout_ms < 0:
        print("brook: --bootstrap-server needs an address and --timeout-ms >= 0", file=sys.stderr)
        return 2
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
        print(json.dumps({"nodes": [_as_json(a, answer, topics) for a, answer in nodes]}))
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
