"""The agent and part lifecycles: every move of each table, and illegal moves raise."""

from __future__ import annotations

import pytest

from scheduler.core.job_lifecycle import IllegalTransitionError
from scheduler.live.agent_lifecycle import AgentInput, AgentLifecycle, AgentState
from scheduler.live.part_lifecycle import PartInput, PartLifecycle, PartState

A, In = AgentState, AgentInput


def agent_in(state: AgentState) -> AgentLifecycle:
    life = AgentLifecycle("inc-1")
    path = {
        A.ONLINE: [],
        A.SUSPECT: [In.MISSED],
        A.HELD: [In.WILL_HOLD],
        A.LOST: [In.WILL],
        A.GONE: [In.GOODBYE],
        A.DRAINING: [In.DRAIN],
        A.STOPPED: [In.STOP_HOLD],
    }[state]
    for step in path:
        life.apply(step)
    assert life.state is state
    return life


@pytest.mark.parametrize(
    ("start", "what", "end", "left", "joined"),
    [
        (A.ONLINE, In.HEARTBEAT, A.ONLINE, False, False),
        (A.ONLINE, In.MISSED, A.SUSPECT, False, False),
        (A.ONLINE, In.SILENT, A.LOST, True, False),
        (A.ONLINE, In.WILL, A.LOST, True, False),
        (A.ONLINE, In.GOODBYE, A.GONE, True, False),
        (A.ONLINE, In.REINCARNATED, A.LOST, True, False),
        (A.SUSPECT, In.HEARTBEAT, A.ONLINE, False, False),
        (A.SUSPECT, In.MISSED, A.SUSPECT, False, False),
        (A.SUSPECT, In.SILENT, A.LOST, True, False),
        (A.SUSPECT, In.WILL, A.LOST, True, False),
        (A.SUSPECT, In.GOODBYE, A.GONE, True, False),
        (A.LOST, In.HEARTBEAT, A.ONLINE, False, True),
        (A.LOST, In.REINCARNATED, A.ONLINE, False, True),
        (A.GONE, In.REINCARNATED, A.ONLINE, False, True),
        # Held for adoption: not gone from the cluster until the hold ends.
        (A.ONLINE, In.WILL_HOLD, A.HELD, False, False),
        (A.SUSPECT, In.WILL_HOLD, A.HELD, False, False),
        (A.HELD, In.REINCARNATED, A.ONLINE, False, False),
        (A.HELD, In.HEARTBEAT, A.ONLINE, False, False),
        (A.HELD, In.HOLD_ENDED, A.LOST, True, False),
        (A.HELD, In.GOODBYE, A.GONE, True, False),
        (A.HELD, In.WILL, A.HELD, False, False),
        (A.HELD, In.SILENT, A.HELD, False, False),
        (A.ONLINE, In.HOLD_ENDED, A.ONLINE, False, False),
        # Drained: it stays in the cluster, heard (so silence still loses it).
        (A.ONLINE, In.DRAIN, A.DRAINING, False, False),
        (A.SUSPECT, In.DRAIN, A.DRAINING, False, False),
        (A.DRAINING, In.HEARTBEAT, A.DRAINING, False, False),
        (A.DRAINING, In.MISSED, A.DRAINING, False, False),
        (A.DRAINING, In.RESUME, A.ONLINE, False, False),
        (A.DRAINING, In.SILENT, A.LOST, True, False),
        (A.DRAINING, In.GOODBYE, A.GONE, True, False),
        (A.DRAINING, In.WILL_HOLD, A.HELD, False, False),
        (A.HELD, In.DRAIN, A.HELD, False, False),
        (A.ONLINE, In.RESUME, A.ONLINE, False, False),
        # Stopped by its operator: held for its next incarnation, or lost at once.
        (A.ONLINE, In.STOP_HOLD, A.STOPPED, False, False),
        (A.DRAINING, In.STOP_HOLD, A.STOPPED, False, False),
        (A.ONLINE, In.STOP, A.LOST, True, False),
        (A.SUSPECT, In.STOP, A.LOST, True, False),
        (A.STOPPED, In.REINCARNATED, A.ONLINE, False, False),
        (A.STOPPED, In.HOLD_ENDED, A.LOST, True, False),
        (A.STOPPED, In.GOODBYE, A.GONE, True, False),
        # It said it is gone: a heartbeat in flight or its will does not bring it back.
        (A.STOPPED, In.HEARTBEAT, A.STOPPED, False, False),
        (A.STOPPED, In.WILL, A.STOPPED, False, False),
        (A.STOPPED, In.SILENT, A.STOPPED, False, False),
        (A.LOST, In.STOP, A.LOST, False, False),
        # Repeats and messages in flight change nothing.
        (A.LOST, In.WILL, A.LOST, False, False),
        (A.LOST, In.SILENT, A.LOST, False, False),
        (A.GONE, In.HEARTBEAT, A.GONE, False, False),
        (A.GONE, In.WILL, A.GONE, False, False),
    ],
)
def test_agent_table(
    start: AgentState, what: AgentInput, end: AgentState, left: bool, joined: bool
) -> None:
    life = agent_in(start)
    move = life.apply(what)
    assert (move.before, move.after) == (start, end)
    assert life.state is end
    assert (move.left, move.joined) == (left, joined)


