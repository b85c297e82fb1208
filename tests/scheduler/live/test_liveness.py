"""The liveness deadlines: one lazy entry per agent, handed out in registration order,
moving agents exactly as a walk of every agent on every tick did."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from broker.messages import AgentOffline, AgentOnline, Heartbeat, MachineSpec
from broker.topics import Topics
from scheduler.core.core import SchedulerCore
from scheduler.live import agents
from scheduler.live.agent_lifecycle import AgentInput, AgentState
from scheduler.live.context import Context
from scheduler.live.coupling import agent_moved
from scheduler.live.liveness import Deadlines
from scheduler.live.settings import ActorSettings
from scheduler.policies.fcfs import Fcfs
from scheduler.runtime.exporter import SchedulerMetrics
from scheduler.runtime.journal import Journal


def test_agents_come_due_once_in_registration_order() -> None:
    d = Deadlines()
    d.watch("b", 5.0)
    d.watch("a", 3.0)
    d.watch("c", 9.0)
    assert d.due(2.0) == []
    # Both due by 6: listed as registered (b before a), not by deadline.
    assert d.due(6.0) == ["b", "a"]
    assert d.due(6.0) == []  # taken off: the check watches again those that need it
    assert len(d) == 1
    assert d.next_due() == 9.0


def test_a_later_deadline_is_absorbed_and_an_earlier_one_wins() -> None:
    d = Deadlines()
    d.watch("a", 5.0)
    d.watch("a", 8.0)  # later (a heartbeat): the entry at 5 stays, the check looks then
    assert d.next_due() == 5.0
    d.watch("a", 2.0)  # earlier (heard again after a suspicion): a second entry
    assert d.due(2.0) == ["a"]
    assert d.due(10.0) == []  # the superseded entry at 5 is skipped
    assert len(d) == 0
    assert d.next_due() is None


def test_a_deadline_that_is_due_exactly_now_is_due() -> None:
    d = Deadlines()
    d.watch("a", 4.0)
    assert d.due(4.0) == ["a"]


# -- the deadlines against a walk of every agent ----------------------------------------


AGENTS = ("a", "b", "c")
Step = tuple[str, str, float]


def _context(journal: Journal) -> Context:
    cordoned: set[str] = set()
    return Context(
        core=SchedulerCore(policy=Fcfs(), machines=(), cordoned=cordoned),
        settings=ActorSettings(),
        journal=journal,
        metrics=SchedulerMetrics(CollectorRegistry()),
        topics=Topics("test/v1"),
        time_scale=1.0,
        wall=lambda: 1000.0,
        cordoned=cordoned,
    )


def _walk(ctx: Context, now: float) -> None:
    """The liveness check as it was: every agent looked at on every tick."""
    s = ctx.settings
    lose, suspect = s.silence_limit * ctx.time_scale, s.suspect_limit * ctx.time_scale
    ended = []
    for agent, ag in ctx.agents.items():
        until = ag.life.held_until
        if ag.life.held and until is not None and now >= until:
            ended.append((agent, ag.life.apply(AgentInput.HOLD_ENDED)))
    for agent, move in ended:
        agent_moved(ctx, agent, move, now, "will")
    for agent, ag in list(ctx.agents.items()):
        if not ag.life.heard:
            continue
        silent = now - max(ag.last_heartbeat, ctx.heard_since)
        if silent > lose:
            agent_moved(ctx, agent, ag.life.apply(AgentInput.SILENT), now, "silence")
        elif silent > suspect and ag.life.state is AgentState.ONLINE:
            agent_moved(ctx, agent, ag.life.apply(AgentInput.MISSED), now, "silence")


def _apply(ctx: Context, step: Step, now: float, seq: int) -> None:
    what, agent, _dt = step
    match what:
        case "register":
            online = AgentOnline(
                machine=MachineSpec(id=agent, cpus=2),
                incarnation=f"i{seq}",
                running=(),
                lease=8.0,
                adopts=seq % 2 == 0,
            )
            agents.on_state(ctx, agent, online, now)
        case "beat":
            agents.on_event(ctx, agent, Heartbeat(agent_id=agent, seq=seq, running=()), now)
        case "will" | "stop":
            if agent in ctx.agents:
                inc = ctx.agents[agent].life.incarnation
                reason = "lost" if what == "will" else "stopping"
                offline = AgentOffline(agent_id=agent, incarnation=inc, reason=reason)
                agents.on_state(ctx, agent, offline, now)
        case "drain" | "resume":
            if agent in ctx.agents:
                # The same incarnation announcing again that it drains, or no longer.
                again = AgentOnline(
                    machine=MachineSpec(id=agent, cpus=2),
                    incarnation=ctx.agents[agent].life.incarnation,
                    running=(),
                    lease=8.0,
                    adopts=ctx.agents[agent].life.adopts,
                    draining=what == "drain",
                )
                agents.on_state(ctx, agent, again, now)
        case "reconnect":
            ctx.heard_since = now


def _seen(ctx: Context) -> dict[str, tuple[str, float | None]]:
    return {a: (ag.life.state.value, ag.life.held_until) for a, ag in ctx.agents.items()}


steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["register", "beat", "beat", "beat", "will", "stop", "drain", "resume", "reconnect"]
            + ["tick"] * 3
        ),
        st.sampled_from(AGENTS),
        st.floats(min_value=0.0, max_value=5.0),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_deadlines_move_agents_as_a_walk_of_all_of_them_would(script: list[Step]) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        Journal(Path(tmp) / "d.sqlite") as j1,
        Journal(Path(tmp) / "w.sqlite") as j2,
    ):
        by_deadlines, by_walk = _context(j1), _context(j2)
        now = 0.0
        for seq, step in enumerate(script):
            now += step[2]
            if step[0] == "tick":
                agents.check_liveness(by_deadlines, now)
                _walk(by_walk, now)
            else:
                _apply(by_deadlines, step, now, seq)
                _apply(by_walk, step, now, seq)
            assert _seen(by_deadlines) == _seen(by_walk)
            assert by_deadlines.cordoned == by_walk.cordoned
