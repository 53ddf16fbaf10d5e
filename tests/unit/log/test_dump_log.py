"""``brook dump-log`` on files the partition log itself wrote: a plain batch with a key and a
header, a compressed one, an idempotent producer's transaction committed and another aborted
(markers, .txnindex), indexes and a producer-state snapshot; every field printed comes from the
same decoding the storage node uses, and damage is reported with exit status 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from brook_storage_node.log import AppendOrigin, LogConfig, PartitionLog
from log_test_support import FakeClock

from brook.cli import main
from brook.record import Compression, ControlType, build_batch, build_control_batch

NOW_MS = 1_700_000_000_000
PRODUCER_ID = 4242
EXIT_FAILED = 1
# The first five batches fit (about 420 bytes); the ABORT marker rolls the segment.
SEGMENT_BYTES = 450
# Offsets in a batch (Kafka's v2 layout): the magic byte, the attributes' low byte (codec bits).
MAGIC_BYTE = 16
ATTRIBUTES_LOW_BYTE = 22


def _written_log(directory: Path) -> Path:
    """A partition directory with two segments (offsets 0-8 in the first). Offsets: 0-1 plain
    (key k0, header trace), 2-4 gzip, 5-6 transactional then COMMIT at 7, 8 transactional then
    (second segment) ABORT at 9, 10 a plain record."""
    log = PartitionLog.open(
        directory,
        # A batch per index entry; the marker's append rolls the first segment.
        LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=1),
        had_clean_shutdown=False,
        high_watermark=1 << 40,
        clock_ms=FakeClock(NOW_MS),
    )

    def append(data: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> None:
        log.append(data, leader_epoch=3, origin=origin)

    def marker(kind: ControlType) -> None:
        batch = build_control_batch(
            kind,
            producer_id=PRODUCER_ID,
            producer_epoch=0,
            coordinator_epoch=5,
            timestamp_ms=NOW_MS + 9,
        )
        append(batch, AppendOrigin.COORDINATOR)

    try:
        append(
            build_batch([(NOW_MS, b"k0", b"v0", (("trace", b"t"),)), (NOW_MS + 1, None, b"v1", ())])
        )
        append(
            build_batch(
                [(NOW_MS + 2, None, b"zipped-%d" % i, ()) for i in range(3)],
                compression=Compression.GZIP,
            )
        )
        transactional = {
            "producer_id": PRODUCER_ID,
            "producer_epoch": 0,
            "is_transactional": True,
        }
        append(
            build_batch(
                [(NOW_MS + 3, None, b"t%d" % i, ()) for i in range(2)],
                base_sequence=0,
                **transactional,  # type: ignore[arg-type]
            )
        )
        marker(ControlType.COMMIT)
        append(
            build_batch(
                [(NOW_MS + 4, None, b"doomed", ())],
                base_sequence=2,
                **transactional,  # type: ignore[arg-type]
            )
        )
        marker(ControlType.ABORT)
        append(build_batch([(NOW_MS + 5, None, b"after", ())]))
        assert len(log.segment_base_offsets) == 2, "the first segment rolled"
    finally:
        log.close()
    return directory


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return _written_log(tmp_path / "events-0")


def _dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    status = main(["dump-log", *args])
    return status, capsys.readouterr().out.splitlines()


def _fields(line: str) -> dict[str, str]:
    """``name: value`` pairs of a dump line (values without spaces)."""
    words = line.lstrip("| ").split(" ")
    return {words[i].rstrip(":"): words[i + 1] for i in range(0, len(words) - 1, 2)}


def test_batches_and_records_as_kafka_dump_log_prints_them(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [first, second] = sorted(log_dir.glob("*.log"))
    status, lines = _dump(capsys, "--print-data-log", str(first))
    assert status == 0
    assert lines[:2] == [f"Dumping {first}", "Log starting offset: 0"]
    batches = [_fields(line) for line in lines if line.startswith("baseOffset:")]
    assert [(b["baseOffset"], b["lastOffset"], b["count"]) for b in batches] == [
        ("0", "1", "2"),
        ("2", "4", "3"),
        ("5", "6", "2"),
        ("7", "7", "1"),
        ("8", "8", "1"),
    ]
    assert [b["compresscodec"] for b in batches] == ["none", "gzip", "none", "none", "none"]
    assert [b["isTransactional"] for b in batches] == ["false", "false", "true", "true", "true"]
    assert [b["isControl"] for b in batches] == ["false", "false", "false", "true", "false"]
    assert all(b["isvalid"] == "true" and b["magic"] == "2" for b in batches)
    assert all(b["partitionLeaderEpoch"] == "3" for b in batches)
    assert (batches[2]["producerId"], batches[2]["baseSequence"]) == (str(PRODUCER_ID), "0")
    assert batches[2]["lastSequence"] == "1"
    assert [int(b["position"]) for b in batches] == sorted(int(b["position"]) for b in batches)
    assert int(batches[1]["position"]) == int(batches[0]["size"])

    records = [_fields(line) for line in lines if line.startswith("| ")]
    assert [r["offset"] for r in records] == [str(o) for o in range(9)]
    assert (records[0]["key"], records[0]["payload"], records[0]["headerKeys"]) == (
        "k0",
        "v0",
        "[trace]",
    )
    assert (records[1]["keySize"], records[1]["key"]) == ("-1", "null")
    assert [r["payload"] for r in records[2:5]] == ["zipped-0", "zipped-1", "zipped-2"]
    assert [r["sequence"] for r in records[5:7]] == ["0", "1"]
    assert (records[7]["endTxnMarker"], records[7]["coordinatorEpoch"]) == ("COMMIT", "5")

    status, lines = _dump(capsys, "--deep-iteration", str(second))
    assert status == 0
    records = [_fields(line) for line in lines if line.startswith("| ")]
    assert [(r["offset"], r.get("endTxnMarker")) for r in records] == [("9", "ABORT"), ("10", None)]
    assert "payload" not in records[1], "values only with --print-data-log"


def test_indexes_txnindex_and_snapshot_are_dumped_and_verified(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = sorted(log_dir.glob("*.index"))[0]
    status, lines = _dump(capsys, "--files", f"{index},{index.with_suffix('.timeindex')}")
    assert status == 0
    offsets = [_fields(line) for line in lines if line.startswith("offset:")]
    # Every batch but the first is indexed at its last offset.
    assert [e["offset"] for e in offsets] == ["4", "6", "7", "8"]
    times = [_fields(line) for line in lines if line.startswith("timestamp:")]
    assert times and times[-1] == {"timestamp": str(NOW_MS + 9), "offset": "7"}

    status, lines = _dump(capsys, "--verify-index-only", str(index))
    assert (status, lines) == (0, [f"Dumping {index}"])

    second_txn = sorted(log_dir.glob("*.txnindex"))[1]
    status, lines = _dump(capsys, str(second_txn))
    assert status == 0
    assert _fields(lines[1]) == {
        "producerId": str(PRODUCER_ID),
        "firstOffset": "8",
        "lastOffset": "9",
        "lastStableOffset": "10",
    }

    snapshots = sorted(log_dir.glob("*.snapshot"))
    status, lines = _dump(capsys, str(snapshots[-1]))
    assert status == 0
    [producer] = [_fields(line) for line in lines[1:]]
    assert producer["producerId"] == str(PRODUCER_ID)
    assert (producer["coordinatorEpoch"], producer["currentTxnFirstOffset"]) == ("5", "-1")


def test_damage_is_reported_with_exit_status_1(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = sorted(log_dir.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # the last batch's last byte: its CRC fails
    first.write_bytes(bytes(data) + b"\x00\x00")
    status, lines = _dump(capsys, "--deep-iteration", str(first))
    assert status == EXIT_FAILED
    damaged = next(line for line in lines if line.startswith("baseOffset: 8"))
    assert _fields(damaged)["isvalid"] == "false"
    assert any("fails its CRC-32C" in line for line in lines)
    assert any("2 bytes after position" in line for line in lines)

    # An index entry naming an offset its batch does not end at.
    index = first.with_suffix(".index")
    raw = bytearray(index.read_bytes())
    raw[3] += 1  # the first entry's relative offset: 4 -> 5
    index.write_bytes(bytes(raw))
    status, lines = _dump(capsys, "--verify-index-only", str(index))
    assert status == EXIT_FAILED
    assert any("Index offset: 5, log offset: 4" in line for line in lines)

    status, lines = _dump(capsys, str(log_dir / "notes.txt"))
    assert status == EXIT_FAILED and "not a log file name" in lines[-1]


def test_undefined_codec_and_an_index_entry_at_garbage_are_reported_not_raised(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = sorted(log_dir.glob("*.log"))[0]
    original = first.read_bytes()
    data = bytearray(original)
    data[ATTRIBUTES_LOW_BYTE] = (data[ATTRIBUTES_LOW_BYTE] & ~0x07) | 6  # codec 6: undefined
    first.write_bytes(bytes(data))
    status, lines = _dump(capsys, "--deep-iteration", str(first))
    assert status == EXIT_FAILED
    batches = [_fields(line) for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 5, "the dump goes on past the damaged batch"
    assert (batches[0]["compresscodec"], batches[0]["isvalid"]) == ("unknown(6)", "false")
    assert all(b["isvalid"] == "true" for b in batches[1:])
    assert any("position 0 fails its CRC-32C" in line for line in lines)

    # The log's byte at the first index entry's batch is not a v2 batch's magic.
    index = first.with_suffix(".index")
    position = int.from_bytes(index.read_bytes()[4:8], "big")
    data = bytearray(original)
    data[position + MAGIC_BYTE] = 1  # an old-format MessageSet's magic
    first.write_bytes(bytes(data))
    status, lines = _dump(capsys, "--verify-index-only", str(index))
    assert status == EXIT_FAILED
    assert any("entry 0 points at no batch" in line and "magic" in line for line in lines)