def test_an_agent_that_left_remembers_why_and_a_new_incarnation_raises_the_generation() -> None:
    life = AgentLifecycle("inc-1")
    life.apply(In.SILENT)
    assert life.reason == "silent"
    life.apply(In.REINCARNATED)
    life.renew("inc-2")
    assert (life.state, life.incarnation, life.generation, life.reason) == (
        A.ONLINE,
        "inc-2",
        2,
        "",
    )


def test_the_agent_table_is_total() -> None:
    """Every input comes from the network and may arrive in any state: each pair is a
    move or ignored, so no message can make the scheduler raise."""
    for state in A:
        for what in In:
            agent_in(state).apply(what)


def test_a_pair_outside_the_table_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import scheduler.live.agent_lifecycle as module

    table = dict(module._TABLE)
    del table[(A.ONLINE, In.MISSED)]
    monkeypatch.setattr(module, "_TABLE", table)
    with pytest.raises(IllegalTransitionError, match="cannot take missed while online"):
        AgentLifecycle("inc-1").apply(In.MISSED)


@pytest.mark.parametrize(
    ("start", "what", "end"),
    [
        (PartState.STARTING, PartInput.STARTED, PartState.RUNNING),
        (PartState.PENDING, PartInput.STARTED, PartState.RUNNING),
        (PartState.RUNNING, PartInput.STARTED, PartState.RUNNING),
        (PartState.STARTING, PartInput.DONE, PartState.DONE),
        (PartState.RUNNING, PartInput.DONE, PartState.DONE),
        (PartState.RUNNING, PartInput.FAILED, PartState.FAILED),
        (PartState.PENDING, PartInput.LOST, PartState.LOST),
        (PartState.RUNNING, PartInput.CANCELLED, PartState.CANCELLED),
    ],
)
def test_part_table(start: PartState, what: PartInput, end: PartState) -> None:
    part = PartLifecycle("m", 2, 1, pending=start is PartState.PENDING)
    if start is PartState.RUNNING:
        part.apply(PartInput.STARTED)
    assert part.state is start
    assert part.apply(what)
    assert part.state is end


@pytest.mark.parametrize("final", [PartInput.DONE, PartInput.FAILED, PartInput.LOST])
def test_a_final_part_takes_no_more_moves(final: PartInput) -> None:
    part = PartLifecycle("m", 2, 1)
    part.apply(final)
    for what in PartInput:
        assert not part.apply(what)
    assert part.final


def test_stale_attempts() -> None:
    part = PartLifecycle("m", 2, 3)
    assert not part.is_stale(3)
    assert not part.is_stale(0)  # "not said": an agent from before fencing
    assert part.is_stale(2)
    assert part.is_stale(4)
    with pytest.raises(ValueError, match="attempt"):
        PartLifecycle("m", 2, 0)
