"""The driver's side of a read that needs no cluster: options checked as Spark checks them,
ranges split for minPartitions and bounded by maxOffsetsPerTrigger as Spark computes them."""

from __future__ import annotations

import pytest

from brook.client.types import TopicPartition
from brook.spark.log_client import EARLIEST, LATEST
from brook.spark.offset_ranges import DataLossError, OffsetRange, check_data_loss, rate_limit, split
from brook.spark.options import OptionError
from brook.spark.read_options import offsets_json, parse_offsets_json, parse_read_options

SERVERS = {"kafka.bootstrap.servers": "127.0.0.1:9101"}
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_split_divides_ranges_in_proportion_to_their_size() -> None:
    ranges = [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 50, 60), OffsetRange("b", 0, 5, 5)]
    # 100 of the 110 offsets: round(4.55) = 5 parts; 10 of them: round(0.45), at least 1.
    parts = split(ranges, 5)
    assert [(r.partition, r.start, r.end) for r in parts] == [
        *((0, n, n + 20) for n in range(0, 100, 20)),
        (1, 50, 60),
    ]
    assert split(ranges, None) == ranges[:2]
    assert split(ranges, 2) == ranges[:2]


def test_rate_limit_splits_the_limit_by_lag() -> None:
    start = {A0: 0, A1: 10, B0: 100}
    latest = {A0: 70, A1: 39, B0: 101}
    # 100 offsets behind: shares 70%, 29%, 1% of 10 rounded down, the tiny one up.
    assert rate_limit(start, latest, 10) == {A0: 7, A1: 12, B0: 101}
    assert rate_limit(start, latest, 100) == latest


def test_data_loss_fails_or_moves_to_the_log_start() -> None:
    assert check_data_loss(A0, 5, 3, fail=True) == 5
    assert check_data_loss(A0, 1, 3, fail=False) == 3
    with pytest.raises(DataLossError, match="a-0: offsets 1 to 2 are no longer in Brook"):
        check_data_loss(A0, 1, 3, fail=True)


def test_offsets_json_round_trips() -> None:
    offsets = {A1: 5, A0: -2, B0: 7}
    assert offsets_json(offsets) == {"a": {"0": -2, "1": 5}, "b": {"0": 7}}
    assert parse_offsets_json('{"a": {"0": -2, "1": 5}, "b": {"0": 7}}', "x") == offsets


def test_defaults_and_precedence() -> None:
    batch = parse_read_options({**SERVERS, "subscribe": "a, b"}, streaming=False)
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting.edge == EARLIEST and batch.ending is not None
    assert batch.ending.edge == LATEST and batch.fail_on_data_loss
    stream = parse_read_options({**SERVERS, "subscribe": "a"}, streaming=True)
    assert stream.starting.edge == LATEST and stream.ending is None
    timed = parse_read_options(
        {
            **SERVERS,
            "assign": '{"a":[0,1]}',
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"a":{"0":5,"1":6}}',
        },
        streaming=False,
    )
    assert timed.subscription.assigned == (A0, A1)
    assert timed.starting.timestamps == {A0: 5, A1: 6}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a", "subscribePattern": "a.*"}, False, "Only one of"),
        ({}, True, "One of the following options must be specified"),
        ({"subscribe": " , "}, False, "No topics to subscribe to"),
        ({"subscribePattern": "("}, False, "not a valid regex"),
        ({"assign": "[1]"}, False, "Expected e.g."),
        ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, False, "Expected e.g."),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False, "can't be latest"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "can't be earliest"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, True, "invalid offset -3"),
        ({"subscribe": "a", "endingTimestamp": "5"}, True, "not valid in streaming"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, True, "timestamp in milliseconds"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "-5"}, True, "positive integer"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, True, "'true' or 'false'"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, True, "'error' or"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, True, "not supported"),
    ],
)
def test_bad_options_are_option_errors(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({**SERVERS, **options}, streaming=streaming)
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        parse_read_options(options, streaming=streaming)
