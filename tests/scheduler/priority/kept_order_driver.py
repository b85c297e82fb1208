"""Random event sequences through real cores, for the priority sources' kept state.

Fair-share (``scheduler.priority.fairshare_rank``) and multi-factor
(``scheduler.priority.multifactor_rank``) keep standings and orders between
events on the core's queue index. The tests drive two real cores that share
one policy object (as two replays, or a restored scheduler, could) through
submissions, starts, ends, cancellations, machines lost (jobs requeued) and
added, and clock jumps across days, and after every event compare what the
kept state gives with the from-scratch reference: the same sources read through
a usage view that is not the core's ledger, which takes the reference path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Snapshot
from scheduler.core.usage import UsageLedger
from scheduler.policies.easy import EasyBackfill
from tests.builders import job

DAY = 86400.0

USERS = ("ann", "bob", "cid", "dan")
GROUPS = ("g1", "g2")


@dataclass
class LedgerView:
    """The core's ledger behind a plain usage view: sources take their reference
    path (they keep state only for the core's own :class:`UsageLedger`)."""

    ledger: UsageLedger

    @property
    def period(self) -> float:
        return self.ledger.period

    def cpu_seconds(self, kind: str, name: str, period_index: int) -> float:
        return self.ledger.cpu_seconds(kind, name, period_index)

    def names(self, kind: str) -> list[str]:
        return self.ledger.names(kind)

    def recent(self, kind: str, name: str, last: int, count: int) -> list[float]:
        return self.ledger.recent(kind, name, last, count)

    def decayed(self, kind: str, name: str, last: int, count: int, decay: float) -> float:
        return self.ledger.decayed(kind, name, last, count, decay)

    def knows(self, kind: str, name: str) -> bool:
        return self.ledger.knows(kind, name)

    def count(self, kind: str) -> int:
        return self.ledger.count(kind)


def reference(snap: Snapshot) -> Snapshot:
    """``snap`` read through a :class:`LedgerView`: the sources' from-scratch path."""
    assert isinstance(snap.usage, UsageLedger)
    return replace(snap, usage=LedgerView(snap.usage))


# One event: (kind, core 0 or 1, a few numbers whose meaning depends on the kind).
Event = tuple[str, int, int, int, int, float]

events = st.lists(
    st.tuples(
        st.sampled_from(
            ["submit"] * 5
            + ["schedule", "schedule", "end", "advance", "cancel", "lose", "join", "day"]
        ),
        st.integers(0, 1),
        st.integers(0, len(USERS) - 1),
        st.integers(1, 4),
        st.integers(0, 3),
        st.sampled_from([0.0, 1.0, 600.0, 3600.0, 0.3 * DAY, 2 * DAY, -50.0]),
    ),
    min_size=10,
    max_size=80,
)


#: Two machines of 4 CPUs; "lose" and "join" events take ``m2`` away and back.
MACHINES = (Machine(id="m1", cpus=4), Machine(id="m2", cpus=4))


def drive(
    events: Sequence[Event],
    policy: EasyBackfill,
    check: Callable[[Snapshot], None],
    *,
    period: float = DAY,
) -> int:
    """Apply ``events`` to two cores sharing ``policy``; ``check`` every snapshot with
    a job in the queue. Returns how many snapshots were checked."""
    cores = [SchedulerCore(policy=policy, machines=MACHINES, usage_period=period) for _ in range(2)]
    nows = [0.0, 0.0]
    serial = 0
    checked = 0
    for kind, which, a, b, c, x in events:
        core = cores[which]
        now = nows[which]
        if kind == "submit":
            serial += 1
            # Submit times in the past (old jobs), now, or just ahead of the clock.
            j = job(
                f"j{serial}",
                b + 2 if c == 3 else b,
                walltime=3600.0 * (1 + c),
                submit=max(0.0, now - x),
                user=USERS[a],
                group=GROUPS[a % 2],
                qos=c if a == 3 else 0,
            )
            core.submit(j, capacity=8)
        elif kind == "schedule":
            core.schedule(now)
        elif kind == "end":
            running = list(core.running)
            if running:
                core.finished(running[a % len(running)].job.id, now)
        elif kind == "cancel":
            queued = list(core.queue)
            if queued:
                core.cancel(queued[a % len(queued)].id, now)
        elif kind == "lose":
            if any(m.id == "m2" for m in core.machines):
                core.machine_left("m2", now)
        elif kind == "join":
            if not any(m.id == "m2" for m in core.machines):
                core.machine_joined(Machine(id="m2", cpus=4))
        elif kind == "advance":
            nows[which] = now + abs(x)
        else:  # "day": past the end of this period, and now and then several
            nows[which] = (now // period + 1 + c) * period + abs(x) % period
        snap = core.snapshot(nows[which])
        if snap.queue:
            check(snap)
            checked += 1
    return checked


def ids(jobs: Sequence[Job]) -> list[str]:
    return [j.id for j in jobs]
