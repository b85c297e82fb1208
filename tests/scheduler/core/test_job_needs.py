"""The core's side of jobs that need capabilities: what it hides, counts and keeps.

A job that needs capabilities (``Job.needs``) is hidden from the policy while
the machines with them hold too few CPUs, and shown again when they come; the
queue counts such jobs as they come and go, so a queue of jobs that need
nothing (a trace's) is never filtered.
"""

from __future__ import annotations

from dataclasses import replace

from model.job import Job
from model.machine import Capability, Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.job_queue import JobQueue
from scheduler.core.running_set import RunningSet
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fcfs_malleable import FcfsMalleable
from tests.builders import job

CMD = frozenset({Capability.COMMANDS})
PLAIN = Machine(id="plain", cpus=4)
ABLE = Machine(id="able", cpus=2, capabilities=CMD)


def command(job_id: str, procs: int = 1, *, malleable: bool = False) -> Job:
    return replace(job(job_id, procs, walltime=10.0, malleable=malleable), needs=CMD)


def visible(core: SchedulerCore, now: float = 0.0) -> list[str]:
    return [j.id for j in core.snapshot(now).queue]


def test_the_queue_counts_what_its_jobs_need_until_they_leave_it() -> None:
    waiting = JobQueue(running=RunningSet(), folds=False)
    a, b, c, d = (command(n) for n in "abcd")
    for queued in (a, b, c, d, job("plain", 1, walltime=10.0)):
        waiting.add(queued)
    assert waiting.where == {(CMD, False): 4}
    waiting.take([a])
    waiting.remove(b)
    assert waiting.where == {(CMD, False): 2}
    waiting.put_back(a)
    waiting.remove_many([a, c, d])
    # Nothing that needs anything waits: the queue is shown as it is, unfiltered.
    assert waiting.where == {}
    assert waiting.visible(1, lambda where: 0) == (waiting.jobs, waiting.index)


def test_a_capable_machine_busy_holds_the_next_command_job_not_the_plain_one_behind() -> None:
    core = SchedulerCore(policy=Fcfs(), machines=[PLAIN, ABLE])
    for queued in (command("a", 2), command("b", 2), job("plain", 1, walltime=10.0)):
        core.submit(queued)
    # "b" waits for "a" on the one capable machine, and FCFS holds "plain" behind it.
    assert [s.job.id for s in core.schedule(0.0).starts] == ["a"]
    core.finished("a", 10.0)
    assert [s.job.id for s in core.schedule(10.0).starts] == ["b", "plain"]


def test_a_job_too_wide_for_the_capable_machines_is_hidden_until_they_grow() -> None:
    core = SchedulerCore(policy=Fcfs(), machines=[PLAIN, ABLE])
    core.submit(command("wide", 3))
    core.submit(job("next", 1, walltime=10.0))
    assert visible(core) == ["next"]  # FCFS would otherwise block "next" behind it
    core.machine_joined(Machine(id="able2", cpus=2, capabilities=CMD))
    assert visible(core) == ["wide", "next"]


def test_under_folding_a_malleable_job_needs_half_its_processes_on_capable_machines() -> None:
    core = SchedulerCore(policy=FcfsMalleable(), machines=[PLAIN, ABLE])
    core.submit(command("folds", 4, malleable=True))
    core.submit(command("rigid", 4))
    assert visible(core) == ["folds"]


def test_a_queue_of_jobs_that_need_nothing_is_the_queue_itself() -> None:
    core = SchedulerCore(policy=Fcfs(), machines=[PLAIN])
    core.submit(job("a", 1, walltime=10.0))
    snapshot = core.snapshot(0.0)
    assert snapshot.queue is core.queue
    assert snapshot.by_account is not None
