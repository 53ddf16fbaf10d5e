"""``brook reassign``: partition reassignment from the shell, as Kafka's
kafka-reassign-partitions.sh does it, with the same JSON files.

    brook reassign --generate --topics-to-move-json-file topics.json --broker-list 2,3,4
    brook reassign --execute --reassignment-json-file plan.json [--throttle BYTES_PER_S]
                   [--progress]
    brook reassign --verify --reassignment-json-file plan.json [--progress]
    brook reassign --cancel --reassignment-json-file plan.json
    brook reassign --list
    brook reassign --decommission NODE [--throttle BYTES_PER_S] [--progress]

- ``--generate`` prints the current assignment of the topics named in
  ``{"version":1,"topics":[{"topic":"t"}]}`` and a proposal spreading each partition's
  replicas over ``--broker-list`` (round robin, the replication factor kept). Nothing moves.
- ``--execute`` prints the current assignment (keep it: it is the plan to move back) and
  starts every move of ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":
  [..]}]}``. With ``--throttle`` it first sets Kafka's throttle: the nodes involved get
  ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``, each
  moving topic ``leader.replication.throttled.replicas`` (its current replicas) and
  ``follower.replication.throttled.replicas`` (the nodes being added).
- ``--verify`` tells, per partition, whether its move is complete, and once every one is,
  removes the throttles (the tool's own cleanup, as in Kafka).
- ``--cancel`` stops the moves of the plan's partitions: each goes back to its replicas
  from before the move.
- ``--decommission NODE`` drains a storage node: every replica it holds (internal topics
  included) moves to the live storage node holding the fewest replicas that does not hold
  one of that partition yet, in the same place of the replica list. It prints the rollback
  plan and starts the moves like ``--execute``; once they are done the node holds nothing,
  and can be stopped and removed (``brook cluster unregister --node NODE``).
- ``--progress`` (with ``--execute`` or ``--verify``) then shows, about once a second until
  every move is done (or ``--timeout-ms``), each moving partition's copies: bytes caught up
  on each node being added against the leader's log, the rate and the time left.

Exit status: 0 on success (``--verify``: every move complete), 1 when the cluster refused,
did not answer, or a move is still in progress, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from brook.admin_cli import EXIT_OK, UsageError, handler
from brook.topic_config import throttled_replica

if TYPE_CHECKING:
    from brook.client.admin import Admin, ConfigEntry
    from brook.client.types import TopicPartition

__all__ = ["add_reassign_command", "decommission", "drained_assignment", "proposed_assignment"]

EXIT_FAILED: Final = 1
PLAN_VERSION: Final = 1
PROGRESS_INTERVAL_S: Final = 1.0
LEADER_THROTTLED_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS: Final = "follower.replication.throttled.replicas"
STORAGE_NODE_ROLE: Final = "storage_node"  # NodeDescription.role
THROTTLE_RATES: Final = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def add_reassign_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "reassign",
        help="move partition replicas between storage nodes (kafka-reassign-partitions)",
        description="Generate, execute, verify, cancel or list partition reassignments, with "
        "Kafka's JSON files.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("generate", "propose an assignment of --topics-to-move-json-file over --broker-list"),
        ("execute", "start the moves of --reassignment-json-file"),
        ("verify", "report whether each move is complete; remove throttles when all are"),
        ("cancel", "stop the moves of --reassignment-json-file, back to where they started"),
        ("list", "the partitions being moved now"),
    ):
        mode.add_argument(f"--{name}", action="store_true", help=text)
    mode.add_argument(
        "--decommission",
        type=int,
        metavar="NODE",
        help="move every replica off this storage node (then it can be stopped and removed)",
    )
    parser.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE")
    parser.add_argument("--broker-list", metavar="ID,ID,...")
    parser.add_argument("--reassignment-json-file", type=Path, metavar="FILE")
    parser.add_argument(
        "--throttle",
        type=int,
        metavar="BYTES_PER_S",
        help="with --execute: bound each involved node's replication of the moving "
        "partitions to this many bytes per second",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="with --execute or --verify: show the copies' progress until every move is done",
    )
    handler(parser, _run)


@dataclass(frozen=True)
class _Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path} is not JSON: {error}") from None


def _plan(path: Path | None, *, replicas_required: bool = True) -> list[_Move]:
    if path is None:
        raise UsageError("this mode needs --reassignment-json-file")
    document = _load_json(path)
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f'{path} has no "partitions" list')
    moves = []
    for entry in entries:
        try:
            topic, partition = entry["topic"], entry["partition"]
            replicas = entry.get("replicas", []) if not replicas_required else entry["replicas"]
        except (KeyError, TypeError, AttributeError):
            raise UsageError(f"{path}: {entry!r} needs topic, partition and replicas") from None
        if not (
            isinstance(topic, str)
            and isinstance(partition, int)
            and isinstance(replicas, list)
            and all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)
        ):
            raise UsageError(f"{path}: {entry!r} has a field of the wrong type")
        if replicas_required and (not replicas or len(set(replicas)) != len(replicas)):
            raise UsageError(f"{path}: {topic}-{partition} needs distinct replicas")
        moves.append(_Move(topic, partition, tuple(replicas)))
    seen = [(move.topic, move.partition) for move in moves]
    if len(set(seen)) != len(seen):
        raise UsageError(f"{path} names a partition twice")
    return moves


def _document(assignment: Mapping[tuple[str, int], Sequence[int]]) -> str:
    return json.dumps(
        {
            "version": PLAN_VERSION,
            "partitions": [
                {
                    "topic": topic,
                    "partition": partition,
                    "replicas": list(replicas),
                    "log_dirs": ["any"] * len(replicas),
                }
                for (topic, partition), replicas in sorted(assignment.items())
            ],
        }
    )


def proposed_assignment(
    current: Mapping[tuple[str, int], Sequence[int]], nodes: Sequence[int]
) -> dict[tuple[str, int], list[int]]:
    """Each partition's replicas spread over ``nodes`` round robin, its replication factor
    kept: partition i of a topic starts at node i (so leaders spread too)."""
    if not nodes:
        raise UsageError("--broker-list names no node")
    proposal = {}
    for (topic, partition), replicas in sorted(current.items()):
        factor = len(replicas)
        if factor > len(nodes):
            raise UsageError(
                f"{topic}-{partition} has {factor} replicas, more than the {len(nodes)} nodes "
                "of --broker-list"
            )
        proposal[(topic, partition)] = [
            nodes[(partition + offset) % len(nodes)] for offset in range(factor)
        ]
    return proposal


def _current(admin: Admin, topics: Sequence[str]) -> dict[tuple[str, int], tuple[int, ...]]:
    described = admin.describe_topics(list(topics))
    return {
        (name, p.partition): p.replicas
        for name, topic in described.items()
        for p in topic.partitions
    }


def _run(admin: Admin, args: argparse.Namespace) -> int:
    executes = args.execute or args.decommission is not None
    if args.throttle is not None and (not executes or args.throttle <= 0):
        raise UsageError("--throttle takes a positive rate and goes with --execute")
    if args.progress and not (executes or args.verify):
        raise UsageError("--progress goes with --execute, --decommission or --verify")
    if args.generate:
        return _generate(admin, args)
    if args.list:
        return _list(admin)
    if args.cancel:
        return _cancel(admin, _plan(args.reassignment_json_file, replicas_required=False))
    if args.decommission is not None:
        moves = _drain(admin, args.decommission)
        if not moves:
            pending = _moving_off(admin, args.decommission)
            if not pending:
                print(f"Node {args.decommission} holds no replica.")
                return EXIT_OK
            print(
                f"Node {args.decommission}'s last {len(pending)} replicas are being moved off "
                "by reassignments in progress (brook reassign --list)."
            )
            if not args.progress:
                return EXIT_FAILED
            _show_progress(admin, pending, args.timeout_ms)
            return EXIT_OK if not _holds(admin, args.decommission) else EXIT_FAILED
    else:
        moves = _plan(args.reassignment_json_file)
    if executes:
        status = _execute(admin, moves, args.throttle)
        if status != EXIT_OK or not args.progress:
            return status
    if args.progress:
        _show_progress(admin, moves, args.timeout_ms)
    return _verify(admin, moves)


def drained_assignment(
    current: Mapping[tuple[str, int], Sequence[int]], node: int, live: Sequence[int]
) -> dict[tuple[str, int], list[int]]:
    """The partitions ``node`` holds a replica of, each with that replica replaced by the
    ``live`` node holding the fewest replicas (the lowest id on a tie) among those not holding
    one of the partition yet; the replica's place in the list is kept."""
    load = {n: 0 for n in live if n != node}
    for replicas in current.values():
        for replica in replicas:
            if replica in load:
                load[replica] += 1
    drained = {}
    for (topic, partition), replicas in sorted(current.items()):
        if node not in replicas:
            continue
        candidates = [n for n in load if n not in replicas]
        if not candidates:
            raise UsageError(
                f"no live storage node can take {topic}-{partition}'s replica: it has "
                f"{len(replicas)} replicas and the cluster {len(load) + 1} live nodes"
            )
        chosen = min(candidates, key=lambda n: (load[n], n))
        load[chosen] += 1
        drained[(topic, partition)] = [chosen if r == node else r for r in replicas]
    return drained


