"""Multi-factor priority (scheduler.priority.multifactor)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare import FairShare
from scheduler.priority.multifactor import DEFAULT_MAX_AGE, MultiFactor
from tests.builders import job, snapshot

DAY = 86400.0
HOUR = 3600.0
CPUS = 16


def only(
    *, age: float = 0.0, fairshare: float = 0.0, size: float = 0.0, qos: float = 0.0
) -> MultiFactor:
    """A source where only the named factors weigh (the others' weights are 0)."""
    return MultiFactor(weight_age=age, weight_fairshare=fairshare, weight_size=size, weight_qos=qos)


def ids(jobs: Sequence[Job]) -> list[str]:
    return [j.id for j in jobs]


# -- each factor alone ----------------------------------------------------------------


def test_age_alone_puts_older_jobs_first_and_is_capped() -> None:
    queue = [job("new", submit=3 * DAY), job("old", submit=1 * DAY)]
    src = only(age=1000.0)
    snap = snapshot(now=4 * DAY, queue=queue, total_cpus=CPUS)
    assert ids(src.order(snap)) == ["old", "new"]
    f = src.factors(snap)
    assert f["old"].age == pytest.approx(3 / 7)
    assert f["new"].age == pytest.approx(1 / 7)
    # Past max_age every job has age 1: the order falls back to submit time.
    late = snapshot(now=30 * DAY, queue=queue, total_cpus=CPUS)
    assert src.priorities(late) == {"new": 1000.0, "old": 1000.0}
    assert ids(src.order(late)) == ["old", "new"]


def test_fairshare_alone_puts_the_lighter_user_first() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="heavy", group="g", start=0.0, end=HOUR, cpus=CPUS)
    queue = [job("h", user="heavy"), job("l", user="light")]
    src = only(fairshare=10000.0)
    snap = snapshot(now=2 * HOUR, queue=queue, usage=ledger, total_cpus=CPUS)
    assert ids(src.order(snap)) == ["l", "h"]
    f = src.factors(snap)
    assert f["l"].fairshare == 0.5
    assert f["h"].fairshare == pytest.approx(0.5 - 1 / 24)


def test_fairshare_over_the_share_clips_to_zero() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="heavy", group="g", start=0.0, end=DAY, cpus=CPUS)  # U = 1 > S = 0.5
    queue = [job("h", user="heavy"), job("l", user="light")]
    f = only(fairshare=1.0).factors(snapshot(now=DAY, queue=queue, usage=ledger, total_cpus=CPUS))
    assert f["h"].fairshare == 0.0


def test_fairshare_source_parameters_are_used() -> None:
    queue = [job("a", user="a"), job("b", user="b")]
    src = MultiFactor(
        fairshare=FairShare(shares=(("a", 0.2), ("b", 0.8))),
        weight_age=0.0,
        weight_size=0.0,
        weight_qos=0.0,
    )
    snap = snapshot(now=0.0, queue=queue, total_cpus=CPUS)
    assert src.priorities(snap) == {"a": 2000.0, "b": 8000.0}
    assert ids(src.order(snap)) == ["b", "a"]


def test_size_alone_favours_large_jobs_or_small_ones() -> None:
    queue = [job("small"), job("big", CPUS), job("mid", 4)]
    snap = snapshot(now=0.0, queue=queue, total_cpus=CPUS)
    big_first = only(size=1000.0)
    assert ids(big_first.order(snap)) == ["big", "mid", "small"]
    f = big_first.factors(snap)
    assert (f["big"].size, f["mid"].size, f["small"].size) == (1.0, 0.25, 1 / CPUS)
    small_first = MultiFactor(
        weight_age=0.0, weight_fairshare=0.0, weight_qos=0.0, favor_small=True
    )
    assert ids(small_first.order(snap)) == ["small", "mid", "big"]
    g = small_first.factors(snap)
    assert (g["small"].size, g["mid"].size, g["big"].size) == (1.0, 1 - 3 / CPUS, 1 / CPUS)


