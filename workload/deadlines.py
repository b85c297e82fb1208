"""Deadlines for traces that carry none: a documented, seeded rule.

Parallel Workloads Archive traces have no deadlines, yet the deadline
policies (Flexible backfilling, EG-EDF) and the deadline-miss metric need
them. The EG-EDF paper (Klusacek, Rudova, Baraglia, Pasquali and Capannini,
sec. 4, footnote 2) gave deadlines to 70 % of its synthetic jobs but does not
say how far from submission they lay. :class:`DeadlineRule` fixes that rule:

    with probability ``share``:  deadline = submit + slack * estimate,
                                 slack ~ U[slack_min, slack_max]
    otherwise:                   no deadline

Defaults and why:

* ``share = 0.7``: the paper's 70 %.
* ``slack`` in ``[1.5, 4.0]`` (mean 2.75). The paper gives no range, so the
  range is ours, chosen against the Flexible backfilling heuristic it is
  meant to exercise (sec. 3.1, ``k = 2``): a job enters the deadline window
  when ``now + Nxtime > deadline - k * Nxtime``, i.e. at once when ``slack <
  k + 1 = 3`` and after ``(slack - 3) * estimate`` of waiting otherwise, so
  the range holds jobs urgent from their submission as well as jobs that
  become urgent only after waiting. The lower end leaves even the tightest
  job half its estimate of waiting: with ``slack = 1`` only an immediate start
  meets the deadline, which tells policies apart by luck rather than by
  choice.
* ``estimate = "walltime"``: the slack multiplies the user's estimate
  (``Job.walltime``, at ``Job.ref_speed``), the only run time a user knows
  when stating a deadline and the only one a scheduler sees (the Deadline
  heuristic's ``Nxtime`` is built on it), so every deadline is one a user
  could have written at submission. The real run time (``"runtime"``) is
  available for the paper's setting, where estimates were exact (sec. 5:
  "precise job execution time was known"); with a trace's generous
  estimates it gives much tighter deadlines.

Reproducibility. Each job's two draws (the share coin and the slack) are
derived from ``(seed, job.id)`` alone: the 16-byte BLAKE2b digest
(``digest_size=16``) of the UTF-8 text ``"<seed>:<job id>"`` is read as two
big-endian 64-bit integers, whose top 53 bits, times ``2**-53``, are the
coin and the slack position, uniform floats in ``[0, 1)``. No generator
state is carried from one job to the next and the global ``random`` module
is never touched, so a job gets the same deadline whatever other jobs are
assigned with it and in whatever order: ``--jobs N`` (a prefix of the trace)
agrees with the full run on those N jobs, and the result is the same on
every platform and Python version.

A job's deadline is replaced (or removed, if the coin says so) whatever it
was: the output depends on the rule and the job alone, so assigning twice
with one rule changes nothing. This module imports only ``model`` from the
project.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from model.job import Job

DEFAULT_SHARE = 0.7
"""The EG-EDF paper's share of jobs with a deadline (sec. 4, footnote 2)."""
DEFAULT_SLACK_MIN = 1.5
"""Tightest deadline, in estimates after submission (ours; see the module docstring)."""
DEFAULT_SLACK_MAX = 4.0
"""Loosest deadline, in estimates after submission (ours; see the module docstring)."""

