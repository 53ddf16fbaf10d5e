"""``brook delete-records``' reading of Kafka's offset JSON file: what it accepts, and a clear
error naming what is wrong otherwise (exit 2 before anything is sent)."""

from __future__ import annotations

import json
import re

import pytest

from brook.admin_cli import UsageError
from brook.client.types import TopicPartition
from brook.tools.delete_records import parse_offset_json
from brook.v1 import storage_pb2


def test_kafkas_format_is_read_with_minus_one_for_the_high_watermark() -> None:
    text = json.dumps(
        {
            "partitions": [
                {"topic": "t", "partition": 0, "offset": 5},
                {"topic": "t", "partition": 1, "offset": -1},
            ],
            "version": 1,
        }
    )
    assert parse_offset_json(text) == {TopicPartition("t", 0): 5, TopicPartition("t", 1): -1}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("not json", "not JSON"),
        ("[]", '"partitions" list'),
        ('{"partitions": [], "version": 1}', "names no partition"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}', "version"),
        ('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}', "partitions[0]"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}', "offset in -1.."),
        # Beyond the request's int32 partition and int64 offset.
        (f'{{"partitions": [{{"topic": "t", "partition": 0, "offset": {2**63}}}]}}', "offset in"),
        (
            f'{{"partitions": [{{"topic": "t", "partition": {2**31}, "offset": 1}}]}}',
            "0..2147483647",
        ),
        ('{"partitions": [{"topic": "t", "partition": -1, "offset": 1}]}', "partition must be in"),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
            ' {"topic": "t", "partition": 0, "offset": 2}]}',
            "t-0 is named twice",
        ),
    ],
)
def test_a_malformed_file_is_refused_naming_the_problem(document: str, problem: str) -> None:
    with pytest.raises(UsageError, match=re.escape(problem)):
        parse_offset_json(document)


def test_the_largest_partition_and_offset_accepted_fit_the_request() -> None:
    text = json.dumps({"partitions": [{"topic": "t", "partition": 2**31 - 1, "offset": 2**63 - 1}]})
    [(tp, offset)] = parse_offset_json(text).items()
    request = storage_pb2.DeleteRecordsPartition(
        topic=tp.topic, partition=tp.partition, offset=offset
    )
    assert (request.partition, request.offset) == (2**31 - 1, 2**63 - 1)
