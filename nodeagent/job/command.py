"""A command part's job process: the supervisor of a user's command.

Theory of operation. A command job's part is the same job process as any
other (``python -m nodeagent.job``, forked by the agent's warm launcher, its
bus relayed by its agent): cancel, resize, the lease, adoption and the
relay work for it as they do for the sleep workload, whose actor
(:class:`nodeagent.job.sleep_job.SleepJob`) it extends. What it runs is its
plan (``nodeagent.launch.command_plan``, written by its agent):

- the job's first part (``batch``) forks the user's command
  (``nodeagent.job.command_child``) before its event loop starts, and is the
  subreaper of everything the command leaves behind. It reports once (its
  readiness), then waits for the command's exit, a cancel (the agent's
  SIGTERM, for a cancel, the wall-time limit or the agent's shutdown), or its
  own loss (the lease lapsed, the agent gone for good);
- the other parts run nothing: they hold their CPUs until the scheduler ends
  them (an MPI launcher reaches them there).

How each ends (``nodeagent.launch.jobtree`` keeps the tree: a cgroup, or the
walk of the descendants):

- the command exits: what it left running (daemons included) is SIGKILLed
  at once, as Slurm ends a batch job's leftovers; exit :data:`EXIT_DONE` for
  status 0, else :data:`EXIT_COMMAND_FAILED`;
- a cancel: SIGTERM to every process of the tree, SIGKILL to all that are
  left ``term_grace`` seconds later (the agent's ``--kill-grace``; the agent
  waits a second more before it would SIGKILL the supervisor itself), then
  :data:`EXIT_CANCELLED`;
- its loss: SIGKILL to the tree at once, then :data:`EXIT_LOST` (a lapsed
  lease must end the part without delay: the job may be running elsewhere).

In each case the command's own end (its exit status, or the signal that
killed it, and for an MPI program the rank that ended first:
``nodeagent.job.rank_watch``) goes into the plan's status file, which the agent reads into
``PartFinished``; a command that could not be started (no such program, a
working directory or output file it may not use) says why in the part's
failure file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.bus import Bus, Delivery
from nodeagent.job.command_child import EXIT_CANNOT_RUN, CommandChild, spawn
from nodeagent.job.rank_watch import RankWatch
from nodeagent.job.sleep_job import JobSettings, SleepJob
from nodeagent.launch.command_plan import CommandPlan, CommandStatus, PlanError
from nodeagent.launch.contract import (
    EXIT_CANCELLED,
    EXIT_COMMAND_FAILED,
    EXIT_DONE,
    EXIT_LOST,
    Launch,
    LaunchError,
)
from nodeagent.launch.jobtree import CgroupTree, DescendantTree, JobTree

log = logging.getLogger(__name__)

POLL = 0.01
"""Wall seconds between two looks at a tree being ended (it empties within milliseconds)."""
RANK_LOOK = 0.02
"""Wall seconds between two looks for an MPI program's ranks until all are watched."""


def read_plan(launch: Launch) -> CommandPlan:
    """The part's plan; LaunchError if there is none that reads."""
    if launch.command_file is None:
        raise LaunchError(f"job {launch.job_id!r}: a command part without a plan")
    try:
        return CommandPlan.read(launch.command_file)
    except (OSError, PlanError) as exc:
        raise LaunchError(f"job {launch.job_id!r}: command plan: {exc}") from exc


class EarlyStop:
    """A SIGTERM or SIGINT that comes before the event loop's handlers, noted.

    The agent may end a part while its supervisor is still starting (a wall time
    shorter than an interpreter's start-up, a cancel at once). Killed by the signal,
    the supervisor would leave its command to the death signal and its status
    unsaid; noted here, the stop is a cancel as soon as the supervisor runs.
    """

    def __init__(self) -> None:
        self.asked = False
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._note)

    def _note(self, signum: int, frame: object) -> None:
        self.asked = True


@dataclass(frozen=True, slots=True)
class Prepared:
    """A command part before its loop: its plan, its command (None on a part that
    holds CPUs) and a stop asked meanwhile."""

    plan: CommandPlan
    child: CommandChild | None
    stop: EarlyStop


def start(plan: CommandPlan) -> Prepared:
    """Fork the command if this part runs it (before any event loop exists)."""
    stop = EarlyStop()  # before the fork: a TERM from now on is a cancel
    return Prepared(plan, spawn(plan) if plan.batch else None, stop)


