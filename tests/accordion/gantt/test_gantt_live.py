"""A live cluster's chart (accordion.gantt.live) from job events and status replies."""

from __future__ import annotations

from accordion.gantt.bars import UNPLACED, BarKind
from accordion.gantt.live import LiveTimeline, predicted_start, wait_reason
from broker.messages import (
    JobEvent,
    JobStatus,
    MachineStatus,
    PartSpec,
    StatusReply,
    StatusTotals,
)
from broker.vocabulary import JobEventKind, JobState

MACHINES = (
    MachineStatus(id="m", cpus=8, speed=1.0, free=0, online=True),
    MachineStatus(id="n", cpus=4, speed=2.0, free=4, online=True),
)


class PlannedStatus(JobStatus, frozen=True, kw_only=True):
    """A status row with the scheduler's prediction, as the prediction's branch adds it."""

    predicted_start: float | None = None
    reason: str | None = None
    reason_detail: str = ""


def event(job: str, seq: int, kind: str, at: float, *parts: tuple[str, int]) -> JobEvent:
    return JobEvent(
        job_id=job,
        seq=seq,
        event=JobEventKind(kind),
        at=at,
        parts=tuple(PartSpec(machine=m, cpus=c) for m, c in parts),
    )


def running(job: str, start: float, est_end: float, *parts: tuple[str, int]) -> JobStatus:
    return JobStatus(
        id=job,
        state=JobState.RUNNING,
        procs=8,
        user="alice",
        submit=0.0,
        start=start,
        parts=tuple(PartSpec(machine=m, cpus=c) for m, c in parts),
        walltime=100.0,
        est_end=est_end,
        deadline=150.0,
    )


def status(
    now: float, *, queue: tuple[JobStatus, ...] = (), running: tuple[JobStatus, ...] = ()
) -> StatusReply:
    totals = StatusTotals(
        queued=len(queue), running=len(running), cpus=sum(j.procs for j in running)
    )
    return StatusReply(
        request_id="s", now=now, machines=MACHINES, queue=queue, running=running, totals=totals
    )


def bars_of(timeline: LiveTimeline, job: str) -> list[tuple[str, int, float, float, BarKind]]:
    return sorted(
        (b.machine, b.cpus, b.start, b.end, b.kind)
        for b in timeline.gantt().bars
        if b.job_id == job
    )


def test_a_resized_job_runs_to_now_then_its_plan_goes_on_to_its_estimated_end() -> None:
    t = LiveTimeline()
    for e in (
        event("a", 1, "running", 10.0, ("m", 6), ("n", 2)),
        event("a", 2, "resized", 20.0, ("m", 3), ("n", 1)),
    ):
        t.event(e)
    t.status(status(30.0, running=(running("a", 10.0, 200.0, ("m", 3), ("n", 1)),)))
    assert bars_of(t, "a") == [
        ("m", 3, 20.0, 30.0, BarKind.RUN),
        ("m", 3, 30.0, 200.0, BarKind.PLANNED),
        ("m", 6, 10.0, 20.0, BarKind.RUN),
        ("n", 1, 20.0, 30.0, BarKind.RUN),
        ("n", 1, 30.0, 200.0, BarKind.PLANNED),
        ("n", 2, 10.0, 20.0, BarKind.RUN),
    ]
    # Its estimated end passes its deadline (150): every bar of it is marked late.
    assert all(b.late for b in t.gantt().bars)
    assert t.gantt().now == 30.0


def test_events_are_applied_once_in_order_and_gaps_are_noticed() -> None:
    t = LiveTimeline()
    first = event("a", 1, "running", 1.0, ("m", 2))
    t.event(first)
    t.event(first)  # a QoS 1 redelivery
    late = event("a", 3, "finished", 9.0)
    assert t.missed(late)  # seq 2 never came: the caller asks the history
    t.event(event("a", 2, "resized", 5.0, ("m", 1)))
    assert not t.missed(late)
    t.event(late)
    t.status(status(10.0))
    assert bars_of(t, "a") == [("m", 1, 5.0, 9.0, BarKind.RUN), ("m", 2, 1.0, 5.0, BarKind.RUN)]


def test_a_requeued_job_keeps_its_first_run_and_starts_a_second() -> None:
    t = LiveTimeline()
    for e in (
        event("a", 1, "running", 1.0, ("m", 2)),
        event("a", 2, "requeued", 4.0),
        event("a", 3, "running", 6.0, ("n", 2)),
        event("a", 4, "finished", 8.0),
    ):
        t.event(e)
    t.status(status(10.0))
    assert bars_of(t, "a") == [("m", 2, 1.0, 4.0, BarKind.RUN), ("n", 2, 6.0, 8.0, BarKind.RUN)]


def test_a_running_job_no_event_opened_starts_at_its_status() -> None:
    # Another user's job (its events are not this login's), or one that began earlier.
    t = LiveTimeline()
    t.status(status(50.0, running=(running("b", 20.0, 40.0, ("n", 4)),)))
    # Past its estimated end: running to now, and nothing planned after.
    assert bars_of(t, "b") == [("n", 4, 20.0, 50.0, BarKind.RUN)]


def test_a_queued_job_with_a_predicted_start_is_planned_on_its_parts_or_in_the_lane() -> None:
    placed = PlannedStatus(
        id="q1", state=JobState.QUEUED, procs=4, user="bob", submit=1.0, walltime=60.0,
        parts=(PartSpec(machine="m", cpus=4),), predicted_start=100.0, reason="resources",
    )  # fmt: skip
    unplaced = PlannedStatus(
        id="q2", state=JobState.QUEUED, procs=2, user="bob", submit=2.0, walltime=30.0,
        deadline=120.0, predicted_start=100.0, reason="priority", reason_detail="behind 1 job",
    )  # fmt: skip
    unknown = JobStatus(
        id="q3", state=JobState.QUEUED, procs=2, user="bob", submit=3.0, walltime=5.0
    )
    t = LiveTimeline()
    t.status(status(10.0, queue=(placed, unplaced, unknown)))
    assert bars_of(t, "q1") == [("m", 4, 100.0, 160.0, BarKind.PLANNED)]
    assert bars_of(t, "q2") == [(UNPLACED, 2, 100.0, 130.0, BarKind.PLANNED)]
    assert [b.late for b in t.gantt().bars if b.job_id == "q2"] == [True]
    assert bars_of(t, "q3") == []  # nothing says when it will run
    assert (predicted_start(placed), wait_reason(placed)) == (100.0, "resources")
    assert wait_reason(unplaced) == "priority: behind 1 job"
    assert (predicted_start(unknown), wait_reason(unknown)) == (None, "")


def test_at_most_keep_ended_jobs_are_kept() -> None:
    t = LiveTimeline(keep=2)
    for k in range(5):
        t.event(event(f"j{k}", 1, "running", float(k), ("m", 1)))
        t.event(event(f"j{k}", 2, "finished", k + 0.5))
    t.status(status(10.0))
    assert sorted({b.job_id for b in t.gantt().bars}) == ["j3", "j4"]


def test_a_machine_gone_since_keeps_a_row_for_its_past_bars() -> None:
    t = LiveTimeline()
    t.event(event("a", 1, "running", 1.0, ("old", 2)))
    t.event(event("a", 2, "finished", 3.0))
    t.status(status(5.0))
    gantt = t.gantt()
    assert [m.id for m in gantt.machines] == ["m", "n", "old"]
    assert gantt.machines[-1].cpus == 0
