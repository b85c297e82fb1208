"""The ranks' CPU kernel and ``--speed auto``'s benchmark, and the agent's CPU options."""

from __future__ import annotations

import time

import pytest

from nodeagent.__main__ import measured_speed
from nodeagent.agent.cpuset import (
    CpusetError,
    SlotPool,
    format_cpuset,
    parse_cpuset,
    placement,
)
from nodeagent.job.kernel import benchmark, burn


def test_burn_uses_the_cpu_seconds_asked() -> None:
    before = time.process_time()
    burn(0.05)
    assert time.process_time() - before >= 0.05


def test_the_benchmark_scores_against_its_reference_on_an_injected_clock() -> None:
    ticks = iter(float(i) * 0.01 for i in range(100_000))
    score = benchmark(rounds=3, round_seconds=0.05, clock=lambda: next(ticks))
    # One chunk per 0.01 s tick; a round of 0.05 s holds 4 (the 5th tick ends it).
    assert score.chunks_per_second == pytest.approx(80.0)
    assert score.spread == pytest.approx(0.0)
    assert score.score == pytest.approx(80.0 / 15_000.0)


def test_a_declared_speed_wins_and_auto_measures() -> None:
    assert measured_speed("2.5") == (2.5, None)
    speed, score = measured_speed("auto")
    assert score is not None
    assert speed == score.score > 0
    with pytest.raises(ValueError, match="a number or 'auto'"):
        measured_speed("fast")


def test_cpu_lists_parse_and_print_like_the_kernel() -> None:
    assert parse_cpuset("0-2,5,7-8") == (0, 1, 2, 5, 7, 8)
    assert format_cpuset((8, 0, 1, 2, 5, 7)) == "0-2,5,7-8"
    for bad in ("", "a", "3-1", "-1", "1-"):
        with pytest.raises(CpusetError):
            parse_cpuset(bad)


def test_slots_map_to_cores_and_emulation_is_flagged() -> None:
    pool = SlotPool(cores=(4, 5), slots=4)
    assert pool.emulated
    assert [pool.core(s) for s in range(4)] == [4, 5, 4, 5]
    part = pool.take(2)
    assert part == (0, 1)
    shrunk = pool.resize(part, 1)
    assert shrunk == (0,)
    assert pool.resize(shrunk, 3) == (0, 1, 2)
    assert not SlotPool(cores=(0, 1), slots=2).emulated


def test_placement_puts_at_most_two_ranks_per_slot_at_mpl_2() -> None:
    assert placement(4, (0, 1, 2, 3)) == [0, 1, 2, 3]
    assert placement(4, (3, 1)) == [1, 3, 1, 3]
    assert placement(3, (0, 1)) == [0, 1, 0]
