"""The schedule metrics, the papers' and the usual ones, computed from finished jobs.

The input is what a run leaves behind: one :class:`~model.outcome.JobOutcome`
per job, the cluster's total CPU count (taken as constant over the run) and the
bound ``tau``. The twin and the live scheduler both call :func:`compute_metrics`,
so a number means the same thing whichever produced the schedule.

Per-job metrics (``W`` = wait = start - submit, ``R`` = run = end - start):

* bounded slowdown ``max((W + R) / max(R, tau), 1)``, tau = 10 s by default
  (DPSA paper, Grudenic and Bogunovic, sec. II, "Average slowdown");
* plain slowdown ``(W + R) / R`` (EG-EDF paper, Klusacek et al., sec. 4.1);
* malleable slowdown ``(W + R) / expanded_runtime`` (FCFS-malleable paper,
  Utrera et al., formula (1)): ``R`` is the real, possibly shrunk, run time and
  the denominator the run time the job would have had expanded. No tau, as in
  the paper.

Time-sweep metrics, integrated over ``[first_submit, last_end]``:

* utilisation: busy CPU-seconds / (total CPUs * makespan);
* fragmentation (FCFS-malleable formula (2)): free CPUs integrated over the
  times when the wait queue is non-empty, / (makespan * total CPUs);
* system usage (EG-EDF paper, sec. 4): the time average of
  ``active CPUs / min(available CPUs, CPUs requested by jobs in the system)``
  over the times when that denominator is positive;
* average MPL (FCFS-malleable paper, Table 3): processes of running jobs per
  CPU, averaged over the makespan; and ``busy_mpl``, the same per *busy* CPU.

The sweeps are vectorised with numpy (one sort of all event times, then
``bincount`` + ``cumsum`` per quantity) because a trace replay hands us a
quarter of a million jobs and a pure-Python sort of their million events takes
seconds.

Conventions, stated once so every caller reads the numbers alike:

* every job counts in every mean, failed ones included (they waited and held
  CPUs); ``failed`` reports how many there were, and a caller who wants them
  out filters the outcomes first;
* a failed job with a deadline counts as a miss: it did not finish its work;
* a ratio whose denominator is zero (zero makespan, no busy CPU-time, no time
  with demand) is reported as 0.0 rather than NaN, so :meth:`as_dict` is
  always valid JSON;
* free CPUs are ``max(total - busy, 0)``; ``peak_busy_cpus`` shows whether a
  schedule ever held more CPUs than the cluster has (a scheduler bug the
  metrics report rather than hide).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt

from model.outcome import JobOutcome

DEFAULT_TAU = 10.0
"""Seconds; run times below it count as tau in bounded slowdown (DPSA paper)."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleMetrics:
    """The metrics of one finished schedule. All times are in ``time_base``."""

    time_base: str
    """Which clock the times are in, e.g. "virtual trace seconds": a replay can compress
    time, so every reported metric says which time base it uses."""
    tau: float
    total_cpus: int

    jobs: int
    failed: int
    first_submit: float
    last_end: float
    makespan: float
    """``last_end - first_submit``."""

    wait_mean: float
    wait_max: float
    wait_p50: float
    wait_p95: float
    """Percentiles use linear interpolation between order statistics (numpy's default)."""
    response_mean: float
    run_mean: float

    bounded_slowdown_mean: float
    bounded_slowdown_max: float
    slowdown_mean: float
    malleable_slowdown_mean: float

    busy_cpu_seconds: float
    peak_busy_cpus: int
    utilisation: float
    fragmentation: float
    system_usage: float
    average_mpl: float
    busy_mpl: float

    deadline_jobs: int
    deadline_missed: int
    deadline_miss_rate: float

    def as_dict(self) -> dict[str, float | int | str]:
        """Plain ``float``/``int``/``str`` values, ready for ``json.dumps``."""
        return asdict(self)


