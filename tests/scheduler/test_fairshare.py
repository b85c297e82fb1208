"""Fair-share with usage decay (scheduler.priority.fairshare).

The worked example is the scheduling-algorithms text's jack/jill example,
driven through the real scheduler core so the usage reaches the priorities
the way it does in a run: charged to the ledger when each job finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine, Part
from scheduler.core import SchedulerCore
from scheduler.placement import Placement
from scheduler.priority.fairshare import FairShare
from scheduler.snapshot import Decisions, RunningJob, Snapshot, Start
from scheduler.usage import UsageLedger

DAY = 86400.0
HOUR = 3600.0


# -- helpers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadFirst:
    """Minimal FCFS-like policy: start the first job of the priority order if it fits."""

    priority: FairShare
    name: str = "head-first"

    def decide(self, snapshot: Snapshot) -> Decisions:
        order = self.priority.order(snapshot)
        if not order:
            return Decisions()
        head = order[0]
        parts = Placement().place(head.procs, snapshot.free, snapshot.machines)
        return Decisions(starts=[Start(head, parts)] if parts is not None else [])


def job(
    job_id: str,
    *,
    user: str = "u",
    group: str = "g",
    procs: int = 1,
    submit: float = 0.0,
    walltime: float = HOUR,
) -> Job:
    return Job(id=job_id, submit=submit, procs=procs, walltime=walltime, user=user, group=group)


def snapshot(
    *,
    now: float,
    queue: Sequence[Job] = (),
    running: Sequence[RunningJob] = (),
    usage: UsageLedger | None = None,
    total_cpus: int = 4,
) -> Snapshot:
    machine = Machine(id="m", cpus=max(total_cpus, 1))
    return Snapshot(
        now=now,
        machines=[machine],
        free={"m": machine.cpus},
        running=list(running),
        queue=list(queue),
        usage=usage if usage is not None else UsageLedger(DAY),
        total_cpus=total_cpus,
        speeds={"m": 1.0},
        reservations={},
    )


def running(j: Job, *, start: float, cpus: int, charged_from: float | None = None) -> RunningJob:
    return RunningJob(
        job=j,
        parts=(Part("m", cpus),),
        start=start,
        est_end=start + j.walltime,
        cpus=cpus,
        changed=start,
        charged_from=start if charged_from is None else charged_from,
    )


JACK_JILL = FairShare(shares=(("jack", 0.25), ("jill", 0.75)), decay=0.7)


def jack_jill_core() -> SchedulerCore:
    """Four one-CPU nodes; jack then jill each submit six whole-cluster six-hour jobs at 0.

    Jack submits first, so arrival order alone would start jack: fair-share must
    override it.
    """
    core = SchedulerCore(
        policy=HeadFirst(priority=JACK_JILL),
        machines=[Machine(id=f"node{i}", cpus=1) for i in range(1, 5)],
    )
    for user in ("jack", "jill"):
        for n in range(6):
            core.submit(job(f"{user}-{n}", user=user, procs=4, walltime=6 * HOUR))
    return core


# -- the text's worked example ---------------------------------------------------

# (time of the decision, P(jack), P(jill), whose job starts), from the text.
JACK_JILL_STEPS = [
    (0 * HOUR, 0.25, 0.75, "jill"),
    (6 * HOUR, 0.25, 0.50, "jill"),
    (12 * HOUR, 0.25, 0.25, "jill"),  # tie: the higher share wins
    (18 * HOUR, 0.25, 0.00, "jack"),
    (24 * HOUR, 0.00, 0.00, "jill"),  # "back to another tie-breaker": share again
]


def test_jack_jill_worked_example() -> None:
    core = jack_jill_core()
    started: list[str] = []
    for now, p_jack, p_jill, who in JACK_JILL_STEPS:
        if started:
            left = core.finished(started[-1], now)  # the previous job ran its six hours
            assert left.end - left.start == 6 * HOUR
        prio = JACK_JILL.priorities(core.snapshot(now))
        # Exact: every usage here is a whole number of quarter-days of the cluster.
        assert prio == {"jack": p_jack, "jill": p_jill}, now
        decisions = core.schedule(now)
        assert [s.job.user for s in decisions.starts] == [who], now
        started.append(decisions.starts[0].job.id)
    # Jill's jobs start in her submission order.
    assert started == ["jill-0", "jill-1", "jill-2", "jack-0", "jill-3"]


def test_jack_jill_shares_are_met_over_the_day() -> None:
    """The text: jill was allowed 75 % of the day, jack 25 %."""
    core = jack_jill_core()
    now = 0.0
    for _ in range(4):
        (start,) = core.schedule(now).starts
        now += 6 * HOUR
        core.finished(start.job.id, now)
    cluster_day = 4 * DAY
    assert core.usage.cpu_seconds("user", "jill", 0) / cluster_day == 0.75
    assert core.usage.cpu_seconds("user", "jack", 0) / cluster_day == 0.25


def finished_day() -> SchedulerCore:
    """The worked example's day, then the cluster left idle (the queues cancelled)."""
    core = jack_jill_core()
    now = 0.0
    for _ in range(4):
        (start,) = core.schedule(now).starts
        now += 6 * HOUR
        core.finished(start.job.id, now)
    for j in list(core.queue):
        core.cancel(j.id, now)
    return core


