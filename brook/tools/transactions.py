"""``brook transactions ...``: transactions from the shell, in the spirit of Kafka's
kafka-transactions.sh.

    brook transactions list
    brook transactions describe --transactional-id ID
    brook transactions describe-producers --topic T --partition P
    brook transactions find-hanging [--topic T [--partition P] | --broker-id N] \
        [--max-transaction-timeout MINUTES]
    brook transactions abort --topic T --partition P --start-offset O
    brook transactions abort --topic T --partition P --producer-id I --producer-epoch E \
        --coordinator-epoch C
    brook transactions fence --transactional-id ID

``find-hanging`` lists the open transactions (DescribeProducers at the partitions' leaders)
whose producer last wrote longer ago than the longest transaction timeout, and that no
coordinator will finish: their producer id is unknown to every coordinator, or its
transaction no longer includes the partition. ``abort`` writes an ABORT marker for such a
transaction (found by the offset it starts at) at the partition's leader. As Kafka's tool,
``abort`` uses the producer's epoch and the coordinator epoch of its last marker (0 when it had
none). Unlike it, ``find-hanging`` without ``--topic`` or ``--broker-id`` searches every topic
instead of refusing (a Brook cluster is cheap to scan). ``fence`` (not in Kafka's tool) does
what a new producer instance with the id would: the coordinator aborts the id's open
transaction — a two-phase one too, which no timeout ever ends (e.g. of a Spark task whose
executor died after preparing it) — and bumps its epoch, so the old holder is fenced.

Like ``brook topics``, every action takes ``--bootstrap-server`` (controllers' or storage
nodes' GRPC addresses) and ``--timeout-ms``. Exit status: 0 on success, 1 when the cluster
refused or did not answer, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any, Final

from brook.admin_cli import (
    EXIT_OK,
    UsageError,
    add_json_option,
    dash,
    handler,
    print_json,
    print_table,
)

if TYPE_CHECKING:
    # Imported when a command runs, not when `brook` starts: the SDK pulls in gRPC.
    from brook.client.admin import Admin, ProducerState
    from brook.client.types import TopicPartition

__all__ = ["add_transactions_command"]

# Kafka's default for --max-transaction-timeout (minutes): transaction.max.timeout.ms.
MAX_TRANSACTION_TIMEOUT_MIN_DEFAULT: Final = 15
# States in which the coordinator still writes markers to the partitions it lists.
_OPEN_STATES: Final = ("Ongoing", "PrepareCommit", "PrepareAbort")


def add_transactions_command(subparsers: Any) -> None:
    transactions = subparsers.add_parser(
        "transactions",
        help="list and describe transactions; find and abort hanging ones",
    )
    actions = transactions.add_subparsers(
        dest="transactions_command", required=True, metavar="ACTION"
    )

    listing = actions.add_parser("list", help="every transactional id of every coordinator")
    add_json_option(listing)
    handler(listing, _list)

    describe = actions.add_parser("describe", help="the state of a transactional id")
    describe.add_argument("--transactional-id", required=True)
    add_json_option(describe)
    handler(describe, _describe)

    producers = actions.add_parser(
        "describe-producers", help="the producers a partition's leader knows"
    )
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    handler(producers, _describe_producers)

    hanging = actions.add_parser(
        "find-hanging", help="open transactions no coordinator will complete"
    )
    hanging.add_argument("--topic", help="only this topic's partitions")
    hanging.add_argument("--partition", type=int, help="only this partition (with --topic)")
    hanging.add_argument("--broker-id", type=int, help="only partitions with a replica here")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=MAX_TRANSACTION_TIMEOUT_MIN_DEFAULT,
        metavar="MINUTES",
        help="the longest transaction timeout in use; a transaction is a candidate once its "
        f"producer has not written for longer ({MAX_TRANSACTION_TIMEOUT_MIN_DEFAULT})",
    )
    handler(hanging, _find_hanging)

    abort = actions.add_parser(
        "abort",
        help="abort a hanging transaction (an ABORT marker at the partition's leader)",
        description="Identify the transaction by --start-offset (from find-hanging), or by "
        "--producer-id, --producer-epoch and --coordinator-epoch.",
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="the transaction's first offset")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    handler(abort, _abort)

    fence = actions.add_parser(
        "fence",
        help="abort a transactional id's open transaction and fence its holder (the coordinator)",
    )
    fence.add_argument("--transactional-id", required=True)
    handler(fence, _fence)


def _topic_partition(topic: str, partition: int) -> TopicPartition:
    from brook.client.types import TopicPartition

    if partition < 0:
        raise UsageError(f"--partition {partition} must not be negative")
    return TopicPartition(topic, partition)


def _list(admin: Admin, args: argparse.Namespace) -> int:
    listed = admin.list_transactions()
    if args.json:
        print_json(
            {
                "transactions": [
                    {
                        "transactionalId": t.transactional_id,
                        "coordinator": t.coordinator,
                        "producerId": t.producer_id,
                        "state": str(t.state),
                    }
                    for t in listed
                ]
            }
        )
        return EXIT_OK
    print_table(
        ("TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"),
        [(t.transactional_id, t.coordinator, t.producer_id, t.state) for t in listed],
    )
    return EXIT_OK


def _describe(admin: Admin, args: argparse.Namespace) -> int:
    found = admin.describe_transactions([args.transactional_id])[args.transactional_id]
    start = found.transaction_start_time_ms
    if args.json:
        print_json(
            {
                "transactionalId": found.transactional_id,
                "coordinator": found.coordinator,
                "producerId": found.producer_id,
                "producerEpoch": found.producer_epoch,
                "state": str(found.state),
                "transactionTimeoutMs": found.transaction_timeout_ms,
                "transactionStartTimeMs": start,
                "topicPartitions": [
                    {"topic": tp.topic, "partition": tp.partition} for tp in found.topic_partitions
                ],
                "groups": list(found.groups),
            }
        )
        return EXIT_OK
    print_table(
        (
            "COORDINATOR",
            "TRANSACTIONAL-ID",
            "PRODUCER-ID",
            "PRODUCER-EPOCH",
            "STATE",
            "TIMEOUT-MS",
            "START-TIME-MS",
            "DURATION-MS",
            "PARTITIONS",
        ),
        [
            (
                found.coordinator,
                found.transactional_id,
                found.producer_id,
                found.producer_epoch,
                found.state,
                found.transaction_timeout_ms,
                dash(start),
                dash(None if start is None else _now_ms() - start),
                dash(",".join(f"{tp.topic}-{tp.partition}" for tp in found.topic_partitions)),
            )
        ],
    )
    return EXIT_OK


def _describe_producers(admin: Admin, args: argparse.Namespace) -> int:
    tp = _topic_partition(args.topic, args.partition)
    print_table(
        (
            "PRODUCER-ID",
            "PRODUCER-EPOCH",
            "COORDINATOR-EPOCH",
            "LAST-SEQUENCE",
            "LAST-TIMESTAMP",
            "TXN-START-OFFSET",
        ),
        [
            (
                p.producer_id,
                p.producer_epoch,
                dash(p.coordinator_epoch),
                p.last_sequence,
                p.last_timestamp_ms,
                dash(p.current_transaction_start_offset),
            )
            for p in admin.describe_producers([tp])[tp]
        ],
    )
    return EXIT_OK


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _find_hanging(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.errors import ApiError
    from brook.errors import ErrorCode

    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    if args.max_transaction_timeout < 0:
        raise UsageError("--max-transaction-timeout must not be negative")
    timeout_ms = args.max_transaction_timeout * 60_000
    partitions = _partitions_to_search(admin, args)
    now_ms = _now_ms()
    # Open transactions whose producer has been silent longer than any transaction may last.
    candidates: list[tuple[TopicPartition, ProducerState]] = [
        (tp, producer)
        for tp, producers in admin.describe_producers(partitions).items()
        for producer in producers
        if producer.current_transaction_start_offset is not None
        and now_ms - producer.last_timestamp_ms > timeout_ms
    ]
    hanging = candidates
    if candidates:
        producer_ids = {producer.producer_id for _, producer in candidates}
        transactional_ids = {
            listing.producer_id: listing.transactional_id
            for listing in admin.list_transactions(producer_ids=producer_ids)
            if listing.producer_id in producer_ids
        }
        partitions_of: dict[str, set[TopicPartition]] = {}
        for transactional_id in set(transactional_ids.values()):
            try:
                described = admin.describe_transactions([transactional_id])[transactional_id]
            except ApiError as error:
                if error.code is not ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise
                continue
            if described.producer_id in producer_ids and described.state in _OPEN_STATES:
                partitions_of[transactional_id] = set(described.topic_partitions)
        hanging = [
            (tp, producer)
            for tp, producer in candidates
            if tp not in partitions_of.get(transactional_ids.get(producer.producer_id, ""), ())
        ]
    print_table(
        (
            "TOPIC",
            "PARTITION",
            "PRODUCER-ID",
            "PRODUCER-EPOCH",
            "COORDINATOR-EPOCH",
            "START-OFFSET",
            "LAST-TIMESTAMP",
            "DURATION(MIN)",
        ),
        [
            (
                tp.topic,
                tp.partition,
                p.producer_id,
                p.producer_epoch,
                dash(p.coordinator_epoch),
                p.current_transaction_start_offset,
                p.last_timestamp_ms,
                (now_ms - p.last_timestamp_ms) // 60_000,
            )
            for tp, p in sorted(hanging, key=lambda found: (found[0], found[1].producer_id))
        ],
    )
    return EXIT_OK


def _partitions_to_search(admin: Admin, args: argparse.Namespace) -> list[TopicPartition]:
    from brook.client.types import TopicPartition

    if args.topic is not None and args.partition is not None:
        return [_topic_partition(args.topic, args.partition)]
    names = None if args.topic is None else [args.topic]
    return [
        TopicPartition(name, p.partition)
        for name, topic in admin.describe_topics(names, include_internal=True).items()
        for p in topic.partitions
        if args.broker_id is None or args.broker_id in p.replicas
    ]


def _abort(admin: Admin, args: argparse.Namespace) -> int:
    tp = _topic_partition(args.topic, args.partition)
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None:
        if any(value is not None for value in explicit):
            raise UsageError(
                "give either --start-offset or --producer-id, --producer-epoch and "
                "--coordinator-epoch"
            )
        found = [
            p
            for p in admin.describe_producers([tp])[tp]
            if p.current_transaction_start_offset == args.start_offset
        ]
        if not found:
            from brook.client.errors import ApiError
            from brook.errors import ErrorCode

            raise ApiError(
                ErrorCode.INVALID_TXN_STATE,
                f"no open transaction starts at offset {args.start_offset} of "
                f"{tp.topic}-{tp.partition}",
            )
        producer = found[0]
        producer_id, producer_epoch = producer.producer_id, producer.producer_epoch
        coordinator_epoch = producer.coordinator_epoch or 0
    else:
        if any(value is None for value in explicit):
            raise UsageError(
                "identify the transaction with --start-offset, or with all of --producer-id, "
                "--producer-epoch and --coordinator-epoch"
            )
        producer_id, producer_epoch, coordinator_epoch = explicit
        # A producer that never had a marker shows coordinator epoch -1; as Kafka's tool,
        # 0 is used, which no coordinator epoch is below.
        coordinator_epoch = max(coordinator_epoch, 0)
    admin.abort_transaction(tp, producer_id, producer_epoch, coordinator_epoch)
    print(
        f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
        f"{tp.topic}-{tp.partition}."
    )
    return EXIT_OK


def _fence(admin: Admin, args: argparse.Namespace) -> int:
    admin.fence_transactional_id(args.transactional_id)
    print(f"fenced {args.transactional_id}: its open transaction, if any, is aborted")
    return EXIT_OK