def compute_metrics(
    outcomes: Sequence[JobOutcome],
    *,
    total_cpus: int,
    time_base: str,
    tau: float = DEFAULT_TAU,
) -> ScheduleMetrics:
    """Compute :class:`ScheduleMetrics` for a finished schedule.

    Raises ``ValueError`` for an empty schedule, a non-positive CPU count or
    tau, and for an outcome that cannot be a schedule (starts before its
    submission, ends before its start, a segment outside ``[start, end]``).
    """
    if not outcomes:
        raise ValueError("cannot compute metrics of an empty schedule: no job outcomes given")
    if total_cpus < 1:
        raise ValueError(f"total_cpus must be >= 1, got {total_cpus!r}")
    if not (tau > 0 and math.isfinite(tau)):
        raise ValueError(f"tau must be a finite time > 0, got {tau!r}")

    n = len(outcomes)
    # One pass over the Python objects per table, straight into a flat float
    # buffer: building a list of tuples and then an array costs twice as much,
    # and at 250,000 jobs this extraction is the dominant cost.
    jobs = np.fromiter(
        chain.from_iterable(
            (
                o.job.submit,
                o.start,
                o.end,
                o.expanded_runtime,
                o.job.procs,
                math.nan if o.job.deadline is None else o.job.deadline,
                o.failed,
            )
            for o in outcomes
        ),
        dtype=np.float64,
        count=7 * n,
    ).reshape(n, 7)
    submit, start, end, expanded, procs, deadline, failed_f = jobs.T
    failed = failed_f != 0.0

    # Each segment carries its job's index (exact as a float far below 2**53):
    # it gives the segment's process count and names the job in an error.
    segs = np.fromiter(
        chain.from_iterable(
            (sg.start, sg.end, sg.cpus, i) for i, o in enumerate(outcomes) for sg in o.segments
        ),
        dtype=np.float64,
    ).reshape(-1, 4)
    seg_start, seg_end, seg_cpus, seg_owner_f = segs.T
    seg_owner = seg_owner_f.astype(np.intp)
    seg_procs = procs[seg_owner]

    _validate(
        outcomes,
        submit=submit,
        start=start,
        end=end,
        expanded=expanded,
        seg_start=seg_start,
        seg_end=seg_end,
        seg_cpus=seg_cpus,
        seg_owner=seg_owner,
    )

    wait = start - submit
    run = end - start
    response = end - submit

    # Bounded slowdown (DPSA paper): a run shorter than tau counts as tau, so a
    # one-second job that waited a minute does not dominate the mean.
    bounded = np.maximum(response / np.maximum(run, tau), 1.0)
    # Plain slowdown: (W+R)/R; a zero-length run has no meaningful ratio and
    # counts as 1 (it was not slowed down by being run).
    plain = np.ones(n)
    np.divide(response, run, out=plain, where=run > 0)
    # Formula (1): the numerator keeps the real (possibly shrunk) run time,
    # the denominator is the expanded one, so shrinking shows up as slowdown.
    malleable = np.ones(n)
    np.divide(response, expanded, out=malleable, where=expanded > 0)

    has_deadline = ~np.isnan(deadline)
    deadline_jobs = int(has_deadline.sum())
    # NaN comparisons are False, so jobs without a deadline never count as missed.
    missed = has_deadline & (failed | (end > deadline))
    deadline_missed = int(missed.sum())

    first_submit = float(submit.min())
    last_end = float(end.max())
    makespan = last_end - first_submit
    capacity = float(total_cpus) * makespan

    sweep = _sweep(
        total_cpus=total_cpus,
        submit=submit,
        start=start,
        end=end,
        procs=procs,
        seg_start=seg_start,
        seg_end=seg_end,
        seg_cpus=seg_cpus,
        seg_procs=seg_procs,
    )
    busy_cpu_seconds = float(np.dot(seg_cpus, seg_end - seg_start))

    return ScheduleMetrics(
        time_base=time_base,
        tau=float(tau),
        total_cpus=int(total_cpus),
        jobs=n,
        failed=int(failed.sum()),
        first_submit=first_submit,
        last_end=last_end,
        makespan=makespan,
        wait_mean=float(wait.mean()),
        wait_max=float(wait.max()),
        wait_p50=float(np.percentile(wait, 50)),
        wait_p95=float(np.percentile(wait, 95)),
        response_mean=float(response.mean()),
        run_mean=float(run.mean()),
        bounded_slowdown_mean=float(bounded.mean()),
        bounded_slowdown_max=float(bounded.max()),
        slowdown_mean=float(plain.mean()),
        malleable_slowdown_mean=float(malleable.mean()),
        busy_cpu_seconds=busy_cpu_seconds,
        peak_busy_cpus=sweep.peak_busy,
        utilisation=_ratio(busy_cpu_seconds, capacity),
        fragmentation=_ratio(sweep.free_while_queued, capacity),
        system_usage=_ratio(sweep.usage_integral, sweep.demand_time),
        average_mpl=_ratio(sweep.running_procs_integral, capacity),
        busy_mpl=_ratio(sweep.running_procs_integral, sweep.busy_integral),
        deadline_jobs=deadline_jobs,
        deadline_missed=deadline_missed,
        deadline_miss_rate=_ratio(float(deadline_missed), float(deadline_jobs)),
    )


def _ratio(num: float, den: float) -> float:
    """``num / den``, or 0.0 when there is nothing to divide by (see module docstring)."""
    return num / den if den > 0 else 0.0


@dataclass(frozen=True, slots=True)
class _Sweep:
    peak_busy: int
    busy_integral: float
    free_while_queued: float
    usage_integral: float
    demand_time: float
    running_procs_integral: float


