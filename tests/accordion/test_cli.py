"""The CLI end to end on a small generated trace: outputs, tables, one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import scheduler.__main__ as scheduler_main
from accordion.cli import app
from scheduler.policies.dpsa import Dpsa

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "small.swf"
    result = runner.invoke(app, ["generate", str(path), "--jobs", "150", "--cpus", "32"])
    assert result.exit_code == 0, result.output
    return path


def test_simulate_writes_csv_json_swf(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", str(trace), "--policy", "easy", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "mean bounded slowdown" in result.output
    with (out / "easy.jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 150
    assert set(rows[0]) == {
        "id",
        "user",
        "submit",
        "start",
        "end",
        "processes",
        "cpus",
        "machines",
        "wait",
        "response",
        "bounded_slowdown",
        "deadline_met",
        "segments",
        "deadline",
        "predicted_start",
    }
    assert {row["predicted_start"] for row in rows} == {""}  # not asked for
    for row in rows:
        assert float(row["start"]) >= float(row["submit"])
    summary = json.loads((out / "easy.summary.json").read_text())
    assert summary["metrics"]["jobs"] == 150
    assert summary["metrics"]["time_base"] == "virtual trace seconds"
    for key in (
        "decision_time_mean_ms",
        "decision_time_p99_ms",
        "decision_time_max_ms",
        "events_per_second",
    ):
        assert summary["performance"][key] >= 0
    # The schedule as SWF holds each job's real wait, and reads back as a trace.
    lines = [ln for ln in (out / "easy.swf").read_text().splitlines() if not ln.startswith(";")]
    assert len(lines) == 150
    waits = {r["id"]: float(r["wait"]) for r in rows}
    for line in lines:
        fields = line.split()
        assert float(fields[2]) == pytest.approx(waits[fields[0]], abs=1.0)
    again = runner.invoke(
        app, ["simulate", str(out / "easy.swf"), "--policy", "fcfs", "--out", str(tmp_path / "rb")]
    )
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "rb" / "fcfs.summary.json").read_text())["metrics"]["jobs"] == 150


def test_predict_writes_each_jobs_prediction_and_the_error(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["compare", str(trace), "--policies", "easy,conservative", "--predict", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "predicted start: median |error|" in result.output
    for stem in ("easy", "conservative"):
        with (out / f"{stem}.jobs.csv").open() as fh:
            rows = list(csv.DictReader(fh))
        # Every job has its prediction; one started at its submission was predicted then.
        assert all(row["predicted_start"] for row in rows)
        summary = json.loads((out / f"{stem}.summary.json").read_text())
        prediction = summary["prediction"]
        waited = [r for r in rows if float(r["predicted_start"]) > float(r["submit"])]
        assert prediction["jobs_waited"] + prediction["jobs_started_at_submission"] == 150
        assert prediction["jobs_waited"] >= len(waited) > 0
        assert 0.0 <= prediction["within_1h"] <= 1.0
        assert prediction["median_abs_error"] <= prediction["p90_abs_error"]
    assert summary["prediction"]["rule"] == "reservations"


def test_compare_prints_changes_and_writes_chart(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    result = runner.invoke(
        app,
        [
            "compare",
            str(trace),
            "--policies",
            "easy,fcfs,conservative,easy:fairshare",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "easy (baseline)" in result.output
    assert "%)" in result.output
    png = (out / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    with (out / "compare.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["policy"] for r in rows] == ["easy", "fcfs", "conservative", "easy:fairshare"]
    assert rows[0]["wait_mean_change_pct"] in ("", "0.000")


def test_cluster_file_and_jobs_limit(trace: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "c.toml"
    cluster.write_text(
        '[[machine]]\nname = "a"\ncpus = 16\nspeed = 2.0\n[[machine]]\nname = "b"\ncpus = 16\n'
    )
    out = tmp_path / "o"
    result = runner.invoke(
        app, ["simulate", str(trace), "--cluster", str(cluster), "--jobs", "40", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "easy.summary.json").read_text())
    assert summary["metrics"]["jobs"] == 40
    assert {m["id"] for m in summary["cluster"]["machines"]} == {"a", "b"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "{trace}", "--policy", "nope"], "unknown policy 'nope'"),
        (["simulate", "{trace}", "--policy", "easy:nope"], "unknown priority source"),
        (["simulate", "/does/not/exist.swf"], "No such file"),
        (["simulate", "{bad}"], "bad.swf:3"),
        (["compare", "{trace}", "--policies", "easy,easy"], "twice"),
        (["simulate", "{trace}", "--cluster", "{badcluster}"], "cpus"),
        (["simulate", "{trace}", "--missing-walltime", "soon"], "--missing-walltime"),
        (["simulate", "{trace}", "--deadlines", "0.5", "--deadline-slack", "x"], "MIN:MAX"),
        (["simulate", "{trace}", "-p", "dpsa-n", "--policy-opt", "nope=1"], "budget, time_budget"),
        (["simulate", "{trace}", "-p", "dpsa-n", "--policy-opt", "budget=x"], "budget='x'"),
        (["simulate", "{trace}", "-p", "dpsa-n", "--policy-opt", "budget=0"], "budget must be"),
        (["simulate", "{trace}", "-p", "flexible", "--policy-opt", "k=-1"], "k must be >"),
        (["simulate", "{trace}", "-p", "eg-edf-tabu", "--policy-opt", "tabu_size=0"], "tabu_"),
        (["simulate", "{trace}", "-p", "dpsa-n", "--policy-opt", "budget"], "KEY=VALUE"),
        (["simulate", "{trace}", "-p", "dpsa-p", "--policy-opt", "time_budget=1"], "clock"),
        (
            ["simulate", "{trace}", "-p", "easy", "--policy-opt", "budget=5"],
            "its options: predictor",
        ),
        (
            ["compare", "{trace}", "--policies", "easy,fcfs", "--policy-opt", "budget=5"],
            "no compared",
        ),
    ],
)
def test_user_errors_are_one_line_and_exit_2(
    trace: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxProcs: 4\n1 0 -1 10 1 -1 -1 1 10 -1 1 1 1 -1 1 1 -1 -1\n1 2 3\n")
    badcluster = tmp_path / "bad.toml"
    badcluster.write_text('[[machine]]\nname = "x"\ncpus = 0\n')
    argv = [a.format(trace=trace, bad=bad, badcluster=badcluster) for a in args]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 2


def test_deadlines_and_malleability_options(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "d"
    result = runner.invoke(
        app,
        [
            "compare",
            str(trace),
            "--policies",
            "easy,flexible,fcfs-malleable",
            "--deadlines",
            "0.7",
            "--deadline-slack",
            "1.5:4",
            "--seed",
            "3",
            "--rigid-fraction",
            "0.25",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "fcfs-malleable.summary.json").read_text())
    assert summary["workload"]["rigid"] == {"share": 0.25, "seed": 3}
    assert summary["workload"]["deadlines"]["share"] == 0.7
    assert 0.55 <= summary["metrics"]["deadline_jobs"] / 150 <= 0.85
    assert summary["metrics"]["busy_mpl"] >= 1.0


FIG2 = ROOT / "examples" / "fig2.swf"


@pytest.mark.parametrize(
    ("policy", "response", "slowdown"),
    [
        ("fcfs", 28 / 6, 3.5),
        ("easy", 26 / 6, 19 / 6),
        # Every job malleable by default, as in the paper: no flag needed for its 3.66.
        ("fcfs-malleable", 22 / 6, 2.5),
    ],
)
def test_fig2_through_simulate_with_defaults(
    tmp_path: Path, policy: str, response: float, slowdown: float
) -> None:
    out = tmp_path / "fig2"
    result = runner.invoke(app, ["simulate", str(FIG2), "--policy", policy, "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / f"{policy}.summary.json").read_text())["metrics"]
    assert metrics["response_mean"] == pytest.approx(response)
    assert metrics["malleable_slowdown_mean"] == pytest.approx(slowdown)


def test_fig2_with_every_job_rigid_is_fcfs(tmp_path: Path) -> None:
    out = tmp_path / "rigid"
    argv = ["simulate", str(FIG2), "-p", "fcfs-malleable", "--rigid-fraction", "1", "--out"]
    result = runner.invoke(app, [*argv, str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "fcfs-malleable.summary.json").read_text())
    assert summary["metrics"]["response_mean"] == pytest.approx(28 / 6)
    assert summary["policy_counters"] == {}


def test_simulate_counts_the_twins_resizes(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "resizes"
    result = runner.invoke(app, ["simulate", str(trace), "-p", "fcfs-malleable", "--out", str(out)])
    assert result.exit_code == 0, result.output
    counters = json.loads((out / "fcfs-malleable.summary.json").read_text())["policy_counters"]
    assert counters["shrinks"] > 0
    assert counters["expands"] > 0
    assert f"{counters['shrinks']} shrinks, {counters['expands']} expands" in result.output


def test_policy_with_its_own_order_refuses_a_priority_source(trace: Path) -> None:
    result = runner.invoke(app, ["simulate", str(trace), "--policy", "flexible:fairshare"])
    assert result.exit_code == 2
    assert "own order" in result.output


def test_a_value_error_inside_a_policy_shows_its_traceback(trace: Path) -> None:
    """A bug is not a user error: no one-line ``error:``, exit 1 with the traceback."""
    program = (
        "import scheduler.policies.easy as easy\n"
        "def decide(self, snapshot):\n"
        "    raise ValueError('a bug inside the policy')\n"
        "easy.EasyBackfill.decide = decide\n"
        "from accordion.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program, "simulate", str(trace), "--policy", "easy"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "ValueError: a bug inside the policy" in result.stderr
    assert "error:" not in result.stderr


def test_policy_options_reach_the_policy(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "opt"
    default = runner.invoke(app, ["simulate", str(trace), "-p", "dpsa-n", "--out", str(out / "d")])
    assert default.exit_code == 0, default.output
    tight = runner.invoke(
        app,
        ["simulate", str(trace), "-p", "dpsa-n", "--policy-opt", "budget=1", "--out", str(out)],
    )
    assert tight.exit_code == 0, tight.output
    summary = json.loads((out / "dpsa-n.summary.json").read_text())
    base = json.loads((out / "d" / "dpsa-n.summary.json").read_text())
    assert summary["policy_options"] == {"budget": "1"}
    assert base["policy_options"] == {}
    # One node expansion per search: every search that had a choice ran out of budget.
    counters, base_counters = summary["policy_counters"], base["policy_counters"]
    assert counters["dpsa_expansions"] == counters["dpsa_searches"]
    assert counters["dpsa_budget_hits"] > base_counters["dpsa_budget_hits"]


def test_compare_applies_an_option_to_every_policy_that_has_it(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp-opt"
    result = runner.invoke(
        app,
        [
            "compare",
            str(trace),
            "--policies",
            "easy,dpsa-n,dpsa-w,eg-edf-tabu",
            "--policy-opt",
            "budget=7",
            "--policy-opt",
            "keep_order=false",
            "--out",
            str(out),
            "--no-per-job",
        ],
    )
    assert result.exit_code == 0, result.output
    options = {
        spec: json.loads((out / f"{spec}.summary.json").read_text())["policy_options"]
        for spec in ("easy", "dpsa-n", "dpsa-w", "eg-edf-tabu")
    }
    assert options == {
        "easy": {},
        "dpsa-n": {"budget": "7"},
        "dpsa-w": {"budget": "7"},
        "eg-edf-tabu": {"keep_order": "false"},
    }


def test_policies_verbose_lists_options_with_types_and_defaults() -> None:
    plain = runner.invoke(app, ["policies"])
    assert plain.exit_code == 0
    assert "budget" not in plain.output
    result = runner.invoke(app, ["policies", "--verbose"])
    assert result.exit_code == 0, result.output
    rows = [" ".join(line.replace("│", " ").split()) for line in result.output.splitlines()]
    assert any(r.endswith("budget int 1000") for r in rows), result.output
    assert any(r.endswith("time_budget float | None None") for r in rows)
    assert any(r.endswith("tabu_size int 8") for r in rows)  # a field of its own (461a276)
    assert "k float 2.0" in rows  # Flexible's constants are its own fields (461a276)
    assert any("priority.decay float 0.7" in r for r in rows)


def test_the_live_scheduler_takes_policy_options_and_gives_dpsa_its_clock() -> None:
    args = scheduler_main.parse_args(
        ["--policy", "dpsa-w", "--policy-opt", "time_budget=0.005", "--policy-opt", "budget=9"]
    )
    policy = scheduler_main.policy_from_args(args)
    assert isinstance(policy, Dpsa)
    assert (policy.variant, policy.budget, policy.time_budget) == ("w", 9, 0.005)
    assert policy.clock is time.monotonic
    # Without a seconds budget no clock is given: the search stays deterministic.
    plain = scheduler_main.policy_from_args(scheduler_main.parse_args(["--policy", "dpsa-w"]))
    assert isinstance(plain, Dpsa)
    assert plain.clock is None
    # A bad option ends the real process with one line and status 2, before any connection.
    result = subprocess.run(
        [sys.executable, "-m", "scheduler", "--policy", "dpsa-n", "--policy-opt", "x=1"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "dpsa-n has no option 'x'; its options: budget, time_budget" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_bounded_slowdown_label_names_the_tau_used(
    command: str, trace: Path, tmp_path: Path
) -> None:
    args = [command, str(trace), "--tau", "60", "--no-progress"]
    if command == "compare":
        args += ["--policies", "easy,fcfs", "--out", str(tmp_path / "cmp"), "--no-per-job"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "mean bounded slowdown (tau 60 s)" in result.output
    assert "tau 10 s" not in result.output
