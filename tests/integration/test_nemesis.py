"""The nemesis, short: a minute of seeded random faults against a whole cluster, then every
guarantee checked (see tests/nemesis.py for the faults and the checks; issue #13).

The seed is printed first; ``BROOK_NEMESIS_SEED=<seed>`` replays its schedule. The long run
is ``.venv/bin/python tests/nemesis.py --minutes 20``.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator

import pytest
from cluster_fixture import ClusterFactory
from nemesis import FAULT_KINDS, Firewall, run_nemesis

pytestmark = pytest.mark.integration

FAULTS_S = 60.0


@pytest.fixture
def firewall() -> Iterator[Firewall]:
    with Firewall() as opened:
        yield opened


def test_a_minute_of_random_faults_loses_duplicates_and_reorders_nothing_and_heals(
    firewall: Firewall, cluster_factory: ClusterFactory
) -> None:
    seed_text = os.environ.get("BROOK_NEMESIS_SEED")
    seed = int(seed_text) if seed_text else random.SystemRandom().randrange(2**31)
    result = run_nemesis(cluster_factory, firewall, seed, FAULTS_S)
    print(json.dumps(result, indent=2))
    assert not result["violations"], f"seed {seed}: {result['violations']}"
    assert result["faults_injected"] >= len(FAULT_KINDS) // 2, result["faults_by_kind"]
    assert result["records_acknowledged"]["sdk"] > 0
    assert result["records_acknowledged"]["kafka"] > 0
    assert result["records_lost"] == 0 and result["records_duplicated"] == 0
    assert result["group_commits"] > 0
