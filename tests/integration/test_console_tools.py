"""The console producer/consumer and the perf tools, run as ``brook`` subprocesses against a
real storage node: what goes in on stdin comes out (and is stored) exactly; perf tools print
parseable, self-consistent figures; bad usage exits 2 and sends nothing.

One cluster (a controller and one storage node serving static topics) is shared by the module;
each test works on topics of its own.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_fixture import ClusterFactory

from brook.client import Consumer, ConsumerRecord, TopicPartition
from brook.client.partitioner import partition_for_key

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
NODE = "storage-node-1"
STATIC_TOPICS = (
    "roundtrip:1",
    "keyed:3",
    "seek:2",
    "idle:1",
    "badline:1",
    "untouched:1",
    "perf:6",
    "throttled:1",
    "signals:1",
)
# A `brook` process imports gRPC before it does anything; on a busy shared machine that alone
# can take seconds.
COMMAND_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_MS = 20_000
RESULT_TIMEOUT_S = 30.0
EXIT_USAGE = 2
EXIT_FAILED = 1


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of the shared cluster's storage node."""
    factory = ClusterFactory(Path(tmp_path_factory.mktemp("tools")) / "clusters")
    failed = True
    try:
        cluster = factory(
            controllers=1,
            storage_nodes=1,
            group_coordinators=0,
            gateways=0,
            config_overrides={NODE: {"static.topics": ",".join(STATIC_TOPICS)}},
        )
        yield cluster.grpc_address(NODE)
        failed = False
    finally:
        if failed:
            for title, text in factory.log_sections():
                print(f"--- {title} ---\n{text}")
        factory.close(keep_files=failed)