class CommandJob(SleepJob):
    """The supervisor of one command part (module docstring)."""

    def __init__(
        self,
        launch: Launch,
        bus: Bus,
        plan: CommandPlan,
        child: CommandChild | None,
        *,
        settings: JobSettings | None = None,
        parent_pid: int | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(
            launch, bus, settings=settings, parent_pid=parent_pid, on_fenced=self._fenced
        )
        self.plan = plan
        self.child = child
        self._exit_fenced = on_fenced
        self.tree: JobTree = (
            CgroupTree(plan.cgroup) if plan.cgroup is not None else DescendantTree(os.getpid())
        )
        #: The command's waitpid status once reaped.
        self.status: int | None = None
        self._exited = asyncio.Event()
        self._ranks: RankWatch | None = None

    def _progress(self, now: float) -> float:
        # A command's progress is not known: its run ends at its exit, not at a count
        # of work (the agent measures it from the fork to the exit).
        return 0.0

    def _fenced(self) -> None:
        """The lease lapsed: the tree goes at once, then this process (no teardown)."""
        self._kill_tree_now()
        if self._exit_fenced is not None:
            self._exit_fenced()

    async def _work(self) -> int:
        self._changed = self._monotonic()
        await self._report()
        loop = asyncio.get_running_loop()
        child = self.child
        if child is not None:
            loop.add_reader(child.pidfd, self._reap)
            if self.plan.mpi_ranks:
                self._ranks = RankWatch(self.tree, self.plan.mpi_ranks, loop)
        try:
            while not (child is not None and self._exited.is_set()):
                if self._ranks is not None:
                    self._ranks.look()
                if self._cancelled:
                    await self._end_tree(self.plan.term_grace)
                    self._conclude()
                    return EXIT_CANCELLED
                lost = self._lost_why()
                if lost is not None:
                    log.error("job %s: stopping, %s", self.launch.job_id, lost)
                    self._kill_tree_now()
                    self._conclude()
                    return EXIT_LOST
                self._reap()
                step = self._settings.step
                if self._ranks is not None and not self._ranks.complete:
                    step = min(step, RANK_LOOK)  # a rank may fail right after it starts
                delivery = await self._next_or_exit(step)
                if delivery is not None:
                    await self._handle(delivery)
            # The command is gone: what it left behind goes with it.
            await self._end_tree(0.0)
            return self._conclude()
        finally:
            if self._ranks is not None:
                self._ranks.close()
            if child is not None:
                loop.remove_reader(child.pidfd)
                child.close()

    async def _next_or_exit(self, timeout: float) -> Delivery | None:
        """The next control delivery, or None once ``timeout`` passed or the command exited."""
        getting = asyncio.ensure_future(self._next(timeout))
        exited = asyncio.ensure_future(self._exited.wait())
        try:
            await asyncio.wait({getting, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if getting.done():
            return getting.result()
        getting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await getting
        return None

    def _reap(self) -> None:
        """Reap the command and every orphan re-parented to this subreaper."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                self.status = status
                self._exited.set()

    async def _end_tree(self, grace: float) -> None:
        """TERM every process of the tree, KILL what is left after ``grace`` (0: KILL
        now), and return once none is left."""
        if grace > 0 and self.tree.populated():
            self.tree.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self.tree.populated():
                self._reap()
                await asyncio.sleep(POLL)
        while self.tree.populated():
            self.tree.kill()
            self._reap()
            await asyncio.sleep(POLL)
        self._reap()
        if self.child is not None and not self._exited.is_set():
            # Gone from the tree (killed), not yet reaped: wait for its status.
            with contextlib.suppress(ChildProcessError):
                _, status = os.waitpid(self.child.pid, 0)
                self.status = status
                self._exited.set()

    def _kill_tree_now(self) -> None:
        """SIGKILL the tree without waiting on the loop (a lapsed lease, a lost part)."""
        for _ in range(100):
            if not self.tree.populated():
                return
            self.tree.kill()
            self._reap()
            time.sleep(POLL)

    def _conclude(self) -> int:
        """Write how the command ended; this part's exit code."""
        if self.child is None:
            return EXIT_DONE
        why = self.child.why_not_started()
        if why is not None:
            self._write(self.launch.failure_file, f"cannot start the command: {why}")
        if self.status is None:
            return EXIT_LOST
        first = None if self._ranks is None else self._ranks.first
        ended = CommandStatus.of_wait_status(self.status, first)
        self._write(self.plan.status_file, ended.dump().decode())
        log.info("job %s: the command %s", self.launch.job_id, ended.describe())
        if why is not None and ended.exit_status == EXIT_CANNOT_RUN:
            return EXIT_COMMAND_FAILED
        return EXIT_DONE if ended.ok else EXIT_COMMAND_FAILED

    def _write(self, path: str | None, text: str) -> None:
        if path is None:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text[:500])
        except OSError as exc:
            print(f"job {self.launch.job_id}: cannot write {path}: {exc}", file=sys.stderr)
