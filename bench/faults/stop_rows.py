"""The fault bench's operator rows: polite stops, a duplicate agent, a full disk.

A stop an operator asks for must cost no job its requeue budget, and nothing
an operator does by mistake may take down what runs:

- ``agent-sigterm``: SIGTERM one agent while its jobs run; it leaves them
  running and says it stops, the supervisor starts it again and it adopts
  them (expect adopted > 0, failed 0, charged 0);
- ``up-restarts``: the whole cluster stopped as ``accordion up``'s Ctrl-C stops
  it and started again on the same run directory, three times in a row, while
  jobs run (expect failed 0, charged 0: what is not adopted within the lease
  is requeued uncharged);
- ``duplicate-agent`` (logins and ACLs on): a second ``python -m nodeagent`` for
  a machine whose agent runs, with the same login and a state directory of its
  own; it must exit 2 with one line, and **effects** counts what it did to the
  running one (reconnections, restarts, requeues: 0 is the target);
- ``full-disk``: the scheduler's journal on a small tmpfs, filled to the last
  byte while jobs run, then freed; submissions meanwhile are refused with the
  reason (counted in the note), nothing is lost, the scheduler never restarts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from accordion.cluster.local_cluster import LocalCluster
from accordion.errors import NoReplyError
from bench.faults.cluster import (
    BOUND,
    Bench,
    Result,
    agent_child,
    running_at_least,
    wait_healthy,
    wait_offline,
    workload,
)
from bench.faults.disk import fill, free
from bench.faults.rows import row_baseline
from bench.faults.sampler import Sampler
from broker.vocabulary import Rejection
from scheduler.runtime.journal import Journal

RESTARTS = 3


async def row_agent_sigterm(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    t0 = time.monotonic()
    os.kill(agent_child(cluster), signal.SIGTERM)
    await wait_offline(cluster, cluster.spec.machines[0].id)
    result.recovery = await wait_healthy(cluster, t0)
    result.note = (
        f"SIGTERM, restarted by the supervisor (lease {cluster.lease:g} s); recovery: until "
        "its next incarnation is online"
    )
    return accepted


async def row_up_restarts(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    gaps = []
    for _ in range(RESTARTS):
        t0 = time.monotonic()
        await asyncio.to_thread(cluster.stop)  # what accordion up does on Ctrl-C
        cluster.start()
        gaps.append(await wait_healthy(cluster, t0))
        await running_at_least(cluster, 1)
    result.recovery = max(gaps)
    result.note = (
        f"stopped and started {RESTARTS} times on its run directory (lease "
        f"{cluster.lease:g} s); recovery: the longest stop to all online"
    )
    return accepted


async def row_duplicate_agent(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    machine = cluster.spec.machines[0]
    child = next(c for c in cluster.children() if c.name == f"agent-{machine.id}")
    argv = list(child.argv)
    state = cluster.run_dir / "duplicate-state"
    argv = [a for a in argv if not a.startswith(("--state-dir=", "--metrics-port="))]
    argv.append(f"--state-dir={state}")
    log = cluster.run_dir / "duplicate-agent.log"
    with log.open("wb") as out:
        # The same command line and login as the running agent: only its state differs.
        duplicate = await asyncio.create_subprocess_exec(
            *argv, env=dict(child.env), stdout=out, stderr=out, cwd=child.cwd
        )
    async with asyncio.timeout(BOUND):
        code = await duplicate.wait()
    errors = [line for line in log.read_text().splitlines() if " ERROR " in line]
    running_log = child.log.read_text()
    result.effects = running_log.count("lost its connection") + child.restarts
    async with cluster.connect(timeout=10.0) as client:
        status = await client.status()
    online = any(m.id == machine.id and m.online for m in status.machines)
    result.effects += 0 if online else 1
    result.note = f"second agent for {machine.id}: exit {code}, {len(errors)} error line(s): " + (
        errors[0].split(" ERROR ", 1)[1] if errors else "none"
    )
    return accepted


async def row_full_disk(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    disk = cluster.journal.parent
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    fill(disk)
    refused = 0
    unanswered: set[str] = set()
    more = workload(f"{tag}-full", bench.jobs // 2, seed=2)
    async with cluster.connect(timeout=10.0) as client:
        for spec in more:
            try:
                reply = await client.submit([spec], timeout=2.0)
            except NoReplyError:
                # Its write found the disk full: accepted in memory, its answer held
                # until there is room (persist before acknowledging).
                unanswered.add(spec.id)
                continue
            if reply.results[0].accepted:
                accepted.add(spec.id)
            elif reply.results[0].code is Rejection.JOURNAL:
                refused += 1
    # Until a job ends meanwhile: its report is held in memory until there is room.
    await _one_ends(cluster, accepted)
    t0 = time.monotonic()
    free(disk)
    late = workload(f"{tag}-after", 5, seed=3)
    async with cluster.connect(timeout=10.0) as client:
        deadline = t0 + BOUND
        while True:  # until the journal takes writes again: submissions are accepted
            reply = await client.submit(late)
            if all(r.accepted for r in reply.results):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the scheduler did not accept submissions again")
            await asyncio.sleep(0.1)
    result.recovery = time.monotonic() - t0
    accepted |= {s.id for s in late}
    # The unanswered one was accepted (it is in the journal now): it counts.
    with Journal(cluster.journal) as journal:
        accepted |= {job for job in unanswered if journal.job(job) is not None}
    scheduler = next(c for c in cluster.children() if c.role == "scheduler")
    result.note = (
        f"journal on a {DISK_SIZE} tmpfs filled, then freed: of {len(more)} submissions "
        f"meanwhile {refused} refused (code journal), {len(unanswered)} answered once freed; "
        f"scheduler restarts {scheduler.restarts}; recovery: from freed to accepting again"
    )
    return accepted


#: The size of the full-disk row's tmpfs.
DISK_SIZE = "8m"


async def _one_ends(cluster: LocalCluster, accepted: set[str]) -> None:
    """Until one of the jobs running now has ended, as the scheduler says (bounded)."""
    async with cluster.connect(timeout=10.0) as client:
        before = {j.id for j in (await client.status()).running} & accepted
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            running = {j.id for j in (await client.status()).running}
            if before - running:
                return
            await asyncio.sleep(0.2)
