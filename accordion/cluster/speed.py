"""A cluster file's ``speed = "auto"``, measured once per command on this host.

``accordion up``, ``simulate`` and ``compare`` read cluster files; a machine
whose speed is ``"auto"`` gets this host's benchmark score
(``nodeagent.job.kernel``: the MPI-like ranks' kernel, relative to its stated
reference machine). It is measured once per command, at the first "auto"
machine, so the twin and every agent ``up`` starts plan with one number.
(An agent started alone with ``--speed auto`` measures itself instead and
announces its score and spread.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeagent.job.kernel import Score, benchmark


@dataclass(slots=True)
class HostSpeed:
    """Callable: the host's measured speed, benchmarked on the first call only."""

    measured: Score | None = field(default=None)

    def __call__(self) -> float:
        if self.measured is None:
            self.measured = benchmark()
        return round(self.measured.score, 3)
