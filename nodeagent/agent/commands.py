"""A user's command on this agent: admitted as whom, planned, and cleaned up after.

Theory of operation. A ``StartPart`` of a command job (``workload ==
"command"``) is admitted like any part (``nodeagent.agent.admission``), and
then handed here (:meth:`Commands.prepare`) before its launch:

1. commands must be allowed (``--allow-commands``; else the part is refused
   with that reason) and the job must have an account to run as
   (``nodeagent.agent.accounts``: the agent's own, or the admin's map);
2. the part gets its *job directory*, ``<jobs dir>/<job>@<attempt>``, made
   here (mode 0700, then given to the job's account): its ``hostfile`` (every
   part's machine and its share of the job's processes, ``host slots=N``, Open
   MPI's format), the batch script's copy, and its ``TMPDIR``. The jobs
   directory belongs to the agent and nobody else may write it, so nobody can
   plant a name in it before the agent does; a job directory is private to
   its account, so a job cannot write another account's job directory (nor
   the agent's state directory, 0700);
3. where the tree of processes is kept: a cgroup of its own when this agent
   may make them (``nodeagent.launch.jobtree.cgroup_base``), else the
   supervisor walks its descendants as their subreaper;
4. the *plan* (``nodeagent.launch.command_plan``) goes into the state
   directory, readable by the agent's own account only, and the part's
   launch names it. The plan's environment is built here from nothing: the
   job's variables (``ACCORDION_JOB_ID``, ``ACCORDION_NPROCS``,
   ``ACCORDION_NODELIST``, ``ACCORDION_HOSTFILE`` ..., the names a Slurm user
   knows as ``SLURM_*``), the account's ``HOME``, ``USER``, ``SHELL``, and
   ``PATH``, ``LANG``, ``TZ`` from the agent's; never the agent's login or
   anything else of its environment.

A command submitted with ``--mpi`` runs behind its MPI's launcher
(``nodeagent.agent.mpi_launch``); once its ranks exist, the agent pins each
(every thread of every process it started) to its own slot's core, the way
it pins the MPI-like workload's ranks (:meth:`Commands.repin`, again at each
resize), finding them by the rank numbers in their environment
(``nodeagent.launch.mpi_ranks``).

When the part's process is gone, :meth:`Commands.finished` reads how the
command ended (its status file) and :meth:`Commands.clean` ends whatever of
its tree is left (``cgroup.kill``: the supervisor may have been SIGKILLed),
removes its cgroup, its job directory and its files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.command_spec import HostSlots, expand_pattern
from broker.messages import StartPart
from broker.vocabulary import CommandUsers, MpiLibrary
from nodeagent.agent.accounts import (
    CommandRefusedError,
    UserMapFile,
    account_of,
    mapped_account,
)
from nodeagent.agent.cpuset import SlotPool, format_cpuset, placement
from nodeagent.agent.mpi_launch import (
    DEFAULT_SHIMS,
    MpiUnavailableError,
    mpi_launch,
    mpi_libraries,
)
from nodeagent.launch.command_plan import CommandPlan, CommandStatus, PlanError, RunAs
from nodeagent.launch.contract import Launch, part_key
from nodeagent.launch.jobtree import (
    CgroupTree,
    DescendantTree,
    JobTree,
    cgroup_base,
    pin_tree,
    remove_cgroup,
)
from nodeagent.launch.mpi_ranks import RankProcesses, ranks_among
from nodeagent.survival.state import StateDir, write_atomic

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Of the agent's environment, only these reach a command (the rest is the agent's).
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TZ")
SUPERVISOR_MARGIN = 1.0
"""Wall seconds the agent waits past the supervisor's own TERM-to-KILL grace before it
SIGKILLs the supervisor: the supervisor KILLs the tree at its grace and says how it
ended; the agent's KILL is for a supervisor that hangs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandSettings:
    """An agent started with ``--allow-commands``: its user map (None: none, which a
    root agent needs), its jobs directory, and whether it uses cgroups where it may."""

    user_map: str | None = None
    jobs_dir: str | None = None
    cgroups: bool = True
    #: Where the MPI yield shim is built, one directory per library (``--mpi-shims``).
    mpi_shims: str | None = None


def default_jobs_dir(machine: str) -> Path:
    return Path(tempfile.gettempdir()) / f"accordion-jobs-{os.geteuid()}" / machine


