"""The fair-share usage of archived jobs: kept in the journal when they move, charged at a
restart before the journal's jobs, so a scheduler that archived restarts with the
usage, names and fair-share standings of one that never did; a kill mid-move charges
nothing twice; a schema-9 journal gets the table empty."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from broker.topics import Topics
from model.machine import Machine, Part
from scheduler.core.core import SchedulerCore
from scheduler.core.job_lifecycle import JobState
from scheduler.core.usage import UsageLedger
from scheduler.live import reconcile
from scheduler.live.context import Context
from scheduler.live.settings import ActorSettings
from scheduler.policies.fcfs import Fcfs
from scheduler.priority.fairshare import FairShare
from scheduler.runtime.exporter import SchedulerMetrics
from scheduler.runtime.journal import Journal
from tests.builders import spec

DAY = 86400.0
#: When the restarted schedulers are compared: day 2, so days 0 and 1 decay.
NOW = 2 * DAY + 3600.0
#: Ended by then: the jobs that move (``late`` ended after it, and stays).
CUTOFF = DAY + 7200.0
BY = (FairShare(by="user"), FairShare(by="group"), FairShare(by="user", window=1, decay=0.5))


def filled(path: Path) -> Journal:
    """Jobs of ann and bob (group g1) and cid and eve (g2): runs within a day, across a
    day boundary, of no length (cid's: known, nothing charged), a cancelled one that
    never ran (dee's: not known), one that ended late, one running, and a queue."""
    j = Journal(path, archive=True)
    j.ensure_meta(epoch=0.0, time_scale=1.0, policy="fcfs:fairshare")
    who = {
        "a1": ("ann", "g1"),
        "a2": ("ann", "g1"),
        "b1": ("bob", "g1"),
        "c1": ("cid", "g2"),
        "d1": ("dee", "g2"),
        "late": ("eve", "g2"),
        "run": ("ann", "g1"),
        "qa": ("ann", "g1"),
        "qb": ("bob", "g1"),
        "qe": ("eve", "g2"),
    }
    j.record_submissions(
        [(spec(x, 2, user=user, group=group), 1.0) for x, (user, group) in who.items()]
    )
    # (job, start, end, CPUs): times in halves of a second, so every sum is exact.
    for job_id, start, end, cpus in (
        ("a1", 100.0, 3700.5, 2),
        ("b1", DAY - 4000.0, DAY + 2000.0, 3),
        ("a2", DAY + 10.0, DAY + 610.25, 4),
        ("c1", 500.0, 500.0, 1),
        ("late", DAY + 3000.0, NOW - 60.0, 2),
    ):
        j.record_start(job_id, start, [Part("m1", cpus)])
        j.record_end(job_id, end, JobState.FINISHED)
    j.record_cancels(["d1"], 50.0, "by its owner")
    j.record_start("run", NOW - 1800.0, [Part("m1", 1)])
    return j


def restarted(j: Journal) -> SchedulerCore:
    """A core rebuilt from ``j`` as a restarted scheduler rebuilds it (reconcile.restore)."""
    core = SchedulerCore(policy=Fcfs(), machines=(Machine(id="m1", cpus=8),))
    ctx = Context(
        core=core,
        settings=ActorSettings(),
        journal=j,
        metrics=SchedulerMetrics(CollectorRegistry()),
        topics=Topics(),
        time_scale=1.0,
        wall=lambda: NOW,
        cordoned=set(),
    )
    state = j.load()
    reconcile.restore(
        ctx,
        state.jobs,
        j.last_event_seqs(),
        NOW,
        usage=state.usage.sums,
        usage_period=state.usage.period,
    )
    return core


def ledger_view(ledger: UsageLedger) -> dict[str, object]:
    """What fair-share reads of a ledger: the names and their decayed sums, over days."""
    view: dict[str, object] = {}
    for kind in ("user", "group"):
        names = ledger.names(kind)
        view[kind] = sorted(names)
        for last in (0, 1, 2, 9):
            for count, decay in ((7, 0.7), (1, 0.5), (3, 1.0)):
                view[f"{kind}:{last}:{count}:{decay}"] = {
                    n: ledger.decayed(kind, n, last, count, decay) for n in names
                }
    return view


def standing(core: SchedulerCore) -> dict[str, object]:
    """The fair-share standings and queue order of each source in :data:`BY`."""
    snap = core.snapshot(NOW)
    return {
        f"{fs.by}:{fs.window}": (fs.standings(snap), [job.id for job in fs.order(snap)])
        for fs in BY
    }


def reference(tmp_path: Path) -> tuple[dict[str, object], dict[str, object]]:
    """The ledger and standings of a scheduler that never archived."""
    with filled(tmp_path / "never.sqlite") as j:
        core = restarted(j)
        return ledger_view(core.usage), standing(core)


def test_a_restart_after_archiving_weighs_the_usage_of_one_that_never_did(
    tmp_path: Path,
) -> None:
    ledger, standings = reference(tmp_path)
    assert ledger["user"] == ["ann", "bob", "cid", "eve"]  # dee never ran
    path = tmp_path / "j.sqlite"
    with filled(path) as j:
        # Two at a time: the sums of a name and period are added batch by batch.
        moved = [j.archive(CUTOFF, 2).jobs for _ in range(4)]
        assert moved == [2, 2, 1, 0]
        assert {row.spec.id for row in j.load().jobs} == {"late", "run", "qa", "qb", "qe"}
        core = restarted(j)
        assert ledger_view(core.usage) == ledger
        assert standing(core) == standings
        # bob's run crossed midnight: one row per name and period, of what it used there.
        usage = j.load().usage
        assert usage.period == DAY
        assert [s for s in usage.sums if s[1] in ("bob", "cid")] == [
            ("user", "bob", 0, 4000.0 * 3),
            ("user", "bob", 1, 2000.0 * 3),
            ("user", "cid", 0, 0.0),
        ]
        assert ("group", "g1", 0, 4000.0 * 3 + 3600.5 * 2) in usage.sums
    # Again, from the files alone (a new process's view), after the late job moved too.
    with Journal(path) as j:
        assert j.archive(NOW, 100).jobs == 1
        core = restarted(j)
        assert ledger_view(core.usage) == ledger
        assert standing(core) == standings


_KILLED_MID_MOVE = """
import os, sys
from scheduler.runtime.journal import Journal
j = Journal(sys.argv[1], archive=True)
assert j.archive(float(sys.argv[2]), 2).jobs == 2
j.archive(float(sys.argv[2]), 2, after_copy=lambda: os._exit(9))
"""


def test_a_kill_between_the_copy_and_the_delete_charges_nothing_twice(tmp_path: Path) -> None:
    ledger, standings = reference(tmp_path)
    path = tmp_path / "j.sqlite"
    filled(path).close()
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_MOVE, str(path), str(CUTOFF)],
        check=False,
        cwd=Path.cwd(),
    )
    assert done.returncode == 9
    with Journal(path) as j:
        # The second batch is in both files and charged once, from the journal's rows.
        core = restarted(j)
        assert ledger_view(core.usage) == ledger
        assert standing(core) == standings
        # The next batch finishes the move: its sums are added once, with the delete.
        assert j.archive(CUTOFF, 10).jobs == 3
        core = restarted(j)
        assert ledger_view(core.usage) == ledger
        assert standing(core) == standings