def test_qos_alone_relative_to_the_queue_or_to_max_qos() -> None:
    queue = [job("lo", qos=1), job("hi", qos=4), job("none", qos=0)]
    snap = snapshot(now=0.0, queue=queue, total_cpus=CPUS)
    src = only(qos=10000.0)
    assert ids(src.order(snap)) == ["hi", "lo", "none"]
    assert src.priorities(snap) == {"lo": 2500.0, "hi": 10000.0, "none": 0.0}
    fixed = MultiFactor(weight_age=0.0, weight_fairshare=0.0, weight_size=0.0, max_qos=8)
    assert fixed.priorities(snap) == {"lo": 1250.0, "hi": 5000.0, "none": 0.0}
    # A QoS above max_qos counts 1, a negative one 0.
    over = snapshot(now=0.0, queue=[job("x", qos=20), job("y", qos=-3)], total_cpus=CPUS)
    assert fixed.priorities(over) == {"x": 10000.0, "y": 0.0}
    # All QoS 0: the maximum is taken as 1, so nothing divides by zero.
    assert src.priorities(snapshot(now=0.0, queue=[job("z")], total_cpus=CPUS)) == {"z": 0.0}


# -- combined ---------------------------------------------------------------------------


def test_weights_combine_as_a_weighted_sum() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="b", group="g", start=0.0, end=6 * HOUR, cpus=CPUS)  # U(b) = 0.25
    queue = [
        job("a", 8, user="a", submit=0.0, qos=1),
        job("b", 4, user="b", submit=3.5 * DAY, qos=2),
    ]
    src = MultiFactor()  # the defaults: 1000 / 10000 / 1000 / 10000
    snap = snapshot(now=7 * DAY, queue=queue, usage=ledger, total_cpus=CPUS)
    f = src.factors(snap)
    # a: age 1, fair-share 0.5, size 0.5, qos 0.5.
    assert f["a"].priority == pytest.approx(1000 * 1 + 10000 * 0.5 + 1000 * 0.5 + 10000 * 0.5)
    # b: age 0.5, fair-share 0.25 (usage a week ago decayed: 0.25 * 0.7^6), size 0.25, qos 1.
    fs_b = 0.5 - 0.25 * 0.7**6
    assert f["b"].fairshare == pytest.approx(fs_b)
    assert f["b"].priority == pytest.approx(1000 * 0.5 + 10000 * fs_b + 1000 * 0.25 + 10000 * 1)
    assert ids(src.order(snap)) == ["b", "a"]
    # Weigh age and size only and the order flips.
    assert ids(only(age=1.0, size=1.0).order(snap)) == ["a", "b"]


def test_defaults_are_the_documented_ones() -> None:
    src = MultiFactor()
    assert (src.weight_age, src.weight_fairshare, src.weight_size, src.weight_qos) == (
        1000.0,
        10000.0,
        1000.0,
        10000.0,
    )
    assert src.max_age == DEFAULT_MAX_AGE == 7 * DAY
    assert src.fairshare == FairShare()
    assert src.emergency_qos is None


# -- emergency --------------------------------------------------------------------------


def test_emergency_jobs_sort_first_whatever_their_priority() -> None:
    ledger = UsageLedger(DAY)
    ledger.charge(user="storm", group="g", start=0.0, end=DAY, cpus=CPUS)  # a heavy user
    queue = [
        job("best", CPUS, user="x", submit=0.0, qos=5),
        job("tornado-2", user="storm", submit=6 * DAY, qos=100),
        job("tornado-1", user="storm", submit=5 * DAY, qos=200),
        job("meh", user="y", submit=3 * DAY),
    ]
    src = MultiFactor(emergency_qos=100)
    snap = snapshot(now=6 * DAY, queue=queue, usage=ledger, total_cpus=CPUS)
    assert ids(src.order(snap)) == ["tornado-1", "tornado-2", "best", "meh"]
    f = src.factors(snap)
    assert f["tornado-1"].emergency
    assert not f["best"].emergency
    # Emergency QoS stays out of the queue's maximum: "best" keeps its full QoS factor.
    assert f["best"].qos == 1.0
    # Without emergency_qos they are just high-QoS jobs, and they would flatten the others'.
    assert MultiFactor().factors(snap)["best"].qos == 5 / 200


