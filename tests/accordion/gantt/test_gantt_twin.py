"""``accordion gantt RUN_DIR``: a twin run's files drawn, bar for bar what the twin did."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from accordion.errors import UserError
from accordion.experiments.runs import load_workload, run_policy, write_run
from accordion.gantt.bars import BarKind
from accordion.gantt.twin_run import TimeWindow, load_twin_run
from model.machine import Part
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec, generate, header

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "examples" / "cluster.toml"
runner = CliRunner()


@pytest.fixture(scope="module")
def malleable_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FCFS-malleable on a heterogeneous cluster: jobs that span machines and resize."""
    out = tmp_path_factory.mktemp("run")
    spec = SyntheticSpec(jobs=300, cpus=64, load=1.2, users=6, seed=3)
    trace = out / "syn.swf"
    write_swf(trace, generate(spec), header=header(spec))
    workload = load_workload(trace, cluster=CLUSTER)
    write_run(out, run_policy(workload, "fcfs-malleable"))
    return out


def test_the_bars_hold_what_the_segments_say_at_every_instant(malleable_run: Path) -> None:
    gantt = load_twin_run(malleable_run)
    with (malleable_run / "fcfs-malleable.jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert gantt.jobs == len(rows) == 300
    assert all(b.kind is BarKind.RUN for b in gantt.bars)
    by_job: dict[str, list[tuple[float, float, str, int]]] = defaultdict(list)
    for b in gantt.bars:
        by_job[b.job_id].append((b.start, b.end, b.machine, b.cpus))
    resized = 0
    for row in rows:
        bars = sorted(by_job[row["id"]])
        # The job's bars cover exactly its run, and at its start it holds its first parts.
        assert min(b[0] for b in bars) == pytest.approx(float(row["start"]))
        assert max(b[1] for b in bars) == pytest.approx(float(row["end"]))
        first = {(m, c) for s, _, m, c in bars if s == bars[0][0]}
        assert first == {
            (p.split(":")[0], int(p.split(":")[1])) for p in row["machines"].split(";")
        }
        widths = {sum(c for s, _, _, c in bars if s == start) for start, *_ in bars}
        assert max(widths) == int(row["cpus"])
        resized += len(widths) > 1
    assert resized > 0  # the run exercised shrinks and expands


def test_a_window_keeps_the_jobs_it_overlaps(malleable_run: Path) -> None:
    whole = load_twin_run(malleable_run)
    lo, hi = whole.span()
    middle = (lo + hi) / 2
    part = load_twin_run(malleable_run, window=TimeWindow(middle, middle + 3600))
    assert 0 < part.jobs < whole.jobs
    assert part.span() == (middle, middle + 3600)
    assert all(b.end > middle and b.start < middle + 3600 for b in part.bars)


def test_the_command_writes_a_png_and_an_html_file(malleable_run: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["gantt", str(malleable_run), "--out", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    png, html = tmp_path / "g.png", tmp_path / "g.html"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = html.read_text()
    assert "fcfs-malleable" in text
    assert "<script src=" not in text  # BokehJS is inside: it opens offline


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "give a twin run's directory, or --live"),
        (["{run}", "--live"], "give a twin run's directory, or --live"),
        (["{run}", "--policy", "easy"], "no run of policy 'easy'"),
        (["{run}", "--window", "9:3"], "the end must come after the start"),
        (["{run}", "--window", "nine"], "START:END"),
        (["{run}", "--no-png", "--no-html"], "nothing to write"),
        (["{missing}"], "not a directory"),
    ],
)
def test_a_mistake_is_one_line_and_exit_2(
    malleable_run: Path, tmp_path: Path, args: list[str], error: str
) -> None:
    argv = [a.format(run=malleable_run, missing=tmp_path / "nothing") for a in args]
    result = runner.invoke(app, ["gantt", *argv, "--out", str(tmp_path / "g")])
    assert result.exit_code == 2, result.output
    assert error in result.output


def test_a_csv_without_segments_or_with_a_bad_one_is_a_user_error(
    malleable_run: Path, tmp_path: Path
) -> None:
    for name in ("fcfs-malleable.summary.json",):
        (tmp_path / name).write_text((malleable_run / name).read_text())
    with (malleable_run / "fcfs-malleable.jobs.csv").open() as fh:
        rows = list(csv.reader(fh))
    old = [r[: rows[0].index("segments")] for r in rows]
    with (tmp_path / "fcfs-malleable.jobs.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(old)
    with pytest.raises(UserError, match="no 'segments' column"):
        load_twin_run(tmp_path)
    rows[1][rows[0].index("segments")] = "12@nowhere:x"
    with (tmp_path / "fcfs-malleable.jobs.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    with pytest.raises(UserError, match="cannot read segments"):
        load_twin_run(tmp_path)
    rows[1][rows[0].index("segments")] = "12@nowhere:3"
    with (tmp_path / "fcfs-malleable.jobs.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    with pytest.raises(UserError, match="unknown machine 'nowhere'"):
        load_twin_run(tmp_path)


def test_the_outcomes_keep_each_segments_parts(malleable_run: Path) -> None:
    # What the CSV is written from: the modelled agents' record of each placement.
    workload = load_workload(malleable_run / "syn.swf", cluster=CLUSTER)
    run = run_policy(workload, "fcfs-malleable")
    for o in run.result.outcomes:
        placed = o.placements()
        assert len(placed) == len(o.segments)
        for segment, parts in placed:
            assert sum(p.cpus for p in parts) == segment.cpus
            assert all(isinstance(p, Part) for p in parts)
