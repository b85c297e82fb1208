"""A job long past its estimate must not pin a wide job's reservation at "now".

The cause of Flexible backfilling's starvation on SDSC DataStar
(``docs/results/README.md``, section 5): job 10226 held 128 CPUs for 76 days
past its 1,200 s estimate, and every planner counted those CPUs free "now".
A 1,280-CPU job at the head then got a reservation at ``now`` at every event,
which the CPUs never honoured; only the CPUs beyond the reservation's could
be backfilled, so 1,152 CPUs sat idle for 22 days while 800 jobs waited.

The workload here is that situation in small: a 16-CPU machine, one job that
asked for 100 s and runs 100,000 s on 4 CPUs, a steady stream of one-CPU jobs
that keeps about six CPUs busy and a queue growing behind them, and a
10-CPU job arriving at 1,000 s. Without the overdue job's CPUs the machine
has 12 for the wide job, so it need not wait for it: it waits only for the
small jobs running when it arrives, whose estimates are 600 s. Before the
rule of ``scheduler.planning.overdue`` the wide job waited until the overdue
job ended, 99,000 s later, under EASY, Flexible, DPSA and conservative
backfilling, and EG-EDF, with CPUs idle all along.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accordion.experiments.runs import Variation, load_workload
from bench.replay.idle_while_waiting import DAY, Placed, longest_idle_while_waiting
from model.job import Job
from model.machine import Machine
from scheduler.core.snapshot import Policy
from scheduler.policies.registry import build_policy
from twin.simulate import SimulationResult, simulate
from workload.deadlines import DeadlineRule

MACHINE = Machine(id="m", cpus=16)
OVERDUE_RUN = 100_000.0
SMALL_ESTIMATE = 600.0
WIDE_SUBMIT = 1_000.0


def workload() -> list[Job]:
    jobs = [Job(id="overdue", submit=0.0, procs=4, walltime=100.0, runtime=OVERDUE_RUN)]
    # One-CPU jobs every 40 s, each running 300 s of a 600 s estimate: 7.5 CPUs of
    # work for the 6 CPUs the old rule left them, so the queue never drains.
    t = 0.0
    k = 0
    while t < OVERDUE_RUN:
        jobs.append(Job(id=f"s{k:05d}", submit=t, procs=1, walltime=SMALL_ESTIMATE, runtime=300.0))
        k += 1
        t += 40.0
    jobs.append(Job(id="wide", submit=WIDE_SUBMIT, procs=10, walltime=2_000.0, runtime=1_000.0))
    return sorted(jobs, key=lambda j: (j.submit, j.id))


POLICIES = ["easy", "flexible", "dpsa-n", "conservative", "eg-edf", "eg-edf-tabu"]


@pytest.mark.parametrize("spec", POLICIES)
def test_a_wide_job_does_not_wait_for_a_long_overdue_job_it_does_not_need(spec: str) -> None:
    policy: Policy = build_policy(spec)
    result = simulate(workload(), machines=[MACHINE], policy=policy)
    out = {o.job.id: o for o in result.outcomes}
    wide, overdue = out["wide"], out["overdue"]
    assert overdue.end == OVERDUE_RUN
    # It waits for the small jobs running when it came (600 s estimates), not for
    # the overdue job: on the old rule it started at 100,000 s.
    assert wide.wait <= SMALL_ESTIMATE, (spec, wide.start)
    assert wide.start < overdue.end


def longest_idle(result: SimulationResult) -> float:
    span = longest_idle_while_waiting(
        (Placed(o.job.submit, o.start, o.end, o.job.procs, o.max_cpus) for o in result.outcomes),
        result.total_cpus,
    )
    return 0.0 if span is None else span.length


@pytest.mark.parametrize("spec", POLICIES)
def test_no_cpus_sit_idle_for_long_while_a_job_that_fits_waits(spec: str) -> None:
    result = simulate(workload(), machines=[MACHINE], policy=build_policy(spec))
    # Free CPUs may wait for the wide job's reservation, at most for the estimates
    # of the jobs it waits on; on the old rule they waited 99,000 s.
    assert longest_idle(result) <= SMALL_ESTIMATE, spec


@pytest.mark.slow
def test_flexible_on_sdsc_datastar_waits_as_easy_does(pwa: Path) -> None:
    """The report's command: the first 15,000 jobs, 70 % deadlines (seed 0).

    Before the rule: Flexible's mean wait was 86,471 s against EASY's 4,712 s,
    and CPUs sat idle for 21 days (EASY: 1.4 days) while jobs that fit waited.
    """
    loaded = load_workload(
        pwa / "SDSC-DS-2004-2.1-cln.swf.gz",
        cluster=None,
        jobs=15_000,
        variation=Variation(deadlines=DeadlineRule(share=0.7)),
    )
    results = {
        spec: simulate(loaded.jobs, machines=loaded.machines, policy=build_policy(spec))
        for spec in ("easy", "flexible")
    }
    mean_wait = {
        spec: sum(o.wait for o in r.outcomes) / len(r.outcomes) for spec, r in results.items()
    }
    assert mean_wait["flexible"] <= 1.5 * mean_wait["easy"], mean_wait
    for spec, r in results.items():
        assert longest_idle(r) <= DAY, spec
        # The three wide jobs the report named start long before job 10226 ends.
        out = {o.job.id: o for o in r.outcomes}
        assert all(out[i].start < out["10226"].end - DAY for i in ("12633", "12636", "12641"))