# -- ties ----------------------------------------------------------------------------------


def test_ties_go_to_submit_then_arrival() -> None:
    queue = [job("c", submit=2.0), job("a", submit=1.0), job("b", submit=1.0)]
    src = only()  # every weight 0: every priority 0
    assert ids(src.order(snapshot(now=10.0, queue=queue, total_cpus=CPUS))) == ["a", "b", "c"]


def test_short_queues_are_returned_as_they_are() -> None:
    src = MultiFactor()
    assert list(src.order(snapshot(now=0.0, queue=[], total_cpus=CPUS))) == []
    assert src.factors(snapshot(now=0.0, queue=[], total_cpus=CPUS)) == {}
    one = [job("1")]
    assert ids(src.order(snapshot(now=0.0, queue=one, total_cpus=CPUS))) == ["1"]


def test_empty_cluster_gives_size_zero() -> None:
    f = only(size=1.0).factors(snapshot(now=0.0, queue=[job("1")], total_cpus=0))
    assert f["1"].size == 0.0


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weight_age": -1.0}, "weight_age"),
        ({"weight_qos": float("inf")}, "weight_qos"),
        ({"weight_fairshare": float("nan")}, "weight_fairshare"),
        ({"max_age": 0.0}, "max_age"),
        ({"max_qos": 0}, "max_qos"),
    ],
)
def test_bad_parameters_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MultiFactor(**kwargs)  # type: ignore[arg-type]


def test_the_source_is_frozen_and_hashable() -> None:
    assert hash(MultiFactor()) == hash(MultiFactor())


# -- invariants --------------------------------------------------------------------------------


@st.composite
def queues(draw: st.DrawFn) -> list[Job]:
    n = draw(st.integers(min_value=0, max_value=40))
    return [
        job(
            f"j{i}",
            user=draw(st.sampled_from(["a", "b", "c"])),
            procs=draw(st.integers(min_value=1, max_value=CPUS)),
            submit=draw(st.floats(min_value=0.0, max_value=20 * DAY)),
            qos=draw(st.integers(min_value=-2, max_value=12)),
        )
        for i in range(n)
    ]


@settings(max_examples=200, deadline=None, database=None)
@given(
    queue=queues(),
    now=st.floats(min_value=0.0, max_value=25 * DAY),
    usage_hours=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.floats(0, 48)), max_size=4),
    favor_small=st.booleans(),
    emergency_qos=st.none() | st.integers(min_value=5, max_value=12),
)
def test_order_is_a_permutation_and_factors_are_in_range(
    queue: list[Job],
    now: float,
    usage_hours: list[tuple[str, float]],
    favor_small: bool,
    emergency_qos: int | None,
) -> None:
    ledger = UsageLedger(DAY)
    for user, hours in usage_hours:
        ledger.charge(user=user, group="g", start=0.0, end=hours * HOUR, cpus=CPUS)
    src = MultiFactor(favor_small=favor_small, emergency_qos=emergency_qos)
    snap = snapshot(now=now, queue=queue, usage=ledger, total_cpus=CPUS)
    order = src.order(snap)
    assert sorted(ids(order)) == sorted(ids(queue))
    table = src.factors(snap)
    top = src.weight_age + src.weight_fairshare + src.weight_size + src.weight_qos
    for f in table.values():
        for value in (f.age, f.fairshare, f.size, f.qos):
            assert 0.0 <= value <= 1.0
        assert 0.0 <= f.priority <= top
    # Emergency jobs form a prefix; inside each block priority does not increase.
    flags = [table[j.id].emergency for j in order]
    assert flags == sorted(flags, reverse=True)
    for block in (True, False):
        ranks = [round(table[j.id].priority, 9) for j in order if table[j.id].emergency is block]
        assert ranks == sorted(ranks, reverse=True)
