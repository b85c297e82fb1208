"""``accordion up`` supervises its children: an agent, the scheduler, the broker SIGKILLed
are restarted.

The backoff is tested on a manual clock; the processes are real.

A real ``accordion up`` subprocess with its own broker; the test reads its
stderr line by line and waits for signals: the "up" line, the agent's new
registration (a retained ``AgentOnline`` with a new incarnation on its state
topic), the supervisor's restart line. Each wait has a generous bound that
only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import pytest

from accordion.client.live_client import Credentials, connect, run_async
from accordion.cluster.local_cluster import (
    BACKOFF_FIRST,
    STABLE,
    USAGE_ERROR,
    LocalCluster,
    Restart,
)
from accordion.cluster.processes import Child, UpError
from accordion.errors import NoReplyError
from broker.bus import BusError
from broker.codec import decode
from broker.messages import AgentOnline
from broker.mqtt import MqttBus, MqttSettings
from broker.settings import read_secret
from broker.topics import Topics
from scheduler.runtime.journal import Journal
from tests.accordion.live.conftest import two_agents
from tests.integration.conftest import BrokerEndpoint

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
BOUND = 60.0


class Lines:
    """A child's text stream read by a thread, so a test can wait for a line with a bound."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stream = stream
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """After the child has exited: the reader sees the end; then the pipe is closed."""
        self._thread.join(BOUND)
        self._stream.close()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, text: str) -> str:
        while True:
            line = self._lines.get(timeout=BOUND)
            if line is None:
                raise AssertionError(f"stream ended before {text!r}:\n{''.join(self.seen)}")
            self.seen.append(line)
            if text in line:
                return line


def _admin(run_dir: Path, login: str) -> Credentials:
    """One of the admin's logins ``accordion up`` generated (its default: logins and ACLs)."""
    cluster: dict[str, Any] = json.loads((run_dir / "cluster.json").read_text())
    env_file = Path(cluster["logins"][login])
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    return Credentials(env["ACCORDION_MQTT_USERNAME"], Path(env["ACCORDION_MQTT_PASSWORD_FILE"]))


async def _kill_and_wait_for_new_incarnation(
    broker: str, root: str, machine: str, pid: int, admin: Credentials
) -> str:
    topic = Topics(root).agent_state(machine)
    settings = replace(
        MqttSettings.from_url(broker),
        username=admin.username,
        password=read_secret(admin.password_file),
    )
    async with MqttBus(settings, f"test-watch-{uuid.uuid4().hex[:8]}") as bus:
        await bus.subscribe(topic, qos=1)
        incarnations: list[str] = []
        async with asyncio.timeout(BOUND):
            async for delivery in bus.deliveries():
                if not delivery.payload:
                    continue
                message = decode(delivery.payload)
                if not isinstance(message, AgentOnline):
                    continue  # the killed agent's Last Will
                incarnations.append(message.incarnation)
                if len(incarnations) == 1:
                    os.kill(pid, signal.SIGKILL)  # the retained registration came: kill it now
                elif message.incarnation != incarnations[0]:
                    return message.incarnation
    raise AssertionError("the bus closed before the agent registered again")


async def _online(broker: str, root: str, machine: str, admin: Credentials) -> bool:
    """Wait until the scheduler (through a broker that may be restarting) lists ``machine``
    online."""
    async with asyncio.timeout(BOUND):
        while True:
            try:
                async with connect(broker, root, timeout=5.0, credentials=admin) as client:
                    while True:
                        try:
                            status = await client.status()
                        except NoReplyError:
                            continue  # a restarted scheduler not yet subscribed: ask again
                        if any(m.id == machine and m.online for m in status.machines):
                            return True
            except BusError:
                # The broker is not listening yet (or went away): connect again shortly.
                await asyncio.sleep(0.1)


