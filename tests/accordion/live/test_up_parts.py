"""``accordion up``'s parts without processes: the demo plan, outcomes from a journal, parsers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from accordion.cluster.local_cluster import resolve_broker
from accordion.experiments.demo import (
    Resizes,
    decision_stats,
    demo_jobs,
    difference,
    nice_scale,
    outcomes_from_journal,
    plan_demo,
)
from broker.local import mosquitto_config
from model.machine import Part
from model.metrics import compute_metrics
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import Journal
from tests.builders import spec
from workload.cluster import load_cluster

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = load_cluster(ROOT / "examples" / "cluster.toml")


@pytest.mark.parametrize(
    ("value", "nice"), [(0.3, 1.0), (1.0, 1.0), (118.7, 120.0), (242.5, 240.0), (1234.0, 1200.0)]
)
def test_time_scales_are_rounded_to_two_digits(value: float, nice: float) -> None:
    assert nice_scale(value) == nice


def test_the_demo_workload_fits_and_compresses_to_the_wanted_wall_time() -> None:
    jobs = demo_jobs(CLUSTER, jobs=60, seed=1, single_machine=False)
    assert len(jobs) == 60
    assert max(j.procs for j in jobs) <= CLUSTER.total_cpus // 2
    assert all(240 <= (j.runtime or 0) <= 960 for j in jobs)
    plan = plan_demo(CLUSTER, jobs=60, seconds=40.0, seed=1)
    assert plan.twin.jobs == 60
    assert plan.twin.makespan / plan.time_scale == pytest.approx(40.0, rel=0.1)
    assert sum(len(a.jobs) for a in plan.arrivals) == 60
    assert all(s.id.startswith("demo-") for a in plan.arrivals for s in a.jobs)
    # The shortest job still runs about 2 s of wall time (longer than a process start).
    assert min(j.runtime or 0 for j in jobs) / plan.time_scale > 1.0
    fixed = plan_demo(CLUSTER, jobs=10, seconds=40.0, seed=1, time_scale=50.0)
    assert fixed.time_scale == 50.0


def test_single_machine_policies_get_jobs_that_fit_one_machine() -> None:
    jobs = demo_jobs(CLUSTER, jobs=60, seed=1, single_machine=True)
    assert max(j.procs for j in jobs) <= max(m.cpus for m in CLUSTER.machines)


def test_broker_choice() -> None:
    assert resolve_broker("embedded") == "embedded"
    assert resolve_broker("auto") in ("mosquitto", "embedded")
    conf = mosquitto_config(host="127.0.0.1", port=1234)
    for line in (
        "listener 1234 127.0.0.1",
        "set_tcp_nodelay true",
        "max_queued_messages 0",
        "persistence false",
    ):
        assert line in conf.splitlines()


SCRAPE = """\
# HELP accordion_scheduler_decision_wall_seconds Wall seconds of one policy decision.
# TYPE accordion_scheduler_decision_wall_seconds histogram
accordion_scheduler_decision_wall_seconds_bucket{le="0.0001"} 50.0
accordion_scheduler_decision_wall_seconds_bucket{le="0.00025"} 90.0
accordion_scheduler_decision_wall_seconds_bucket{le="0.0005"} 99.0
accordion_scheduler_decision_wall_seconds_bucket{le="0.001"} 100.0
accordion_scheduler_decision_wall_seconds_bucket{le="+Inf"} 100.0
accordion_scheduler_decision_wall_seconds_count 100.0
accordion_scheduler_decision_wall_seconds_sum 0.012
"""


def test_decision_times_come_from_the_histogram() -> None:
    stats = decision_stats(SCRAPE)
    assert stats.count == 100
    assert stats.mean_ms == pytest.approx(0.12)
    assert stats.p99_ms_at_most == pytest.approx(0.5)
    assert decision_stats("").count == 0


def test_differences() -> None:
    assert difference(107.0, 100.0) == pytest.approx(0.07)
    assert difference(1.0, 0.0) is None


def test_outcomes_are_rebuilt_from_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    speeds = {"a": 1.0, "b": 2.0}
    with Journal(path) as journal:
        journal.ensure_meta(epoch=0.0, time_scale=50.0, policy="fcfs-malleable")
        journal.record_submissions(
            [
                (spec("rigid", 2, work=100.0, walltime=200.0), 0.0),
                (spec("shrunk", 4, work=100.0, walltime=200.0), 5.0),
                (spec("requeued", 1, work=10.0, walltime=20.0), 5.0),
                (spec("failed", 1, work=10.0, walltime=20.0), 6.0),
                (spec("cancelled", 1, work=10.0, walltime=20.0), 6.0),
                (spec("queued", 1, work=10.0, walltime=20.0), 7.0),
            ]
        )
        journal.record_start("rigid", 10.0, [Part("a", 2)])
        journal.record_end("rigid", 110.0, JobState.FINISHED)
        # Started on b at MPL 1, shrunk to 2 CPUs at 30, expanded again at 50.
        journal.record_start("shrunk", 20.0, [Part("b", 4)])
        journal.record_parts("shrunk", 30.0, [Part("b", 2)])
        journal.record_parts("shrunk", 50.0, [Part("b", 4)])
        journal.record_end("shrunk", 80.0, JobState.FINISHED)
        # Lost its machine once: only the run after its last start counts.
        journal.record_start("requeued", 10.0, [Part("a", 1)])
        journal.record_requeue("requeued", 12.0, 1, "machine a lost")
        journal.record_start("requeued", 20.0, [Part("b", 1)])
        journal.record_end("requeued", 25.0, JobState.FINISHED)
        journal.record_start("failed", 8.0, [Part("a", 1)])
        journal.record_end("failed", 9.0, JobState.FAILED, "exit code 1")
        journal.record_end("cancelled", 9.0, JobState.CANCELLED)
        # The history, typed: what happened to one job, and to all, in order.
        assert [(e.at, e.kind, e.parts, e.detail) for e in journal.history("requeued")] == [
            (10.0, "started", (Part("a", 1),), None),
            (12.0, "requeued", (), "machine a lost"),
            (20.0, "started", (Part("b", 1),), None),
            (25.0, "finished", (), None),
        ]
        every = journal.history()
        assert len(every) == 13  # in the order written, not by time
        assert [e.kind for e in every if e.job_id == "shrunk"] == [
            "started",
            "resized",
            "resized",
            "finished",
        ]
        assert [e.detail for e in every if e.job_id == "failed"] == [None, "exit code 1"]
        assert journal.history("queued") == []
    read = outcomes_from_journal(path, speeds)
    assert read.time_scale == 50.0
    assert dict(read.states) == {"finished": 3, "failed": 1, "cancelled": 1, "queued": 1}
    assert read.resizes == Resizes(shrinks=1, expands=1)
    by_id = {o.job.id: o for o in read.outcomes}
    assert set(by_id) == {"rigid", "shrunk", "requeued", "failed"}
    rigid = by_id["rigid"]
    assert (rigid.job.submit, rigid.start, rigid.end, rigid.expanded_runtime) == (
        0.0,
        10.0,
        110.0,
        100.0,
    )
    shrunk = by_id["shrunk"]
    assert [(s.start, s.end, s.cpus) for s in shrunk.segments] == [
        (20.0, 30.0, 4),
        (30.0, 50.0, 2),
        (50.0, 80.0, 4),
    ]
    assert shrunk.parts == (Part("b", 4),)
    assert shrunk.expanded_runtime == 50.0  # 100 units at speed 2
    requeued = by_id["requeued"]
    assert (requeued.start, requeued.parts) == (20.0, (Part("b", 1),))
    assert by_id["failed"].failed
    metrics = compute_metrics(read.outcomes, total_cpus=6, time_base="cluster seconds")
    assert metrics.jobs == 4
    assert metrics.failed == 1
    assert math.isclose(metrics.wait_mean, (10 + 15 + 15 + 2) / 4)


def test_a_journal_without_meta_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    Journal(path).close()
    with pytest.raises(RuntimeError, match="no journal meta"):
        outcomes_from_journal(path, {})