def _brook(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run ``brook ARGS`` to completion (killed if it outlives the bound)."""
    return subprocess.run(
        [BROOK, *args],
        input=stdin,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[ConsumerRecord]:
    """Every record of ``topic`` through the SDK (independent of the console formatter)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    records: list[ConsumerRecord] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            records += consumer.poll(timeout=0.5)
        # Anything beyond ``count`` would be a duplicate or an invented record.
        records += consumer.poll(timeout=0.3)
    return records


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        ends = consumer.end_offsets(tps, timeout=RESULT_TIMEOUT_S)
    return [ends[tp] for tp in tps]


def test_lines_round_trip_with_keys_headers_and_every_print_field(bootstrap: str) -> None:
    lines = [
        b"trace:0af7,source:web\tuser-1\tfirst value",
        b"\tuser-2\tsecond: with separators\tinside",
        b"only:header\t\t",
        b"n:NULL\tNULL\tNULL",
    ]
    before_ms = int(time.time() * 1000)

    produced = _brook(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "roundtrip",
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        "--property",
        "null.marker=NULL",
        "--producer-property",
        "acks=all",
        stdin=b"\n".join(lines) + b"\n",
    )
    consumed = _brook(
        "console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "roundtrip",
        "--from-beginning",
        "--max-messages",
        str(len(lines)),
        "--timeout-ms",
        str(CONSUME_TIMEOUT_MS),
        *("--property", "print.timestamp=true"),
        *("--property", "print.partition=true"),
        *("--property", "print.offset=true"),
        *("--property", "print.headers=true"),
        *("--property", "print.key=true"),
        *("--property", "key.separator=|"),
    )
    after_ms = int(time.time() * 1000)

    assert produced.returncode == 0, produced.stderr
    assert consumed.returncode == 0, consumed.stderr
    printed = consumed.stdout.split(b"\n")
    assert printed[-1] == b""
    fields = [line.split(b"|") for line in printed[:-1]]
    assert [f[1:] for f in fields] == [
        [b"Partition:0", b"Offset:0", b"trace:0af7,source:web", b"user-1", b"first value"],
        [b"Partition:0", b"Offset:1", b"NO_HEADERS", b"user-2", b"second: with separators\tinside"],
        [b"Partition:0", b"Offset:2", b"only:header", b"", b""],
        [b"Partition:0", b"Offset:3", b"n:null", b"null", b"null"],
    ]
    for timestamp_field, *_ in fields:
        kind, _, millis = timestamp_field.partition(b":")
        assert kind == b"CreateTime"
        assert before_ms <= int(millis) <= after_ms
    assert b"Processed a total of 4 messages" in consumed.stderr
    stored = _consume_all(bootstrap, "roundtrip", 1, len(lines))
    assert [(r.offset, r.key, r.value, r.headers) for r in stored] == [
        (0, b"user-1", b"first value", (("trace", b"0af7"), ("source", b"web"))),
        (1, b"user-2", b"second: with separators\tinside", ()),
        (2, b"", b"", (("only", b"header"),)),
        (3, None, None, (("n", None),)),
    ]


def test_keyed_lines_land_on_their_murmur2_partition_and_each_is_printed_once(
    bootstrap: str,
) -> None:
    keys = [f"key-{n}".encode() for n in range(30)]
    stdin = b"".join(b"%s:value-%d\n" % (key, n) for n, key in enumerate(keys))

    produced = _brook(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "keyed",
        *("--property", "parse.key=true", "--property", "key.separator=:"),
        stdin=stdin,
    )
    consumed = _brook(
        "console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "keyed",
        "--from-beginning",
        *("--max-messages", str(len(keys)), "--timeout-ms", str(CONSUME_TIMEOUT_MS)),
        *("--property", "print.partition=true", "--property", "print.key=true"),
    )

    assert produced.returncode == 0, produced.stderr
    assert consumed.returncode == 0, consumed.stderr
    printed = [line.split(b"\t") for line in consumed.stdout.splitlines()]
    assert sorted((key, value) for _, key, value in printed) == sorted(
        (key, b"value-%d" % n) for n, key in enumerate(keys)
    )
    for partition_field, key, _ in printed:
        assert partition_field == b"Partition:%d" % partition_for_key(key, 3)
    # Within a partition, lines keep their stdin order.
    for partition in range(3):
        values = [int(v.split(b"-")[1]) for p, _, v in printed if p == b"Partition:%d" % partition]
        assert values == sorted(values)


def test_consumer_reads_one_partition_from_an_offset(bootstrap: str) -> None:
    stdin = b"".join(b"line-%d\n" % n for n in range(6))
    produced = _brook(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "seek",
        *("--producer-property", "partitioner.ignore.keys=true"),
        stdin=stdin,
    )
    stored = _consume_all(bootstrap, "seek", 2, 6)
    target = stored[0].partition
    in_target = [r for r in stored if r.partition == target]

    consumed = _brook(
        "console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "seek",
        *("--partition", str(target), "--offset", "2"),
        *("--timeout-ms", "1500", "--property", "print.offset=true"),
    )

    assert produced.returncode == 0, produced.stderr
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [
        b"Offset:%d\t%s" % (r.offset, r.value) for r in in_target if r.offset >= 2
    ]
    assert len(in_target) > 2


def test_consumer_exits_zero_when_nothing_arrives_within_timeout(bootstrap: str) -> None:
    started = time.monotonic()
    consumed = _brook(
        "console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "idle",
        "--from-beginning",
        "--timeout-ms",
        "700",
    )
    elapsed_s = time.monotonic() - started

    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == b""
    assert b"Processed a total of 0 messages" in consumed.stderr
    assert elapsed_s >= 0.7


def test_consumer_stops_on_sigterm_and_reports_what_it_printed(bootstrap: str) -> None:
    _brook(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "signals",
        stdin=b"one\ntwo\n",
    )
    process = subprocess.Popen(
        [
            BROOK,
            "console-consumer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            "signals",
            "--from-beginning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        second = process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=COMMAND_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert (first, second) == (b"one\n", b"two\n")
    assert process.returncode == 0
    assert b"Processed a total of 2 messages" in stderr


def test_a_line_without_the_key_separator_fails_naming_the_line(bootstrap: str) -> None:
    produced = _brook(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "badline",
        *("--property", "parse.key=true", "--property", "key.separator=:"),
        stdin=b"k1:good\nno separator here\nk3:never sent\n",
    )

    assert produced.returncode == EXIT_FAILED
    assert b"line 2" in produced.stderr
    assert b"key.separator" in produced.stderr
    # As kafka-console-producer: lines before the bad one were sent, none after it.
    assert [(r.key, r.value) for r in _consume_all(bootstrap, "badline", 1, 1)] == [
        (b"k1", b"good")
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["console-producer", "--topic", "untouched", "--property", "parse.keys=true"],
            "unknown --property parse.keys",
        ),
        (
            ["console-producer", "--topic", "untouched", "--property", "parse.key=yes"],
            "parse.key must be true or false",
        ),
        (
            ["console-producer", "--topic", "untouched", "--producer-property", "lingerms=5"],
            "lingerms is not a producer setting",
        ),
        (
            ["console-producer", "--topic", "untouched", "--producer-property", "acks"],
            "expects KEY=VALUE",
        ),
        (["console-consumer", "--topic", "untouched", "--offset", "3"], "needs --partition"),
        (
            ["console-consumer", "--topic", "untouched", "--partition", "0", "--offset", "x"],
            "--offset must be a number",
        ),
        (
            ["console-consumer", "--topic", "untouched", "--from-beginning", "--offset", "1"],
            "not allowed with argument",
        ),
        (["console-consumer", "--topic", "untouched", "--max-messages", "0"], "must be an"),
        (
            [
                "producer-perf-test",
                "--topic",
                "untouched",
                "--num-records",
                "10",
                "--record-size",
                "100",
                "--throughput",
                "0",
            ],
            "--throughput must be > 0",
        ),
        (
            [
                "producer-perf-test",
                "--topic",
                "untouched",
                "--num-records",
                "-5",
                "--record-size",
                "100",
                "--throughput",
                "-1",
            ],
            "--num-records",
        ),
        (
            [
                "producer-perf-test",
                "--topic",
                "untouched",
                "--num-records",
                "10",
                "--record-size",
                "100",
                "--throughput",
                "-1",
                "--producer-props",
                "acks=2",
            ],
            "acks",
        ),
        (["consumer-perf-test", "--topic", "untouched"], "--messages"),
        (
            ["console-consumer", "--topic", "untouched", "--group", "g", "--partition", "0"],
            "not with --partition or --offset",
        ),
        (
            [
                "console-consumer",
                "--topic",
                "untouched",
                "--group",
                "g",
                "--consumer-property",
                "group.id=other",
            ],
            "name different groups",
        ),
    ],
)
def test_bad_usage_exits_2_with_a_clear_error_and_sends_nothing(
    bootstrap: str, args: list[str], message: str
) -> None:
    result = _brook(*args, "--bootstrap-server", bootstrap, stdin=b"would be a record\n")

    assert result.returncode == EXIT_USAGE
    assert message.encode() in result.stderr, result.stderr
    assert result.stdout == b""
    assert _end_offsets(bootstrap, "untouched", 1) == [0]


def test_an_unknown_topic_or_partition_fails_with_exit_1(bootstrap: str) -> None:
    unknown_topic = _brook(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", "no-such-topic"
    )
    unknown_partition = _brook(
        "consumer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", "no-such-topic", "--messages", "1"),
    )
    partition_out_of_range = _brook(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", "idle", "--partition", "1"
    )

    assert unknown_topic.returncode == EXIT_FAILED
    assert b"unknown topic 'no-such-topic'" in unknown_topic.stderr
    assert unknown_partition.returncode == EXIT_FAILED
    assert b"unknown topic 'no-such-topic'" in unknown_partition.stderr
    assert partition_out_of_range.returncode == EXIT_FAILED
    assert b"partition 1 does not exist: topic 'idle' has 1 partition(s)" in (
        partition_out_of_range.stderr
    )


