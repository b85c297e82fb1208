"""One incarnation per machine name: the state directory's record, and the check a new
agent makes before it speaks as the machine.

Theory of operation. Two agents for one machine name would each register,
heartbeat and run parts as that machine; on a broker that makes the login the
client id (``use_username_as_clientid``, every ``accordion up --auth``) the
second one's mere connection would also take the first one's over, and the
two would knock each other off for ever. So before an agent connects as its
machine (its client id, its Last Will, its retained registration), it looks
at the machine's topics through a *probe*: a connection of its own (the
probe's login and client id, ``<login>~probe``), with no will, publishing
nothing, so the agent it finds is not disturbed. :func:`check_name` says
whether the name is free:

- nothing retained on the machine's state topic, or an ``AgentOffline``
  (a will, a goodbye, a stop): free;
- an ``AgentOnline`` of the incarnation this state directory's record
  names (:class:`Record`): that was this agent's predecessor, and it is
  gone (this agent holds the directory's lock, which the predecessor and
  its fork server held for as long as they lived), although its Last Will
  may not have reached the broker yet (a host that died, not a process):
  free, and the new incarnation adopts its parts;
- an ``AgentOnline`` of any other incarnation: another agent may hold the
  name. A ``Heartbeat`` on the machine's events topic proves it alive:
  *taken*, and the new agent exits (status 2) with one line and without
  ever connecting as the machine. Its will arriving frees the name. If
  neither happens within the holder's lease (longer than a live agent's
  heartbeat interval by far) the holder is silent, dead or cut off, and
  its parts have stopped by their lease: free (the scheduler loses it by
  its silence limit anyway).

What the check cannot rule out: two agents started for one name at the same
instant both find it free. The record also notes how the last incarnation
stopped (:attr:`Record.stopped`), so a successor that finds one of its parts
dead reports it ``stopped`` (not charged) rather than ``fenced``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from broker.bus import Bus, Delivery
from broker.codec import WireError, decode
from broker.messages import AgentOffline, AgentOnline, Heartbeat
from broker.topics import Topics
from nodeagent.survival.state import StateDir, StateError, write_atomic

log = logging.getLogger(__name__)

RECORD = "incarnation.json"
#: How long the probe waits for the broker to hand it the retained state (wall s): the
#: broker sends it right after the subscription's acknowledgement, so this only bounds a
#: broker that sends nothing.
RETAINED_WAIT = 0.3
#: The least time a holder of the name is given to show a heartbeat (wall s).
LEAST_PATIENCE = 4.0


@dataclass(frozen=True, slots=True)
class Record:
    """The last incarnation that ran in a state directory, and how it stopped (None:
    it has not, that is was killed or still runs; else ``leave``, ``drain``, ``end``)."""

    incarnation: str
    pid: int
    started: float
    stopped: str | None = None

    def dump(self) -> bytes:
        data = {
            "incarnation": self.incarnation,
            "pid": self.pid,
            "started": self.started,
            "stopped": self.stopped,
        }
        return json.dumps(data).encode()


def read_record(state: StateDir) -> Record | None:
    """The directory's record; None if there is none or it cannot be read (counted as
    none: it only ever frees a name, never takes one)."""
    path = state.path / RECORD
    try:
        raw = json.loads(path.read_bytes()[:4096])
        stopped = raw.get("stopped")
        return Record(
            incarnation=str(raw["incarnation"]),
            pid=int(raw["pid"]),
            started=float(raw["started"]),
            stopped=None if stopped is None else str(stopped),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("state directory %s: unreadable incarnation record: %s", state.path, exc)
        return None


def write_record(state: StateDir, record: Record) -> None:
    try:
        write_atomic(state.path / RECORD, record.dump())
    except OSError as exc:
        raise StateError(f"cannot write {state.path / RECORD}: {exc}") from exc


def new_record(incarnation: str) -> Record:
    return Record(incarnation=incarnation, pid=os.getpid(), started=time.time())


class NameTakenError(Exception):
    """Another agent holds the machine's name: the one line to print, and exit 2."""


async def check_name(
    probe: Bus,
    topics: Topics,
    machine: str,
    predecessor: Record | None,
    *,
    patience: float,
) -> None:
    """Raise :class:`NameTakenError` if another live agent holds ``machine`` (the module
    docstring); ``patience``: how long to wait for a holder's heartbeat at least."""
    state_topic, events_topic = topics.agent_state(machine), topics.agent_events(machine)
    deliveries = probe.deliveries()
    await probe.subscribe(state_topic, qos=1)
    await probe.subscribe(events_topic, qos=1)
    holder = await _retained(deliveries, state_topic, RETAINED_WAIT)
    if not isinstance(holder, AgentOnline):
        return
    if predecessor is not None and holder.incarnation == predecessor.incarnation:
        log.info(
            "agent %s: the registration of incarnation %s is this state directory's "
            "predecessor's: taking over from it",
            machine,
            holder.incarnation,
        )
        return
    wait = max(holder.lease, patience)
    log.info(
        "agent %s: incarnation %s holds the name; waiting up to %.1f s for its heartbeat",
        machine,
        holder.incarnation,
        wait,
    )
    async with _bounded(wait):
        async for delivery in deliveries:
            message = _decoded(delivery)
            if delivery.topic == events_topic and isinstance(message, Heartbeat):
                raise NameTakenError(
                    f"machine {machine} is online already (incarnation {holder.incarnation} "
                    "is heard from): stop that agent first, or give this one another --name"
                )
            if delivery.topic == state_topic and isinstance(message, AgentOffline):
                return  # its will or goodbye: the name is free
    log.warning(
        "agent %s: incarnation %s holds the name but was not heard for %.1f s: taking over",
        machine,
        holder.incarnation,
        wait,
    )


async def _retained(
    deliveries: AsyncIterator[Delivery], topic: str, wait: float
) -> AgentOnline | AgentOffline | None:
    """The retained registration on ``topic``, if the broker has one."""
    async with _bounded(wait):
        async for delivery in deliveries:
            message = _decoded(delivery)
            if delivery.topic == topic and isinstance(message, AgentOnline | AgentOffline):
                return message
    return None


def _decoded(delivery: Delivery) -> object:
    if not delivery.payload:
        return None  # a retained message cleared
    try:
        return decode(delivery.payload)
    except WireError:
        return None  # not ours to judge: the scheduler counts what it refuses


@contextlib.asynccontextmanager
async def _bounded(seconds: float) -> AsyncIterator[None]:
    """Run the body for at most ``seconds``; a timeout just ends it."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            yield
