"""Fair-share's usage: the window of periods, running jobs counted before they end (and
not twice), usage by group, and the shares of names the policy does not list.
"""

from __future__ import annotations

import pytest

from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare import FairShare
from tests.builders import job, running, snapshot
from tests.scheduler.priority.fairshare_fixtures import DAY, HOUR, HeadFirst

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
    long = job("long", 4, user="a", walltime=2 * DAY)
    fs = FairShare(shares=(("a", 0.5), ("b", 0.5)))
    snap = snapshot(now=6 * HOUR, running=[running(long, start=0.0, cpus=4)])
    assert fs.priorities(snap) == {"a": 0.25, "b": 0.5}


def test_running_job_across_a_period_boundary_is_split_and_decayed() -> None:
    long = job("long", 4, user="a", walltime=2 * DAY)
    fs = FairShare(shares=(("a", 1.0),))
    # 20 h .. 28 h on the whole cluster: 4 h yesterday, 4 h today.
    snap = snapshot(now=28 * HOUR, running=[running(long, start=20 * HOUR, cpus=4)])
    assert fs.standings(snap)["a"].usage == pytest.approx(4 / 24 + 0.7 * 4 / 24)


def test_resized_running_job_is_not_counted_twice() -> None:
    """After a resize the ledger holds [start, charged_from); the snapshot adds the rest."""
    ledger = UsageLedger(DAY)
    ledger.charge(user="a", group="g", start=0.0, end=3 * HOUR, cpus=4)
    shrunk = job("m", 4, user="a", walltime=DAY)
    run = running(shrunk, start=0.0, cpus=2, charged_from=3 * HOUR)
    fs = FairShare(shares=(("a", 1.0),))
    usage = fs.standings(snapshot(now=6 * HOUR, running=[run], usage=ledger))["a"].usage
    assert usage == (4 * 3 + 2 * 3) / 96


def test_running_and_finished_usage_agree_through_the_core() -> None:
    """A job's usage is the same one second before it finishes (running) and at its end."""
    fs = FairShare(shares=(("a", 0.5), ("b", 0.5)))
    core = SchedulerCore(policy=HeadFirst(priority=fs), machines=[Machine(id="m", cpus=4)])
    core.submit(job("x", 2, user="a", walltime=DAY))
    core.submit(job("y", user="b", walltime=HOUR))  # queued behind, keeps b seen
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
