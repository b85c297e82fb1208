"""The compose testbed end to end: compose.yaml driven by testcontainers' ``DockerCompose``.

Run by ``scripts/test-compose`` (which sets ``ACCORDION_TESTBED=1``, and skips
with its reason when no Docker daemon answers); a plain ``pytest`` skips it.
It needs the images compose.yaml names (``../shared/tools/offline-images.sh``
builds stand-ins where no registry is reachable) and builds its own tag of
the accordion image (``ACCORDION_IMAGE``) from the Dockerfile, so it never
touches the ``accordion:local`` a developer uses.

One scenario, in order, on its own compose project and host ports:

1. ``up --build --wait`` with the three machine classes at 2 replicas each;
2. the demo workload (``docker compose run --rm submit``) in the background;
3. mid-run: ``--scale agent-fast=4``, then back to 2 (the two removed say
   goodbye); SIGKILL of one old agent (``docker kill``); ``restart broker``;
   ``restart scheduler``;
4. the submit client must end with status 0: every accepted job finished and
   the live-against-twin table printed;
5. Prometheus's totals equal the journal's, read in the scheduler's
   container (the agent loss of step 3 included: counted before the
   scheduler's restart, still counted after it), and every agent container
   that ever ran was scraped.

Waits are testcontainers' wait strategies on the containers' published
endpoints (Prometheus's query API, the scheduler's /metrics), never sleeps.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(900)]

if os.environ.get("ACCORDION_TESTBED") != "1":
    pytest.skip("the compose testbed test runs from scripts/test-compose", allow_module_level=True)

compose_module = pytest.importorskip("testcontainers.compose")
waits = pytest.importorskip("testcontainers.core.wait_strategies")

CLASSES = ("agent-big", "agent-fast", "agent-old")
STARTUP = 240  # seconds any one wait may take before it is a failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Published:
    """A compose container as a wait-strategy target reached through its published port.

    testcontainers' ``ComposeContainer.get_exposed_port`` returns the container's
    own port (its "simplified implementation"), which is not reachable from the
    host; this asks compose for the host port it published.
    """

    compose: Any
    container: Any

    def get_container_host_ip(self) -> str:
        return "127.0.0.1"

    def get_exposed_port(self, port: int) -> int:
        return int(self.compose.get_service_port(self.container.Service, port))

    def get_wrapped_container(self) -> Any:
        return self.container.get_wrapped_container()

    def get_logs(self) -> tuple[bytes, bytes]:
        logs: tuple[bytes, bytes] = self.container.get_logs()
        return logs

    def reload(self) -> None:
        self.container.reload()

    @property
    def status(self) -> str:
        return str(self.container.status)


class ComposeTestbed:
    """A compose project of compose.yaml, and the commands the scenario runs on it."""

    def __init__(self, workdir: Path) -> None:
        self.project = f"accordion-e2e-{uuid.uuid4().hex[:6]}"
        self.prometheus_port = free_port()
        self.metrics_port = free_port()
        self.env = {
            "COMPOSE_PROJECT_NAME": self.project,
            "ACCORDION_IMAGE": "accordion:e2e",
            "BROKER_PORT": str(free_port()),
            "SCHEDULER_METRICS_PORT": str(self.metrics_port),
            "PROMETHEUS_PORT": str(self.prometheus_port),
            "TIME_SCALE": "40",
            "JOBS": "40",
            "AGENT_BIG_REPLICAS": "2",
            "AGENT_FAST_REPLICAS": "2",
            "AGENT_OLD_REPLICAS": "2",
            # The scenario loses running jobs up to four times (a scale-down, a kill,
            # the broker's and the scheduler's restarts): one job hit by three of them
            # would exhaust the default budget of 2 and fail by rule, not by a loss.
            "MAX_REQUEUES": "4",
        }
        self.env_file = workdir / "testbed.env"
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in self.env.items()))
        self.compose = compose_module.DockerCompose(
            context=ROOT,
            compose_file_name=["compose.yaml", "compose.override.yaml"],
            env_file=str(self.env_file),
            build=True,
            wait=True,
        )
        #: Every agent container seen running: container id -> its address on the network.
        self.agents: dict[str, str] = {}
        self.up_seconds = 0.0

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "compose", "--env-file", str(self.env_file), *args],
            cwd=ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=STARTUP,
            check=check,
        )

    def note_agents(self) -> None:
        """Remember the address of every agent container running now."""
        for container in self.compose.get_containers():
            if container.Service in CLASSES and container.ID:
                info = json.loads(
                    subprocess.run(
                        ["docker", "inspect", container.ID], capture_output=True, check=True
                    ).stdout
                )[0]
                for net in info["NetworkSettings"]["Networks"].values():
                    self.agents[container.ID] = f"{net['IPAddress']}:9101"

    def published(self, service: str) -> Published:
        return Published(self.compose, self.compose.get_container(service))

    def wait_prometheus(self, query: str, ok: Any) -> None:
        """Wait until Prometheus answers ``query`` with a body ``ok`` accepts."""
        path = "/api/v1/query?" + urllib.parse.urlencode({"query": query})
        strategy = (
            waits.HttpWaitStrategy(9090, path)
            .for_response_predicate(lambda body: ok(_values(body)))
            .with_startup_timeout(STARTUP)
        )
        strategy.wait_until_ready(self.published("prometheus"))

    def wait_machines_online(self, n: int) -> None:
        self.wait_scheduler(rf"^accordion_scheduler_machines_online {n}\.0$")

    def wait_scheduler(self, regex: str) -> None:
        """Wait until the scheduler's /metrics has a line matching ``regex``."""
        pattern = re.compile(regex, re.M)
        strategy = (
            waits.HttpWaitStrategy(9100, "/metrics")
            .for_response_predicate(lambda body: bool(pattern.search(body)))
            .with_startup_timeout(STARTUP)
        )
        strategy.wait_until_ready(self.published("scheduler"))

    def query(self, expr: str) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=10) as r:
            return _values(r.read().decode())


