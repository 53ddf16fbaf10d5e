"""``brook delete-records``: delete the records of partitions below given offsets, as Kafka's
kafka-delete-records.sh.

    brook delete-records --offset-json-file offsets.json

The file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0, "offset": 5}],
"version": 1}``; an offset of -1 means the partition's high watermark. Each partition's leader
storage node deletes its records (StorageService.DeleteRecords) and the new low watermark (log
start offset) of each partition is printed, or its error. Exit status: 0 when every partition
succeeded, 1 when one failed or the cluster did not answer, 2 for bad usage (an unreadable or
malformed file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from brook.admin_cli import EXIT_FAILED, EXIT_OK, UsageError, handler

if TYPE_CHECKING:
    from brook.client.admin import Admin
    from brook.client.types import TopicPartition

__all__ = ["add_delete_records_command", "parse_offset_json"]

# The only version of the file format Kafka's tool knows.
OFFSET_JSON_VERSION: Final = 1


def add_delete_records_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "delete-records",
        help="delete the records of partitions below given offsets",
        description="Delete every record below the given offset of each partition named in "
        "--offset-json-file (Kafka's format; offset -1: the high watermark) and print the "
        "new low watermarks.",
    )
    parser.add_argument(
        "--offset-json-file",
        required=True,
        type=Path,
        metavar="FILE",
        help='{"partitions": [{"topic": T, "partition": P, "offset": O}, ...], "version": 1}',
    )
    handler(parser, _delete_records)


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """The partitions and offsets of an --offset-json-file; UsageError naming what is wrong."""
    from brook.client.admin import DELETE_TO_HIGH_WATERMARK
    from brook.client.types import TopicPartition
    from brook.config import INT32_MAX, INT64_MAX

    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"the offset JSON file is not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise UsageError('the offset JSON file must be an object with a "partitions" list')
    version = document.get("version", OFFSET_JSON_VERSION)
    if version != OFFSET_JSON_VERSION:
        raise UsageError(f"unsupported offset JSON version {version!r} (only 1)")
    offsets: dict[TopicPartition, int] = {}
    for index, entry in enumerate(document["partitions"]):
        valid = (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and entry["topic"]
            and all(
                isinstance(entry.get(key), int) and not isinstance(entry[key], bool)
                for key in ("partition", "offset")
            )
        )
        if not valid:
            raise UsageError(
                f'partitions[{index}] must be {{"topic": NAME, "partition": INT, '
                f'"offset": INT}}, got {json.dumps(entry)}'
            )
        tp = TopicPartition(entry["topic"], entry["partition"])
        if not (
            0 <= tp.partition <= INT32_MAX
            and DELETE_TO_HIGH_WATERMARK <= entry["offset"] <= INT64_MAX
        ):
            raise UsageError(
                f"partitions[{index}]: the partition must be in 0..{INT32_MAX} and the offset "
                f"in -1..{INT64_MAX}"
            )
        if tp in offsets:
            raise UsageError(f"{tp.topic}-{tp.partition} is named twice")
        offsets[tp] = entry["offset"]
    if not offsets:
        raise UsageError("the offset JSON file names no partition")
    return offsets


def _delete_records(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.errors import ApiError

    path: Path = args.offset_json_file
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    offsets = parse_offset_json(text)
    print("Executing records delete operation")
    results = admin.delete_records(offsets, timeout_ms=args.timeout_ms)
    print("Records delete operation completed:")
    status = EXIT_OK
    for tp, result in sorted(results.items()):
        if isinstance(result, ApiError):
            print(
                f"partition: {tp.topic}-{tp.partition}\terror: {result.code.name}: {result.message}"
            )
            status = EXIT_FAILED
        else:
            print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {result}")
    return status