def check_commands(settings: CommandSettings, machine: str) -> None:
    """ValueError (a usage error at start) if the user map or the jobs directory is unusable."""
    if settings.user_map is not None:
        UserMapFile(settings.user_map)
    _make_jobs_dir(Path(settings.jobs_dir) if settings.jobs_dir else default_jobs_dir(machine))


class Commands:
    """Users' commands on one agent (module docstring); ``settings`` None: commands off."""

    def __init__(
        self,
        *,
        agent_id: str,
        settings: CommandSettings | None,
        state: StateDir | None,
        term_grace: float,
    ) -> None:
        self._agent_id = agent_id
        self._settings = settings
        self._state = state
        self._term_grace = term_grace
        self._map: UserMapFile | None = None
        self._own: RunAs | None = None
        self._jobs: Path | None = None
        self._scratch: str | None = None
        self._cgroups: Path | None = None
        #: How this agent keeps a command's process tree, in words (its log, its docs).
        self.tree = "no commands"
        self.mode = CommandUsers.OFF
        if settings is None:
            return
        if os.geteuid() == 0:
            if settings.user_map is None:
                raise ValueError("an agent running as root needs --user-map to run commands")
            self._map = UserMapFile(settings.user_map)
            self.mode = CommandUsers.MAPPED
        else:
            self._own = account_of(os.geteuid())
            self.mode = CommandUsers.AGENT
        self._jobs = Path(settings.jobs_dir) if settings.jobs_dir else default_jobs_dir(agent_id)
        _make_jobs_dir(self._jobs)
        if state is None:
            # No state directory (tests, benchmarks): a private one for the plans.
            self._scratch = tempfile.mkdtemp(prefix=f"accordion-{agent_id}-commands-")
        if settings.cgroups:
            self._cgroups, why = cgroup_base(f"accordion-{agent_id}")
        else:
            why = "cgroups turned off (--no-cgroups)"
        self.tree = (
            why
            if self._cgroups is not None
            else f"the supervisor as subreaper, walking its descendants ({why})"
        )
        log.info(
            "agent %s: commands allowed, run as %s; process trees: %s",
            agent_id,
            "mapped accounts" if self._own is None else self._own.user,
            self.tree,
        )

    @property
    def runs_as(self) -> str | None:
        """The agent's own account, when every command runs as it."""
        return None if self._own is None else self._own.user

    @property
    def mpi(self) -> tuple[MpiLibrary, ...]:
        """The MPI libraries this agent can launch a command's ranks with, as its host
        is now (its registration says them): none with commands off."""
        if self._settings is None:
            return ()
        return mpi_libraries(self._shims(self._settings))

    @staticmethod
    def _shims(settings: CommandSettings) -> Path:
        return Path(settings.mpi_shims) if settings.mpi_shims else DEFAULT_SHIMS

    def close(self) -> None:
        """At the agent's clean end (its parts ended): its scratch directory and its
        cgroups' parent go. A killed agent leaves the parent for its next incarnation."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if self._cgroups is not None:
            with contextlib.suppress(OSError):  # busy: a part's cgroup not yet removed
                self._cgroups.rmdir()

    # -- files -------------------------------------------------------------------------

    def _part_file(self, job_id: str, attempt: int, ext: str) -> str:
        if self._state is not None:
            return str(self._state.parts / f"{part_key(job_id, attempt)}.{ext}")
        if self._scratch is None:  # commands off: the name is never used
            return os.path.join(tempfile.gettempdir(), f"{part_key(job_id, attempt)}.{ext}")
        return os.path.join(self._scratch, f"{part_key(job_id, attempt)}.{ext}")

    def plan_file(self, job_id: str, attempt: int) -> str:
        return self._part_file(job_id, attempt, "cmd")

    # -- admission ---------------------------------------------------------------------

    def prepare(self, command: StartPart, launch: Launch, cores: Sequence[int]) -> CommandPlan:
        """Plan the part (module docstring) and write its plan where its launch says;
        CommandRefusedError (with the reason for the user) if it cannot run here."""
        if self._settings is None or self._jobs is None:
            raise CommandRefusedError(
                "commands are off on this agent (it was not started with --allow-commands)"
            )
        job = command.job
        spec = job.command
        if spec is None or launch.command_file is None:
            raise CommandRefusedError("the job carries no command")
        run_as = self._own if self._map is None else mapped_account(job.owner, self._map)
        key = part_key(job.id, launch.attempt)
        job_dir = self._jobs / key
        hosts = command.hosts or (HostSlots(machine=self._agent_id, slots=job.procs),)
        name = spec.name or _default_name(spec.argv, spec.script)
        values = {
            "j": job.id,
            "u": job.user,
            "x": name,
            "N": self._agent_id,
            "n": str(launch.part),
        }
        stdout = os.path.join(spec.chdir, expand_pattern(spec.output, values))
        stderr = (
            None
            if spec.error is None
            else os.path.join(spec.chdir, expand_pattern(spec.error, values))
        )
        cgroup = None if self._cgroups is None else str(self._cgroups / key)
        batch = launch.part == 0
        argv = list(spec.argv)
        files = {"hostfile": "".join(f"{h.machine} slots={h.slots}\n" for h in hosts)}
        if spec.script is not None:
            files["script"] = spec.script
            argv = [str(job_dir / "script"), *argv]
        env = _environment(
            command=command,
            launch=launch,
            run_as=run_as,
            name=name,
            hosts=hosts,
            cores=cores,
            job_dir=job_dir,
        )
        mpi_ranks = 0
        if spec.mpi is not None:
            as_root = (os.geteuid() if run_as is None else run_as.uid) == 0
            shims = self._shims(self._settings)
            try:
                mpi = mpi_launch(
                    spec.mpi, ranks=job.procs, machines=len(hosts), as_root=as_root, shims=shims
                )
            except MpiUnavailableError as exc:
                raise CommandRefusedError(str(exc)) from None
            env.update(mpi.env)
            env["ACCORDION_MPIRUN"] = mpi.shell_words
            if spec.script is None:
                argv = [*mpi.argv, *argv]
            mpi_ranks = job.procs
        plan = CommandPlan(
            batch=batch,
            argv=tuple(argv) if batch else (),
            chdir=spec.chdir,
            stdout=stdout,
            stderr=stderr,
            env=tuple(sorted(env.items())),
            run_as=None if run_as is None or run_as.uid == os.geteuid() else run_as,
            cgroup=cgroup,
            cores=tuple(sorted(set(cores))),
            term_grace=self._term_grace,
            status_file=self._part_file(job.id, launch.attempt, "status"),
            job_dir=str(job_dir),
            mpi_ranks=mpi_ranks,
        )
        try:
            _make_job_dir(job_dir, files, run_as)
            if cgroup is not None:
                CgroupTree(cgroup).create()
            with contextlib.suppress(FileNotFoundError):
                os.remove(plan.status_file)
            write_atomic(Path(launch.command_file), plan.dump())
        except OSError as exc:
            raise CommandRefusedError(f"cannot prepare the job on this agent: {exc}") from exc
        return plan

    # -- while it runs -------------------------------------------------------------------

    def repin(
        self, launch: Launch, supervisor: int | None, pool: SlotPool, slots: Sequence[int]
    ) -> int:
        """Pin every thread of the part's processes to its ``slots``' cores, each MPI rank's
        to its own slot's (:func:`nodeagent.agent.cpuset.placement`); threads pinned."""
        plan = self._plan(launch)
        if plan is None:
            return 0
        tree = self._tree(plan, supervisor)
        pids = set() if tree is None else tree.pids()
        if supervisor is not None:
            pids.add(supervisor)
        ranks = ranks_among(pids) if plan.mpi_ranks else {}
        pinned = 0
        if ranks:
            where = placement(plan.mpi_ranks, slots)
            for local, rank in ranks.items():
                if local < len(where):
                    pinned += pin_tree(rank.pids, {pool.core(where[local])})
                    pids -= rank.pids
        # The launcher, its daemons and the supervisor wait, mostly: any of the cores.
        return pinned + pin_tree(pids, pool.cores_of(slots))

    def mpi_ranks(self, launch: Launch) -> int:
        """How many MPI ranks the part holds (0: it launches no MPI program)."""
        plan = self._plan(launch)
        return 0 if plan is None else plan.mpi_ranks

    def ranks(self, launch: Launch, supervisor: int | None) -> dict[int, RankProcesses]:
        """The MPI ranks running in the part now, by local rank."""
        plan = self._plan(launch)
        tree = None if plan is None else self._tree(plan, supervisor)
        return {} if tree is None else ranks_among(tree.pids())

    # -- its end -------------------------------------------------------------------------

    def finished(self, launch: Launch) -> tuple[CommandPlan | None, CommandStatus | None]:
        """The part's plan (for :meth:`clean`) and how its command ended, as its
        supervisor wrote it (None: it did not, or this part ran no command)."""
        plan = self._plan(launch)
        if plan is None:
            return None, None
        try:
            return plan, CommandStatus.read(plan.status_file)
        except (OSError, PlanError) as exc:
            log.warning("part %s: status file unreadable: %s", launch.job_id, exc)
            return plan, None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(plan.status_file)
            if launch.command_file is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(launch.command_file)

    @staticmethod
    async def clean(plan: CommandPlan) -> None:
        """End what is left of a part's tree; remove its cgroup and its job directory."""
        if plan.cgroup is not None and not await remove_cgroup(plan.cgroup):
            log.error("cgroup %s would not empty", plan.cgroup)
        shutil.rmtree(plan.job_dir, ignore_errors=True)

    def _plan(self, launch: Launch) -> CommandPlan | None:
        if launch.command_file is None:
            return None
        try:
            return CommandPlan.read(launch.command_file)
        except FileNotFoundError:
            return None
        except (OSError, PlanError) as exc:
            log.warning("part %s: command plan unreadable: %s", launch.job_id, exc)
            return None

    @staticmethod
    def _tree(plan: CommandPlan, supervisor: int | None) -> JobTree | None:
        if plan.cgroup is not None:
            return CgroupTree(plan.cgroup)
        return None if supervisor is None else DescendantTree(supervisor)


