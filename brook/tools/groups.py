"""``brook groups ...``: consumer groups from the shell, in the spirit of Kafka's
kafka-consumer-groups.sh.

    brook groups list [--state Stable]...
    brook groups describe GROUP [--lag]
    brook groups delete GROUP...
    brook groups reset-offsets GROUP --topic T [--topic T2]... \
        (--to-earliest | --to-latest | --to-datetime 2026-11-22T13:00:00+00:00) \
        [--dry-run | --execute]

Like ``brook topics``, every action takes ``--bootstrap-server`` (controllers' or storage
nodes' GRPC addresses) and ``--timeout-ms``; the coordinators are found through the nodes the
cluster lists.
``reset-offsets`` only prints the new offsets unless ``--execute`` is given (as Kafka's tool),
and is refused while the group has members. Exit status: 0 on success, 1 when the cluster
refused or did not answer, 2 for bad usage.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

# The `brook topics` plumbing: the same options, error reporting and exit statuses.
from brook.admin_cli import (
    EXIT_OK,
    UsageError,
    add_json_option,
    dash,
    handler,
    print_json,
    print_table,
    report,
)

if TYPE_CHECKING:
    # Imported when a command runs, not when `brook` starts: the SDK pulls in gRPC.
    from brook.client.admin import Admin, ConsumerGroupDescription

__all__ = ["add_groups_command"]

# Kafka's display names of the group states, accepted by --state.
STATE_NAMES = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
)


def add_groups_command(subparsers: Any) -> None:
    groups = subparsers.add_parser(
        "groups", help="list, describe and delete consumer groups; show lag; reset offsets"
    )
    actions = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every group of every coordinator")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        choices=STATE_NAMES,
        help="only groups in this state (repeatable)",
    )
    add_json_option(listing)
    handler(listing, _list)

    describe = actions.add_parser(
        "describe", help="state, coordinator, assignor and members with their partitions"
    )
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument(
        "--lag",
        action="store_true",
        help="per partition: committed offset, log end offset, lag and the member assigned it",
    )
    add_json_option(describe, "the group, its members and its offsets with their lag")
    handler(describe, _describe)

    delete = actions.add_parser("delete", help="delete groups that have no members")
    delete.add_argument("group", metavar="GROUP", nargs="+")
    handler(delete, _delete)

    reset = actions.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (only while it has no members)",
        description="Move the committed offsets of GROUP on every partition of each --topic. "
        "Without --execute only the new offsets are printed.",
    )
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", action="append", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offsets")
    target.add_argument("--to-latest", action="store_true", help="the log end offsets")
    target.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="the first record at or after this time (e.g. 2026-11-22T13:00:00+00:00; "
        "local time without an offset); the log end where there is none",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    handler(reset, _reset)


def _list(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import ConsumerGroupState

    listed = admin.list_consumer_groups(states=[ConsumerGroupState(s) for s in args.state])
    if args.json:
        print_json(
            {
                "groups": [
                    {
                        "groupId": g.group_id,
                        "state": str(g.state),
                        "protocolType": g.protocol_type or None,
                    }
                    for g in listed
                ]
            }
        )
        return EXIT_OK
    print_table(
        ("GROUP", "STATE", "PROTOCOL-TYPE"),
        [(g.group_id, g.state, dash(g.protocol_type)) for g in listed],
    )
    return EXIT_OK


def _describe(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import ConsumerGroupState
    from brook.client.errors import ApiError
    from brook.errors import ErrorCode

    group = admin.describe_consumer_groups([args.group])[args.group]
    if group.state is ConsumerGroupState.DEAD:
        raise ApiError(
            ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {args.group!r} does not exist"
        )
    if args.json:
        print_json(_group_document(admin, group))
        return EXIT_OK
    if args.lag:
        owners = {tp: m for m in group.members for tp in m.assignment}
        lags = admin.describe_consumer_group_lag(args.group)
        rows = []
        for tp, lag in lags.items():
            member = owners.get(tp)
            rows.append(
                (
                    group.group_id,
                    tp.topic,
                    tp.partition,
                    dash(lag.committed_offset),
                    dash(lag.log_end_offset),
                    dash(lag.lag),
                    dash(member and member.member_id),
                    dash(member and member.host),
                    dash(member and member.client_id),
                )
            )
        print_table(
            (
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ),
            rows,
        )
        return EXIT_OK
    print_table(
        ("GROUP", "COORDINATOR", "STATE", "PROTOCOL-TYPE", "ASSIGNMENT-STRATEGY", "#MEMBERS"),
        [
            (
                group.group_id,
                group.coordinator,
                group.state,
                dash(group.protocol_type),
                dash(group.protocol_name),
                len(group.members),
            )
        ],
    )
    if group.members:
        print()
        print_table(
            ("CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"),
            [
                (
                    m.member_id,
                    dash(m.group_instance_id),
                    dash(m.host),
                    dash(m.client_id),
                    len(m.assignment),
                    dash(",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment)),
                )
                for m in group.members
            ],
        )
    return EXIT_OK


def _group_document(admin: Admin, group: ConsumerGroupDescription) -> dict[str, object]:
    """``groups describe --json``: the group, its members, and per partition its committed
    offset, log end offset, lag and the member assigned it."""
    owners = {tp: m.member_id for m in group.members for tp in m.assignment}
    lags = admin.describe_consumer_group_lag(group.group_id)
    return {
        "groupId": group.group_id,
        "coordinator": group.coordinator,
        "state": str(group.state),
        "protocolType": group.protocol_type or None,
        "assignmentStrategy": group.protocol_name or None,
        "members": [
            {
                "memberId": m.member_id,
                "groupInstanceId": m.group_instance_id,
                "clientId": m.client_id or None,
                "host": m.host or None,
                "assignment": [
                    {"topic": tp.topic, "partition": tp.partition} for tp in m.assignment
                ],
            }
            for m in group.members
        ],
        "offsets": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "currentOffset": lag.committed_offset,
                "logEndOffset": lag.log_end_offset,
                "lag": lag.lag,
                "memberId": owners.get(tp),
            }
            for tp, lag in lags.items()
        ],
    }


def _delete(admin: Admin, args: argparse.Namespace) -> int:
    return report(admin.delete_consumer_groups(args.group), "Deleted group")


def _reset(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import check_topic_names

    try:
        # Before the cluster is asked anything (finding it would come first).
        check_topic_names(args.topic)
    except ValueError as error:
        raise UsageError(str(error)) from None
    timestamp_ms = None if args.to_datetime is None else _parse_datetime_ms(args.to_datetime)
    to: Literal["earliest", "latest"] | None = (
        "earliest" if args.to_earliest else "latest" if args.to_latest else None
    )
    try:
        targets = admin.reset_consumer_group_offsets(
            args.group, args.topic, to=to, timestamp_ms=timestamp_ms, dry_run=not args.execute
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    print_table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        [(args.group, tp.topic, tp.partition, offset) for tp, offset in targets.items()],
    )
    if not args.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)")
    return EXIT_OK


def _parse_datetime_ms(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--to-datetime {text!r} is not an ISO 8601 date and time "
            "(e.g. 2026-11-22T13:00:00+00:00)"
        ) from None
    # A time without an offset is local time, as in Kafka's tool.
    milliseconds = int(moment.timestamp() * 1000)
    if milliseconds < 0:
        raise UsageError(f"--to-datetime {text!r} is before 1970")
    return milliseconds
