"""Property: whatever batches are appended are read back intact, at dense, increasing offsets."""

from __future__ import annotations

import tempfile
from pathlib import Path

from brook_storage_node.log import LogConfig, PartitionLog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_test_support import FakeClock, read_batches, read_records, split_batches

from brook.record import Compression, build_batch, iter_records, read_header

keys_or_values = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=2)
records = st.tuples(st.integers(0, 2**41), keys_or_values, keys_or_values, headers)
batches = st.lists(records, min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    appends=st.lists(st.tuples(batches, st.sampled_from(Compression)), min_size=1, max_size=10),
    segment_bytes=st.sampled_from([1024, 4096, 1 << 20]),
    index_interval_bytes=st.sampled_from([0, 100, 4096]),
    max_bytes=st.sampled_from([1, 300, 1 << 20]),
)
def test_appended_records_read_back_identical_at_dense_increasing_offsets(
    appends: list[
        tuple[
            list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
            Compression,
        ]
    ],
    segment_bytes: int,
    index_interval_bytes: int,
    max_bytes: int,
) -> None:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(Path(tmp) / "topic-0", config, clock_ms=FakeClock())
        try:
            expected: list[
                tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
            ] = []
            for batch_records, compression in appends:
                info = log.append(
                    build_batch(batch_records, compression=compression), leader_epoch=7
                )
                assert info.first_offset == len(expected)
                assert info.last_offset == len(expected) + len(batch_records) - 1
                expected.extend(batch_records)
            assert log.log_end_offset == len(expected)

            got = read_records(log, max_bytes=max_bytes)
            assert [r.offset for r in got] == list(range(len(expected)))
            for record, (timestamp, key, value, record_headers) in zip(got, expected, strict=True):
                assert (record.timestamp, record.key, record.value) == (timestamp, key, value)
                assert record.headers == tuple(record_headers)

            # Every offset can be fetched directly, landing on the batch that holds it.
            for offset in range(len(expected)):
                fetched = log.read(offset, max_bytes)
                first = split_batches(fetched.records)[0]
                header = read_header(first)
                assert header.base_offset <= offset <= header.last_offset
                assert header.partition_leader_epoch == 7

            before = read_batches(log)
            log.close()
            log = PartitionLog.open(Path(tmp) / "topic-0", config, clock_ms=FakeClock())
            assert read_batches(log) == before
        finally:
            log.close()


def test_follower_copy_of_a_leader_log_holds_the_same_batches(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2048, index_interval_bytes=200)
    for node in ("leader", "follower"):
        (tmp_path / node).mkdir()
    leader = PartitionLog.open(tmp_path / "leader" / "topic-0", config, clock_ms=FakeClock())
    follower = PartitionLog.open(tmp_path / "follower" / "topic-0", config, clock_ms=FakeClock())
    try:
        for epoch, count in ((1, 3), (1, 5), (4, 2), (9, 7)):
            records = [(1_000 + i, b"k", bytes([i]) * 50, ()) for i in range(count)]
            leader.append(build_batch(records, compression=Compression.LZ4), leader_epoch=epoch)
        while follower.log_end_offset < leader.log_end_offset:
            fetched = leader.read(follower.log_end_offset, 700)
            follower.append_as_follower(fetched.records)
        assert read_batches(follower) == read_batches(leader)
        assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
        assert [r.value for r in read_records(follower)] == [r.value for r in read_records(leader)]
        assert all(r.offset == i for i, r in enumerate(iter_records(read_batches(follower)[0])))
    finally:
        leader.close()
        follower.close()
