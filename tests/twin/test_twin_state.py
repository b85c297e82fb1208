"""A replay cut at an instant and resumed from its state gives the rest of that replay.

``twin.state``: the what-if's exactness check. A snapshot taken from a twin run
at time t, replayed forward with the true run times (and the jobs submitted
after t), gives job by job the run it was cut from: every start, end, part and segment
with its machines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accordion.experiments.runs import load_workload
from model.job import Job
from model.machine import Machine
from model.outcome import JobOutcome
from scheduler.policies.registry import build_policy
from tests.scheduler.planning.test_prediction import _random_jobs
from twin.simulate import simulate

KTH = "KTH-SP2-1996-2.1-cln.swf.gz"


def by_job(outcomes: list[JobOutcome]) -> dict[str, tuple[object, ...]]:
    # ``placements``: each segment's machines too, which equality leaves out.
    return {
        o.job.id: (o.start, o.end, o.parts, o.placements(), o.expanded_runtime) for o in outcomes
    }


def cut_and_resume(
    jobs: list[Job], machines: list[Machine] | tuple[Machine, ...], spec: str, cut: float
) -> tuple[dict[str, tuple[object, ...]], int, int]:
    """The outcomes of the run cut at ``cut`` and resumed, and how many jobs were
    running and queued at the cut."""
    first = simulate(jobs, machines=machines, policy=build_policy(spec), stop_at=cut)
    state = first.state
    assert state is not None
    assert state.now <= cut
    later = [j for j in jobs if j.submit > state.now]
    rest = simulate(later, machines=machines, policy=build_policy(spec), resume=state)
    outcomes = by_job(first.outcomes)
    resumed = by_job(rest.outcomes)
    assert not outcomes.keys() & resumed.keys()
    return outcomes | resumed, len(state.running), len(state.queue)


@pytest.mark.slow
def test_kth_sp2_cut_at_five_instants_resumes_job_by_job(pwa: Path) -> None:
    workload = load_workload(pwa / KTH, cluster=None)
    jobs = workload.jobs
    whole = by_job(simulate(jobs, machines=workload.machines, policy=build_policy("easy")).outcomes)
    span = jobs[-1].submit - jobs[0].submit
    busy = 0
    for k in range(1, 6):
        cut = jobs[0].submit + span * k / 6
        resumed, running, queued = cut_and_resume(jobs, workload.machines, "easy", cut)
        assert resumed == whole, f"cut at {cut}"
        busy += running + queued > 0
    assert busy == 5  # every cut had jobs running or waiting: the state was not empty


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["conservative", "fcfs-malleable", "easy:fairshare"])
def test_kth_sp2_window_other_policies(pwa: Path, spec: str) -> None:
    workload = load_workload(pwa / KTH, cluster=None, jobs=3000)
    jobs = workload.jobs
    whole = by_job(simulate(jobs, machines=workload.machines, policy=build_policy(spec)).outcomes)
    span = jobs[-1].submit - jobs[0].submit
    for k in (1, 3, 5):
        cut = jobs[0].submit + span * k / 6
        resumed, _, _ = cut_and_resume(jobs, workload.machines, spec, cut)
        if spec == "easy:fairshare":
            # The state carries no usage ledger: fair-share restarts from no past use.
            assert resumed.keys() == whole.keys()
        else:
            assert resumed == whole, f"{spec}, cut at {cut}"


@pytest.mark.parametrize("spec", ["easy", "conservative", "fcfs-malleable", "eg-edf"])
def test_heterogeneous_machines_and_wakes(spec: str) -> None:
    machines = [Machine(id="a", cpus=16, speed=1.0), Machine(id="b", cpus=16, speed=2.0)]
    jobs = _random_jobs(11, 250, 16)
    whole = by_job(simulate(jobs, machines=machines, policy=build_policy(spec)).outcomes)
    for cut in (500.0, 1700.0, 3100.0):
        resumed, _, _ = cut_and_resume(jobs, machines, spec, cut)
        assert resumed == whole, f"{spec}, cut at {cut}"
