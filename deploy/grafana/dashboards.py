"""The testbed's Grafana dashboard as code, written to ``deploy/grafana/dashboards/``.

``python -m deploy.grafana.dashboards`` regenerates ``accordion.json``;
``--check`` exits 1 when the committed file differs from what this module
generates (``tests/deploy/test_dashboards.py`` does the same).

The dashboard is built with Grafana's own typed builders (the
grafana-foundation-sdk, a development dependency: only this module imports
it). Every panel's queries are declared first as plain :class:`Query` values
with the shape their answer must have (the labels every series carries), so
the test that runs a live cluster under a real Prometheus
(``tests/deploy/test_dashboard_queries.py``) evaluates exactly the queries
Grafana will send, instant and over a range, and checks that shape.

Grafana's ``$__rate_interval`` and ``$__range`` are the only template
variables used; :func:`for_prometheus` replaces them for a bare Prometheus.

Time bases, as the metrics name them: ``_wall_seconds`` are wall seconds;
``_cluster_seconds`` are cluster seconds (wall seconds x
``accordion_scheduler_time_scale``); the job-time panels say which.

Quantile panels read the cumulative histograms (every job finished since the
journal began, restored across scheduler restarts), so they show a value
whenever one job has finished instead of NaN when the last minute had none;
the windowed decision-time panel shows no data (not NaN) while the scheduler
is idle.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, stat, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DataSourceRef

DASHBOARD = Path(__file__).resolve().parent / "dashboards/accordion.json"
UID = "accordion"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="prometheus")


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL query of a panel, and the labels each series of its answer has."""

    expr: str
    legend: str = ""
    labels: frozenset[str] = frozenset()
    #: Why an empty answer is right on a healthy cluster ("" means never empty).
    may_be_empty: str = ""


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "stat", "bargauge"
    unit: str = "short"
    description: str = ""
    width: int = 8


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def q(expr: str, legend: str = "", *labels: str, may_be_empty: str = "") -> Query:
    return Query(expr, legend, frozenset(labels), may_be_empty)


RATE = "$__rate_interval"
SCHED = "accordion_scheduler"

