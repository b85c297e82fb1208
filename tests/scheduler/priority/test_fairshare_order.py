"""Fair-share's queue order: tie-breaks, what one order costs (ledger look-ups per
name, not per job), and hypothesis invariants (a sorted permutation; the core's
per-name queue and the fast table agree with the full computation).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare import FairShare
from tests.builders import job, running, snapshot
from tests.scheduler.priority.fairshare_fixtures import DAY, HOUR, JACK_JILL, HeadFirst

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
    snap = snapshot(now=0.5 * DAY, queue=queue, usage=view, total_cpus=64)
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
            job(
                f"j{i}", procs, walltime=HOUR, user=user, group="g1" if odd else "g2", submit=submit
            )
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
