"""Rigid jobs drawn by a seeded per-job coin (``workload.rigidity``)."""

from __future__ import annotations

import pytest

from model.job import Job
from tests.builders import job
from workload.rigidity import RigidRule, mark_rigid


def jobs(n: int) -> list[Job]:
    return [job(str(i), 4, submit=float(i), walltime=10.0, runtime=None) for i in range(n)]


def test_jobs_are_malleable_by_default() -> None:
    assert all(j.malleable for j in jobs(10))
    assert jobs(1)[0].min_cpus == 2


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5])
def test_about_the_share_is_rigid(share: float) -> None:
    out = mark_rigid(jobs(4000), RigidRule(share=share, seed=1))
    rigid = sum(not j.malleable for j in out)
    # A binomial count: 4 standard deviations either side.
    sd = (4000 * share * (1 - share)) ** 0.5
    assert abs(rigid - 4000 * share) < 4 * sd
    assert all(j.min_cpus == (j.procs if not j.malleable else 2) for j in out)


def test_a_prefix_agrees_with_the_whole_and_seeds_differ() -> None:
    rule = RigidRule(share=0.3, seed=7)
    whole = mark_rigid(jobs(500), rule)
    assert mark_rigid(jobs(100), rule) == whole[:100]
    other = mark_rigid(jobs(500), RigidRule(share=0.3, seed=8))
    assert [j.malleable for j in other] != [j.malleable for j in whole]


def test_edges_and_a_bad_share() -> None:
    assert all(j.malleable for j in mark_rigid(jobs(50), RigidRule(share=0.0)))
    assert not any(j.malleable for j in mark_rigid(jobs(50), RigidRule(share=1.0)))
    with pytest.raises(ValueError, match="rigid share"):
        RigidRule(share=1.5)
