"""Small builders the tests share."""

from __future__ import annotations

from model.job import Job


def job(
    jid: str,
    procs: int,
    runtime: float,
    *,
    submit: float = 0.0,
    walltime: float | None = None,
    user: str = "nobody",
    malleable: bool = False,
    deadline: float | None = None,
) -> Job:
    """A job with an exact estimate unless ``walltime`` says otherwise."""
    return Job(
        id=jid,
        submit=submit,
        procs=procs,
        runtime=runtime,
        walltime=walltime if walltime is not None else max(runtime, 1e-9),
        user=user,
        malleable=malleable,
        deadline=deadline,
    )
