"""The live runtime runs the scheduler's execution model: the agent reads it from the
StartPart, and the job process gets it on its command line, so live and twin runs of
one replay use the same model."""

from __future__ import annotations

import argparse

import pytest

from broker.messages import ExecutionSpec
from model.execution import DEFAULT_MODEL, ExecutionModel, ModelKind
from nodeagent.agent.node_agent import execution_model
from nodeagent.launch.spawn import Launch, LaunchError


def launch(model: ExecutionModel) -> Launch:
    return Launch(
        agent="node1", job_id="j7", procs=4, cpus=2, pace=1.5, work=100.0, execution=model
    )


@pytest.mark.parametrize(
    "model",
    [
        DEFAULT_MODEL,
        ExecutionModel(kind=ModelKind.LINEAR, overhead=0.25),
        ExecutionModel(kind=ModelKind.MAX, overhead=0.1),
        ExecutionModel(kind=ModelKind.PAPER, ov_min=0.2, ov_max=0.9, seed=11),
    ],
)
def test_the_model_survives_the_command_line(model: ExecutionModel) -> None:
    original = launch(model)
    parser = argparse.ArgumentParser()
    Launch.add_arguments(parser)
    parsed = Launch.from_args(parser.parse_args(original.argv()))
    assert parsed.execution == model
    # The job process computes exactly the rate the scheduler planned with.
    expected = model.rate(procs=4, cpus=2, speed=1.5, ref_speed=1.0, cpu_util=1.0, job_id="j7")
    assert parsed.rate() == original.rate() == expected


def test_models_differ_where_the_formulas_do() -> None:
    linear = launch(DEFAULT_MODEL).rate()
    paper = launch(ExecutionModel(kind=ModelKind.PAPER, ov_min=0.5, ov_max=0.5)).rate()
    # At MPL 2, u = 1: linear doubles the time; the paper's m*u + OV adds OV on top.
    assert linear == pytest.approx(1.5 / 2.0)
    assert paper == pytest.approx(1.5 / 2.5)


def test_the_agent_reads_the_model_of_a_start() -> None:
    assert execution_model(None) == DEFAULT_MODEL
    spec = ExecutionSpec(kind="max", overhead=0.5)
    assert execution_model(spec) == ExecutionModel(kind=ModelKind.MAX, overhead=0.5)
    with pytest.raises(LaunchError, match="execution model"):
        execution_model(ExecutionSpec(kind="paper", ov_min=2.0, ov_max=1.0))