SECTIONS: tuple[Section, ...] = (
    Section(
        "Cluster",
        (
            Panel(
                "Machines online / offline",
                (
                    q(f"{SCHED}_machines_online", "online"),
                    q(f"{SCHED}_machines_offline", "offline (lost or retired)"),
                ),
                kind="stat",
                width=6,
            ),
            Panel(
                "CPUs: configured, online, busy",
                (
                    q(f"{SCHED}_cpus_configured", "configured (not retired)"),
                    q(f"{SCHED}_cpus", "online"),
                    q(f"{SCHED}_cpus - {SCHED}_cpus_free", "busy"),
                ),
                description="Configured: every machine registered and not retired; a job "
                "wider than this is rejected, one wider than online waits.",
                width=9,
            ),
            Panel(
                "Busy CPUs per machine (scheduler's view)",
                (q(f"{SCHED}_machine_cpus_busy", "{{machine}}", "machine"),),
                width=9,
            ),
        ),
    ),
    Section(
        "Queue",
        (
            Panel(
                "Queued and running jobs",
                (q(f"{SCHED}_queued_jobs", "queued"), q(f"{SCHED}_running_jobs", "running")),
            ),
            Panel(
                "Submissions per minute, by result",
                (
                    q(
                        f"sum by (result) (rate({SCHED}_submissions_total[{RATE}])) * 60",
                        "{{result}}",
                        "result",
                    ),
                ),
            ),
            Panel(
                "Rejections, by reason",
                (
                    q(
                        f"sum by (reason) (increase({SCHED}_rejections_total[{RATE}]))",
                        "{{reason}}",
                        "reason",
                    ),
                ),
            ),
        ),
    ),
    Section(
        "Jobs",
        (
            Panel(
                "Jobs ended, by final state (totals, restored from the journal)",
                (q(f"sum by (state) ({SCHED}_jobs_finished_total)", "{{state}}", "state"),),
                kind="stat",
                width=6,
            ),
            Panel(
                "Job wait and response, p50 / p90 (cluster seconds, all jobs)",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le) "
                        f"(accordion_job_{what}_cluster_seconds_bucket))",
                        f"{what} p{int(p * 100)}",
                    )
                    for what in ("wait", "response")
                    for p in (0.5, 0.9)
                ),
                unit="s",
                width=9,
            ),
            Panel(
                "Bounded slowdown p50 / p90, by size class",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le, size) "
                        "(accordion_job_bounded_slowdown_bucket))",
                        f"{{{{size}}}} p{int(p * 100)}",
                        "size",
                    )
                    for p in (0.5, 0.9)
                ),
                width=9,
            ),
            Panel(
                "Response time distribution (cluster seconds, jobs per bucket)",
                (
                    q(
                        "sum by (le) (accordion_job_response_cluster_seconds_bucket)",
                        "{{le}}",
                        "le",
                    ),
                ),
                kind="bargauge",
                width=12,
            ),
            Panel(
                "Mean wait, by policy and size class (cluster seconds)",
                (
                    q(
                        "sum by (policy, size) (accordion_job_wait_cluster_seconds_sum) / "
                        "sum by (policy, size) (accordion_job_wait_cluster_seconds_count)",
                        "{{policy}} {{size}}",
                        "policy",
                        "size",
                    ),
                ),
                unit="s",
                width=12,
            ),
        ),
    ),
    Section(
        "Decisions",
        (
            Panel(
                "Policy",
                (q(f"{SCHED}_policy_info", "{{policy}}", "policy"),),
                kind="stat",
                width=4,
            ),
            Panel(
                "Decision time p50 / p99 (wall seconds, since start)",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le) "
                        f"({SCHED}_decision_wall_seconds_bucket))",
                        f"p{int(p * 100)}",
                    )
                    for p in (0.5, 0.99)
                ),
                unit="s",
                width=7,
            ),
            Panel(
                "Decision time p99 over 5 m (wall seconds; no data while idle)",
                (
                    q(
                        f"histogram_quantile(0.99, sum by (le) "
                        f"(rate({SCHED}_decision_wall_seconds_bucket[5m]))) "
                        f"and on() (sum(increase({SCHED}_decision_wall_seconds_count[5m])) > 0)",
                        "p99",
                        may_be_empty="no decision in the last 5 minutes",
                    ),
                ),
                unit="s",
                width=7,
            ),
            Panel(
                "Decisions per second",
                (q(f"sum(rate({SCHED}_decision_wall_seconds_count[{RATE}]))", "decisions/s"),),
                width=6,
            ),
        ),
    ),
    Section(
        "Agents",
        (
            Panel(
                "Agent targets scraped, by class",
                (q('count by (class) (up{job="agents"} == 1)', "{{class}}", "class"),),
                kind="stat",
                width=6,
            ),
            Panel(
                "Busy CPUs per agent (agent's view)",
                (q("accordion_agent_cpus_busy", "{{agent}}", "agent"),),
                width=9,
            ),
            Panel(
                "Process CPU (scheduler and agents)",
                (
                    q(
                        f'rate(process_cpu_seconds_total{{job=~"scheduler|agents"}}[{RATE}])',
                        "{{job}} {{instance}}",
                        "job",
                        "instance",
                    ),
                ),
                unit="percentunit",
                width=9,
            ),
        ),
    ),
    Section(
        "Malleability",
        (
            Panel(
                "CPUs per running job",
                (
                    q(
                        f"{SCHED}_running_job_cpus",
                        "{{job}}",
                        "job",
                        may_be_empty="no job running",
                    ),
                ),
            ),
            Panel(
                "MPL per running job (processes per CPU)",
                (
                    q(
                        f"{SCHED}_running_job_procs / {SCHED}_running_job_cpus",
                        "{{job}}",
                        "job",
                        may_be_empty="no job running",
                    ),
                ),
            ),
            Panel(
                "Resizes, by direction",
                (
                    q(
                        f"sum by (direction) (increase(accordion_job_resizes_total[{RATE}]))",
                        "{{direction}}",
                        "direction",
                        may_be_empty="accordion_job_resizes_total comes with the malleable "
                        "runtime; absent before its first resize",
                    ),
                ),
            ),
        ),
    ),
    Section(
        "Faults",
        (
            Panel(
                "Fault totals (restored from the journal)",
                (
                    q(f"sum({SCHED}_agents_lost_total)", "agent losses"),
                    q(f"sum({SCHED}_requeues_total)", "requeues"),
                    q(f"sum({SCHED}_rejections_total)", "rejections"),
                    q(f"sum({SCHED}_bad_messages_total)", "bad messages"),
                ),
                kind="stat",
                description="Since the journal began: a scheduler restart restores "
                "these counts instead of starting them at zero.",
                width=6,
            ),
            Panel(
                "Agent losses, by how they were noticed",
                (
                    q(
                        f"sum by (reason) (increase({SCHED}_agents_lost_total[{RATE}]))",
                        "{{reason}}",
                        "reason",
                    ),
                ),
                width=6,
            ),
            Panel(
                "Requeues, suspect agents, stale reports",
                (
                    q(f"increase({SCHED}_requeues_total[{RATE}])", "requeues"),
                    q(f"increase({SCHED}_agents_suspect_total[{RATE}])", "suspect"),
                    q(f"increase({SCHED}_stale_reports_total[{RATE}])", "stale reports"),
                ),
                width=6,
            ),
            Panel(
                "Bad messages, by reason",
                (
                    q(
                        f"sum by (reason) (increase({SCHED}_bad_messages_total[{RATE}]))",
                        "{{reason}}",
                        "reason",
                    ),
                ),
                width=6,
            ),
        ),
    ),
)


