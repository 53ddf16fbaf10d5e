"""Opening a partition log at start-up, recovering what a crash may have damaged (LogLoader).

Before anything else, a swap of cleaned segments that a crash interrupted is completed or
undone (``_finish_swaps``): the log is then its old version or its cleaned one, never a mix.

After a clean shutdown (the log manager's marker file) every segment is trusted as it is.
Otherwise every segment from the one holding the recovery point (the offset up to which the
log was last fsynced) is re-validated batch by batch: header, CRC-32C and offsets. The first
bad or incomplete batch ends the log: the segment is cut there (logged at WARNING with the
file, position and reason) and every later segment is deleted, so the log never has a hole
and never serves a batch that failed its CRC. A segment whose index files are missing or
do not fit its data is recovered the same way, which rebuilds them. Aborted-transaction
indexes (``.txnindex``) are rebuilt from the first segment recovered, or whose index is missing
or damaged, by the partition log's replay of the producer state (it knows each transaction's
first offset); this module only finds where that starts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from brook_storage_node.log.checkpoints import TEMP_SUFFIX
from brook_storage_node.log.files import fsync_dir
from brook_storage_node.log.leader_epoch import LeaderEpochFileCache
from brook_storage_node.log.log_config import LogConfig
from brook_storage_node.log.log_segment import (
    BASE_OFFSET_DIGITS,
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)
from brook_storage_node.log.transaction_index import TXN_INDEX_SUFFIX

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_end_offset: int
    # Everything below it is known to be on disk (fsynced); after loading that is the end.
    recovery_point: int
    recovered_segments: int
    # The base offset of the first segment whose aborted-transaction index must be rebuilt
    # (missing, damaged, or its segment recovered), None if every one is sound. The partition
    # log rebuilds it and every later one while it replays the producer state.
    txn_index_rebuild_from: int | None


def load_log(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    had_clean_shutdown: bool,
    log_start_offset: int,
    epoch_cache: LeaderEpochFileCache,
    now_ms: int,
) -> LoadedLog:
    """Open every segment in ``directory``, recovering as described in the module docstring.

    The returned last segment is ready for appends. OSError propagates (the caller decides
    whether the directory is unusable); damaged data never raises, it is cut off.
    """
    _finish_swaps(directory)
    _remove_leftovers(directory)
    bases = sorted(
        parsed[0]
        for entry in os.scandir(directory)
        if (parsed := parse_segment_file_name(entry.name)) is not None and parsed[1] == LOG_SUFFIX
    )
    segments: list[LogSegment] = []
    reasons: dict[int, str] = {}
    try:
        for base in bases:
            segment, index_problem = LogSegment.open(directory, base, config, now_ms)
            if index_problem is not None:
                reasons[len(segments)] = f"its indexes must be rebuilt: {index_problem}"
            segments.append(segment)
        for index, segment in enumerate(segments):
            if index not in reasons and index + 1 < len(segments):
                problem = segment.index_problem(segments[index + 1].base_offset)
                if problem is not None:
                    reasons[index] = f"its indexes must be rebuilt: {problem}"
        if not had_clean_shutdown:
            for index in range(len(segments)):
                next_base = segments[index + 1].base_offset if index + 1 < len(segments) else None
                if next_base is None or next_base > recovery_point:
                    reasons.setdefault(
                        index, f"it may hold unflushed data (recovery point {recovery_point})"
                    )
        recovered_bases: set[int] = set()
        recovered = _recover(segments, reasons, epoch_cache, recovered_bases)
        if not segments:
            segments.append(LogSegment.create(directory, max(log_start_offset, 0), config, now_ms))
        active = segments[-1]
        active.offset_index.make_writable()
        active.time_index.make_writable()
        problem = active.tail_problem()
        if problem is not None:
            # Only a log that claimed a clean shutdown, or whose damage sits below its recovery
            # point, gets here: the disk lost data that was reported as safely written.
            _log.error(
                "%s: damaged despite a clean shutdown or flush: %s", active.log_path, problem
            )
            recovered += _recover(
                segments, {len(segments) - 1: problem}, epoch_cache, recovered_bases
            )
            active.offset_index.make_writable()
            active.time_index.make_writable()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    log_end_offset = segments[-1].next_offset
    epoch_cache.truncate_from_end(log_end_offset)
    rebuild_from = _txn_index_rebuild_from(segments, recovered_bases)
    if recovered:
        epoch_cache.flush()
        for segment in segments:
            segment.flush()
        fsync_dir(directory)
    return LoadedLog(segments, log_end_offset, log_end_offset, recovered, rebuild_from)


def _txn_index_rebuild_from(segments: list[LogSegment], recovered_bases: set[int]) -> int | None:
    """The base offset of the first segment that was recovered or whose ``.txnindex`` is
    missing or damaged (logged), else None. Reads every segment's (small) index file."""
    for segment in segments:
        if segment.base_offset in recovered_bases:
            return segment.base_offset
        problem = segment.txn_index.problem()
        if problem is not None:
            _log.warning(
                "%s: rebuilding aborted-transaction indexes: %s", segment.log_path, problem
            )
            return segment.base_offset
    return None