def test_perf_tools_print_json_whose_figures_agree_with_what_was_stored(bootstrap: str) -> None:
    records = 20_000
    produced = _brook(
        "producer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", "perf"),
        *("--num-records", str(records), "--record-size", "100", "--throughput", "-1"),
        *("--producer-props", "acks=1", "linger.ms=5"),
        "--json",
    )
    consumed = _brook(
        "consumer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", "perf"),
        *("--messages", str(records), "--json"),
    )

    assert produced.returncode == 0, produced.stderr
    assert consumed.returncode == 0, consumed.stderr
    produce = json.loads(produced.stdout)
    consume = json.loads(consumed.stdout)
    assert produce["records"] == records
    assert produce["record_size"] == 100
    assert produce["failed"] == 0
    assert produce["first_error"] is None
    assert produce["records_per_s"] == pytest.approx(records / produce["elapsed_s"], rel=1e-3)
    assert produce["mb_per_s"] == pytest.approx(produce["records_per_s"] * 100 / 2**20, rel=1e-2)
    latency = produce["latency_ms"]
    assert latency["samples"] == records // produce["latency_sample_every"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p99_9"]
    assert latency["p99_9"] <= latency["max"] <= produce["elapsed_s"] * 1000
    assert latency["p50"] <= latency["avg"] * 3
    assert sum(_end_offsets(bootstrap, "perf", 6)) == records
    assert consume["records"] == records
    assert consume["bytes"] == records * 100
    assert consume["timed_out"] is False
    assert consume["records_per_s"] == pytest.approx(records / consume["elapsed_s"], rel=1e-3)
    assert consume["mb_per_s"] == pytest.approx(records * 100 / 2**20 / consume["elapsed_s"], 1e-2)
    assert consume["fetch_elapsed_s"] <= consume["elapsed_s"]


