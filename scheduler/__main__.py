"""``python -m scheduler``: the live scheduler on an MQTT broker.

Theory of operation. The edge of the program: parse the options, build the
policy, open the journal (its stored epoch and time scale win, so a restart
goes on in the same cluster time), start the metrics endpoint on an injected
registry, connect to the broker and run the :class:`~scheduler.runtime.actor.SchedulerActor`
until SIGINT or SIGTERM, which stop it cleanly (the current batch is
finished, the last ClusterSummary published, the journal closed). uvloop is
used when it can be imported.

Policy parameters: ``--policy-opt KEY=VALUE`` sets a field of the policy
(``scheduler.policies.registry``); the policy is given ``time.monotonic`` as
its clock, so DPSA's ``time_budget`` bounds each search in wall seconds here,
while the twin counts node expansions.

Times: ``--time-scale K`` compresses time (cluster seconds = wall seconds x
K); ``--heartbeat-interval`` and ``--reconcile-grace`` are wall seconds.

A shared cluster: ``--limits FILE`` (``scheduler.live.limits``) and
``--associations FILE`` (``scheduler.live.associations``) are read and checked
here, once; ``--max-queued-per-user`` and the other limit options override the
file's values. A file that cannot be read or a value that cannot be is one
line on the log and exit status 2.

The journal. One that cannot be used (read-only, damaged, of another time
scale or a newer schema) is refused at start in one line that says what to
do, exit status 2. One on a full disk (SQLite needs room for its ``-wal``
and ``-shm`` files even to read) is waited for: one line says so, and the
scheduler starts once there is room, rather than exiting for a supervisor to
restart it into the same wall. A disk that fills while the scheduler runs
is ``scheduler.runtime.journal_writer``'s. ``--archive-after`` (default 1h)
moves ended jobs to the journal's archive file beside it
(``scheduler.runtime.journal_archive``); ``never`` keeps them in the journal.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from broker.bus import BusError
from broker.topics import DEFAULT_ROOT, TopicError, Topics
from model.execution import ExecutionModel, ModelKind
from scheduler.core.snapshot import Policy
from scheduler.live.limits import DEFAULTS, KEYS
from scheduler.live.settings import DEFAULT_MAX_WALLTIME
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import (
    UnknownPolicyError,
    build_policy_with,
    parse_policy_opts,
)
from scheduler.runtime.actor import ActorSettings, SchedulerActor
from scheduler.runtime.admin_files import read_associations, read_limits
from scheduler.runtime.clock import WallClock
from scheduler.runtime.exporter import SchedulerMetrics, serve
from scheduler.runtime.journal import Journal, JournalError, Synchronous
from scheduler.runtime.journal_archive import parse_after

log = logging.getLogger("scheduler")

MAX_TIME_SCALE = 1e6
"""The wire's bound on ``StartPart.time_scale``."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scheduler", description="The accordion live scheduler (MQTT)."
    )
    p.add_argument("--host", default="localhost", help="MQTT broker host")
    p.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    p.add_argument("--root", default=DEFAULT_ROOT, help="topic root (default %(default)s)")
    p.add_argument("--client-id", default="accordion-scheduler", help="MQTT client id")
    p.add_argument("--policy", default="easy", help="POLICY[:PRIORITY], e.g. easy:fairshare")
    p.add_argument(
        "--policy-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a policy parameter (repeatable; `accordion policies --verbose` lists them); "
        "DPSA's time_budget=SECONDS bounds its search on the wall clock (time.monotonic)",
    )
    p.add_argument(
        "--placement",
        default=PlacementRule.FASTEST.value,
        choices=[r.value for r in PlacementRule],
        help="how a job is placed on machines",
    )
    p.add_argument("--journal", default="scheduler-journal.sqlite", help="SQLite journal path")
    p.add_argument(
        "--synchronous",
        default="FULL",
        choices=["FULL", "NORMAL"],
        help="journal durability: FULL survives power loss, NORMAL only a killed process",
    )
    p.add_argument(
        "--archive-after",
        default="1h",
        help="move ended jobs and their events to the journal's archive (JOURNAL-archive) "
        "this long (wall time: 90s, 30m, 1h, 7d; 0: at once) after they end, or never",
    )
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus text here")
    p.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        help="address of the metrics endpoint (0.0.0.0 to serve other hosts)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="K: cluster seconds per wall second (default: the journal's, else 1)",
    )
    p.add_argument("--heartbeat-interval", type=float, default=2.0, help="agents' period, wall s")
    p.add_argument(
        "--reconcile-grace", type=float, default=10.0, help="restart grace for agents, wall s"
    )
    p.add_argument("--max-requeues", type=int, default=2, help="requeues before a lost job fails")
    p.add_argument(
        "--execution-model",
        default="linear",
        choices=[k.value for k in ModelKind],
        help="how a shrunk job progresses (model/execution.py), as the twin's option",
    )
    p.add_argument("--overhead", type=float, default=0.0, help="formula (4)'s OV (linear, max)")
    p.add_argument("--model-seed", type=int, default=0, help="seeds the paper model's OV_j")
    p.add_argument(
        "--silence-factor",
        type=float,
        default=6.0,
        help="heartbeat periods of silence before an agent is lost (keep the agents' "
        "lease below it; default %(default)s)",
    )
    p.add_argument(
        "--startup-grace",
        type=float,
        default=3.0,
        help="wall s a started scheduler holds submissions back while agents re-register",
    )
    p.add_argument(
        "--max-walltime",
        type=float,
        default=DEFAULT_MAX_WALLTIME,
        help="longest wall time or work a job may ask for, cluster s (default 365 days)",
    )
    p.add_argument(
        "--job-events",
        default="lifecycle",
        choices=["all", "lifecycle", "none"],
        help="JobEvents for watchers: all, all but 'queued' (fast bulk submission), none",
    )
    p.add_argument(
        "--predict-interval",
        type=float,
        default=1.0,
        help="least wall s between two passes predicting every queued job's start and "
        "reason (status shows the last); 0: no predictions",
    )
    p.add_argument(
        "--limits",
        type=Path,
        default=None,
        metavar="FILE",
        help="per-user and per-request limits (TOML, a [limits] table; see "
        "scheduler/live/limits.py); the options below override its values",
    )
    for key in KEYS:
        default = getattr(DEFAULTS, key)
        shown = "no limit" if default is None else f"{default:,}"
        p.add_argument(
            f"--{key.replace('_', '-')}",
            type=int,
            default=None,
            metavar="N",
            help=f"{_LIMIT_HELP[key]} (default: the limits file's, else {shown})",
        )
    p.add_argument(
        "--associations",
        type=Path,
        default=None,
        metavar="FILE",
        help="the accounts each user may charge and the highest QoS they may ask for "
        "(TOML; see scheduler/live/associations.py); default: nothing is checked",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING...")
    args = p.parse_args(argv)
    if args.time_scale is not None and not 0 < args.time_scale <= MAX_TIME_SCALE:
        p.error(f"--time-scale must be in (0, {MAX_TIME_SCALE:g}]")
    return args


_LIMIT_HELP = {
    "max_queued_per_user": "jobs one user may have queued",
    "max_jobs_per_request": "jobs one submission may carry",
    "max_user_cpus": "CPUs one user's running jobs may hold together (more waits)",
    "max_request_bytes": "the largest request, bytes (at most the broker's 16 MiB)",
}


def policy_from_args(args: argparse.Namespace) -> Policy:
    """The policy of ``--policy``, ``--placement`` and ``--policy-opt``.

    Given the live run's clock (``time.monotonic``), which a seconds budget
    (DPSA's ``time_budget``) reads.
    """
    return build_policy_with(
        args.policy,
        parse_policy_opts(args.policy_opt),
        placement=PlacementRule(args.placement),
        clock=time.monotonic,
    )


async def serve_scheduler(args: argparse.Namespace) -> int:
    """Run until SIGINT/SIGTERM; returns the exit status."""
    # Imported here: the MQTT transport is written beside this module and is the
    # only part of the program that needs aiomqtt (PLC0415 is deliberate).
    from broker.mqtt import MqttBus, MqttSettings  # noqa: PLC0415

    try:
        policy = policy_from_args(args)
        topics = Topics(args.root)
        # Credentials, if any, come from the environment (ACCORDION_MQTT_*), never argv.
        mqtt = MqttSettings(host=args.host, port=args.port).with_env()
        execution = ExecutionModel(
            kind=ModelKind(args.execution_model), overhead=args.overhead, seed=args.model_seed
        )
        settings = ActorSettings(
            heartbeat_interval=args.heartbeat_interval,
            reconcile_grace=args.reconcile_grace,
            max_requeues=args.max_requeues,
            silence_factor=args.silence_factor,
            startup_grace=args.startup_grace,
            max_walltime=args.max_walltime,
            job_events=args.job_events,
            predict_interval=args.predict_interval,
            archive_after=parse_after(args.archive_after),
            # Logged in: the broker's ACLs let each user read only their own topics.
            owner_events=mqtt.username is not None,
            limits=read_limits(args.limits, **{k: getattr(args, k) for k in KEYS}),
            associations=read_associations(args.associations),
        )
    except (UnknownPolicyError, TopicError, ValueError) as exc:  # ArchiveError is one
        log.error("%s", exc)
        return 2
    # Archiving never, a journal that archived before is still read with its archive.
    archive = True if settings.archive_after is not None else None
    journal = await open_journal(args.journal, args.synchronous, archive=archive)
    if journal is None:
        return 2
    with journal:
        stored = journal.meta()
        scale = args.time_scale
        if scale is None:
            scale = stored.time_scale if stored is not None else 1.0
        try:
            meta = journal.ensure_meta(epoch=time.time(), time_scale=scale, policy=policy.name)
        except JournalError as exc:
            log.error("%s", exc)
            return 2
        if stored is None:
            # A first start: no submission can have queued at the broker for this
            # scheduler, so there is nothing to hold back while agents register.
            settings = replace(settings, startup_grace=0.0)
        clock = WallClock(time_scale=meta.time_scale, epoch=meta.epoch)
        registry = CollectorRegistry()
        metrics = SchedulerMetrics(registry, process=True)
        server = (
            serve(registry, args.metrics_port, args.metrics_addr) if args.metrics_port else None
        )
        if server is not None:
            log.info("metrics on http://%s:%d/metrics", args.metrics_addr, server.port)
        # A persistent session: the broker queues the agents' QoS 1 events while the
        # scheduler restarts, and the journal reconciles with them.
        actors: list[SchedulerActor] = []

        async def reconnected() -> None:
            for actor in actors:
                await actor.connected()

        bus = MqttBus(mqtt, args.client_id, clean_session=False, on_reconnect=reconnected)
        actor = SchedulerActor(
            bus,
            topics,
            policy=policy,
            journal=journal,
            clock=clock,
            settings=settings,
            metrics=metrics,
            link=bus,
            execution=execution,
        )
        actors.append(actor)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, actor.stop)
        log.info(
            "scheduler for %s, root %s, policy %s%s, journal %s, time scale %g "
            "(cluster seconds = wall seconds x %g)",
            mqtt.url,
            topics.root,
            policy.name,
            "".join(f" {text}" for text in args.policy_opt),
            args.journal,
            clock.time_scale,
            clock.time_scale,
        )
        limits = settings.limits
        log.info(
            "limits: %s; associations: %s",
            ", ".join(f"{k} {getattr(limits, k)}" for k in KEYS),
            args.associations or "none (accounts and QoS are not checked)",
        )
        status = 0
        try:
            async with bus:
                await actor.run()
        except* BusError as group:
            # The transport is gone: exit non-zero so a supervisor restarts us; the
            # journal has everything, and the restart reconciles with the agents.
            for err in group.exceptions:
                log.error("%s", err)
            status = 1
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            if server is not None:
                server.close()
    log.info("scheduler stopped" if status == 0 else "scheduler lost its broker")
    return status