def queries() -> list[tuple[str, Query]]:
    """Every panel's queries, with the panel's title."""
    return [(p.title, query) for s in SECTIONS for p in s.panels for query in p.queries]


def for_prometheus(expr: str, *, rate_interval: str = "1m", range_: str = "5m") -> str:
    """``expr`` with Grafana's template variables replaced, for a bare Prometheus."""
    return expr.replace("$__rate_interval", rate_interval).replace("$__range", range_)


def _targets(panel: Panel) -> list[Dataquery]:
    return [
        Dataquery()
        .expr(query.expr)
        .legend_format(query.legend)
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        for i, query in enumerate(panel.queries)
    ]


def _panel(panel: Panel) -> stat.Panel | timeseries.Panel | bargauge.Panel:
    built: stat.Panel | timeseries.Panel | bargauge.Panel
    if panel.kind == "stat":
        built = stat.Panel().reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
    elif panel.kind == "bargauge":
        built = bargauge.Panel().reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
    elif panel.kind == "timeseries":
        built = timeseries.Panel()
    else:
        raise ValueError(f"unknown panel kind {panel.kind!r}")
    built = built.title(panel.title).unit(panel.unit).span(panel.width).height(7)
    built = built.datasource(DATASOURCE)
    if panel.description:
        built = built.description(panel.description)
    for target in _targets(panel):
        built = built.with_target(target)
    return built


def dashboard() -> Dashboard:
    board = (
        Dashboard("accordion")
        .uid(UID)
        .tags(["accordion", "generated"])
        .description("Generated by `python -m deploy.grafana.dashboards`; do not edit the JSON.")
        .refresh("5s")
        .time("now-15m", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
    )
    for section in SECTIONS:
        board = board.with_row(Row(section.title))
        for panel in section.panels:
            board = board.with_panel(_panel(panel))
    return board


def render() -> str:
    """The dashboard's JSON, as committed (sorted keys, two-space indent, newline)."""
    built = dashboard().build()
    text = JSONEncoder(sort_keys=True, indent=2).encode(built)
    return json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.grafana.dashboards", description=__doc__
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--output", type=Path, default=DASHBOARD)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} is stale: run python -m deploy.grafana.dashboards", file=sys.stderr
            )
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