def test_a_sigkilled_agent_is_restarted_and_the_cluster_stays_up(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(
        f'name = "sup-{tag}"\n'
        f'[[machine]]\nname = "a-{tag}"\ncpus = 2\n'
        f'[[machine]]\nname = "b-{tag}"\ncpus = 2\n'
    )
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-c", "from accordion.cli import main; main()", "up"]
    argv += ["--cluster", str(cluster), "--root", f"sup-{tag}/v1", "--run-dir", str(run_dir)]
    up = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert up.stderr is not None
    assert up.stdout is not None
    errors = Lines(up.stderr)
    output = Lines(up.stdout)  # drained, so the endpoints table never blocks the child
    try:
        errors.wait_for("the cluster is up")
        before: dict[str, Any] = json.loads((run_dir / "cluster.json").read_text())
        pids = {p["name"]: p["pid"] for p in before["processes"]}
        agent = f"agent-a-{tag}"
        admin = _admin(run_dir, "admin~2")

        new = run_async(
            _kill_and_wait_for_new_incarnation(
                before["broker"], before["root"], f"a-{tag}", pids[agent], _admin(run_dir, "admin")
            )
        )
        assert new
        line = errors.wait_for(f"restarted agent {agent}")
        assert "(restart 1, pid " in line
        assert any(f"agent {agent} exited with code -9; restart 1 in" in s for s in errors.seen)

        # The cluster was not torn down: same broker and scheduler, the other agent
        # untouched, the restarted machine back online in the scheduler's view.
        assert up.poll() is None
        after: dict[str, Any] = json.loads((run_dir / "cluster.json").read_text())
        now = {p["name"]: p for p in after["processes"]}
        assert now[agent]["pid"] != pids[agent]
        assert now[agent]["restarts"] == 1
        for name in ("scheduler", f"agent-b-{tag}"):
            assert now[name]["pid"] == pids[name]
            assert now[name]["restarts"] == 0
        assert run_async(_online(before["broker"], before["root"], f"a-{tag}", admin))

        # The scheduler too: killed, restarted on its journal, it answers again and
        # learns both machines back from their retained registrations.
        os.kill(pids["scheduler"], signal.SIGKILL)
        assert "(restart 1, pid " in errors.wait_for("restarted scheduler scheduler")
        for machine in (f"a-{tag}", f"b-{tag}"):
            assert run_async(_online(before["broker"], before["root"], machine, admin))
        assert up.poll() is None

        # And the broker: restarted on its port, everyone comes back to it (the
        # scheduler exits on a lost broker and is restarted; agents reconnect).
        broker = next(p for p in before["processes"] if p["role"] == "broker")
        os.kill(broker["pid"], signal.SIGKILL)
        assert "(restart 1, pid " in errors.wait_for(f"restarted broker {broker['name']}")
        for machine in (f"a-{tag}", f"b-{tag}"):
            assert run_async(_online(before["broker"], before["root"], machine, admin))
        assert up.poll() is None
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=BOUND)
        output.close()
    assert code == 0
    errors.wait_for("stopped: agents (")
    errors.close()


class ManualClock:
    """The supervisor's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _killed(child: Child) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.process.wait(BOUND)  # the signal: the process is gone


def test_restarts_back_off_doubling_to_a_cap_and_start_over_after_a_stable_run(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    clock = ManualClock()
    seen: list[Restart] = []
    cluster = LocalCluster(
        two_agents(uuid.uuid4().hex[:6]),
        tmp_path / "run",
        broker_url=mosquitto.url,
        root=f"backoff-{uuid.uuid4().hex[:6]}/v1",
        start_agents=False,
        on_restart=seen.append,
        clock=clock,
    )
    with cluster:
        (scheduler,) = cluster.children()
        delays = []
        for _ in range(8):
            _killed(scheduler)
            (scheduled,) = cluster.supervise()
            assert scheduled.pid is None
            assert scheduled.exit_code == -signal.SIGKILL
            delays.append(scheduled.delay)
            assert cluster.supervise() == []  # not due yet
            clock.now += scheduled.delay
            (done,) = cluster.supervise()
            assert done.pid == scheduler.pid
            assert done.count == scheduler.restarts == len(delays)
        assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        # A child that ran a while starts again from the first delay.
        clock.now += STABLE
        _killed(scheduler)
        (scheduled,) = cluster.supervise()
        assert scheduled.delay == BACKOFF_FIRST
        assert seen[-1] == scheduled
        assert (
            json.loads((tmp_path / "run" / "cluster.json").read_text())["processes"][0]["restarts"]
            == 8
        )


def test_a_usage_error_is_not_restarted(mosquitto: BrokerEndpoint, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # A journal of another time scale: the scheduler refuses it (exit 2), every time.
    with Journal(run_dir / "journal.sqlite") as journal:
        journal.ensure_meta(epoch=0.0, time_scale=5.0, policy="easy")
    cluster = LocalCluster(
        two_agents(uuid.uuid4().hex[:6]),
        run_dir,
        broker_url=mosquitto.url,
        root=f"usage-{uuid.uuid4().hex[:6]}/v1",
        start_agents=False,
    )
    with cluster:
        (scheduler,) = cluster.children()
        assert scheduler.process.wait(BOUND) == USAGE_ERROR
        with pytest.raises(UpError, match="scheduler scheduler exited with code 2"):
            cluster.supervise()
