"""``accordion up``: a live cluster on this machine, from a cluster file.

Theory of operation
-------------------
One process per actor, as in a real deployment: a broker, ``python -m
scheduler`` and one ``python -m nodeagent`` per machine of the cluster file
(the TOML file the twin reads), all on loopback. The broker is Mosquitto when
it is installed (a generated configuration: one loopback listener on a free
port, ``set_tcp_nodelay true``, ``max_queued_messages 0``, ``persistence
false``), else the embedded broker (``python -m broker.embedded``, amqtt),
which speaks only MQTT 3.1.1. That is enough: the protocol carries its
correlation ids and reply addresses in the payloads, not in MQTT 5 properties.

:class:`LocalCluster` starts them in that order and is ready once the
scheduler's ``StatusReply`` lists every machine online and every metrics
endpoint answers. Each child runs in a session (process group) of its own, so
the terminal's Ctrl-C reaches only ``accordion up``, which then stops the
cluster in order: the agents first (each ends its job processes and says
goodbye), then the scheduler (it finishes its batch and closes its journal),
then the broker. Each gets SIGTERM, SIGKILL after a grace, and anything left
in its process group (job processes of an agent that had to be killed) is
killed too. On Linux each child also gets SIGTERM when ``accordion up``
itself dies (``PR_SET_PDEATHSIG``), so even a SIGKILLed ``accordion up``
leaves nothing running. The run directory holds the journal, the broker's
configuration and one log per process.

The demo (:func:`plan_demo`, :func:`run_demo`, :func:`report_demo`):

1. a seeded synthetic workload sized for the cluster (``workload.synthetic``)
   is replayed in the twin first, and the time scale K is chosen from the
   twin's makespan so that the live run takes about the wanted wall time;
2. the same jobs go through the live cluster with the code of ``accordion
   replay`` (``accordion.live``), with a progress display;
3. once the cluster has stopped, each job's outcome (start, end, parts and
   resizes) is read back from the scheduler's journal and the metrics are
   computed by ``model.metrics.compute_metrics``, as the twin computes its
   own. Live times are cluster seconds (= wall seconds x K) since the
   scheduler started; the twin's are the trace's virtual seconds. Both count
   in the trace's seconds, so waits, responses and slowdowns compare directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self

from prometheus_client.parser import text_string_to_metric_families

from accordion.live import (
    Arrival,
    Changed,
    LiveClient,
    NoReplyError,
    ReplayState,
    arrivals,
    connect,
    replay_and_follow,
)
from broker.local import accepts, free_port, mosquitto_binary, mosquitto_config
from broker.messages import StatusReply
from broker.topics import DEFAULT_ROOT
from model.execution import DEFAULT_MODEL
from model.job import Job
from model.machine import Machine, Part
from model.metrics import ScheduleMetrics, compute_metrics
from model.outcome import JobOutcome, Segment
from scheduler.actor import job_from_spec
from scheduler.journal import Journal
from scheduler.lifecycle import JobState
from scheduler.placement import PlacementRule
from scheduler.policies.registry import build_policy, policy_info
from twin.report import TIME_BASE as TWIN_TIME_BASE
from twin.report import DecisionTimes, decision_times
from twin.simulate import simulate
from workload.cluster import ClusterSpec
from workload.swf_rules import SwfRules, iter_jobs
from workload.synthetic import SyntheticSpec, generate

BrokerKind = Literal["auto", "mosquitto", "embedded"]

HOST: Final = "127.0.0.1"
REPO: Final = Path(__file__).resolve().parents[1]
DEFAULT_CLUSTER: Final = REPO / "examples" / "cluster.toml"

#: Wall seconds each kind of process gets between SIGTERM and SIGKILL. An agent
#: first ends its job processes (their own grace is 5 s), then says goodbye.
STOP_GRACE: Final = {"agent": 10.0, "scheduler": 10.0, "broker": 5.0}


class UpError(RuntimeError):
    """The local cluster could not be started or stopped working (names the log)."""


def resolve_broker(kind: BrokerKind) -> Literal["mosquitto", "embedded"]:
    """Which broker ``kind`` means here: ``auto`` is Mosquitto when it is installed."""
    if kind == "embedded":
        return "embedded"
    if mosquitto_binary() is not None:
        return "mosquitto"
    if kind == "mosquitto":
        raise ValueError("mosquitto is not installed (apt-get install mosquitto)")
    return "embedded"


def _client_suffix(root: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", root)


# -- children -------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_libc_name = ctypes.util.find_library("c") if sys.platform == "linux" else None
# Loaded here, in the parent: the child only calls it between fork and exec.
_libc = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM meanwhile (main thread only): a second Ctrl-C must
    not cut an ordered stop short, which is bounded by the graces anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@dataclass(slots=True)
class _Child:
    role: str
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    address: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def finish(self, grace: float) -> None:
        """Wait for the child after ``terminate``; SIGKILL its group after ``grace`` s."""
        pgid = self.process.pid  # start_new_session: the child leads its own group
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        # Members left in the group (job processes of a killed agent) keep the group
        # id theirs, so it cannot name anyone else's processes while the check succeeds.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, 0)
            os.killpg(pgid, signal.SIGKILL)

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def died(self) -> UpError:
        code = self.process.poll()
        return UpError(
            f"{self.role} {self.name} exited with code {code} (log {self.log}): {self.tail()}"
        )


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One process of the cluster and where to reach it."""

    role: str
    name: str
    address: str
    pid: int
    log: Path


