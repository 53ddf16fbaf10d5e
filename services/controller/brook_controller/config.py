"""The controller's settings: the common ones, the Raft quorum, and cluster-wide defaults.

Listeners: GRPC (ControllerService, AdminService, health), default GRPC://127.0.0.1:9201, and
RAFT (controller-to-controller Raft traffic), default RAFT://127.0.0.1:9301. These are the
local launcher's well-known ports for controller 1. Metadata: metadata.log.dir, by default
./.brook/controller-<node.id>.

The quorum timings are Brook's, not Kafka's defaults: they were tuned for the Raft engine Brook
uses (pysyncobj; see docs/decisions.md) and each doc says why. Every controller must know
where the others serve gRPC (controller.quorum.grpc.endpoints), so that a follower can name the
leader in a NOT_CONTROLLER answer.
"""

from __future__ import annotations

from typing import Final

from brook.config import (
    UNCLEAN_LEADER_ELECTION_ENABLE,
    Config,
    ConfigKey,
    ConfigType,
    ConfigValue,
    Importance,
    NonEmptyString,
    Range,
    Voter,
    Voters,
    parse_voters,
    service_config_def,
    service_data_dir_default,
)
from brook.security.grpc_tls import INTER_BROKER_PROTOCOL
from brook.security.tls import TLS_KEYS

__all__ = ["CONFIG_DEF", "quorum_grpc_endpoints"]

_H = Importance.HIGH
_M = Importance.MEDIUM
_L = Importance.LOW
_INT = ConfigType.INT


def _check_voters_include_this_node(config: Config) -> str | None:
    node_id = config.get_int("node.id")
    voters = config.get_voters()
    own = [voter for voter in voters if voter.node_id == node_id]
    if not own:
        return (
            f"node.id={node_id} is not in controller.quorum.voters="
            f'"{",".join(str(voter) for voter in voters)}"; a controller must be one of the voters'
        )
    raft = config.listener("RAFT")
    if own[0].port != raft.port:
        return (
            f"controller.quorum.voters gives node {node_id} the address {own[0].address} but its "
            f"RAFT listener is {raft}; the ports must match, or the other voters cannot reach it"
        )
    return None


def _check_quorum_timings(config: Config) -> str | None:
    election_ms = config.get_int("controller.quorum.election.timeout.ms")
    heartbeat_ms = config.get_int("controller.quorum.heartbeat.interval.ms")
    request_ms = config.get_int("controller.quorum.request.timeout.ms")
    fallback_ms = config.get_int("controller.quorum.leader.fallback.timeout.ms")
    # The Raft engine asserts election > 3 x heartbeat: a follower must be able to miss two
    # heartbeats without starting an election.
    if 3 * heartbeat_ms >= election_ms:
        return (
            f"controller.quorum.heartbeat.interval.ms={heartbeat_ms} must be below a third of "
            f"controller.quorum.election.timeout.ms={election_ms}, or followers start elections "
            "against a healthy leader"
        )
    if request_ms < 2 * election_ms:
        return (
            f"controller.quorum.request.timeout.ms={request_ms} must be at least twice "
            f"controller.quorum.election.timeout.ms={election_ms} (the longest election timeout)"
        )
    if fallback_ms <= heartbeat_ms:
        return (
            f"controller.quorum.leader.fallback.timeout.ms={fallback_ms} must be above "
            f"controller.quorum.heartbeat.interval.ms={heartbeat_ms}, or a healthy leader steps "
            "down between two rounds of heartbeats"
        )
    return None


def _check_password_for_a_quorum(config: Config) -> str | None:
    if len(config.get_voters()) > 1 and not config.is_set("controller.quorum.password"):
        return (
            "controller.quorum.password is required when controller.quorum.voters lists more "
            "than one controller: the Raft transport unpickles what it receives, so it must only "
            "accept peers that know the password"
        )
    return None


def quorum_grpc_endpoints(config: Config) -> dict[int, Voter]:
    """Every voter's GRPC endpoint this controller knows: controller.quorum.grpc.endpoints, with
    its own taken from advertised.listeners (so the setting may leave it out)."""
    endpoints = {v.node_id: v for v in parse_voters(config.get_list(_GRPC_ENDPOINTS))}
    own = config.listener("GRPC", advertised=True)
    node_id = config.get_int("node.id")
    endpoints[node_id] = Voter(node_id, own.host, own.port)
    return endpoints


