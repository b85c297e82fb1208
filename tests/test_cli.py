"""The CLI end to end on a small generated trace: outputs, tables, one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app

runner = CliRunner()


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
    }
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
    # The schedule as SWF reads back with real waits and run times.
    runner.invoke(app, ["simulate", str(out / "easy.swf"), "--policy", "fcfs"])
    lines = [ln for ln in (out / "easy.swf").read_text().splitlines() if not ln.startswith(";")]
    assert len(lines) == 150


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
            "--malleable",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "fcfs-malleable.summary.json").read_text())
    assert summary["workload"]["all_malleable"] is True
    assert summary["workload"]["deadlines"]["share"] == 0.7
    assert 0.55 <= summary["metrics"]["deadline_jobs"] / 150 <= 0.85
    assert summary["metrics"]["busy_mpl"] >= 1.0


def test_policy_with_its_own_order_refuses_a_priority_source(trace: Path) -> None:
    result = runner.invoke(app, ["simulate", str(trace), "--policy", "flexible:fairshare"])
    assert result.exit_code == 2
    assert "own order" in result.output