def _targets(admin: Admin) -> dict[tuple[str, int], list[int]]:
    """Every partition's replicas, a moving one's as its move will leave them (without the
    replicas it is removing)."""
    removing = {
        (tp.topic, tp.partition): set(state.removing_replicas)
        for tp, state in admin.list_partition_reassignments().items()
    }
    return {
        key: [r for r in replicas if r not in removing.get(key, set())]
        for key, replicas in _current(admin, admin.list_topics(include_internal=True)).items()
    }


def _moving_off(admin: Admin, node: int) -> list[_Move]:
    """The reassignments in progress that remove ``node`` (from a drain that stopped
    waiting, or an operator's own plan), each as its target."""
    return [
        _Move(
            tp.topic,
            tp.partition,
            tuple(r for r in state.replicas if r not in state.removing_replicas),
        )
        for tp, state in admin.list_partition_reassignments().items()
        if node in state.removing_replicas
    ]


def _holds(admin: Admin, node: int) -> list[str]:
    """The partitions that list ``node`` among their replicas (moving ones included)."""
    return [
        f"{topic}-{partition}"
        for (topic, partition), replicas in _current(
            admin, admin.list_topics(include_internal=True)
        ).items()
        if node in replicas
    ]


def _drain(admin: Admin, node: int) -> list[_Move]:
    cluster = admin.describe_cluster()
    storage = [n for n in cluster.nodes if n.role == STORAGE_NODE_ROLE]
    if node not in {n.node_id for n in storage}:
        raise UsageError(f"node {node} is not a registered storage node")
    live = [n.node_id for n in storage if not n.fenced and not n.in_controlled_shutdown]
    current = _targets(admin)
    return [
        _Move(topic, partition, tuple(replicas))
        for (topic, partition), replicas in drained_assignment(current, node, live).items()
    ]


