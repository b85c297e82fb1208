"""What a node agent announces: its machine, its incarnation, its Last Will.

The agent registers with a retained ``AgentOnline`` on its state topic; the
broker publishes :func:`agent_will` (a retained ``AgentOffline(lost)``) if it
dies uncleanly. Each run of an agent has a fresh incarnation id.
"""

from __future__ import annotations

import uuid

from broker.bus import Will
from broker.codec import WireError, decode, encode
from broker.messages import AgentOffline, AgentOnline, MachineSpec
from broker.topics import Topics
from model.machine import Machine


def machine_spec(machine: Machine) -> MachineSpec:
    """The machine as the agent announces it; ValueError if the scheduler would refuse it."""
    spec = MachineSpec(id=machine.id, cpus=machine.cpus, speed=machine.speed, labels=machine.labels)
    # Checked by the codec the scheduler decodes with: an id or a label it would
    # refuse fails here, at start, not as a registration silently dropped there.
    try:
        decode(encode(AgentOnline(machine=spec, incarnation="-", running=())))
    except WireError as exc:
        raise ValueError(f"machine {machine.id!r} cannot be announced: {exc}") from exc
    return spec


def new_incarnation() -> str:
    """A fresh incarnation id: tells this run of an agent from its previous ones."""
    return uuid.uuid4().hex


def agent_will(topics: Topics, agent_id: str, incarnation: str) -> Will:
    """The Last Will the agent's bus must be created with (retained ``AgentOffline(lost)``)."""
    offline = AgentOffline(agent_id=agent_id, incarnation=incarnation, reason="lost")
    return Will(topic=topics.agent_state(agent_id), payload=encode(offline), retain=True)