def _values(body: str) -> dict[str, float]:
    """A Prometheus query answer as {labels as JSON: value}."""
    data = json.loads(body)["data"]["result"]
    return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in data}


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeTestbed]:
    bed = ComposeTestbed(tmp_path_factory.mktemp("testbed"))
    os.environ.update(bed.env)  # the DockerCompose subprocesses inherit the project name
    t0 = time.monotonic()
    try:
        with bed.compose:
            bed.up_seconds = time.monotonic() - t0
            yield bed
    finally:
        for key in bed.env:
            os.environ.pop(key, None)


def test_the_testbed_survives_scaling_kills_and_restarts(testbed: ComposeTestbed) -> None:
    bed = testbed
    bed.wait_machines_online(6)
    bed.wait_prometheus('count(up{job="agents"} == 1)', lambda v: list(v.values()) == [6.0])
    bed.note_agents()
    demo = subprocess.Popen(
        ["docker", "compose", "--env-file", str(bed.env_file), "run", "--rm", "submit"],
        cwd=ROOT,
        env={**os.environ, **bed.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Jobs are running before the faults start.
        bed.wait_prometheus("accordion_scheduler_running_jobs", lambda v: max(v.values()) > 0)
        bed.run("up", "-d", "--wait", "--no-recreate", "--scale", "agent-fast=4")
        bed.wait_machines_online(8)
        bed.note_agents()
        bed.wait_prometheus('count(up{job="agents"} == 1)', lambda v: list(v.values()) == [8.0])
        bed.run("up", "-d", "--wait", "--no-recreate", "--scale", "agent-fast=2")
        bed.wait_machines_online(6)
        victim = next(c for c in bed.compose.get_containers() if c.Service == "agent-old")
        subprocess.run(["docker", "kill", str(victim.ID)], check=True, capture_output=True)
        bed.wait_scheduler(r'^accordion_scheduler_agents_lost_total\{reason="will"\} [1-9]')
        bed.run("restart", "broker")
        bed.run("restart", "scheduler")
        out, _ = demo.communicate(timeout=600)
    finally:
        if demo.poll() is None:
            demo.kill()
    # The journal, read in the scheduler's container, against Prometheus's totals.
    journal = json.loads(
        bed.run(
            "exec",
            "-T",
            "scheduler",
            "python",
            "-c",
            "import json; from collections import Counter; from scheduler.journal import Journal;"
            "s = Journal('/data/journal.sqlite').load();"
            "print(json.dumps({'states': Counter(j.state.value for j in s.jobs),"
            " 'requeues': sum(j.requeues for j in s.jobs), 'jobs': len(s.jobs),"
            " 'not_finished': {j.spec.id: [j.state.value, j.requeues, j.detail]"
            " for j in s.jobs if j.state.value != 'finished'},"
            " 'will': s.totals.get("
            "('accordion_scheduler_agents_lost', (('reason', 'will'),)), 0)}))",
        ).stdout
    )
    assert demo.returncode == 0, (journal["not_finished"], out)
    assert "the live cluster against the twin" in out
    assert journal["states"] == {"finished": journal["jobs"]}, journal
    finished = float(journal["states"]["finished"])
    bed.wait_prometheus(
        'accordion_scheduler_jobs_finished_total{state="finished"}',
        lambda v: list(v.values()) == [finished],
    )
    assert list(bed.query("accordion_scheduler_requeues_total").values()) == [
        float(journal["requeues"])
    ]
    assert list(bed.query('accordion_scheduler_submissions_total{result="accepted"}').values()) == [
        float(journal["jobs"])
    ]
    # The agent lost before the scheduler's restart is still counted after it.
    assert journal["will"] >= 1, journal
    bed.wait_prometheus(
        'accordion_scheduler_agents_lost_total{reason="will"}',
        lambda v: list(v.values()) == [float(journal["will"])],
    )
    # Every agent container that ran was scraped at least once.
    scraped = {
        json.loads(k)["instance"]
        for k, v in bed.query('max_over_time(up{job="agents"}[1h])').items()
        if v == 1.0
    }
    missing = set(bed.agents.values()) - scraped
    assert not missing, (missing, scraped)
    print(f"testbed: up {bed.up_seconds:.1f} s; {len(bed.agents)} agent containers scraped")
