"""Spark's decoding of a compacted partition (issue #18): a range's rows are the records kept
in it, fewer than its offsets; the offset to fetch next passes gaps and empty batches and
never the range's end, so a task whose range ends inside a gap ends."""

from __future__ import annotations

from typing import Final

import pytest
from compacted_batches import compacted_batch

from brook.spark.arrow_decode import decode_fetch

T0: Final = 1_700_000_000_000
# Offsets 0-4 (kept 1 and 3), 5-7 (an empty batch), nothing at 8-9, 10-13 (kept 10 and 13).
LOG: Final = b"".join(
    (
        compacted_batch(
            [(1, T0 + 1, b"a", b"a1"), (3, T0 + 3, b"b", b"b3")], base_offset=0, last_offset_delta=4
        ),
        compacted_batch(
            [], base_offset=5, last_offset_delta=2, producer_id=9, producer_epoch=0, base_sequence=0
        ),
        compacted_batch(
            [(0, T0 + 10, b"c", b"c10"), (3, T0 + 13, b"a", b"a13")],
            base_offset=10,
            last_offset_delta=3,
        ),
    )
)


@pytest.mark.parametrize(
    ("start", "end", "offsets", "next_offset"),
    [
        (0, 14, [1, 3, 10, 13], 14),
        (0, 4, [1, 3], 4),
        (2, 6, [3], 6),
        (4, 9, [], 9),
        (5, 8, [], 8),
        (8, 12, [10], 12),
        (11, 13, [], 13),
    ],
)
def test_rows_are_the_kept_records_and_the_next_offset_passes_gaps(
    start: int, end: int, offsets: list[int], next_offset: int
) -> None:
    # The node answers a fetch at ``start`` from the batch holding it; batches before it are
    # skipped here as they would be in the answer's first batch.
    decoded = decode_fetch(LOG, "compacted", 0, start, end, aborted=None, include_headers=False)

    assert decoded.batch.column("offset").to_pylist() == offsets
    assert decoded.next_offset == next_offset


def test_a_fetch_of_only_empty_batches_moves_on() -> None:
    empty = b"".join(
        compacted_batch(
            [], base_offset=b, last_offset_delta=1, producer_id=9, producer_epoch=0, base_sequence=b
        )
        for b in (20, 22)
    )

    decoded = decode_fetch(empty, "compacted", 0, 20, 100, aborted=None, include_headers=True)

    assert decoded.batch.num_rows == 0
    assert decoded.next_offset == 24