@pytest.mark.parametrize(
    ("now", "u_jack", "u_jill"),
    [
        # The day that just ended is "today" at its last instant.
        (1 * DAY, 0.25, 0.75),
        # One day later the usage is 0.7 times (text: "the decay factor reduces this penalty").
        (1 * DAY + 1.0, 0.7 * 0.25, 0.7 * 0.75),
        (1.5 * DAY, 0.7 * 0.25, 0.7 * 0.75),
        (2 * DAY, 0.7 * 0.25, 0.7 * 0.75),
        (2.5 * DAY, 0.49 * 0.25, 0.49 * 0.75),
        (6.5 * DAY, 0.7**6 * 0.25, 0.7**6 * 0.75),
        (7 * DAY, 0.7**6 * 0.25, 0.7**6 * 0.75),
        (7 * DAY + 1.0, 0.0, 0.0),  # out of the seven-day window
    ],
)
def test_decay_after_the_day(now: float, u_jack: float, u_jill: float) -> None:
    table = JACK_JILL.standings(finished_day().snapshot(now))
    assert table["jack"].usage == pytest.approx(u_jack, abs=1e-12)
    assert table["jill"].usage == pytest.approx(u_jill, abs=1e-12)
    assert table["jill"].priority == pytest.approx(0.75 - u_jill, abs=1e-12)


def test_decay_matches_the_text_penalties() -> None:
    """Jill's 0.75 of a day: priority 0.225 after one day and 0.3825 after two (the text)."""
    core = finished_day()
    assert JACK_JILL.priorities(core.snapshot(1.5 * DAY))["jill"] == pytest.approx(0.225)
    assert JACK_JILL.priorities(core.snapshot(2.5 * DAY))["jill"] == pytest.approx(0.3825)


def test_formula_line_scales_usage_by_share() -> None:
    """The text's formula line: a day of 100 % of the cluster costs S, then S*D, then S*D^2."""
    scaled = FairShare(shares=(("jack", 0.25), ("jill", 0.75)), scale_usage_by_share=True)
    ledger = UsageLedger(DAY)
    ledger.charge(user="jill", group="g", start=0.0, end=DAY, cpus=4)
    # At the end of the day, one day later, two days later.
    expected = [(1 * DAY, 0.75, 0.0), (2 * DAY, 0.525, 0.225), (3 * DAY, 0.3675, 0.3825)]
    for now, penalty, priority in expected:
        jill = scaled.standings(snapshot(now=now, usage=ledger))["jill"]
        assert jill.usage == pytest.approx(penalty)
        assert jill.priority == pytest.approx(priority)
    # Unscaled (the worked example's reading) the same day costs the whole 1.0.
    assert JACK_JILL.priorities(snapshot(now=1 * DAY, usage=ledger))["jill"] == -0.25


