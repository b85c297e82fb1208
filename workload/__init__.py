"""Trace and cluster files: pure parsing over the model.

``workload.swf`` reads and writes the Standard Workload Format of the Parallel
Workloads Archive, ``workload.swf_rules`` turns its records into ``model.Job``
by stated rules (``workload.swf_load`` a whole trace, ``workload.swf_schedule``
a schedule back into records), and ``workload.cluster``
reads machine descriptions (a TOML file, or an SWF header). Nothing here
imports the scheduler, the twin, the agents or the CLI.
"""

from workload.cluster import (
    ClusterError,
    ClusterSpec,
    cluster_from_header,
    load_cluster,
    parse_cluster,
)
from workload.swf import (
    SwfError,
    SwfHeader,
    SwfReader,
    SwfRecord,
    open_swf,
    read_header,
    read_swf,
    write_swf,
)
from workload.swf_load import LoadResult, TraceOrderError, iter_jobs, load_jobs
from workload.swf_rules import DEFAULT_RULES, AdjustReason, SkipReason, SwfRules, record_to_job
from workload.swf_schedule import ScheduleRow, records_from_schedule

__all__ = [
    "DEFAULT_RULES",
    "AdjustReason",
    "ClusterError",
    "ClusterSpec",
    "LoadResult",
    "ScheduleRow",
    "SkipReason",
    "SwfError",
    "SwfHeader",
    "SwfReader",
    "SwfRecord",
    "SwfRules",
    "TraceOrderError",
    "cluster_from_header",
    "iter_jobs",
    "load_cluster",
    "load_jobs",
    "open_swf",
    "parse_cluster",
    "read_header",
    "read_swf",
    "record_to_job",
    "records_from_schedule",
    "write_swf",
]
