"""The cluster the compatibility tests share: one controller, two storage nodes, a group
coordinator and two gateways, started once per session and always torn down.

Two storage nodes and two gateways so that clients really route: partition leaders are spread
over the storage nodes, which are presented as two brokers, one at each gateway. Groups start
without the initial rebalance delay and accept short sessions, so group tests take seconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster_fixture import shared_cluster

from brook.launcher import LocalCluster

OFFSETS_PARTITIONS = 4
GROUP_MIN_SESSION_TIMEOUT_MS = 1000


@pytest.fixture(scope="session")
def compat_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with shared_cluster(
        tmp_path_factory,
        "compat",
        controllers=1,
        storage_nodes=2,
        group_coordinators=1,
        gateways=2,
        config_overrides={
            "controller": {
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "offsets.topic.replication.factor": "1",
                # Transactions (issue #16): two storage nodes hold one copy of each partition.
                "transaction.state.log.num.partitions": str(OFFSETS_PARTITIONS),
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
            },
            "group-coordinator": {
                "group.initial.rebalance.delay.ms": "0",
                "group.min.session.timeout.ms": str(GROUP_MIN_SESSION_TIMEOUT_MS),
            },
        },
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def bootstrap(compat_cluster: LocalCluster) -> str:
    """The Kafka bootstrap addresses of the shared cluster's gateways."""
    return compat_cluster.kafka_bootstrap_servers
