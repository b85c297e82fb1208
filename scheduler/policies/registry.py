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
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fifo_backfill import FifoBackfill
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
}

PRIORITIES: dict[str, Callable[[], PrioritySource]] = {
    "fifo": Fifo,
    "fairshare": FairShare,
    "multifactor": MultiFactor,
}


def build_policy(spec: str, *, placement: PlacementRule = PlacementRule.FASTEST) -> Policy:
    """Build the policy named by ``spec`` (``POLICY[:PRIORITY]``)."""
    name, _, prio = spec.strip().partition(":")
    info = POLICIES.get(name)
    if info is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}"
        )
    make_priority = PRIORITIES.get(prio or "fifo")
    if make_priority is None:
        raise UnknownPolicyError(
            f"unknown priority source {prio!r}; choose one of: {', '.join(sorted(PRIORITIES))}"
        )
    # The display name carries the priority source so compare tables stay unambiguous.
    return info.build(make_priority(), Placement(rule=placement), spec.strip())
