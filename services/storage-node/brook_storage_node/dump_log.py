"""``brook dump-log``'s work (the command is brook.tools.dump_log): partition log files decoded
by the storage node's own classes (brook.record, brook_storage_node.log), read only, so the files
of a running node may be dumped. Each file is read whole into memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from brook.record import (
    ControlType,
    CorruptRecordError,
    RecordError,
    TimestampType,
    UnsupportedCompressionError,
    decode_control_record,
    iter_records,
    read_header,
    scan_batches,
    verify_crc,
)
from brook.record.batch import COMPRESSION_MASK
from brook.tools.options import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from brook_storage_node.log.log_segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_segment_file_name,
)
from brook_storage_node.log.offset_index import OffsetIndex
from brook_storage_node.log.producer_state import parse_snapshot_file_name, read_snapshot
from brook_storage_node.log.time_index import TimeIndex
from brook_storage_node.log.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

if TYPE_CHECKING:
    from brook.record import BatchHeader

__all__ = ["dump_file", "dump_log"]

# Data printed as text, undecodable bytes escaped.
_ENCODING: Final = "utf-8"


def dump_log(args: argparse.Namespace) -> int:
    """Runs ``brook dump-log``: prints every file named; returns the exit status."""
    paths = [Path(p) for p in args.paths]
    paths += [Path(p) for entry in args.files for p in entry.split(",") if p]
    if not paths:
        print("brook dump-log: error: name at least one file", file=sys.stderr)
        return EXIT_USAGE
    status = EXIT_OK
    for path in paths:
        print(f"Dumping {path}")
        try:
            problems = dump_file(
                path,
                deep=args.deep_iteration or args.print_data_log,
                print_data=args.print_data_log,
                verify_only=args.verify_index_only,
            )
        except (OSError, ValueError) as error:
            problems = [str(error)]
        for problem in problems:
            print(f"Error: {path}: {problem}")
        if problems:
            status = EXIT_FAILED
    return status


def dump_file(
    path: Path, *, deep: bool = False, print_data: bool = False, verify_only: bool = False
) -> list[str]:
    """Prints what ``path`` holds; returns the problems found (empty: sound). ValueError for
    a file name that names no log file kind."""
    snapshot_offset = parse_snapshot_file_name(path.name)
    if snapshot_offset is not None:
        return _dump_snapshot(path)
    parsed = parse_segment_file_name(path.name)
    if parsed is None:
        raise ValueError(
            "not a log file name (20-digit base offset and .log, .index, .timeindex, "
            ".txnindex or .snapshot)"
        )
    base_offset, suffix = parsed
    if suffix == LOG_SUFFIX:
        print(f"Log starting offset: {base_offset}")
        return _dump_segment(path, deep=deep, print_data=print_data)
    if suffix == INDEX_SUFFIX:
        return _dump_offset_index(path, base_offset, verify_only=verify_only)
    if suffix == TIME_INDEX_SUFFIX:
        return _dump_time_index(path, base_offset, verify_only=verify_only)
    if suffix == TXN_INDEX_SUFFIX:
        return _dump_txn_index(path, base_offset)
    raise ValueError(f"{suffix} files are not dumped")


def _dump_segment(path: Path, *, deep: bool, print_data: bool) -> list[str]:
    problems: list[str] = []
    data = path.read_bytes()
    end = 0
    try:
        for position, header in scan_batches(data):
            end = position + header.size
            try:
                verify_crc(data, position, header)
                valid = True
            except CorruptRecordError:
                valid = False
                problems.append(f"the batch at position {position} fails its CRC-32C")
            time_name = (
                "LogAppendTime"
                if header.timestamp_type is TimestampType.LOG_APPEND_TIME
                else "CreateTime"
            )
            print(
                f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
                f"count: {header.records_count} baseSequence: {header.base_sequence} "
                f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
                f"producerEpoch: {header.producer_epoch} "
                f"partitionLeaderEpoch: {header.partition_leader_epoch} "
                f"isTransactional: {_bool(header.is_transactional)} "
                f"isControl: {_bool(header.is_control)} position: {position} "
                f"{time_name}: {header.max_timestamp} size: {header.size} "
                f"magic: {header.magic} "
                f"compresscodec: {_codec_name(header)} "
                f"crc: {header.crc} isvalid: {_bool(valid)}"
            )
            if not deep or not valid:
                continue
            try:
                records = list(iter_records(data, position, check_crc=False))
            except RecordError as error:
                problems.append(f"the records of the batch at position {position}: {error}")
                continue
            for record in records:
                line = (
                    f"| offset: {record.offset} {time_name}: {record.timestamp} "
                    f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
                    f"sequence: {_sequence(header, record.offset)} "
                    f"headerKeys: [{','.join(key for key, _ in record.headers)}]"
                )
                if header.is_control:
                    try:
                        kind, _, coordinator_epoch = decode_control_record(record)
                    except RecordError as error:
                        line += f" controlRecord: unreadable ({error})"
                    else:
                        line += (
                            f" endTxnMarker: {ControlType(kind).name} "
                            f"coordinatorEpoch: {coordinator_epoch}"
                        )
                elif print_data:
                    line += f" key: {_text(record.key)} payload: {_text(record.value)}"
                print(line)
    except RecordError as error:
        problems.append(str(error))
        return problems
    if end < len(data):
        problems.append(f"{len(data) - end} bytes after position {end} are not a complete batch")
    return problems


def _dump_offset_index(path: Path, base_offset: int, *, verify_only: bool) -> list[str]:
    index = OffsetIndex.load(path, base_offset, max(path.stat().st_size, OffsetIndex.ENTRY_BYTES))
    segment = path.with_name(path.name.removesuffix(path.suffix) + LOG_SUFFIX)
    problems: list[str] = []
    log = segment.read_bytes() if segment.exists() else None
    previous = base_offset
    for slot in range(index.entries):
        entry = index.entry(slot)
        if entry.position == 0 and entry.offset == base_offset:
            # Past the last entry of a file still extended for appends.
            break
        if not verify_only:
            print(f"offset: {entry.offset} position: {entry.position}")
        if entry.offset <= previous:
            problems.append(f"entry {slot} (offset {entry.offset}) is not after {previous}")
        previous = entry.offset
        if log is None:
            continue
        try:
            found = read_header(log, entry.position).last_offset
        except RecordError as error:
            problems.append(f"entry {slot} points at no batch: {error}")
            continue
        if found != entry.offset:
            problems.append(
                f"Index offset: {entry.offset}, log offset: {found} "
                f"(the batch at position {entry.position})"
            )
    return problems


def _dump_time_index(path: Path, base_offset: int, *, verify_only: bool) -> list[str]:
    index = TimeIndex.load(path, base_offset, max(path.stat().st_size, TimeIndex.ENTRY_BYTES))
    problems: list[str] = []
    previous = None
    for slot in range(index.entries):
        entry = index.entry(slot)
        if slot > 0 and entry.timestamp == 0 and entry.offset == base_offset:
            # Past the last entry of a file still extended for appends.
            break
        if not verify_only:
            print(f"timestamp: {entry.timestamp} offset: {entry.offset}")
        if entry.offset < base_offset:
            problems.append(f"entry {slot} names offset {entry.offset}, before the segment")
        if previous is not None and (
            entry.timestamp < previous.timestamp or entry.offset < previous.offset
        ):
            problems.append(
                f"entry {slot} (timestamp {entry.timestamp}, offset {entry.offset}) goes "
                f"back from (timestamp {previous.timestamp}, offset {previous.offset})"
            )
        previous = entry
    return problems


def _dump_txn_index(path: Path, base_offset: int) -> list[str]:
    index = TransactionIndex(path, base_offset)
    problem = index.problem()
    if problem is not None:
        return [problem]
    for entry in index.entries:
        print(
            f"producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
            f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}"
        )
    return []


def _dump_snapshot(path: Path) -> list[str]:
    try:
        producers = read_snapshot(path.read_bytes())
    except ValueError as error:
        return [str(error)]
    for producer in producers:
        batches = list(producer.batches)
        first_seq = batches[0].first_seq if batches else None
        last_seq, last_offset = (
            (batches[-1].last_seq, batches[-1].last_offset) if batches else (None, None)
        )
        print(
            f"producerId: {producer.producer_id} producerEpoch: {producer.producer_epoch} "
            f"coordinatorEpoch: {producer.coordinator_epoch} "
            f"currentTxnFirstOffset: {producer.current_txn_first_offset} "
            f"lastTimestamp: {producer.last_append_time_ms} "
            f"firstSequence: {_dash(first_seq)} lastSequence: {_dash(last_seq)} "
            f"lastOffset: {_dash(last_offset)}"
        )
    return []


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _codec_name(header: BatchHeader) -> str:
    """The codec's name as Kafka's dump prints it; ``unknown(id)`` for the undefined ids 5-7
    (such a batch's CRC fails unless it was written that way on purpose)."""
    try:
        return header.compression.name.lower()
    except UnsupportedCompressionError:
        return f"unknown({header.attributes & COMPRESSION_MASK})"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _sequence(header: BatchHeader, offset: int) -> int:
    """The sequence of the batch's record at ``offset`` (-1 in a batch without sequences),
    wrapping as the batch's last sequence does."""
    return header._replace(last_offset_delta=offset - header.base_offset).last_sequence


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode(_ENCODING, errors="backslashreplace")


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
