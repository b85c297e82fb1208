"""``bench/faults/__main__.py``'s sampler sees job processes however they show their command line.

A forked job process (the fork server's) shows one space-separated title
(setproctitle); an exec'd one shows NUL-separated argv. A sampler blind to
either would count no duplicates and find no process to crash.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from bench.faults.sampler import (
    ALLOWANCE,
    PERIOD,
    JobProcess,
    OverlapLog,
    Sampler,
    parse_cmdline,
)

ROOT = "sampler-test/v1"
ARGS = ["-m", "nodeagent.job", "--job-id=j1", "--attempt=2", f"--root={ROOT}"]
SLEEP = "import sys, time; sys.stdin.read()"


def titled() -> subprocess.Popen[bytes]:
    title = " ".join(["python", *ARGS])
    code = f"import setproctitle; setproctitle.setproctitle({title!r}); {SLEEP}"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


def execd() -> subprocess.Popen[bytes]:
    # argv as the kernel shows it: "-c CODE" and then the job's arguments.
    return subprocess.Popen([sys.executable, "-c", SLEEP, *ARGS], stdin=subprocess.PIPE)


@pytest.mark.parametrize("start", [titled, execd], ids=["forked-title", "execd-argv"])
async def test_the_sampler_finds_the_job_process(start: object) -> None:
    assert callable(start)
    process: subprocess.Popen[bytes] = start()
    try:
        sampler = Sampler(ROOT)
        async with asyncio.timeout(30):
            while process.pid not in (found := sampler.processes()):
                await asyncio.sleep(0.01)
        assert found[process.pid] == ("j1", 2)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait()


A1, A2 = JobProcess("j1", 1, "/lease", 4.0), JobProcess("j1", 2, "/lease", 4.0)
OTHER = JobProcess("j2", 1)


def fed(samples: list[dict[int, JobProcess]]) -> OverlapLog:
    log = OverlapLog()
    for i, alive in enumerate(samples):
        log.sample(i * PERIOD, alive, lambda _: 4.5)
    return log


def test_an_old_attempt_leaving_as_the_new_one_starts_is_within_the_bound() -> None:
    log = fed([{10: A1, 30: OTHER}, {10: A1, 20: A2}, {20: A2}])
    (overlap,) = log.overlaps.values()
    assert overlap.old == (1, 10)
    assert overlap.new == (2, 20)
    assert overlap.seconds == pytest.approx(PERIOD)
    assert overlap.old_lease_age == 4.5
    assert log.within(ALLOWANCE) == [overlap]
    assert not log.beyond(ALLOWANCE)


def test_a_long_overlap_is_a_duplicate() -> None:
    log = fed([{10: A1}] + [{10: A1, 20: A2}] * 20 + [{20: A2}])
    (overlap,) = log.beyond(ALLOWANCE)
    assert overlap.seconds == pytest.approx(20 * PERIOD)
    assert not log.within(ALLOWANCE)


def test_a_stale_attempt_forked_after_the_new_one_is_a_duplicate_however_brief() -> None:
    # The fault matrix's agent-freeze case: attempt 1 appears after attempt 2, for one sample.
    log = fed([{20: A2}, {20: A2, 21: A1}, {20: A2}])
    (overlap,) = log.beyond(ALLOWANCE)
    assert overlap.stale_start
    assert "stale start" in overlap.describe()


def test_the_command_line_names_job_attempt_and_lease() -> None:
    raw = b"python -m nodeagent.job --job-id=j1 --attempt=3 --root=r/v1 --lease-file=/x --lease=4.0"
    assert parse_cmdline(raw, "--root=r/v1") == JobProcess("j1", 3, "/x", 4.0)
    assert parse_cmdline(raw, "--root=other/v1") is None
    assert parse_cmdline(raw.replace(b"--attempt=3", b"--attempt=x"), "--root=r/v1") is None
