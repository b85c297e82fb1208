"""Fair-share (scheduler.priority.fairshare) on the scheduling-algorithms text's worked
example: users jack and jill, driven through the real scheduler core so the usage
reaches the priorities the way it does in a run (charged when each job finishes),
and the decay of that usage over the following days.
"""

from __future__ import annotations

import pytest

from scheduler.core.core import SchedulerCore
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare import FairShare
from tests.builders import snapshot
from tests.scheduler.priority.fairshare_fixtures import DAY, HOUR, JACK_JILL, jack_jill_core

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
