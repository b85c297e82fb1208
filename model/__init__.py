"""The pure domain model: jobs, machines, allocations, the execution model, metrics.

Nothing here does I/O. The scheduler core, its policies, the twin and the live
agents all build on these value types, so a number means the same thing
everywhere: policies see the same jobs and machines whoever calls them, and
how fast a job progresses is one function for the twin's modelled agents and
the live sleep workload alike.
"""

from model.allocation import Allocation
from model.job import Job
from model.machine import Machine, Part, parts_cpus

__all__ = ["Allocation", "Job", "Machine", "Part", "parts_cpus"]
