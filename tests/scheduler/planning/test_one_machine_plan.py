"""The one-machine laying (``scheduler.planning.one_machine_plan``) plans as the general
profile does, job by job."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from model.allocation import pace
from model.job import Job
from model.machine import Machine, Part
from scheduler.planning.one_machine_plan import lay_one_machine
from scheduler.planning.placement import Placement
from scheduler.planning.profile import Profile

CPUS = 16


def reference(
    now: float,
    free_now: int,
    releases: list[tuple[float, int]],
    held: list[tuple[Job, float]],
    order: list[Job],
    *,
    in_order: bool,
) -> dict[str, tuple[float, float, int, bool]]:
    """The same laying on ``scheduler.planning.profile.Profile``, one call per step."""
    machines = [Machine(id="m", cpus=CPUS)]
    speeds = {"m": 1.0}
    profile = Profile(
        now=now,
        machines=machines,
        free={"m": free_now},
        ends=[(t, (Part("m", c),)) for t, c in releases],
    )
    laid: dict[str, tuple[float, float, int, bool]] = {}
    for job, promised in held:
        start = max(promised, now)
        end = start + job.walltime
        parts = (Part("m", job.procs),)
        if profile.fits(start, end, parts):
            profile.reserve(start, end, parts)
            laid[job.id] = (start, end, job.procs, True)
    not_before = now
    for job in order:
        got = laid.get(job.id)
        if got is None:
            fit = profile.earliest_fit(
                job,
                job.procs,
                placement=Placement(),
                machines=machines,
                speeds=speeds,
                not_before=not_before,
            )
            assert fit is not None
            start, parts = fit
            end = start + job.estimate_on(pace(parts, speeds))
            profile.reserve(start, end, parts)
            got = laid[job.id] = (start, end, job.procs, False)
        if in_order:
            not_before = max(not_before, got[0])
    return laid


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[tuple[float, int]], int, list[Job], list[int]]:
    busy = draw(st.lists(st.integers(1, 4), max_size=4))
    while sum(busy) > CPUS:
        busy.pop()
    ends = sorted(
        draw(
            st.lists(st.sampled_from([3.0, 5.0, 8.0, 20.0]), min_size=len(busy), max_size=len(busy))
        )
    )
    releases = list(zip(ends, busy, strict=True))
    n = draw(st.integers(1, 40))
    jobs = [
        Job(
            id=f"j{i}",
            submit=0.0,
            procs=draw(st.integers(1, CPUS)),
            walltime=float(draw(st.sampled_from([1, 2, 3, 5, 8, 13, 40]))),
        )
        for i in range(n)
    ]
    reserved = draw(st.lists(st.integers(0, n - 1), max_size=2, unique=True))
    return releases, CPUS - sum(busy), jobs, reserved


@settings(max_examples=300, deadline=None)
@given(queue=queues(), in_order=st.booleans())
def test_the_fast_laying_is_the_profiles(
    queue: tuple[list[tuple[float, int]], int, list[Job], list[int]], in_order: bool
) -> None:
    releases, free_now, jobs, reserved = queue
    held = [(jobs[k], 4.0 * k) for k in reserved]
    fast = lay_one_machine(
        now=0.0,
        cpus=CPUS,
        free_now=free_now,
        releases=releases,
        speed=1.0,
        held=held,
        order=jobs,
        in_order=in_order,
        folds=False,
    )
    assert fast == reference(0.0, free_now, releases, held, jobs, in_order=in_order)
