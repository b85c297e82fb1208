"""FCFS-malleable live: a real scheduler and two real agents on Mosquitto.

The cluster (``two_agents``: slow, 4 CPUs at speed 1; fast, 2 CPUs at speed 2;
time scale 10) runs the sleep workload. R (rigid, 2 processes) goes to the
fast machine, A (malleable, 4) fills the slow one. B (malleable, 2) then finds
no free CPU: R is rigid, so A shrinks 4 -> 2 and B starts beside it; when B
ends the queue is empty and A expands back to 4. Watched, shown by status,
counted by the metric and journalled; R is never resized.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accordion.cluster.local_cluster import LocalCluster
from model.machine import Part
from scheduler.runtime.journal import Journal
from tests.accordion.live.cli_harness import cli, status_of, wait_until, watching
from tests.accordion.live.conftest import local_cluster
from tests.integration.conftest import BrokerEndpoint

pytestmark = pytest.mark.integration


def cpus_of(cluster: LocalCluster, job_id: str) -> int | None:
    for j in status_of(cluster).running:
        if j.id == job_id:
            return sum(p.cpus for p in j.parts)
    return None


def resizes(cluster: LocalCluster) -> dict[str, float]:
    with urllib.request.urlopen(cluster.scheduler_metrics, timeout=5) as response:
        text = response.read().decode()
    return {
        s.labels["direction"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "accordion_job_resizes"
        for s in f.samples
        if s.name == "accordion_job_resizes_total"
    }


@pytest.fixture(scope="module")
def cluster(
    mosquitto: BrokerEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    with local_cluster(
        mosquitto, tmp_path_factory.mktemp("mall"), time_scale=10.0, policy="fcfs-malleable"
    ) as c:
        yield c


def test_a_shrink_and_an_expand_live(cluster: LocalCluster) -> None:
    slow, fast = (m.id for m in cluster.spec.machines)
    assert resizes(cluster) == {"shrink": 0.0, "expand": 0.0}
    # R and A running, A shrunk, B running and finished, A expanded: 6 events.
    with watching(cluster, events=6, seconds=120) as watcher:
        for args in (
            ("-n", "2", "-t", "3600", "--rigid", "--id", "R"),
            ("-n", "4", "-t", "3600", "--id", "A"),
        ):
            assert cli(cluster, "submit", *args).exit_code == 0
        wait_until(lambda: cpus_of(cluster, "A") == 4 and cpus_of(cluster, "R") == 2)
        # 60 cluster seconds of work at MPL 1 on the slow machine: 6 s of wall time.
        assert (
            cli(cluster, "submit", "-n", "2", "-t", "600", "--work", "60", "--id", "B").exit_code
            == 0
        )
        wait_until(lambda: cpus_of(cluster, "A") == 2)
        shown = cli(cluster, "status")
        assert shown.exit_code == 0, shown.output
        rows = {
            cells[0]: cells
            for line in shown.stdout.splitlines()
            if len(cells := [c.strip() for c in line.split("│")[1:-1]]) == 9
        }
        # job, user, procs, CPUs, MPL, ...: A runs shrunk at MPL 2, R and B expanded.
        assert rows["A"][2:5] == ["4", "2", "2.00"], shown.stdout
        assert rows["R"][2:5] == ["2", "2", "1.00"], shown.stdout
        assert rows["B"][2:5] == ["2", "2", "1.00"], shown.stdout
        wait_until(lambda: cpus_of(cluster, "A") == 4)
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    lines = [line for line in out.splitlines() if "resized" in line]
    assert len(lines) == 2, out
    assert "job A  resized  shrunk 4 -> 2 CPUs, MPL 2.00" in lines[0]
    assert "job A  resized  expanded 2 -> 4 CPUs, MPL 1.00" in lines[1]
    assert resizes(cluster) == {"shrink": 1.0, "expand": 1.0}
    with Journal(cluster.journal) as journal:
        resized = [e for e in journal.history() if e.kind == "resized"]
        seqs = [e.seq for e in journal.job_events(["A"])]
    assert [(e.job_id, e.before, e.parts) for e in resized] == [
        ("A", (Part(slow, 4),), (Part(slow, 2),)),
        ("A", (Part(slow, 2),), (Part(slow, 4),)),
    ]
    assert seqs == list(range(1, len(seqs) + 1))
    assert fast not in {p.machine for e in resized for p in e.parts}
    for job in ("A", "R"):
        assert cli(cluster, "cancel", job).exit_code == 0
    wait_until(lambda: not status_of(cluster).running)


def test_a_job_wider_than_the_cluster_but_not_shrunk_is_refused_when_rigid(
    cluster: LocalCluster,
) -> None:
    """Malleable, 8 processes fit 6 CPUs at MPL 2 (4 CPUs); rigid, they do not."""
    rigid = cli(cluster, "submit", "-n", "8", "-t", "60", "--rigid", "--id", "wide-rigid")
    assert rigid.exit_code == 1
    assert "needs 8 CPUs" in rigid.stderr
    wide = cli(cluster, "submit", "-n", "8", "-t", "20", "--id", "wide")
    assert wide.exit_code == 0, wide.output
    wait_until(lambda: cpus_of(cluster, "wide") is not None)
    assert cpus_of(cluster, "wide") in (4, 5, 6)
    wait_until(lambda: not status_of(cluster).running, timeout=60)
