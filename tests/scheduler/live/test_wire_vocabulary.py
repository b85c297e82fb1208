"""The wire's vocabularies (``broker.vocabulary``) and the scheduler's agree.

``broker`` imports nothing of the project, so the wire keeps its own job states
and refusal codes; the live scheduler converts by value. These tests hold the
two sides equal, and the metric labels to the codes.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from broker.vocabulary import BadMessage, JobEventKind, Rejection, WaitReason
from broker.vocabulary import JobState as WireState
from scheduler.core.answers import RejectCode
from scheduler.core.job_lifecycle import JobState, is_final
from scheduler.live.context import ended_event
from scheduler.planning.wait_reasons import WaitWhy
from scheduler.runtime.exporter import SchedulerMetrics


def test_the_wire_has_the_lifecycles_states() -> None:
    assert [s.value for s in WireState] == [s.value for s in JobState]
    assert {s.value for s in WireState if s.final} == {s.value for s in JobState if is_final(s)}


@pytest.mark.parametrize("state", [s for s in JobState if is_final(s)], ids=str)
def test_a_job_that_ends_is_told_by_the_event_of_its_final_state(state: JobState) -> None:
    assert ended_event(state).state.value == state.value


def test_every_event_kind_leaves_the_job_in_a_state() -> None:
    assert {kind.state for kind in JobEventKind} == set(WireState)
    # Five kinds are not named after the state they leave the job in.
    assert [k for k in JobEventKind if k.state.value != k.value] == [
        JobEventKind.RESIZED,
        JobEventKind.REQUEUED,
        JobEventKind.HELD,
        JobEventKind.ADOPTED,
        JobEventKind.PLANNED,
    ]


def test_the_cores_rejections_are_codes_of_the_wire() -> None:
    assert {Rejection(code.value) for code in RejectCode} <= set(Rejection)


def test_every_code_is_a_metric_label_from_the_start() -> None:
    metrics = SchedulerMetrics(CollectorRegistry())
    sample = metrics.registry.get_sample_value
    for code in Rejection:
        assert sample("accordion_scheduler_rejections_total", {"reason": code.value}) == 0
    for bad in BadMessage:
        assert sample("accordion_scheduler_bad_messages_total", {"reason": bad.value}) == 0


def test_the_wire_has_every_reason_the_scheduler_gives() -> None:
    assert [r.value for r in WaitWhy] == [r.value for r in WaitReason]
