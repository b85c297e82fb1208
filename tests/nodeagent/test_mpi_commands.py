"""Users' MPI programs on an agent: launched with Debian's MPI, each rank pinned, re-pinned.

Real job processes, a real ``mpirun.openmpi`` (and ``mpiexec.mpich``) and the
CG-like kernel of ``examples/mpi`` built at set-up, on an in-process agent
with commands allowed. Each test waits on what it can see: the ranks in
``/proc`` (found by the rank numbers in their environment), their CPU masks,
a report, a pidfd the supervisor holds; never on time.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from broker.messages import AgentOnline, CancelPart, PartFinished, PartStarted, ResizePart
from broker.vocabulary import MpiLibrary
from nodeagent.agent.cpuset import format_cpuset
from nodeagent.agent.mpi_launch import SHIM, mpi_libraries
from nodeagent.launch.jobtree import DescendantTree, thread_masks
from nodeagent.launch.mpi_ranks import RankProcesses, ranks_among
from tests.nodeagent.commands_harness import (
    alive,
    command_job,
    commands_agent,
    settings_for,
    start_command,
)
from tests.nodeagent.harness import FAST, HANG, running_agent

ROOT = Path(__file__).resolve().parents[2]
CG = ROOT / "examples" / "mpi" / "build" / "openmpi" / "cg"
CORES = sorted(os.sched_getaffinity(0))

needs_openmpi = pytest.mark.skipif(
    shutil.which("mpirun.openmpi") is None or not CG.is_file(),
    reason="Debian's Open MPI and examples/mpi's kernels (scripts/setup installs and builds them)",
)
needs_two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    return tmp_path


def cores_of(rank: RankProcesses) -> set[str]:
    """The CPU masks of every thread of every process of ``rank``, as lists (``0-1``)."""
    return {format_cpuset(mask) for mask in thread_masks(rank.pids)}


async def ranks_when(
    supervisor: int, want: Callable[[dict[int, RankProcesses]], bool]
) -> dict[int, RankProcesses]:
    """The ranks under ``supervisor`` once ``want`` holds of them."""
    ranks: dict[int, RankProcesses] = {}
    try:
        async with asyncio.timeout(HANG):
            while True:
                ranks = ranks_among(DescendantTree(supervisor).pids())
                if want(ranks):
                    return ranks
                await asyncio.sleep(0.02)
    except TimeoutError:
        seen = {k: sorted(cores_of(r)) for k, r in ranks.items()}
        raise AssertionError(f"ranks under {supervisor}: {seen}") from None


def on_cores(*per_rank: str) -> Callable[[dict[int, RankProcesses]], bool]:
    """Rank ``i`` (every thread of it) on the one core ``per_rank[i]``."""

    def holds(ranks: dict[int, RankProcesses]) -> bool:
        return len(ranks) == len(per_rank) and all(
            cores_of(ranks[i]) == {core} for i, core in enumerate(per_rank)
        )

    return holds


def watched_pids(supervisor: int) -> set[int]:
    """The processes ``supervisor`` holds a pidfd on (its fdinfo says ``Pid:``)."""
    found = set()
    for fd in os.listdir(f"/proc/{supervisor}/fdinfo"):
        try:
            info = Path(f"/proc/{supervisor}/fdinfo/{fd}").read_text()
        except FileNotFoundError:
            continue
        for line in info.splitlines():
            if line.startswith("Pid:"):
                found.add(int(line.split()[1]))
    return found


@needs_openmpi
@needs_two_cores
async def test_an_open_mpi_job_shrunk_and_expanded_repins_every_thread_of_each_rank(
    folder: Path,
) -> None:
    a, b = str(CORES[0]), str(CORES[1])
    spec = command_job(
        "m1", [str(CG), "-n", "20000", "-i", "100000000"], folder, procs=2, mpi=MpiLibrary.OPENMPI
    )
    async with commands_agent(folder, cpus=2) as run:
        await run.scheduler.send(start_command(spec, cpus=2))
        started = await run.scheduler.expect(PartStarted, lambda p: p.job_id == "m1")
        # Expanded: a core for each rank, every thread of it (Open MPI's too).
        await ranks_when(started.pid, on_cores(a, b))
        await run.scheduler.send(ResizePart(job_id="m1", cpus=1, job_cpus=1))
        # Folded at MPL 2: both ranks on the part's one core.
        await ranks_when(started.pid, on_cores(a, a))
        await run.scheduler.send(ResizePart(job_id="m1", cpus=2, job_cpus=2))
        ranks = await ranks_when(started.pid, on_cores(a, b))
        await run.scheduler.send(CancelPart(job_id="m1"))
        ended = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m1")
    assert ended.reason == "cancelled"
    # Cancel ends every rank and the launcher with them.
    assert not any(alive(pid) for rank in ranks.values() for pid in rank.pids)


@needs_openmpi
async def test_a_rank_that_fails_fails_the_job_naming_the_rank(folder: Path) -> None:
    gate = folder / "go"
    script = (
        f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then while [ ! -e {gate} ]; do sleep 0.02; done; '
        "exit 3; fi; exec sleep 1000"
    )
    spec = command_job("m2", ["sh", "-c", script], folder, procs=2, mpi=MpiLibrary.OPENMPI)
    async with commands_agent(folder, cpus=2) as run:
        await run.scheduler.send(start_command(spec, cpus=2))
        started = await run.scheduler.expect(PartStarted, lambda p: p.job_id == "m2")
        ranks = await ranks_when(started.pid, lambda r: len(r) == 2)
        # The supervisor watches both ranks before the one fails.
        async with asyncio.timeout(HANG):
            while {r.root for r in ranks.values()} - watched_pids(started.pid):
                await asyncio.sleep(0.02)
        gate.write_text("go")
        ended = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m2")
    assert (ended.reason, ended.exit_status) == ("failed", 3), ended
    assert ended.detail is not None
    assert "rank 1 ended first" in ended.detail, ended.detail
    assert not any(alive(pid) for rank in ranks.values() for pid in rank.pids)


@needs_openmpi
async def test_the_job_environment_names_the_launcher_and_the_ranks_yield(folder: Path) -> None:
    spec = command_job(
        "m3",
        ["sh", "-c", 'echo "yield=$OMPI_MCA_mpi_yield_when_idle rank=$OMPI_COMM_WORLD_RANK"'],
        folder,
        procs=2,
        mpi=MpiLibrary.OPENMPI,
    )
    script = '#!/bin/sh\necho "launcher: $ACCORDION_MPIRUN"\n'
    batch = command_job("m4", [], folder, procs=2, script=script, mpi=MpiLibrary.OPENMPI)
    async with commands_agent(folder, cpus=2) as run:
        await run.scheduler.send(start_command(spec, cpus=2))
        done = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m3")
        await run.scheduler.send(start_command(batch, cpus=2))
        batch_done = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m4")
    assert (done.reason, done.exit_status) == ("done", 0), done
    lines = sorted((folder / "accordion-m3.out").read_text().split("\n"))
    assert [ln for ln in lines if ln] == ["yield=1 rank=0", "yield=1 rank=1"]
    assert batch_done.reason == "done", batch_done
    launcher = (folder / "accordion-m4.out").read_text()
    assert "mpirun.openmpi" in launcher, launcher
    assert "--bind-to none --oversubscribe -np 2" in launcher, launcher


async def test_an_mpi_job_the_host_cannot_launch_is_refused_with_the_reason(
    folder: Path,
) -> None:
    empty = folder / "no-shims"
    empty.mkdir()
    mpich = command_job("m5", ["true"], folder, procs=2, mpi=MpiLibrary.MPICH)
    wide = command_job("m6", ["true"], folder, procs=3, mpi=MpiLibrary.OPENMPI)
    async with commands_agent(folder, cpus=2, mpi_shims=str(empty)) as run:
        await run.scheduler.send(start_command(mpich, cpus=2))
        refused = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m5")
        await run.scheduler.send(start_command(wide, cpus=2, hosts=[("a", 2), ("b", 1)]))
        across = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m6")
    assert refused.reason == "failed"
    assert refused.detail is not None
    if shutil.which("mpiexec.mpich") is None:
        assert "mpich is not installed" in refused.detail, refused.detail
    else:
        assert "the yield shim" in refused.detail, refused.detail
        assert "is not built" in refused.detail, refused.detail
    assert across.reason == "failed"
    assert across.detail is not None
    # The scheduler never splits an MPI job; the agent still refuses one that is.
    assert "across 2 machines" in across.detail, across.detail
    assert "the scheduler keeps an MPI job on one machine" in across.detail, across.detail


def test_a_host_launches_the_libraries_whose_launcher_and_shim_it_has(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    shims = folder / "shims"
    monkeypatch.setenv("PATH", str(bin_dir))
    assert mpi_libraries(shims) == ()
    for launcher in ("mpirun.openmpi", "mpiexec.mpich"):
        (bin_dir / launcher).write_text("#!/bin/sh\n")
        (bin_dir / launcher).chmod(0o755)
    # MPICH's ranks need the yield shim too: without it, Open MPI only.
    assert mpi_libraries(shims) == (MpiLibrary.OPENMPI,)
    (shims / "mpich").mkdir(parents=True)
    (shims / "mpich" / SHIM).write_bytes(b"")
    assert mpi_libraries(shims) == (MpiLibrary.OPENMPI, MpiLibrary.MPICH)


async def test_the_agent_registers_the_libraries_it_can_launch(folder: Path) -> None:
    empty = folder / "no-shims"
    empty.mkdir()
    async with commands_agent(folder, cpus=2, mpi_shims=str(empty)) as run:
        (online,) = run.scheduler.all(AgentOnline)
    assert online.mpi == mpi_libraries(empty)
    assert MpiLibrary.MPICH not in online.mpi  # no shim, no MPICH
    async with running_agent(cpus=2) as run:
        (online,) = run.scheduler.all(AgentOnline)
    assert online.mpi == ()  # commands off: no MPI program either


@needs_openmpi
async def test_a_rank_that_fails_at_once_is_never_mistaken_for_another(folder: Path) -> None:
    # Rank 2 fails before the supervisor can have watched every rank: the order of
    # the ends is lost, and no other rank (ended by the launcher after it) is named.
    script = '[ "$OMPI_COMM_WORLD_RANK" = 2 ] && exit 5; exec sleep 1000'
    spec = command_job("m7", ["sh", "-c", script], folder, procs=4, mpi=MpiLibrary.OPENMPI)
    async with commands_agent(folder, cpus=2) as run:
        await run.scheduler.send(start_command(spec, cpus=2))
        ended = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m7")
    assert (ended.reason, ended.exit_status) == ("failed", 5), ended
    assert ended.detail is not None
    named = [f"rank {r} ended first" in ended.detail for r in range(4)]
    assert named in ([False] * 4, [False, False, True, False]), ended.detail


@needs_openmpi
@needs_two_cores
async def test_ranks_the_search_gave_up_on_are_pinned_at_the_next_check(folder: Path) -> None:
    # A launcher slower than the rank search's patience (none here): the agent's
    # check every heartbeat interval finds the ranks and pins them all the same.
    a, b = str(CORES[0]), str(CORES[1])
    settings = settings_for(folder, base=replace(FAST, rank_search=0.0))
    spec = command_job(
        "m8", [str(CG), "-n", "20000", "-i", "100000000"], folder, procs=2, mpi=MpiLibrary.OPENMPI
    )
    async with running_agent(cpus=2, settings=settings) as run:
        await run.scheduler.send(start_command(spec, cpus=2))
        started = await run.scheduler.expect(PartStarted, lambda p: p.job_id == "m8")
        await ranks_when(started.pid, on_cores(a, b))
        await run.scheduler.send(CancelPart(job_id="m8"))
        await run.scheduler.expect(PartFinished, lambda f: f.job_id == "m8")
