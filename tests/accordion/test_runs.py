"""The twin pipeline (``accordion.experiments.runs``): a cluster's reference speed reaches jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from accordion.errors import UserError
from accordion.experiments.runs import load_workload, run_policy
from workload.swf_rules import SwfRules

# Two jobs of 100 s at the reference speed, asking 200 s; 4 processes each.
TRACE = "".join(
    f"{n} {submit} -1 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n"
    for n, submit in ((1, 0), (2, 10))
)


def _files(tmp_path: Path, reference_speed: float) -> tuple[Path, Path]:
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 8\n" + TRACE)
    cluster = tmp_path / "c.toml"
    cluster.write_text(
        f'name = "lab"\nreference_speed = {reference_speed}\n'
        '[[machine]]\nname = "fast"\ncpus = 8\nspeed = 4.0\n'
    )
    return trace, cluster


@pytest.mark.parametrize(("reference_speed", "run"), [(1.0, 25.0), (2.0, 50.0)])
def test_cluster_reference_speed_scales_run_times(
    tmp_path: Path, reference_speed: float, run: float
) -> None:
    trace, cluster = _files(tmp_path, reference_speed)
    workload = load_workload(trace, cluster=cluster)
    assert {j.ref_speed for j in workload.jobs} == {reference_speed}
    outcomes = run_policy(workload, "easy").result.outcomes
    # 100 s measured at the reference speed take 100 * reference / 4 on the machine.
    assert sorted(o.end - o.start for o in outcomes) == [run, run]


def test_rules_with_another_reference_speed_are_refused(tmp_path: Path) -> None:
    trace, cluster = _files(tmp_path, 2.0)
    with pytest.raises(UserError, match="reference_speed 2 disagrees"):
        load_workload(trace, cluster=cluster, rules=SwfRules(ref_speed=3.0))