# -- window and running jobs -----------------------------------------------------


def test_usage_older_than_the_window_is_ignored() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="a", group="g", start=0.0, end=DAY, cpus=4)  # period 0, u = 1
    fs = FairShare(shares=(("a", 1.0),))
    # Period 6 is the last one whose window (today - 0 .. today - 6) reaches back to 0.
    assert fs.standings(snapshot(now=6.5 * DAY, usage=ledger))["a"].usage == pytest.approx(0.7**6)
    assert fs.standings(snapshot(now=7.5 * DAY, usage=ledger))["a"].usage == 0.0
    short = FairShare(shares=(("a", 1.0),), window=2)
    assert short.standings(snapshot(now=1.5 * DAY, usage=ledger))["a"].usage == pytest.approx(0.7)
    assert short.standings(snapshot(now=2.5 * DAY, usage=ledger))["a"].usage == 0.0


def test_running_job_counts_before_it_finishes() -> None:
    long = job("long", user="a", procs=4, walltime=2 * DAY)
    fs = FairShare(shares=(("a", 0.5), ("b", 0.5)))
    snap = snapshot(now=6 * HOUR, running=[running(long, start=0.0, cpus=4)])
    assert fs.priorities(snap) == {"a": 0.25, "b": 0.5}


def test_running_job_across_a_period_boundary_is_split_and_decayed() -> None:
    long = job("long", user="a", procs=4, walltime=2 * DAY)
    fs = FairShare(shares=(("a", 1.0),))
    # 20 h .. 28 h on the whole cluster: 4 h yesterday, 4 h today.
    snap = snapshot(now=28 * HOUR, running=[running(long, start=20 * HOUR, cpus=4)])
    assert fs.standings(snap)["a"].usage == pytest.approx(4 / 24 + 0.7 * 4 / 24)


def test_resized_running_job_is_not_counted_twice() -> None:
    """After a resize the ledger holds [start, charged_from); the snapshot adds the rest."""
    ledger = UsageLedger(DAY)
    ledger.charge(user="a", group="g", start=0.0, end=3 * HOUR, cpus=4)
    shrunk = job("m", user="a", procs=4, walltime=DAY)
    run = running(shrunk, start=0.0, cpus=2, charged_from=3 * HOUR)
    fs = FairShare(shares=(("a", 1.0),))
    usage = fs.standings(snapshot(now=6 * HOUR, running=[run], usage=ledger))["a"].usage
    assert usage == (4 * 3 + 2 * 3) / 96


def test_running_and_finished_usage_agree_through_the_core() -> None:
    """A job's usage is the same one second before it finishes (running) and at its end."""
    fs = FairShare(shares=(("a", 0.5), ("b", 0.5)))
    core = SchedulerCore(policy=HeadFirst(priority=fs), machines=[Machine(id="m", cpus=4)])
    core.submit(job("x", user="a", procs=2, walltime=DAY))
    core.submit(job("y", user="b", procs=1, walltime=HOUR))  # queued behind, keeps b seen
    core.schedule(0.0)
    during = fs.standings(core.snapshot(10 * HOUR))["a"].usage
    core.finished("x", 10 * HOUR)
    after = fs.standings(core.snapshot(10 * HOUR))["a"].usage
    assert during == after == pytest.approx(20 / 96)


def test_by_group_uses_the_group_share_and_usage() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="ann", group="phys", start=0.0, end=12 * HOUR, cpus=4)
    fs = FairShare(by="group", shares=(("phys", 0.6), ("bio", 0.4)))
    queue = [job("1", user="bob", group="phys"), job("2", user="cat", group="bio")]
    snap = snapshot(now=12 * HOUR, queue=queue, usage=ledger)
    assert fs.priorities(snap) == {"phys": pytest.approx(0.1), "bio": 0.4}
    assert [j.id for j in fs.order(snap)] == ["2", "1"]


