"""Seeded deadlines for traces (workload.deadlines)."""

from __future__ import annotations

import hashlib
import random
import statistics
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from tests.builders import job
from workload.deadlines import (
    DEFAULT_SHARE,
    DEFAULT_SLACK_MAX,
    DEFAULT_SLACK_MIN,
    DeadlineRule,
    assign_deadlines,
)


def trace(n: int, *, seed: int = 1) -> list[Job]:
    """``n`` trace-like jobs: ids are job numbers, estimates above run times."""
    rng = random.Random(seed)
    jobs = []
    submit = 0.0
    for i in range(n):
        submit += rng.expovariate(1 / 60)
        runtime = float(rng.randint(0, 20000))
        jobs.append(
            job(
                str(i + 1),
                rng.randint(1, 64),
                submit=submit,
                runtime=runtime,
                walltime=max(1.0, runtime * rng.uniform(1.0, 5.0)),
            )
        )
    return jobs


TRACE = trace(10_000)


def deadlines(jobs: Sequence[Job]) -> dict[str, float | None]:
    return {j.id: j.deadline for j in jobs}


def test_defaults() -> None:
    rule = DeadlineRule()
    assert (rule.share, rule.slack_min, rule.slack_max) == (0.7, 1.5, 4.0)
    assert (DEFAULT_SHARE, DEFAULT_SLACK_MIN, DEFAULT_SLACK_MAX) == (0.7, 1.5, 4.0)
    assert rule.estimate == "walltime"
    assert rule.seed == 0


def test_share_is_respected_on_ten_thousand_jobs() -> None:
    for share in (0.7, 0.3, 0.95):
        out = assign_deadlines(TRACE, DeadlineRule(share=share))
        got = sum(j.deadline is not None for j in out) / len(out)
        # Binomial sd at 10k jobs is at most 0.005: 0.02 is four of them.
        assert got == pytest.approx(share, abs=0.02)


def test_slack_is_uniform_over_its_range() -> None:
    rule = DeadlineRule()
    slacks = [
        (j.deadline - j.submit) / j.walltime
        for j in assign_deadlines(TRACE, rule)
        if j.deadline is not None
    ]
    assert min(slacks) >= 1.5
    assert max(slacks) <= 4.0
    assert statistics.fmean(slacks) == pytest.approx(2.75, abs=0.05)
    # A quarter of the range holds about a quarter of the draws.
    low = sum(s < 1.5 + 2.5 / 4 for s in slacks) / len(slacks)
    assert low == pytest.approx(0.25, abs=0.03)


def test_deadlines_at_least_submit_plus_slack_min_estimates() -> None:
    for rule in (DeadlineRule(), DeadlineRule(slack_min=1.0, slack_max=1.0, seed=7)):
        for j in assign_deadlines(TRACE, rule):
            if j.deadline is not None:
                assert j.deadline >= j.submit + j.walltime * rule.slack_min
                assert j.deadline <= j.submit + j.walltime * rule.slack_max


def test_deterministic_and_seeded() -> None:
    rule = DeadlineRule(seed=42)
    assert assign_deadlines(TRACE, rule) == assign_deadlines(TRACE, rule)
    other = assign_deadlines(TRACE, DeadlineRule(seed=43))
    assert deadlines(other) != deadlines(assign_deadlines(TRACE, rule))


def test_prefix_and_order_independence() -> None:
    full = assign_deadlines(TRACE)
    for n in (1, 10, 1234):
        assert assign_deadlines(TRACE[:n]) == full[:n]
    shuffled = list(TRACE)
    random.Random(5).shuffle(shuffled)
    assert deadlines(assign_deadlines(shuffled)) == deadlines(full)


def test_global_random_state_is_untouched() -> None:
    state = random.getstate()
    assign_deadlines(TRACE[:100])
    assert random.getstate() == state


