"""The metrics docs/metrics.md documents, read from its table, so the tests that check the
services' /metrics and the Grafana dashboard hold them to the same list the operators read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS_DOC = ROOT / "docs" / "metrics.md"
SERVICES = ("storage-node", "controller", "group-coordinator", "gateway")

_ROW = re.compile(
    r"^\| `(?P<name>[a-z_:][a-z0-9_:]*)` \| (?P<type>\w+) \|[^|]*\| (?P<services>[^|]+) \|"
)


@dataclass(frozen=True)
class DocumentedMetric:
    name: str
    """The exposed name: a counter's with _total, a histogram's without _bucket/_sum/_count."""
    type: str
    services: frozenset[str]


def documented_metrics() -> list[DocumentedMetric]:
    metrics = []
    for line in METRICS_DOC.read_text().splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        services = {s.strip() for s in match["services"].split(",")}
        if services == {"all"}:
            services = set(SERVICES)
        assert services <= set(SERVICES), line
        metrics.append(DocumentedMetric(match["name"], match["type"], frozenset(services)))
    assert metrics, f"no metrics table in {METRICS_DOC}"
    return metrics
