"""docs/metrics.md and what refers to it: the Grafana dashboard uses documented metrics only."""

from __future__ import annotations

import json
import re

from metrics_doc import ROOT, documented_metrics

DASHBOARD = ROOT / "deploy" / "grafana" / "brook-dashboard.json"
_METRIC_NAME = re.compile(r"\b(?:brook|process)_[a-z0-9_]+|\btarget_info\b")
_HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")


def _expressions(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for value in node.values() for e in _expressions(value)]
    if isinstance(node, list):
        return [e for value in node for e in _expressions(value)]
    return []


def test_the_dashboard_refers_only_to_documented_metrics() -> None:
    documented = {m.name: m.type for m in documented_metrics()}
    expressions = _expressions(json.loads(DASHBOARD.read_text()))
    assert expressions
    used = set()
    for expression in expressions:
        for name in _METRIC_NAME.findall(expression):
            series = name
            for suffix in _HISTOGRAM_SERIES:
                if (
                    name.endswith(suffix)
                    and documented.get(name.removesuffix(suffix)) == "histogram"
                ):
                    series = name.removesuffix(suffix)
            assert series in documented, (series, expression)
            used.add(series)
    # The dashboard shows what issue #20 asks operators to see.
    assert {
        "brook_storage_bytes_in_bytes_total",
        "brook_storage_messages_in_total",
        "brook_gateway_request_duration_milliseconds",
        "brook_replication_under_replicated_partitions",
        "brook_controller_offline_partitions",
        "brook_group_lag",
        "brook_event_loop_idle_ratio",
    } <= used


def test_every_documented_metric_has_a_type_and_a_service() -> None:
    for metric in documented_metrics():
        assert metric.type in {"counter", "gauge", "histogram"}, metric
        assert metric.services, metric
        assert metric.name.endswith("_total") == (metric.type == "counter"), metric