def _sweep(
    *,
    total_cpus: int,
    submit: FloatArray,
    start: FloatArray,
    end: FloatArray,
    procs: FloatArray,
    seg_start: FloatArray,
    seg_end: FloatArray,
    seg_cpus: FloatArray,
    seg_procs: FloatArray,
) -> _Sweep:
    """Integrate the step functions of the schedule over its event grid.

    All quantities share one grid: the sorted distinct event times. Between
    two consecutive grid points nothing changes, so each quantity is constant
    there and its value is the cumulative sum of the changes at or before the
    left point. Events at the same instant (touching segments, a job starting
    the moment another ends) fall on one grid point, so no zero-length
    interval and no intermediate state is ever counted.
    """
    n, k = len(submit), len(seg_start)
    grid, where = np.unique(
        np.concatenate((submit, start, end, seg_start, seg_end)), return_inverse=True
    )
    # Grid index of every event, in the order they were concatenated.
    at_submit, at_start, at_end, at_seg_start, at_seg_end = np.split(where, np.cumsum([n, n, n, k]))
    m = len(grid)

    def level(
        at_pos: npt.NDArray[np.intp], at_neg: npt.NDArray[np.intp], weights: FloatArray
    ) -> FloatArray:
        """Value on ``[grid[i], grid[i+1])`` of a sum of ``weights`` over ``[pos, neg)``."""
        up = np.bincount(at_pos, weights=weights, minlength=m)
        down = np.bincount(at_neg, weights=weights, minlength=m)
        # Weights are whole numbers far below 2**53, so the float sums are exact.
        return np.cumsum(up - down)

    busy = level(at_seg_start, at_seg_end, seg_cpus)
    queued = level(at_submit, at_start, np.ones(n))  # a job waits from submit to start
    in_system = level(at_submit, at_end, procs)  # EG-EDF: queued or running jobs' requests
    running_procs = level(at_seg_start, at_seg_end, seg_procs)

    dt = np.diff(grid)
    # The last grid point is last_end: every level is 0 after it, drop it.
    busy, queued, in_system, running_procs = (
        busy[:-1],
        queued[:-1],
        in_system[:-1],
        running_procs[:-1],
    )

    free = np.maximum(float(total_cpus) - busy, 0.0)
    free_while_queued = float(np.dot(free, dt * (queued > 0)))

    # EG-EDF sec. 4: the denominator leaves out the CPUs no job in the system
    # could use (the ramp-up and drain at the ends of a run), so an idle CPU
    # only counts against the schedule when some job could have used it.
    # Times with no job in the system at all are skipped, not counted as 0.
    denom = np.minimum(float(total_cpus), in_system)
    has_demand = denom > 0
    usage = np.zeros_like(busy)
    np.divide(busy, denom, out=usage, where=has_demand)

    return _Sweep(
        peak_busy=int(busy.max()) if len(busy) else 0,
        busy_integral=float(np.dot(busy, dt)),
        free_while_queued=free_while_queued,
        usage_integral=float(np.dot(usage, dt)),
        demand_time=float(dt[has_demand].sum()),
        running_procs_integral=float(np.dot(running_procs, dt)),
    )


def _validate(
    outcomes: Sequence[JobOutcome],
    *,
    submit: FloatArray,
    start: FloatArray,
    end: FloatArray,
    expanded: FloatArray,
    seg_start: FloatArray,
    seg_end: FloatArray,
    seg_cpus: FloatArray,
    seg_owner: npt.NDArray[np.intp],
) -> None:
    """Reject outcomes that are not a schedule, naming the first offending job."""

    def first_bad(bad: npt.NDArray[np.bool_], why: str, owner: npt.NDArray[np.intp]) -> None:
        if bad.any():
            job = outcomes[int(owner[int(np.argmax(bad))])].job
            raise ValueError(f"job {job.id!r}: {why}")

    idx = np.arange(len(outcomes))
    first_bad(~(np.isfinite(start) & np.isfinite(end)), "start and end must be finite", idx)
    first_bad(start < submit, "starts before it was submitted", idx)
    first_bad(end < start, "ends before it starts", idx)
    first_bad(
        ~(np.isfinite(expanded) & (expanded >= 0)),
        "expanded_runtime must be a finite time >= 0",
        idx,
    )
    if len(seg_owner):
        first_bad(
            ~(np.isfinite(seg_start) & np.isfinite(seg_end)),
            "segment start and end must be finite",
            seg_owner,
        )
        first_bad(seg_end < seg_start, "a segment ends before it starts", seg_owner)
        first_bad(seg_cpus < 1, "a segment holds fewer than 1 CPU", seg_owner)
        first_bad(
            (seg_start < start[seg_owner]) | (seg_end > end[seg_owner]),
            "a segment lies outside the job's [start, end]",
            seg_owner,
        )
