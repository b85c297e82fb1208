"""Fair-share's standings kept between events (``scheduler.priority.fairshare_rank``)
equal the from-scratch reference bit for bit, over random event sequences on real
cores: charges, day changes, requeues, cancels, names joining and leaving the
queue, machines lost and added, two cores sharing one policy object."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings

from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Snapshot
from scheduler.policies.easy import EasyBackfill
from scheduler.priority.fairshare import FairShare
from scheduler.priority.fairshare_rank import NameRanks
from tests.builders import job
from tests.scheduler.priority.kept_order_driver import (
    MACHINES,
    USERS,
    Event,
    drive,
    events,
    ids,
    reference,
)

SOURCES = [
    FairShare(),
    FairShare(shares=(("ann", 0.5), ("zed", 0.2))),
    FairShare(by="group", window=2, decay=0.5),
    FairShare(shares=(("bob", 0.3),), scale_usage_by_share=True),
]


def check_against_reference(fs: FairShare) -> Callable[[Snapshot], None]:
    def check(snap: Snapshot) -> None:
        ref = reference(snap)
        # Bit for bit: the floats compare equal, not approximately.
        assert fs.queue_table(snap) == fs.queue_table(ref)
        assert ids(fs.order(snap)) == ids(fs.order(ref))

    return check


@settings(max_examples=150, deadline=None, database=None)
@given(steps=events)
def test_kept_standings_equal_the_reference(steps: list[Event]) -> None:
    for fs in SOURCES:
        drive(steps, EasyBackfill(priority=fs), check_against_reference(fs))


@settings(max_examples=60, deadline=None, database=None)
@given(steps=events)
def test_kept_standings_hold_over_short_periods(steps: list[Event]) -> None:
    # A one-hour period: runs span several periods, so the older runs' kept parts
    # (and their float corner cases at a period's edge) are exercised.
    fs = FairShare(window=3)
    drive(steps, EasyBackfill(priority=fs), check_against_reference(fs), period=3600.0)


def test_the_state_is_kept_on_each_core_not_on_the_source() -> None:
    fs = FairShare()
    policy = EasyBackfill(priority=fs)
    cores = [SchedulerCore(policy=policy, machines=MACHINES) for _ in range(2)]
    for n, core in enumerate(cores):
        for i, user in enumerate(USERS[: 2 + n]):
            core.submit(job(f"j{i}", 8, walltime=60.0, user=user))
        core.schedule(0.0)
    snaps = [core.snapshot(10.0) for core in cores]
    for snap in snaps:
        check_against_reference(fs)(snap)
    kept = [snap.by_account.memos[id(fs)] for snap in snaps if snap.by_account is not None]
    assert len(kept) == 2
    assert isinstance(kept[0], NameRanks)
    assert kept[0] is not kept[1]
    assert set(kept[0].entries) | kept[0].live == {"bob"}
    assert set(kept[1].entries) | kept[1].live == {"bob", "cid"}
