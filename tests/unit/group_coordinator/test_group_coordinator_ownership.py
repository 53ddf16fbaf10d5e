"""The group-to-partition function is Kafka's: abs(Java String.hashCode) % partitions."""

from __future__ import annotations

import pytest
from brook_group_coordinator.ownership import java_string_hash, offsets_partition_for


def test_java_string_hash_matches_java_for_known_strings() -> None:
    # Values from Java's "…".hashCode().
    assert java_string_hash("") == 0
    assert java_string_hash("test") == 3556498
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -2147483648
    # A character outside the BMP counts as two UTF-16 code units, as in Java.
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00


def test_group_partition_is_kafkas_abs_hash_modulo_partition_count() -> None:
    assert offsets_partition_for("test", 50) == 3556498 % 50
    assert offsets_partition_for("hello world", 50) == 1794106052 % 50
    # Integer.MIN_VALUE: Kafka's Utils.abs gives 0 rather than a negative number.
    assert offsets_partition_for("polygenelubricants", 50) == 0
    negative = "Aa-BB-group-7"
    h = java_string_hash(negative)
    assert offsets_partition_for(negative, 7) == abs(h) % 7


def test_partition_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        offsets_partition_for("g", 0)
