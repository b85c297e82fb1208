"""``bench/live/launch.py`` measures what it says: real launches both ways, a real agent's burst.

Small sizes, no timing asserted (the machine is shared): each measurement
must come from processes that really reached their first report.
"""

from __future__ import annotations

from bench.live.launch import burst, one_launch


async def test_both_ways_launch_real_job_processes() -> None:
    measured = await one_launch(2)
    for way in ("exec", "fork"):
        walls, cpus = measured[way]
        assert len(walls) == len(cpus) == 2
        assert all(w > 0 for w in walls)
        assert all(c >= 0 for c in cpus)


async def test_a_burst_runs_every_process_on_one_agent() -> None:
    times, latency, cpu = await burst(4, 2)
    assert len(times) == len(latency) == len(cpu) == 2
    assert all(t > 0 for t in times)
    assert all(c > 0 for c in cpu)
