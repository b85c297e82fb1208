"""The calibration bench's arithmetic and command lines, without running MPI."""

from __future__ import annotations

import pytest

from bench.mpi.fit import U_MIN, Measured, fit, model_ratio
from bench.mpi.kernels import KERNEL_NAMES, MPICH, OPENMPI, Yielding
from bench.mpi.launch import RunError, Setting, command, parse
from model.execution import AppParams


def measured(
    *, expanded: float = 100.0, folded: float = 200.0, u: float = 1.0, spin: float = 400.0
) -> Measured:
    return Measured(
        kernel="k",
        expanded_default=[expanded * 1.1, expanded],
        expanded_yield=[expanded, expanded * 1.3],
        folded_default=[spin],
        folded_yield=[folded * 1.2, folded],
        u_runs=[u, u - 0.1, u + 0.1] if u < 0.9 else [u],
    )


@pytest.mark.parametrize(
    ("folded", "u", "want"),
    [
        # Compute-bound, folding exactly doubles: u measured, no overhead.
        (200.0, 1.0, AppParams(1.0, 0.0)),
        # Communication costs more folded than the compute share predicts: the rest is OV.
        (310.0, 0.32, AppParams(0.32, 1.78)),
        # Folding costs less than u predicts (overlap): u is what the runs show, OV 0.
        (150.0, 0.9, AppParams(0.5, 0.0)),
        # Folding costs nothing (or the runs are noisy): u at its floor.
        (95.0, 0.5, AppParams(U_MIN, 0.0)),
    ],
)
def test_fit_takes_u_from_the_shim_and_ov_from_the_folded_runs(
    folded: float, u: float, want: AppParams
) -> None:
    got = fit(measured(folded=folded, u=u))
    assert got.u == pytest.approx(want.u)
    assert got.ov == pytest.approx(want.ov)


def test_times_are_the_best_repeat_and_u_the_median() -> None:
    m = measured(folded=300.0, u=0.5, spin=420.0)
    assert m.ratio_yield == pytest.approx(3.0)
    assert m.ratio_default == pytest.approx(4.2)
    assert m.u == pytest.approx(0.5)
    assert m.spread("folded_yield") == pytest.approx(1.2)


def test_the_calibrated_ratio_is_the_measured_one_when_ov_absorbs_the_rest() -> None:
    m = measured(folded=310.0, u=0.32)
    assert model_ratio(fit(m)) == pytest.approx(m.ratio_yield)


def test_a_run_without_times_is_refused() -> None:
    with pytest.raises(ValueError, match="positive times"):
        Measured("k", [], [1.0], [1.0], [1.0], [0.5])


def test_open_mpi_command_keeps_the_inherited_mask_and_sets_yield_explicitly() -> None:
    cg = KERNEL_NAMES["cg"]
    spin = command(cg, OPENMPI, Setting((0,), Yielding.OFF), ranks=2, iterations=5, report=None)
    assert spin[0] == "mpirun.openmpi"
    assert spin[spin.index("--bind-to") + 1] == "none"
    assert spin[spin.index("mpi_yield_when_idle") + 1] == "0"
    assert "LD_PRELOAD" not in " ".join(spin)
    mca = command(cg, OPENMPI, Setting((0,), Yielding.MCA), ranks=2, iterations=5, report=None)
    assert mca[mca.index("mpi_yield_when_idle") + 1] == "1"
    assert mca[-5:] == [str(OPENMPI.build / "cg"), "-i", "5", "-n", str(cg.size)]


def test_mpich_yields_through_the_shim_only() -> None:
    ring = KERNEL_NAMES["ring"]
    argv = command(ring, MPICH, Setting((0,), Yielding.SHIM), ranks=2, iterations=5, report=None)
    assert argv[:3] == ["mpiexec.mpich", "-n", "2"]
    env = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-genv"}
    assert env == {"LD_PRELOAD": str(MPICH.shim), "ACCORDION_MPI_YIELD": "1"}
    with pytest.raises(ValueError, match="no yield switch"):
        command(ring, MPICH, Setting((0,), Yielding.MCA), ranks=2, iterations=5, report=None)


def test_a_timing_run_loads_the_shim_without_yielding() -> None:
    with pytest.raises(ValueError, match="without yielding"):
        Setting((0, 1), Yielding.SHIM, timing=True)


def test_parse_reads_the_timing_line_and_the_rank_reports() -> None:
    out = (
        "noise\n"
        'accordion-kernel {"kernel":"cg","ranks":2,"iterations":10,"size":5,"seconds":0.5,'
        '"us_per_iteration":50000,"check":1.5}\n'
        'accordion-mpi-rank {"rank":1,"ranks":2,"pid":9,"yield":true,"wall_s":1.0,'
        '"mpi_s":0.25,"u":0.75,"calls":20,"yields":3}\n'
    )
    line0 = (
        'accordion-mpi-rank {"rank":0,"ranks":2,"pid":8,"yield":true,"wall_s":1.0,'
        '"mpi_s":0.75,"u":0.25,"calls":20,"yields":0}'
    )
    run = parse(out, [line0])
    assert (run.kernel, run.iterations, run.us_per_iteration, run.check) == ("cg", 10, 5e4, 1.5)
    assert [r.rank for r in run.reports] == [0, 1]
    assert run.u == pytest.approx(0.5)
    with pytest.raises(RunError, match="one accordion-kernel line"):
        parse("nothing here", [])


def test_the_mpi4py_kernel_runs_under_open_mpi_only() -> None:
    # The wheel's MPICH build needs libmpi.so.12, which Debian's MPICH does not ship.
    py = KERNEL_NAMES["cg.py"]
    assert py.runs_under(OPENMPI)
    assert not py.runs_under(MPICH)
    with pytest.raises(ValueError, match="does not run under mpich"):
        py.program(MPICH, iterations=1)
