"""The controller's settings: the common ones, the Raft quorum, and cluster-wide defaults.

Listeners: GRPC (ControllerService, AdminService, health), default GRPC://127.0.0.1:9201, and
RAFT (controller-to-controller Raft traffic), default RAFT://127.0.0.1:9301. These are the
local launcher's well-known ports for controller 1. Metadata: metadata.log.dir, by default
./.brook/controller-<node.id>.

The quorum timings are Brook's, not Kafka's defaults: they were tuned for the Raft engine Brook
uses (pysyncobj; see docs/decisions.md) and each doc says why.
"""

from __future__ import annotations

from typing import Final

from brook.config import (
    UNCLEAN_LEADER_ELECTION_ENABLE,
    Config,
    ConfigKey,
    ConfigType,
    Importance,
    NonEmptyString,
    Range,
    Voters,
    service_config_def,
    service_data_dir_default,
)

__all__ = ["CONFIG_DEF"]

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
    if heartbeat_ms >= election_ms:
        return (
            f"controller.quorum.heartbeat.interval.ms={heartbeat_ms} must be below "
            f"controller.quorum.election.timeout.ms={election_ms}, or followers start elections "
            "against a healthy leader"
        )
    if request_ms < 2 * election_ms:
        return (
            f"controller.quorum.request.timeout.ms={request_ms} must be at least twice "
            f"controller.quorum.election.timeout.ms={election_ms} (the longest election timeout)"
        )
    return None


CONFIG_DEF: Final = service_config_def(
    listener_names=("GRPC", "RAFT"),
    default_listeners="GRPC://127.0.0.1:9201,RAFT://127.0.0.1:9301",
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
            "Whether producing to or asking metadata for an unknown topic creates it. Off in "
            "Brook, unlike Kafka: a typo in a topic name, or a client that merely asks, would "
            "otherwise create topics with default settings that are hard to take back.",
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
    ),
    checks=(_check_voters_include_this_node, _check_quorum_timings),
)
