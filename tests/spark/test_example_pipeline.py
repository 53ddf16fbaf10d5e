"""examples/order_totals.py, the README's Spark pipeline, run as its own command against a real
cluster: every window the watermark closed has exactly one total record (read_committed), and
it is the sum of that window's orders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from cluster_fixture import one_node_transactions_cluster

from brook.launcher import LocalCluster, Role

ROOT: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = ROOT / "examples" / "order_totals.py"
ORDERS: Final = 400
# Spark's start, two micro-batches at most and the read-back, with room for a loaded machine.
RUN_TIMEOUT_S: Final = 240.0
# Sums are rounded to cents on both sides, in a different order.
CENT: Final = 0.011

sys.path.insert(0, str(EXAMPLE.parent))
import order_totals  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with one_node_transactions_cluster(tmp_path_factory, "spark-example") as started:
        yield started


def test_the_example_pipeline_writes_every_total_once(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)
    controllers = cluster.controller_bootstrap_servers
    order_totals.create_topics(controllers, partitions=3)
    orders = order_totals.write_sample_orders(bootstrap, ORDERS, seed=7)
    expected = order_totals.closed_window_totals(orders)
    assert expected, "the sample orders close no window: the test would prove nothing"

    command = [
        sys.executable,
        str(EXAMPLE),
        "--bootstrap-servers",
        bootstrap,
        "--controllers",
        controllers,
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--available-now",
    ]
    # Its own session: the Spark driver's JVM is the script's child, and the whole group goes
    # if the run overstays.
    driver = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        stdout, stderr = driver.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
    assert driver.returncode == 0, stderr[-4000:]
    printed = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    windows = [(t["customer"], t["window"]) for t in printed]
    assert len(windows) == len(set(windows)), "a window's total was written twice"
    totals = {(t["customer"], t["window"]): t["total"] for t in printed}
    assert totals.keys() == expected.keys()
    for window, total in expected.items():
        assert totals[window] == pytest.approx(total, abs=CENT), window