def decommission(
    bootstrap: str,
    node: int,
    *,
    stop: Callable[[], None],
    throttle: int | None = None,
    timeout_ms: int,
) -> None:
    """Takes storage node ``node`` out of the cluster: drains it (``--decommission``), waits
    until every move is complete, calls ``stop`` (which must stop the node's process), waits
    until the controllers have fenced it and unregisters it. ClientTimeoutError when a step
    does not finish within ``timeout_ms`` in all; ApiError when the cluster refuses one."""
    from brook.client.admin import Admin
    from brook.client.errors import BrookClientError, ClientTimeoutError
    from brook.client.types import TopicPartition

    deadline = time.monotonic() + timeout_ms / 1000

    def wait(condition: Callable[[], bool], what: str) -> None:
        while not condition():
            if time.monotonic() > deadline:
                raise ClientTimeoutError(f"{what} did not happen within {timeout_ms} ms")
            time.sleep(PROGRESS_INTERVAL_S / 4)

    with Admin(bootstrap) as admin:
        if node not in {n.node_id for n in admin.describe_cluster().nodes}:
            stop()  # unregistered already (a removal that stopped after that step)
            return
        moves = _drain(admin, node)
        if moves:
            if throttle is not None:
                current = _current(admin, sorted({move.topic for move in moves}))
                _set_throttles(admin, moves, current, throttle)
            wanted = {TopicPartition(m.topic, m.partition): list(m.replicas) for m in moves}
            _raise_first(admin.alter_partition_reassignments(wanted))
        # Moves of an earlier run that stopped waiting (or an operator's) count too: the node
        # is drained when no partition lists it any more, moving ones included.
        moves = [*moves, *_moving_off(admin, node)]
        wait(lambda: not _holds(admin, node), f"moving every replica off node {node}")
        if throttle is not None and moves:
            # Only once the moves are done: a removal that gives up leaves them throttled.
            _clear_throttles(admin, moves)
        held = _holds(admin, node)
        if held:
            # A replica placed on the node meanwhile: it must hold nothing before it stops,
            # or partitions only it has in sync would go offline.
            raise BrookClientError(
                f"node {node} still holds {len(held)} replicas ({', '.join(held[:5])}); "
                "nothing was stopped"
            )
        stop()
        wait(
            lambda: all(n.fenced for n in admin.describe_cluster().nodes if n.node_id == node),
            f"the controllers fencing node {node}",
        )
        admin.unregister_broker(node)


