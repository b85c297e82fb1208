"""``bench/faults.py``'s sampler sees job processes however they show their command line.

A forked job process (the fork server's) shows one space-separated title
(setproctitle); an exec'd one shows NUL-separated argv. A sampler blind to
either would count no duplicates and find no process to crash.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from bench.fault_sampler import Sampler

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
