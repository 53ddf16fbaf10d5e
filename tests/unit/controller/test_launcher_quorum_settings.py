"""The local launcher gives each cluster's controllers a shared password and each other's gRPC
endpoints."""

from __future__ import annotations

from pathlib import Path

from brook_controller.app import SPEC
from brook_controller.config import quorum_grpc_endpoints

from brook.config import load_config
from brook.launcher import LocalCluster, Role


def _controller_configs(cluster: LocalCluster) -> dict[str, dict[str, str]]:
    return {name: cluster.config(name) for name in cluster.names(Role.CONTROLLER)}


def test_every_controller_of_a_cluster_gets_the_same_password_kept_across_runs(
    tmp_path: Path,
) -> None:
    first = LocalCluster(tmp_path / "a")
    first.prepare()
    again = LocalCluster(tmp_path / "a")
    other = LocalCluster(tmp_path / "b")

    passwords = {c["controller.quorum.password"] for c in _controller_configs(first).values()}

    assert len(passwords) == 1 and len(passwords.pop()) >= 32
    assert _controller_configs(again) == _controller_configs(first)
    assert (
        _controller_configs(other)["controller-1"]["controller.quorum.password"]
        != _controller_configs(first)["controller-1"]["controller.quorum.password"]
    )


def test_controllers_know_where_every_voter_serves_grpc(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.prepare()

    for name in cluster.names(Role.CONTROLLER):
        config = load_config(
            SPEC.config_def, config_path=cluster.spec(name).config_path, environ={}
        )
        endpoints = quorum_grpc_endpoints(config)
        assert {n: v.address for n, v in endpoints.items()} == {
            cluster.spec(c).node_id: cluster.grpc_address(c) for c in cluster.names(Role.CONTROLLER)
        }
