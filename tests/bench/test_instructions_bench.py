"""``bench.replay.instructions`` reads cachegrind's count, and runs where valgrind is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.replay.instructions import _REFS

BENCH = Path(__file__).resolve().parents[2] / "bench" / "replay" / "instructions.py"
PWA = Path(__file__).resolve().parents[3] / "shared" / "workloads" / "pwa"


def test_the_count_is_read_from_cachegrinds_summary() -> None:
    stderr = "==1== Collected : 12\n==1==\n==1== I   refs:      5,315,984,959\n"
    found = _REFS.search(stderr)
    assert found is not None
    assert int(found.group(1).replace(",", "")) == 5_315_984_959


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(not PWA.is_dir(), reason="the shared traces are not beside the checkout")
# Valgrind runs a replay some 50 times slower: about a minute on an idle machine,
# several on a loaded one. The bound is the subprocess's own, not the suite's 120 s.
@pytest.mark.timeout(660)
def test_a_short_replay_is_counted_against_the_textbook() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--trace", "KTH-SP2", "--jobs", "10000"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[2:4]}
    assert set(rows) == {"textbook", "easy"}
    assert "warning" not in proc.stdout  # both replays well above the loading's noise
    assert float(rows["textbook"][2].rstrip("x")) == 1.0
    # The twin does more than the yardstick's loop (a core, checked decisions, outcomes).
    assert int(rows["easy"][1].replace(",", "")) > int(rows["textbook"][1].replace(",", ""))
