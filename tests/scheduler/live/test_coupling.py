"""The coupling tables: every row does what it says, and what has no row raises.

Each test drives a real :class:`~scheduler.live.context.Context` (a real core,
a journal on disk, the runtime's metrics) through the agents' handlers to put
an agent or a part in the state a row starts from, applies the row's input
through ``scheduler.live.coupling`` and reads the machine, the parts and the
job back from the core, the placements and the journal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from broker.messages import (
    AgentOffline,
    AgentOnline,
    CancelPart,
    JobSpec,
    MachineSpec,
    PartStarted,
    StartPart,
    SubmitJobs,
)
from broker.topics import Topics
from scheduler.core.core import SchedulerCore
from scheduler.core.job_lifecycle import IllegalTransitionError, JobState
from scheduler.live import agents, reconcile, requests
from scheduler.live.agent_lifecycle import AgentInput, AgentLifecycle, AgentState, Move
from scheduler.live.context import Context
from scheduler.live.coupling import (
    AGENT_RULES,
    PART_RULES,
    PartEvent,
    ToJob,
    ToMachine,
    ToParts,
    agent_moved,
    agent_rule,
    part_event,
    part_rule,
)
from scheduler.live.dispatch import dispatch
from scheduler.live.part_lifecycle import PartInput, PartState
from scheduler.live.settings import ActorSettings
from scheduler.policies.fcfs import Fcfs
from scheduler.runtime.exporter import SchedulerMetrics
from scheduler.runtime.journal import Journal

TOPICS = Topics("test/v1")

#: The state a live part is in after each input of its own table.
_TAKES = {
    PartInput.STARTED: PartState.RUNNING,
    PartInput.DONE: PartState.DONE,
    PartInput.FAILED: PartState.FAILED,
    PartInput.CANCELLED: PartState.CANCELLED,
    PartInput.LOST: PartState.LOST,
}
LEASE = 8.0
JOB = "j"


class Rig:
    """A context with two agents, ``a`` and ``b`` (2 CPUs each), and job ``j`` on both."""

    def __init__(self, journal: Journal) -> None:
        self.cordoned: set[str] = set()
        self.core = SchedulerCore(policy=Fcfs(), machines=(), cordoned=self.cordoned)
        self.journal = journal
        self.ctx = Context(
            core=self.core,
            settings=ActorSettings(job_events="all"),
            journal=journal,
            metrics=SchedulerMetrics(CollectorRegistry()),
            topics=TOPICS,
            time_scale=1.0,
            wall=lambda: 1000.0,
            cordoned=self.cordoned,
        )
        self.now = 1.0

    def register(self, agent: str, incarnation: str = "i1") -> None:
        online = AgentOnline(
            machine=MachineSpec(id=agent, cpus=2),
            incarnation=incarnation,
            running=(),
            lease=LEASE,
            adopts=True,
        )
        agents.on_state(self.ctx, agent, online, self.now)

    def start_job(self) -> None:
        spec = JobSpec(id=JOB, procs=4, walltime=100.0, work=50.0)
        requests.handle(self.ctx, SubmitJobs(jobs=(spec,)), self.now, None)
        dispatch(self.ctx, self.core.schedule(self.now), self.now)
        assert self.core.state_of(JOB) is JobState.RUNNING
        self.ctx.out.take()

    def agent_state(self, agent: str) -> AgentState:
        return self.ctx.agents[agent].life.state

    def part(self, agent: str) -> PartState:
        return self.ctx.placements[JOB].parts[agent].state

    def sent(self, kind: type) -> list[tuple[str, object]]:
        return [(o.topic, o.message) for o in self.ctx.out.items if isinstance(o.message, kind)]

    def events(self) -> list[str]:
        return [e.event for e in self.journal.job_events([JOB])]


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "j.sqlite") as j:
        yield j


@pytest.fixture
def rig(journal: Journal) -> Rig:
    r = Rig(journal)
    r.register("a")
    r.register("b")
    r.start_job()
    return r


def bring_agent(r: Rig, state: AgentState) -> None:
    """Agent ``a`` into ``state`` by the inputs that lead there."""
    life = r.ctx.agents["a"].life
    if state is AgentState.SUSPECT:
        agent_moved(r.ctx, "a", life.apply(AgentInput.MISSED), r.now, "silence")
    elif state is AgentState.HELD:
        agents.on_state(
            r.ctx, "a", AgentOffline(agent_id="a", incarnation="i1", reason="lost"), r.now
        )
    elif state is AgentState.LOST:
        agent_moved(r.ctx, "a", life.apply(AgentInput.SILENT), r.now, "silence")
    elif state is AgentState.GONE:
        agent_moved(r.ctx, "a", life.apply(AgentInput.GOODBYE), r.now, "goodbye")
    elif state is AgentState.DRAINING:
        agent_moved(r.ctx, "a", life.apply(AgentInput.DRAIN), r.now, "drain")
    elif state is AgentState.STOPPED:
        agents.on_state(
            r.ctx, "a", AgentOffline(agent_id="a", incarnation="i1", reason="stopping"), r.now
        )
    assert r.agent_state("a") is state


# -- the rules, written out as the design states them -------------------------------

A, In, M, Ps = AgentState, AgentInput, ToMachine, ToParts
LOSE = (M.LEAVE, Ps.LOSE)
#: An operator's stop: the same rule, nothing charged.
LOSE_BY_STOP = (M.LEAVE, Ps.LOSE_BY_STOP)

#: What each agent move does (DESIGN.md, "Trust and faults"; the README's faults list).
EXPECTED_AGENT = {
    (A.ONLINE, In.HEARTBEAT): (M.NOTHING, Ps.NOTHING),
    (A.ONLINE, In.MISSED): (M.CORDON, Ps.NOTHING),
    (A.ONLINE, In.SILENT): LOSE,
    (A.ONLINE, In.WILL): LOSE,
    (A.ONLINE, In.GOODBYE): LOSE,
    (A.ONLINE, In.REINCARNATED): LOSE,
    (A.ONLINE, In.WILL_HOLD): (M.CORDON, Ps.HOLD),
    (A.SUSPECT, In.HEARTBEAT): (M.UNCORDON, Ps.NOTHING),
    (A.SUSPECT, In.MISSED): (M.NOTHING, Ps.NOTHING),
    (A.SUSPECT, In.SILENT): LOSE,
    (A.SUSPECT, In.WILL): LOSE,
    (A.SUSPECT, In.GOODBYE): LOSE,
    (A.SUSPECT, In.REINCARNATED): LOSE,
    (A.SUSPECT, In.WILL_HOLD): (M.CORDON, Ps.HOLD),
    (A.HELD, In.HEARTBEAT): (M.UNCORDON, Ps.NOTHING),
    (A.HELD, In.REINCARNATED): (M.UNCORDON, Ps.OFFER),
    (A.HELD, In.HOLD_ENDED): LOSE,
    (A.HELD, In.GOODBYE): LOSE,
    # Drained: cordoned, its parts untouched; silence, a will or a new process as ever.
    (A.ONLINE, In.DRAIN): (M.CORDON, Ps.NOTHING),
    (A.SUSPECT, In.DRAIN): (M.CORDON, Ps.NOTHING),
    (A.DRAINING, In.RESUME): (M.UNCORDON, Ps.NOTHING),
    (A.DRAINING, In.HEARTBEAT): (M.NOTHING, Ps.NOTHING),
    (A.DRAINING, In.SILENT): LOSE,
    (A.DRAINING, In.WILL): LOSE,
    (A.DRAINING, In.GOODBYE): LOSE,
    (A.DRAINING, In.REINCARNATED): LOSE,
    (A.DRAINING, In.WILL_HOLD): (M.CORDON, Ps.HOLD),
    # An operator's stop (DESIGN.md: it never costs a job its requeue budget).
    (A.ONLINE, In.STOP): LOSE_BY_STOP,
    (A.SUSPECT, In.STOP): LOSE_BY_STOP,
    (A.DRAINING, In.STOP): LOSE_BY_STOP,
    (A.ONLINE, In.STOP_HOLD): (M.CORDON, Ps.HOLD),
    (A.SUSPECT, In.STOP_HOLD): (M.CORDON, Ps.HOLD),
    (A.DRAINING, In.STOP_HOLD): (M.CORDON, Ps.HOLD),
    (A.STOPPED, In.REINCARNATED): (M.UNCORDON, Ps.OFFER_AFTER_STOP),
    (A.STOPPED, In.HOLD_ENDED): LOSE_BY_STOP,
    (A.STOPPED, In.GOODBYE): LOSE_BY_STOP,
    (A.LOST, In.HEARTBEAT): (M.JOIN, Ps.NOTHING),
    (A.LOST, In.REINCARNATED): (M.JOIN, Ps.NOTHING),
    (A.GONE, In.REINCARNATED): (M.JOIN, Ps.NOTHING),
}

E, S, J = PartEvent, PartState, ToJob
LIVE = (S.STARTING, S.PENDING, S.RUNNING)
#: What each part event does, by (event, state, start sent again): (part becomes, job).
EXPECTED_PART: dict[tuple[PartEvent, PartState, bool], tuple[PartState | None, ToJob]] = {}
for again in (False, True):
    for state in LIVE:
        EXPECTED_PART |= {
            (E.STARTED, state, again): (S.RUNNING, J.GOES_ON),
            (E.DONE, state, again): (S.DONE, J.FINISHES),
            (E.FAILED, state, again): (S.FAILED, J.FAILS),
            (E.FENCED, state, again): (S.LOST, J.REQUEUED),
            (E.GIVEN_UP, state, again): (S.LOST, J.AGENT_LEAVES),
            (E.STOPPED, state, again): (S.LOST, J.REQUEUED_BY_STOP),
            (E.ADOPTED, state, again): (None, J.ADOPTED),
        }
    EXPECTED_PART |= {
        # Refused before its fork and never heard started: it never ran, uncharged.
        (E.FENCED_BEFORE_FORK, S.STARTING, again): (S.LOST, J.REQUEUED_UNCHARGED),
        (E.FENCED_BEFORE_FORK, S.PENDING, again): (S.LOST, J.REQUEUED),
        (E.FENCED_BEFORE_FORK, S.RUNNING, again): (S.LOST, J.REQUEUED),
        (E.VANISHED, S.RUNNING, again): (None, J.REQUEUED),
        (E.UNLISTED_AFTER_RESTART, S.RUNNING, again): (None, J.REQUEUED),
        (E.NOT_REANNOUNCED, S.PENDING, again): (None, J.REQUEUED),
        (E.NOT_ADOPTED, S.PENDING, again): (None, J.REQUEUED),
        (E.NOT_ADOPTED, S.RUNNING, again): (None, J.REQUEUED),
        (E.NOT_ADOPTED_AFTER_STOP, S.PENDING, again): (None, J.REQUEUED_BY_STOP),
        (E.NOT_ADOPTED_AFTER_STOP, S.RUNNING, again): (None, J.REQUEUED_BY_STOP),
        (E.NOT_REANNOUNCED_AFTER_STOP, S.PENDING, again): (None, J.REQUEUED_BY_STOP),
    }
EXPECTED_PART |= {
    # A lost StartPart, past the silence limit: uncharged (a start sent again is the
    # business of the rule that sent it, not of this one).
    (E.NEVER_REACHED, S.STARTING, False): (None, J.REQUEUED_UNCHARGED),
    # A start in flight at a restart goes again, once; then the grace bounds the wait.
    (E.UNLISTED_AFTER_RESTART, S.PENDING, False): (None, J.START_SENT_AGAIN),
    (E.UNLISTED_AFTER_RESTART, S.PENDING, True): (None, J.GOES_ON),
    # Not adopted and never started: the new incarnation gets its start, once.
    (E.NOT_ADOPTED, S.STARTING, False): (None, J.START_SENT_AGAIN),
    (E.NOT_ADOPTED, S.STARTING, True): (None, J.REQUEUED),
    (E.NOT_ADOPTED_AFTER_STOP, S.STARTING, False): (None, J.START_SENT_AGAIN),
    (E.NOT_ADOPTED_AFTER_STOP, S.STARTING, True): (None, J.REQUEUED_BY_STOP),
}


def test_the_agent_table_is_the_rules() -> None:
    assert {k: (r.machine, r.parts) for k, r in AGENT_RULES.items()} == EXPECTED_AGENT


def test_the_part_table_is_the_rules() -> None:
    got = {k: (None if r.part is None else _TAKES[r.part], r.job) for k, r in PART_RULES.items()}
    assert got == EXPECTED_PART


# -- the agent table ---------------------------------------------------------------


def every_agent_pair() -> list[tuple[AgentState, AgentInput]]:
    return [(s, i) for s in AgentState for i in AgentInput]


@pytest.mark.parametrize(("state", "what"), every_agent_pair())
def test_every_move_the_agent_table_makes_has_a_row_and_no_other(
    state: AgentState, what: AgentInput
) -> None:
    life = AgentLifecycle("i1")
    life.state = state
    try:
        move = life.apply(what)
    except IllegalTransitionError:
        assert (state, what) not in AGENT_RULES
        return
    if move.changed:
        assert (state, what) in AGENT_RULES
    rule = agent_rule(move)
    # The machine leaves the cluster exactly when the agent table says it left, and
    # then its jobs go by the lost-agent rule (uncharged after an operator's stop);
    # it joins exactly when it joined.
    loses = rule.parts in (ToParts.LOSE, ToParts.LOSE_BY_STOP)
    assert (rule.machine is ToMachine.LEAVE) == move.left == loses
    assert (rule.machine is ToMachine.JOIN) == move.joined
    # Stopped or a stop's rule: the rule is uncharged exactly when the agent was stopped.
    stop = state is AgentState.STOPPED or what is AgentInput.STOP
    assert stop == (rule.parts in (ToParts.LOSE_BY_STOP, ToParts.OFFER_AFTER_STOP)) or (
        rule.parts is ToParts.NOTHING
    )


@pytest.mark.parametrize(("before", "what"), sorted(AGENT_RULES))
def test_each_agent_row_does_what_it_says(rig: Rig, before: AgentState, what: AgentInput) -> None:
    rule = AGENT_RULES[(before, what)]
    bring_agent(rig, before)
    was_in = "a" in {m.id for m in rig.core.machines}
    was_cordoned = "a" in rig.cordoned
    job_was = rig.core.state_of(JOB)
    events_were = rig.events()
    ag = rig.ctx.agents["a"]
    if what in (AgentInput.WILL_HOLD, AgentInput.STOP_HOLD):
        ag.life.held_until = rig.now + LEASE  # what the handler sets with the move
    offers = (ToParts.OFFER, ToParts.OFFER_AFTER_STOP)
    listed = {JOB: (2, 1)} if rule.parts in offers else None
    agent_moved(rig.ctx, "a", ag.life.apply(what), rig.now, "will", listed=listed)

    in_cluster = "a" in {m.id for m in rig.core.machines}
    match rule.machine:
        case ToMachine.NOTHING:
            assert (in_cluster, "a" in rig.cordoned) == (was_in, was_cordoned)
        case ToMachine.CORDON:
            assert "a" in rig.cordoned
            assert rig.core.snapshot(rig.now).free["a"] == 0
        case ToMachine.UNCORDON:
            assert "a" not in rig.cordoned
            assert in_cluster
        case ToMachine.LEAVE:
            assert not in_cluster
            assert "a" not in rig.cordoned
        case ToMachine.JOIN:
            assert not was_in
            assert in_cluster
    new_events = rig.events()[len(events_were) :]
    match rule.parts:
        case ToParts.NOTHING:
            assert rig.core.state_of(JOB) is job_was
            assert new_events == []
        case ToParts.HOLD:
            assert rig.core.state_of(JOB) is JobState.RUNNING
            assert new_events == ["held"]
            (row,) = rig.journal.load().jobs
            assert row.held_until == rig.now + LEASE
        case ToParts.OFFER | ToParts.OFFER_AFTER_STOP:
            assert rig.core.state_of(JOB) is JobState.RUNNING
            assert new_events == ["adopted"]
        case ToParts.LOSE | ToParts.LOSE_BY_STOP:
            assert rig.core.state_of(JOB) is JobState.QUEUED
            assert new_events == ["requeued"]
            assert JOB not in rig.ctx.placements
            # Every part of the attempt is told to stop, the lost agent's included.
            told = {t for t, m in rig.sent(CancelPart)}
            assert told == {TOPICS.agent_commands("a"), TOPICS.agent_commands("b")}
            charged = rule.parts is ToParts.LOSE
            assert rig.core.charged_requeues(JOB) == int(charged)
            (requeue,) = [e for e in rig.journal.history(JOB) if e.kind == "requeued"]
            assert (requeue.cause, requeue.charged) == (
                "agent_lost" if charged else "operator_stop",
                charged,
            )


def test_a_changed_move_the_coupling_has_no_row_for_raises() -> None:
    # The agent table cannot make this move; a table that lost a row must not
    # quietly do nothing for it.
    move = Move(AgentState.LOST, AgentState.SUSPECT, AgentInput.MISSED)
    with pytest.raises(IllegalTransitionError):
        agent_rule(move)


def test_a_move_that_changed_nothing_does_nothing(rig: Rig) -> None:
    bring_agent(rig, AgentState.LOST)
    events = rig.events()
    move = rig.ctx.agents["a"].life.apply(AgentInput.WILL)  # a repeated will
    assert not move.changed
    agent_moved(rig.ctx, "a", move, rig.now, "will")
    assert rig.core.state_of(JOB) is JobState.QUEUED
    assert rig.events() == events


# -- the part table ----------------------------------------------------------------


def restored(journal: Journal) -> Rig:
    """A restarted scheduler on the journal of one that ran job ``j`` on ``a`` and
    ``b``: the job pending, its parts PENDING, its agents registered again."""
    before = Rig(journal)
    before.register("a")
    before.register("b")
    before.start_job()
    r = Rig(journal)
    reconcile.restore(
        r.ctx,
        journal.load().jobs,
        journal.last_event_seqs(),
        r.now,
        streams=journal.last_streams(),
    )
    r.register("a")
    r.register("b")
    assert JOB in r.core.pending
    return r


def rig_with_part(journal: Journal, state: PartState, sent_again: bool) -> Rig:
    """A rig whose part of ``j`` on ``a`` is in ``state``."""
    if state is PartState.PENDING:
        r = restored(journal)
    else:
        r = Rig(journal)
        r.register("a")
        r.register("b")
        r.start_job()
        if state is PartState.RUNNING:
            started = PartStarted(job_id=JOB, agent_id="a", pid=1, at=0.0, attempt=1)
            agents.on_event(r.ctx, "a", started, r.now)
    if sent_again:
        r.ctx.placements[JOB].resent.add("a")
    assert r.part("a") is state
    return r


@pytest.mark.parametrize(("event", "state", "sent_again"), sorted(PART_RULES))
def test_each_part_row_does_what_it_says(
    journal: Journal, event: PartEvent, state: PartState, sent_again: bool
) -> None:
    rule = PART_RULES[(event, state, sent_again)]
    r = rig_with_part(journal, state, sent_again)
    part_event(r.ctx, JOB, "a", event, r.now, detail="why")
    if JOB in r.ctx.placements:  # still placed (a requeued or ended job is not)
        assert r.part("a") is (state if rule.part is None else _TAKES[rule.part])
    match rule.job:
        case ToJob.GOES_ON:
            assert r.core.state_of(JOB) is JobState.RUNNING
            assert r.sent(StartPart) == r.sent(CancelPart) == []
        case ToJob.FINISHES:
            # One part of two done: the job runs until the other is.
            assert r.core.state_of(JOB) is JobState.RUNNING
            part_event(r.ctx, JOB, "b", PartEvent.DONE, r.now)
            assert r.core.state_of(JOB) is JobState.FINISHED
        case ToJob.FAILS:
            assert r.core.state_of(JOB) is JobState.FAILED
            assert [t for t, _ in r.sent(CancelPart)] == [TOPICS.agent_commands("b")]
        case ToJob.REQUEUED:
            assert r.core.state_of(JOB) is JobState.QUEUED
            assert r.core.charged_requeues(JOB) == 1
            assert TOPICS.agent_commands("b") in [t for t, _ in r.sent(CancelPart)]
        case ToJob.REQUEUED_UNCHARGED | ToJob.REQUEUED_BY_STOP:
            assert r.core.state_of(JOB) is JobState.QUEUED
            assert (r.core.requeues(JOB), r.core.charged_requeues(JOB)) == (1, 0)
            (requeue,) = [e for e in r.journal.history(JOB) if e.kind == "requeued"]
            cause = "never_ran" if rule.job is ToJob.REQUEUED_UNCHARGED else "operator_stop"
            assert (requeue.cause, requeue.charged) == (cause, False)
        case ToJob.START_SENT_AGAIN:
            assert r.core.state_of(JOB) is JobState.RUNNING
            assert [t for t, _ in r.sent(StartPart)] == [TOPICS.agent_commands("a")]
            assert "a" in r.ctx.placements[JOB].resent
        case ToJob.ADOPTED:
            assert r.core.state_of(JOB) is JobState.RUNNING
            assert r.events()[-1] == "adopted"
        case ToJob.AGENT_LEAVES:
            # Its agent was heard: the agent's own rule, for every job on it.
            assert r.agent_state("a") is AgentState.LOST
            assert "a" not in {m.id for m in r.core.machines}
            assert r.core.state_of(JOB) is JobState.QUEUED


def every_part_case() -> list[tuple[PartEvent, PartState, bool]]:
    return [(e, s, a) for e in PartEvent for s in PartState for a in (False, True)]


@pytest.mark.parametrize(("event", "state", "sent_again"), every_part_case())
def test_a_part_event_without_a_row_raises(
    event: PartEvent, state: PartState, sent_again: bool
) -> None:
    if (event, state, sent_again) in PART_RULES:
        assert (
            part_rule(event, state, sent_again=sent_again) is PART_RULES[event, state, sent_again]
        )
        return
    with pytest.raises(IllegalTransitionError):
        part_rule(event, state, sent_again=sent_again)


def test_an_illegal_part_event_raises_and_changes_nothing(journal: Journal) -> None:
    # A part never heard started cannot have vanished from a running job's listing.
    r = rig_with_part(journal, PartState.STARTING, sent_again=False)
    with pytest.raises(IllegalTransitionError):
        part_event(r.ctx, JOB, "a", PartEvent.VANISHED, r.now)
    assert r.part("a") is PartState.STARTING
    assert r.core.state_of(JOB) is JobState.RUNNING
    assert r.ctx.out.items == []


def test_no_final_part_takes_any_event() -> None:
    finals = (PartState.DONE, PartState.FAILED, PartState.CANCELLED, PartState.LOST)
    assert not [key for key in PART_RULES if key[1] in finals]
