"""Users' own commands on an agent: output, environment, exit status, the whole tree ended.

Real job processes (the command's supervisor, ``python -m nodeagent.job``) and
real commands (``sh``), on an in-process agent with commands allowed. Each
test waits on what the command or the agent says (a file, a report), never on
time; the daemon tests check ``/proc`` afterwards: nothing of the job is left.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from broker.messages import AgentOnline, CancelPart, PartFinished, PartProgress, ResizePart
from broker.vocabulary import CommandUsers
from nodeagent.agent.cpuset import allowed_list
from nodeagent.launch.jobtree import cgroup2_mount, own_cgroup
from tests.builders import spec as sleep_spec
from tests.nodeagent.clock import ManualClock
from tests.nodeagent.commands_harness import (
    OWNER,
    alive,
    command_job,
    commands_agent,
    file_says,
    start_command,
)
from tests.nodeagent.harness import FAST, agent_reaches, running_agent, start

SECRET = "s3cr3t-broker-password"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    return tmp_path


async def test_output_holds_stdout_and_the_environment_the_job_variables_and_no_secret(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent's own login, as its environment would hold it: no job may see it.
    monkeypatch.setenv("ACCORDION_MQTT_PASSWORD", SECRET)
    monkeypatch.setenv("ACCORDION_MQTT_PASSWORD_FILE", str(folder / "secret"))
    monkeypatch.setenv("ACCORDION_MQTT_KEY", str(folder / "client.key"))
    spec = command_job(
        "env1",
        [
            "sh",
            "-c",
            'echo "hello $ACCORDION_JOB_ID"; env; cat "$ACCORDION_HOSTFILE"; '
            'echo "argv: $0 $*" >&2; tr "\\0" " " < /proc/$$/cmdline; echo',
        ],
        folder,
        procs=3,
    )
    async with commands_agent(folder, cpus=2) as run:
        online = await run.scheduler.expect(AgentOnline)
        assert online.commands is (CommandUsers.MAPPED if os.geteuid() == 0 else CommandUsers.AGENT)
        await run.scheduler.send(start_command(spec, cpus=2, hosts=[("node1", 2), ("node2", 1)]))
        done = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "env1")
    assert (done.reason, done.exit_code, done.exit_status, done.signal) == ("done", 0, 0, None)
    text = (folder / "accordion-env1.out").read_text()
    assert text.splitlines()[0] == "hello env1"
    env = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0].isupper()
    )
    assert env["ACCORDION_JOB_ID"] == "env1"
    assert env["ACCORDION_NPROCS"] == "3"
    assert env["ACCORDION_CPUS_ON_NODE"] == "2"
    assert env["ACCORDION_NODELIST"] == "node1,node2"
    assert env["ACCORDION_TASKS_PER_NODE"] == "2,1"
    assert env["ACCORDION_NNODES"] == "2"
    assert env["ACCORDION_NODEID"] == "0"
    assert env["ACCORDION_JOB_USER"] == OWNER
    assert env["TMPDIR"] == env["ACCORDION_TMPDIR"]
    # The hostfile in Open MPI's format, one line per part.
    assert "node1 slots=2\nnode2 slots=1\n" in text
    # No secret, and nothing of the agent's login, in the environment or the arguments.
    assert SECRET not in text
    assert not any(k.startswith("ACCORDION_MQTT") for k in env)
    assert str(folder / "secret") not in text
    # stderr went to the same file (no --error), and the job's directory is gone.
    assert "argv: sh" in text
    assert not Path(env["ACCORDION_TMPDIR"]).exists()


async def test_a_command_holds_only_its_own_descriptors(folder: Path) -> None:
    """Its stdin, stdout and stderr, nothing of its supervisor's (the relay pipes
    above all: a command that could write frames there could speak for its part)."""
    spec = command_job("fd1", ["sh", "-c", "ls /proc/$$/fd; readlink /proc/$$/fd/0"], folder)
    async with commands_agent(folder) as run:
        await run.scheduler.send(start_command(spec))
        done = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "fd1")
    assert done.reason == "done"
    lines = (folder / "accordion-fd1.out").read_text().split()
    assert lines == ["0", "1", "2", "/dev/null"]


async def test_a_daemon_in_a_new_session_is_killed_at_cancel(folder: Path) -> None:
    for cgroups in (True, False):
        marks = folder / f"daemon-{cgroups}"
        script = (
            f"setsid sh -c 'trap \"\" TERM; echo $$ > {marks}; exec sleep 1000' & "
            "trap '' TERM; while :; do sleep 0.05; done"
        )
        spec = command_job("d1", ["sh", "-c", script], folder)
        async with commands_agent(folder, cgroups=cgroups) as run:
            await run.scheduler.send(start_command(spec))
            await run.scheduler.expect(PartProgress, lambda p: p.job_id == "d1")
            daemon = int((await file_says(marks, what="\n")).strip())
            assert alive(daemon)
            assert os.getsid(daemon) == daemon  # a session of its own
            await run.scheduler.send(CancelPart(job_id="d1"))
            ended = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "d1")
        assert ended.reason == "cancelled"
        # Both ignore TERM: KILL after the grace, the daemon too.
        assert ended.signal == signal.SIGKILL, ended
        assert not alive(daemon), f"the daemon outlived its job (cgroups {cgroups})"
        # A cleanly stopped agent leaves no cgroup behind, its parts' nor their parent.
        mount, own = cgroup2_mount(), own_cgroup()
        if mount is not None and own is not None:
            assert not (mount / own.lstrip("/") / "accordion-node1").exists()


async def test_walltime_terms_then_kills_the_tree_and_says_which_signal(folder: Path) -> None:
    """On the agent's stopped clock: the limit passes when the test says, once both
    commands are ready (a trap installed, a sleep running)."""
    trap = f"trap 'echo TERM > {folder}/term' TERM; echo > {folder}/ready-w1; "
    spec = command_job(
        "w1", ["sh", "-c", trap + "sleep 1000 & wait; sleep 1000"], folder, walltime=10.0
    )
    polite = command_job(
        "w2", ["sh", "-c", f"echo > {folder}/ready-w2; exec sleep 1000"], folder, walltime=10.0
    )
    clock = ManualClock()
    t0 = clock.now
    async with commands_agent(folder, clock=clock) as run:
        await run.scheduler.send(start_command(spec))
        await run.scheduler.send(start_command(polite))
        await file_says(folder / "ready-w1")
        await file_says(folder / "ready-w2")
        await agent_reaches(run, t0 + 10.0)
        # The agent's own SIGKILL would come 1 + 1 s later on its clock, which stands:
        # what ends the stubborn one is its supervisor's KILL after the 1 s grace.
        stubborn = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "w1")
        obeying = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "w2")
    assert (stubborn.reason, stubborn.signal) == ("walltime", signal.SIGKILL), stubborn
    assert (folder / "term").read_text() == "TERM\n"  # TERM came first
    assert (obeying.reason, obeying.signal) == ("walltime", signal.SIGTERM)
    assert obeying.detail is not None
    assert "SIGTERM" in obeying.detail


async def test_exit_status_signal_and_a_command_that_cannot_start(folder: Path) -> None:
    async with commands_agent(folder, cpus=4) as run:
        await run.scheduler.send(start_command(command_job("x3", ["sh", "-c", "exit 3"], folder)))
        await run.scheduler.send(
            start_command(command_job("seg", ["sh", "-c", "kill -SEGV $$"], folder))
        )
        await run.scheduler.send(
            start_command(command_job("nope", ["no-such-program-here"], folder))
        )
        await run.scheduler.send(start_command(command_job("dir", ["true"], folder / "missing")))
        x3 = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "x3")
        seg = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "seg")
        nope = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "nope")
        missing = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "dir")
    assert (x3.reason, x3.exit_status, x3.detail) == (
        "failed",
        3,
        "the command exited with status 3",
    )
    assert (seg.reason, seg.signal) == ("failed", signal.SIGSEGV)
    assert nope.exit_status == 127
    assert nope.detail is not None
    assert "no-such-program-here" in nope.detail
    assert missing.reason == "failed"
    assert missing.detail is not None
    assert "working directory" in missing.detail


async def test_a_batch_script_runs_with_its_arguments(folder: Path) -> None:
    script = '#!/bin/sh\necho "args: $*"\necho "me: $0" >&2\n'
    spec = command_job("b1", ["one", "two words"], folder, script=script, error="err-%j.txt")
    async with commands_agent(folder) as run:
        await run.scheduler.send(start_command(spec))
        done = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "b1")
    assert done.reason == "done"
    assert (folder / "accordion-b1.out").read_text() == "args: one two words\n"
    assert (folder / "err-b1.txt").read_text().startswith("me: ")


async def test_parts_after_the_first_hold_their_cpus_and_run_nothing(folder: Path) -> None:
    spec = command_job("h1", ["sh", "-c", f"echo ran > {folder}/ran"], folder, procs=2)
    async with commands_agent(folder) as run:
        await run.scheduler.send(
            start_command(spec, cpus=1, part=1, hosts=[("elsewhere", 1), ("node1", 1)])
        )
        await run.scheduler.expect(PartProgress, lambda p: p.job_id == "h1")
        await run.scheduler.send(CancelPart(job_id="h1"))
        ended = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "h1")
    assert ended.reason == "cancelled"
    assert (ended.exit_status, ended.signal) == (None, None)
    assert not (folder / "ran").exists()


async def test_commands_are_refused_unless_allowed(folder: Path) -> None:
    async with running_agent(settings=FAST) as run:
        online = await run.scheduler.expect(AgentOnline)
        assert online.commands is CommandUsers.OFF
        await run.scheduler.send(start_command(command_job("off", ["true"], folder)))
        refused = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "off")
        # The other workloads are unchanged.
        await run.scheduler.send(start(sleep_spec("sleep1", work=0.01), time_scale=1.0))
        ok = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "sleep1")
    assert (refused.reason, refused.exit_code) == ("failed", -1)
    assert refused.detail is not None
    assert "--allow-commands" in refused.detail
    assert ok.reason == "done"


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root agent maps owners to accounts")
async def test_an_unmapped_or_unauthenticated_owner_is_refused_with_the_reason(
    folder: Path,
) -> None:
    async with commands_agent(folder, lines="alice nobody-such-account-x\nbob root\n") as run:
        for job_id, owner in (("carol", "carol"), ("anon", None), ("alice", "alice")):
            await run.scheduler.send(
                start_command(command_job(job_id, ["true"], folder, owner=owner))
            )
        carol = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "carol")
        anon = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "anon")
        alice = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "alice")
    assert carol.reason == "failed"
    assert carol.detail is not None
    assert "no OS account is mapped for 'carol'" in carol.detail
    assert anon.detail is not None
    assert "no authenticated owner" in anon.detail
    assert alice.detail is not None
    assert "does not exist on this host" in alice.detail
    assert not list((folder / "jobs").iterdir())  # nothing was made for them


async def test_a_resize_pins_every_thread_of_the_tree_to_the_part_cores(folder: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    script = f"sleep 1000 & echo $! > {folder}/child; wait"
    spec = command_job("r1", ["sh", "-c", script], folder, procs=2)
    async with commands_agent(folder, cpus=2) as run:
        await run.scheduler.send(start_command(spec, cpus=2))
        await run.scheduler.expect(PartProgress, lambda p: p.job_id == "r1")
        child = int((await file_says(folder / "child", what="\n")).strip())
        both = allowed_list(child)
        # The job hears of a resize after its agent re-pinned the tree: its report at
        # the new rate (MPL 2: half) says the pinning is done.
        await run.scheduler.send(ResizePart(job_id="r1", cpus=1, job_cpus=1))
        half = await run.scheduler.expect(
            PartProgress, lambda p: p.job_id == "r1" and p.rate == 0.5
        )
        shrunk = allowed_list(child)
        await run.scheduler.send(ResizePart(job_id="r1", cpus=2, job_cpus=2))
        await run.scheduler.expect(
            PartProgress, lambda p: p.job_id == "r1" and p.rate == 1.0 and p.at > half.at
        )
        expanded = allowed_list(child)
        await run.scheduler.send(CancelPart(job_id="r1"))
        await run.scheduler.expect(PartFinished, lambda f: f.job_id == "r1")
    assert both == f"{cores[0]}-{cores[1]}" or both == f"{cores[0]},{cores[1]}"
    assert shrunk == str(cores[0])
    assert expanded == both