def _default_name(argv: Sequence[str], script: str | None) -> str:
    if script is not None:
        return "batch"
    return os.path.basename(argv[0]) or "command"


def _environment(
    *,
    command: StartPart,
    launch: Launch,
    run_as: RunAs | None,
    name: str,
    hosts: Sequence[HostSlots],
    cores: Sequence[int],
    job_dir: Path,
) -> dict[str, str]:
    """The job's environment, from nothing but what the job may know (module docstring)."""
    job = command.job
    env = {k: os.environ[k] for k in PASSED_ON if k in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    account = run_as if run_as is not None else account_of(os.geteuid())
    walltime = job.walltime / launch.time_scale
    env.update(
        HOME=account.home,
        USER=account.user,
        LOGNAME=account.user,
        SHELL=account.shell,
        TMPDIR=str(job_dir),
        ACCORDION_JOB_ID=job.id,
        ACCORDION_JOB_NAME=name,
        ACCORDION_JOB_USER=job.user,
        ACCORDION_JOB_ACCOUNT=job.group,
        ACCORDION_JOB_ATTEMPT=str(launch.attempt),
        ACCORDION_NPROCS=str(job.procs),
        ACCORDION_CPUS=str(command.job_cpus or command.cpus),
        ACCORDION_CPUS_ON_NODE=str(command.cpus),
        ACCORDION_CPU_LIST=format_cpuset(cores),
        ACCORDION_NODENAME=launch.agent,
        ACCORDION_NODEID=str(launch.part),
        ACCORDION_NNODES=str(len(hosts)),
        ACCORDION_NODELIST=",".join(h.machine for h in hosts),
        ACCORDION_TASKS_PER_NODE=",".join(str(h.slots) for h in hosts),
        ACCORDION_HOSTFILE=str(job_dir / "hostfile"),
        ACCORDION_SUBMIT_DIR=job.command.chdir if job.command is not None else "/",
        ACCORDION_WALLTIME=f"{walltime:g}",
        ACCORDION_TMPDIR=str(job_dir),
    )
    return env


def _make_jobs_dir(path: Path) -> None:
    """The agent's jobs directory: its own, traversable by the jobs' accounts, writable
    by nobody else (so nobody can plant a name in it before the agent does)."""
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise ValueError(f"jobs directory {path} belongs to uid {st.st_uid}, not this agent")
    if st.st_mode & 0o022:
        raise ValueError(
            f"jobs directory {path} is writable by others (mode {st.st_mode & 0o777:o})"
        )


def _make_job_dir(path: Path, files: dict[str, str], run_as: RunAs | None) -> None:
    """A job's own directory with ``files`` in it, then given to its account (0700)."""
    if path.exists() or path.is_symlink():
        shutil.rmtree(path)  # an earlier run of the same part, left by a crash
    os.mkdir(path, 0o700)
    for name, text in files.items():
        mode = 0o700 if name == "script" else 0o600
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    if run_as is not None and run_as.uid != os.geteuid():
        # The files first, the directory last: until then only the agent may enter it.
        for name in files:
            os.chown(path / name, run_as.uid, run_as.gid, follow_symlinks=False)
        os.chown(path, run_as.uid, run_as.gid)