# -- shares of unlisted names --------------------------------------------------------


def test_unlisted_names_split_what_is_left_equally() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="old", group="g", start=0.0, end=0.0, cpus=1)  # seen, no usage
    fs = FairShare(shares=(("boss", 0.4),))
    queue = [job("1", user="x"), job("2", user="y")]
    run = running(job("r", user="z"), start=DAY, cpus=1)
    table = fs.standings(snapshot(now=DAY, queue=queue, running=[run], usage=ledger))
    assert list(table) == ["boss", "old", "z", "x", "y"]
    assert table["boss"].share == 0.4
    assert {n: table[n].share for n in ("old", "z", "x", "y")} == pytest.approx(
        dict.fromkeys(("old", "z", "x", "y"), 0.15)
    )


def test_no_shares_means_equal_shares_and_a_full_list_leaves_nothing() -> None:
    queue = [job("1", user="x"), job("2", user="y")]
    assert FairShare().priorities(snapshot(now=0.0, queue=queue)) == {"x": 0.5, "y": 0.5}
    full = FairShare(shares=(("x", 1.0),))
    assert full.priorities(snapshot(now=0.0, queue=queue)) == {"x": 1.0, "y": 0.0}


# -- order and tie-breaks -----------------------------------------------------------


def test_ties_go_to_share_then_submit_then_arrival() -> None:
    fs = FairShare(shares=(("lo", 0.2), ("hi", 0.3), ("p", 0.25), ("q", 0.25)))
    ledger = UsageLedger(DAY)
    # hi used 0.1 of the day: P(hi) = 0.2 = P(lo); the higher share goes first.
    ledger.charge(user="hi", group="g", start=0.0, end=0.1 * DAY, cpus=4)
    queue = [
        job("lo-1", user="lo"),
        job("hi-1", user="hi"),
        job("q-late", user="q", submit=5.0),
        job("p-early", user="p", submit=1.0),
        job("q-early", user="q", submit=1.0),
    ]
    order = fs.order(snapshot(now=0.5 * DAY, queue=queue, usage=ledger))
    # p and q tie on priority and share: earlier submit, then arrival order.
    assert [j.id for j in order] == ["p-early", "q-early", "q-late", "hi-1", "lo-1"]


def test_float_noise_does_not_beat_the_share_tie_break() -> None:
    """0.1 + 0.2 of a cluster-day is not exactly 0.3 in floats; it still ties with 0.3."""
    ledger = UsageLedger(DAY)
    ledger.charge(user="lo", group="g", start=0.0, end=0.1 * DAY, cpus=4)
    ledger.charge(user="lo", group="g", start=0.1 * DAY, end=0.3 * DAY, cpus=4)
    ledger.charge(user="hi", group="g", start=0.0, end=0.4 * DAY, cpus=4)
    fs = FairShare(shares=(("lo", 0.4), ("hi", 0.5)))
    queue = [job("lo-1", user="lo"), job("hi-1", user="hi")]
    order = fs.order(snapshot(now=0.5 * DAY, queue=queue, usage=ledger))
    assert [j.id for j in order] == ["hi-1", "lo-1"]


def test_short_queues_are_returned_as_they_are() -> None:
    assert list(JACK_JILL.order(snapshot(now=0.0))) == []
    one = [job("1", user="jack")]
    assert list(JACK_JILL.order(snapshot(now=0.0, queue=one))) == one


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": 1.5}, "decay"),
        ({"decay": float("nan")}, "decay"),
        ({"window": 0}, "window"),
        ({"by": "account"}, "'by'"),
        ({"shares": (("a", 0.5), ("a", 0.2))}, "twice"),
        ({"shares": (("a", -0.1),)}, "share of 'a'"),
        ({"shares": (("", 0.1),)}, "non-empty"),
        ({"shares": (("a", 0.6), ("b", 0.6))}, "sum to"),
    ],
)
def test_bad_parameters_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FairShare(**kwargs)  # type: ignore[arg-type]


