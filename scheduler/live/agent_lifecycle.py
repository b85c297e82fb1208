"""An agent's lifecycle as one transition table (the h11 habit); an illegal move raises.

States (after Slurm's node states: IDLE/ALLOCATED are ONLINE here, DRAINING
is DRAIN, DOWN is LOST, a drained and removed node is GONE)::

    ONLINE  --missed-->    SUSPECT   no heartbeat for suspect_factor periods
    SUSPECT --heartbeat--> ONLINE
    ONLINE | SUSPECT --drain--> DRAINING     an admin drained it, or it drains as it stops
    DRAINING --resume-->   ONLINE
    ONLINE | SUSPECT | DRAINING --silent | will | reincarnated--> LOST
    ONLINE | SUSPECT | DRAINING --will_hold--> HELD   its parts outlive it: held for adoption
    ONLINE | SUSPECT | DRAINING --stop_hold--> STOPPED   stopped by its operator, its parts
                                                        held for its next incarnation
    ONLINE | SUSPECT | DRAINING --stop-->  LOST   stopped, its parts ended (no adoption)
    HELD --reincarnated | heartbeat--> ONLINE   adopted (or the same process again)
    STOPPED --reincarnated--> ONLINE           its next incarnation adopts
    HELD | STOPPED --hold_ended--> LOST         nobody adopted them within the lease
    HELD | STOPPED --goodbye--> GONE
    ONLINE | SUSPECT | DRAINING --goodbye--> GONE
    LOST    --heartbeat-->  ONLINE   heard again (same incarnation): it rejoins
    LOST | GONE --reincarnated--> ONLINE   a new process registered

Only the agent's own ``Heartbeat`` proves it alive: a job process's progress
does not (it runs while its agent is frozen), nor does a retained
``AgentOnline`` (the broker replays it for as long as nobody replaces it).

The table is total over what the network can bring (every pair is a move or
ignored: any input may arrive in any state); a pair missing from both is a bug
and raises.

HELD (``scheduler.live.agent_hold``): the Last Will of an agent that declared its
parts outlive it (``AgentOnline.adopts``) within its lease. Its parts are kept
as they are, its machine cordoned, until a new incarnation lists them
(adopted), the same process is heard again, or the hold-off (the lease) ends;
then the lost-agent rule applies to what is left. HELD counts as available:
its CPUs are still held by its running parts, and it leaves the cluster only
when the hold ends.

STOPPED: the same hold, after the agent said its operator stopped it
(``AgentOffline(reason="stopping")``): a stop someone asked for, so whatever
it costs a job (a part its successor does not adopt, a hold that ends) is
not charged to the job's requeue budget. Its process said it is gone, so a
heartbeat in flight does not bring it back: only a new incarnation does. An
agent that does not adopt takes ``stop`` instead and is LOST at once, its
jobs requeued uncharged.

DRAINING: no new part is placed on the machine (it is cordoned) while its
running parts go on to their end. An admin's drain (``DrainMachine``) and an
agent that drains as it stops (``AgentOnline.draining``) both take ``drain``;
``resume`` lifts it once neither holds. It stays heard: silence still loses it.

Every registration of a new process (a new incarnation id) raises the
``generation`` number, so status and metrics can tell a flapping agent from
a steady one. The table is everything that decides a move; callers act on
the returned :class:`Move` (requeue the jobs of an agent that became LOST,
put a rejoined machine back in the core), by ``scheduler.live.coupling``'s rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from scheduler.core.job_lifecycle import IllegalTransitionError


class AgentState(StrEnum):
    ONLINE = "online"
    SUSPECT = "suspect"
    DRAINING = "draining"
    HELD = "held"
    STOPPED = "stopped"
    LOST = "lost"
    GONE = "gone"


class AgentInput(StrEnum):
    HEARTBEAT = "heartbeat"
    MISSED = "missed"
    SILENT = "silent"
    WILL = "will"
    GOODBYE = "goodbye"
    REINCARNATED = "reincarnated"
    #: The will of an agent whose parts outlive it (held for adoption).
    WILL_HOLD = "will_hold"
    #: The hold-off of a HELD or STOPPED agent passed.
    HOLD_ENDED = "hold_ended"
    #: No new part may go there (an admin's drain, or the agent drains as it stops).
    DRAIN = "drain"
    #: Neither drains it any longer.
    RESUME = "resume"
    #: Its operator stopped it, and it ended its parts (it does not adopt).
    STOP = "stop"
    #: Its operator stopped it, and its parts run on for its next incarnation.
    STOP_HOLD = "stop_hold"


_S, _I = AgentState, AgentInput
_TABLE: Final[dict[tuple[AgentState, AgentInput], AgentState]] = {
    (_S.ONLINE, _I.HEARTBEAT): _S.ONLINE,
    (_S.ONLINE, _I.MISSED): _S.SUSPECT,
    (_S.ONLINE, _I.SILENT): _S.LOST,
    (_S.ONLINE, _I.WILL): _S.LOST,
    (_S.ONLINE, _I.GOODBYE): _S.GONE,
    (_S.ONLINE, _I.REINCARNATED): _S.LOST,
    (_S.SUSPECT, _I.HEARTBEAT): _S.ONLINE,
    (_S.SUSPECT, _I.MISSED): _S.SUSPECT,
    (_S.SUSPECT, _I.SILENT): _S.LOST,
    (_S.SUSPECT, _I.WILL): _S.LOST,
    (_S.SUSPECT, _I.GOODBYE): _S.GONE,
    (_S.SUSPECT, _I.REINCARNATED): _S.LOST,
    (_S.ONLINE, _I.WILL_HOLD): _S.HELD,
    (_S.SUSPECT, _I.WILL_HOLD): _S.HELD,
    (_S.ONLINE, _I.DRAIN): _S.DRAINING,
    (_S.SUSPECT, _I.DRAIN): _S.DRAINING,
    (_S.ONLINE, _I.STOP): _S.LOST,
    (_S.SUSPECT, _I.STOP): _S.LOST,
    (_S.ONLINE, _I.STOP_HOLD): _S.STOPPED,
    (_S.SUSPECT, _I.STOP_HOLD): _S.STOPPED,
    (_S.DRAINING, _I.HEARTBEAT): _S.DRAINING,
    (_S.DRAINING, _I.RESUME): _S.ONLINE,
    (_S.DRAINING, _I.SILENT): _S.LOST,
    (_S.DRAINING, _I.WILL): _S.LOST,
    (_S.DRAINING, _I.GOODBYE): _S.GONE,
    (_S.DRAINING, _I.REINCARNATED): _S.LOST,
    (_S.DRAINING, _I.WILL_HOLD): _S.HELD,
    (_S.DRAINING, _I.STOP): _S.LOST,
    (_S.DRAINING, _I.STOP_HOLD): _S.STOPPED,
    (_S.HELD, _I.REINCARNATED): _S.ONLINE,
    (_S.HELD, _I.HEARTBEAT): _S.ONLINE,
    (_S.HELD, _I.HOLD_ENDED): _S.LOST,
    (_S.HELD, _I.GOODBYE): _S.GONE,
    (_S.STOPPED, _I.REINCARNATED): _S.ONLINE,
    (_S.STOPPED, _I.HOLD_ENDED): _S.LOST,
    (_S.STOPPED, _I.GOODBYE): _S.GONE,
    (_S.LOST, _I.HEARTBEAT): _S.ONLINE,
    (_S.LOST, _I.REINCARNATED): _S.ONLINE,
    (_S.GONE, _I.REINCARNATED): _S.ONLINE,
}
"""Every legal move; a pair not listed raises :class:`IllegalTransitionError`."""

_IGNORED: Final[frozenset[tuple[AgentState, AgentInput]]] = frozenset(
    {
        # A will or goodbye repeated, or arriving after the agent was already given up.
        (_S.LOST, _I.WILL),
        (_S.LOST, _I.GOODBYE),
        (_S.LOST, _I.SILENT),
        (_S.LOST, _I.MISSED),
        (_S.GONE, _I.WILL),
        (_S.GONE, _I.GOODBYE),
        (_S.GONE, _I.SILENT),
        (_S.GONE, _I.MISSED),
        # A held agent: its silence and repeated wills are what the hold is for.
        (_S.HELD, _I.WILL),
        (_S.HELD, _I.WILL_HOLD),
        (_S.HELD, _I.SILENT),
        (_S.HELD, _I.MISSED),
        (_S.LOST, _I.WILL_HOLD),
        (_S.GONE, _I.WILL_HOLD),
        # A hold that ended after the agent was heard again or given up.
        (_S.ONLINE, _I.HOLD_ENDED),
        (_S.SUSPECT, _I.HOLD_ENDED),
        (_S.LOST, _I.HOLD_ENDED),
        (_S.GONE, _I.HOLD_ENDED),
        # A heartbeat already in flight when the agent said goodbye.
        (_S.GONE, _I.HEARTBEAT),
        # Drained already, or nothing to resume; a drain of an agent that is not
        # heard waits in the caller's record of drains until it comes back.
        (_S.ONLINE, _I.RESUME),
        (_S.SUSPECT, _I.RESUME),
        (_S.DRAINING, _I.DRAIN),
        (_S.DRAINING, _I.MISSED),  # cordoned already: silence still loses it
        (_S.DRAINING, _I.HOLD_ENDED),
        *((s, i) for s in (_S.HELD, _S.STOPPED, _S.LOST, _S.GONE) for i in (_I.DRAIN, _I.RESUME)),
        # A stop said by a process that is already given up (a repeat, or in flight).
        *((s, i) for s in (_S.HELD, _S.LOST, _S.GONE) for i in (_I.STOP, _I.STOP_HOLD)),
        # A stopped agent said it is gone: its heartbeats in flight, its silence and a
        # will (an unclean end after its stop) change nothing; its next incarnation does.
        (_S.STOPPED, _I.HEARTBEAT),
        (_S.STOPPED, _I.MISSED),
        (_S.STOPPED, _I.SILENT),
        (_S.STOPPED, _I.WILL),
        (_S.STOPPED, _I.WILL_HOLD),
        (_S.STOPPED, _I.STOP),
        (_S.STOPPED, _I.STOP_HOLD),
    }
)
"""Inputs that change nothing in that state (repeats and messages in flight)."""


_AVAILABLE: Final = frozenset(
    {
        AgentState.ONLINE,
        AgentState.SUSPECT,
        AgentState.DRAINING,
        AgentState.HELD,
        AgentState.STOPPED,
    }
)
_HEARD: Final = frozenset({AgentState.ONLINE, AgentState.SUSPECT, AgentState.DRAINING})


def is_available(state: AgentState) -> bool:
    """Whether the machine counts in the cluster (its CPUs can be scheduled)."""
    return state in _AVAILABLE


def is_heard(state: AgentState) -> bool:
    """Whether its process is heard from: available and not HELD or STOPPED (whose
    process is gone while its parts run on)."""
    return state in _HEARD


def is_held(state: AgentState) -> bool:
    """Whether its parts are held for its next incarnation (HELD or STOPPED)."""
    return state in (AgentState.HELD, AgentState.STOPPED)


@dataclass(frozen=True, slots=True)
class Move:
    """What one input did: ``before`` and ``after`` (equal when nothing changed)."""

    before: AgentState
    after: AgentState
    input: AgentInput

    @property
    def changed(self) -> bool:
        return self.before is not self.after

    @property
    def left(self) -> bool:
        """The machine left the cluster with this move (its jobs must be dealt with)."""
        return is_available(self.before) and not is_available(self.after)

    @property
    def joined(self) -> bool:
        return not is_available(self.before) and is_available(self.after)


class AgentLifecycle:
    """One agent's state, incarnation and generation."""

    __slots__ = ("adopts", "generation", "held_until", "incarnation", "lease", "reason", "state")

    def __init__(self, incarnation: str, *, lease: float = 0.0, adopts: bool = False) -> None:
        self.state = AgentState.ONLINE
        self.incarnation = incarnation
        self.generation = 1
        #: Why the agent last left (the input that took it out), for status and logs.
        self.reason = ""
        #: What the incarnation declared: its lease (wall s) and whether its parts
        #: outlive it to be adopted (``AgentOnline.lease``, ``adopts``).
        self.lease = lease
        self.adopts = adopts
        #: While HELD or STOPPED: when the hold ends (the actor's clock, cluster seconds).
        self.held_until: float | None = None

    def apply(self, what: AgentInput) -> Move:
        """Move by the table; raises on a move it does not allow."""
        before = self.state
        after = _TABLE.get((before, what))
        if after is None:
            if (before, what) in _IGNORED:
                return Move(before, before, what)
            raise IllegalTransitionError(f"an agent cannot take {what} while {before}")
        self.state = after
        if not is_heard(after):
            self.reason = what.value
        if not is_held(after):
            self.held_until = None
        return Move(before, after, what)

    def renew(self, incarnation: str, *, lease: float = 0.0, adopts: bool = False) -> None:
        """Record a new process's incarnation (after the moves that registered it)."""
        self.incarnation = incarnation
        self.generation += 1
        self.reason = ""
        self.lease, self.adopts = lease, adopts

    @property
    def available(self) -> bool:
        return is_available(self.state)

    @property
    def heard(self) -> bool:
        return is_heard(self.state)

    @property
    def held(self) -> bool:
        return is_held(self.state)
