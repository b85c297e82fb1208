"""A replay counts its jobs' resizes from the watched ``resized`` events."""

from __future__ import annotations

from accordion.client.replay import ReplayState
from broker.messages import JobEvent
from broker.vocabulary import JobEventKind


def resized(job_id: str, before: int | None, after: int | None) -> JobEvent:
    return JobEvent(
        job_id=job_id,
        event=JobEventKind.RESIZED,
        cpus_before=before,
        cpus_after=after,
        at=0.0,
        seq=1,
    )


def test_shrinks_and_expands_of_the_replays_jobs_are_counted() -> None:
    state = ReplayState(frozenset({"a", "b"}))
    assert state.resized(resized("a", 4, 2))
    assert state.resized(resized("b", 1, 2))
    assert state.resized(resized("a", 2, 4))
    assert (state.shrinks, state.expands) == (1, 2)
    assert state.last_resize == resized("a", 2, 4)
    # Someone else's job, an older scheduler's event without CPUs, a no-op: not counted.
    assert not state.resized(resized("other", 4, 2))
    assert not state.resized(resized("a", None, None))
    assert not state.resized(resized("a", 3, 3))
    assert (state.shrinks, state.expands) == (1, 2)
