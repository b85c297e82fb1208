"""One rule for a job too wide to ever run: one message, one code, in the twin and live alike.

The live scheduler's admission asks the same rule through ``SchedulerCore.submit``
with the cluster as configured (``tests/scheduler/runtime/test_actor_capacity.py``).
"""

from __future__ import annotations

from collections import Counter

from model.machine import Machine
from scheduler.core.answers import too_wide
from scheduler.core.core import Accepted, RejectCode, Rejected, SchedulerCore
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fcfs_malleable import FcfsMalleable
from tests.builders import job
from twin.simulate import simulate

MACHINES = [Machine(id="m1", cpus=4), Machine(id="m2", cpus=4)]


def wide_reason(needed: int, procs: int, capacity: int) -> str:
    return (
        f"job needs {needed} CPUs for its {procs} processes, the cluster as configured "
        f"has {capacity} (every machine registered and not retired)"
    )


def test_a_job_wider_than_the_cluster_is_rejected_with_its_code() -> None:
    core = SchedulerCore(policy=Fcfs(), machines=MACHINES)
    assert core.submit(job("wide", 9, runtime=10)) == Rejected(
        "wide", RejectCode.TOO_WIDE, wide_reason(9, 9, 8)
    )
    assert core.submit(job("fits", 8, runtime=10)) == Accepted("fits")
    assert core.state_of("wide") is None  # never queued


def test_a_capacity_given_is_the_cluster_as_configured() -> None:
    core = SchedulerCore(policy=Fcfs(), machines=MACHINES[:1])
    # Wider than the machines held now, not than the cluster as configured: it waits.
    assert core.submit(job("waits", 8, runtime=10), capacity=8) == Accepted("waits")
    refused = core.submit(job("never", 9, runtime=10), capacity=8)
    assert refused == too_wide(job("never", 9, runtime=10), 9, 8)
    assert refused is not None
    assert (refused.code, refused.reason) == (RejectCode.TOO_WIDE, wide_reason(9, 9, 8))


def test_under_a_folding_policy_a_malleable_job_needs_half_its_processes() -> None:
    core = SchedulerCore(policy=FcfsMalleable(), machines=MACHINES)
    assert core.submit(job("folds", 16, runtime=10, malleable=True)) == Accepted("folds")
    refused = core.submit(job("too", 17, runtime=10, malleable=True))
    assert isinstance(refused, Rejected)
    assert refused.reason == wide_reason(9, 17, 8)
    rigid = core.submit(job("rigid", 9, runtime=10, malleable=False))
    assert isinstance(rigid, Rejected)
    assert rigid.reason == wide_reason(9, 9, 8)


def test_an_id_reused_by_another_job_has_its_own_code() -> None:
    core = SchedulerCore(policy=Fcfs(), machines=MACHINES)
    core.submit(job("a", 1, runtime=10))
    assert core.submit(job("a", 1, runtime=10)) == Accepted("a", duplicate=True)
    other = core.submit(job("a", 2, runtime=10))
    assert isinstance(other, Rejected)
    assert other.code is RejectCode.ID_REUSED


def test_the_twin_counts_its_rejections_by_code() -> None:
    jobs = [
        job("ok", 2, runtime=10),
        job("w9", 9, runtime=10, submit=1),
        job("w17", 17, runtime=10, submit=2),
    ]
    result = simulate(jobs, machines=MACHINES, policy=Fcfs())
    # One bounded label, whatever the jobs' sizes (a label per message would be two).
    assert result.rejected == Counter({"too_wide": 2})
    assert [o.job.id for o in result.outcomes] == ["ok"]