def test_producer_perf_test_honours_the_throughput_cap_and_prints_kafka_style_lines(
    bootstrap: str,
) -> None:
    records, cap = 600, 1000
    produced = _brook(
        "producer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", "throttled"),
        *("--num-records", str(records), "--record-size", "10", "--throughput", str(cap)),
        *("--producer-props", "linger.ms=0", "--reporting-interval-ms", "200"),
    )
    consumed = _brook(
        "consumer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", "throttled", "--messages", str(records)),
    )

    assert produced.returncode == 0, produced.stderr
    lines = produced.stdout.decode().splitlines()
    number = r"(\d+(?:\.\d+)?)"
    summary = re.fullmatch(
        rf"{records} records sent, {number} records/sec \({number} MB/sec\), {number} ms avg "
        rf"latency, {number} ms max latency, {number} ms 50th, {number} ms 95th, {number} ms "
        rf"99th, {number} ms 99.9th\.",
        lines[-1],
    )
    assert summary is not None, lines
    assert float(summary.group(1)) <= cap * 1.05
    windows = [
        line
        for line in lines[:-1]
        if re.fullmatch(rf"\d+ records sent, {number} records/sec \({number} MB/sec\), .*", line)
    ]
    assert windows, lines
    assert consumed.returncode == 0, consumed.stderr
    header, values = consumed.stdout.decode().splitlines()
    row = dict(zip(header.split(", "), values.split(", "), strict=True))
    assert int(row["data.consumed.in.nMsg"]) == records
    assert float(row["data.consumed.in.MB"]) == pytest.approx(records * 10 / 2**20, abs=1e-4)


def test_consumer_perf_test_exits_1_when_the_topic_holds_fewer_records(bootstrap: str) -> None:
    result = _brook(
        "consumer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", "idle", "--messages", "5"),
        *("--timeout-ms", "700", "--json"),
    )

    assert result.returncode == EXIT_FAILED
    assert json.loads(result.stdout)["records"] == 0
    assert b"consumed 0 of 5 records: none arrived for 700 ms" in result.stderr
