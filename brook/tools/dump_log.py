"""``brook dump-log``: what a storage node's partition log files hold, in the spirit of Kafka's
kafka-dump-log.sh.

    brook dump-log --files 00000000000000000000.log[,...] [--deep-iteration] [--print-data-log]
    brook dump-log --files 00000000000000000000.index,00000000000000000000.timeindex \
        [--verify-index-only]

Per file, by its suffix:

- ``.log``: every batch (base and last offset, count, sequences, producer id and epoch, leader
  epoch, whether transactional or control, position, max timestamp, size, magic, codec, CRC
  and whether it holds); ``--deep-iteration`` adds each record (offset, timestamp, key and
  value sizes, sequence, header keys; a transaction marker's type and coordinator epoch),
  ``--print-data-log`` (implying it) each record's key and value too.
- ``.index``, ``.timeindex``: the entries; ``--verify-index-only`` prints only what is wrong:
  an entry out of order and, with the segment's ``.log`` next to it, an ``.index`` entry that
  does not name the last offset of the batch at its position.
- ``.txnindex``: the aborted transactions. ``.snapshot``: the producers of a producer-state
  snapshot.

The bytes are decoded by the storage node's own classes (brook.record, brook_storage_node.log),
read only (brook_storage_node.dump_log): the files of a running node may be dumped. Exit
status: 0 when every file could be read and is sound, 1 when one is corrupt or unreadable (its
problem is printed), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any, Final

__all__ = ["add_dump_log_command"]

# Where the work is done: the storage node's package (``brook`` imports no service package,
# so it is loaded by name when the command runs, as brook.cli loads services).
IMPLEMENTATION: Final = "brook_storage_node.dump_log"


def add_dump_log_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dump-log",
        help="print the batches, records and index entries of log segment files",
        description="Print what partition log files hold (.log, .index, .timeindex, "
        ".txnindex, .snapshot), decoded as the storage node decodes them.",
    )
    parser.add_argument("paths", nargs="*", metavar="FILE", help="files to dump")
    parser.add_argument(
        "--files",
        action="append",
        default=[],
        metavar="FILE[,FILE...]",
        help="files to dump, comma-separated (Kafka's option)",
    )
    parser.add_argument("--deep-iteration", action="store_true", help="every record too")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="every record's key and value too (implies --deep-iteration)",
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="for index files, print only the entries that are wrong",
    )
    parser.set_defaults(func=_dump_log)


def _dump_log(args: argparse.Namespace) -> int:
    status = importlib.import_module(IMPLEMENTATION).dump_log(args)
    assert isinstance(status, int)
    return status
