"""``accordion sweep``: real processes, resumable, byte-identical CSVs, intervals."""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from accordion.experiments.sweep import COLUMNS, Source, read_rows, run_sweep, tasks, write_rows
from accordion.experiments.sweep_stats import mean_ci, summarise
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec, generate, header

runner = CliRunner()


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    spec = SyntheticSpec(jobs=150, cpus=32, seed=5, load=1.2)
    path = tmp_path / "t.swf"
    write_swf(path, generate(spec), header=header(spec))
    return path


def _todo(trace: Path) -> list:  # type: ignore[type-arg]
    source = Source(trace=trace, deadlines=0.7)
    return tasks(source, ["easy", "flexible"], "tau", [10.0, 60.0], [1, 2])


def test_sweep_runs_each_task_once_and_reruns_nothing(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "s" / "sweep.csv"
    todo = _todo(trace)
    with ProcessPoolExecutor(max_workers=2) as pool:
        rows, ran = run_sweep(todo, out, pool)
        first = out.read_bytes()
        rows_again, ran_again = run_sweep(todo, out, pool)
    assert (ran, ran_again) == (8, 0)
    assert rows == rows_again
    assert out.read_bytes() == first
    assert not out.with_name("sweep.csv.partial").exists()
    # Deadlines follow the seed: seed 1 and 2 give different schedules' miss counts
    # or at least different deadline sets.
    by_seed = {r["seed"]: r["deadline_jobs"] for r in rows if r["policy"] == "flexible"}
    assert by_seed["1"] != by_seed["2"]
    # tau changes the bounded slowdown only.
    easy = {r["value"]: r for r in rows if r["policy"] == "easy" and r["seed"] == "1"}
    assert easy["10"]["wait_mean"] == easy["60"]["wait_mean"]
    assert float(easy["60"]["bounded_slowdown_mean"]) <= float(easy["10"]["bounded_slowdown_mean"])


def test_a_fresh_run_gives_the_same_bytes_and_a_partial_one_resumes(
    trace: Path, tmp_path: Path
) -> None:
    todo = _todo(trace)
    a, b = tmp_path / "a" / "sweep.csv", tmp_path / "b" / "sweep.csv"
    with ProcessPoolExecutor(max_workers=2) as pool:
        run_sweep(todo, a, pool)
        # An interrupted sweep: three rows made it to the partial file.
        b.parent.mkdir()
        write_rows(b.with_name("sweep.csv.partial"), list(read_rows(a).values())[:3])
        _, ran = run_sweep(todo, b, pool)
    assert ran == 5
    assert a.read_bytes() == b.read_bytes()
    assert a.read_text().splitlines()[0] == ",".join(COLUMNS)


def test_interval_is_students_t() -> None:
    mean, half = mean_ci([1.0, 2.0, 3.0, 4.0])
    # s = 1.291, t(0.975, 3) = 3.182: half-width 3.182 * 1.291 / 2.
    assert mean == 2.5
    assert half == pytest.approx(3.182 * math.sqrt(5 / 3) / 2)
    assert math.isnan(mean_ci([3.0])[1])


def test_summary_groups_by_policy_and_value(trace: Path, tmp_path: Path) -> None:
    rows = [
        dict.fromkeys(COLUMNS, "0") | {"policy": "p", "value": "5", "seed": str(s), "wait_mean": w}
        for s, w in ((1, "10"), (2, "20"))
    ]
    stats = {(p, v, m): (n, mean) for p, v, m, n, mean, _ in summarise(rows)}
    assert stats[("p", 5.0, "wait_mean")] == (2, 15.0)


def test_cli_sweep_writes_csv_summary_chart_and_refuses_bad_input(
    trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cli"
    argv = ["sweep", str(trace), "--policies", "easy,fcfs", "--param", "tau=10,60"]
    result = runner.invoke(app, [*argv, "--seeds", "1-2", "--workers", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "8 runs (8 run now, 0 reused)" in result.output
    assert {p.name for p in out.iterdir()} == {"sweep.csv", "summary.csv", "sweep.png"}
    bad = runner.invoke(app, [*argv, "--seeds", "x", "--out", str(out)])
    assert bad.exit_code == 2
    assert "--seeds" in bad.output
    wrong = runner.invoke(app, ["sweep", str(trace), "--param", "interarrival=5"])
    assert wrong.exit_code == 2
    assert "preset" in wrong.output
