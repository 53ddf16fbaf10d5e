"""``brook groups ...``: consumer groups from the shell, in the spirit of Kafka's
kafka-consumer-groups.sh.

    brook groups list [--state Stable]...
    brook groups describe GROUP [--lag]
    brook groups delete GROUP...
    brook groups reset-offsets GROUP (--topic T[:P,P...]... | --all-topics) \
        (--to-earliest | --to-latest | --to-offset N | --shift-by N | --by-duration PnDTnHnMnS \
         | --to-datetime 2026-11-22T13:00:00+00:00) [--dry-run | --execute]
    brook groups delete-offsets GROUP --topic T[:P,P...]...

GROUP may also be given as ``--group GROUP``, as Kafka's tool takes it. ``describe`` shows the
group, per partition its committed offset, log end offset and lag, and its members (``--lag``:
the offsets alone). ``reset-offsets`` clamps every new offset into the partition's [log start,
log end], as Kafka's tool does.

Like ``brook topics``, every action takes ``--bootstrap-server`` (controllers' or storage
nodes' GRPC addresses) and ``--timeout-ms``; the coordinators are found through the nodes the
cluster lists. ``reset-offsets`` only prints the new offsets unless ``--execute`` is given (as
Kafka's tool), and is refused while the group has members. Exit status: 0 on success, 1 when
the cluster refused or did not answer, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

# The `brook topics` plumbing: the same options, error reporting and exit statuses.
from brook.admin_cli import (
    EXIT_FAILED,
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
    from brook.client.types import TopicPartition

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
        description="Move the committed offsets of GROUP on the partitions named by --topic "
        "(or on every partition it has a committed offset on, --all-topics), clamped into "
        "each partition's [log start, log end] as Kafka's tool does. Without --execute only "
        "the new offsets are printed.",
    )
    _group_argument(reset)
    _partitions_arguments(reset, all_topics=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offsets")
    target.add_argument("--to-latest", action="store_true", help="the log end offsets")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offsets moved by N (may be < 0)"
    )
    target.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="the first record at or after this long ago (ISO 8601 duration, e.g. PT1H30M)",
    )
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

    delete_offsets = actions.add_parser(
        "delete-offsets",
        help="delete a group's committed offsets of topics it does not consume",
        description="Delete the committed offsets of GROUP on the partitions named by --topic; "
        "a partition of a topic a member subscribes to is refused (GROUP_SUBSCRIBED_TO_TOPIC).",
    )
    _group_argument(delete_offsets)
    _partitions_arguments(delete_offsets, all_topics=False)
    handler(delete_offsets, _delete_offsets)


def _group_argument(parser: argparse.ArgumentParser) -> None:
    """GROUP, positional or as Kafka's tool takes it (--group)."""
    parser.add_argument("group", metavar="GROUP", nargs="?")
    parser.add_argument("--group", dest="group_option", metavar="GROUP", help="(or positional)")


def _group_of(args: argparse.Namespace) -> str:
    if (args.group is None) == (args.group_option is None):
        raise UsageError("name the group once: GROUP or --group GROUP")
    group: str = args.group if args.group is not None else args.group_option
    return group


def _partitions_arguments(parser: argparse.ArgumentParser, *, all_topics: bool) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,P...]",
        help="a topic's partitions, every one or those listed (repeatable)",
    )
    if all_topics:
        which.add_argument(
            "--all-topics",
            action="store_true",
            help="every partition the group has a committed offset on",
        )


def _partitions_of(args: argparse.Namespace) -> list[str | TopicPartition]:
    """The --topic values: a topic's name, or its partitions when listed (TOPIC:0,2)."""
    from brook.client.admin import check_topic_names
    from brook.client.types import TopicPartition

    named: list[str | TopicPartition] = []
    for value in args.topic:
        topic, sep, listed = value.partition(":")
        try:
            check_topic_names([topic])
            partitions = [int(p) for p in listed.split(",")] if sep else []
        except ValueError as error:
            raise UsageError(
                f"--topic {value!r}: expected TOPIC or TOPIC:P,P... ({error})"
            ) from None
        if sep and (not partitions or min(partitions) < 0):
            raise UsageError(f"--topic {value!r}: partitions must be integers >= 0")
        named += [TopicPartition(topic, p) for p in partitions] if sep else [topic]
    return named


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
    offsets_header, offsets = _offset_rows(admin, group)
    if args.lag:
        print_table(offsets_header, offsets)
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
    if offsets:
        print()
        print_table(offsets_header, offsets)
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


def _offset_rows(
    admin: Admin, group: ConsumerGroupDescription
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """Kafka's offsets table: per partition the group committed to or is assigned, its
    committed offset, log end offset, lag and the member assigned it."""
    owners = {tp: m for m in group.members for tp in m.assignment}
    rows: list[tuple[object, ...]] = []
    for tp, lag in admin.describe_consumer_group_lag(group.group_id).items():
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
    header = (
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    return header, rows


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
    group = _group_of(args)
    # Every argument checked before the cluster is asked anything (finding it comes first).
    topics = None if args.all_topics else _partitions_of(args)
    timestamp_ms = None
    if args.to_datetime is not None:
        timestamp_ms = _parse_datetime_ms(args.to_datetime)
    elif args.by_duration is not None:
        timestamp_ms = int(time.time() * 1000) - _parse_duration_ms(args.by_duration)
    to: Literal["earliest", "latest"] | None = (
        "earliest" if args.to_earliest else "latest" if args.to_latest else None
    )
    try:
        targets = admin.reset_consumer_group_offsets(
            group,
            topics,
            to=to,
            timestamp_ms=timestamp_ms,
            offset=args.to_offset,
            shift_by=args.shift_by,
            dry_run=not args.execute,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    print_table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        [(group, tp.topic, tp.partition, offset) for tp, offset in targets.items()],
    )
    if not args.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)")
    return EXIT_OK


def _delete_offsets(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.types import TopicPartition

    group = _group_of(args)
    named = _partitions_of(args)
    whole = [t for t in named if isinstance(t, str)]
    partitions = [t for t in named if isinstance(t, TopicPartition)]
    if whole:
        partitions += [
            TopicPartition(name, p.partition)
            for name, topic in admin.describe_topics(whole, include_internal=True).items()
            for p in topic.partitions
        ]
    results = admin.delete_consumer_group_offsets(group, partitions)
    print_table(
        ("TOPIC", "PARTITION", "STATUS"),
        [
            (tp.topic, tp.partition, "Successful" if error is None else f"Error: {error.code.name}")
            for tp, error in sorted(results.items())
        ],
    )
    return EXIT_OK if all(error is None for error in results.values()) else EXIT_FAILED


# ISO 8601 durations as Kafka's --by-duration takes them: PnDTnHnMnS, each part optional.
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def _parse_duration_ms(text: str) -> int:
    found = _DURATION.fullmatch(text.strip().upper())
    if found is None or not any(found.groupdict().values()) or text.strip().upper().endswith("T"):
        raise UsageError(f"--by-duration {text!r} is not an ISO 8601 duration (e.g. P1DT2H30M)")
    parts = {key: float(value or 0) for key, value in found.groupdict().items()}
    seconds = parts["d"] * 86_400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    return int(seconds * 1000)


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
