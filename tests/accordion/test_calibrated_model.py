"""The calibrated execution model selected in the twin: ``--execution-model calibrated
--calibration FILE`` in simulate, compare and sweep; the summary records it; a bad
selection is a one-line error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from accordion.experiments.sweep import Source, run_task, tasks
from model.execution import ModelKind

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]

CALIBRATION = """\
name = "lab"
[app.cg]
u = 1.0
ov = 0.0
[app.halo]
u = 0.32
ov = 1.78
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """The FCFS-malleable paper's Fig. 2 jobs, odd ones running cg and even ones halo."""
    lines = (ROOT / "examples" / "fig2.swf").read_text().splitlines()
    header = [line for line in lines if line.startswith(";")]
    jobs = []
    for line in (line for line in lines if not line.startswith(";")):
        fields = line.split()
        fields[13] = "1" if int(fields[0]) % 2 else "2"
        jobs.append(" ".join(fields))
    trace = tmp_path / "fig2apps.swf"
    trace.write_text("\n".join([*header, "; Applications: 1=cg 2=halo", *jobs]) + "\n")
    cal = tmp_path / "lab.toml"
    cal.write_text(CALIBRATION)
    return trace, cal


def simulate(trace: Path, out: Path, *model: str) -> dict[str, object]:
    argv = ["simulate", str(trace), "--policy", "fcfs-malleable", "--out", str(out), *model]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    summary: dict[str, object] = json.loads((out / "fcfs-malleable.summary.json").read_text())
    return summary


def test_simulate_records_the_calibration_and_its_jobs(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, cal = files
    summary = simulate(
        trace, tmp_path / "c", "--execution-model", "calibrated", "--calibration", str(cal)
    )
    assert summary["execution_model"] == {
        "kind": "calibrated",
        "calibration": "lab",
        "apps": {"cg": {"u": 1.0, "ov": 0.0}, "halo": {"u": 0.32, "ov": 1.78}},
        "jobs_by_app": {"cg": 3, "halo": 3},
    }


def test_the_calibration_moves_the_schedule(files: tuple[Path, Path], tmp_path: Path) -> None:
    # FCFS-malleable folds jobs in Fig. 2; halo folded costs 3.1x here, not 2x.
    trace, cal = files
    linear = simulate(trace, tmp_path / "l")
    calibrated = simulate(
        trace, tmp_path / "c", "--execution-model", "calibrated", "--calibration", str(cal)
    )
    assert linear["execution_model"] == {"kind": "linear", "overhead": 0.0}
    assert calibrated["metrics"] != linear["metrics"]


def test_compare_uses_the_calibration_for_every_policy(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, cal = files
    out = tmp_path / "cmp"
    argv = ["compare", str(trace), "--policies", "easy,fcfs-malleable", "--out", str(out)]
    argv += ["--execution-model", "calibrated", "--calibration", str(cal), "--no-per-job"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    for policy in ("easy", "fcfs-malleable"):
        summary = json.loads((out / f"{policy}.summary.json").read_text())
        assert summary["execution_model"]["calibration"] == "lab"


def test_a_sweep_task_replays_under_the_calibration(files: tuple[Path, Path]) -> None:
    trace, cal = files
    source = Source(trace=trace, model=ModelKind.CALIBRATED, calibration=cal)
    (task,) = tasks(source, ["fcfs-malleable"], "tau", [10.0], [1])
    plain = Source(trace=trace)
    (linear,) = tasks(plain, ["fcfs-malleable"], "tau", [10.0], [1])
    assert run_task(task)["response_mean"] != run_task(linear)["response_mean"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--execution-model", "calibrated"], "reads u and OV per application from --calibration"),
        (
            ["--execution-model", "calibrated", "--calibration", "{tmp}/absent.toml"],
            "absent.toml: no such calibration file",
        ),
        (["--calibration", "{cal}"], "--calibration is read by the calibrated model only"),
        (
            ["--execution-model", "calibrated", "--calibration", "{cal}", "--overhead", "0.5"],
            "reads each application's OV from --calibration",
        ),
        (
            ["--execution-model", "calibrated", "--calibration", "{cgonly}"],
            "the trace's jobs run halo, which calibration 'cgonly' does not measure",
        ),
    ],
)
def test_a_bad_selection_is_one_line_and_exit_2(
    files: tuple[Path, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    trace, cal = files
    cgonly = tmp_path / "cgonly.toml"
    cgonly.write_text("[app.cg]\nu = 1.0\n")
    argv = [a.format(tmp=tmp_path, cal=cal, cgonly=cgonly) for a in args]
    result = runner.invoke(app, ["simulate", str(trace), *argv])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 2


def test_an_unknown_model_name_is_refused(files: tuple[Path, Path]) -> None:
    result = runner.invoke(app, ["simulate", str(files[0]), "--execution-model", "measured"])
    assert result.exit_code == 2
    assert "Invalid value" in result.output


def test_up_says_why_it_cannot_run_the_calibrated_model() -> None:
    result = runner.invoke(app, ["up", "--execution-model", "calibrated"])
    assert result.exit_code == 2, result.output
    assert "a live cluster's agents cannot be given a calibration yet" in result.output
