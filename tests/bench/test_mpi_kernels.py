"""The MPI kernels of examples/mpi and the yield shim, run for real under mpirun.

Real processes and a real MPI (Debian's Open MPI and MPICH, which
``scripts/setup`` installs and builds the kernels for): a kernel builds with
``mpicc``, runs on 2 ranks and prints its timing line with a correct result;
the shim, preloaded, reports each rank's time inside MPI. Nothing here asserts
a time: how fast a run goes depends on the machine's load (the folded/expanded
ratios are ``bench.mpi``'s, printed beside a yardstick). Where the MPI is not
installed the tests skip, and fail under CI, where the set-up must have done it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bench.mpi.kernels import EXAMPLES, KERNEL_NAMES, MPICH, OPENMPI, Library, Yielding
from bench.mpi.launch import KernelRun, RunError, Setting, run

CORES = tuple(sorted(os.sched_getaffinity(0)))


def need(lib: Library) -> None:
    why = lib.missing()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{why}: CI must have it", pytrace=False)
    pytest.skip(why)


def quick(name: str, lib: Library, setting: Setting, iterations: int = 200) -> KernelRun:
    need(lib)
    return run(KERNEL_NAMES[name], lib, setting, iterations=iterations, timeout=120)


def expanded(yielding: Yielding = Yielding.OFF, *, timing: bool = False) -> Setting:
    return Setting(CORES[:2], yielding, timing=timing)


def folded(yielding: Yielding) -> Setting:
    return Setting(CORES[:1], yielding)


def test_a_kernel_builds_with_mpicc_and_runs_on_two_ranks(tmp_path: Path) -> None:
    need(OPENMPI)
    subprocess.run(
        ["make", "-s", "-C", str(EXAMPLES), f"BUILD={tmp_path}", "MPIS=openmpi"], check=True
    )
    built = tmp_path / "openmpi" / "ring"
    assert built.is_file()
    argv = OPENMPI.argv(2, [str(built), "-i", "50"], env={}, mca={})
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("accordion-kernel "))
    assert '"kernel":"ring","ranks":2,"iterations":50' in line


@pytest.mark.parametrize("lib", [OPENMPI, MPICH], ids=lambda lib: lib.name)
@pytest.mark.parametrize(
    ("kernel", "check"),
    [
        # ring: the token counts one per rank per lap.
        ("ring", lambda it, r: r.check == it * 2),
        # halo: the periodic three-point mean keeps the sum of the starting cells,
        # (i % 7) over 128 cells.
        ("halo", lambda it, r: r.check == pytest.approx(sum(i % 7 for i in range(1, 129)))),
        # ep: a Monte Carlo pi of 2 * 200 * 20000 points.
        ("ep", lambda it, r: abs(r.check - 3.14159) < 0.02),
        # cg: a residual norm, finite and not above its starting one (sqrt of 2 * 1000).
        ("cg", lambda it, r: 0 <= r.check <= 2000**0.5),
    ],
)
def test_each_kernel_prints_its_timing_and_a_correct_result(
    lib: Library, kernel: str, check: object
) -> None:
    k = KERNEL_NAMES[kernel]
    iterations = 200
    need(lib)
    args = {"halo": 64, "ep": 20_000, "cg": 1_000, "ring": 8}
    result = run(
        type(k)(k.name, k.pattern, args[kernel], iterations, iterations),
        lib,
        expanded(),
        iterations=iterations,
        timeout=120,
    )
    assert (result.kernel, result.ranks, result.iterations) == (kernel, 2, iterations)
    assert result.seconds > 0
    assert result.us_per_iteration == pytest.approx(result.seconds * 1e6 / iterations)
    assert callable(check)
    assert check(iterations, result), result
    assert result.reports == ()  # no shim loaded: no rank report


def test_the_mpi4py_kernel_agrees_with_the_c_one() -> None:
    # Same solver, same system: the residual after the same iterations agrees.
    c = quick("cg", OPENMPI, expanded(), iterations=150)
    py = quick("cg.py", OPENMPI, expanded(), iterations=150)
    assert (py.kernel, py.ranks) == ("cg.py", 2)
    assert py.check == pytest.approx(c.check, rel=1e-6)


@pytest.mark.parametrize("lib", [OPENMPI, MPICH], ids=lambda lib: lib.name)
def test_the_shim_reports_each_ranks_time_inside_mpi(lib: Library) -> None:
    result = quick("ring", lib, expanded(timing=True), iterations=500)
    assert [r.rank for r in result.reports] == [0, 1]
    for r in result.reports:
        # ring computes nothing: nearly all of a rank's time is inside MPI calls.
        assert 0 < r.mpi_s <= r.wall_s
        # The line prints 9 significant digits of each; u near 0 keeps fewer of 1 - x.
        assert r.u == pytest.approx(1 - r.mpi_s / r.wall_s, abs=1e-6)
        assert r.calls >= 2 * 500  # a Send and a Recv per lap, at least
        assert r.yields == 0  # timing only: the blocking calls went straight through
    assert 0 <= result.u < 0.5


def test_the_shim_times_mpi4py_calls_too() -> None:
    result = quick("cg.py", OPENMPI, expanded(timing=True), iterations=100)
    assert [r.rank for r in result.reports] == [0, 1]
    assert all(r.calls >= 100 for r in result.reports)  # an Allreduce per iteration


@pytest.mark.parametrize("lib", [OPENMPI, MPICH], ids=lambda lib: lib.name)
def test_folded_ranks_yield_in_blocking_calls_under_the_shim(lib: Library) -> None:
    # Two ranks on one core passing a token: every receive waits for the other rank,
    # which can only run once the waiting one yields.
    result = quick("ring", lib, folded(Yielding.SHIM), iterations=2000)
    assert result.check == 2 * 2000
    assert [r.rank for r in result.reports] == [0, 1]
    assert sum(r.yields for r in result.reports) > 0


def test_open_mpi_yields_by_its_own_switch_without_the_shim() -> None:
    result = quick("cg", OPENMPI, folded(Yielding.MCA), iterations=100)
    assert result.iterations == 100
    assert result.reports == ()


def test_a_failing_rank_fails_the_run() -> None:
    need(OPENMPI)
    k = KERNEL_NAMES["ring"]
    bad = type(k)(k.name, k.pattern, 0, 10, 10)  # -n 0: the kernel refuses it
    with pytest.raises(RunError, match="exit"):
        run(bad, OPENMPI, expanded(), iterations=10, timeout=120)
