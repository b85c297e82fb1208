"""The wire's field types and the base every message builds on.

Constraints are part of the types (``msgspec.Meta``), so a payload that
decodes is well-formed: ids that can be topic levels, bounded strings,
seconds that are finite and not absurd. The message kinds are in
``broker.messages`` (jobs, agents, requests) and ``broker.insight`` (what the
scheduler plans: priorities by factor, the what-if snapshot); both build on
:class:`Message` here.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from broker.topics import PROTOCOL_VERSION

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")]
#: A job's id: an :data:`Id` that is not ``.``, ``..`` (path-like, so unsafe as a file or
#: topic name downstream) nor ``-`` (the protocol's "none" for request and reply ids).
JobId = Annotated[
    str,
    msgspec.Meta(min_length=1, max_length=128, pattern=r"^(?!(?:\.|\.\.|-)$)[A-Za-z0-9_.:@-]+$"),
]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
# Bounded above so inf and absurd values (a job of 30,000 years) fail on decode.
Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e12)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=1e12)]
#: A part's attempt: 1 for a job's first start, n + 1 after its n-th requeue. 0 in a
#: report or command means "not said" (any attempt), for commands sent before fencing.
Attempt = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
Seq = Annotated[int, msgspec.Meta(ge=0)]
Cpus = Annotated[int, msgspec.Meta(ge=1, le=1_048_576)]
Speed = Annotated[float, msgspec.Meta(gt=0, le=1e6)]
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]
Workload = Literal["sleep", "mpi", "command"]
#: A command's exit status (0 to 255) and the signal that ended it (1 to 64), as
#: ``waitpid`` tells them apart.
ExitStatus = Annotated[int, msgspec.Meta(ge=0, le=255)]
Signal = Annotated[int, msgspec.Meta(ge=1, le=64)]
Capabilities = Annotated[
    tuple[Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_-]{1,32}$")], ...],
    msgspec.Meta(max_length=16),
]
"""A machine's capabilities or a job's needs, in the core's words (``commands``,
``openmpi``, ``mpich``: ``model.machine.Capability``'s values)."""


class Message(
    msgspec.Struct, tag_field="kind", forbid_unknown_fields=True, frozen=True, kw_only=True
):
    """Base of every message; ``v`` is the protocol version of the sender.

    ``kw_only``: the kinds' fields may then go without defaults (required)
    although ``v`` has one.
    """

    v: int = PROTOCOL_VERSION


class PartSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    machine: Id
    cpus: Cpus