def test_shares_written_as_decimals_may_sum_to_one() -> None:
    FairShare(shares=(("a", 0.1), ("b", 0.2), ("c", 0.7)))


def test_the_source_is_frozen_and_hashable() -> None:
    assert hash(JACK_JILL) == hash(FairShare(shares=(("jack", 0.25), ("jill", 0.75))))


# -- cost --------------------------------------------------------------------------------


@dataclass
class CountingUsage:
    """A usage view that counts ledger look-ups."""

    ledger: UsageLedger
    lookups: int = 0
    names_calls: list[str] = field(default_factory=list)

    @property
    def period(self) -> float:
        return self.ledger.period

    def cpu_seconds(self, kind: str, name: str, period_index: int) -> float:
        self.lookups += 1
        return self.ledger.cpu_seconds(kind, name, period_index)

    def names(self, kind: str) -> list[str]:
        self.names_calls.append(kind)
        return self.ledger.names(kind)

    def recent(self, kind: str, name: str, last: int, count: int) -> list[float]:
        self.lookups += count
        return self.ledger.recent(kind, name, last, count)

    def decayed(self, kind: str, name: str, last: int, count: int, decay: float) -> float:
        self.lookups += count
        return self.ledger.decayed(kind, name, last, count, decay)

    def knows(self, kind: str, name: str) -> bool:
        return self.ledger.knows(kind, name)

    def count(self, kind: str) -> int:
        return self.ledger.count(kind)


def test_usage_is_looked_up_once_per_name_not_per_job() -> None:
    ledger = UsageLedger(DAY)
    for u in range(20):
        ledger.charge(user=f"u{u}", group="g", start=0.0, end=HOUR, cpus=1)
    view = CountingUsage(ledger)
    # 3000 jobs of 300 users, only 20 of whom have any usage.
    queue = [job(f"j{i}", user=f"u{i % 300}", submit=float(i)) for i in range(3000)]
    snap = Snapshot(
        now=0.5 * DAY,
        machines=[Machine(id="m", cpus=64)],
        free={"m": 64},
        running=[],
        queue=queue,
        usage=view,
        total_cpus=64,
        speeds={"m": 1.0},
        reservations={},
    )
    order = FairShare().order(snap)
    assert view.lookups == 20 * 7
    # Ordering never lists every name ever charged: it counts them.
    assert view.names_calls == []
    assert sorted(j.id for j in order) == sorted(j.id for j in queue)
    # The 280 users without usage come first (equal P, equal share: submit order).
    assert order[0].id == "j20"


# -- invariants ----------------------------------------------------------------------------

USERS = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def queues(draw: st.DrawFn) -> list[Job]:
    n = draw(st.integers(min_value=0, max_value=30))
    return [
        job(
            f"j{i}",
            user=draw(USERS),
            procs=draw(st.integers(min_value=1, max_value=4)),
            submit=draw(st.sampled_from([0.0, 1.0, 2.0])),
        )
        for i in range(n)
    ]


@settings(max_examples=200, deadline=None, database=None)
@given(
    queue=queues(),
    charges=st.lists(
        st.tuples(USERS, st.floats(0, 10 * DAY), st.floats(0, DAY), st.integers(1, 4)),
        max_size=10,
    ),
    now=st.floats(0, 12 * DAY),
)
def test_order_is_a_permutation_sorted_by_priority(
    queue: list[Job], charges: list[tuple[str, float, float, int]], now: float
) -> None:
    ledger = UsageLedger(DAY)
    for user, start, length, cpus in charges:
        ledger.charge(user=user, group="g", start=start, end=start + length, cpus=cpus)
    fs = FairShare(shares=(("a", 0.5), ("b", 0.25)))
    snap = snapshot(now=now, queue=queue, usage=ledger)
    order = fs.order(snap)
    assert sorted(j.id for j in order) == sorted(j.id for j in queue)
    prio = fs.priorities(snap)
    ranks = [round(prio[j.user], 9) for j in order]
    assert ranks == sorted(ranks, reverse=True)
    # Deterministic: the same snapshot gives the same order.
    assert list(fs.order(snap)) == list(order)