def test_a_schema_9_journal_gets_the_usage_table_empty_and_archives_into_it(
    tmp_path: Path,
) -> None:
    ledger, standings = reference(tmp_path)
    path = tmp_path / "j.sqlite"
    filled(path).close()
    with closing(sqlite3.connect(path)) as db:  # what schema 9 wrote: no schema-10 parts
        db.executescript(
            "DROP TABLE archived_counts; DROP TABLE archived_streams; DROP TABLE archived_usage; "
            "DROP INDEX events_job; DROP INDEX jobs_ended; "
            "UPDATE meta SET value='9' WHERE key='schema';"
        )
    with Journal(path, archive=True) as j:
        state = j.load()
        assert (state.usage.period, state.usage.sums) == (None, ())
        assert ledger_view(restarted(j).usage) == ledger
        assert j.archive(CUTOFF, 10).jobs == 5
        core = restarted(j)
        assert ledger_view(core.usage) == ledger
        assert standing(core) == standings


def test_usage_split_by_another_period_is_refused_before_anything_moves(
    tmp_path: Path,
) -> None:
    with filled(tmp_path / "j.sqlite") as j:
        # d1 never ran (nothing kept, any period will do), c1 keeps a row of 0.
        assert j.archive(CUTOFF, 1, usage_period=3600.0).jobs == 1
        assert j.archive(CUTOFF, 1).jobs == 1
        assert j.archive(CUTOFF, 10, usage_period=3600.0).jobs == 0
        assert len(j.load().jobs) == 8
        core = SchedulerCore(policy=Fcfs(), machines=(), usage_period=3600.0)
        with pytest.raises(ValueError, match=r"periods of 86400\.0 s"):
            core.restore_usage(j.load().usage.sums, j.load().usage.period)


def test_a_stored_sum_reads_as_the_charges_it_stands_for() -> None:
    charged, added = UsageLedger(), UsageLedger()
    charged.charge(user="ann", group="g", start=10.0, end=20.0, cpus=2)
    added.charge(user="ann", group="g", start=10.0, end=20.0, cpus=2)
    before = charged.decayed("user", "ann", 0, 7, 0.7)
    assert added.decayed("user", "ann", 0, 7, 0.7) == before  # remembered in the memo
    charged.charge(user="bob", group="g", start=DAY - 5.0, end=DAY + 5.0, cpus=1)
    charged.charge(user="ann", group="h", start=30.0, end=30.0, cpus=1)
    for kind, name, index, seconds in (
        ("user", "bob", 0, 5.0),
        ("user", "bob", 1, 5.0),
        ("group", "g", 0, 5.0),
        ("group", "g", 1, 5.0),
        ("user", "ann", 0, 0.0),
        ("group", "h", 0, 0.0),
    ):
        added.add_period(kind, name, index, seconds)
    for kind in ("user", "group"):
        assert added.names(kind) == charged.names(kind)
        for name in charged.names(kind):
            for last in (0, 1):
                # The memo of ann's and g's sums was dropped with the new use.
                assert added.decayed(kind, name, last, 7, 0.7) == charged.decayed(
                    kind, name, last, 7, 0.7
                )
    _, _, _, touched = added.standing_view("group", 1, 7, 0.7)
    assert touched[-3:] == ["g", "g", "h"]
