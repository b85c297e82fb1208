"""The generated dashboard: committed as generated, and built on metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from scheduler.runtime.exporter import GaugeState, MachineGauge, SchedulerMetrics

dashboards = pytest.importorskip("deploy.grafana.dashboards", exc_type=ImportError)

ROOT = Path(__file__).resolve().parents[2]
#: Metrics other modules add: the malleable runtime's resize counter.
ELSEWHERE = {"accordion_job_resizes_total"}


def test_the_committed_json_is_what_the_code_generates() -> None:
    assert dashboards.DASHBOARD.read_text() == dashboards.render(), (
        "deploy/grafana/dashboards/accordion.json is stale: run python -m deploy.grafana.dashboards"
    )


def test_the_check_option_says_stale(tmp_path: Path) -> None:
    stale = tmp_path / "accordion.json"
    stale.write_text("{}\n")
    assert dashboards.main(["--check", "--output", str(stale)]) == 1
    assert dashboards.main(["--output", str(stale)]) == 0
    assert dashboards.main(["--check", "--output", str(stale)]) == 0


def test_every_section_the_issue_asks_for_is_there() -> None:
    board = json.loads(dashboards.render())
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Cluster", "Queue", "Jobs", "Decisions", "Agents", "Malleability", "Faults"]
    assert board["uid"] == "accordion"
    targets = [t for p in board["panels"] for t in p.get("targets", [])]
    assert len(targets) == len(dashboards.queries())
    assert all(t["datasource"]["uid"] == "prometheus" for t in targets)


def test_the_dashboard_uses_metrics_that_exist() -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, process=True)
    metrics.job_finished(procs=1, submit=0.0, start=1.0, end=2.0)
    metrics.publish_state(
        GaugeState(machines=(MachineGauge("m", 4, 2, True),), job_cpus={"j": 2}, job_procs={"j": 4})
    )
    exposed = set(re.findall(r"^(\w+)", generate_latest(registry).decode(), re.M))
    agent_source = (ROOT / "nodeagent" / "agent" / "exporter.py").read_text()
    agent_names = set(re.findall(r'"(accordion_agent_\w+)"', agent_source))
    exposed |= agent_names | {f"{name}_total" for name in agent_names} | ELSEWHERE
    exposed |= {"up"}
    used: set[str] = set()
    for _title, query in dashboards.queries():
        used |= set(re.findall(r"\b(accordion_\w+|process_\w+|up)\b(?!\s*\()", query.expr))
    assert used
    assert used <= exposed, used - exposed
