"""The compiled record decoder (brook/record/_speedups.c) against the Python loop it speeds up
(records._decode_records): built by every install, the same records for every well-formed
batch, and None, never a different answer, for a damaged one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brook.record import BATCH_OVERHEAD, build_batch, read_header
from brook.record import records as records_module
from brook.record.errors import CorruptRecordError
from brook.record.records import _decode_records

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_blobs = st.none() | st.binary(max_size=200)
_records = st.lists(
    st.tuples(
        st.none() | st.integers(0, 2**41),
        _blobs,
        _blobs,
        st.lists(st.tuples(st.text(max_size=8), _blobs), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


def _both(batch: bytes, log_append_time: int | None = None) -> tuple[Any, Any]:
    """(the compiled decoder's answer, the Python loop's records or its CorruptRecordError)."""
    header = read_header(batch)
    args = (
        batch,
        BATCH_OVERHEAD,
        len(batch),
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        log_append_time,
    )
    compiled = records_module._c_decode_records
    assert compiled is not None
    try:
        python: Any = _decode_records(*args)
    except CorruptRecordError as e:
        python = e
    return compiled(*args), python


def test_the_extension_is_built_and_used() -> None:
    """`pip install` builds it (gcc and the Python headers): a silent fallback to the Python
    loop would cost the consumer half its speed."""
    assert records_module._c_decode_records is not None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, log_append_time=st.none() | st.integers(0, 2**41))
def test_decodes_every_batch_as_the_python_loop_does(
    records: list[Any], log_append_time: int | None
) -> None:
    compiled, python = _both(build_batch(records), log_append_time)
    assert compiled == python
    assert [r[2:4] for r in compiled] == [(key, value) for _, key, value, _ in records]


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=_records,
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 40),
)
def test_a_damaged_batch_is_decoded_alike_or_left_to_the_python_loop(
    records: list[Any], flips: list[tuple[int, int]], cut: int
) -> None:
    batch = bytearray(build_batch(records))
    payload = len(batch) - BATCH_OVERHEAD
    for at, value in flips:
        batch[BATCH_OVERHEAD + at % payload] = value
    damaged = bytes(batch[: max(len(batch) - cut, BATCH_OVERHEAD)])
    compiled, python = _both(damaged)
    if compiled is not None:
        assert compiled == python
    elif not isinstance(python, CorruptRecordError):
        # The only records the Python loop takes and the compiled one leaves to it: offsets
        # or timestamps past int64, which the C code does not represent.
        assert any(not INT64_MIN <= value <= INT64_MAX for record in python for value in record[:2])


def test_the_consumer_path_gives_the_same_records_with_and_without_the_extension(
    monkeypatch: Any,
) -> None:
    batch = build_batch(
        [(1_000 + i, b"k%d" % i, b"v" * i, [("h", None)] if i % 2 else []) for i in range(50)]
    )
    compiled = records_module.decode_records(batch)
    monkeypatch.setattr(records_module, "_c_decode_records", None)
    assert records_module.decode_records(batch) == compiled


def test_varints_too_long_for_their_type_are_left_to_the_python_loop() -> None:
    """A timestamp delta whose tenth byte carries bits past 64, and an offset delta past 32
    bits: the compiled decoder must not truncate them into a number."""
    compiled = records_module._c_decode_records
    assert compiled is not None
    bodies = {
        "varlong": bytes([0]) + bytes([0xFF] * 9 + [0x02]) + bytes([0, 1, 1, 0]),
        "varint": bytes([0, 0]) + bytes([0xFF] * 4 + [0x1F]) + bytes([1, 1, 0]),
    }
    for kind, body in bodies.items():
        data = bytes([len(body) << 1]) + body
        args = (data, 0, len(data), 1, 100, 1000, None)
        assert compiled(*args) is None, kind
        with pytest.raises(CorruptRecordError, match=r"does not fit in int(64|32)"):
            _decode_records(*args)
