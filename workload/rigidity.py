"""Rigid jobs in a trace: a documented, seeded share of jobs that may never fold.

Every job is malleable by default (``model.job``; the FCFS-malleable paper
folds all jobs), but a real workload has jobs that cannot share CPUs with
themselves (hard real-time codes, licence-bound ones). Traces say nothing
about it, so :class:`RigidRule` marks a share of them rigid:

    with probability ``share``: the job is rigid (``malleable=False``)
    otherwise:                  it is malleable

Reproducibility, as for deadlines (``workload.deadlines``): each job's coin is
derived from ``(seed, job.id)`` alone, the top 53 bits of the first 8 bytes of
the BLAKE2b digest (``digest_size=8``) of the UTF-8 text ``"rigid:<seed>:<job
id>"``, times ``2**-53``. No generator state is carried from one job to the
next, so ``--jobs N`` agrees with the full run on those N jobs. The ``rigid:``
prefix keeps these coins independent of the deadline coins drawn with the same
``--seed``. ``share = 0`` leaves every job malleable; ``share = 1`` makes every
job rigid (FCFS-malleable is then plain FCFS). This module imports only
``model`` from the project.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from model.job import Job


@dataclass(frozen=True, slots=True, kw_only=True)
class RigidRule:
    """Make ``share`` of the jobs rigid, chosen by a coin seeded with ``seed``."""

    share: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"the rigid share must be in [0, 1], got {self.share!r}")

    def is_rigid(self, job_id: str) -> bool:
        digest = hashlib.blake2b(f"rigid:{self.seed}:{job_id}".encode(), digest_size=8).digest()
        coin = (int.from_bytes(digest, "big") >> 11) * 2.0**-53
        return coin < self.share


def mark_rigid(jobs: Sequence[Job], rule: RigidRule) -> list[Job]:
    """``jobs`` with the rule's share made rigid and every other one malleable."""
    out: list[Job] = []
    for job in jobs:
        malleable = not rule.is_rigid(job.id)
        out.append(job if job.malleable == malleable else replace(job, malleable=malleable))
    return out