_UNIT = 2.0**-53
"""Scales a 53-bit integer to a float in [0, 1) exactly (a double's mantissa)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadlineRule:
    """Which jobs get a deadline and how far away (see the module docstring).

    Attributes:
        share: probability that a job gets a deadline, in ``[0, 1]``.
        slack_min: smallest slack factor, > 0. Below 1 a deadline can be
            unreachable even on an idle machine of the job's reference speed.
        slack_max: largest slack factor, >= ``slack_min``.
        estimate: the run time the slack multiplies: ``"walltime"`` (the
            user's estimate, default) or ``"runtime"`` (the real one; a job
            without one is an error).
        seed: selects the draws; any integer.
    """

    share: float = DEFAULT_SHARE
    slack_min: float = DEFAULT_SLACK_MIN
    slack_max: float = DEFAULT_SLACK_MAX
    estimate: Literal["walltime", "runtime"] = "walltime"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"deadline share must be in [0, 1], got {self.share!r}")
        if not (self.slack_min > 0 and math.isfinite(self.slack_min)):
            raise ValueError(f"slack_min must be a finite value > 0, got {self.slack_min!r}")
        if not (self.slack_max >= self.slack_min and math.isfinite(self.slack_max)):
            raise ValueError(
                f"slack_max must be finite and >= slack_min ({self.slack_min!r}), "
                f"got {self.slack_max!r}"
            )
        if self.estimate not in ("walltime", "runtime"):
            raise ValueError(f"estimate must be 'walltime' or 'runtime', got {self.estimate!r}")

    def draws(self, job_id: str) -> tuple[float, float]:
        """The job's two uniforms in ``[0, 1)``: the share coin and the slack position."""
        digest = hashlib.blake2b(f"{self.seed}:{job_id}".encode(), digest_size=16).digest()
        coin = int.from_bytes(digest[:8], "big") >> 11
        slack = int.from_bytes(digest[8:], "big") >> 11
        return coin * _UNIT, slack * _UNIT

    def deadline_for(self, job: Job) -> float | None:
        """The deadline this rule gives ``job``, or None."""
        coin, position = self.draws(job.id)
        if coin >= self.share:
            return None
        if self.estimate == "walltime":
            estimate = job.walltime
        elif job.runtime is not None:
            estimate = job.runtime
        else:
            raise ValueError(
                f"job {job.id!r} has no run time; deadlines on estimate='runtime' need one"
            )
        # slack_min + (non-negative) keeps slack >= slack_min exactly in floats, so
        # deadline >= submit + slack_min * estimate holds without tolerance; the min()
        # stops rounding from carrying it one ulp past slack_max.
        slack = min(self.slack_min + position * (self.slack_max - self.slack_min), self.slack_max)
        return job.submit + slack * estimate


def assign_deadlines(jobs: Sequence[Job], rule: DeadlineRule | None = None) -> list[Job]:
    """``jobs`` in the same order, each with the deadline ``rule`` gives it (or none)."""
    rule = rule if rule is not None else DeadlineRule()
    out: list[Job] = []
    for job in jobs:
        deadline = rule.deadline_for(job)
        out.append(job if deadline == job.deadline else replace(job, deadline=deadline))
    return out


HEADER_KEY = "Deadlines"
"""The SWF header key under which a generated trace states its deadline rule.

SWF has no deadline field, so a generated trace with deadlines (``accordion
generate --preset eg-edf-grid``) carries its rule instead, as
``; Deadlines: share=0.7 slack=1.5:4 estimate=runtime seed=3``; since every
job's deadline follows from the rule and its id alone, the rule is the
deadlines. Other SWF readers see one more comment line.
"""


def rule_to_text(rule: DeadlineRule) -> str:
    """The header value of ``rule`` (:data:`HEADER_KEY`); :func:`rule_from_text` reads it."""
    return (
        f"share={rule.share!r} slack={rule.slack_min!r}:{rule.slack_max!r} "
        f"estimate={rule.estimate} seed={rule.seed}"
    )


def rule_from_text(text: str) -> DeadlineRule:
    """Parse a :func:`rule_to_text` value; a ``ValueError`` quoting it when malformed."""
    try:
        fields = dict(item.split("=", 1) for item in text.split())
        lo, _, hi = fields["slack"].partition(":")
        estimate = fields["estimate"]
        if estimate not in ("walltime", "runtime"):
            raise ValueError(estimate)
        return DeadlineRule(
            share=float(fields["share"]),
            slack_min=float(lo),
            slack_max=float(hi),
            estimate="runtime" if estimate == "runtime" else "walltime",
            seed=int(fields["seed"]),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(
            f"deadline rule {text!r}: expected 'share=S slack=MIN:MAX estimate=walltime|runtime "
            f"seed=N' ({exc})"
        ) from None
