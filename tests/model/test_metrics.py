"""Tests of model.metrics: the FCFS-malleable paper's worked example, small
hand-computed schedules for every metric, and properties checked against a
brute-force unit-step evaluation of random integer schedules."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.machine import Part
from model.metrics import DEFAULT_TAU, ScheduleMetrics, compute_metrics
from model.outcome import JobOutcome, Segment
from tests.builders import job

TB = "virtual trace seconds"


def outcome(
    jid: str,
    *,
    submit: float = 0.0,
    start: float,
    end: float,
    procs: int,
    segments: tuple[Segment, ...] | None = None,
    expanded: float | None = None,
    deadline: float | None = None,
    failed: bool = False,
) -> JobOutcome:
    """A rigid outcome by default: one segment of ``procs`` CPUs over ``[start, end)``."""
    if segments is None:
        segments = (Segment(start, end, procs),)
    return JobOutcome(
        job=job(
            jid,
            procs,
            submit=submit,
            walltime=max(end - start, 1.0),
            deadline=deadline,
            runtime=None,
            malleable=any(s.cpus < procs for s in segments),
        ),
        start=start,
        end=end,
        parts=(Part("m0", max((s.cpus for s in segments), default=procs)),),
        segments=segments,
        expanded_runtime=end - start if expanded is None else expanded,
        failed=failed,
    )


def metrics(outs: list[JobOutcome], cpus: int, tau: float = DEFAULT_TAU) -> ScheduleMetrics:
    return compute_metrics(outs, total_cpus=cpus, time_base=TB, tau=tau)


# --- FCFS-malleable paper, Fig. 2: 10 CPUs, six jobs arriving at t = 0 ------

PROCS = (8, 4, 2, 8, 4, 10)
EXEC = (2, 1, 1, 2, 2, 1)


def rigid_schedule(starts: tuple[int, ...]) -> list[JobOutcome]:
    return [
        outcome(f"J{i + 1}", start=s, end=s + r, procs=p)
        for i, (s, r, p) in enumerate(zip(starts, EXEC, PROCS, strict=True))
    ]


def test_paper_example_fcfs() -> None:
    m = metrics(rigid_schedule((0, 2, 2, 3, 5, 7)), 10)
    assert m.response_mean == pytest.approx(28 / 6)  # the paper's 4.66
    assert m.malleable_slowdown_mean == pytest.approx(3.5)
    # Free CPUs while J6 waits (t in [0, 7)): 2*2 + 4*1 + 2*2 + 6*2 = 24 of 8*10.
    assert m.fragmentation == pytest.approx(0.30)
    assert m.makespan == 8
    assert m.utilisation == pytest.approx(56 / 80)
    # Rigid jobs: one process per busy CPU.
    assert m.average_mpl == pytest.approx(m.utilisation)
    assert m.busy_mpl == pytest.approx(1.0)
    # Every run is under tau = 10 and every response <= 8, so all bounded at 1;
    # with tau = 1 time unit the bound never bites and it is the plain slowdown.
    assert m.bounded_slowdown_mean == pytest.approx(1.0)
    assert metrics(rigid_schedule((0, 2, 2, 3, 5, 7)), 10, tau=1.0).bounded_slowdown_mean == (
        pytest.approx(3.5)
    )
    assert m.slowdown_mean == pytest.approx(3.5)  # rigid: expanded run = run


def test_paper_example_easy_backfilling() -> None:
    m = metrics(rigid_schedule((0, 2, 0, 3, 5, 7)), 10)
    assert m.response_mean == pytest.approx(26 / 6)  # the paper's 4.33
    assert m.malleable_slowdown_mean == pytest.approx(19 / 6)  # the paper's 3.16
    # Free while queued ([0, 7)): 0 + 2 + 6 + 2*2 + 6*2 = 24 of 80.
    assert m.fragmentation == pytest.approx(0.30)


def test_paper_example_fcfs_malleable() -> None:
    outs = [
        # J1: 8 processes on 4 CPUs (MPL 2) take twice their expanded 2 units.
        outcome("J1", start=0, end=4, procs=8, segments=(Segment(0, 4, 4),), expanded=2),
        outcome("J2", start=0, end=1, procs=4),
        outcome("J3", start=0, end=1, procs=2),
        outcome("J4", start=1, end=5, procs=8, segments=(Segment(1, 5, 4),), expanded=2),
        outcome("J5", start=1, end=5, procs=4, segments=(Segment(1, 5, 2),), expanded=2),
        outcome("J6", start=5, end=6, procs=10),
    ]
    m = metrics(outs, 10)
    assert m.response_mean == pytest.approx(22 / 6)  # the paper's 3.66
    # Formula (1): (W + shrunk R) / expanded R = (2 + 1 + 1 + 2.5 + 2.5 + 6) / 6.
    assert m.malleable_slowdown_mean == pytest.approx(2.5)
    # The paper reports 0 % here, but by its own formula (2) the 4 CPUs J1
    # frees at t = 4 stay idle until 5 while J6 waits (J4 and J5 are not
    # expanded in the figure): 4 CPU-units / (6 * 10) = 6.7 %.
    assert m.fragmentation == pytest.approx(4 / 60)
    # Processes running: 14 on [0,1), 20 on [1,4), 12 on [4,5), 10 on [5,6) = 96;
    # busy CPUs: 10, 10, 6, 10 = 56 CPU-units.
    assert m.utilisation == pytest.approx(56 / 60)
    assert m.average_mpl == pytest.approx(96 / 60)
    assert m.busy_mpl == pytest.approx(96 / 56)
    # Plain slowdown uses the real run time: (1 + 1 + 1 + 1.25 + 1.25 + 6) / 6.
    assert m.slowdown_mean == pytest.approx(11.5 / 6)


# --- small hand-made schedules ------------------------------------------------


def two_jobs() -> list[JobOutcome]:
    # 10 CPUs. J1 (4 procs) runs [0, 10); J2 (8 procs) arrives at 2 but needs
    # more than the 6 free CPUs, so waits until 10 and runs [10, 15).
    return [
        outcome("J1", start=0, end=10, procs=4),
        outcome("J2", submit=2, start=10, end=15, procs=8),
    ]


def test_waits_responses_and_slowdowns() -> None:
    m = metrics(two_jobs(), 10)
    assert (m.jobs, m.failed) == (2, 0)
    assert (m.first_submit, m.last_end, m.makespan) == (0, 15, 15)
    assert m.wait_mean == pytest.approx(4.0)
    assert m.wait_max == pytest.approx(8.0)
    assert m.wait_p50 == pytest.approx(4.0)  # linear interpolation between 0 and 8
    assert m.wait_p95 == pytest.approx(7.6)
    assert m.response_mean == pytest.approx((10 + 13) / 2)
    assert m.run_mean == pytest.approx(7.5)
    # J1: 10/max(10, 10) = 1; J2: 13/max(5, 10) = 1.3.
    assert m.bounded_slowdown_mean == pytest.approx(1.15)
    assert m.bounded_slowdown_max == pytest.approx(1.3)
    assert m.slowdown_mean == pytest.approx((1 + 13 / 5) / 2)


def test_utilisation_fragmentation_system_usage() -> None:
    m = metrics(two_jobs(), 10)
    assert m.busy_cpu_seconds == pytest.approx(4 * 10 + 8 * 5)
    assert m.peak_busy_cpus == 8
    assert m.utilisation == pytest.approx(80 / 150)
    # Queue non-empty on [2, 10) with 6 CPUs free.
    assert m.fragmentation == pytest.approx(6 * 8 / 150)
    # [0,2): 4 busy / min(10, 4) = 1; [2,10): 4 / min(10, 12) = 0.4;
    # [10,15): 8 / min(10, 8) = 1.
    assert m.system_usage == pytest.approx((2 * 1 + 8 * 0.4 + 5 * 1) / 15)


def test_system_usage_skips_times_without_jobs() -> None:
    # Nothing is in the system on [5, 10): that gap counts against
    # utilisation, but not against system usage (EG-EDF paper, sec. 4).
    outs = [
        outcome("a", start=0, end=5, procs=5),
        outcome("b", submit=10, start=10, end=15, procs=5),
    ]
    m = metrics(outs, 10)
    assert m.system_usage == pytest.approx(1.0)
    assert m.utilisation == pytest.approx(50 / 150)
    assert m.fragmentation == 0.0
    assert m.average_mpl == pytest.approx(50 / 150)


def test_bounded_slowdown_uses_tau_for_short_runs() -> None:
    outs = [outcome("short", start=100, end=101, procs=1)]
    assert metrics(outs, 1).slowdown_mean == pytest.approx(101.0)
    assert metrics(outs, 1, tau=10).bounded_slowdown_mean == pytest.approx(10.1)
    assert metrics(outs, 1, tau=200).bounded_slowdown_mean == pytest.approx(1.0)


def test_zero_length_runs() -> None:
    outs = [
        outcome("quick", start=0, end=0, procs=1),
        outcome("late", start=50, end=50, procs=1),
    ]
    m = metrics(outs, 4)
    # Plain and malleable slowdown have no ratio for R = 0 and count it as 1;
    # bounded slowdown divides by tau: max(0/10, 1) = 1 and 50/10 = 5.
    assert m.slowdown_mean == 1.0
    assert m.malleable_slowdown_mean == 1.0
    assert m.bounded_slowdown_mean == pytest.approx((1 + 5) / 2)
    assert m.busy_cpu_seconds == 0.0
    assert m.busy_mpl == 0.0  # no busy CPU-time: reported as 0, not NaN


def test_zero_makespan() -> None:
    m = metrics([outcome("x", submit=3, start=3, end=3, procs=2)], 4)
    assert m.makespan == 0.0
    assert (m.utilisation, m.fragmentation, m.system_usage, m.average_mpl) == (0, 0, 0, 0)
    assert m.bounded_slowdown_mean == 1.0
    json.dumps(m.as_dict(), allow_nan=False)


def test_touching_segments_and_back_to_back_jobs() -> None:
    whole = [
        outcome("a", start=0, end=10, procs=10),
        outcome("b", start=10, end=20, procs=10),
    ]
    split = [
        outcome(
            "a",
            start=0,
            end=10,
            procs=10,
            segments=(Segment(0, 4, 10), Segment(4, 10, 10)),
        ),
        outcome("b", start=10, end=20, procs=10),
    ]
    for outs in (whole, split):
        m = metrics(outs, 10)
        # b starts the instant a ends: never 20 CPUs busy, never a free CPU.
        assert m.peak_busy_cpus == 10
        assert m.utilisation == pytest.approx(1.0)
        assert m.fragmentation == 0.0
        assert m.system_usage == pytest.approx(1.0)
        assert m.busy_mpl == pytest.approx(1.0)
    assert metrics(whole, 10).as_dict() == metrics(split, 10).as_dict()


def test_malleable_resize_segments() -> None:
    # 4 processes: shrunk on 2 CPUs for [0, 4), expanded on 4 for [4, 6).
    # Expanded it would have taken 2 + 2 = 4.
    o = outcome(
        "m",
        start=0,
        end=6,
        procs=4,
        segments=(Segment(0, 4, 2), Segment(4, 6, 4)),
        expanded=4,
    )
    m = metrics([o], 4)
    assert m.busy_cpu_seconds == pytest.approx(2 * 4 + 4 * 2)
    assert m.utilisation == pytest.approx(16 / 24)
    assert m.average_mpl == pytest.approx(4 * 6 / 24)
    assert m.busy_mpl == pytest.approx(24 / 16)
    assert m.malleable_slowdown_mean == pytest.approx(6 / 4)
    # Demand is 4 processes throughout: 2/4 for 4 s, 4/4 for 2 s.
    assert m.system_usage == pytest.approx((0.5 * 4 + 1 * 2) / 6)


def test_deadlines() -> None:
    outs = [
        outcome("none", start=0, end=5, procs=1),
        outcome("met", start=0, end=5, procs=1, deadline=5),  # on the dot is met
        outcome("missed", start=0, end=5, procs=1, deadline=4.5),
        # Failed before its deadline: it never finished its work, so a miss.
        outcome("failed", start=0, end=2, procs=1, deadline=10, failed=True),
    ]
    m = metrics(outs, 4)
    assert (m.deadline_jobs, m.deadline_missed) == (3, 2)
    assert m.deadline_miss_rate == pytest.approx(2 / 3)
    assert m.failed == 1
    assert metrics(outs[:1], 4).deadline_miss_rate == 0.0


def test_as_dict_is_json_ready() -> None:
    m = metrics(two_jobs(), 10, tau=5.0)
    d = m.as_dict()
    assert d["time_base"] == TB
    assert d["tau"] == 5.0
    assert d["total_cpus"] == 10
    assert all(type(v) in (int, float, str) for v in d.values())
    assert json.loads(json.dumps(d, allow_nan=False)) == d


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="empty schedule"):
        metrics([], 10)
    with pytest.raises(ValueError, match="total_cpus"):
        metrics(two_jobs(), 0)
    with pytest.raises(ValueError, match="tau"):
        metrics(two_jobs(), 10, tau=0.0)
    early = outcome("early", submit=5, start=3, end=8, procs=1)
    with pytest.raises(ValueError, match="'early': starts before"):
        metrics([early], 4)
    outside = outcome("outside", start=0, end=5, procs=1, segments=(Segment(0, 6, 1),))
    with pytest.raises(ValueError, match="'outside': a segment lies outside"):
        metrics([*two_jobs(), outside], 10)


# --- properties against a brute-force evaluation ------------------------------


@dataclass(frozen=True)
class Spec:
    gap: int
    procs: int
    shrink: int
    run: int
    delay: int
    split: int


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[JobOutcome]]:
    """A valid FCFS schedule with integer times; some jobs shrunk, some split."""
    cpus = draw(st.integers(1, 12))
    specs = draw(
        st.lists(
            st.builds(
                Spec,
                gap=st.integers(0, 4),
                procs=st.integers(1, cpus),
                shrink=st.integers(0, 6),
                run=st.integers(0, 6),
                delay=st.integers(0, 2),
                split=st.integers(0, 6),
            ),
            min_size=1,
            max_size=25,
        )
    )
    outs: list[JobOutcome] = []
    running: list[tuple[int, int]] = []  # (end, cpus)
    submit = prev_start = 0
    for i, s in enumerate(specs):
        submit += s.gap
        need = max(s.procs - s.shrink, (s.procs + 1) // 2)  # MPL <= 2
        # Starts never decrease, so checking capacity at the start suffices.
        t = max(submit, prev_start) + s.delay
        while sum(c for e, c in running if e > t) + need > cpus:
            t = min(e for e, _ in running if e > t)
        end = t + s.run
        running.append((end, need))
        prev_start = t
        k = s.split
        segs = (
            (Segment(t, t + k, need), Segment(t + k, end, need))
            if 0 < k < s.run
            else (Segment(t, end, need),)
        )
        outs.append(
            outcome(
                f"j{i}",
                submit=submit,
                start=t,
                end=end,
                procs=s.procs,
                segments=segs,
                expanded=s.run * need / s.procs,  # never more than the real run
            )
        )
    return cpus, outs


def brute_force(cpus: int, outs: list[JobOutcome]) -> dict[str, float]:
    """The time metrics evaluated unit interval by unit interval."""
    t0 = int(min(o.job.submit for o in outs))
    t1 = int(max(o.end for o in outs))
    free_q = usage_sum = usage_time = procs_sum = busy_sum = 0.0
    for t in range(t0, t1):
        busy = sum(s.cpus for o in outs for s in o.segments if s.start <= t < s.end)
        running = sum(o.job.procs for o in outs for s in o.segments if s.start <= t < s.end)
        queued = any(o.job.submit <= t < o.start for o in outs)
        demand = min(cpus, sum(o.job.procs for o in outs if o.job.submit <= t < o.end))
        free_q += (cpus - busy) if queued else 0
        if demand > 0:
            usage_sum += busy / demand
            usage_time += 1
        procs_sum += running
        busy_sum += busy
    span = (t1 - t0) * cpus
    return {
        "utilisation": busy_sum / span if span else 0.0,
        "fragmentation": free_q / span if span else 0.0,
        "system_usage": usage_sum / usage_time if usage_time else 0.0,
        "average_mpl": procs_sum / span if span else 0.0,
        "busy_mpl": procs_sum / busy_sum if busy_sum else 0.0,
    }


@settings(max_examples=200, deadline=None)
@given(schedules())
def test_sweep_matches_brute_force(sched: tuple[int, list[JobOutcome]]) -> None:
    cpus, outs = sched
    m = metrics(outs, cpus)
    d = m.as_dict()
    for key, want in brute_force(cpus, outs).items():
        assert d[key] == pytest.approx(want, abs=1e-12), key


@settings(max_examples=200, deadline=None)
@given(schedules())
def test_metric_bounds(sched: tuple[int, list[JobOutcome]]) -> None:
    cpus, outs = sched
    m = metrics(outs, cpus)
    eps = 1e-12
    assert m.peak_busy_cpus <= cpus
    assert 0.0 <= m.utilisation <= 1.0 + eps
    # Fragmentation integrates free CPUs over part of the makespan only.
    assert 0.0 <= m.fragmentation <= 1.0 - m.utilisation + eps
    assert 0.0 <= m.system_usage <= 1.0 + eps
    assert m.busy_mpl == 0.0 or 1.0 - eps <= m.busy_mpl <= 2.0 + eps
    assert m.average_mpl <= 2.0 * m.utilisation + eps
    assert m.bounded_slowdown_mean >= 1.0
    assert m.bounded_slowdown_max >= m.bounded_slowdown_mean - eps
    assert m.slowdown_mean >= 1.0
    assert m.malleable_slowdown_mean >= 1.0
    assert m.wait_p50 <= m.wait_p95 + eps
    assert m.wait_p95 <= m.wait_max + eps
    assert m.response_mean == pytest.approx(m.wait_mean + m.run_mean)
    assert all(math.isfinite(v) for v in m.as_dict().values() if not isinstance(v, str))
    # The order of the outcomes does not matter.
    r = metrics(outs[::-1], cpus).as_dict()
    assert r == pytest.approx(m.as_dict())
