"""The live runtime runs the scheduler's execution model: the agent reads it from the
StartPart, and the job process gets it on its command line, both through the one
conversion ``model.execution.model_of``."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from broker.messages import ExecutionSpec
from model.execution import (
    DEFAULT_MODEL,
    ExecutionModel,
    ExecutionModelError,
    ModelKind,
    model_of,
)
from nodeagent.launch.contract import Launch, LaunchError


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


def test_one_conversion_reads_the_wire_and_the_model_itself() -> None:
    assert model_of(None) == DEFAULT_MODEL  # a StartPart that names none
    spec = ExecutionSpec(kind="max", overhead=0.5)
    assert model_of(spec) == ExecutionModel(kind=ModelKind.MAX, overhead=0.5)
    model = ExecutionModel(kind=ModelKind.PAPER, ov_min=0.2, ov_max=0.9, seed=11)
    assert model_of(model) == model
    with pytest.raises(ExecutionModelError, match=r"execution model: the OV range"):
        model_of(ExecutionSpec(kind="paper", ov_min=2.0, ov_max=1.0))
    odd = argparse.Namespace(kind="fast", overhead=0.0, ov_min=0.0, ov_max=1.0, seed=0)
    kinds = r"\(one of linear, max, paper, calibrated\)"
    with pytest.raises(ExecutionModelError, match=r"no kind 'fast' " + kinds):
        model_of(odd)


def test_the_wire_carries_every_parameter_of_the_model() -> None:
    # model_of reads the wire's struct by the model's names: one without the other
    # would drop a parameter between the scheduler and the agents.
    # Except the calibrated model's per-application table, which does not travel:
    # the live scheduler refuses --execution-model calibrated until it does.
    names = {f.name for f in dataclasses.fields(ExecutionModel)} - {"calibration"}
    assert set(ExecutionSpec.__struct_fields__) == names
    wire = ExecutionSpec(kind="paper", overhead=0.0, ov_min=0.25, ov_max=0.5, seed=3)
    model = dataclasses.asdict(model_of(wire))
    assert {n: model[n] for n in names} == {n: getattr(wire, n) for n in names}


def test_a_bad_model_on_the_command_line_is_a_launch_error() -> None:
    parser = argparse.ArgumentParser()
    Launch.add_arguments(parser)
    argv = [*launch(DEFAULT_MODEL).argv(), "--execution-model=paper", "--ov-min=2", "--ov-max=1"]
    with pytest.raises(LaunchError, match="execution model"):
        Launch.from_args(parser.parse_args(argv))
