"""The controller's own settings: the quorum's password and gRPC endpoints, and timings the Raft
engine accepts."""

from __future__ import annotations

import pytest
from brook_controller.config import CONFIG_DEF, quorum_grpc_endpoints

from brook.config import Config, ConfigError, RawSetting

THREE_VOTERS = {
    "node.id": "2",
    "listeners": "GRPC://127.0.0.1:9202,RAFT://127.0.0.1:9302",
    "controller.quorum.voters": "1@127.0.0.1:9301,2@127.0.0.1:9302,3@127.0.0.1:9303",
    "controller.quorum.password": "secret",
}


def _load(settings: dict[str, str]) -> Config:
    return CONFIG_DEF.parse({k: RawSetting(v, "test") for k, v in settings.items()})


def _problem(settings: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as error:
        _load(settings)
    return str(error.value)


def test_a_quorum_of_several_controllers_needs_a_password() -> None:
    settings = {k: v for k, v in THREE_VOTERS.items() if k != "controller.quorum.password"}

    assert "controller.quorum.password is required" in _problem(settings)
    assert _load(THREE_VOTERS).get_password("controller.quorum.password").value() == "secret"


def test_grpc_endpoints_may_only_name_voters_and_default_to_this_controllers_own() -> None:
    named = _load(
        {**THREE_VOTERS, "controller.quorum.grpc.endpoints": "1@10.0.0.1:9201,3@10.0.0.3:9203"}
    )

    endpoints = quorum_grpc_endpoints(named)

    assert {n: str(v) for n, v in endpoints.items()} == {
        1: "1@10.0.0.1:9201",
        2: "2@127.0.0.1:9202",
        3: "3@10.0.0.3:9203",
    }
    assert "names node 4, which is not in controller.quorum.voters" in _problem(
        {**THREE_VOTERS, "controller.quorum.grpc.endpoints": "4@10.0.0.4:9204"}
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"controller.quorum.heartbeat.interval.ms": "150"}, "must be below a third of"),
        (
            {"controller.quorum.leader.fallback.timeout.ms": "40"},
            "leader.fallback.timeout.ms=40 must be above",
        ),
    ],
)
def test_timings_the_raft_engine_would_reject_are_refused(
    settings: dict[str, str], expected: str
) -> None:
    assert expected in _problem({**THREE_VOTERS, **settings})
