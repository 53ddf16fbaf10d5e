"""``brook topics ...`` and ``brook cluster describe``: cluster administration from the shell, in
the spirit of Kafka's kafka-topics.sh, kafka-configs.sh and kafka-leader-election.sh.

    brook topics list
    brook topics create --topic events --partitions 6 --replication-factor 3 \
        --config retention.ms=-1
    brook topics describe [--topic events]
    brook topics alter --topic events --partitions 12
    brook topics configs --topic events [--add-config k=v,...] [--delete-config k,...]
    brook configs --entity-type brokers (--entity-name 2 | --entity-default)
        [--add-config follower.replication.throttled.rate=1048576] [--delete-config k,...]
    brook configs --entity-type users --entity-name alice [--entity-type clients ...]
        [--add-config producer_byte_rate=1048576] [--delete-config k,...]
    brook topics elect-leaders [--topic events [--partition 0]] [--unclean]
    brook topics delete --topic events
    brook cluster describe
    brook cluster unregister --node 4

Every command takes ``--bootstrap-server`` (controllers' or storage nodes' GRPC addresses; see
brook.tools.options) and ``--timeout-ms``. Exit status:
0 on success, 1 when the cluster refused or did not answer (the error is printed with its
Kafka error code), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from brook.tools.options import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    TIMEOUT_MS_DEFAULT,
    ToolError,
    UsageError,
    add_bootstrap_argument,
    checked_cluster_options,
    find_cluster,
)

if TYPE_CHECKING:
    # Imported when a command runs, not when `brook` starts: the SDK pulls in gRPC.
    from brook.client.admin import Admin, ConfigResource, NodeDescription
    from brook.client.errors import ApiError

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "UsageError",
    "add_admin_commands",
    "add_json_option",
    "dash",
    "handler",
    "print_json",
    "print_table",
    "report",
]


def _common(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=TIMEOUT_MS_DEFAULT,
        metavar="MS",
        help=f"how long to wait for the cluster ({TIMEOUT_MS_DEFAULT})",
    )


def add_admin_commands(subparsers: Any) -> None:
    """Registers ``topics`` and adds ``describe`` to the ``cluster`` command (registered by
    brook.launcher first)."""
    topics = subparsers.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="the names of the topics")
    listing.add_argument("--include-internal", action="store_true")
    add_json_option(listing)
    handler(listing, _list)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1, help="(num.partitions)")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="(default.replication.factor)"
    )
    create.add_argument(
        "--replica-assignment",
        metavar="A:B,C:D,...",
        help="explicit placement: per partition, colon-separated node ids, the preferred "
        "leader first",
    )
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--validate-only", action="store_true")
    handler(create, _create)

    describe = actions.add_parser("describe", help="partitions, leaders, replicas and ISRs")
    describe.add_argument("--topic", action="append", default=[], help="(all topics)")
    describe.add_argument("--include-internal", action="store_true")
    add_json_option(describe)
    handler(describe, _describe)

    alter = actions.add_parser("alter", help="raise a topic's partition count")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True)
    handler(alter, _alter)

    configs = actions.add_parser("configs", help="describe or change a topic's configs")
    configs.add_argument("--topic", required=True)
    configs.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    configs.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    add_json_option(configs, "the configs (when describing: no --add-config/--delete-config)")
    handler(configs, _configs)

    entity = subparsers.add_parser(
        "configs",
        help="describe or change a topic's or a storage node's dynamic configs (kafka-configs)",
        description="Kafka's kafka-configs: without --add-config/--delete-config, describe; "
        "brokers are storage nodes by node id, or every node's default (--entity-default); "
        "users and clients (client ids), alone or together, have client quotas "
        "(producer_byte_rate, consumer_byte_rate, request_percentage). Each --entity-name or "
        "--entity-default belongs to the --entity-type before it.",
    )
    entity.add_argument(
        "--entity-type",
        choices=("topics", "brokers", *_QUOTA_ENTITY_TYPES),
        required=True,
        action=_EntityPart,
    )
    entity.add_argument("--entity-name", metavar="NAME", action=_EntityPart)
    entity.add_argument("--entity-default", nargs=0, action=_EntityPart)
    entity.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    entity.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    add_json_option(entity, "the configs (when describing: no --add-config/--delete-config)")
    handler(entity, _entity_configs)

    elect = actions.add_parser("elect-leaders", help="preferred (or unclean) leader election")
    elect.add_argument("--topic")
    elect.add_argument("--partition", type=int)
    elect.add_argument("--unclean", action="store_true")
    handler(elect, _elect)

    delete = actions.add_parser("delete", help="delete a topic (the nodes remove its data)")
    delete.add_argument("--topic", required=True, action="append")
    handler(delete, _delete)

    cluster_actions = _subcommands_of(subparsers.choices["cluster"])
    cluster_describe = cluster_actions.add_parser(
        "describe", help="the cluster id, the active controller and every registered node"
    )
    cluster_describe.add_argument(
        "--digests",
        action="store_true",
        help="also ask each controller for its metadata offset and a digest of its metadata "
        "(equal offsets with different digests would mean the replicas diverged)",
    )
    add_json_option(cluster_describe)
    handler(cluster_describe, _describe_cluster)
    unregister = cluster_actions.add_parser(
        "unregister",
        help="remove a stopped storage node that holds no replica (kafka-cluster unregister)",
    )
    unregister.add_argument("--node", type=int, required=True, metavar="ID")
    handler(unregister, _unregister)


def _subcommands_of(parser: argparse.ArgumentParser) -> Any:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise RuntimeError(f"{parser.prog} has no subcommands to extend")


def handler(
    parser: argparse.ArgumentParser, run: Callable[[Admin, argparse.Namespace], int]
) -> None:
    _common(parser)
    parser.set_defaults(func=lambda args: _run(run, args))


class _AdminOnFirstUse:
    """Stands for a command's Admin client until the command uses it: finding out what the
    bootstrap servers are (find_cluster) talks to the cluster, and a command's own checks of
    its arguments must not wait for that."""

    def __init__(self, servers: Sequence[str], timeout_ms: int) -> None:
        self._servers = servers
        self._timeout_ms = timeout_ms
        self._admin: Admin | None = None

    def __getattr__(self, name: str) -> Any:
        if self._admin is None:
            from brook.client.admin import Admin

            addresses, role = find_cluster(self._servers, self._timeout_ms).admin_bootstrap()
            self._admin = Admin(
                addresses, default_api_timeout_ms=self._timeout_ms, bootstrap_role=role
            )
        return getattr(self._admin, name)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()


def _run(run: Callable[[Admin, argparse.Namespace], int], args: argparse.Namespace) -> int:
    from brook.client.errors import ApiError, BrookClientError
    from brook.config import ConfigError

    try:
        servers = checked_cluster_options(args)
    except UsageError as error:
        print(f"brook: {error}", file=sys.stderr)
        return EXIT_USAGE
    admin = _AdminOnFirstUse(servers, args.timeout_ms)
    try:
        return run(cast("Admin", admin), args)
    except (UsageError, ConfigError) as error:
        print(f"brook: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as error:
        print(f"Error: {error.code.name}: {error.message}", file=sys.stderr)
        return EXIT_FAILED
    except (BrookClientError, ToolError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        admin.close()


# kafka-configs' entity types of client quotas -> the quota entity types, and how it names them.
_QUOTA_ENTITY_TYPES: Final = {"users": "user", "clients": "client-id"}
_DESCRIBED_AS: Final = {"user": "user-principal", "client-id": "client-id"}
# An --entity-type with what follows it: (type, name or None for the default, whether a name or
# the default was given).
_EntityArgument = tuple[str, str | None, bool]


def add_json_option(parser: argparse.ArgumentParser, what: str = "the same as the table") -> None:
    """``--json``: a command prints one JSON document instead of its table (``print_json``)."""
    parser.add_argument(
        "--json", action="store_true", help=f"print {what} as one JSON document on stdout"
    )


def print_json(document: Mapping[str, Any]) -> None:
    """One JSON document on one line of stdout. Its keys are part of the command's interface:
    camelCase, present whether or not they have a value (null then)."""
    print(json.dumps(document))


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Columns padded to their widest cell, as Kafka's tool prints them."""
    cells = [list(header), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(" ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def dash(value: object | None) -> object:
    """A cell for a value that may be missing: "-" for None or empty."""
    return "-" if value is None or value == "" else value


def _key_values(items: Sequence[str]) -> dict[str, str]:
    parsed = {}
    for item in (part for entry in items for part in entry.split(",") if part):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{item!r} is not KEY=VALUE")
        parsed[key.strip()] = value.strip()
    return parsed


def report(results: dict[Any, ApiError | None], done: str) -> int:
    status = EXIT_OK
    for name, error in results.items():
        if error is None:
            print(f"{done} {name}.")
        else:
            print(f"Error on {name}: {error.code.name}: {error.message}", file=sys.stderr)
            status = EXIT_FAILED
    return status


def _list(admin: Admin, args: argparse.Namespace) -> int:
    names = admin.list_topics(include_internal=args.include_internal)
    if args.json:
        print_json({"topics": names})
        return EXIT_OK
    for name in names:
        print(name)
    return EXIT_OK


def _create(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import NewTopic

    assignment = None
    if args.replica_assignment:
        try:
            assignment = {
                index: [int(node) for node in entry.split(":")]
                for index, entry in enumerate(args.replica_assignment.split(","))
            }
        except ValueError:
            raise UsageError("--replica-assignment takes node ids, e.g. 1:2,2:3") from None
    topic = NewTopic(
        args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        replica_assignment=assignment,
        configs=_key_values(args.config),
    )
    results = admin.create_topics([topic], validate_only=args.validate_only)
    return report(results, "Validated topic" if args.validate_only else "Created topic")


def _describe(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import ConfigResource

    topics = admin.describe_topics(args.topic or None, include_internal=args.include_internal)
    configs = admin.describe_configs([ConfigResource.topic(name) for name in topics])
    described = []
    for name, topic in topics.items():
        overrides = {
            entry.name: entry.value
            for entry in configs[ConfigResource.topic(name)].values()
            if entry.source == "DYNAMIC_TOPIC_CONFIG"
        }
        factor = len(topic.partitions[0].replicas) if topic.partitions else 0
        described.append((name, topic, overrides, factor))
    if args.json:
        print_json(
            {
                "topics": [
                    {
                        "name": name,
                        "topicId": str(topic.topic_id),
                        "internal": topic.internal,
                        "partitionCount": len(topic.partitions),
                        "replicationFactor": factor,
                        "configs": overrides,
                        "partitions": [
                            {
                                "partition": p.partition,
                                "leader": p.leader,
                                "leaderEpoch": p.leader_epoch,
                                "replicas": list(p.replicas),
                                "isr": list(p.isr),
                                "offlineReplicas": list(p.offline_replicas),
                            }
                            for p in topic.partitions
                        ],
                    }
                    for name, topic, overrides, factor in described
                ]
            }
        )
        return EXIT_OK
    for name, topic, overrides, factor in described:
        listed = ",".join(f"{key}={value}" for key, value in overrides.items())
        print(
            f"Topic: {name}\tTopicId: {topic.topic_id}\tPartitionCount: {len(topic.partitions)}"
            f"\tReplicationFactor: {factor}\tConfigs: {listed}"
        )
        for p in topic.partitions:
            leader = "none" if p.leader is None else p.leader
            print(
                f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {leader}"
                f"\tLeaderEpoch: {p.leader_epoch}\tReplicas: {_ids(p.replicas)}"
                f"\tIsr: {_ids(p.isr)}\tOffline: {_ids(p.offline_replicas)}"
            )
    return EXIT_OK


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def _alter(admin: Admin, args: argparse.Namespace) -> int:
    return report(admin.create_partitions({args.topic: args.partitions}), "Altered topic")


def _configs(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.admin import ConfigResource

    return _alter_or_describe_configs(admin, args, ConfigResource.topic(args.topic))


class _EntityPart(argparse.Action):
    """Keeps --entity-type, --entity-name and --entity-default in the order given (in
    ``entity_parts``): kafka-configs pairs each name or default with the type before it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        parts = [*getattr(namespace, "entity_parts", []), (self.dest, values)]
        namespace.entity_parts = parts


def _entity(args: argparse.Namespace) -> list[_EntityArgument]:
    """(type, name or None for the default, whether either was given) per --entity-type."""
    entity: list[_EntityArgument] = []
    for option, value in args.entity_parts:
        if option == "entity_type":
            entity.append((value, None, False))
        elif not entity or entity[-1][2]:
            raise UsageError("--entity-name and --entity-default each follow an --entity-type")
        else:
            entity[-1] = (entity[-1][0], value if option == "entity_name" else None, True)
    return entity


def _entity_configs(admin: Admin, args: argparse.Namespace) -> int:
    """``brook configs``: kafka-configs' --entity-type topics|brokers|users|clients."""
    from brook.client.admin import ConfigResource

    entity = _entity(args)
    types = [entity_type for entity_type, _, _ in entity]
    if set(types) <= set(_QUOTA_ENTITY_TYPES) and len(set(types)) == len(types):
        deleted = [
            name.strip() for entry in args.delete_config for name in entry.split(",") if name
        ]
        return _quota_configs(admin, args, entity, (_key_values(args.add_config), deleted))
    if len(entity) != 1:
        raise UsageError("only users and clients combine, each once")
    entity_type, name, given = entity[0]
    if entity_type == "topics":
        if name is None:
            raise UsageError("topics take --entity-name TOPIC")
        resource = ConfigResource.topic(name)
    elif not given:
        raise UsageError("brokers take --entity-name NODE_ID or --entity-default (every node)")
    elif name is None:
        resource = ConfigResource.node()
    elif not name.isdigit():
        raise UsageError(f"--entity-name {name!r} is not a node id")
    else:
        resource = ConfigResource.node(int(name))
    return _alter_or_describe_configs(admin, args, resource)


def _quota_configs(
    admin: Admin,
    args: argparse.Namespace,
    entity: Sequence[_EntityArgument],
    changes: tuple[dict[str, str], list[str]],
) -> int:
    """``brook configs --entity-type users|clients``: alters (with ``changes``: added
    key=values, deleted keys) or describes the client quotas of ``entity``, as kafka-configs
    does; a description is strict (users alone are not described with their client ids)."""
    from brook.client.quotas import ClientQuotaEntity, ClientQuotaFilterComponent

    added, deleted = changes
    if added or deleted:
        if args.json:
            raise UsageError("--json describes the quotas: not with --add-config/--delete-config")
        if not all(given for _, _, given in entity):
            raise UsageError("each --entity-type needs --entity-name NAME or --entity-default")
        ops: dict[str, float | None] = dict.fromkeys(deleted)
        for key, value in added.items():
            try:
                ops[key] = float(value)
            except ValueError:
                raise UsageError(f"{key}={value!r}: a quota is a number") from None
        target = ClientQuotaEntity({_QUOTA_ENTITY_TYPES[t]: name for t, name, _ in entity})
        return report(admin.alter_client_quotas({target: ops}), "Altered quotas of")
    components = [
        ClientQuotaFilterComponent.of_entity_type(_QUOTA_ENTITY_TYPES[t])
        if not given
        else ClientQuotaFilterComponent.of_default_entity(_QUOTA_ENTITY_TYPES[t])
        if name is None
        else ClientQuotaFilterComponent.of_entity(_QUOTA_ENTITY_TYPES[t], name)
        for t, name, given in entity
    ]
    described = admin.describe_client_quotas(components, strict=True)
    if args.json:
        print_json(
            {
                "entities": [
                    {"entity": dict(found.entries), "quotas": quotas}
                    for found, quotas in described.items()
                ]
            }
        )
        return EXIT_OK
    for found, quotas in described.items():
        who = ", ".join(
            f"the default {_DESCRIBED_AS[t]}" if name is None else f"{_DESCRIBED_AS[t]} '{name}'"
            for t, name in found.entries
        )
        values = ",".join(f"{key}={value}" for key, value in sorted(quotas.items()))
        print(f"Quota configs for {who} are {values}")
    return EXIT_OK


def _alter_or_describe_configs(
    admin: Admin, args: argparse.Namespace, resource: ConfigResource
) -> int:
    from brook.client.admin import AlterConfigOp, ConfigResourceType

    changes: list[tuple[str, AlterConfigOp, str | None]] = [
        (name, AlterConfigOp.SET, value) for name, value in _key_values(args.add_config).items()
    ]
    changes += [
        (name.strip(), AlterConfigOp.DELETE, None)
        for entry in args.delete_config
        for name in entry.split(",")
        if name.strip()
    ]
    if changes:
        if args.json:
            raise UsageError("--json describes the configs: not with --add-config/--delete-config")
        return report(admin.alter_configs({resource: changes}), "Altered configs of")
    entries = admin.describe_configs([resource])[resource].values()
    if args.json:
        kind = "topic" if resource.type is ConfigResourceType.TOPIC else "node"
        print_json(
            {
                kind: resource.name or None,
                "configs": [
                    {"name": e.name, "value": e.value, "source": e.source} for e in entries
                ],
            }
        )
        return EXIT_OK
    for entry in entries:
        print(f"{entry.name}={entry.value if entry.value is not None else ''}\t({entry.source})")
    return EXIT_OK


def _elect(admin: Admin, args: argparse.Namespace) -> int:
    from brook.client.types import TopicPartition

    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    partitions = None
    if args.topic is not None:
        if args.partition is not None:
            partitions = [TopicPartition(args.topic, args.partition)]
        else:
            described = admin.describe_topics([args.topic])[args.topic]
            partitions = [TopicPartition(args.topic, p.partition) for p in described.partitions]
    results = admin.elect_leaders(partitions, unclean=args.unclean)
    status = EXIT_OK
    for tp, error in sorted(results.items()):
        if error is None:
            print(f"Elected a leader for {tp.topic}-{tp.partition}.")
        elif error.code.name == "ELECTION_NOT_NEEDED":
            print(f"No election needed for {tp.topic}-{tp.partition}.")
        else:
            print(f"Error on {tp.topic}-{tp.partition}: {error.code.name}: {error.message}")
            status = EXIT_FAILED
    return status


def _delete(admin: Admin, args: argparse.Namespace) -> int:
    return report(admin.delete_topics(args.topic), "Deleted topic")


def _describe_cluster(admin: Admin, args: argparse.Namespace) -> int:
    cluster = admin.describe_cluster()
    states = {node.node_id: _controller_state(args, node) for node in cluster.controllers}
    if args.json:
        print_json(
            {
                "clusterId": cluster.cluster_id,
                "controllerId": cluster.controller_id,
                "controllerEpoch": cluster.controller_epoch,
                "metadataOffset": cluster.metadata_offset,
                "controllers": [
                    {"nodeId": node.node_id, "endpoints": node.endpoints, **states[node.node_id]}
                    for node in cluster.controllers
                ],
                "nodes": [
                    {
                        "nodeId": node.node_id,
                        "role": node.role,
                        "fenced": node.fenced,
                        "inControlledShutdown": node.in_controlled_shutdown,
                        "brokerEpoch": node.broker_epoch,
                        "endpoints": node.endpoints,
                        "rack": node.rack or None,
                    }
                    for node in cluster.nodes
                ],
            }
        )
        return EXIT_OK
    controller = "none" if cluster.controller_id is None else cluster.controller_id
    print(f"Cluster: {cluster.cluster_id}")
    print(f"Active controller: {controller} (epoch {cluster.controller_epoch})")
    print(f"Metadata offset: {cluster.metadata_offset}")
    for node in cluster.controllers:
        print(
            f"Controller: {node.node_id}\t{_endpoints(node.endpoints)}"
            f"{_digest_cells(states[node.node_id])}"
        )
    for node in cluster.nodes:
        state = "fenced" if node.fenced else "active"
        if node.in_controlled_shutdown:
            state += ", shutting down"
        rack = f"\tRack: {node.rack}" if node.rack else ""
        print(
            f"Node: {node.node_id}\t{node.role}\t{state}\tEpoch: {node.broker_epoch}"
            f"\t{_endpoints(node.endpoints)}{rack}"
        )
    return EXIT_OK


def _unregister(admin: Admin, args: argparse.Namespace) -> int:
    admin.unregister_broker(args.node)
    print(f"Unregistered node {args.node}.")
    return EXIT_OK


def _controller_state(args: argparse.Namespace, node: NodeDescription) -> dict[str, object]:
    """With --digests, the controller's metadata offset and digest, or why it could not say
    (``unreachable``: its gRPC status); nothing without."""
    if not args.digests or "GRPC" not in node.endpoints:
        return {}
    import grpc

    from brook.controller_probe import describe_controller

    try:
        state = describe_controller(node.endpoints["GRPC"], args.timeout_ms / 1000)
    except grpc.RpcError as error:
        return {"offset": None, "digest": None, "unreachable": error.code().name}
    return {"offset": state.offset, "digest": state.digest, "unreachable": None}


def _digest_cells(state: Mapping[str, object]) -> str:
    if not state:
        return ""
    if state["unreachable"] is not None:
        return f"\tunreachable ({state['unreachable']})"
    return f"\tOffset: {state['offset']}\tDigest: {state['digest']}"


def _endpoints(endpoints: dict[str, str]) -> str:
    return " ".join(f"{listener}://{address}" for listener, address in endpoints.items())