def _recover(
    segments: list[LogSegment],
    reasons: dict[int, str],
    epoch_cache: LeaderEpochFileCache,
    recovered_bases: set[int],
) -> int:
    """Recover the segments named in ``reasons`` in order; returns how many were recovered
    and adds their base offsets to ``recovered_bases``."""
    recovered = 0
    for index in sorted(reasons):
        if index >= len(segments):
            break
        segment = segments[index]
        _log.info("recovering %s: %s", segment.log_path, reasons[index])
        # A segment's base offset is at least its predecessor's next offset (rolls make it
        # so), which makes the base the bound for its first batch.
        # The epochs of this segment and later ones are re-derived from the batches.
        epoch_cache.truncate_from_end(segment.base_offset, flush=False)
        result = segment.recover(min_first_offset=segment.base_offset, epoch_cache=epoch_cache)
        recovered += 1
        recovered_bases.add(segment.base_offset)
        if index + 1 < len(segments):
            segment.seal()
        if result.truncated_bytes and index + 1 < len(segments):
            # A log has no holes: nothing after the first damaged byte is kept.
            later = segments[index + 1 :]
            _log.warning(
                "%s: deleting %d later segments after the damage at position %d: %s",
                segment.directory,
                len(later),
                result.valid_bytes,
                ", ".join(s.log_path.name for s in later),
            )
            for stale in later:
                stale.delete_files()
            del segments[index + 1 :]
    return recovered


def _finish_swaps(directory: Path) -> None:
    """Complete or undo what a crash interrupted of the cleaner's swaps, before anything else
    looks at the segments (docs/compaction.md, "Swap"; PartitionLog.replace_segments).

    With no ``<base>.swap`` file every ``*.cleaned`` file belongs to an unfinished pass and is
    deleted: the old segments are intact. A ``.swap`` file means the cleaned segment at its
    base is complete and must win: the replaced segments' files still under their final names
    are deleted, except a file of the new segment's own base whose ``.cleaned`` twin is gone
    (the new one, already renamed); the remaining ``.cleaned`` files of that base are renamed
    (indexes first, log last) and the swap file removed. OSError propagates; a swap file
    that cannot be parsed is an OSError too (it is written atomically: only the disk can
    damage it)."""
    names = {entry.name for entry in os.scandir(directory)}
    swaps = []
    for name in names:
        stem = name.removesuffix(SWAP_SUFFIX)
        if stem != name and len(stem) == BASE_OFFSET_DIGITS and stem.isdigit():
            swaps.append((int(stem), name))
    completed = set()
    for base, swap_name in sorted(swaps):
        text = (directory / swap_name).read_text()
        try:
            replaced = [int(line) for line in text.split()]
        except ValueError:
            raise OSError(f"{directory / swap_name} is damaged: {text[:100]!r}") from None
        _log.warning(
            "%s: completing the interrupted swap of the cleaned segment at %d for segments %s",
            directory,
            base,
            replaced,
        )
        for replaced_base in replaced:
            for suffix in SEGMENT_SUFFIXES:
                final = segment_file_name(replaced_base, suffix)
                new_already = replaced_base == base and final + CLEANED_SUFFIX not in names
                if final in names and not new_already:
                    (directory / final).unlink()
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
            final = segment_file_name(base, suffix)
            if final + CLEANED_SUFFIX in names:
                os.replace(directory / (final + CLEANED_SUFFIX), directory / final)
        fsync_dir(directory)
        (directory / swap_name).unlink()
        completed.add(base)
    stale = [
        name
        for name in names
        if name.endswith(CLEANED_SUFFIX)
        and (parsed := parse_segment_file_name(name.removesuffix(CLEANED_SUFFIX))) is not None
        and parsed[0] not in completed
    ]
    for name in stale:
        _log.info("%s: removing %s, left by an unfinished cleaning pass", directory, name)
        (directory / name).unlink()
    if swaps or stale:
        fsync_dir(directory)


def _remove_leftovers(directory: Path) -> None:
    """Delete what an interrupted operation left: *.deleted segments, checkpoint temp files
    and index files whose log file is gone."""
    names = {entry.name for entry in os.scandir(directory)}
    for name in names:
        parsed = parse_segment_file_name(name)
        orphan_index = (
            parsed is not None
            and parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
            and name[: -len(parsed[1])] + LOG_SUFFIX not in names
        )
        if name.endswith(DELETED_SUFFIX) or name.endswith(TEMP_SUFFIX) or orphan_index:
            _log.info("%s: removing leftover file %s", directory, name)
            (directory / name).unlink(missing_ok=True)
