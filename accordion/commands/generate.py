"""``accordion generate --preset NAME``: a paper's workload and cluster, written as files.

One preset today, ``eg-edf-grid`` (``workload.grid_preset``): the EG-EDF
paper's 150-machine grid as a cluster file and its 3,000 jobs as an SWF trace
whose header states the deadline rule. Kept apart from ``accordion/cli.py``,
whose ``generate`` command calls :func:`write_preset` when ``--preset`` is given.
"""

from __future__ import annotations

from pathlib import Path

from workload.grid_preset import PRESET_NAME, GridPreset, cluster_toml, header, records
from workload.swf import write_swf

PRESETS = (PRESET_NAME,)


def preset_paths(out: Path) -> tuple[Path, Path]:
    """The trace ``out`` and its cluster file beside it (``<stem>.cluster.toml``)."""
    stem = out.name.removesuffix(".gz").removesuffix(".swf")
    return out, out.with_name(f"{stem}.cluster.toml")


def write_preset(name: str, out: Path, *, seed: int, interarrival: float) -> tuple[Path, Path, int]:
    """Write the preset's trace and cluster file; returns both paths and the job count."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    preset = GridPreset(seed=seed, interarrival=interarrival)
    trace, cluster = preset_paths(out)
    trace.parent.mkdir(parents=True, exist_ok=True)
    count = write_swf(trace, records(preset), header=header(preset))
    cluster.write_text(cluster_toml(preset), encoding="utf-8")
    return trace, cluster, count
