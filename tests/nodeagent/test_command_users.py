"""Two mapped users' jobs on a real root agent: each runs as its own account, and
neither can read the agent's secrets, write its state directory or the other's job.

A real ``python -m nodeagent --allow-commands --user-map`` (fork server, relay,
state directory) on the session's Mosquitto, with a broker login's secret in its
environment as an agent has one. Two OS accounts are made with ``useradd`` for
the test and removed after it. Each job tries what it must not be able to do
and writes what happened into its output file; the test reads the files.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.command_spec import CommandSpec
from broker.messages import AgentOnline, JobSpec, PartFinished, PartStarted, StartPart
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from broker.vocabulary import CommandUsers
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.commands_harness import file_says
from tests.nodeagent.harness import Scheduler

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None,
        reason="makes OS accounts (root, useradd)",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
SECRET = "the-agents-broker-password"


@pytest.fixture(scope="module")
def accounts() -> Iterator[tuple[str, str]]:
    """Two fresh OS accounts, removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    names = (f"acc-a-{tag}", f"acc-b-{tag}")
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield names
    finally:
        for name in names:
            subprocess.run(["userdel", name], check=False)


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory the accounts can reach (pytest's own is root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="accordion-users-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def root_agent(
    endpoint: BrokerEndpoint, topics: Topics, place: Path, user_map: str
) -> AsyncIterator[tuple[Scheduler, asyncio.subprocess.Process]]:
    (place / "users.map").write_text(user_map)
    (place / "users.map").chmod(0o644)
    secret = place / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    log = (place / "agent.log").open("ab")
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeagent",
        f"--host={endpoint.host}",
        f"--port={endpoint.port}",
        f"--root={topics.root}",
        "--name=u1",
        "--cpus=2",
        "--heartbeat=0.2",
        "--kill-grace=1",
        f"--state-dir={place / 'state'}",
        "--allow-commands",
        f"--user-map={place / 'users.map'}",
        f"--jobs-dir={place / 'jobs'}",
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            # As an agent of a cluster with logins has them: a path and a password.
            "ACCORDION_MQTT_PASSWORD_FILE": str(secret),
            "ACCORDION_MQTT_PASSWORD": SECRET,
        },
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    settings = MqttSettings(endpoint.host, endpoint.port)
    try:
        async with MqttBus(settings, f"sched-{uuid.uuid4().hex[:6]}") as bus:
            await bus.subscribe(topics.agent_state("u1"))
            await bus.subscribe(topics.agent_events("u1"))
            scheduler = Scheduler(bus, "u1", topics)
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(scheduler.read(), name="test-users-scheduler")
                try:
                    yield scheduler, agent
                finally:
                    reader.cancel()
    finally:
        if agent.returncode is None:
            agent.terminate()
        await agent.wait()
        log.close()


def home_of(name: str, place: Path) -> Path:
    """A working directory of the account's own (0700), where its output goes."""
    entry = pwd.getpwnam(name)
    home = place / name
    home.mkdir()
    os.chown(home, entry.pw_uid, entry.pw_gid)
    home.chmod(0o700)
    return home


def job(job_id: str, owner: str, where: Path, script: str, args: tuple[str, ...]) -> StartPart:
    spec = JobSpec(
        id=job_id,
        procs=1,
        walltime=1e6,
        work=1e6,
        workload="command",
        user=owner,
        owner=owner,
        command=CommandSpec(argv=args, script=script, chdir=str(where)),
    )
    return StartPart(job=spec, cpus=1, time_scale=1.0)


PROBE = """#!/bin/sh
# Each line: what was tried, then "denied" or "ALLOWED".
try() {
  what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "$what ALLOWED"; else echo "$what denied"; fi
}
echo "me $(id -un)"
try read-secret cat "$1"
try list-state ls "$2"
try write-state touch "$2/planted"
try agent-environ cat "/proc/$3/environ"
try other-job-dir touch "$4/planted"
try other-home touch "$5/planted"
env | grep -c ACCORDION_MQTT || true
echo "tmpdir $(stat -c %U:%a "$TMPDIR")"
echo > "$6"
while [ ! -e "$7" ]; do sleep 0.05; done
"""