class LocalCluster:
    """Broker, scheduler and agents as local processes (see the module docstring).

    ``with LocalCluster(...) as cluster`` starts them and stops them in order
    on exit, also on an exception or Ctrl-C. ``broker_url`` uses a running
    broker instead of starting one (tests, a shared broker);
    ``start_agents=False`` leaves the machines to agents started elsewhere
    (the benchmarks host hundreds in one process).
    """

    def __init__(
        self,
        spec: ClusterSpec,
        run_dir: Path,
        *,
        policy: str = "easy",
        placement: PlacementRule = PlacementRule.FASTEST,
        time_scale: float = 1.0,
        broker: BrokerKind = "auto",
        broker_port: int = 0,
        broker_url: str | None = None,
        root: str = DEFAULT_ROOT,
        heartbeat: float = 2.0,
        walltime_grace: float = 5.0,
        start_agents: bool = True,
        python: str = sys.executable,
    ) -> None:
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ValueError(f"time scale must be > 0, got {time_scale!r}")
        if not 0 <= broker_port < 65536:
            raise ValueError(f"broker port {broker_port} is not in 0..65535")
        build_policy(policy, placement=placement)  # a bad name fails before anything starts
        self.spec = spec
        self.run_dir = run_dir
        self.policy = policy
        self.placement = placement
        self.time_scale = time_scale
        self.broker_kind: Literal["mosquitto", "embedded", "external"] = (
            "external" if broker_url is not None else resolve_broker(broker)
        )
        self.broker_port = broker_port
        self.broker_url = broker_url or ""
        self.root = root
        self.heartbeat = heartbeat
        self.walltime_grace = walltime_grace
        self.start_agents = start_agents
        self.python = python
        self.journal = run_dir / "journal.sqlite"
        self.scheduler_metrics = ""
        self.agent_metrics: dict[str, str] = {}
        self._broker: _Child | None = None
        self._scheduler: _Child | None = None
        self._agents: list[_Child] = []
        env = dict(os.environ)
        # The children import the checkout's packages whatever the working directory.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self._env = env

    # -- life ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start broker, scheduler and agents (not yet waiting for them: see :meth:`ready`)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.broker_kind != "external":
            self._start_broker()
        self._start_scheduler()
        if self.start_agents:
            for machine in self.spec.machines:
                self._start_agent(machine)

    def stop(self) -> None:
        """Agents, then the scheduler, then the broker; idempotent."""
        waves = [self._agents, [c for c in (self._scheduler,) if c is not None]]
        waves.append([c for c in (self._broker,) if c is not None])
        with _signals_held():
            for wave in waves:
                for child in wave:
                    child.terminate()
                for child in wave:
                    child.finish(STOP_GRACE[child.role])

    @property
    def scheduler_pid(self) -> int | None:
        return None if self._scheduler is None else self._scheduler.pid

    def children(self) -> list[_Child]:
        return [c for c in (self._broker, self._scheduler, *self._agents) if c is not None]

    def check(self) -> None:
        """Raise :class:`UpError` if a process of the cluster has exited."""
        for child in self.children():
            if not child.alive():
                raise child.died()

    def endpoints(self) -> list[Endpoint]:
        return [Endpoint(c.role, c.name, c.address, c.pid, c.log) for c in self.children()]

    def _spawn(
        self, role: str, name: str, argv: Sequence[str], *, stdin: int | None = None
    ) -> _Child:
        log = self.run_dir / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                env=self._env,
                # Our own group: the terminal's Ctrl-C is ours to turn into an ordered stop.
                start_new_session=True,
                # Only prctl runs between fork and exec, on a libc loaded beforehand.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        return _Child(role, name, process, log)

    def _start_broker(self, attempts: int = 3) -> None:
        for attempt in range(attempts):
            port = self.broker_port or free_port()
            if self.broker_kind == "mosquitto":
                binary = mosquitto_binary()
                if binary is None:
                    raise UpError("mosquitto is not installed")
                conf = self.run_dir / "mosquitto.conf"
                conf.write_text(
                    "# Generated by accordion up.\n" + mosquitto_config(host=HOST, port=port)
                )
                child = self._spawn("broker", "mosquitto", [binary, "-c", str(conf)])
            else:
                argv = [self.python, "-m", "broker.embedded", "--host", HOST, "--port", str(port)]
                # Its stdin is a pipe we hold: the broker also ends when we are gone.
                argv.append("--exit-on-stdin-eof")
                child = self._spawn("broker", "amqtt", argv, stdin=subprocess.PIPE)
            child.address = f"mqtt://{HOST}:{port}"
            deadline = time.monotonic() + 15.0
            while child.alive() and not accepts(HOST, port):
                if time.monotonic() > deadline:
                    child.terminate()
                    child.finish(STOP_GRACE["broker"])
                    raise UpError(f"the {child.name} broker did not listen on port {port} in 15 s")
                time.sleep(0.02)
            if child.alive():
                self._broker = child
                self.broker_url = child.address
                return
            child.finish(0)
            if self.broker_port or attempt + 1 == attempts:
                raise child.died()  # most likely the port was taken

    def _broker_host_port(self) -> tuple[str, int]:
        rest = self.broker_url.removeprefix("mqtt://")
        host, _, port = rest.rpartition(":")
        return host.strip("[]"), int(port)

    def _start_scheduler(self) -> None:
        host, port = self._broker_host_port()
        metrics = free_port()
        argv = [
            self.python,
            "-m",
            "scheduler",
            f"--host={host}",
            f"--port={port}",
            f"--root={self.root}",
            # One scheduler per root on a broker; restarts of this cluster keep the session.
            f"--client-id=accordion-scheduler-{_client_suffix(self.root)}",
            f"--policy={self.policy}",
            f"--placement={self.placement.value}",
            f"--journal={self.journal}",
            f"--metrics-port={metrics}",
            f"--metrics-addr={HOST}",
            f"--time-scale={self.time_scale!r}",
            f"--heartbeat-interval={self.heartbeat!r}",
        ]
        child = self._spawn("scheduler", "scheduler", argv)
        self.scheduler_metrics = child.address = f"http://{HOST}:{metrics}/metrics"
        self._scheduler = child

    def _start_agent(self, machine: Machine) -> None:
        host, port = self._broker_host_port()
        metrics = free_port()
        argv = [
            self.python,
            "-m",
            "nodeagent",
            f"--host={host}",
            f"--port={port}",
            f"--name={machine.id}",
            f"--cpus={machine.cpus}",
            f"--speed={machine.speed!r}",
            f"--root={self.root}",
            # The agent refuses parts of another compression: a misconfigured
            # scheduler fails loudly instead of running jobs at the wrong speed.
            f"--time-scale={self.time_scale!r}",
            f"--metrics-port={metrics}",
            f"--metrics-addr={HOST}",
            f"--heartbeat={self.heartbeat!r}",
            # Wall seconds past a part's wall-time limit before it is killed: more than
            # the agent's 2 s default, since on a small machine a burst of job processes
            # starting together can take seconds to get going.
            f"--walltime-grace={self.walltime_grace!r}",
        ]
        if machine.labels:
            argv.append(f"--labels={','.join(machine.labels)}")
        child = self._spawn("agent", f"agent-{machine.id}", argv)
        self.agent_metrics[machine.id] = child.address = f"http://{HOST}:{metrics}/metrics"
        self._agents.append(child)

    # -- readiness -------------------------------------------------------------------

    async def ready(self, client: LiveClient, *, timeout: float = 60.0) -> StatusReply:
        """Wait until every machine is online and every metrics endpoint answers."""
        wanted = {m.id for m in self.spec.machines}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        missing: set[str] = set(wanted)
        status: StatusReply | None = None
        # Short at first: a request sent before the scheduler subscribed is lost. Longer
        # after each miss: a scheduler busy registering thousands of agents answers
        # late, and asking again meanwhile only adds to its work.
        wait = 1.0
        while loop.time() < deadline:
            self.check()
            try:
                status = await client.status(timeout=wait)
            except NoReplyError:
                wait = min(2 * wait, 8.0)
                continue
            missing = wanted - {m.id for m in status.machines if m.online}
            if not missing:
                break
            await asyncio.sleep(0.1)
        if status is None or missing:
            self.check()
            some = ", ".join(sorted(missing)[:5]) + (", ..." if len(missing) > 5 else "")
            what = (
                "the scheduler did not answer"
                if status is None
                else f"{len(missing)} of {len(wanted)} machines offline: {some}"
            )
            raise UpError(
                f"the cluster was not up in {timeout:g} s ({what}); logs in {self.run_dir}"
            )
        down = [self.scheduler_metrics, *self.agent_metrics.values()]
        while True:
            # In threads (urllib blocks), all at once: hundreds of agents take no longer.
            async with asyncio.TaskGroup() as tg:
                probes = {
                    url: tg.create_task(asyncio.to_thread(_get_ok, url), name=f"probe-{url}")
                    for url in down
                }
            down = [url for url, probe in probes.items() if not probe.result()]
            if not down:
                return status
            if loop.time() > deadline:
                raise UpError(f"metrics endpoints not answering: {', '.join(down)}")
            self.check()
            await asyncio.sleep(0.1)


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def scrape(url: str, *, timeout: float = 5.0) -> str:
    """The Prometheus text an endpoint serves."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text: bytes = response.read()
    return text.decode()


# -- the demo ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoPlan:
    """The demo's jobs, the twin's run of them, and the time scale chosen from it."""

    jobs: list[Job]
    arrivals: list[Arrival]
    prefix: str
    time_scale: float
    twin: ScheduleMetrics
    twin_decisions: DecisionTimes
    policy: str
    placement: PlacementRule


def nice_scale(value: float) -> float:
    """``value`` rounded to two significant digits, at least 1 (K = 118.7 -> 120)."""
    if value <= 1:
        return 1.0
    digits = 1 - math.floor(math.log10(value))
    return float(round(value, digits))


def demo_jobs(spec: ClusterSpec, *, jobs: int, seed: int, single_machine: bool) -> list[Job]:
    """A seeded synthetic workload sized for the cluster (``workload.synthetic``).

    Offered load 1.0 of the whole cluster, so that jobs queue; widths up to
    half the cluster; run times between 4 and 16 minutes at the reference
    speed. The shape is chosen for a live run on a small machine: with the
    time scale picked for a demo of 30-60 s, the shortest job still runs for
    about 2 s of wall time, longer than its job process takes to start (its
    work counts from the agent's start, so a shorter start-up costs nothing),
    and no job drains the whole cluster, which would start a burst of job
    processes at one instant when it ends.
    """
    width = 1 << (max(1, spec.total_cpus // 2).bit_length() - 1)
    synthetic = SyntheticSpec(
        jobs=jobs,
        cpus=width,  # widths are powers of two up to this
        load=min(10.0, 1.0 * spec.total_cpus / width),  # the generator's load is per `cpus`
        min_runtime=240.0,
        max_runtime=960.0,
        users=6,
        seed=seed,
    )
    rules = SwfRules(ref_speed=spec.reference_speed)
    loaded = list(iter_jobs(generate(synthetic), rules, total_cpus=spec.total_cpus))
    if single_machine:
        # Policies that place a job on one machine need every job to fit the widest.
        widest = max(m.cpus for m in spec.machines)
        loaded = [j if j.procs <= widest else replace(j, procs=widest) for j in loaded]
    return loaded


def plan_demo(
    spec: ClusterSpec,
    *,
    jobs: int = 60,
    seconds: float = 40.0,
    seed: int = 1,
    policy: str = "easy",
    placement: PlacementRule = PlacementRule.FASTEST,
    time_scale: float | None = None,
    prefix: str = "demo-",
) -> DemoPlan:
    """Generate the demo's jobs, run them in the twin, pick K for ``seconds`` of wall time."""
    single = policy_info(policy).single_machine or placement is PlacementRule.SINGLE
    workload = demo_jobs(spec, jobs=jobs, seed=seed, single_machine=single)
    result = simulate(
        workload,
        machines=spec.machines,
        policy=build_policy(policy, placement=placement),
        execution=DEFAULT_MODEL,
    )
    twin = compute_metrics(result.outcomes, total_cpus=result.total_cpus, time_base=TWIN_TIME_BASE)
    scale = time_scale if time_scale is not None else nice_scale(twin.makespan / seconds)
    return DemoPlan(
        jobs=workload,
        arrivals=arrivals(workload, prefix=prefix),
        prefix=prefix,
        time_scale=scale,
        twin=twin,
        twin_decisions=decision_times(result),
        policy=policy,
        placement=placement,
    )


@dataclass(frozen=True, slots=True)
class DecisionStats:
    """The scheduler's decision times, from its Prometheus histogram (wall ms)."""

    count: int
    mean_ms: float
    #: The upper bound of the histogram bucket holding the 99th percentile.
    p99_ms_at_most: float


def decision_stats(text: str) -> DecisionStats:
    """Read ``accordion_scheduler_decision_seconds`` from a scrape."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "accordion_scheduler_decision_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    if not count:
        return DecisionStats(0, 0.0, 0.0)
    buckets.sort()
    p99 = next((le for le, n in buckets if n >= 0.99 * count), math.inf)
    return DecisionStats(int(count), 1000 * total / count, 1000 * p99)


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveRun:
    """What the live part of the demo saw from the client's side."""

    state: ReplayState
    wall_seconds: float
    decisions: DecisionStats


async def run_demo(
    cluster: LocalCluster,
    plan: DemoPlan,
    *,
    on_change: Changed | None = None,
    timeout: float | None = None,
) -> LiveRun:
    """Replay the plan on the running cluster and wait until every job has ended."""
    t0 = time.monotonic()
    async with connect(cluster.broker_url, cluster.root, watch=True) as client:
        async with asyncio.timeout(timeout):
            state = await replay_and_follow(
                client, plan.arrivals, time_scale=plan.time_scale, on_change=on_change
            )
    wall = time.monotonic() - t0
    text = await asyncio.to_thread(scrape, cluster.scheduler_metrics)
    return LiveRun(state=state, wall_seconds=wall, decisions=decision_stats(text))


# -- outcomes from the journal ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalOutcomes:
    """Finished and failed jobs as outcomes, and how many jobs ended in each state."""

    outcomes: list[JobOutcome]
    states: Counter[str]
    time_scale: float


def _parts(text: str | None) -> tuple[Part, ...]:
    if not text:
        return ()
    return tuple(Part(str(m), int(c)) for m, c in json.loads(text))


def _history(path: Path) -> dict[str, list[tuple[float, str, str | None]]]:
    """The journal's ``events`` table by job: ``(at, kind, detail)`` in order.

    Read directly: ``Journal`` keeps this audit history but offers no reader
    for it, and only the history has a resized job's segments.
    """
    history: dict[str, list[tuple[float, str, str | None]]] = {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT at, job_id, kind, detail FROM events ORDER BY seq")
        for at, job_id, kind, detail in rows:
            history.setdefault(str(job_id), []).append((float(at), str(kind), detail))
    return history


def outcomes_from_journal(path: Path, speeds: Mapping[str, float]) -> JournalOutcomes:
    """Each finished or failed job of a stopped scheduler's journal as a ``JobOutcome``.

    Start, end and parts come from the job's row; its segments (one per
    resize) from the journal's history since its last start (a requeued job
    starts again). ``expanded_runtime`` is the job's work at its first
    allocation's pace at MPL 1, as the twin reports it.
    """
    with Journal(path) as journal:
        state = journal.load()
    if state.meta is None:
        raise UpError(f"{path}: the scheduler wrote no journal meta")
    history = _history(path)
    states: Counter[str] = Counter(row.state.value for row in state.jobs)
    outcomes: list[JobOutcome] = []
    for row in state.jobs:
        if row.state not in (JobState.FINISHED, JobState.FAILED) or row.start is None:
            continue
        if row.end is None:
            raise UpError(f"{path}: job {row.spec.id!r} ended without an end time")
        steps: list[tuple[float, tuple[Part, ...]]] = []
        for at, kind, detail in history.get(row.spec.id, []):
            if kind == "started":
                steps = [(at, _parts(detail))]
            elif kind == "resized" and steps:
                steps.append((at, _parts(detail)))
        if not steps:
            steps = [(row.start, row.parts)]
        ends = [at for at, _ in steps[1:]] + [row.end]
        segments = tuple(
            Segment(at, end, sum(p.cpus for p in parts))
            for (at, parts), end in zip(steps, ends, strict=True)
            if end > at
        )
        if not segments:  # a job that ended the instant it started (or was resized)
            segments = (Segment(row.start, row.end, sum(p.cpus for p in steps[-1][1])),)
        first = steps[0][1] or row.parts
        pace = min(speeds[p.machine] for p in first)
        spec = row.spec
        outcomes.append(
            JobOutcome(
                job=job_from_spec(spec, row.submit),
                start=row.start,
                end=row.end,
                parts=first,
                segments=segments,
                expanded_runtime=spec.work * spec.ref_speed / pace,
                failed=row.state is JobState.FAILED,
            )
        )
    return JournalOutcomes(outcomes, states, state.meta.time_scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoReport:
    """Live metrics next to the twin's, for the same jobs."""

    jobs: int
    time_scale: float
    wall_seconds: float
    live: ScheduleMetrics
    twin: ScheduleMetrics
    live_decisions: DecisionStats
    twin_decisions: DecisionTimes
    states: Counter[str]
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every job accepted and finished (none failed, lost or left running)."""
        return not self.rejected and self.states == Counter({"finished": self.jobs})


def live_time_base(time_scale: float) -> str:
    return f"cluster seconds (= wall seconds x {time_scale:g})"


def report_demo(cluster: LocalCluster, plan: DemoPlan, run: LiveRun) -> DemoReport:
    """Metrics of what really happened (the stopped scheduler's journal) and the twin's."""
    read = outcomes_from_journal(cluster.journal, cluster.spec.speeds)
    if not read.outcomes:
        raise UpError(f"no demo job ran to its end (journal {cluster.journal})")
    live = compute_metrics(
        read.outcomes,
        total_cpus=cluster.spec.total_cpus,
        time_base=live_time_base(read.time_scale),
    )
    return DemoReport(
        jobs=len(plan.jobs),
        time_scale=read.time_scale,
        wall_seconds=run.wall_seconds,
        live=live,
        twin=plan.twin,
        live_decisions=run.decisions,
        twin_decisions=plan.twin_decisions,
        states=read.states,
        rejected=dict(run.state.rejected),
    )


def difference(live: float, twin: float) -> float | None:
    """``(live - twin) / twin``; None when the twin's value is 0."""
    if twin == 0:
        return None
    return (live - twin) / abs(twin)