#: Free bytes below which the journal's filesystem counts as full.
FULL_BELOW = 1 << 20
#: Wall seconds between two tries to open a journal on a full disk.
FULL_RETRY = 1.0


async def open_journal(
    path: str, synchronous: Synchronous, *, archive: bool | None = None
) -> Journal | None:
    """The journal, checked, its archive attached as ``Journal`` says of ``archive``;
    None (after one line saying why and what to do) if it cannot be used. A full
    disk is waited out (the module docstring)."""
    waiting = False
    while True:
        try:
            journal = Journal(path, synchronous=synchronous, check=True, archive=archive)
        except (JournalError, OSError) as exc:
            free = _free_bytes(path)
            if free is None or free >= FULL_BELOW:
                log.error("%s", exc)
                return None
            if not waiting:
                waiting = True
                log.error(
                    "%s; its filesystem has %d bytes free: waiting for space (every %g s)",
                    exc,
                    free,
                    FULL_RETRY,
                )
            await asyncio.sleep(FULL_RETRY)
            continue
        if waiting:
            log.warning("the journal %s opened: there is room again", path)
        return journal


def _free_bytes(path: str) -> int | None:
    """Bytes free to this user on the filesystem of ``path`` (None: no such place)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        import uvloop  # noqa: PLC0415 (optional: plain asyncio without it)
    except ImportError:
        return asyncio.run(serve_scheduler(args))
    return uvloop.run(serve_scheduler(args))


if __name__ == "__main__":
    sys.exit(main())