async def test_two_mapped_users_run_as_themselves_and_cannot_reach_each_other_or_the_agent(
    mosquitto: BrokerEndpoint, accounts: tuple[str, str], place: Path
) -> None:
    alice, bob = accounts
    topics = Topics(f"users-{uuid.uuid4().hex[:6]}/v1")
    lines = f"{alice} {alice}\n{bob} {bob}\n"
    async with root_agent(mosquitto, topics, place, lines) as (scheduler, agent):
        online = await scheduler.expect(AgentOnline)
        assert online.commands is CommandUsers.MAPPED
        assert online.runs_as is None
        homes = {name: home_of(name, place) for name in accounts}
        state = place / "state"
        gate = place / "go"

        def probe(job_id: str, me: str, other_job: str, other: str) -> StartPart:
            args = (
                str(place / "secret"),
                str(state),
                str(agent.pid),
                str(place / "jobs" / f"{other_job}@1"),
                str(homes[other]),
                str(homes[me] / "ready"),
                str(gate),
            )
            return job(job_id, me, homes[me], PROBE, args)

        # Both run at once, so each one's job directory exists while the other probes.
        await scheduler.send(probe("ja", alice, "jb", bob))
        await scheduler.send(probe("jb", bob, "ja", alice))
        await scheduler.expect(PartStarted, lambda p: p.job_id == "ja")
        await scheduler.expect(PartStarted, lambda p: p.job_id == "jb")
        await file_says(homes[alice] / "ready")
        await file_says(homes[bob] / "ready")
        gate.write_text("go\n")
        ends = [
            await scheduler.expect(PartFinished, lambda f, j=j: f.job_id == j) for j in ("ja", "jb")
        ]
    assert [(e.reason, e.exit_status) for e in ends] == [("done", 0), ("done", 0)]
    for job_id, me in (("ja", alice), ("jb", bob)):
        text = (homes[me] / f"accordion-{job_id}.out").read_text()
        assert f"me {me}\n" in text
        for what in ("read-secret", "list-state", "write-state", "agent-environ"):
            assert f"{what} denied" in text, text
        assert "other-job-dir denied" in text, text
        assert "other-home denied" in text, text
        assert "\n0\n" in text  # no ACCORDION_MQTT_* variable at all
        assert f"tmpdir {me}:700" in text
        assert SECRET not in text
        # The output file is the account's own.
        assert (homes[me] / f"accordion-{job_id}.out").stat().st_uid == pwd.getpwnam(me).pw_uid
    assert not (place / "state" / "planted").exists()
    assert not list((place / "jobs").iterdir())  # both job directories removed


async def test_a_user_mapped_to_no_account_is_refused(
    mosquitto: BrokerEndpoint, accounts: tuple[str, str], place: Path
) -> None:
    alice, _ = accounts
    topics = Topics(f"users-{uuid.uuid4().hex[:6]}/v1")
    async with root_agent(mosquitto, topics, place, f"{alice} {alice}\n") as (scheduler, _):
        await scheduler.expect(AgentOnline)
        await scheduler.send(job("mallory", "mallory", place, "#!/bin/sh\ntrue\n", ()))
        refused = await scheduler.expect(PartFinished, lambda f: f.job_id == "mallory")
    assert (refused.reason, refused.exit_code) == ("failed", -1)
    assert refused.detail is not None
    assert "no OS account is mapped for 'mallory'" in refused.detail


def interpreter_for_others() -> str | None:
    """A Python of this version that another account can run (every directory on its
    way traversable), or None: the tests' own may live under a private home."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/{version}"):
        path = Path(candidate)
        if (
            path.name.startswith(version)
            and path.exists()
            and all(p.stat().st_mode & 0o001 for p in path.parents)
        ):
            return str(path)
    return None


async def test_an_agent_not_running_as_root_runs_commands_as_itself_and_says_so(
    mosquitto: BrokerEndpoint, accounts: tuple[str, str], place: Path
) -> None:
    python = interpreter_for_others()
    if python is None:
        pytest.skip("no Python another account may run")
    me, _ = accounts
    entry = pwd.getpwnam(me)
    home = home_of(me, place)
    topics = Topics(f"users-{uuid.uuid4().hex[:6]}/v1")
    site = sysconfig.get_paths()["purelib"]
    log = (home / "agent.log").open("ab")
    agent = await asyncio.create_subprocess_exec(
        "setpriv",
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--init-groups",
        python,
        "-m",
        "nodeagent",
        f"--host={mosquitto.host}",
        f"--port={mosquitto.port}",
        f"--root={topics.root}",
        "--name=u1",
        "--cpus=1",
        "--heartbeat=0.2",
        f"--state-dir={home / 'state'}",
        "--allow-commands",
        f"--jobs-dir={home / 'jobs'}",
        env={"PYTHONPATH": f"{ROOT}:{site}", "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=home,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        settings = MqttSettings(mosquitto.host, mosquitto.port)
        async with MqttBus(settings, f"sched-{uuid.uuid4().hex[:6]}") as bus:
            await bus.subscribe(topics.agent_state("u1"))
            await bus.subscribe(topics.agent_events("u1"))
            scheduler = Scheduler(bus, "u1", topics)
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(scheduler.read(), name="test-users-own")
                online = await scheduler.expect(AgentOnline)
                probe = (
                    "#!/bin/sh\nid -un\n"
                    f"if cat /proc/{agent.pid}/environ >/dev/null 2>&1; "
                    "then echo environ readable; else echo environ denied; fi\n"
                )
                # An owner the agent cannot map, and need not: it runs everything as itself.
                await scheduler.send(job("own", "somebody-else", home, probe, ()))
                ended = await scheduler.expect(PartFinished, lambda f: f.job_id == "own")
                reader.cancel()
    finally:
        if agent.returncode is None:
            agent.terminate()
        await agent.wait()
        log.close()
    assert (online.commands, online.runs_as) == (CommandUsers.AGENT, me)
    assert (ended.reason, ended.exit_status) == ("done", 0), (home / "agent.log").read_text()
    text = (home / "accordion-own.out").read_text()
    # Its own account; and its agent, non-dumpable, keeps its environment from it.
    assert text == f"{me}\nenviron denied\n"
