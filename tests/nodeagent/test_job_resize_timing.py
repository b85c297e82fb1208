"""A resize takes effect when the scheduler decided it, even if the job reads it later.

The twin and the journal change a job's pace at the decision's instant; a job
process still starting (0.5-5 s on a loaded machine) reads the retained
``ResizePart`` later. With ``issued`` it folds its progress at that instant,
so the part ends when the model says (measured on ``up --demo --policy
fcfs-malleable``: without it, a job shrunk 0.6 s after its start finished at
61 % of its modelled work).
"""

from __future__ import annotations

from broker.codec import encode
from broker.messages import ResizePart
from nodeagent.launch.contract import EXIT_DONE
from tests.nodeagent.clock import ManualClock
from tests.nodeagent.test_job_process import launch, sleep_job


async def test_a_resize_issued_while_the_process_started_counts_from_its_issue() -> None:
    # Started by the agent 1/4 s ago at 100x and rate 1; shrunk to MPL 2 (rate 0.5)
    # 1/8 s after that start: 12.5 units at rate 1, then 6.25 at rate 0.5.
    clock = ManualClock()
    started = clock.now - 1 / 4
    resize = ResizePart(job_id="j1", cpus=1, pace=1.0, issued=started + 1 / 8)
    the_launch = launch(procs=2, cpus=2, work=50.0, time_scale=100.0, start_at=started)
    async with sleep_job(the_launch, clock, retained=encode(resize)) as run:
        applied = await run.report(1)
        assert (applied.done, applied.rate) == (18.75, 0.5)
        # The remaining 31.25 units at rate 0.5 and 100x: 5/8 s.
        clock.advance(5 / 8)
        assert await run.exit_code() == EXIT_DONE
        end = await run.report(2)
    assert (end.done, end.at - started) == (50.0, 7 / 8)


async def test_an_issue_time_outside_the_run_is_clamped() -> None:
    # Issued before the part started (clock skew): it counts from the start. Issued in
    # the future: from now, never ahead of the process's own time.
    clock = ManualClock()
    started = clock.now - 1 / 4
    early = ResizePart(job_id="j1", cpus=1, pace=1.0, issued=started - 10.0)
    the_launch = launch(procs=2, cpus=2, work=1e6, time_scale=100.0, start_at=started)
    async with sleep_job(the_launch, clock, retained=encode(early)) as run:
        applied = await run.report(1)
        assert applied.done == 12.5  # 1/4 s at rate 0.5 and 100x
        late = ResizePart(job_id="j1", cpus=2, pace=1.0, issued=clock.now + 10.0)
        await run.control(late)
        again = await run.report(2)
        assert (again.done, again.rate) == (12.5, 1.0)
        run.sleeper.cancel()
