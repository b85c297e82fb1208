"""Shared test helpers: small job and cluster builders, and the shared traces' location."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.job import Job

SHARED = Path(__file__).resolve().parents[2] / "shared"
PWA = SHARED / "workloads" / "pwa"


def job(
    jid: str,
    procs: int,
    runtime: float,
    *,
    submit: float = 0.0,
    walltime: float | None = None,
    **kw: object,
) -> Job:
    """A job with an exact estimate unless ``walltime`` says otherwise."""
    return Job(
        id=jid,
        submit=submit,
        procs=procs,
        runtime=runtime,
        walltime=walltime if walltime is not None else max(runtime, 1e-9),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def pwa() -> Path:
    """The real traces beside the checkout; tests that need them skip when absent."""
    if not PWA.is_dir():
        pytest.skip(f"{PWA} not present")
    return PWA
