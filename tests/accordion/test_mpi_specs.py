"""MPI-like parameters as the live commands build them: submit flags and trace jobs."""

from __future__ import annotations

import pytest

from accordion.client.specs import MAX_MPI_COMPUTE, job_spec, mpi_of, spec_of
from accordion.errors import UserError
from broker.messages import MpiSpec
from tests.builders import job


def test_submit_flags_become_the_jobs_mpi_spec() -> None:
    mpi = mpi_of("mpi", iterations=7, compute=0.5, message_bytes=0, pattern="barrier")
    spec = job_spec(job_id="m", procs=4, walltime=60.0, workload="mpi", mpi=mpi)
    assert spec.mpi == MpiSpec(iterations=7, compute=0.5, message_bytes=0, pattern="barrier")
    assert mpi_of("mpi") == MpiSpec()  # the defaults
    assert mpi_of("sleep") is None


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"iterations": 0}, "mpi.iterations"),
        ({"iterations": 2_000_000}, "mpi.iterations"),
        ({"compute": 0.0}, "mpi.compute"),
        ({"compute": float("inf")}, "--compute must be a finite"),
        ({"message_bytes": 17 * 1024 * 1024}, "mpi.message_bytes"),
        ({"pattern": "gather"}, "mpi.pattern"),
    ],
)
def test_malformed_parameters_are_user_errors(flags: dict[str, object], why: str) -> None:
    with pytest.raises(UserError, match=why):
        mpi_of("mpi", **flags)  # type: ignore[arg-type]


def test_a_trace_job_shares_its_run_time_among_the_iterations() -> None:
    traced = job("7", 2, walltime=100.0, runtime=40.0)
    spec = spec_of(traced, mpi=MpiSpec(iterations=8, message_bytes=64, pattern="barrier"))
    assert spec.workload == "mpi"
    assert spec.mpi == MpiSpec(iterations=8, compute=5.0, message_bytes=64, pattern="barrier")
    long = job("8", 2, walltime=1e5, runtime=10 * MAX_MPI_COMPUTE + 1)
    stretched = spec_of(long, mpi=MpiSpec(iterations=2))
    assert stretched.mpi is not None
    assert stretched.mpi.iterations == 11  # no iteration over the wire's bound
    assert stretched.mpi.compute <= MAX_MPI_COMPUTE
    assert spec_of(traced).workload == "sleep"
