"""Multi-factor's clock-free order kept between events
(``scheduler.priority.multifactor_rank``) equals the from-scratch reference job for
job, over random event sequences on real cores: fair-share weights that move (and
stay at 0 below a name's share), ages that saturate or are not reached yet (the
reference path then), QoS maxima that come and go, ties and near-ties, capacity
changes, requeues and cancels, two cores sharing one policy object."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings

from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Snapshot
from scheduler.core.usage import UsageLedger
from scheduler.policies.easy import EasyBackfill
from scheduler.priority.fairshare import FairShare
from scheduler.priority.multifactor import MultiFactor
from scheduler.priority.multifactor_rank import ClockFreeOrder, clock_free_order
from tests.builders import job
from tests.scheduler.priority.kept_order_driver import DAY, Event, drive, events, ids, reference

SOURCES = [
    MultiFactor(),
    # Age weighs as much as size and fair-share: many near-ties between users.
    MultiFactor(weight_age=1000.0, weight_fairshare=1000.0, max_age=2 * DAY),
    MultiFactor(fairshare=FairShare(by="group", window=2), max_qos=2, weight_size=0.0),
    MultiFactor(weight_age=0.0, weight_fairshare=0.0),
    # Every priority within 1e-6 of every other: every neighbour is close, and most
    # pairs tie to 1e-9, so the close runs are re-sorted at every event.
    MultiFactor(weight_age=3e-7, weight_fairshare=2e-7, weight_size=4e-7, weight_qos=1e-7),
    # Every priority within a few 1e-9 buckets: the clock-free keys differ where the
    # reference sees ties (broken by submit time) or the next bucket.
    MultiFactor(weight_age=1e-9, weight_fairshare=2e-9, weight_size=3e-9, weight_qos=0.0),
]


def check_against_reference(mf: MultiFactor) -> Callable[[Snapshot], None]:
    def check(snap: Snapshot) -> None:
        assert ids(mf.order(snap)) == ids(mf.order(reference(snap)))

    return check


@settings(max_examples=150, deadline=None, database=None)
@given(steps=events)
def test_kept_order_equals_the_reference(steps: list[Event]) -> None:
    for mf in SOURCES:
        drive(steps, EasyBackfill(priority=mf), check_against_reference(mf))


def test_near_ties_are_ranked_by_the_reference_key() -> None:
    # Equal clock-free keys across names (no usage, the same size and submit) and a
    # pair a size step apart whose age makes up the difference exactly: 1000 *
    # 6048 s / 7 days == 10 == 1000 * 1 / 100 CPUs.
    mf = MultiFactor()
    core = SchedulerCore(policy=EasyBackfill(priority=mf), machines=[Machine(id="m", cpus=100)])
    core.submit(job("block", 100, walltime=DAY, user="x"))
    core.schedule(0.0)
    jobs = [
        job("a", 2, submit=10.0, walltime=60.0, user="ann"),
        job("b", 2, submit=10.0, walltime=60.0, user="bob"),
        job("c", 3, submit=6058.0, walltime=60.0, user="cid"),
        job("d", 3, submit=6058.0, walltime=60.0, user="cid"),
    ]
    for j in jobs:
        core.submit(j)
    for now in (6058.0, 7000.0, 12345.5, 80000.0):
        snap = core.snapshot(now)
        assert isinstance(snap.usage, UsageLedger)
        assert snap.by_account is not None
        kept = clock_free_order(mf, snap, snap.by_account, snap.usage)
        assert kept is not None
        assert ids(kept) == ids(mf.order(reference(snap)))
        memo = snap.by_account.memos[id(mf)]
        assert isinstance(memo, ClockFreeOrder)
        assert memo.close  # the near-ties are known, and re-sorted at every event


def test_a_difference_below_a_rounding_bucket_is_a_tie() -> None:
    # Size alone, worth 1e-10 per CPU: "late" (2 CPUs) has the larger clock-free key,
    # but both priorities round to the same 1e-9 bucket, so the reference breaks
    # the tie by submit time and "early" goes first.
    mf = MultiFactor(weight_age=0.0, weight_fairshare=0.0, weight_size=1e-8, weight_qos=0.0)
    core = SchedulerCore(policy=EasyBackfill(priority=mf), machines=[Machine(id="m", cpus=100)])
    core.submit(job("block", 100, walltime=DAY, user="x"))
    core.schedule(0.0)
    core.submit(job("early", walltime=60.0, user="ann"))
    core.submit(job("late", 2, submit=5.0, walltime=60.0, user="ann"))
    snap = core.snapshot(10.0)
    assert ids(mf.order(reference(snap))) == ["early", "late"]
    assert ids(mf.order(snap)) == ["early", "late"]


def test_an_aged_queue_takes_the_reference_path() -> None:
    mf = MultiFactor(max_age=DAY)
    core = SchedulerCore(policy=EasyBackfill(priority=mf), machines=[Machine(id="m", cpus=4)])
    core.submit(job("block", 4, walltime=10 * DAY, user="x"))
    core.schedule(0.0)
    core.submit(job("old", walltime=60.0, user="ann"))
    core.submit(job("new", 2, submit=2 * DAY, walltime=60.0, user="bob"))
    snap = core.snapshot(2 * DAY)
    assert isinstance(snap.usage, UsageLedger)
    assert snap.by_account is not None
    # "old" is past max_age: its age is clipped, which the clock-free order leaves
    # to the reference.
    assert clock_free_order(mf, snap, snap.by_account, snap.usage) is None
    assert ids(mf.order(snap)) == ids(mf.order(reference(snap))) == ["old", "new"]