def _check_grpc_endpoints_name_voters(config: Config) -> str | None:
    voter_ids = {voter.node_id for voter in config.get_voters()}
    for voter in parse_voters(config.get_list(_GRPC_ENDPOINTS)):
        if voter.node_id not in voter_ids:
            return (
                f"{_GRPC_ENDPOINTS} names node {voter.node_id}, which is not in "
                "controller.quorum.voters"
            )
    return None


class _VoterListOrEmpty:
    """id@host:port entries, or nothing at all."""

    def __call__(self, value: ConfigValue) -> str | None:
        if value == ():
            return None
        return Voters()(value)

    def describe(self) -> str:
        return "id@host:port,... or empty"


_GRPC_ENDPOINTS = "controller.quorum.grpc.endpoints"


CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC", "RAFT"),
    default_listeners="GRPC://127.0.0.1:9201,RAFT://127.0.0.1:9301,METRICS://127.0.0.1:10201",
    keys=(
        ConfigKey(
            "controller.quorum.voters",
            ConfigType.LIST,
            ("1@127.0.0.1:9301",),
            "The controllers of the Raft quorum as id@host:port of their RAFT listeners, "
            "comma-separated, the same on every controller. This controller's node.id must be "
            "one of them, with its RAFT listener's port. The default is a single-controller "
            "quorum of node 1.",
            _H,
            Voters(),
        ),
        ConfigKey(
            "controller.quorum.password",
            ConfigType.PASSWORD,
            None,
            "The shared secret of the quorum: Raft traffic between controllers is encrypted and "
            "authenticated with it. Required when there is more than one voter; the local "
            "launcher generates one per cluster.",
            _H,
        ),
        ConfigKey(
            _GRPC_ENDPOINTS,
            ConfigType.LIST,
            (),
            "The GRPC listener of every controller as id@host:port (the ids of "
            "controller.quorum.voters), comma-separated, the same on every controller. A "
            "follower answers writes with NOT_CONTROLLER naming the leader at this address, and "
            "DescribeQuorum lists them. This controller's own entry defaults to its GRPC "
            "advertised listener; a voter left out is reported without an address.",
            _M,
            _VoterListOrEmpty(),
        ),
        ConfigKey(
            "metadata.log.dir",
            ConfigType.STRING,
            service_data_dir_default("controller"),
            "The directory of the replicated metadata log and its snapshots; created if missing.",
            _H,
            NonEmptyString(),
        ),
        ConfigKey(
            "controller.quorum.election.timeout.ms",
            _INT,
            400,
            "A follower that hears nothing from the leader for a random time between this and "
            "twice this starts an election. Kafka's default is 1000; 400 gives about 1 s "
            "failover, measured with Brook's Raft engine, without spurious elections.",
            _H,
            Range(10),
        ),
        ConfigKey(
            "controller.quorum.heartbeat.interval.ms",
            _INT,
            50,
            "How often the leader sends entries or heartbeats to each follower. It bounds "
            "commit latency of an idle quorum, and must stay well below the election timeout.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "controller.quorum.request.timeout.ms",
            _INT,
            2000,
            "How long a controller waits on a connection to another voter before treating it "
            "as failed; at least twice controller.quorum.election.timeout.ms.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "controller.quorum.reconnect.backoff.ms",
            _INT,
            500,
            "How long a controller waits before reconnecting to a voter it lost. Long backoffs "
            "(the Raft engine's default is 5 s) let a restarting controller depose a healthy "
            "leader.",
            _L,
            Range(1),
        ),
        ConfigKey(
            "controller.quorum.leader.fallback.timeout.ms",
            _INT,
            1000,
            "A leader that has not heard from a majority of voters for this long steps down, so "
            "an isolated leader stops acting as leader quickly (the engine's default is 30 s).",
            _M,
            Range(1),
        ),
        ConfigKey(
            "metadata.commit.timeout.ms",
            _INT,
            5000,
            "How long the controller waits for a change (or the no-op write that precedes a "
            "read on the leader) to commit in the quorum before answering REQUEST_TIMED_OUT, "
            "for requests that carry no timeout of their own. A timed-out change may still "
            "commit later.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "metadata.log.max.entries.between.snapshots",
            _INT,
            5000,
            "The Raft log is compacted into a snapshot of the metadata image once it holds this "
            "many entries, which bounds the log on disk and the replay at start-up.",
            _M,
            Range(2),
        ),
        ConfigKey(
            "metadata.log.max.snapshot.interval.ms",
            ConfigType.LONG,
            3600000,
            "A snapshot is also taken when the last one is this old and there are new entries.",
            _L,
            Range(1000),
        ),
        ConfigKey(
            "metadata.watch.retained.records",
            _INT,
            10000,
            "How many of the latest metadata records each controller keeps in memory for "
            "WatchMetadata: a watcher that resumes from an older offset, or falls this far "
            "behind, gets a new snapshot instead.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "num.partitions",
            _INT,
            1,
            "The partition count of a topic created without one.",
            _M,
            Range(1),
        ),
        ConfigKey(
            "default.replication.factor",
            _INT,
            1,
            "The replication factor of a topic created without one.",
            _M,
            Range(1, 32767),
        ),
        ConfigKey(
            "auto.create.topics.enable",
            ConfigType.BOOLEAN,
            False,
            "Whether a Kafka client's Metadata request naming an unknown topic creates it "
            "(versions 0-3 always ask for it, 4 and later when allow_auto_topic_creation is set, "
            "as producers do), with num.partitions and default.replication.factor; a producer's "
            "first record to a new topic is then delivered. Never for names starting with __ "
            "(the cluster's own) or invalid names. Off in Brook, unlike Kafka: a typo in a topic "
            "name, or a client that merely asks, would otherwise create topics with default "
            "settings that are hard to take back. Read by the controllers, so every gateway "
            "behaves alike.",
            _H,
        ),
        ConfigKey(
            "broker.session.timeout.ms",
            _INT,
            9000,
            "A storage node whose last heartbeat is older than this is fenced and its "
            "partitions get new leaders.",
            _M,
            Range(1),
        ),
        UNCLEAN_LEADER_ELECTION_ENABLE,
        ConfigKey(
            "auto.leader.rebalance.enable",
            ConfigType.BOOLEAN,
            True,
            "Whether leadership is moved back to each partition's preferred replica when the "
            "cluster is imbalanced.",
            _H,
        ),
        ConfigKey(
            "leader.imbalance.check.interval.seconds",
            ConfigType.LONG,
            300,
            "How often leader imbalance is checked.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "leader.imbalance.per.broker.percentage",
            _INT,
            10,
            "The share of a node's partitions led by another node, in percent, above which "
            "leadership is rebalanced.",
            _H,
            Range(0, 100),
        ),
        ConfigKey(
            "offsets.topic.num.partitions",
            _INT,
            50,
            "The partition count of __consumer_offsets; do not change it once the topic exists.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "offsets.topic.replication.factor",
            _INT,
            3,
            "The replication factor of __consumer_offsets. The topic is created only once that "
            "many storage nodes are registered.",
            _H,
            Range(1, 32767),
        ),
        ConfigKey(
            "offsets.topic.segment.bytes",
            _INT,
            104857600,
            "The segment size of __consumer_offsets, kept small so compaction and loading are "
            "fast.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "transaction.state.log.num.partitions",
            _INT,
            50,
            "The partition count of __transaction_state, where the transaction coordinators "
            "keep transactions; do not change it once the topic exists.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "transaction.state.log.replication.factor",
            _INT,
            3,
            "The replication factor of __transaction_state. The topic is created only once "
            "that many storage nodes are registered.",
            _H,
            Range(1, 32767),
        ),
        ConfigKey(
            "transaction.state.log.min.isr",
            _INT,
            2,
            "The min.insync.replicas of __transaction_state (at most its replication factor): "
            "a transaction's state change is refused unless this many replicas have it.",
            _H,
            Range(1),
        ),
        ConfigKey(
            "transaction.state.log.segment.bytes",
            _INT,
            104857600,
            "The segment size of __transaction_state, kept small so compaction and loading "
            "are fast.",
            _H,
            Range(1),
        ),
        *TLS_KEYS,
        INTER_BROKER_PROTOCOL,
    ),
    checks=(
        _check_voters_include_this_node,
        _check_quorum_timings,
        _check_password_for_a_quorum,
        _check_grpc_endpoints_name_voters,
    ),
)
