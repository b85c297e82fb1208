"""``accordion up --demo`` end to end, as a user runs it: a subprocess, on each broker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerEndpoint

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def run_up(*args: str, timeout: float = 100.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from accordion.cli import main; main()", "up", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def _check_summary(result: subprocess.CompletedProcess[str], jobs: int) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # The endpoints, then the summary in the layout of `accordion simulate`.
    assert re.search(r"broker\s+│ \S.*mqtt://127\.0\.0\.1:\d+", out), out
    assert "http://127.0.0.1:" in out
    for row in ("mean wait (s)", "mean bounded slowdown (tau 10 s)", "utilisation"):
        assert row in out
    assert "live vs twin: mean wait" in out
    assert f"jobs in the journal: {jobs} finished" in out
    assert re.search(r"live in cluster seconds \(= wall seconds x [\d.]+\)", out)


def test_up_demo_on_mosquitto(mosquitto: BrokerEndpoint, tmp_path: Path) -> None:
    # `mosquitto` makes the test skip (or fail under CI) where it is not installed.
    run_dir = tmp_path / "run"
    result = run_up(
        "--demo",
        "--demo-jobs",
        "12",
        "--demo-seconds",
        "8",
        "--broker-kind",
        "mosquitto",
        "--policy",
        "easy:fairshare",
        "--policy-opt",
        "priority.decay=0.5",
        "--no-progress",
        "--run-dir",
        str(run_dir),
    )
    _check_summary(result, 12)
    # The option reached the live scheduler as well as the twin.
    assert "policy easy:fairshare priority.decay=0.5," in (run_dir / "scheduler.log").read_text()
    assert "Mosquitto" in result.stdout
    assert (run_dir / "journal.sqlite").is_file()
    assert (run_dir / "mosquitto.conf").is_file()


def test_up_demo_on_the_embedded_broker(tmp_path: Path) -> None:
    result = run_up(
        "--demo",
        "--demo-jobs",
        "8",
        "--demo-seconds",
        "6",
        "--broker-kind",
        "embedded",
        "--no-progress",
        "--run-dir",
        str(tmp_path / "run"),
    )
    _check_summary(result, 8)
    assert "embedded amqtt, MQTT 3.1.1" in result.stdout


def test_up_refuses_a_bad_cluster_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[machine]]\nname = "m"\n')
    result = run_up("--cluster", str(bad), timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error:")
    assert "cpus is required" in result.stderr
    unknown = run_up("--policy", "nope", timeout=30)
    assert unknown.returncode == 2
    assert "nope" in unknown.stderr
    option = run_up("--policy", "dpsa-n", "--policy-opt", "nope=1", timeout=30)
    assert option.returncode == 2
    assert option.stderr.strip() == (
        "error: dpsa-n has no option 'nope'; its options: budget, time_budget"
    )


def test_up_demo_with_fcfs_malleable_counts_resizes(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    """30 demo jobs: the twin shrinks running jobs 4 times and expands them 3 times
    (every job malleable by default); the live counts are printed beside them."""
    result = run_up(
        "--demo",
        "--demo-jobs",
        "30",
        "--demo-seconds",
        "10",
        "--broker-kind",
        "mosquitto",
        "--policy",
        "fcfs-malleable",
        "--no-progress",
        "--run-dir",
        str(tmp_path / "run"),
    )
    _check_summary(result, 30)
    shrinks = re.search(r"shrinks \(running jobs\)\s+│\s+(\d+) │\s+(\d+) │", result.stdout)
    expands = re.search(r"expands \(running jobs\)\s+│\s+(\d+) │\s+(\d+) │", result.stdout)
    assert shrinks is not None, result.stdout
    assert expands is not None, result.stdout
    assert shrinks.group(2) == "4"
    assert expands.group(2) == "3"
    # The live run resizes too (how often depends on its timing, not on the twin's).
    assert int(shrinks.group(1)) + int(expands.group(1)) > 0