@settings(max_examples=100, deadline=None, database=None)
@given(
    jobs=st.lists(
        st.tuples(USERS, st.integers(1, 4), st.sampled_from([0.0, 1.0, 2.0]), st.booleans()),
        max_size=25,
    ),
    steps=st.lists(st.floats(0, 2 * DAY), min_size=1, max_size=6),
    by=st.sampled_from(["user", "group"]),
)
def test_the_cores_per_name_queue_gives_the_same_order_as_sorting_jobs(
    jobs: list[tuple[str, int, float, bool]], steps: list[float], by: str
) -> None:
    # The fast path (names sorted, their queued jobs concatenated, ties merged)
    # against the per-job sort, on queues the core really keeps: with running
    # jobs, charged usage, and names tied at the same share and usage.
    fs = FairShare(shares=(("a", 0.5),), by="group" if by == "group" else "user")
    core = SchedulerCore(policy=HeadFirst(priority=fs), machines=[Machine(id="m", cpus=4)])
    for i, (user, procs, submit, odd) in enumerate(sorted(jobs, key=lambda j: j[2])):
        core.submit(
            job(f"j{i}", user=user, group="g1" if odd else "g2", procs=procs, submit=submit)
        )
    now = 2.0
    for step in sorted(steps):
        now = max(now, step)
        for run in list(core.running):
            if run.est_end <= now:
                core.finished(run.job.id, now)
        snap = core.snapshot(now)
        assert snap.by_account is not None
        fast = list(fs.order(snap))
        slow = list(fs.order(replace(snap, by_account=None)))
        assert [j.id for j in fast] == [j.id for j in slow]
        core.schedule(now)


@settings(max_examples=200, deadline=None, database=None)
@given(
    runs=st.lists(
        st.tuples(USERS, st.floats(0, 10 * DAY), st.floats(0, 3 * DAY), st.integers(1, 4)),
        max_size=8,
    ),
    charges=st.lists(
        st.tuples(USERS, st.floats(0, 10 * DAY), st.floats(0, DAY), st.integers(1, 4)),
        max_size=8,
    ),
    queued=st.lists(USERS, min_size=1, max_size=6),
    now=st.floats(0, 12 * DAY),
)
def test_the_queue_table_agrees_with_the_full_standings(
    runs: list[tuple[str, float, float, int]],
    charges: list[tuple[str, float, float, int]],
    queued: list[str],
    now: float,
) -> None:
    # queue_table adds a run's use inside today's period analytically, after the
    # ledger's decayed sum; standings splits every run period by period and sums
    # after. Runs here begin today, yesterday and before the window alike.
    ledger = UsageLedger(DAY)
    for user, start, length, cpus in charges:
        ledger.charge(user=user, group="g", start=start, end=start + length, cpus=cpus)
    live = [
        running(job(f"r{i}", user=user), start=min(start, now), cpus=cpus)
        for i, (user, start, _, cpus) in enumerate(runs)
    ]
    for run in live:
        ledger.note(user=run.job.user, group="g")
    queue = [job(f"q{i}", user=user) for i, user in enumerate(queued)]
    fs = FairShare(shares=(("a", 0.5),))
    snap = snapshot(now=now, queue=queue, running=live, usage=ledger)
    full = fs.priorities(snap)
    table = fs.queue_priorities(snap)
    assert table.keys() == set(queued)
    for who, p in table.items():
        assert p == pytest.approx(full[who], rel=1e-12, abs=1e-12)