def _generate(admin: Admin, args: argparse.Namespace) -> int:
    if args.topics_to_move_json_file is None or not args.broker_list:
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    document = _load_json(args.topics_to_move_json_file)
    entries = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f'{args.topics_to_move_json_file} has no "topics" list')
    try:
        topics = [entry["topic"] for entry in entries]
        nodes = [int(node) for node in args.broker_list.split(",") if node.strip()]
    except (KeyError, TypeError, ValueError):
        raise UsageError('topics are {"topic": NAME}; --broker-list is node ids') from None
    current = _current(admin, topics)
    print("Current partition replica assignment")
    print(_document(current))
    print()
    print("Proposed partition reassignment configuration")
    print(_document(proposed_assignment(current, nodes)))
    return EXIT_OK


def _execute(admin: Admin, moves: Sequence[_Move], throttle: int | None) -> int:
    from brook.client.types import TopicPartition

    current = _current(admin, sorted({move.topic for move in moves}))
    missing = [m for m in moves if (m.topic, m.partition) not in current]
    if missing:
        print(f"Error: no partition {missing[0].topic}-{missing[0].partition}", file=sys.stderr)
        return EXIT_FAILED
    print("Current partition replica assignment")
    print()
    print(_document({(m.topic, m.partition): current[(m.topic, m.partition)] for m in moves}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        _set_throttles(admin, moves, current, throttle)
        print(f"Throttle limit set to {throttle} B/s on every node the moves involve.")
    results = admin.alter_partition_reassignments(
        {TopicPartition(m.topic, m.partition): list(m.replicas) for m in moves}
    )
    return _report(results, "Successfully started partition reassignment for")


def _set_throttles(
    admin: Admin,
    moves: Sequence[_Move],
    current: Mapping[tuple[str, int], Sequence[int]],
    rate: int,
) -> None:
    """Kafka's throttle for ``moves``: both rates on every node they involve, and each
    topic's throttled-replicas lists extended (not replaced: another move's entries stay) with
    the current replicas (leader side) and the nodes being added (follower side)."""
    from brook.client.admin import AlterConfigOp, ConfigResource

    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    nodes: set[int] = set()
    for move in moves:
        before = current[(move.topic, move.partition)]
        nodes.update(before, move.replicas)
        leaders.setdefault(move.topic, []).extend(f"{move.partition}:{n}" for n in before)
        followers.setdefault(move.topic, []).extend(
            f"{move.partition}:{n}" for n in move.replicas if n not in before
        )
    changes: dict[ConfigResource, list[tuple[str, AlterConfigOp, str | None]]] = {
        ConfigResource.node(node): [(name, AlterConfigOp.SET, str(rate)) for name in THROTTLE_RATES]
        for node in sorted(nodes)
    }
    topics = [ConfigResource.topic(topic) for topic in sorted(leaders)]
    described = admin.describe_configs(topics)
    for resource in topics:
        topic_changes: list[tuple[str, AlterConfigOp, str | None]] = []
        for name, entries in (
            (LEADER_THROTTLED_REPLICAS, leaders[resource.name]),
            (FOLLOWER_THROTTLED_REPLICAS, followers[resource.name]),
        ):
            if entries and _list_of(described[resource], name) != ["*"]:
                # "*" throttles every replica already (and takes no other entry).
                topic_changes.append((name, AlterConfigOp.APPEND, ",".join(entries)))
        if topic_changes:
            changes[resource] = topic_changes
    _raise_first(admin.alter_configs(changes))


def _list_of(entries: Mapping[str, ConfigEntry], name: str) -> list[str]:
    """A list config's items as set on the resource itself (none when it is not)."""
    entry = entries.get(name)
    if entry is None or entry.source != "DYNAMIC_TOPIC_CONFIG" or not entry.value:
        return []
    return [item.strip() for item in entry.value.split(",") if item.strip()]


def _entry_partition(item: str) -> int | None:
    """The partition a throttled-replicas entry names; None for "*" or anything malformed
    (entries the tool never writes, left as they are)."""
    pair = throttled_replica(item)
    return None if pair is None else pair[0]


def _clear_throttles(admin: Admin, moves: Sequence[_Move]) -> None:
    """Undoes ``--execute --throttle`` for ``moves``: their partitions' entries leave the
    topics' throttled-replicas lists (others' entries, and a "*", stay), and once no topic
    lists a throttled replica any more, the nodes' own throttle rates are removed."""
    from brook.client.admin import AlterConfigOp, ConfigResource

    planned: dict[str, set[int]] = {}
    for move in moves:
        planned.setdefault(move.topic, set()).add(move.partition)
    topics = [ConfigResource.topic(t) for t in admin.list_topics(include_internal=True)]
    described = admin.describe_configs(topics)
    changes: dict[ConfigResource, list[tuple[str, AlterConfigOp, str | None]]] = {}
    still_throttled = False
    for resource in topics:
        for name in (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS):
            items = _list_of(described[resource], name)
            ours = planned.get(resource.name, set())
            # "*" and malformed entries are not the tool's: they stay.
            kept = [
                i for i in items if (pair := throttled_replica(i)) is None or pair[0] not in ours
            ]
            still_throttled = still_throttled or bool(kept)
            if kept != items:
                change = (
                    (name, AlterConfigOp.SET, ",".join(kept))
                    if kept
                    else (
                        name,
                        AlterConfigOp.DELETE,
                        None,
                    )
                )
                changes.setdefault(resource, []).append(change)
    if not still_throttled:
        cluster = admin.describe_cluster()
        nodes = [ConfigResource.node(n.node_id) for n in cluster.nodes]
        rates = admin.describe_configs(
            [
                node
                for node, n in zip(nodes, cluster.nodes, strict=True)
                if n.role == STORAGE_NODE_ROLE
            ]
        )
        for resource, entries in rates.items():
            own = [
                name
                for name in THROTTLE_RATES
                if name in entries and entries[name].source == "DYNAMIC_BROKER_CONFIG"
            ]
            if own:
                changes[resource] = [(name, AlterConfigOp.DELETE, None) for name in own]
    if changes:
        _raise_first(admin.alter_configs(changes))
        print("Throttles removed.")


def _raise_first(results: Mapping[Any, Any]) -> None:
    for error in results.values():
        if error is not None:
            raise error


def _report(results: Mapping[TopicPartition, Any], done: str) -> int:
    status = EXIT_OK
    for tp, error in sorted(results.items()):
        if error is None:
            print(f"{done} {tp.topic}-{tp.partition}")
        else:
            print(f"Error on {tp.topic}-{tp.partition}: {error.code.name}: {error.message}")
            status = EXIT_FAILED
    return status


def _verify(admin: Admin, moves: Sequence[_Move]) -> int:
    from brook.client.types import TopicPartition

    moving = admin.list_partition_reassignments(
        [TopicPartition(m.topic, m.partition) for m in moves]
    )
    current = _current(admin, sorted({move.topic for move in moves}))
    status = EXIT_OK
    print("Status of partition reassignment:")
    for move in moves:
        name = f"{move.topic}-{move.partition}"
        if TopicPartition(move.topic, move.partition) in moving:
            print(f"Reassignment of partition {name} is still in progress.")
            status = EXIT_FAILED
        elif tuple(current.get((move.topic, move.partition), ())) == move.replicas:
            print(f"Reassignment of partition {name} is completed.")
        else:
            have = current.get((move.topic, move.partition))
            print(
                f"There is no active reassignment of partition {name}, but its replicas "
                f"{list(have) if have is not None else 'are unknown'} are not the plan's "
                f"{list(move.replicas)}."
            )
            status = EXIT_FAILED
    if status == EXIT_OK:
        _clear_throttles(admin, moves)
    return status


def _cancel(admin: Admin, moves: Sequence[_Move]) -> int:
    from brook.client.types import TopicPartition

    results = admin.alter_partition_reassignments(
        {TopicPartition(m.topic, m.partition): None for m in moves}
    )
    return _report(results, "Successfully cancelled the reassignment of")


def _list(admin: Admin) -> int:
    moving = admin.list_partition_reassignments()
    if not moving:
        print("No partition reassignments found.")
    for tp, state in sorted(moving.items()):
        print(
            f"{tp.topic}-{tp.partition}: replicas: {_ids(state.replicas)}, adding: "
            f"{_ids(state.adding_replicas)}, removing: {_ids(state.removing_replicas)}"
        )
    return EXIT_OK


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


# --------------------------------------------------------------------------- progress


@dataclass
class _Copy:
    """One node catching up on one partition."""

    caught_up_bytes: int
    leader_bytes: int
    first_s: float
    first_bytes: int


def _log_sizes(admin: Admin) -> dict[tuple[int, str, int], int]:
    """(node, topic, partition) -> log bytes, of every storage node that answers."""
    import grpc

    from brook.rpc.channels import sync_channel
    from brook.v1 import storage_pb2, storage_pb2_grpc

    sizes = {}
    for node in admin.describe_cluster().nodes:
        address = node.endpoints.get("GRPC")
        if node.role != STORAGE_NODE_ROLE or address is None or node.fenced:
            continue
        try:
            with sync_channel(address) as channel:
                stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
                answer = stub.DescribeLogDirs(storage_pb2.DescribeLogDirsRequest(), timeout=5)
        except grpc.RpcError:
            continue  # shown as unknown this round
        for log_dir in answer.log_dirs:
            for p in log_dir.partitions:
                sizes[(node.node_id, p.topic, p.partition)] = p.size_bytes
    return sizes


def _show_progress(admin: Admin, moves: Sequence[_Move], timeout_ms: int) -> None:
    from brook.client.types import TopicPartition

    wanted = [TopicPartition(m.topic, m.partition) for m in moves]
    copies: dict[tuple[TopicPartition, int], _Copy] = {}
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        moving = admin.list_partition_reassignments(wanted)
        if not moving:
            print("Every move is complete.")
            return
        leaders = {
            TopicPartition(name, p.partition): p.leader
            for name, topic in admin.describe_topics(sorted({tp.topic for tp in moving})).items()
            for p in topic.partitions
        }
        sizes = _log_sizes(admin)
        now = time.monotonic()
        for tp, state in sorted(moving.items()):
            leader = leaders.get(tp)
            leader_bytes = sizes.get((leader, tp.topic, tp.partition)) if leader else None
            for node in state.adding_replicas:
                have = sizes.get((node, tp.topic, tp.partition), 0)
                copy = copies.setdefault((tp, node), _Copy(have, leader_bytes or 0, now, have))
                copy.caught_up_bytes = have
                copy.leader_bytes = leader_bytes or copy.leader_bytes
                print(_progress_line(tp, node, copy, now))
        sys.stdout.flush()
        if now >= deadline:
            print("Stopped watching: --timeout-ms passed with moves still in progress.")
            return
        time.sleep(min(PROGRESS_INTERVAL_S, max(0.0, deadline - now)))


def _progress_line(tp: TopicPartition, node: int, copy: _Copy, now: float) -> str:
    elapsed = now - copy.first_s
    rate = (copy.caught_up_bytes - copy.first_bytes) / elapsed if elapsed > 0 else 0.0
    left = max(0, copy.leader_bytes - copy.caught_up_bytes)
    share = copy.caught_up_bytes / copy.leader_bytes * 100 if copy.leader_bytes else 0.0
    eta = f"{left / rate:.0f} s" if rate > 0 else "-"
    return (
        f"{tp.topic}-{tp.partition} -> node {node}: {_size(copy.caught_up_bytes)} of "
        f"{_size(copy.leader_bytes)} ({share:.0f}%), {_size(rate)}/s, ETA {eta}"
    )


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{count:.0f} B"
        count /= 1024
    return f"{count:.1f} GiB"