def test_the_documented_rule_reproduced_independently() -> None:
    # The module docstring's recipe, written out again: BLAKE2b-128 of "seed:id",
    # two big-endian 64-bit halves, top 53 bits each, times 2**-53.
    rule = DeadlineRule(seed=3)
    for j in assign_deadlines(TRACE[:500], rule):
        digest = hashlib.blake2b(f"3:{j.id}".encode(), digest_size=16).digest()
        coin = (int.from_bytes(digest[:8], "big") >> 11) / 2**53
        position = (int.from_bytes(digest[8:], "big") >> 11) / 2**53
        if coin < 0.7:
            assert j.deadline == j.submit + (1.5 + position * 2.5) * j.walltime
        else:
            assert j.deadline is None


def test_runtime_estimate_uses_the_real_run_time() -> None:
    rule = DeadlineRule(share=1.0, slack_min=2.0, slack_max=2.0, estimate="runtime")
    (out,) = assign_deadlines([job("a", submit=10.0, walltime=500.0, runtime=100.0)], rule)
    assert out.deadline == 210.0
    with pytest.raises(ValueError, match="'b' has no run time"):
        assign_deadlines([job("b", walltime=5.0, runtime=None)], rule)


def test_existing_deadlines_are_replaced_and_assigning_twice_changes_nothing() -> None:
    once = assign_deadlines(TRACE[:2000])
    assert assign_deadlines(once) == once
    rule = DeadlineRule(share=0.0)
    assert all(j.deadline is None for j in assign_deadlines(once, rule))
    # The inputs themselves are never modified (jobs are frozen values).
    assert all(j.deadline is None for j in TRACE)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"share": 1.5}, "share"),
        ({"share": -0.1}, "share"),
        ({"slack_min": 0.0}, "slack_min"),
        ({"slack_min": float("nan")}, "slack_min"),
        ({"slack_min": 3.0, "slack_max": 2.0}, "slack_max"),
        ({"slack_max": float("inf")}, "slack_max"),
        ({"estimate": "guess"}, "estimate"),
    ],
)
def test_bad_rules_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DeadlineRule(**kwargs)  # type: ignore[arg-type]


# -- hypothesis --------------------------------------------------------------------------


@st.composite
def jobs_and_rules(draw: st.DrawFn) -> tuple[list[Job], DeadlineRule]:
    n = draw(st.integers(0, 30))
    ids = draw(st.lists(st.text(min_size=1, max_size=8), min_size=n, max_size=n, unique=True))
    jobs = [
        job(
            job_id,
            submit=draw(st.floats(0, 1e7)),
            procs=1,
            walltime=draw(st.floats(1e-3, 1e6)),
            runtime=draw(st.floats(0, 1e6)),
        )
        for job_id in ids
    ]
    lo = draw(st.floats(0.01, 10.0))
    rule = DeadlineRule(
        share=draw(st.floats(0.0, 1.0)),
        slack_min=lo,
        slack_max=lo + draw(st.floats(0.0, 10.0)),
        estimate=draw(st.sampled_from(["walltime", "runtime"])),
        seed=draw(st.integers(-(2**70), 2**70)),
    )
    return jobs, rule


@settings(max_examples=300, deadline=None)
@given(case=jobs_and_rules())
def test_properties(case: tuple[list[Job], DeadlineRule]) -> None:
    jobs, rule = case
    out = assign_deadlines(jobs, rule)
    assert [j.id for j in out] == [j.id for j in jobs]
    for before, after in zip(jobs, out, strict=True):
        # Only the deadline changes.
        assert after.submit == before.submit
        assert after.walltime == before.walltime
        estimate = before.walltime if rule.estimate == "walltime" else before.runtime
        assert estimate is not None
        if after.deadline is not None:
            assert after.deadline >= after.submit + estimate * rule.slack_min
            assert after.deadline <= after.submit + estimate * rule.slack_max
    # Each job's deadline depends on that job alone.
    assert list(reversed(assign_deadlines(list(reversed(jobs)), rule))) == out
    if jobs:
        assert assign_deadlines(jobs[:1], rule) == out[:1]
    if rule.share == 0.0:
        assert all(j.deadline is None for j in out)
    if rule.share == 1.0:
        assert all(j.deadline is not None for j in out)
