"""Policy names as the CLI spells them, and how to build each.

A policy spec is ``POLICY[:PRIORITY]``: ``easy``, ``easy:fairshare``,
``fcfs:multifactor``. The queue policies take any priority source; the
placement rule applies to every policy that places jobs itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.placement import Placement, PlacementRule
from scheduler.policies.conservative import ConservativeBackfill
from scheduler.policies.dpsa import Dpsa
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.eg_edf import EgEdf
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fcfs_malleable import FcfsMalleable
from scheduler.policies.fifo_backfill import FifoBackfill
from scheduler.policies.flexible import FlexibleBackfill
from scheduler.policies.tabu import EgEdfTabu
from scheduler.priority import PrioritySource
from scheduler.priority.fairshare import FairShare
from scheduler.priority.fifo import Fifo
from scheduler.priority.multifactor import MultiFactor
from scheduler.snapshot import Policy


class UnknownPolicyError(ValueError):
    """A policy or priority name nobody registered (the message lists the valid ones)."""


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    summary: str
    build: Callable[[PrioritySource, Placement, str], Policy]
    #: False for policies whose paper fixes the order (Flexible backfilling's own
    #: priority, FCFS-malleable's arrival order): ``POLICY:PRIORITY`` is refused.
    takes_priority: bool = True
    #: True for policies that run a job on one machine only (EG-EDF's model).
    single_machine: bool = False


POLICIES: dict[str, PolicyInfo] = {
    "fcfs": PolicyInfo(
        "fcfs",
        "first come, first served",
        lambda pr, pl, name: Fcfs(priority=pr, placement=pl, name=name),
    ),
    "fifo-backfill": PolicyInfo(
        "fifo-backfill",
        "FIFO, any job that fits starts (no reservation)",
        lambda pr, pl, name: FifoBackfill(priority=pr, placement=pl, name=name),
    ),
    "easy": PolicyInfo(
        "easy",
        "EASY backfilling (one reservation)",
        lambda pr, pl, name: EasyBackfill(priority=pr, placement=pl, name=name),
    ),
    "conservative": PolicyInfo(
        "conservative",
        "conservative backfilling (a reservation for every job)",
        lambda pr, pl, name: ConservativeBackfill(priority=pr, placement=pl, name=name),
    ),
    "dpsa-p": PolicyInfo(
        "dpsa-p",
        "DPSA: EASY reservation + best-fill subset search, ties by priority",
        lambda pr, pl, name: Dpsa(variant="p", priority=pr, placement=pl, name=name),
    ),
    "dpsa-n": PolicyInfo(
        "dpsa-n",
        "DPSA, search presorted by size ascending (favours narrow jobs)",
        lambda pr, pl, name: Dpsa(variant="n", priority=pr, placement=pl, name=name),
    ),
    "dpsa-w": PolicyInfo(
        "dpsa-w",
        "DPSA, search presorted by size descending (favours wide jobs)",
        lambda pr, pl, name: Dpsa(variant="w", priority=pr, placement=pl, name=name),
    ),
    "flexible": PolicyInfo(
        "flexible",
        "Flexible backfilling: aging + deadline + wait priority, EASY reservation",
        lambda _pr, pl, name: FlexibleBackfill(placement=pl, name=name),
        takes_priority=False,
    ),
    "eg-edf": PolicyInfo(
        "eg-edf",
        "EG-EDF: earliest gap in the schedule, else EDF insertion; one machine per job",
        lambda _pr, _pl, name: EgEdf(name=name),
        takes_priority=False,
        single_machine=True,
    ),
    "eg-edf-tabu": PolicyInfo(
        "eg-edf-tabu",
        "EG-EDF, then Tabu search moving delayed jobs into earlier gaps",
        lambda _pr, _pl, name: EgEdfTabu(name=name),
        takes_priority=False,
        single_machine=True,
    ),
    "fcfs-malleable": PolicyInfo(
        "fcfs-malleable",
        "FCFS with virtual malleability (shrink to MPL 2, expand when the queue empties)",
        lambda _pr, pl, name: FcfsMalleable(placement=pl, name=name),
        takes_priority=False,
    ),
}

PRIORITIES: dict[str, Callable[[], PrioritySource]] = {
    "fifo": Fifo,
    "fairshare": FairShare,
    "multifactor": MultiFactor,
}


def policy_info(spec: str) -> PolicyInfo:
    """The registry entry of ``spec``'s policy name."""
    name = spec.strip().partition(":")[0]
    info = POLICIES.get(name)
    if info is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}"
        )
    return info


def build_policy(spec: str, *, placement: PlacementRule = PlacementRule.FASTEST) -> Policy:
    """Build the policy named by ``spec`` (``POLICY[:PRIORITY]``)."""
    name, _, prio = spec.strip().partition(":")
    info = POLICIES.get(name)
    if info is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}"
        )
    if prio and not info.takes_priority:
        raise UnknownPolicyError(
            f"policy {name!r} has its own order from its paper; drop ':{prio}'"
        )
    make_priority = PRIORITIES.get(prio or "fifo")
    if make_priority is None:
        raise UnknownPolicyError(
            f"unknown priority source {prio!r}; choose one of: {', '.join(sorted(PRIORITIES))}"
        )
    # The display name carries the priority source so compare tables stay unambiguous.
    return info.build(make_priority(), Placement(rule=placement), spec.strip())
