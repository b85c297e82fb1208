"""Every dashboard query, evaluated by a real Prometheus scraping a live local cluster.

A real ``prometheus`` (Debian's package; scripts/setup installs it) scrapes a
real scheduler and three agents (``accordion.cluster.local_cluster.LocalCluster``, OS
processes on the session's Mosquitto) every second while a short workload
runs and one agent is SIGKILLed with a job on it (the job is requeued and
finishes elsewhere). Once Prometheus has scraped the final totals (waited for
through its API, not a sleep), each query of ``deploy.grafana.dashboards`` is
evaluated instant and over the run's range, with Grafana's variables
replaced, and its answer must have the declared shape: a vector (matrix) that
is non-empty unless the panel says why it may be, every series carrying the
declared labels, and no NaN in an instant answer.

This is how the committed dashboard was checked: Grafana itself has no
offline image here and never rendered it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accordion.client.live_client import connect, run_async
from accordion.cluster.local_cluster import LocalCluster
from broker.local import free_port
from model.machine import Machine
from scheduler.runtime.journal import Journal
from tests.builders import spec
from tests.deploy.prometheus_tools import prometheus_tool
from tests.integration.conftest import BrokerEndpoint
from workload.cluster import ClusterSpec

dashboards = pytest.importorskip("deploy.grafana.dashboards", exc_type=ImportError)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BOUND = 120.0  # wall seconds any one wait may take before it is a failure
JOBS = 12


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def value(self, expr: str) -> float | None:
        result = self.api("query", query=expr)["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr: str, want: float) -> None:
        deadline = time.monotonic() + BOUND
        while self.value(expr) != want:
            assert self.process.poll() is None, "prometheus exited"
            assert time.monotonic() < deadline, f"{expr} never reached {want}"
            time.sleep(0.2)  # polling an HTTP API: the wait is for the value above


def host_port(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def start_prometheus(cluster: LocalCluster, workdir: Path) -> Prometheus:
    port = free_port()
    classes = {"big": "big", "fast": "fast", "old": "old"}
    agent_targets = [
        {"targets": [host_port(url)], "labels": {"class": classes[name.split("-")[0]]}}
        for name, url in cluster.agent_metrics.items()
    ]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "scheduler",
                "static_configs": [{"targets": [host_port(cluster.scheduler_metrics)]}],
            },
            {"job_name": "agents", "static_configs": agent_targets},
        ],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    with (workdir / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                prometheus_tool("prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + BOUND
    while True:
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return prom
        except OSError:
            pass
        assert process.poll() is None, (workdir / "prometheus.log").read_text()
        assert time.monotonic() < deadline, "prometheus never became ready"
        time.sleep(0.2)  # polling its readiness endpoint


def cluster_spec(tag: str) -> ClusterSpec:
    return ClusterSpec(
        name=f"dash-{tag}",
        reference_speed=1.0,
        machines=(
            Machine(id=f"big-{tag}", cpus=4, speed=1.0),
            Machine(id=f"fast-{tag}", cpus=2, speed=2.0),
            Machine(id=f"old-{tag}", cpus=2, speed=0.5),
        ),
    )


@dataclass
class Run:
    prometheus: Prometheus
    start: float
    end: float
    killed: str
    #: Jobs running on the killed agent (each requeued once).
    requeued: int
    journal: Path


async def _workload(cluster: LocalCluster) -> tuple[str, int]:
    """Submit the jobs, SIGKILL the agent of a running job, wait for every job to end."""
    async with connect(cluster.broker_url, cluster.root, timeout=10.0) as client:
        await cluster.ready(client, timeout=BOUND)
        specs = [
            spec(f"d{i}", 1 + i % 3, walltime=200.0, work=20.0 + 5 * (i % 4)) for i in range(JOBS)
        ]
        reply = await client.submit(specs)
        assert all(r.accepted for r in reply.results), reply
        deadline = time.monotonic() + BOUND
        victim = ""
        while not victim:
            status = await client.status()
            machines = {p.machine for job in status.running for p in job.parts}
            victim = next((m for m in sorted(machines) if not m.startswith("big")), "")
            assert time.monotonic() < deadline, "no job ever ran off the big machine"
            await asyncio.sleep(0.05)
        on_victim = sum(any(p.machine == victim for p in j.parts) for j in status.running)
        pid = next(e.pid for e in cluster.endpoints() if e.name == f"agent-{victim}")
        os.kill(pid, signal.SIGKILL)
        while True:
            status = await client.status()
            if not status.queue and not status.running:
                return victim, on_victim
            assert time.monotonic() < deadline, f"jobs left: {status}"
            await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def run(mosquitto: BrokerEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("dashboard")
    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(
        cluster_spec(tag),
        workdir / "cluster",
        policy="easy",
        time_scale=10.0,
        broker_url=mosquitto.url,
        root=f"dash-{tag}/v1",
        heartbeat=0.5,
    )
    with cluster:
        prom = start_prometheus(cluster, workdir)
        try:
            # Every target scraped once before the first job, so rates span the run.
            prom.wait_for('count(up{job=~"scheduler|agents"} == 1)', 4.0)
            start = time.time()
            killed, requeued = run_async(_workload(cluster))
            # Prometheus has scraped the final totals: every job finished, the loss counted.
            prom.wait_for('accordion_scheduler_jobs_finished_total{state="finished"}', float(JOBS))
            prom.wait_for('accordion_scheduler_agents_lost_total{reason="will"}', 1.0)
            prom.wait_for("accordion_scheduler_running_jobs", 0.0)
            yield Run(prom, start, time.time(), killed, requeued, cluster.journal)
        finally:
            prom.process.terminate()
            prom.process.wait(timeout=30)


def shape(title: str, query: Any, result: dict[str, Any], *, instant: bool) -> None:
    kind = "vector" if instant else "matrix"
    assert result["resultType"] == kind, (title, query.expr, result["resultType"])
    series = result["result"]
    if not query.may_be_empty:
        assert series, f"{title}: {query.expr} returned no data"
    for one in series:
        missing = query.labels - set(one["metric"])
        assert not missing, f"{title}: {query.expr} lacks labels {missing}: {one['metric']}"
        values = [one["value"]] if instant else one["values"]
        assert values, (title, query.expr)
        if instant:
            assert not math.isnan(float(values[0][1])), f"{title}: {query.expr} is NaN"


def test_every_panel_query_answers_instant_with_the_declared_shape(run: Run) -> None:
    for title, query in dashboards.queries():
        expr = dashboards.for_prometheus(query.expr)
        shape(title, query, run.prometheus.api("query", query=expr), instant=True)


def test_every_panel_query_answers_over_the_run_with_the_declared_shape(run: Run) -> None:
    for title, query in dashboards.queries():
        expr = dashboards.for_prometheus(query.expr)
        result = run.prometheus.api(
            "query_range",
            query=expr,
            start=f"{run.start:.3f}",
            end=f"{run.end:.3f}",
            step="1",
        )
        shape(title, query, result, instant=False)


def test_the_panels_show_what_happened(run: Run) -> None:
    prom = run.prometheus
    ended = {
        r["metric"]["state"]: float(r["value"][1])
        for r in prom.api(
            "query", query="sum by (state) (accordion_scheduler_jobs_finished_total)"
        )["result"]
    }
    assert ended == {"finished": JOBS, "failed": 0, "cancelled": 0}
    assert prom.value("sum(accordion_job_response_cluster_seconds_count)") == JOBS
    # Each job on the killed agent was requeued once (one may have ended just before
    # the kill), and Prometheus counts what the journal says.
    with Journal(run.journal) as journal:
        journalled = sum(j.requeues for j in journal.load().jobs)
        totals = journal.totals()
    assert 1 <= journalled <= run.requeued
    assert prom.value("accordion_scheduler_requeues_total") == journalled
    # The loss is in the journal's totals too, as served (what a restart restores).
    lost = totals[("accordion_scheduler_agents_lost", (("reason", "will"),))]
    assert prom.value('accordion_scheduler_agents_lost_total{reason="will"}') == lost == 1
    assert prom.value('count(up{job="agents"} == 1)') == 2  # the killed one is down
    # The machine-class labels of the agents' targets reach the per-class panel.
    classes = prom.api("query", query='count by (class) (up{job="agents"})')["result"]
    assert {c["metric"]["class"] for c in classes} == {"big", "fast", "old"}
