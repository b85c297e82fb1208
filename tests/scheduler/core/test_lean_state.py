"""The twin's lean bookkeeping gives what the eager bookkeeping gave.

Each speed-up of the twin that defers or remembers work is checked here against
the straightforward computation it replaced: a dormant queue index woken late
against one kept up to date from the start; the deferred usage ledger against
charges folded at once; remembered allocations and rates against computing
them; EASY's one-machine reservation in integers against the general
``shadow_for``; the running set's parallel list of ends against a sort.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.allocation import Allocation, AllocationMemo
from model.execution import AppParams, Calibration, ExecutionModel, ModelKind
from model.job import Job
from model.machine import Machine, Part
from scheduler.core.queue_index import KINDS, QueueIndex
from scheduler.core.running_set import RunningSet
from scheduler.core.snapshot import RunningJob, Start
from scheduler.core.usage import _FOLD_AT, UsageLedger, decayed_sum, split_periods
from scheduler.planning.easy_shadow import (
    _one_machine,
    merged_releases,
    one_machine_shadow,
    shadow_for,
)
from scheduler.planning.placement import Placement
from tests.builders import job, reservation, running, snapshot

USERS = st.sampled_from(["ann", "bob", "cid"])
GROUPS = st.sampled_from(["g1", "g2"])


# -- the queue index --------------------------------------------------------------


@settings(max_examples=100, deadline=None, database=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["add", "start", "end"]), USERS, GROUPS), max_size=40),
    wake_at=st.integers(0, 40),
)
def test_a_dormant_index_woken_late_holds_what_an_eager_one_holds(
    ops: list[tuple[str, str, str]], wake_at: int
) -> None:
    order: dict[str, int] = {}
    queue: list[Job] = []
    runs: dict[str, RunningJob] = {}
    eager = QueueIndex(order)
    lazy = QueueIndex(order, source=lambda: (queue, runs.values()))
    assert not lazy.awake

    def both(method: str, arg: object) -> None:
        getattr(eager, method)(arg)
        if lazy.awake:
            getattr(lazy, method)(arg)

    for n, (op, user, group) in enumerate(ops):
        if n == wake_at:
            lazy.names("user")  # the first read wakes it
            assert lazy.awake
        if op == "add":
            j = job(f"j{len(order)}", submit=float(len(order)), user=user, group=group)
            order[j.id] = len(order)
            queue.append(j)
            both("add", j)
        elif op == "start" and queue:
            j = queue.pop(0)
            both("remove", j)
            r = running(j, est_end=10.0)
            runs[j.id] = r
            both("add_running", r)
        elif op == "end" and runs:
            r = runs.pop(next(iter(runs)))
            both("remove_running", r)
    for kind in KINDS:
        assert lazy.submit_sorted(kind) == eager.submit_sorted(kind)
        assert sorted(lazy.names(kind)) == sorted(eager.names(kind))
        for name in eager.names(kind):
            assert list(lazy.jobs(kind, name)) == list(eager.jobs(kind, name))
            assert list(lazy.running(kind, name)) == list(eager.running(kind, name))


# -- the usage ledger ----------------------------------------------------------------

CHARGES = st.lists(
    st.tuples(
        USERS, GROUPS, st.floats(0, 5e5), st.floats(0, 3e5), st.integers(0, 8), st.booleans()
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None, database=None)
@given(charges=CHARGES)
def test_the_deferred_ledger_reads_what_charging_at_once_gives(
    charges: list[tuple[str, str, float, float, int, bool]],
) -> None:
    period = 86400.0
    ledger = UsageLedger(period)
    expected: dict[tuple[str, str, int], float] = {}
    names: dict[str, list[str]] = {"user": [], "group": []}
    for user, group, start, length, cpus, read in charges:
        ledger.charge(user=user, group=group, start=start, end=start + length, cpus=cpus)
        for kind, name in (("user", user), ("group", group)):
            if name not in names[kind]:
                names[kind].append(name)
        if length > 0 and cpus > 0:
            for index, seconds in split_periods(start, start + length, period):
                for kind, name in (("user", user), ("group", group)):
                    key = (kind, name, index)
                    expected[key] = expected.get(key, 0.0) + seconds * cpus
        if read:  # reads in between fold what came before, and only that
            assert ledger.names("user") == names["user"]
    for (kind, name, index), value in expected.items():
        assert ledger.cpu_seconds(kind, name, index) == pytest.approx(value, rel=1e-12)
    assert ledger.names("group") == names["group"]
    assert ledger.count("user") == len(names["user"])


def test_the_ledger_folds_without_being_read_so_it_stays_bounded() -> None:
    ledger = UsageLedger(100.0, fold_at=50)
    for i in range(150):
        ledger.charge(user="u", group="g", start=float(i), end=i + 1.0, cpus=1)
    assert len(ledger._unfolded) < 50
    assert ledger.cpu_seconds("user", "u", 0) == 100.0


def test_the_default_bound_holds_a_whole_trace_unfolded() -> None:
    # CTC-SP2 writes two entries per job (a note at its start, a charge at its end).
    assert _FOLD_AT > 2 * 77_222


def test_decayed_known_is_decayed_of_each_known_name() -> None:
    ledger = UsageLedger(10.0)
    ledger.charge(user="a", group="g", start=0.0, end=25.0, cpus=2)
    ledger.note(user="b", group="g")
    sums = ledger.decayed_known("user", ["a", "b", "never"], 2, 3, 0.5)
    assert sums == {
        "a": ledger.decayed("user", "a", 2, 3, 0.5),
        "b": 0.0,
    }
    assert sums["a"] == 10.0 + 0.5 * 20.0 + 0.25 * 20.0


@settings(max_examples=100, deadline=None, database=None)
@given(
    ops=st.lists(
        st.tuples(USERS, st.floats(0, 90), st.floats(0, 40), st.integers(0, 4), st.booleans()),
        max_size=30,
    ),
    decay=st.sampled_from([0.0, 0.5, 0.7, 1.0]),
    count=st.integers(1, 7),
)
def test_remembered_decayed_sums_are_decayed_sum_of_recent_bit_for_bit(
    ops: list[tuple[str, float, float, int, bool]], decay: float, count: int
) -> None:
    # Reads between charges fill the ledger's tables; a charge must drop what it changes.
    ledger = UsageLedger(10.0)
    for user, start, length, cpus, read in ops:
        ledger.charge(user=user, group="g", start=start, end=start + length, cpus=cpus)
        if read:
            for last in (3, 9, 13):
                for name in ("ann", "bob", "cid"):
                    fresh = decayed_sum(ledger.recent("user", name, last, count), decay)
                    assert ledger.decayed("user", name, last, count, decay) == fresh
                    table = ledger.decayed_table("user", last, count, decay)
                    assert table[name] == fresh


def _reference_one_machine(
    need: int, now: float, free: int, running: list[RunningJob], started: list[tuple[float, int]]
) -> tuple[float | None, int]:
    """The one-machine walk as it was written before it merged starts inline."""
    avail = free
    pending: float | None = None
    releases = merged_releases(now, running, [(t, (Part("m", c),)) for t, c in started])
    for t, parts in releases:
        if pending is not None and t > pending and avail >= need:
            return pending, avail
        for p in parts:
            avail += p.cpus
        pending = t
    return (pending if avail >= need else None), avail


@settings(max_examples=300, deadline=None, database=None)
@given(
    ends=st.lists(
        st.tuples(st.integers(1, 8), st.sampled_from([5.0, 10.0, 20.0, 35.5])), max_size=8
    ),
    started=st.lists(
        st.tuples(st.sampled_from([10.0, 15.0, 20.0, 40.0]), st.integers(1, 4)), max_size=4
    ),
    need=st.integers(1, 30),
    free=st.integers(0, 8),
    now=st.sampled_from([0.0, 10.0, 20.0]),
)
def test_the_inline_merge_of_starts_is_the_generators_merge(
    ends: list[tuple[int, float]],
    started: list[tuple[float, int]],
    need: int,
    free: int,
    now: float,
) -> None:
    # Equal instants on purpose (sampled times): ties are where a merge can go wrong.
    runs = sorted(
        (running(job(f"r{k}", c, walltime=100.0), est_end=end) for k, (c, end) in enumerate(ends)),
        key=lambda r: r.est_end,
    )
    started = [(now + t, c) for t, c in started]
    assert _one_machine(need, now, free, runs, started) == _reference_one_machine(
        need, now, free, runs, started
    )


# -- remembered allocations and rates -------------------------------------------------


@pytest.mark.parametrize("kind", list(ModelKind))
@pytest.mark.parametrize("overhead", [0.0, 0.3])
def test_remembered_rates_are_the_computed_ones(kind: ModelKind, overhead: float) -> None:
    speeds = {"a": 1.0, "b": 2.5}
    if kind is ModelKind.CALIBRATED:
        # Its OV is each application's: the parametrized one goes to an application.
        apps = {"cg": AppParams(0.9, overhead), "halo": AppParams(0.3, 1.5)}
        model = ExecutionModel(kind=kind, calibration=Calibration.of("t", apps))
    else:
        model = ExecutionModel(kind=kind, overhead=overhead)
    memo = AllocationMemo(speeds, model)
    for parts in [(Part("a", 4),), (Part("b", 2),), (Part("a", 2), Part("b", 2)), (Part("a", 4),)]:
        alloc = memo.of(parts)
        assert alloc == Allocation.of(parts, speeds)
        cpus = alloc.cpus
        for procs in range(cpus, 2 * cpus + 1):  # every MPL from 1 to 2
            for util in (1.0, 0.5, 0.25):
                for app in (None, "cg", "halo"):
                    j = job(
                        f"j{procs}-{util}-{app}",
                        procs,
                        walltime=10.0,
                        cpu_util=util,
                        ref_speed=1.5,
                        app=app,
                    )
                    assert memo.rate(alloc, j) == alloc.rate(j, model)
                    assert memo.rate(alloc, j) == alloc.rate(j, model)  # and when remembered


def test_a_machine_that_changes_speed_is_not_remembered_at_its_old_speed() -> None:
    speeds = {"a": 1.0}
    memo = AllocationMemo(speeds, ExecutionModel())
    assert memo.of((Part("a", 1),)).pace == 1.0
    speeds["a"] = 3.0
    memo.clear()  # what the core does when a machine comes or goes
    assert memo.of((Part("a", 1),)).pace == 3.0


# -- EASY's one-machine reservation ----------------------------------------------------


@settings(max_examples=300, deadline=None, database=None)
@given(
    cpus=st.integers(1, 16),
    ends=st.lists(st.tuples(st.integers(1, 8), st.floats(0, 500)), max_size=8),
    started=st.lists(st.tuples(st.integers(1, 4), st.floats(1, 300)), max_size=3),
    need=st.integers(1, 16),
    promise=st.none() | st.floats(0, 600),
    now=st.floats(0, 200),
)
def test_the_one_machine_reservation_is_shadow_for_in_integers(  # noqa: PLR0917
    cpus: int,
    ends: list[tuple[int, float]],
    started: list[tuple[int, float]],
    need: int,
    promise: float | None,
    now: float,
) -> None:
    head = job("head", min(need, cpus), walltime=50.0)
    runs = []
    used = 0
    for k, (c, end) in enumerate(ends):
        if used + c > cpus:
            break
        used += c
        runs.append(running(job(f"r{k}", c, walltime=100.0), est_end=end))
    runs.sort(key=lambda r: r.est_end)
    starts = []
    for k, (c, wall) in enumerate(started):
        if used + c > cpus:
            break
        used += c
        starts.append(Start(job(f"s{k}", c, walltime=wall), (Part("m", c),)))
    free = cpus - used
    machine = Machine(id="m", cpus=cpus)
    previous = None if promise is None else reservation(head, start=promise)
    snap = snapshot(
        now=now,
        total_cpus=cpus,
        free={"m": free},
        running=runs,
        queue=[head],
        reservations=[] if previous is None else [previous],
    )
    general = shadow_for(
        head,
        now=now,
        free={"m": free},
        running=runs,
        started=[(now + s.job.walltime, s.parts) for s in starts],
        machines=[machine],
        placement=Placement(),
        previous=previous,
    )
    promised, extra = one_machine_shadow(snap, head, free=free, starts=starts)
    if general is None:
        assert promised is None
    else:
        assert promised == general.reservation
        assert extra == general.extra["m"]
        assert not math.isnan(promised.start)


# -- the running set ----------------------------------------------------------------------


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 100), st.integers(0, 20)), max_size=40))
def test_the_running_set_stays_sorted_by_end_with_ties_in_start_order(
    ops: list[tuple[bool, float, int]],
) -> None:
    rs = RunningSet()
    started: list[RunningJob] = []
    for n, (start, wall, pick) in enumerate(ops):
        if start or not started:
            j = job(f"j{n}", walltime=max(wall, 1.0))
            started.append(rs.start(j, (Part("m", 1),), 1, rate=1.0, start=0.0, now=0.0))
        else:
            gone = started.pop(pick % len(started))
            assert rs.pop(gone.job.id) is gone
    assert list(rs.by_end) == sorted(started, key=lambda r: r.est_end)  # sort is stable
    assert rs._ends == [r.est_end for r in rs.by_end]
